//! The crates' files import each other without a loop: no file imports,
//! directly or around a cycle, a file that imports it (ARCHITECTURE.md,
//! "Invariants"). Checked for every library crate of the workspace. In this
//! crate the results model sits at the bottom, the renderers read only the
//! model, and the command line sits on top.
//!
//! An import is any path through `crate::`, `super::` or a child module
//! name used in a file (a `use`, or a path written inline), the file's
//! tests included; a `mod x;` declaration alone is not one.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module path (`report::json`; `crate` for lib.rs) → its file.
fn module_files(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("readable source folder") {
            let path = entry.expect("a folder entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if parts.last().is_some_and(|p| p == "mod") {
                parts.pop();
            }
            let name = match parts.as_slice() {
                [one] if one == "lib" => "crate".to_string(),
                // The binary is another crate: its paths are `ipc_conformance::`.
                [one] if one == "main" => continue,
                _ => parts.join("::"),
            };
            out.insert(name, path);
        }
    }
    out
}

/// The text without line and doc comments (a path in a comment is not an
/// import). Strings are kept: none of this crate's strings spells a module
/// path.
fn without_comments(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Byte ranges of inline `mod name {` blocks (tests, fixtures): inside
/// them `super::` names the file's own module.
fn inline_modules(text: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut from = 0;
    while let Some(i) = text[from..].find("mod ") {
        let start = from + i;
        from = start + 4;
        let preceded_ok = start == 0 || !bytes[start - 1].is_ascii_alphanumeric();
        let rest = &text[start + 4..];
        let name_len = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if !preceded_ok || name_len == 0 || !rest[name_len..].trim_start().starts_with('{') {
            continue;
        }
        let open = start + 4 + name_len + rest[name_len..].find('{').unwrap();
        let mut depth = 0usize;
        let mut end = text.len();
        for (j, b) in bytes.iter().enumerate().skip(open) {
            match b {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = j;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.push((open, end));
    }
    out
}

/// The longest prefix of `path` (under `base`) that names a module; the
/// module itself (`base`) when the path names an item of it.
fn resolve(base: &[String], path: &[&str], modules: &BTreeMap<String, PathBuf>) -> String {
    for n in (1..=path.len()).rev() {
        let mut p = base.to_vec();
        p.extend(path[..n].iter().map(|s| s.to_string()));
        let name = p.join("::");
        if modules.contains_key(&name) {
            return name;
        }
    }
    if base.is_empty() {
        "crate".to_string()
    } else {
        base.join("::")
    }
}

fn split_module(name: &str) -> Vec<String> {
    if name == "crate" {
        Vec::new()
    } else {
        name.split("::").map(str::to_string).collect()
    }
}

/// Every path segment list that follows `prefix` (`crate::a::b` → `[a, b]`;
/// `crate::{a, b::c}` → `[a]`, `[b, c]`), with the offset it starts at.
fn paths_after<'t>(text: &'t str, prefix: &str) -> Vec<(usize, Vec<&'t str>)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = text[from..].find(prefix) {
        let at = from + i;
        from = at + prefix.len();
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let rest = &text[at + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let inner = &group[..group.find('}').unwrap_or(group.len())];
            for item in inner.split(',') {
                let segs = take_path(item.trim());
                if !segs.is_empty() {
                    out.push((at, segs));
                }
            }
            continue;
        }
        let segs = take_path(rest);
        if !segs.is_empty() {
            out.push((at, segs));
        }
    }
    out
}

/// The segments of `rest` that are joined by `::` from its start.
fn take_path(rest: &str) -> Vec<&str> {
    let mut segs = Vec::new();
    let mut s = rest;
    loop {
        let end = s
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(s.len());
        if end == 0 {
            break;
        }
        segs.push(&s[..end]);
        match s[end..].strip_prefix("::") {
            Some(next) => s = next,
            None => break,
        }
    }
    segs
}

/// Module → modules it imports.
fn import_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let modules = module_files(src);
    let mut graph = BTreeMap::new();
    for (name, file) in &modules {
        let text = without_comments(&std::fs::read_to_string(file).expect("readable source"));
        let here = split_module(name);
        let parent: Vec<String> = here
            .iter()
            .take(here.len().saturating_sub(1))
            .cloned()
            .collect();
        let inline = inline_modules(&text);
        let mut deps = BTreeSet::new();
        for (_, segs) in paths_after(&text, "crate::") {
            deps.insert(resolve(&[], &segs, &modules));
        }
        for (at, segs) in paths_after(&text, "super::") {
            let inside_inline = inline.iter().any(|&(a, b)| a < at && at < b);
            let base = if inside_inline { &here } else { &parent };
            deps.insert(resolve(base, &segs, &modules));
        }
        // A child module used by its parent (`json::to_string`, `use shrink::x`).
        for child in modules.keys() {
            let child_parts = split_module(child);
            if child_parts.len() != here.len() + 1 || !child_parts.starts_with(&here) {
                continue;
            }
            let short = format!("{}::", child_parts.last().unwrap());
            if !paths_after(&text, &short).is_empty() {
                deps.insert(child.clone());
            }
        }
        deps.remove(name);
        graph.insert(name.clone(), deps);
    }
    graph
}

/// A cycle through `start`, if there is one.
fn cycle_from(graph: &BTreeMap<String, BTreeSet<String>>, start: &str) -> Option<Vec<String>> {
    fn walk(
        graph: &BTreeMap<String, BTreeSet<String>>,
        start: &str,
        at: &str,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
    ) -> bool {
        for next in graph.get(at).into_iter().flatten() {
            if next == start {
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if walk(graph, start, next, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![start.to_string()];
    let mut seen = BTreeSet::new();
    walk(graph, start, start, &mut path, &mut seen).then(|| {
        path.push(start.to_string());
        path
    })
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The source folder of workspace crate `name` (its folder next to this one).
fn crate_src(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(name)
        .join("src")
}

/// Every import cycle in the crate whose sources are under `src`, one per
/// line, each starting at a module on it.
fn cycles_in(src: &Path) -> Vec<String> {
    let graph = import_graph(src);
    graph
        .keys()
        .filter_map(|m| cycle_from(&graph, m))
        .map(|c| c.join(" -> "))
        .collect()
}

#[test]
fn no_file_imports_a_file_that_imports_it() {
    let cycles = cycles_in(&src());
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn no_file_of_the_harness_imports_a_file_that_imports_it() {
    // Shared types sit in leaf modules below the files that use them: the
    // call table's value types (`driver`) below the trait (`calls`), the
    // scenario model below its parser and executor, the role model, context
    // and set below the scheduler and the process runner, the CUDA worker
    // proxy below its pool and the machine.
    let cycles = cycles_in(&crate_src("harness"));
    assert!(
        cycles.is_empty(),
        "import cycles in the harness:\n{}",
        cycles.join("\n")
    );
}

#[test]
fn no_file_of_the_simulator_imports_a_file_that_imports_it() {
    // The state `World` holds (`event_state`, `vmm_state`, the handle codec)
    // sits below it; the rule modules (`events`, `ipc`, `vmm`) sit above.
    let cycles = cycles_in(&crate_src("mock-driver"));
    assert!(
        cycles.is_empty(),
        "import cycles in the simulator:\n{}",
        cycles.join("\n")
    );
}

#[test]
fn no_file_of_the_tracer_imports_a_file_that_imports_it() {
    let cycles = cycles_in(&crate_src("tracer"));
    assert!(
        cycles.is_empty(),
        "import cycles in the tracer:\n{}",
        cycles.join("\n")
    );
}

#[test]
fn the_model_and_the_renderers_import_nothing_above_them() {
    let graph = import_graph(&src());
    let allowed: &[(&str, &[&str])] = &[
        ("model", &["catalogue"]),
        ("report::text", &["model"]),
        ("report::json", &["model", "report::error"]),
        ("report::markdown", &["model", "sysinfo"]),
        (
            "report::junit",
            &["catalogue", "model", "report::error", "report::text"],
        ),
    ];
    for (module, may) in allowed {
        let deps = &graph[*module];
        let extra: Vec<&String> = deps.iter().filter(|d| !may.contains(&d.as_str())).collect();
        assert!(extra.is_empty(), "{module} imports {extra:?}");
    }
}

#[test]
fn the_checker_sees_a_cycle_when_there_is_one() {
    // Two files that import each other, one through a child-module path and
    // one through `super::`, and a third that imports only one of them.
    let dir = std::env::temp_dir().join(format!("module-graph-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("report")).unwrap();
    std::fs::write(dir.join("lib.rs"), "pub mod report;\npub mod other;\n").unwrap();
    std::fs::write(
        dir.join("report/mod.rs"),
        "pub mod json;\npub fn write() { json::to_string(); }\npub struct Error;\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("report/json.rs"),
        "use super::Error;\npub fn to_string() {}\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
    )
    .unwrap();
    std::fs::write(dir.join("other.rs"), "use crate::report::json;\n").unwrap();
    let graph = import_graph(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        graph["report"],
        BTreeSet::from(["report::json".to_string()])
    );
    assert_eq!(
        graph["report::json"],
        BTreeSet::from(["report".to_string()])
    );
    assert_eq!(graph["other"], BTreeSet::from(["report::json".to_string()]));
    assert!(cycle_from(&graph, "report").is_some());
    assert!(cycle_from(&graph, "other").is_none());
}
