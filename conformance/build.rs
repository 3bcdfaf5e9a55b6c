//! Embeds the clause catalogue (`clauses/**/*.ipc`) in the crate, so an
//! installed `ipc-conformance` carries the catalogue it was built with
//! (`catalogue::Catalogue::embedded`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read the clause folder {}: {e}", dir.display()));
    for entry in entries {
        let path = entry
            .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
            .path();
        if path.is_dir() {
            collect(&path, out);
        } else if path.extension().is_some_and(|e| e == "ipc") {
            out.push(path);
        }
    }
}

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let clauses = manifest.join("clauses");
    // A folder here makes cargo re-run this script when anything below changes.
    println!("cargo:rerun-if-changed=clauses");
    let mut files = Vec::new();
    collect(&clauses, &mut files);
    // The order Catalogue::load reads a folder in.
    files.sort();
    let mut code = String::from("&[\n");
    for path in &files {
        let rel = path
            .strip_prefix(&clauses)
            .expect("below the clause folder");
        let rel = rel
            .components()
            .map(|c| c.as_os_str().to_str().expect("clause paths are UTF-8"))
            .collect::<Vec<_>>()
            .join("/");
        let abs = path.to_str().expect("clause paths are UTF-8");
        let _ = writeln!(code, "    ({rel:?}, include_str!({abs:?})),");
    }
    code.push(']');
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("set by cargo"));
    std::fs::write(out.join("embedded_clauses.rs"), code).expect("OUT_DIR is writable");
}
