//! A driver call is defined once (ARCHITECTURE.md, "Adding a driver
//! call"): its method name, scenario keyword, API names and documented
//! returns come from the table in `harness/src/calls.rs`, so the name
//! appears in few source files. This counts, for every call of the table,
//! the library source files (tests, benches and examples left out) in which
//! its method name occurs as a whole word, and fails listing every call
//! that appears in more than [`MOST_FILES`].

use ipc_harness::CallKind;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The most library files a call's name may appear in: the table, the
/// simulator, the real backend and two more.
const MOST_FILES: usize = 5;

/// Method names that are also ordinary words of other code (`io::Read::read`,
/// `fmt::Write`, `libc::free`, a variable `alloc`, the topology's
/// `device_count`, the libc function `pidfd_getfd` the tracer wraps): a
/// whole-word count of them measures that code, not the call, so they are
/// left out of the limit (each must still be a call of the table).
const SHARED_WORDS: &[&str] = &[
    "alloc",
    "device_count",
    "free",
    "pidfd_getfd",
    "read",
    "write",
];

/// The source folders searched, relative to the workspace root.
const SOURCE_FOLDERS: &[&str] = &[
    "harness/src",
    "mock-driver/src",
    "conformance/src",
    "tracer/src",
];

/// A test file by its name (`tests.rs`, `*_tests.rs`) or its folder.
fn is_test_file(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name == "tests.rs"
        || name.ends_with("_tests.rs")
        || path.components().any(|c| {
            matches!(
                c.as_os_str().to_str(),
                Some("tests" | "benches" | "examples")
            )
        })
}

fn library_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack: Vec<PathBuf> = SOURCE_FOLDERS.iter().map(|f| root.join(f)).collect();
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("readable source folder") {
            let path = entry.expect("a folder entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs")
                && !is_test_file(path.strip_prefix(root).unwrap())
            {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The text without line and doc comments (a call named in prose is not a
/// call spelled out) and without a trailing inline test module (from a
/// `#[cfg(test)]` line followed by `mod`).
fn without_comments(text: &str) -> String {
    let end = text
        .match_indices("#[cfg(test)]\nmod ")
        .map(|(i, _)| i)
        .next()
        .unwrap_or(text.len());
    text[..end]
        .lines()
        .map(|l| match l.find("//") {
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether `word` occurs in `text` with no identifier character on either side.
fn has_word(text: &str, word: &str) -> bool {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(word).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + word.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
}

/// Each call's method name → the library files it occurs in.
fn spread() -> BTreeMap<&'static str, Vec<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let files: Vec<(String, String)> = library_files(root)
        .into_iter()
        .map(|p| {
            let text =
                without_comments(&std::fs::read_to_string(&p).expect("readable source file"));
            (p.strip_prefix(root).unwrap().display().to_string(), text)
        })
        .collect();
    CallKind::ALL
        .iter()
        .map(|kind| {
            let name = kind.name();
            let found = files
                .iter()
                .filter(|(_, text)| has_word(text, name))
                .map(|(path, _)| path.clone())
                .collect();
            (name, found)
        })
        .collect()
}

#[test]
fn the_word_finder_needs_whole_words() {
    assert!(has_word("d.alloc(kind, 4)", "alloc"));
    assert!(has_word("\"alloc\" =>", "alloc"));
    assert!(!has_word("d.pool_alloc(p, 4)", "alloc"));
    assert!(!has_word("allocation", "alloc"));
    assert_eq!(without_comments("a // b\n\"//\" c"), "a \n\"//\" c");
    assert_eq!(without_comments("a\n#[cfg(test)]\nmod tests {}"), "a");
}

#[test]
fn every_driver_call_appears_in_at_most_five_library_files() {
    let spread = spread();
    assert_eq!(spread.len(), CallKind::ALL.len());
    for word in SHARED_WORDS {
        assert!(
            CallKind::from_name(word).is_some(),
            "{word} is no call of the table"
        );
    }
    let over: Vec<String> = spread
        .iter()
        .filter(|(name, files)| files.len() > MOST_FILES && !SHARED_WORDS.contains(name))
        .map(|(name, files)| format!("{name} ({}): {}", files.len(), files.join(", ")))
        .collect();
    assert!(
        over.is_empty(),
        "{} driver calls appear in more than {MOST_FILES} library files:\n{}",
        over.len(),
        over.join("\n")
    );
}
