//! Hostile sizes from input give a clear error naming the limit, quickly,
//! never an abort, a hang or gigabytes of memory.

mod common;

use common::{cli, code, scratch, stderr, stdout};
use std::io::Write;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A results.json of the simulator on a few clauses, as JSON to edit.
fn small_results(tag: &str) -> serde_json::Value {
    let out = scratch(tag);
    let o = cli(&[
        "run",
        "-q",
        "--filter",
        "mem.open.reopen-same-context",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap()
}

fn write_json(path: &Path, v: &serde_json::Value) {
    std::fs::write(path, serde_json::to_string(v).unwrap()).unwrap();
}

#[test]
fn merge_refuses_a_shard_count_above_the_limit() {
    let dir = scratch("huge-shard");
    let mut v = small_results("huge-shard-run");
    v["run"]["shard"] = "1/4294967295".into();
    let input = dir.join("results.json");
    write_json(&input, &v);
    let start = Instant::now();
    let o = cli(&[
        "merge",
        input.to_str().unwrap(),
        "--out",
        dir.join("m").to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("limit of 1024 shards"),
        "{}",
        stderr(&o)
    );
    assert!(start.elapsed() < Duration::from_secs(10));
    // --force does not get past the bound either.
    let o = cli(&[
        "merge",
        "--force",
        input.to_str().unwrap(),
        "--out",
        dir.join("m").to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
}

#[test]
fn merge_refuses_a_clause_twice_in_one_input() {
    let dir = scratch("dup-in-one");
    let mut v = small_results("dup-in-one-run");
    let first = v["results"][0].clone();
    v["results"].as_array_mut().unwrap().push(first);
    let input = dir.join("results.json");
    write_json(&input, &v);
    let o = cli(&[
        "merge",
        input.to_str().unwrap(),
        "--out",
        dir.join("m").to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("twice"), "{}", stderr(&o));
}

#[test]
fn device_counts_above_the_limit_are_refused() {
    let dir = scratch("huge-devices");
    let file = dir.join("many.ipc");
    std::fs::write(
        &file,
        "devices 4294967295\ntopology peers=all\nprocess a device=0\na: sync\n",
    )
    .unwrap();
    let o = cli(&["scenario", file.to_str().unwrap()]);
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    assert!(
        stderr(&o).contains("limit of 256 devices"),
        "{}",
        stderr(&o)
    );

    let out = dir.join("out");
    let o = cli(&[
        "run",
        "-q",
        "--sim-devices",
        "4294967295",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("limit of 256 devices"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn too_many_bound_reads_and_processes_are_parse_errors() {
    let dir = scratch("reads");
    let mut text = String::from("devices 1\nprocess a device=0\na: x = malloc 256MiB\n");
    for i in 0..16 {
        text.push_str(&format!("a: r{i} = read x 0 256MiB\n"));
    }
    let file = dir.join("reads.ipc");
    std::fs::write(&file, &text).unwrap();
    let o = cli(&["scenario", file.to_str().unwrap()]);
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains("limit of 1GiB"), "{}", stderr(&o));
    assert!(stderr(&o).contains("reads.ipc:8:"), "{}", stderr(&o));

    let mut text = String::from("devices 1\n");
    for i in 0..80_000 {
        text.push_str(&format!("process p{i} device=0\n"));
    }
    let file = dir.join("processes.ipc");
    std::fs::write(&file, &text).unwrap();
    let start = Instant::now();
    let o = cli(&["scenario", file.to_str().unwrap()]);
    assert_eq!(code(&o), 1);
    assert!(
        stderr(&o).contains("more than 256 processes"),
        "{}",
        stderr(&o)
    );
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn explore_refuses_max_steps_above_the_limit() {
    let out = scratch("max-steps");
    let o = cli(&[
        "explore",
        "--cases",
        "1",
        "--max-steps",
        "100000",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("limit of 1024 steps"), "{}", stderr(&o));
    let o = cli(&[
        "explore",
        "--cases",
        "1",
        "--jobs",
        "100000",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("limit of 256 threads"),
        "{}",
        stderr(&o)
    );
}

#[cfg(feature = "cuda")]
#[test]
fn a_worker_pool_above_the_limit_is_refused_before_any_worker_starts() {
    let out = scratch("pool");
    let o = Command::new(common::BIN)
        .args(["run", "-q", "--backend", "cuda", "--out"])
        .arg(&out)
        .env("IPC_CONFORMANCE_WORKER_POOL", "100000")
        .output()
        .unwrap();
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("limit of 64 idle workers"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_fifo_or_dev_zero_named_ipc_in_the_clause_folder_is_a_broken_clause() {
    let dir = scratch("fifo-clauses");
    let clauses = dir.join("clauses");
    std::fs::create_dir(&clauses).unwrap();
    std::fs::write(
        clauses.join("ok.ipc"),
        "# id: t.ok.sync\n# title: t\n# kind: measured\n\ndevices 1\nprocess a device=0\na: sync\n",
    )
    .unwrap();
    symlink("/dev/zero", clauses.join("zero.ipc")).unwrap();
    nix::unistd::mkfifo(&clauses.join("fifo.ipc"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let mut child = Command::new(common::BIN)
        .args(["run", "-q", "--clauses"])
        .arg(&clauses)
        .arg("--out")
        .arg(dir.join("out"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("run hangs on a FIFO or /dev/zero clause");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let o = child.wait_with_output().unwrap();
    assert_eq!(
        status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let results = std::fs::read_to_string(dir.join("out/results.json")).unwrap();
    assert!(results.contains("not a regular file"), "{results}");
}

#[test]
fn list_prints_a_clause_id_longer_than_a_format_width() {
    let dir = scratch("long-id");
    let id = format!("t.long.{}", "x".repeat(70_000));
    let mut f = std::fs::File::create(dir.join("long.ipc")).unwrap();
    writeln!(
        f,
        "# id: {id}\n# title: long\n# kind: measured\n\ndevices 1\nprocess a device=0\na: sync"
    )
    .unwrap();
    let o = cli(&["list", "--clauses", dir.to_str().unwrap()]);
    assert!(
        !stderr(&o).contains("internal error"),
        "{}",
        &stderr(&o)[..stderr(&o).len().min(500)]
    );
    assert!(stdout(&o).contains(&id));
    assert!(stdout(&o).contains("1 clause"));
}

#[test]
fn a_large_expectations_file_is_read_in_linear_time() {
    // Entries far apart (long comments between them): finding each key's
    // line by counting from the start of the file cost time in the square
    // of the file's size.
    let padding = "# a comment line that only takes room in the file\n".repeat(60);
    let mut text = String::new();
    for i in 0..600 {
        text.push_str(&padding);
        text.push_str(&format!(
            "[[expect]]\nclause = \"mem.x{i}\"\nbackend = \"cuda\"\noutcome = \"NotSupported\"\nreason = \"r\"\n"
        ));
    }
    // The last entry is wrong: its line must still be found.
    text.push_str("[[expect]]\nclause = \"mem.y\"\nbogus = \"1\"\n");
    let bogus_line = text.lines().count();
    let start = Instant::now();
    let err = ipc_conformance::expectations::Expectations::parse(&text, Path::new("big.toml"))
        .unwrap_err();
    let elapsed = start.elapsed();
    assert!(err.to_string().contains("bogus"), "{err}");
    assert!(err.to_string().contains(&format!(":{bogus_line}")), "{err}");
    eprintln!("{} bytes in {elapsed:?}", text.len());
    assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
}

/// `diff`, `merge` and `summary` bound what they read all together, not
/// each file: two files of 20 MiB are refused as one of 40 MiB would be.
#[test]
fn the_results_files_of_one_command_share_one_limit() {
    let dir = scratch("results-sum");
    let text = serde_json::to_string(&small_results("results-sum-run")).unwrap();
    // Whitespace is JSON too: a valid results.json of 20 MiB.
    let padded = format!("{text}{}", " ".repeat(20 << 20));
    let (a, b) = (dir.join("a.json"), dir.join("b.json"));
    std::fs::write(&a, &padded).unwrap();
    std::fs::write(&b, &padded).unwrap();
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    // One of them alone is read.
    let o = cli(&["summary", a]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = dir.join("m");
    for args in [
        vec!["diff", a, b],
        vec!["summary", a, b],
        vec!["merge", "--force", a, b, "--out", out.to_str().unwrap()],
    ] {
        let o = cli(&args);
        assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("b.json") && stderr(&o).contains("share a limit of 33554432 bytes"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
    assert!(!out.join("results.json").exists());
}

/// Expectations files and scenarios are bounded where reading them stays
/// under 1 s and 1 GiB (docs/reliability.md): 512 KiB and 4 MiB.
#[test]
fn expectations_files_over_512_kib_and_scenarios_over_4_mib_are_refused() {
    let dir = scratch("input-sizes");
    let entry = "[[expect]]\nclause = \"mem.*.x?\"\noutcome = \"Fail\"\nreason = \"r\"\n";
    let exp = dir.join("big.toml");
    std::fs::write(&exp, entry.repeat((512 << 10) / entry.len() + 1)).unwrap();
    let o = cli(&[
        "run",
        "-q",
        "--expectations",
        exp.to_str().unwrap(),
        "--out",
        dir.join("out").to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("longer than the limit of 524288 bytes for an expectations file"),
        "{}",
        stderr(&o)
    );
    let step = "a: device_count\n";
    let scenario = dir.join("big.ipc");
    let text = format!(
        "devices 1\nprocess a device=0\n{}",
        step.repeat((4 << 20) / step.len() + 1)
    );
    std::fs::write(&scenario, text).unwrap();
    let o = cli(&["scenario", scenario.to_str().unwrap()]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("longer than the limit of 4194304 bytes for a scenario file"),
        "{}",
        stderr(&o)
    );
}
