//! `ipc-conformance diff`, run as a user would, on the committed real-GPU
//! results and on edited copies of them.

mod common;
use common::{code, scratch, stderr, stdout};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_ipc-conformance");

fn committed(machine: &str, dialect: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../reports")
        .join(machine)
        .join(dialect)
        .join("results.json")
}

fn h100(dialect: &str) -> PathBuf {
    committed("h100-80gb-hbm3_driver-580.159.04", dialect)
}

fn h200(dialect: &str) -> PathBuf {
    committed("h200x2-nvlink_driver-580.159.04", dialect)
}

fn load(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Write `v` as `name` in a fresh scratch directory.
fn save(tag: &str, v: &Value) -> PathBuf {
    let path = scratch(tag).join("results.json");
    std::fs::write(&path, serde_json::to_string_pretty(v).unwrap()).unwrap();
    path
}

fn diff(old: &Path, new: &Path, extra: &[&str]) -> Output {
    Command::new(BIN)
        .arg("diff")
        .arg(old)
        .arg(new)
        .args(extra)
        .output()
        .expect("the binary runs")
}

/// The tier of the first status change of a `diff --format json` document.
fn c_tier(v: &Value) -> &str {
    v["status_changes"][0]["tier"].as_str().unwrap_or("(none)")
}

/// Index of the result with this id and dialect.
fn find(v: &Value, id: &str) -> usize {
    v["results"]
        .as_array()
        .unwrap()
        .iter()
        .position(|r| r["id"] == id)
        .unwrap_or_else(|| panic!("{id} not in the committed results"))
}

#[test]
fn identical_runs_exit_0_with_no_changes() {
    let o = diff(&h100("runtime"), &h100("runtime"), &[]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("no changes: 51 results compared"), "{text}");
    // Identity at the top.
    for expected in [
        "backend",
        "cuda",
        "NVIDIA H100 80GB HBM3",
        "9.0",
        "580.159.04",
        "CUDA runtime",
        "13.0",
        "021cb17",
        "2026-11-22T04:41:59.682Z",
    ] {
        assert!(text.contains(expected), "{expected} missing:\n{text}");
    }

    // Timings are not observations: a copy with other timings is identical.
    let mut v = load(&h100("runtime"));
    for r in v["results"].as_array_mut().unwrap() {
        r["duration_ms"] = 12345.0.into();
        if let Some(steps) = r["trace"]["steps"].as_array_mut() {
            for s in steps {
                s["elapsed_us"] = 777.into();
            }
        }
    }
    v["run"]["started_at"] = "2027-01-01T00:00:00.000Z".into();
    let copy = save("timings", &v);
    let o = diff(&h100("runtime"), &copy, &[]);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
    assert!(stdout(&o).contains("* started at"), "{}", stdout(&o));
}

#[test]
fn a_status_change_is_reported_and_exits_1() {
    let mut v = load(&h100("runtime"));
    let i = find(&v, "mem.open.reopen-same-context");
    v["results"][i]["status"] = "Fail".into();
    v["results"][i]["message"] =
        "reopen-same-context.ipc:14: expected ok, got error (seed 1)".into();
    v["totals"]["Pass"] = 49.into();
    v["totals"]["Fail"] = 1.into();
    let new = save("status", &v);
    let o = diff(&h100("runtime"), &new, &[]);
    let text = stdout(&o);
    assert_eq!(code(&o), 1, "{text}{}", stderr(&o));
    assert!(text.contains("status changed (1):"), "{text}");
    assert!(
        text.contains("mem.open.reopen-same-context [runtime]: Pass -> Fail"),
        "{text}"
    );
    assert!(
        text.contains("now: reopen-same-context.ipc:14: expected ok, got error"),
        "{text}"
    );
    assert!(
        text.contains("1 change: 1 status changed, 0 trace changed, 0 added, 0 removed (51 compared, 50 unchanged)"),
        "{text}"
    );
}

#[test]
fn a_trace_change_at_one_step_is_reported_with_both_outcomes() {
    let mut v = load(&h100("runtime"));
    let i = find(&v, "mem.open.reopen-same-context");
    let steps = v["results"][i]["trace"]["steps"]
        .as_array()
        .unwrap()
        .clone();
    // The first step that answered ok: now an error.
    let j = steps
        .iter()
        .position(|s| s["outcome"]["status"] == "ok")
        .unwrap();
    let line = steps[j]["line"].as_u64().unwrap();
    let op = steps[j]["op"].as_str().unwrap().to_string();
    v["results"][i]["trace"]["steps"][j]["outcome"] =
        serde_json::json!({"status": "error", "code": 201, "name": "cudaErrorDeviceUninitialized"});
    let new = save("trace", &v);

    let o = diff(&h100("runtime"), &new, &[]);
    let text = stdout(&o);
    assert_eq!(code(&o), 1, "{text}");
    assert!(text.contains("trace changed (1):"), "{text}");
    assert!(
        text.contains("mem.open.reopen-same-context [runtime] (Pass): 1 step"),
        "{text}"
    );
    assert!(
        text.contains(&format!("L{line} {op}: old ok"))
            && text.contains("| new error cudaErrorDeviceUninitialized (201)"),
        "{text}"
    );

    // The same error under the other dialect's spelling is no change.
    let mut same = load(&h100("runtime"));
    let k = find(&same, "mem.close.twice");
    let steps = same["results"][k]["trace"]["steps"].as_array_mut().unwrap();
    let mut renamed = 0;
    for s in steps.iter_mut() {
        if s["outcome"]["status"] == "error" {
            s["outcome"]["name"] = "CUDA_ERROR_SOMETHING_ELSE".into();
            renamed += 1;
        }
    }
    let o = diff(&h100("runtime"), &save("renamed", &same), &[]);
    assert!(renamed > 0);
    assert_eq!(code(&o), 0, "renamed {renamed}: {}", stdout(&o));

    // json: the step, with old (left) and new (right) outcomes.
    let o = diff(&h100("runtime"), &new, &["--format", "json"]);
    assert_eq!(code(&o), 1);
    let j_out: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let d = &j_out["trace_changes"][0]["differences"][0];
    assert_eq!(d["line"], line);
    assert_eq!(d["left"]["status"], "ok");
    assert_eq!(d["right"]["code"], 201);
}

#[test]
fn added_and_removed_clauses() {
    let mut v = load(&h100("driver"));
    let results = v["results"].as_array_mut().unwrap();
    let removed = results.remove(0);
    let mut added = results[0].clone();
    added["id"] = "mem.open.brand-new".into();
    results.push(added);
    let new = save("added", &v);
    let o = diff(&h100("driver"), &new, &[]);
    let text = stdout(&o);
    assert_eq!(code(&o), 1, "{text}");
    assert!(
        text.contains("added (1):\n  mem.open.brand-new [driver]: Pass"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "removed (1):\n  {} [driver]: Pass",
            removed["id"].as_str().unwrap()
        )),
        "{text}"
    );
    assert!(text.contains("1 added, 1 removed (50 compared"), "{text}");

    let o = diff(&h100("driver"), &new, &["--format", "markdown"]);
    let md = stdout(&o);
    assert_eq!(code(&o), 1);
    assert!(md.contains("### Added"), "{md}");
    assert!(
        md.contains("| `mem.open.brand-new` | - | driver | ✅ Pass |"),
        "{md}"
    );
    assert!(md.contains("### Removed"), "{md}");
}

#[test]
fn h100_against_h200x2_shows_the_two_device_clause() {
    let o = diff(
        &h100("runtime"),
        &h200("runtime"),
        &["--format", "markdown"],
    );
    let md = stdout(&o);
    assert_eq!(code(&o), 1, "{md}{}", stderr(&o));
    assert!(md.starts_with("## IPC conformance diff\n"), "{md}");
    assert!(
        md.contains("| **GPU** | NVIDIA H100 80GB HBM3 | NVIDIA H200 |"),
        "{md}"
    );
    assert!(md.contains("| **devices** | 1 | 2 |"), "{md}");
    assert!(md.contains("| driver | 580.159.04 | 580.159.04 |"), "{md}");
    assert!(md.contains("### Status changes"), "{md}");
    assert!(
        md.contains(
            "| `mem.context.two-devices` | contract | runtime | ⏭ NotSupported | ✅ Pass |"
        ),
        "{md}"
    );
    // Every table row has the same number of cells as its header.
    for table in md.split("\n\n").filter(|t| t.starts_with('|')) {
        let widths: Vec<usize> = table.lines().map(|l| l.matches(" |").count()).collect();
        assert!(widths.windows(2).all(|w| w[0] == w[1]), "{table}");
    }

    let o = diff(&h100("runtime"), &h200("runtime"), &["--format", "json"]);
    assert_eq!(code(&o), 1);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["schema_version"], 2);
    assert_eq!(v["changed"], true);
    assert_eq!(v["gated_changed"], true);
    assert_eq!(c_tier(&v), "contract");
    assert_eq!(v["old"]["run"]["gpu_name"], "NVIDIA H100 80GB HBM3");
    assert_eq!(v["new"]["run"]["gpu_name"], "NVIDIA H200");
    assert_eq!(v["new"]["run"]["device_count"], 2);
    assert!(v["old"]["path"].as_str().unwrap().ends_with("results.json"));
    assert_eq!(v["totals"]["compared"], 51);
    assert_eq!(v["totals"]["status_changed"], 1);
    assert_eq!(v["totals"]["unchanged"], 50);
    let c = &v["status_changes"][0];
    assert_eq!(c["id"], "mem.context.two-devices");
    assert_eq!(c["dialect"], "runtime");
    assert_eq!(c["old_status"], "NotSupported");
    assert_eq!(c["new_status"], "Pass");
    for key in ["trace_changes", "added", "removed"] {
        assert_eq!(v[key].as_array().unwrap().len(), 0, "{key}");
    }
}

#[test]
fn out_writes_the_file_and_prints_the_totals() {
    let out = scratch("out").join("sub").join("diff.md");
    let o = diff(
        &h100("driver"),
        &h200("driver"),
        &["--format", "markdown", "--out", out.to_str().unwrap()],
    );
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with("1 change: 1 status changed"),
        "{}",
        stdout(&o)
    );
    let md = std::fs::read_to_string(&out).unwrap();
    assert!(md.contains("mem.context.two-devices"), "{md}");
}

#[test]
fn malformed_input_exits_2_naming_the_file() {
    let good = h100("runtime");
    let dir = scratch("malformed");
    let text = std::fs::read_to_string(&good).unwrap();

    let truncated = dir.join("truncated.json");
    std::fs::write(&truncated, &text[..text.len() / 2]).unwrap();
    let mut v = load(&good);
    v["schema_version"] = 3.into();
    let future = dir.join("future.json");
    std::fs::write(&future, v.to_string()).unwrap();
    let mut v = load(&good);
    v["results"][3]["status"] = "Maybe".into();
    let bad_status = dir.join("bad-status.json");
    std::fs::write(&bad_status, v.to_string()).unwrap();
    let differential = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../reports/h100-80gb-hbm3_driver-580.159.04/differential/differential.json.gz");
    let missing = dir.join("missing.json");
    let empty = dir.join("empty.json");
    std::fs::write(&empty, "").unwrap();

    let cases: [(&Path, &[&str]); 6] = [
        (&truncated, &["not JSON", "EOF while parsing"]),
        (&future, &["schema_version 3 is not supported"]),
        (
            &bad_status,
            &["not a results.json", "unknown variant `Maybe`"],
        ),
        (&differential, &["not a results.json", "missing field"]),
        (&missing, &["cannot read"]),
        (&empty, &["not JSON"]),
    ];
    for (path, expected) in cases {
        for (old, new) in [(good.as_path(), path), (path, good.as_path())] {
            let o = diff(old, new, &[]);
            let err = stderr(&o);
            assert_eq!(code(&o), 2, "{}: {err}", path.display());
            assert!(err.contains(&path.display().to_string()), "{err}");
            for e in expected {
                assert!(err.contains(e), "{}: want {e}: {err}", path.display());
            }
            assert!(!err.contains("panicked"), "{err}");
            assert!(stdout(&o).is_empty(), "{}", stdout(&o));
        }
    }

    // Usage errors are exit 2 as well.
    let o = diff(&good, &good, &["--format", "yaml"]);
    assert_eq!(code(&o), 2);
}

/// Committed reports may be gzipped: `diff`, `summary` and `merge` read a
/// `results.json.gz` as they read the plain file.
#[test]
fn gzipped_results_read_as_the_plain_file() {
    use std::io::Write;
    let plain = h100("runtime");
    let packed = scratch("gzipped").join("results.json.gz");
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    enc.write_all(&std::fs::read(&plain).unwrap()).unwrap();
    std::fs::write(&packed, enc.finish().unwrap()).unwrap();

    let o = diff(&plain, &packed, &[]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("no changes: 51 results compared"),
        "{}",
        stdout(&o)
    );

    let summary = |path: &Path| {
        Command::new(BIN)
            .arg("summary")
            .arg(path)
            .output()
            .expect("the binary runs")
    };
    let (a, b) = (summary(&plain), summary(&packed));
    assert_eq!(code(&a), 0, "{}", stderr(&a));
    assert_eq!(code(&b), 0, "{}", stderr(&b));
    assert!(stdout(&a).contains("Pass"), "{}", stdout(&a));
    assert_eq!(stdout(&a), stdout(&b));

    let out = scratch("gzipped-merge");
    let m = Command::new(BIN)
        .arg("merge")
        .arg(&packed)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("the binary runs");
    assert_eq!(code(&m), 0, "{}", stderr(&m));
    let merged = load(&out.join("results.json"));
    assert_eq!(merged["results"].as_array().map(Vec::len), Some(51));
}
