//! `explore` stopped by SIGINT or SIGTERM finishes the case in progress,
//! writes its summary of the cases that ran, and exits 130, as `run` does.

mod common;

use common::{scratch, BIN};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn interrupted_explore(signal: Signal) {
    let out = scratch(&format!("explore-{signal}"));
    let mut child = Command::new(BIN)
        .args(["explore", "-q", "--cases", "100000000", "--out"])
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    kill(Pid::from_raw(child.id() as i32), signal).unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("explore did not stop after {signal}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let o = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        status.code(),
        Some(130),
        "{stdout}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        stdout.contains(&format!("interrupted by {signal}")),
        "{stdout}"
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["interrupted"], true, "{summary}");
    let cases = summary["cases"].as_u64().unwrap();
    assert!(cases > 0 && cases < 100_000_000, "{cases}");
    let md = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(md.contains("Interrupted"), "{md}");
}

#[test]
fn sigint_stops_explore_after_the_case_and_writes_the_summary() {
    interrupted_explore(Signal::SIGINT);
}

#[test]
fn sigterm_stops_explore_after_the_case_and_writes_the_summary() {
    interrupted_explore(Signal::SIGTERM);
}
