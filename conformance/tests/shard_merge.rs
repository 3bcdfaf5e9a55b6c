//! `run --shard K/N` and `merge`: shards of the real catalogue partition it,
//! and merging them gives the whole run's results.

mod common;
use common::{cli, code, scratch, stderr, stdout};
use ipc_conformance::catalogue::{compiled_in_dir, Catalogue};
use ipc_conformance::shard::Shard;
use ipc_conformance::Filter;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// `run` on the simulator into a fresh directory; returns it.
fn run(tag: &str, extra: &[&str]) -> PathBuf {
    let out = scratch(tag);
    let mut args = vec!["run", "-q", "--out", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    let o = cli(&args);
    assert_eq!(code(&o), 0, "{args:?}: {}{}", stdout(&o), stderr(&o));
    out
}

/// (id, dialect, status) of every result, in file order.
fn outcomes(v: &Value) -> Vec<(String, String, String)> {
    v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["id"].as_str().unwrap().to_string(),
                r["dialect"].as_str().unwrap().to_string(),
                r["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn shards_of_the_real_catalogue_cover_every_clause_once() {
    let cat = Catalogue::load(&compiled_in_dir()).unwrap();
    let all = cat.select(&Filter::all());
    assert!(all.len() >= 50, "{}", all.len());
    for n in 1..=5u32 {
        let mut seen: BTreeMap<(String, PathBuf), u32> = BTreeMap::new();
        let mut sizes = Vec::new();
        for k in 1..=n {
            let part = Shard::new(k, n).unwrap().select(&all);
            sizes.push(part.len());
            for c in part {
                *seen.entry((c.id.clone(), c.path.clone())).or_default() += 1;
            }
        }
        assert_eq!(seen.len(), all.len(), "N={n}: not every clause");
        assert!(seen.values().all(|&v| v == 1), "N={n}: {seen:?}");
        let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
        assert!(hi - lo <= 1, "N={n}: unbalanced {sizes:?}");
        // Deterministic: the same shard twice is the same list.
        let again = Shard::new(n, n).unwrap().select(&all);
        let once = Shard::new(n, n).unwrap().select(&all);
        let ids =
            |v: &[&ipc_conformance::Clause]| v.iter().map(|c| c.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&again), ids(&once));
    }
    // Independent of the order clauses are handed over in.
    let mut reversed = all.clone();
    reversed.reverse();
    let s = Shard::new(2, 3).unwrap();
    let a: Vec<&str> = s.select(&all).iter().map(|c| c.id.as_str()).collect();
    let b: Vec<&str> = s.select(&reversed).iter().map(|c| c.id.as_str()).collect();
    assert_eq!(a, b);
}

#[test]
fn merged_shards_equal_the_whole_run() {
    let full_dir = run("full", &["--dialect", "all"]);
    let full = read_json(&full_dir.join("results.json"));
    let total = full["results"].as_array().unwrap().len();
    for n in 1..=5u32 {
        let mut inputs = Vec::new();
        let mut sum = 0;
        for k in 1..=n {
            let shard = format!("{k}/{n}");
            let dir = run("part", &["--dialect", "all", "--shard", &shard]);
            let v = read_json(&dir.join("results.json"));
            assert_eq!(v["run"]["shard"], shard.as_str());
            sum += v["results"].as_array().unwrap().len();
            inputs.push(dir.join("results.json"));
        }
        assert_eq!(sum, total, "N={n}");
        // Merge in a scrambled order: the result does not depend on it.
        inputs.rotate_left(1);
        let out = scratch("merged");
        let mut args = vec!["merge".to_string()];
        args.extend(inputs.iter().map(|p| p.display().to_string()));
        args.extend(["--out".into(), out.display().to_string()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = cli(&args);
        assert_eq!(code(&o), 0, "N={n}: {}{}", stdout(&o), stderr(&o));
        assert!(
            stdout(&o).contains(&format!("merged {n} file")),
            "{}",
            stdout(&o)
        );

        let merged = read_json(&out.join("results.json"));
        assert_eq!(outcomes(&merged), outcomes(&full), "N={n}");
        assert_eq!(merged["totals"], full["totals"], "N={n}");
        assert_eq!(merged["run"]["dialect"], "all");
        assert_eq!(merged["run"]["shard"], Value::Null);
        let shards: Vec<String> = (1..=n).map(|k| format!("{k}/{n}")).collect();
        assert_eq!(merged["run"]["merged"]["shards"], serde_json::json!(shards));
        let merged_inputs = merged["run"]["merged"]["inputs"].as_array().unwrap();
        assert_eq!(merged_inputs.len(), n as usize);
        let contributed: u64 = merged_inputs
            .iter()
            .map(|i| i["results"].as_u64().unwrap())
            .sum();
        assert_eq!(contributed as usize, total);
        // The other two reports are written by the usual writers.
        let junit = std::fs::read_to_string(out.join("junit.xml")).unwrap();
        assert_eq!(junit.matches("<testcase").count(), total);
        let md = std::fs::read_to_string(out.join("summary.md")).unwrap();
        assert!(
            md.contains("| clause | kind | tier | sim runtime | sim driver |"),
            "{md}"
        );

        // And `diff` agrees: nothing changed.
        let o = cli(&[
            "diff",
            full_dir.join("results.json").to_str().unwrap(),
            out.join("results.json").to_str().unwrap(),
        ]);
        assert_eq!(code(&o), 0, "N={n}: {}", stdout(&o));
    }
}

#[test]
fn mismatched_identity_is_refused_unless_forced() {
    let a = run("seed-a", &["--shard", "1/2", "--seed", "1"]);
    let b = run("seed-b", &["--shard", "2/2", "--seed", "2"]);
    let out = scratch("mismatch");
    let args = |force: bool| {
        let mut v = vec![
            "merge".to_string(),
            a.join("results.json").display().to_string(),
            b.join("results.json").display().to_string(),
            "--out".into(),
            out.display().to_string(),
        ];
        if force {
            v.push("--force".into());
        }
        v
    };
    let refused = args(false);
    let o = cli(&refused.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code(&o), 2, "{}", stdout(&o));
    let err = stderr(&o);
    assert!(err.contains("seed differs"), "{err}");
    assert!(err.contains("--force"), "{err}");
    assert!(!out.join("results.json").exists());

    let forced = args(true);
    let o = cli(&forced.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stderr(&o).contains("warning: merged anyway: seed differs"));
    let v = read_json(&out.join("results.json"));
    let clauses = Catalogue::load(&compiled_in_dir()).unwrap().len();
    assert_eq!(v["results"].as_array().unwrap().len(), clauses);

    // Another backend's dialect, a missing shard: refused too.
    let driver = run("driver", &["--shard", "2/2", "--dialect", "driver"]);
    let o = cli(&[
        "merge",
        a.join("results.json").to_str().unwrap(),
        driver.join("results.json").to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("dialect differs"), "{}", stderr(&o));
    let o = cli(&[
        "merge",
        a.join("results.json").to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("incomplete set of shards: missing 2/2"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn duplicate_results_are_refused_even_when_forced() {
    let whole = run("whole", &[]);
    let shard = run("half", &["--shard", "1/2"]);
    let out = scratch("dup");
    for inputs in [[&whole, &whole], [&whole, &shard], [&shard, &shard]] {
        let o = cli(&[
            "merge",
            inputs[0].join("results.json").to_str().unwrap(),
            inputs[1].join("results.json").to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--force",
        ]);
        assert_eq!(code(&o), 2, "{}", stdout(&o));
        let err = stderr(&o);
        assert!(err.contains("[runtime] is in both"), "{err}");
        assert!(!out.join("results.json").exists());
    }
}

#[test]
fn bad_shards_and_inputs_exit_2() {
    let cases: Vec<Vec<&str>> = vec![
        vec!["run", "--shard", "0/4"],
        vec!["run", "--shard", "5/4"],
        vec!["run", "--shard", "x"],
        vec!["run", "--shard", "1/0"],
        vec!["run", "--shard", "1/"],
        vec!["differential", "--backend", "sim", "--shard", "3/2"],
        vec!["merge", "/nonexistent/results.json", "--out", "/tmp/unused"],
        vec!["merge", "--out", "/tmp/unused"],
    ];
    for args in cases {
        let o = cli(&args);
        let err = stderr(&o);
        assert_eq!(code(&o), 2, "{args:?}: {err}");
        assert!(
            !err.is_empty() && !err.contains("panicked"),
            "{args:?}: {err}"
        );
    }
    let o = cli(&["run", "--shard", "5/4"]);
    assert!(
        stderr(&o).contains("K must be between 1 and N"),
        "{}",
        stderr(&o)
    );
    let o = cli(&["run", "--shard", "x"]);
    assert!(stderr(&o).contains("not K/N"), "{}", stderr(&o));
}

#[test]
fn more_shards_than_clauses_gives_empty_shards() {
    let out = run("empty", &["--filter", "mem.open.basic", "--shard", "2/3"]);
    let v = read_json(&out.join("results.json"));
    assert_eq!(v["results"].as_array().unwrap().len(), 0);
    assert_eq!(v["run"]["shard"], "2/3");
    let one = run("one", &["--filter", "mem.open.basic", "--shard", "1/3"]);
    let three = run("three", &["--filter", "mem.open.basic", "--shard", "3/3"]);
    let merged = scratch("empty-merged");
    let o = cli(&[
        "merge",
        one.join("results.json").to_str().unwrap(),
        out.join("results.json").to_str().unwrap(),
        three.join("results.json").to_str().unwrap(),
        "--out",
        merged.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v = read_json(&merged.join("results.json"));
    assert_eq!(outcomes(&v).len(), 1);
}

#[test]
fn differential_records_the_shard() {
    let out = scratch("differential");
    let o = cli(&[
        "differential",
        "--backend",
        "sim",
        "--shard",
        "2/4",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let v = read_json(&out.join("differential.json"));
    assert_eq!(v["sim"]["shard"], "2/4");
    assert_eq!(v["real"]["shard"], "2/4");
    // Shard 2 of 4 of the clauses, in the runtime dialect (the default).
    let clauses = Catalogue::load(&compiled_in_dir()).unwrap().len();
    let n = v["sim_results"].as_array().unwrap().len();
    assert!(
        (clauses / 4..=clauses.div_ceil(4)).contains(&n),
        "{n} of {clauses}"
    );
}
