//! Helpers shared by the CLI-level integration tests.
#![allow(dead_code)] // each test crate uses its own subset

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

pub const BIN: &str = env!("CARGO_BIN_EXE_ipc-conformance");

/// A fresh directory under cargo's per-target test scratch space.
pub fn scratch(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Run the CLI with the default clause directory and a fixed git revision.
pub fn cli(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("IPC_CONFORMANCE_CLAUSES")
        .env("IPC_GIT_REVISION", "test-revision")
        .output()
        .expect("the binary runs")
}

pub fn code(o: &Output) -> i32 {
    o.status.code().expect("exited, not killed")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Clauses in the committed catalogue (`.ipc` files under `clauses/`), so
/// tests follow the catalogue as it grows.
pub fn catalogue_len() -> usize {
    fn count(dir: &std::path::Path) -> usize {
        std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("directory entry").path())
            .map(|p| {
                if p.is_dir() {
                    count(&p)
                } else {
                    usize::from(p.extension().is_some_and(|x| x == "ipc"))
                }
            })
            .sum()
    }
    count(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("clauses"))
}
