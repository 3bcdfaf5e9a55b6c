//! `run --jobs N` on the simulator: the same results as a serial run.

mod common;
use common::*;
use serde_json::Value;

/// `results.json` without what differs between any two runs: times.
fn without_timings(mut v: Value) -> Value {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(map) => {
                map.retain(|k, _| !k.ends_with("_ms") && !k.ends_with("_us") && k != "started_at");
                map.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut v);
    v
}

/// The first place where `a` and `b` differ, as a JSON path.
fn first_difference(a: &Value, b: &Value, path: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| match (x.get(k), y.get(k)) {
                (Some(u), Some(v)) => first_difference(u, v, &format!("{path}.{k}")),
                _ => Some(format!("{path}.{k}: present on one side only")),
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (u, v))| first_difference(u, v, &format!("{path}[{i}]"))),
        _ if a == b => None,
        _ => Some(format!("{path}: {a} vs {b}")),
    }
}

fn assert_same(a: Value, b: Value) {
    let (a, b) = (without_timings(a), without_timings(b));
    if let Some(d) = first_difference(&a, &b, "") {
        panic!("the runs differ at {d}");
    }
}

fn results(args: &[&str]) -> Value {
    let out = scratch("run-jobs");
    let mut all = vec!["run", "--backend", "sim", "--dialect", "all", "-q", "--out"];
    all.push(out.to_str().unwrap());
    all.extend_from_slice(args);
    let o = cli(&all);
    assert!(
        matches!(code(&o), 0 | 1),
        "run {args:?} exited {}: {}",
        code(&o),
        stderr(&o)
    );
    let text = std::fs::read_to_string(out.join("results.json")).expect("results.json written");
    serde_json::from_str(&text).expect("results.json is JSON")
}

#[test]
fn three_jobs_on_the_simulator_give_the_serial_results_in_the_serial_order() {
    let serial = results(&["--jobs", "1"]);
    let parallel = results(&["--jobs", "3"]);
    let records = serial["results"].as_array().expect("results array");
    assert!(
        records.len() >= catalogue_len(),
        "every clause in every dialect: {} records",
        records.len()
    );
    assert_same(serial, parallel);
}

#[test]
fn jobs_auto_on_the_simulator_runs_serially() {
    let auto = results(&["--jobs", "auto", "--filter", "mem.open.*"]);
    assert!(!auto["results"].as_array().expect("results").is_empty());
    assert_same(auto, results(&["--filter", "mem.open.*"]));
}

#[test]
fn bad_jobs_values_are_usage_errors() {
    for bad in ["0", "x", "1000"] {
        let o = cli(&["run", "--backend", "sim", "--jobs", bad]);
        assert_eq!(code(&o), 2, "--jobs {bad}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("--jobs"),
            "--jobs {bad}: {}",
            stderr(&o)
        );
    }
}
