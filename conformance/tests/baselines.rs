//! The committed GPU baselines (`reports/baselines/*.json`) carry each
//! clause's tier, as the catalogue states it. They were measured before
//! tiers existed and are re-labelled, never re-measured: with
//! `IPC_RELABEL_BASELINES=1` this test writes the catalogue's tiers into
//! them (and schema 2; `gated_tiers` stays absent, since every result gated
//! those runs), then checks them.

use ipc_conformance::catalogue::{self, Tier};
use ipc_conformance::report::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn baselines() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../reports/baselines");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
}

fn catalogue_tiers() -> BTreeMap<String, Tier> {
    let cat = catalogue::locate(None).unwrap().load().unwrap();
    cat.clauses
        .iter()
        .filter_map(|c| c.tier.map(|t| (c.id.clone(), t)))
        .collect()
}

#[test]
fn committed_baselines_carry_the_catalogue_tiers() {
    let tiers = catalogue_tiers();
    let files = baselines();
    assert!(files.len() >= 4, "{files:?}");
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let mut report = json::from_str(&text).unwrap();
        if std::env::var_os("IPC_RELABEL_BASELINES").is_some() {
            for r in &mut report.results {
                r.tier = tiers.get(&r.id).copied();
            }
            let relabelled = ipc_conformance::RunReport::new(report.run.clone(), report.results);
            std::fs::write(&path, json::to_string(&relabelled).unwrap()).unwrap();
            report = relabelled;
        }
        assert_eq!(report.gated_tiers(), None, "{}", path.display());
        for r in &report.results {
            assert_eq!(
                r.tier,
                tiers.get(&r.id).copied(),
                "{}: {} is labelled {:?}, the catalogue says otherwise \
                 (IPC_RELABEL_BASELINES=1 re-labels)",
                path.display(),
                r.id,
                r.tier
            );
            assert!(r.tier.is_some(), "{}: {} has no tier", path.display(), r.id);
        }
    }
}
