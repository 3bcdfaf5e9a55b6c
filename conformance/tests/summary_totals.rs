//! Readers of results.json count the totals from the results themselves:
//! a file's own `totals` are derived data and may have been edited.

mod common;

use common::{cli, code, scratch, stderr, stdout};

#[test]
fn summary_recounts_the_totals_of_an_edited_file() {
    let out = scratch("recount");
    let o = cli(&[
        "run",
        "-q",
        "--filter",
        "mem.open",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let path = out.join("results.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let n = v["results"].as_array().unwrap().len();
    assert!(n > 1);
    v["totals"]["Pass"] = 0.into();
    v["totals"]["Fail"] = 999.into();
    std::fs::write(&path, serde_json::to_string(&v).unwrap()).unwrap();
    let o = cli(&["summary", path.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let md = stdout(&o);
    assert!(!md.contains("999"), "{md}");
    let passes = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["status"] == "Pass")
        .count();
    assert!(md.contains(&passes.to_string()), "{md}");
}
