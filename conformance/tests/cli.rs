//! The `ipc-conformance` binary, run as a user would.

mod common;
use common::{code, scratch, stderr, stdout};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_ipc-conformance");

const GOOD: &str = "\
# id: demo.open.basic
# title: An importer reads what the exporter wrote
# kind: specified
# tier: contract

devices 1
process owner device=0
process peer  device=0

owner: a = malloc 2MiB
owner: fill a 0xab
owner: h = ipc_get a
owner: send h -> peer
peer:  p = ipc_open h                  => ok
peer:  read p 0 16                     => bytes ab*16
peer:  ipc_close p                     => ok
";

const NEEDS_MANY: &str = "\
# id: demo.many.devices
# title: Needs more devices than the simulator has
# kind: measured
# tier: incidental

devices 64
process a device=0
a: device_count => any
";

/// A clause directory: a passing clause, a NotSupported one, and optionally
/// a failing and a broken one.
fn clauses(tag: &str, with_bad: bool) -> PathBuf {
    let dir = scratch(tag).join("clauses");
    std::fs::create_dir_all(dir.join("demo")).unwrap();
    std::fs::write(dir.join("demo/basic.ipc"), GOOD).unwrap();
    std::fs::write(dir.join("demo/many.ipc"), NEEDS_MANY).unwrap();
    if with_bad {
        std::fs::write(
            dir.join("demo/wrong.ipc"),
            GOOD.replace("bytes ab*16", "bytes cd*16")
                .replace("demo.open.basic", "demo.open.wrong"),
        )
        .unwrap();
        std::fs::write(
            dir.join("demo/broken.ipc"),
            "# title: no id here\n# kind: specified\ndevices 1\nprocess a device=0\n",
        )
        .unwrap();
    }
    dir
}

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("IPC_CONFORMANCE_CLAUSES")
        .env("IPC_GIT_REVISION", "test-revision")
        .output()
        .expect("the binary runs")
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn list_shows_the_real_catalogue() {
    let o = run(&["list"]);
    let out = stdout(&o);
    assert!(
        out.contains("ID") && out.contains("KIND") && out.contains("TIER") && out.contains("TITLE"),
        "{out}"
    );
    assert!(
        out.contains(" relied-on, ") && out.contains(" incidental) in "),
        "{out}"
    );
    assert!(matches!(code(&o), 0 | 1), "{}", stderr(&o));
}

#[test]
fn list_flags_broken_clauses_and_filters() {
    let dir = clauses("list", true);
    let o = run(&["list", "--clauses", dir.to_str().unwrap()]);
    let out = stdout(&o);
    assert_eq!(code(&o), 1, "{out}");
    assert!(out.contains("demo.open.basic"), "{out}");
    assert!(out.contains("BROKEN"), "{out}");
    assert!(out.contains("missing metadata 'id'"), "{out}");
    assert!(
        out.contains("4 clauses (2 contract, 0 relied-on, 1 incidental), 1 broken"),
        "{out}"
    );
    let many = out
        .lines()
        .find(|l| l.contains("demo.many.devices"))
        .unwrap();
    assert!(many.contains("  measured   incidental   64  "), "{many}");

    let o = run(&[
        "list",
        "--clauses",
        dir.to_str().unwrap(),
        "--filter",
        "demo.open.*",
        "--json",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let ids: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["demo.open.basic", "demo.open.wrong"]);
    assert_eq!(v[0]["requirements"]["devices"], 1);
    assert_eq!(v[0]["broken"], false);
}

#[test]
fn run_writes_the_three_reports_and_exits_0() {
    let dir = clauses("run", false);
    let out = scratch("run-out").join("reports");
    let o = run(&[
        "run",
        "--clauses",
        dir.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--seed",
        "42",
    ]);
    let text = stdout(&o);
    assert_eq!(code(&o), 0, "{text}{}", stderr(&o));
    assert!(text.contains("PASS    demo.open.basic"), "{text}");
    assert!(text.contains("NOTSUP  demo.many.devices"), "{text}");
    assert!(text.contains("seed 42"), "{text}");
    for name in ["results.json", "junit.xml", "summary.md"] {
        assert!(out.join(name).is_file(), "{name}");
        assert!(!out.join(format!("{name}.tmp")).exists(), "{name}.tmp left");
    }
    let v = read_json(&out.join("results.json"));
    assert_eq!(v["schema_version"], 2);
    assert_eq!(v["run"]["backend"], "sim");
    assert_eq!(v["run"]["seed"], 42);
    assert_eq!(
        v["run"]["gated_tiers"],
        serde_json::json!(["contract", "relied-on"])
    );
    assert_eq!(v["run"]["git_revision"], "test-revision");
    assert_eq!(v["totals"]["Pass"], 1);
    assert_eq!(v["totals"]["NotSupported"], 1);
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    let basic = results
        .iter()
        .find(|r| r["id"] == "demo.open.basic")
        .unwrap();
    assert_eq!(basic["status"], "Pass");
    assert_eq!(basic["seed"], 42);
    assert_eq!(basic["trace"]["steps"].as_array().unwrap().len(), 7);
    let many = results
        .iter()
        .find(|r| r["id"] == "demo.many.devices")
        .unwrap();
    assert_eq!(many["status"], "NotSupported");
    assert!(many["message"].as_str().unwrap().contains("64"), "{many}");
    let junit = std::fs::read_to_string(out.join("junit.xml")).unwrap();
    assert!(junit.contains("name=\"demo.open.basic\""), "{junit}");
    assert!(junit.contains("<skipped"), "{junit}");
    let md = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(
        md.contains("| `demo.open.basic` | specified | contract | ✅ |"),
        "{md}"
    );
}

#[test]
fn failures_and_broken_clauses_exit_1_with_both_dialects_reported() {
    let dir = clauses("run-bad", true);
    let out = scratch("run-bad-out");
    let o = run(&[
        "run",
        "--clauses",
        dir.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--dialect",
        "all",
        "--quiet",
    ]);
    let text = stdout(&o);
    assert_eq!(code(&o), 1, "{text}");
    assert!(!text.contains("PASS "), "quiet hides passes: {text}");
    assert!(text.contains("FAIL    demo.open.wrong [runtime]"), "{text}");
    assert!(text.contains("FAIL    demo.open.wrong [driver]"), "{text}");
    assert!(text.contains("FAIL    demo.open.wrong [hip]"), "{text}");
    assert!(text.contains("BROKEN"), "{text}");
    assert!(text.contains("seed 1"), "{text}");
    let v = read_json(&out.join("results.json"));
    assert_eq!(v["run"]["dialect"], "all");
    // `all` is runtime, driver and hip.
    assert_eq!(v["results"].as_array().unwrap().len(), 12);
    assert_eq!(v["totals"]["Fail"], 3);
    assert_eq!(v["totals"]["Broken"], 3);
    let md = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(
        md.contains("| clause | kind | tier | sim runtime | sim driver |"),
        "{md}"
    );
}

#[test]
fn scenario_prints_the_trace_and_the_verdict() {
    let dir = scratch("scenario");
    let file = dir.join("adhoc.ipc");
    // No metadata needed for ad-hoc scenarios.
    std::fs::write(&file, GOOD.lines().skip(4).collect::<Vec<_>>().join("\n")).unwrap();
    let o = run(&["scenario", file.to_str().unwrap()]);
    let out = stdout(&o);
    assert_eq!(code(&o), 0, "{out}{}", stderr(&o));
    assert!(out.contains("peer: read p 0 16 -> ok bytes ab*16"), "{out}");
    assert!(out.contains("✓ bytes ab*16"), "{out}");
    assert!(out.contains("verdict: Pass"), "{out}");
}

#[test]
fn scenario_parse_errors_name_file_line_column_and_exit_1() {
    let dir = scratch("scenario-bad");
    let file = dir.join("bad.ipc");
    std::fs::write(
        &file,
        "devices 1\nprocess a device=0\na: x = frobnicate 3\n",
    )
    .unwrap();
    let o = run(&["scenario", file.to_str().unwrap()]);
    assert_eq!(code(&o), 1);
    let err = stderr(&o);
    let expected = format!("{}:3:", file.display());
    assert!(err.contains(&expected), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn semantics_lists_the_choices() {
    let o = run(&["semantics"]);
    assert_eq!(code(&o), 0);
    let out = stdout(&o);
    assert!(out.contains("options:"), "{out}");
    assert!(
        out.contains("open_flags = lazy-bit, hip profile: lazy-only"),
        "{out}"
    );
}

#[test]
fn bad_input_is_a_message_and_exit_2() {
    let dir = clauses("usage", false);
    let d = dir.to_str().unwrap();
    let file_in_the_way = scratch("usage-out").join("file");
    std::fs::write(&file_in_the_way, "x").unwrap();
    let blocked = file_in_the_way.join("out");
    let cases: Vec<Vec<&str>> = vec![
        vec!["run", "--clauses", d, "--filter", "demo.[x"],
        vec!["run", "--clauses", "/nonexistent/ipc/clauses"],
        vec!["run", "--clauses", d, "--semantics", "nonsense"],
        vec!["run", "--clauses", d, "--semantics", "no_such_choice=1"],
        vec!["run", "--clauses", d, "--filter", "nothing.matches"],
        vec!["run", "--clauses", d, "--out", blocked.to_str().unwrap()],
        vec!["run", "--backend", "tpu"],
        vec!["summary", "/nonexistent/results.json"],
    ];
    for args in cases {
        let o = run(&args);
        let err = stderr(&o);
        assert_eq!(code(&o), 2, "{args:?}: {err}");
        assert!(!err.is_empty(), "{args:?} printed no reason");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn differential_sim_against_sim_finds_nothing() {
    let dir = clauses("diff", false);
    let out = scratch("diff-out");
    let o = run(&[
        "differential",
        "--backend",
        "sim",
        "--clauses",
        dir.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let text = stdout(&o);
    assert_eq!(code(&o), 0, "{text}{}", stderr(&o));
    assert!(text.contains("not compared: demo.many.devices"), "{text}");
    let v = read_json(&out.join("differential.json"));
    assert_eq!(v["totals"]["compared"], 1);
    assert_eq!(v["totals"]["identical"], 1);
    assert_eq!(v["totals"]["not_compared"], 1);
    let md = std::fs::read_to_string(out.join("differential.md")).unwrap();
    assert!(md.contains("## Not compared"), "{md}");
}

#[test]
fn summary_combines_results_files() {
    let dir = clauses("summary", false);
    let a = scratch("summary-a");
    let b = scratch("summary-b");
    for (out, dialect) in [(&a, "runtime"), (&b, "driver")] {
        let o = run(&[
            "run",
            "--clauses",
            dir.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--dialect",
            dialect,
            "-q",
        ]);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
    }
    let md_path = scratch("summary-md").join("combined.md");
    let o = run(&[
        "summary",
        a.join("results.json").to_str().unwrap(),
        b.join("results.json").to_str().unwrap(),
        "--out",
        md_path.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let md = std::fs::read_to_string(&md_path).unwrap();
    assert!(
        md.contains("| clause | kind | tier | sim runtime | sim driver |"),
        "{md}"
    );
    assert!(
        md.contains("| `demo.open.basic` | specified | contract | ✅ | ✅ |"),
        "{md}"
    );
}

/// CI has no GPU: the real backend reports every clause NotSupported with
/// the reason, writes the reports, and exits 3 (the backend cannot run at
/// all), a success only with --allow-unsupported or expectations entries
/// that expect NotSupported.
#[cfg(feature = "cuda")]
#[test]
fn cuda_without_a_gpu_is_not_supported_everywhere() {
    let out = scratch("cuda-out");
    let o = run(&["run", "--backend", "cuda", "--out", out.to_str().unwrap()]);
    let text = stdout(&o);
    let v = read_json(&out.join("results.json"));
    let results = v["results"].as_array().unwrap();
    assert!(!results.is_empty());
    if v["run"]["device_count"].as_u64().unwrap_or(0) > 0 {
        // A machine with a GPU: nothing to check here.
        return;
    }
    assert_eq!(code(&o), 3, "{text}{}", stderr(&o));
    assert!(
        stderr(&o).contains("cannot run at all") && stderr(&o).contains("--allow-unsupported"),
        "{}",
        stderr(&o)
    );
    let o = run(&[
        "run",
        "--backend",
        "cuda",
        "--allow-unsupported",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let expect = scratch("cuda-expect").join("cpu.toml");
    std::fs::write(
        &expect,
        "[[expect]]\nclause = \"*\"\nbackend = \"cuda\"\noutcome = \"NotSupported\"\nreason = \"a CPU runner\"\n",
    )
    .unwrap();
    let o = run(&[
        "run",
        "--backend",
        "cuda",
        "--expectations",
        expect.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let o = run(&[
        "differential",
        "--filter",
        "mem.open",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    let o = run(&[
        "differential",
        "--filter",
        "mem.open",
        "--allow-unsupported",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    for r in results {
        assert_eq!(r["status"], "NotSupported", "{r}");
        assert!(!r["message"].as_str().unwrap().is_empty(), "{r}");
        assert_eq!(r["backend"], "cuda");
    }
    let md = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(md.contains("cuda runtime"), "{md}");
    assert!(md.contains("⏭"), "{md}");
}

#[test]
fn the_hip_dialect_runs_on_the_simulator_with_hip_names() {
    let dir = clauses("hip", false);
    let out = scratch("hip-out");
    let o = run(&[
        "run",
        "--clauses",
        dir.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--dialect",
        "hip",
    ]);
    let text = stdout(&o);
    assert_eq!(code(&o), 0, "{text}{}", stderr(&o));
    assert!(text.contains("dialect hip"), "{text}");
    let v = read_json(&out.join("results.json"));
    assert_eq!(v["run"]["dialect"], "hip");
    assert_eq!(v["run"]["semantics"]["hip.open_flags"], "lazy-only");
    let basic = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == "demo.open.basic")
        .unwrap();
    assert_eq!(basic["status"], "Pass");
    assert_eq!(basic["dialect"], "hip");
    let apis: Vec<&str> = basic["trace"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["api"].as_str())
        .collect();
    assert_eq!(
        apis,
        [
            "hipMalloc",
            "hipMemset",
            "hipIpcGetMemHandle",
            "hipIpcOpenMemHandle",
            "hipMemcpy",
            "hipIpcCloseMemHandle"
        ]
    );

    // An error is named the HIP way.
    let file = scratch("hip-scenario").join("close.ipc");
    std::fs::write(
        &file,
        "devices 1\nprocess a device=0\na: ipc_close null => hipErrorInvalidValue\n",
    )
    .unwrap();
    let o = run(&["scenario", file.to_str().unwrap(), "--dialect", "hip"]);
    let text = stdout(&o);
    assert_eq!(code(&o), 0, "{text}{}", stderr(&o));
    assert!(text.contains("hipErrorInvalidValue"), "{text}");
}

#[cfg(feature = "cuda")]
#[test]
fn the_hip_dialect_is_not_supported_on_the_cuda_backend() {
    let out = scratch("cuda-hip-out");
    let o = run(&[
        "run",
        "--backend",
        "cuda",
        "--dialect",
        "hip",
        "--filter",
        "mem.open.*",
        "--allow-unsupported",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let v = read_json(&out.join("results.json"));
    let results = v["results"].as_array().unwrap();
    assert!(
        results.iter().any(|r| r["message"]
            .as_str()
            .unwrap()
            .contains("no AMD GPU / HIP backend")),
        "{v}"
    );
    for r in results {
        assert_eq!(r["status"], "NotSupported", "{r}");
        // A clause that holds for hip meets the backend's refusal; one that
        // does not (CUDA byte positions) says so before any backend runs.
        let message = r["message"].as_str().unwrap();
        assert!(
            message.contains("no AMD GPU / HIP backend") || message.contains(", not hip"),
            "{r}"
        );
    }
}

#[cfg(not(feature = "cuda"))]
#[test]
fn cuda_without_the_feature_is_a_clear_error() {
    let o = run(&["run", "--backend", "cuda", "--out", "/tmp/unused"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("`cuda` feature"));
}

/// An installed binary carries its catalogue: `run` from a folder with no
/// clauses anywhere near uses the one compiled in, and names its files by
/// their place in the repository.
#[test]
fn run_from_an_empty_directory_uses_the_embedded_catalogue() {
    let empty = scratch("embedded");
    let o = Command::new(BIN)
        .args(["-v", "run", "--filter", "mem.open", "-q", "--out", "out"])
        .current_dir(&empty)
        .env_remove("IPC_CONFORMANCE_CLAUSES")
        .env("IPC_GIT_REVISION", "test-revision")
        .output()
        .expect("the binary runs");
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(
        stderr(&o).contains("compiled into this binary"),
        "{}",
        stderr(&o)
    );
    let v = read_json(&empty.join("out/results.json"));
    assert_eq!(v["run"]["clauses_dir"], "conformance/clauses");
    let results = v["results"].as_array().unwrap();
    assert!(!results.is_empty());
    for r in results {
        let path = r["path"].as_str().unwrap();
        assert!(path.starts_with("conformance/clauses/mem/"), "{path}");
        assert!(r["id"].as_str().unwrap().starts_with("mem.open."));
    }
}

#[test]
fn clauses_env_still_overrides_the_embedded_catalogue() {
    let dir = clauses("env", false);
    let o = Command::new(BIN)
        .args(["list"])
        .env("IPC_CONFORMANCE_CLAUSES", &dir)
        .output()
        .expect("the binary runs");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains(dir.to_str().unwrap()), "{}", stdout(&o));
}

#[test]
fn completions_print_a_script_for_the_shell() {
    let o = run(&["completions", "bash"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let script = stdout(&o);
    assert!(script.contains("ipc-conformance"), "{script}");
    assert!(script.contains("explore"), "{script}");
    assert_eq!(code(&run(&["completions", "tcsh-9"])), 2);
}

#[test]
fn explore_replay_is_a_subcommand_and_the_old_flag_still_works() {
    let out = scratch("replay-missing");
    let missing = out.join("missing.jsonl");
    for args in [
        vec!["explore", "replay", missing.to_str().unwrap()],
        vec!["explore", "--replay", missing.to_str().unwrap()],
    ] {
        let mut args = args;
        args.extend(["-q", "--out", out.to_str().unwrap()]);
        let o = run(&args);
        assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("missing.jsonl"), "{}", stderr(&o));
    }
}

#[test]
fn explore_recheck_of_a_missing_file_is_an_error() {
    let dir = scratch("recheck-missing");
    let missing = dir.join("missing.ipc");
    let out = dir.join("out");
    let o = run(&[
        "explore",
        "recheck",
        "--backend",
        "cuda",
        missing.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 2, "{}{}", stdout(&o), stderr(&o));
    assert!(
        stderr(&o).contains("cannot read") && stderr(&o).contains("missing.ipc"),
        "{}",
        stderr(&o)
    );
    assert!(!stdout(&o).contains("files still differ"), "{}", stdout(&o));
}
