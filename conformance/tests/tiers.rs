//! Tiers at the command line: what gates `run`, `diff` and `differential`,
//! and how results of every tier are still reported.

mod common;
use common::{code, scratch, stderr, stdout};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_ipc-conformance");

/// A clause whose importer reads `pattern` where the exporter wrote ab*16.
fn clause(id: &str, tier: &str, pattern: &str) -> String {
    format!(
        "# id: {id}\n# title: An importer reads what the exporter wrote\n# kind: measured\n\
         # tier: {tier}\n\ndevices 1\nprocess owner device=0\nprocess peer  device=0\n\n\
         owner: a = malloc 2MiB\nowner: fill a 0xab\nowner: h = ipc_get a\n\
         owner: send h -> peer\npeer:  p = ipc_open h => ok\n\
         peer:  read p 0 16 => bytes {pattern}\npeer:  ipc_close p => ok\n"
    )
}

/// A catalogue of a passing contract clause and an incidental one that
/// fails when `incidental_fails`.
fn catalogue(tag: &str, incidental_fails: bool) -> PathBuf {
    let dir = scratch(tag).join("clauses");
    std::fs::create_dir_all(dir.join("demo")).unwrap();
    std::fs::write(
        dir.join("demo/promised.ipc"),
        clause("demo.open.promised", "contract", "ab*16"),
    )
    .unwrap();
    let pattern = if incidental_fails { "cd*16" } else { "ab*16" };
    std::fs::write(
        dir.join("demo/placement.ipc"),
        clause("demo.open.placement", "incidental", pattern),
    )
    .unwrap();
    dir
}

fn cli(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("IPC_CONFORMANCE_CLAUSES")
        .env("IPC_GIT_REVISION", "test-revision")
        .output()
        .expect("the binary runs")
}

/// `run` on `clauses` into a fresh folder, with `extra` arguments.
fn run(clauses: &Path, tag: &str, extra: &[&str]) -> (Output, PathBuf) {
    let out = scratch(tag).join("reports");
    let mut args = vec![
        "run",
        "--clauses",
        clauses.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    (cli(&args), out)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

#[test]
fn an_incidental_failure_is_reported_but_gates_only_when_asked() {
    let clauses = catalogue("gate", true);
    let (o, out) = run(&clauses, "gate-default", &[]);
    let text = stdout(&o);
    assert_eq!(code(&o), 0, "{text}{}", stderr(&o));
    assert!(
        text.contains("FAIL    demo.open.placement (")
            && text.contains("  (incidental: not gated)"),
        "{text}"
    );
    assert!(
        text.contains("tiers (gated: contract, relied-on):"),
        "{text}"
    );
    assert!(text.contains("  contract   1 result: 1 Pass\n"), "{text}");
    assert!(
        text.contains("  incidental 1 result: 1 Fail  (not gated: 1 reported only)"),
        "{text}"
    );
    let v: Value = serde_json::from_str(&read(&out.join("results.json"))).unwrap();
    assert_eq!(
        v["run"]["gated_tiers"],
        serde_json::json!(["contract", "relied-on"])
    );
    let tiers: Vec<(&str, &str)> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["id"].as_str().unwrap(), r["tier"].as_str().unwrap()))
        .collect();
    assert_eq!(
        tiers,
        [
            ("demo.open.placement", "incidental"),
            ("demo.open.promised", "contract")
        ]
    );
    let junit = read(&out.join("junit.xml"));
    assert!(junit.contains("type=\"NotGated\""), "{junit}");
    assert!(!junit.contains("<failure"), "{junit}");
    let md = read(&out.join("summary.md"));
    assert!(
        md.contains("(sim runtime, incidental, not gated) Fail"),
        "{md}"
    );

    for tiers in ["all", "incidental", "contract,relied-on,incidental"] {
        let (o, out) = run(&clauses, "gate-all", &["--tiers", tiers]);
        assert_eq!(code(&o), 1, "--tiers {tiers}: {}", stdout(&o));
        assert!(!stdout(&o).contains("not gated"), "{}", stdout(&o));
        let junit = read(&out.join("junit.xml"));
        assert!(junit.contains("<failure"), "{junit}");
    }
    let (o, _) = run(&clauses, "gate-contract", &["--tiers", "contract"]);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
}

/// An expectations entry for an ungated clause still classifies it; an
/// unexpected pass there is reported, and fails the gate only when its tier
/// gates.
#[test]
fn expectations_of_an_ungated_clause_classify_but_do_not_gate() {
    let clauses = catalogue("expect", false);
    let file = scratch("expect-file").join("expectations.toml");
    std::fs::write(
        &file,
        "[[expect]]\nclause = \"demo.open.placement\"\noutcome = \"Fail\"\n\
         reason = \"placement differs on this driver\"\n",
    )
    .unwrap();
    let exp = ["--expectations", file.to_str().unwrap()];
    let (o, out) = run(&clauses, "expect-default", &exp);
    let text = stdout(&o);
    assert_eq!(code(&o), 0, "{text}{}", stderr(&o));
    assert!(
        text.contains("gate: passed (nothing unexpected in the gated tiers: contract, relied-on)"),
        "{text}"
    );
    assert!(
        text.contains("not gated: 1 unexpected result outside the gated tiers"),
        "{text}"
    );
    assert!(
        text.contains("  demo.open.placement [runtime] Pass (incidental): UnexpectedPass"),
        "{text}"
    );
    let v: Value = serde_json::from_str(&read(&out.join("results.json"))).unwrap();
    let placement = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == "demo.open.placement")
        .unwrap();
    assert_eq!(placement["expectation"]["classification"], "UnexpectedPass");

    let mut all = exp.to_vec();
    all.extend(["--tiers", "all"]);
    let (o, _) = run(&clauses, "expect-all", &all);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    assert!(
        stdout(&o).contains("gate: FAILED (1 unexpected result in the gated tiers"),
        "{}",
        stdout(&o)
    );
}

/// Two runs in which only an incidental clause changed: `diff` lists the
/// change under its tier and exits 0; with every tier gated, 1.
#[test]
fn a_diff_that_only_moves_incidental_behaviour_exits_0_and_says_so() {
    let (o, before) = run(&catalogue("diff-before", false), "diff-before-run", &[]);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
    let (o, after) = run(&catalogue("diff-after", true), "diff-after-run", &[]);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
    let old = before.join("results.json");
    let new = after.join("results.json");
    let diff = |extra: &[&str]| {
        let mut args = vec!["diff", old.to_str().unwrap(), new.to_str().unwrap()];
        args.extend_from_slice(extra);
        cli(&args)
    };
    let o = diff(&[]);
    let text = stdout(&o);
    assert_eq!(code(&o), 0, "{text}{}", stderr(&o));
    assert!(
        text.contains("  contract    no changes (1 compared)\n  relied-on   no changes (0 compared)\n  incidental  1 change: 1 status changed"),
        "{text}"
    );
    assert!(
        text.contains("== incidental (not gated): 1 change ==\nstatus changed (1):\n  demo.open.placement [runtime]: Pass -> Fail"),
        "{text}"
    );
    assert!(
        text.contains("only ungated tiers changed (incidental): exit 0"),
        "{text}"
    );
    let o = diff(&["--tiers", "all"]);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    let o = diff(&["--format", "json"]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        (v["changed"].as_bool(), v["gated_changed"].as_bool()),
        (Some(true), Some(false))
    );
    assert_eq!(v["status_changes"][0]["tier"], "incidental");
}

/// A results.json written before tiers (schema 1) still loads: `diff`
/// takes each clause's tier from the catalogue, and `summary` reads it.
#[test]
fn an_old_results_file_diffs_against_a_new_one_with_the_catalogue_tiers() {
    let clauses = catalogue("old", true);
    let (_, out) = run(&clauses, "old-run", &[]);
    let new = out.join("results.json");
    let mut v: Value = serde_json::from_str(&read(&new)).unwrap();
    v["schema_version"] = 1.into();
    v["run"].as_object_mut().unwrap().remove("gated_tiers");
    for r in v["results"].as_array_mut().unwrap() {
        r.as_object_mut().unwrap().remove("tier");
        r["status"] = "Pass".into();
        r["message"] = "".into();
    }
    let old = scratch("old-file").join("results.json");
    std::fs::write(&old, v.to_string()).unwrap();
    let o = cli(&[
        "diff",
        old.to_str().unwrap(),
        new.to_str().unwrap(),
        "--clauses",
        clauses.to_str().unwrap(),
    ]);
    let text = stdout(&o);
    assert_eq!(code(&o), 0, "{text}{}", stderr(&o));
    assert!(
        text.contains("== incidental (not gated): 1 change =="),
        "{text}"
    );
    // Without the catalogue that knows them, the old clauses have no tier
    // (`-`) and gate.
    let o = cli(&["diff", old.to_str().unwrap(), old.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = cli(&["summary", old.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).contains("- run 1: gated tiers: every tier"),
        "{}",
        stdout(&o)
    );
}

/// Every command that takes `--tiers` refuses an unknown tier with exit 2,
/// naming the valid ones.
#[test]
fn an_unknown_tier_is_a_clear_error_on_every_command() {
    let clauses = catalogue("bad-tier", false);
    let (_, out) = run(&clauses, "bad-tier-run", &[]);
    let results = out.join("results.json");
    let r = results.to_str().unwrap();
    let c = clauses.to_str().unwrap();
    let commands: [&[&str]; 4] = [
        &["run", "--clauses", c, "--tiers", "contract,promised"],
        &[
            "differential",
            "--backend",
            "sim",
            "--clauses",
            c,
            "--tiers",
            "promised",
        ],
        &["diff", r, r, "--tiers", "promised"],
        &["run", "--clauses", c, "--tiers", ""],
    ];
    for args in commands {
        let o = cli(args);
        let err = stderr(&o);
        assert_eq!(code(&o), 2, "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
        if args.last() == Some(&"") {
            assert!(err.contains("empty tier list"), "{args:?}: {err}");
        } else {
            assert!(
                err.contains("unknown tier 'promised' (valid: contract, relied-on, incidental)"),
                "{args:?}: {err}"
            );
        }
    }
}
