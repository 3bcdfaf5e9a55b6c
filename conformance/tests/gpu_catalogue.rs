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
