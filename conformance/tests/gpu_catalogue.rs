//! The whole catalogue on the real CUDA backend, as a GPU CI job runs it.
//! Ignored (skipped, with the reason) on machines without a GPU; on a GPU
//! host: `cargo nextest run --profile gpu --run-ignored all`. Run on a host
//! without a GPU it fails with NotSupported, never passes silently.

use std::path::PathBuf;
use std::process::Command;

/// The CLI binary: nextest remaps it at run time (archives), cargo at build time.
fn cli() -> PathBuf {
    std::env::var_os("NEXTEST_BIN_EXE_ipc-conformance")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_ipc-conformance")))
}

fn gpu_present() -> bool {
    ["/dev/nvidiactl", "/dev/nvidia0"]
        .iter()
        .any(|p| std::path::Path::new(p).exists())
}

#[test]
#[ignore = "needs an NVIDIA GPU: cargo nextest run --profile gpu --run-ignored all"]
#[serial_test::serial(gpu)]
fn gpu_catalogue_passes_on_the_real_backend_in_both_dialects() {
    assert!(
        gpu_present(),
        "NotSupported: no NVIDIA device node on this host"
    );
    let out = std::env::temp_dir().join(format!("ipc-gpu-catalogue-{}", std::process::id()));
    let run = Command::new(cli())
        .args([
            "run",
            "--backend",
            "cuda",
            "--dialect",
            "all",
            "--quiet",
            "--out",
        ])
        .arg(&out)
        .output()
        .expect("ipc-conformance runs");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "catalogue on the GPU: {}\n{stdout}\n{}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(out.join("results.json").exists());
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
#[ignore = "needs an NVIDIA GPU: cargo nextest run --profile gpu --run-ignored all"]
#[serial_test::serial(gpu)]
fn gpu_differential_shows_no_difference() {
    assert!(
        gpu_present(),
        "NotSupported: no NVIDIA device node on this host"
    );
    let out = std::env::temp_dir().join(format!("ipc-gpu-differential-{}", std::process::id()));
    let run = Command::new(cli())
        .args([
            "differential",
            "--backend",
            "cuda",
            "--dialect",
            "all",
            "--out",
        ])
        .arg(&out)
        .output()
        .expect("ipc-conformance runs");
    assert!(
        run.status.success(),
        "differential on the GPU: {}\n{}",
        run.status,
        String::from_utf8_lossy(&run.stdout)
    );
    let _ = std::fs::remove_dir_all(&out);
}

/// The differential findings committed from the H100 explore run, replayed
/// on the real driver: each must still answer as recorded (a driver upgrade
/// that changes one shows up here; the simulator side is checked in CI by
/// tests/explore.rs).
#[test]
#[ignore = "needs an NVIDIA GPU: cargo nextest run --profile gpu --run-ignored all"]
#[serial_test::serial(gpu)]
fn gpu_committed_explore_findings_replay_as_recorded() {
    assert!(
        gpu_present(),
        "NotSupported: no NVIDIA device node on this host"
    );
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../reports/h100-80gb-hbm3_driver-580.159.04/explore/findings");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).expect("the findings directory") {
        let file = entry.expect("an entry").path();
        if file.extension().is_none_or(|x| x != "ipc") {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("readable");
        let mut head = text.lines().skip(1);
        let message = head.next().unwrap_or_default();
        let case = head.next().unwrap_or_default();
        let line: usize = message
            .trim_start_matches("# line ")
            .split(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .expect("a line number");
        let real = message.rsplit("real driver ").next().unwrap_or_default();
        let seed = case
            .split("(seed ")
            .nth(1)
            .and_then(|s| s.split(')').next())
            .expect("a seed");
        let dialect = if case.contains("dialect driver") {
            "driver"
        } else {
            "runtime"
        };
        let run = Command::new(cli())
            .args([
                "scenario",
                "--backend",
                "cuda",
                "--seed",
                seed,
                "--dialect",
                dialect,
            ])
            .arg(&file)
            .output()
            .expect("ipc-conformance runs");
        let out = String::from_utf8_lossy(&run.stdout);
        // The files carry the body's line numbers; the header is 5 lines.
        let tag = format!("  L{} ", line + 5);
        let step = out
            .lines()
            .find(|l| l.starts_with(&tag))
            .unwrap_or_else(|| panic!("{}: no step {tag}\n{out}", file.display()));
        let got = step
            .split(" -> ")
            .nth(1)
            .and_then(|s| s.split("   ").next())
            .unwrap_or_default();
        assert_eq!(
            got,
            real,
            "{}: the H100 answer changed\n{out}",
            file.display()
        );
        checked += 1;
    }
    assert!(checked >= 20, "{checked} findings replayed");
}
