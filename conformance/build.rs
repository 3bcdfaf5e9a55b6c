//! Embeds the clause catalogue (`clauses/**/*.ipc`) in the crate, so an
//! installed `ipc-conformance` carries the catalogue it was built with
//! (`catalogue::Catalogue::embedded`), and builds the tracer library
//! (`tracer/`, the `ipc-tracer` cdylib) for the binary to carry, so that
//! `cargo install --path conformance` gives a `trace` that works alone
//! (`trace_cmd`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Build `ipc-tracer` with the cargo that runs this script, offline, in a
/// target folder of its own under OUT_DIR (the outer build holds the lock
/// of its own target folder, so sharing it would wait for ever), with the
/// workspace's lock file and the outer build's profile; copy the library
/// to OUT_DIR/libipc_tracer.so. The tracer depends on libc only, which the
/// outer build has already fetched.
fn build_tracer(manifest: &Path, out: &Path) {
    let root = manifest
        .parent()
        .expect("conformance/ sits in the workspace");
    for path in [
        "tracer/src",
        "tracer/symbols",
        "tracer/Cargo.toml",
        "Cargo.lock",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(path).display());
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let release = std::env::var("PROFILE").is_ok_and(|p| p == "release");
    let target = std::env::var("TARGET").expect("set by cargo");
    let host = std::env::var("HOST").expect("set by cargo");
    let target_dir = out.join("tracer-target");
    let mut cmd = Command::new(cargo);
    cmd.arg("build")
        .arg("--offline")
        .arg("--manifest-path")
        .arg(root.join("tracer/Cargo.toml"))
        .arg("--lib")
        .arg("--target-dir")
        .arg(&target_dir)
        // A wrapper the outer command set for itself (clippy's driver)
        // would lint the tracer again, under the outer command's flags.
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET_DIR");
    if release {
        cmd.arg("--release");
    }
    if target != host {
        cmd.arg("--target").arg(&target);
    }
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("cannot run cargo to build the tracer: {e}"));
    assert!(status.success(), "building the tracer (ipc-tracer) failed");
    let mut built = target_dir;
    if target != host {
        built.push(&target);
    }
    built.push(if release { "release" } else { "debug" });
    built.push("libipc_tracer.so");
    std::fs::copy(&built, out.join("libipc_tracer.so"))
        .unwrap_or_else(|e| panic!("cannot copy {}: {e}", built.display()));
}

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

/// The commit the binary is built from, for reports' `git_revision`
/// (`sysinfo::git_revision`): reading it when a report is written would
/// give the revision of whatever checkout the binary runs in, which on a
/// GPU host may be a stale copy. Re-run when HEAD or its branch moves.
/// Nothing is set outside a git checkout.
fn embed_git_revision(manifest: &Path) {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .arg("-C")
            .arg(manifest)
            .args(args)
            .output()
            .ok()?;
        let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
        (out.status.success() && !text.is_empty()).then_some(text)
    };
    let Some(rev) = git(&["rev-parse", "HEAD"]) else {
        return;
    };
    let mut watched = vec!["HEAD".to_string(), "packed-refs".to_string()];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(branch);
    }
    for path in watched {
        if let Some(p) = git(&["rev-parse", "--git-path", &path]) {
            let p = PathBuf::from(p);
            let p = if p.is_absolute() { p } else { manifest.join(p) };
            if p.exists() {
                println!("cargo:rerun-if-changed={}", p.display());
            }
        }
    }
    println!("cargo:rustc-env=IPC_BUILD_GIT_REVISION={rev}");
}

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    embed_git_revision(&manifest);
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
    build_tracer(&manifest, &out);
}
