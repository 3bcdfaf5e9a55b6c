//! `ipc-conformance portability` and `--profile`, run as a user would, and
//! the catalogue's contract clauses checked under every profile.

mod common;
use common::{cli, code, scratch, stderr, stdout};
use ipc_conformance::catalogue::{Catalogue, ClauseKind};
use ipc_harness::scenario::ExecOptions;
use ipc_harness::Dialect;
use ipc_mock_driver::portability::check_scenario;
use ipc_mock_driver::{Profile, SimConfig};
use std::path::{Path, PathBuf};

const VA_REUSE: &str = "\
devices 1
process owner device=0
owner: a = malloc 2MiB
owner: c = malloc 2MiB
owner: free a
owner: b = malloc 2MiB
";

const PORTABLE: &str = "\
devices 1
process owner device=0
process peer device=0
owner: a = malloc 2MiB
owner: fill a 0xab
owner: h = ipc_get a
owner: send h -> peer
owner: sync
peer: p = ipc_open h
peer: read p 0 16 => bytes ab*16
peer: ipc_close p
";

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn a_portable_scenario_exits_0() {
    let dir = scratch("portability-ok");
    let file = write(&dir, "portable.ipc", PORTABLE);
    let o = cli(&["portability", "--dialect", "all", &file]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert_eq!(
        stdout(&o).matches(": portable (").count(),
        3,
        "{}",
        stdout(&o)
    );
}

#[test]
fn a_scenario_that_depends_on_va_reuse_exits_1_naming_the_choice() {
    let dir = scratch("portability-va");
    let file = write(&dir, "reuse.ipc", VA_REUSE);
    let portable = write(&dir, "portable.ipc", PORTABLE);
    let o = cli(&["portability", &file, &portable]);
    let out = stdout(&o);
    assert_eq!(code(&o), 1, "{out}{}", stderr(&o));
    assert!(
        out.contains("reuse.ipc [runtime]: depends on the profile (tiers: incidental"),
        "{out}"
    );
    assert!(out.contains("documented line 6 `b = malloc 2MiB`"), "{out}");
    assert!(
        out.contains("va_reuse=never (measured top-down; incidental)"),
        "{out}"
    );
    assert!(
        out.contains("1 of 2 scenario runs depend on the profile"),
        "{out}"
    );
    // --quiet keeps only the file that depends on the profile.
    let o = cli(&["portability", "--quiet", &file, &portable]);
    assert!(!stdout(&o).contains("portable.ipc"), "{}", stdout(&o));
}

#[test]
fn a_malformed_scenario_is_a_usage_error_naming_the_place() {
    let dir = scratch("portability-bad");
    let bad = write(
        &dir,
        "bad.ipc",
        "devices 1\nprocess owner device=0\nowner: a = mallok 2MiB\n",
    );
    let good = write(&dir, "portable.ipc", PORTABLE);
    let o = cli(&["portability", &good, &bad]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("bad.ipc:3:12: unknown op 'mallok'"),
        "{}",
        stderr(&o)
    );
    assert!(stdout(&o).is_empty(), "nothing ran: {}", stdout(&o));
    let missing = dir.join("missing.ipc").display().to_string();
    let o = cli(&["portability", &missing]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("cannot read file"), "{}", stderr(&o));
}

#[test]
fn an_unknown_profile_is_a_usage_error_listing_the_valid_ones() {
    let dir = scratch("portability-unknown");
    let file = write(&dir, "portable.ipc", PORTABLE);
    let out = dir.join("out").display().to_string();
    for args in [
        vec!["run", "--profile", "nvidia", "--out", &out],
        vec!["scenario", "--profile", "nvidia", &file],
        vec![
            "explore",
            "--profile",
            "nvidia",
            "--cases",
            "1",
            "--out",
            &out,
        ],
        vec![
            "differential",
            "--backend",
            "sim",
            "--profile",
            "nvidia",
            "--out",
            &out,
        ],
    ] {
        let o = cli(&args);
        let err = stderr(&o);
        assert_eq!(code(&o), 2, "{args:?}: {err}");
        assert!(
            err.contains("--profile: unknown profile 'nvidia' (valid: measured, documented, hip)"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn a_profile_changes_what_a_scenario_sees() {
    let dir = scratch("portability-profile");
    let file = write(
        &dir,
        "reuse.ipc",
        &format!("{VA_REUSE}owner: x = malloc 2MiB\n").replace(
            "owner: b = malloc 2MiB\n",
            "owner: b = malloc 2MiB => == a\n",
        ),
    );
    assert_eq!(code(&cli(&["scenario", &file])), 0);
    assert_eq!(
        code(&cli(&["scenario", "--profile", "documented", &file])),
        1
    );
    // --semantics applies on top of the profile.
    let o = cli(&[
        "scenario",
        "--profile",
        "documented",
        "--semantics",
        "va_reuse=top-down",
        &file,
    ]);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
}

#[test]
fn semantics_lists_tiers_and_profiles() {
    let o = cli(&["semantics"]);
    let out = stdout(&o);
    assert_eq!(code(&o), 0);
    assert!(out.contains("tier incidental:"), "{out}");
    assert!(out.contains("tier contract:"), "{out}");
    for p in Profile::ALL {
        assert!(out.contains(&format!("\n{} - ", p.as_str())), "{p}: {out}");
    }
    assert!(out.contains("    va_reuse = never    (tier of the measured value: incidental)"));
}

fn clauses_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("clauses")
}

/// A clause the documents back (`kind: specified`) must see the same
/// outcome at every step under `documented` as under `measured`: a
/// difference is a bug in the clause or in the profile.
#[test]
fn contract_clauses_are_the_same_under_measured_and_documented() {
    let catalogue = Catalogue::load(&clauses_dir()).expect("the catalogue");
    let mut checked = 0;
    let mut differing = Vec::new();
    for clause in &catalogue.clauses {
        if clause.kind != Some(ClauseKind::Specified) {
            continue;
        }
        let scenario = clause.scenario.as_ref().expect("a specified clause parses");
        for dialect in Dialect::ALL.into_iter().filter(|&d| clause.applies_to(d)) {
            let opts = ExecOptions {
                dialect,
                ..ExecOptions::default()
            };
            let r = check_scenario(scenario, &opts, &SimConfig::default());
            checked += 1;
            for d in r
                .divergences
                .iter()
                .filter(|d| d.profile == Profile::Documented)
            {
                differing.push(format!(
                    "{} [{dialect}] line {} `{}`: {}",
                    clause.id,
                    d.line,
                    d.op,
                    d.causes.text()
                ));
            }
        }
    }
    assert!(checked >= 40, "{checked} specified clause runs");
    assert!(differing.is_empty(), "{differing:#?}");
}

/// Every contract clause passes under every profile, in every dialect it
/// holds for: a profile sets only what the documents leave open, so a
/// contract clause that fails under one either asserts more than its
/// documents promise (make it incidental, and put the documented part in a
/// clause of its own) or the profile contradicts the documents.
#[test]
fn every_contract_clause_passes_under_every_profile() {
    use ipc_conformance::runner::run_clause;
    use ipc_harness::{Status, Tier};
    use ipc_mock_driver::SimBackend;
    let catalogue = Catalogue::load(&clauses_dir()).expect("the catalogue");
    let contract: Vec<_> = catalogue
        .clauses
        .iter()
        .filter(|c| c.tier == Some(Tier::Contract))
        .collect();
    assert!(contract.len() >= 50, "{} contract clauses", contract.len());
    let mut failing = Vec::new();
    for profile in Profile::ALL {
        for clause in &contract {
            for dialect in Dialect::ALL {
                let mut config = SimConfig::with_profile(profile);
                if let Some(devices) = clause.scenario.as_ref().map(|s| s.devices) {
                    config.devices = config.devices.max(devices);
                }
                let backend = SimBackend::new(config);
                let r = run_clause(
                    clause,
                    &backend,
                    dialect,
                    1,
                    ExecOptions::default().step_timeout,
                );
                if !matches!(r.status, Status::Pass | Status::NotSupported) {
                    failing.push(format!(
                        "{} [{profile}, {dialect}]: {}",
                        clause.id, r.message
                    ));
                }
            }
        }
    }
    assert!(failing.is_empty(), "{failing:#?}");
}
