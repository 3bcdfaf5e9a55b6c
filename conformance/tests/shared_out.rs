//! Report folders shared with other runs and other users: planted symlinks
//! are never written through, concurrent runs into one `--out` all succeed,
//! a reader never sees a partial results.json, the umask decides the
//! reports' mode, and a folder every user can write is refused.

mod common;

use common::{code, scratch, stderr, BIN};
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

fn run_into(out: &Path, extra: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(["run", "-q", "--filter", "mem.open", "--out"])
        .arg(out)
        .args(extra)
        .env_remove("IPC_CONFORMANCE_CLAUSES")
        .output()
        .expect("the binary runs")
}

#[test]
fn planted_symlinks_in_the_out_folder_are_never_written_through() {
    let dir = scratch("planted");
    let victim = dir.join("victim.txt");
    std::fs::write(&victim, "PRECIOUS\n").unwrap();
    let out = dir.join("shared-out");
    std::fs::create_dir(&out).unwrap();
    // Every name an older version or a guess could use, and the reports
    // themselves.
    for name in [
        "results.json.tmp",
        "junit.xml.tmp",
        "summary.md.tmp",
        ".results.json.tmp",
        "summary.md",
    ] {
        symlink(&victim, out.join(name)).unwrap();
    }
    for _ in 0..3 {
        let o = run_into(&out, &[]);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "PRECIOUS\n");
    }
    for name in ["results.json", "junit.xml", "summary.md"] {
        let meta = std::fs::symlink_metadata(out.join(name)).unwrap();
        assert!(meta.is_file(), "{name} is a regular file of this run");
    }
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert!(!v["results"].as_array().unwrap().is_empty());
}

#[test]
fn a_planted_symlink_at_the_lock_is_a_clear_error() {
    let dir = scratch("planted-lock");
    let victim = dir.join("victim.txt");
    std::fs::write(&victim, "PRECIOUS\n").unwrap();
    let out = dir.join("out");
    std::fs::create_dir(&out).unwrap();
    symlink(&victim, out.join(".ipc-conformance.lock")).unwrap();
    let o = run_into(&out, &[]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains(".ipc-conformance.lock"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "PRECIOUS\n");
}

#[test]
fn concurrent_runs_into_one_folder_all_succeed_and_readers_see_whole_files() {
    let out = scratch("concurrent");
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicUsize::new(0));
    let reader = {
        let (stop, reads, path) = (stop.clone(), reads.clone(), out.join("results.json"));
        std::thread::spawn(move || {
            let mut bad = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                if let Ok(text) = std::fs::read_to_string(&path) {
                    reads.fetch_add(1, Ordering::Relaxed);
                    if serde_json::from_str::<serde_json::Value>(&text).is_err() {
                        bad.push(text.len());
                    }
                }
            }
            bad
        })
    };
    for round in 0..8 {
        let spawn = |seed: &str| {
            Command::new(BIN)
                .args(["run", "-q", "--filter", "mem.open", "--seed", seed, "--out"])
                .arg(&out)
                .env_remove("IPC_CONFORMANCE_CLAUSES")
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let children = [spawn("1"), spawn("2"), spawn("3")];
        for child in children {
            let o = child.wait_with_output().unwrap();
            assert_eq!(
                o.status.code(),
                Some(0),
                "round {round}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    let bad = reader.join().unwrap();
    assert!(reads.load(Ordering::Relaxed) > 0);
    assert!(bad.is_empty(), "partial results.json read, sizes {bad:?}");
    let left: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with("tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// `run` into `out` under `umask`, through a shell (the umask is the
/// process's own, so a test thread must not change it).
fn run_with_umask(out: &Path, umask: &str) -> std::process::Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!(
            "umask {umask} && exec \"$0\" run -q --filter mem.open --out \"$1\""
        ))
        .arg(BIN)
        .arg(out)
        .env_remove("IPC_CONFORMANCE_CLAUSES")
        .output()
        .expect("sh runs")
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn the_umask_decides_the_mode_of_the_reports() {
    let out = scratch("umask");
    // A shared CI folder: the group reads the reports of every member.
    std::fs::write(out.join("results.json"), "{}").unwrap();
    std::fs::set_permissions(
        out.join("results.json"),
        std::fs::Permissions::from_mode(0o664),
    )
    .unwrap();
    let o = run_with_umask(&out, "002");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    for name in ["results.json", "junit.xml", "summary.md"] {
        assert_eq!(mode(&out.join(name)), 0o664, "{name}");
    }
    let o = run_with_umask(&out, "077");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    for name in ["results.json", "junit.xml", "summary.md"] {
        assert_eq!(mode(&out.join(name)), 0o600, "{name}");
    }
}

#[test]
fn an_out_folder_every_user_can_write_is_refused_before_the_run() {
    let out = scratch("world-writable");
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o777)).unwrap();
    let o = run_into(&out, &[]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("every user can write the folder (mode 777)"),
        "{}",
        stderr(&o)
    );
    assert!(!out.join("results.json").exists());
    // With the sticky bit others still write the folder: refused too.
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o1777)).unwrap();
    assert_eq!(code(&run_into(&out, &[])), 2);
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(code(&run_into(&out, &[])), 0);
    // One file given as `--out FILE` may go into a folder like /tmp:
    // nothing planted at its name is followed.
    let shared = scratch("world-writable-file");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let summary = shared.join("summary.md");
    let o = Command::new(BIN)
        .arg("summary")
        .arg(out.join("results.json"))
        .arg("--out")
        .arg(&summary)
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(summary.is_file());
}
