//! Committed explore findings from real GPUs, replayed on the simulator.
//!
//! Each findings folder holds the shrunk scenario files an `explore
//! --backend cuda` run wrote, and a `findings.toml` saying for each file
//! whether the simulator was fixed to answer as the GPU did (`fixed`), the
//! difference is understood and deliberately not modelled (`explained`), or
//! nobody knows yet (`open`). Files written since the finding files carry
//! both runs step by step end with a `# Both runs` block: a fixed finding
//! must then answer as the GPU did at every step, an open or explained one
//! must still differ somewhere (so a fix moves it to `fixed`). Older files
//! are judged at their header's step. `harness-fixed` marks a finding that
//! was a bug of this tool (fixed), with no driver step to replay. `varies`
//! marks a finding the GPU itself answered both ways: the run the header
//! quotes (the recorded one) differed from the simulator at its step, and
//! the file's own later run on fresh workers answered as the simulator at
//! every step.

use ipc_harness::scenario::{self, ExecOptions};
use ipc_harness::Dialect;
use ipc_mock_driver::SimBackend;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    file: String,
    status: String,
    /// The clause that now records the GPU's answer (fixed findings).
    #[serde(default)]
    clause: Option<String>,
    why: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Status {
    finding: Vec<Entry>,
}

/// Explore runs since 2026-11-28: each folder holds finding files with
/// their `findings.toml` and the recordings of every case, so it is
/// replayed both ways (a new run is added here once).
const EXPLORE_RUNS: [&str; 27] = [
    "reports/h200x2-nvlink_driver-580.159.04/2026-11-28/explore-28112026",
    "reports/h200x2-nvlink_driver-580.159.04/2026-11-28/explore-61128",
    "reports/h200x2-nvlink_driver-580.159.04/2026-11-28/explore-29112026",
    "reports/h200x2-nvlink_driver-580.159.04/2026-11-28/explore-30112026",
    "reports/h200_driver-580.159.04/2026-11-28/explore-1122026",
    "reports/h200_driver-580.159.04/2026-11-28/explore-2122026",
    "reports/h200_driver-580.159.04/2026-11-28/explore-3122026",
    "reports/h200_driver-580.159.04/2026-11-28/explore-4122026",
    "reports/h200_driver-580.159.04/2026-11-28/explore-5122026",
    "reports/h200_driver-580.159.04/2026-11-29/explore-6122026",
    "reports/h200_driver-580.159.04/2026-11-29/explore-7122026",
    "reports/h200_driver-580.159.04/2026-11-29/explore-8122026",
    "reports/h200_driver-580.159.04/2026-11-29/explore-9122026",
    "reports/h200_driver-580.159.04/2026-11-29/explore-10122026",
    "reports/h200_driver-580.159.04/2026-11-29/explore-11122026",
    "reports/h200_driver-580.159.04/2026-11-29/explore-12122026",
    "reports/h200_driver-580.159.04/2026-11-29/explore-13122026",
    "reports/h200_driver-580.159.04/2026-11-29/explore-14122026",
    "reports/h200_driver-580.159.04/2026-11-29/explore-15122026",
    "reports/h200_driver-580.159.04/2026-11-29/explore-16122026",
    "reports/h200_driver-580.159.04/2026-11-29/explore-17122026",
    "reports/h200_driver-580.159.04/2026-11-29/explore-18122026",
    "reports/h200_driver-580.159.04/2026-11-29/explore-19122026",
    "reports/h200_driver-580.159.04/2026-11-29/explore-20122026",
    "reports/h200_driver-580.159.04/2026-11-29/explore-21122026",
    "reports/h200_driver-580.159.04/2026-11-29/explore-22122026",
    "reports/h200_driver-580.159.04/2026-11-29/explore-23122026",
];

/// Earlier folders with finding files but no recordings.
const FINDINGS_ONLY: [&str; 4] = [
    "reports/h100-80gb-hbm3_driver-580.159.04/2026-11-23/explore-jobs6",
    "reports/h100-80gb-hbm3_driver-580.159.04/2026-11-23/explore-seed2027",
    "reports/h100-80gb-hbm3_driver-580.159.04/2026-11-25/benchmark/explore",
    "reports/h100-80gb-hbm3_driver-580.159.04/2026-11-27/benchmark-worker-fits/explore-jobs",
];

/// The folders whose finding files are replayed here, relative to the
/// workspace root.
fn finding_folders() -> impl Iterator<Item = &'static str> {
    FINDINGS_ONLY.into_iter().chain(EXPLORE_RUNS)
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `(dialect, seed, header line, header's real outcome)`.
fn header(text: &str) -> (Dialect, u64, Option<(usize, String)>) {
    let mut lines = text.lines();
    let message = lines.nth(1).unwrap_or_default();
    let case = lines.next().unwrap_or_default();
    let seed = case
        .split("(seed ")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .and_then(|s| s.parse().ok())
        .expect("a seed in the header");
    let dialect = if case.contains("dialect driver") {
        Dialect::Driver
    } else {
        Dialect::Runtime
    };
    let at = message
        .strip_prefix("# line ")
        .and_then(|m| m.split(' ').next())
        .and_then(|n| n.parse().ok())
        .map(|n| {
            let real = message.rsplit("real driver ").next().unwrap_or_default();
            (n, real.to_string())
        });
    (dialect, seed, at)
}

/// The file line of a header's step: files shrunk since 2026-11-23 name
/// the file's own line (shrink.rs), older ones count the body.
fn body_line(text: &str, line: usize) -> usize {
    let step = text
        .lines()
        .nth(1)
        .and_then(|m| m.split('\'').nth(1))
        .unwrap_or_default();
    // The header writes sizes as the trace does (`1KiB` for the file's
    // `1024`: explore-jobs6 case 94), so the op and its first operand are
    // compared, not the whole step.
    let head: String = step
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ");
    let holds = |n: usize| {
        n > 0
            && text
                .lines()
                .nth(n - 1)
                .is_some_and(|l| !head.is_empty() && l.contains(&head))
    };
    if holds(line) {
        line
    } else {
        line + ipc_conformance::explore::HEADER_LINES
    }
}

/// An outcome text with an error's name dropped for its code: a file
/// written before the error table named a code says `cudaError(49) (49)`
/// where today's says `cudaErrorIncompatibleDriverContext (49)`.
fn by_code(outcome: &str) -> String {
    // A crash's detail is each backend's own words (the real one names the
    // worker's pid): explore compares crashes as crashes.
    if outcome.starts_with("crash") {
        return "crash".to_string();
    }
    match outcome.strip_prefix("error ") {
        Some(rest) if rest.ends_with(')') => match rest.rsplit_once(" (") {
            Some((_, code)) => format!("error ({code}"),
            None => outcome.to_string(),
        },
        _ => outcome.to_string(),
    }
}

/// The real column of the `# Both runs` block: line -> outcome text.
fn real_column(text: &str) -> Option<BTreeMap<usize, String>> {
    let start = text.find("# Both runs of the steps above")?;
    let mut out = BTreeMap::new();
    for l in text[start..].lines().skip(1) {
        let Some(rest) = l.strip_prefix("# ") else {
            continue;
        };
        let rest = rest.get(2..).unwrap_or_default().trim_start();
        let Some(after_l) = rest.strip_prefix('L') else {
            continue;
        };
        let line: usize = after_l
            .split(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .expect("a line number");
        let real = rest.rsplit_once(" | ").map(|(_, r)| r).unwrap_or_default();
        out.insert(line, real.to_string());
    }
    Some(out)
}

/// Two outcome texts that differ only in where a value landed: the same
/// kind of value (`ok ptr`, `ok fd`, `ok range` of one size, `ok handle` of
/// an interprocess event) under another label, as
/// `explore::record::placement_only` judges steps.
fn placement_text(sim: &str, real: &str) -> bool {
    let a: Vec<&str> = sim.split_whitespace().collect();
    let b: Vec<&str> = real.split_whitespace().collect();
    let same_shape =
        a.len() == b.len() && a.len() >= 3 && a[0] == "ok" && b[0] == "ok" && a[1] == b[1];
    if !same_shape || a == b {
        return false;
    }
    match a[1] {
        "ptr" | "fd" => true,
        // `ok range base LABEL size N`: the size must agree.
        "range" => a.get(5) == b.get(5),
        "handle" => a[2].starts_with("eh") && b[2].starts_with("eh"),
        _ => false,
    }
}

#[test]
fn placement_texts_are_told_from_other_differences() {
    assert!(placement_text("ok ptr p1.p3", "ok ptr p1.p1"));
    assert!(placement_text("ok handle eh1", "ok handle eh2"));
    assert!(placement_text(
        "ok range base p0.p1 size 1000",
        "ok range base p0.p2 size 1000"
    ));
    assert!(!placement_text(
        "ok range base p0.p1 size 1000",
        "ok range base p0.p2 size 2097152"
    ));
    assert!(!placement_text("ok handle h1", "ok handle h2"));
    assert!(!placement_text("ok ptr p1.p1", "ok ptr p1.p1"));
    assert!(!placement_text(
        "error cudaErrorInvalidValue (1)",
        "ok ptr p1.p2"
    ));
}

#[test]
fn committed_gpu_findings_replay_as_their_status_says() {
    let mut checked = 0;
    let catalogue =
        ipc_conformance::catalogue::Catalogue::load(&root().join("conformance/clauses"))
            .expect("the catalogue");
    for folder in finding_folders() {
        let dir = root().join(folder);
        let status_text =
            std::fs::read_to_string(dir.join("findings.toml")).expect("findings.toml");
        let status: Status = toml::from_str(&status_text).expect("findings.toml parses");
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .expect("folder")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().to_string())
            .filter(|n| n.ends_with(".ipc"))
            .collect();
        files.sort();
        let mut listed: Vec<String> = status.finding.iter().map(|e| e.file.clone()).collect();
        listed.sort();
        assert_eq!(
            files, listed,
            "{folder}: findings.toml must list every file once"
        );
        for e in &status.finding {
            let name = format!("{folder}/{}", e.file);
            assert!(
                [
                    "fixed",
                    "explained",
                    "open",
                    "placement",
                    "harness-fixed",
                    "varies"
                ]
                .contains(&e.status.as_str()),
                "{name}: status {}",
                e.status
            );
            assert!(!e.why.trim().is_empty(), "{name}: a reason is required");
            if e.status == "fixed" {
                let clause = e.clause.as_deref().unwrap_or_default();
                assert!(
                    catalogue.clauses.iter().any(|cl| cl.id == clause),
                    "{name}: a fixed finding names the clause that records it ({clause:?})"
                );
            }
            let text = std::fs::read_to_string(dir.join(&e.file)).expect("readable");
            let (dialect, seed, at) = header(&text);
            let sc = scenario::parse(&text, Path::new(&name)).expect("parses");
            let opts = ExecOptions {
                dialect,
                seed,
                ..ExecOptions::default()
            };
            let run = scenario::execute(&sc, &SimBackend::default(), &opts);
            let sim: BTreeMap<usize, String> = run
                .trace
                .steps
                .iter()
                .map(|s| {
                    (
                        s.line,
                        ipc_conformance::report::text::outcome_text(&s.outcome),
                    )
                })
                .collect();
            let recorded = real_column(&text);
            let differing: Vec<usize> = match &recorded {
                Some(real) => real
                    .iter()
                    .filter(|(l, r)| sim.get(l).map(|s| by_code(s)) != Some(by_code(r)))
                    .map(|(l, _)| *l)
                    .collect(),
                None => {
                    // No step named: a finding about the tool, not the driver.
                    let Some((line, real)) = at.clone() else {
                        assert_eq!(e.status, "harness-fixed", "{name}: no step to replay");
                        checked += 1;
                        continue;
                    };
                    // Older files: header line numbers count the body.
                    let line = body_line(&text, line);
                    if sim.get(&line) == Some(&real) {
                        vec![]
                    } else {
                        vec![line]
                    }
                }
            };
            if e.status == "fixed" {
                assert!(
                    differing.is_empty(),
                    "{name} (fixed): the simulator differs from the GPU at lines {differing:?}"
                );
            } else if e.status == "varies" {
                assert!(
                    differing.is_empty(),
                    "{name} (varies): the file's own run differs from the simulator at lines {differing:?}"
                );
                let (line, real) = at.clone().expect("a header naming the step");
                let line = body_line(&text, line);
                assert_ne!(
                    sim.get(&line).map(|s| by_code(s)),
                    Some(by_code(&real)),
                    "{name} (varies): the header's run answers as the simulator at line {line}"
                );
            } else {
                assert!(
                    !differing.is_empty(),
                    "{name} ({}) now answers as the GPU did: mark it fixed",
                    e.status
                );
            }
            if e.status == "placement" {
                // The first differing step differs only in where a value
                // landed (`explore::record::placement_only`).
                let line = differing[0];
                let real = recorded
                    .as_ref()
                    .and_then(|r| r.get(&line))
                    .cloned()
                    .or_else(|| at.clone().map(|(_, r)| r))
                    .unwrap_or_default();
                let sim = sim.get(&line).cloned().unwrap_or_default();
                assert!(
                    placement_text(&sim, &real),
                    "{name} (placement): line {line} differs in more than a placement: {sim} | {real}"
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 40, "{checked} findings replayed");
}

/// Recorded real runs (`explore --record`) judged against today's simulator.
/// Each folder's `known-differences.txt` lists every recorded case the
/// simulator does not answer as the GPU did, with its first differing step;
/// the folder's README says why for each group. A simulator change that
/// makes another recorded case differ fails here (a regression against
/// measured hardware); one that makes a listed case agree fails too, until
/// the list is updated (`IPC_UPDATE_KNOWN=1` rewrites it), so the list is
/// always exactly the open differences.
///
/// These are the earlier recordings, without finding files of their own;
/// [`recording_folders`] adds the explore runs.
const RECORDINGS_ONLY: [&str; 7] = [
    "reports/h100-80gb-hbm3_driver-580.159.04/2026-11-23/recorded-seed3001",
    "reports/h100-80gb-hbm3_driver-580.159.04/2026-11-23/recorded-seed4001",
    "reports/h100-80gb-hbm3_driver-580.159.04/2026-11-23/recorded-seed5001",
    "reports/h100-80gb-hbm3_driver-580.159.04/2026-11-24/recorded-seed7001",
    "reports/h100-80gb-hbm3_driver-580.159.04/2026-11-24/recorded-seed8001",
    "reports/h200x2-nvlink_driver-580.159.04/2026-11-23/recorded-seed6001",
    "reports/h100-80gb-hbm3_driver-580.159.04/2026-11-25/recorded-seed9001",
];

/// The folders whose recordings are replayed here.
fn recording_folders() -> impl Iterator<Item = &'static str> {
    RECORDINGS_ONLY.into_iter().chain(EXPLORE_RUNS)
}

/// `explained.txt`: `case N: why` lines (`#` comments), case -> why.
fn read_explained(path: &std::path::Path) -> std::collections::BTreeMap<u64, String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (case, why) = l
                .strip_prefix("case ")
                .and_then(|r| r.split_once(':'))
                .unwrap_or_else(|| panic!("{}: not `case N: why`: {l}", path.display()));
            let n: u64 = case
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("{}: bad case number: {l}", path.display()));
            assert!(
                !why.trim().is_empty(),
                "{}: case {n} has no reason",
                path.display()
            );
            (n, why.trim().to_string())
        })
        .collect()
}

#[test]
fn recorded_gpu_runs_differ_only_where_known() {
    use ipc_conformance::explore::{record, ExploreOptions};
    use ipc_harness::Backend;
    for folder in recording_folders() {
        let dir = root().join(folder);
        let mut records = Vec::new();
        for e in std::fs::read_dir(&dir).expect("folder").flatten() {
            let p = e.path();
            if p.to_string_lossy().ends_with(".jsonl.gz") {
                records.extend(record::read(&p).expect("the recording reads"));
            }
        }
        records.sort_by_key(|r| r.case.index);
        assert!(!records.is_empty(), "{folder}: no recording");
        // The simulator as `explore --replay` makes it.
        let make = |devices: Option<u32>| -> Result<Box<dyn Backend>, String> {
            use ipc_conformance::backend::{make, BackendKind, SimSettings};
            let settings = SimSettings {
                devices,
                ..SimSettings::default()
            };
            make(BackendKind::Sim, &settings)
        };
        let summary = record::replay(
            &ExploreOptions::default(),
            &make,
            &records,
            folder,
            None,
            &mut |_, _| {},
        )
        .expect("replay");
        eprintln!("{folder}: {}", summary.per_tier_line());
        // Every placement is a difference, and its tier is incidental.
        let placements: Vec<&str> = summary
            .differing
            .iter()
            .filter(|d| d.placement)
            .map(|d| d.tier.as_str())
            .collect();
        assert_eq!(placements.len() as u64, summary.differing_placements);
        assert!(
            placements.iter().all(|t| *t == "incidental"),
            "{folder}: a placement attributed to a firmer tier: {placements:?}"
        );
        let now: String = summary
            .differing
            .iter()
            .map(|d| format!("case {} ({}): {}\n", d.index, d.dialect, d.first))
            .collect();
        // Differences whose cause is known and outside the simulator's
        // reach (`explained.txt`: `case N: why`); every other one is open.
        let explained = read_explained(&dir.join("explained.txt"));
        let differing: Vec<u64> = summary.differing.iter().map(|d| d.index).collect();
        let stale: Vec<&u64> = explained
            .keys()
            .filter(|c| !differing.contains(c))
            .collect();
        assert!(
            stale.is_empty(),
            "{folder}: explained.txt explains cases that no longer differ: {stale:?}"
        );
        let header = format!(
            "# {} of {} recorded cases differ from the simulator (first differing step each): {} explained (explained.txt), {} open; {} only in where a value landed (placements).\n# Regenerate: IPC_UPDATE_KNOWN=1 cargo test -p ipc-conformance --test findings_replay\n",
            summary.differing_cases,
            summary.cases,
            explained.len(),
            summary.differing_cases as usize - explained.len(),
            summary.differing_placements
        );
        let path = dir.join("known-differences.txt");
        if std::env::var_os("IPC_UPDATE_KNOWN").is_some() {
            std::fs::write(&path, header.clone() + &now).expect("write the list");
        }
        let known = std::fs::read_to_string(&path).unwrap_or_default();
        let known_cases: Vec<&str> = known.lines().filter(|l| l.starts_with("case ")).collect();
        let now_cases: Vec<&str> = now.lines().collect();
        let new: Vec<&&str> = now_cases
            .iter()
            .filter(|l| !known_cases.contains(l))
            .collect();
        let gone: Vec<&&str> = known_cases
            .iter()
            .filter(|l| !now_cases.contains(l))
            .collect();
        assert!(
            new.is_empty() && gone.is_empty(),
            "{folder}: the simulator's agreement with the recorded GPU runs changed.\n\
             Newly differing (regressions against hardware, or a changed first difference):\n{}\n\
             No longer differing as listed (progress: update the list with IPC_UPDATE_KNOWN=1):\n{}",
            new.iter().map(|l| format!("  {l}")).collect::<Vec<_>>().join("\n"),
            gone.iter().map(|l| format!("  {l}")).collect::<Vec<_>>().join("\n"),
        );
    }
}

/// Clause runs on real GPUs whose traces today's simulator must reproduce
/// step by step (what `differential --backend cuda` checked on the day):
/// results.json or differential.json files under reports/.
const GPU_CLAUSE_RUNS: [&str; 35] = [
    "reports/h200x2-nvlink_driver-580.159.04/all-areas/differential/differential.json.gz",
    "reports/h100-80gb-hbm3_driver-580.159.04/2026-11-23/differential-and-recording-clauses/differential/differential.json.gz",
    "reports/h100-80gb-hbm3_driver-580.159.04/2026-11-23/differential-and-recording-clauses/new-clauses/results.json",
    "reports/h100-80gb-hbm3_driver-580.159.04/2026-11-23/differential-and-recording-clauses/placement-clauses/results.json",
    "reports/h100-80gb-hbm3_driver-580.159.04/2026-11-23/run-and-differential-all-dialects/differential/differential.json.gz",
    "reports/h100-80gb-hbm3_driver-580.159.04/2026-11-23/differential-after-event-and-vmm-rules/differential/differential.json.gz",
    "reports/h200x2-nvlink_driver-580.159.04/2026-11-23/catalogue-differential-all-dialects/differential/differential.json.gz",
    "reports/h100-80gb-hbm3_driver-580.159.04/2026-11-23/differential-changed-clauses-and-corrupted-fields/differential/differential.json.gz",
    "reports/h100-80gb-hbm3_driver-580.159.04/2026-11-25/catalogue-differential/differential.json.gz",
    "reports/h100-80gb-hbm3_driver-580.159.04/2026-11-25/crash-clauses/results.json",
    "reports/h200x2-nvlink_driver-580.159.04/2026-11-28/new-clauses/differential.json.gz",
    "reports/h200_driver-580.159.04/2026-11-29/clause-files-seed-6122026/clauses-results.json.gz",
    "reports/h200_driver-580.159.04/2026-11-29/explore-10122026/clauses-results.json.gz",
    "reports/h200_driver-580.159.04/2026-11-29/explore-11122026/clauses-results.json.gz",
    "reports/h200_driver-580.159.04/2026-11-29/explore-12122026/clauses-results.json.gz",
    "reports/h200_driver-580.159.04/2026-11-29/explore-13122026/clauses-results.json.gz",
    "reports/h200_driver-580.159.04/2026-11-29/explore-14122026/clauses-results.json.gz",
    "reports/h200_driver-580.159.04/2026-11-29/explore-15122026/clauses-results.json.gz",
    "reports/h200_driver-580.159.04/2026-11-29/explore-16122026/clauses-results.json.gz",
    "reports/h200_driver-580.159.04/2026-11-29/probes-seed-16122026/clauses-results.json.gz",
    "reports/h200_driver-580.159.04/2026-11-29/explore-17122026/clauses-results.json.gz",
    "reports/h200_driver-580.159.04/2026-11-29/probes-case-995/clauses-results.json.gz",
    "reports/h200_driver-580.159.04/2026-11-29/explore-18122026/clauses-results.json.gz",
    "reports/h200_driver-580.159.04/2026-11-29/probes-seed-18122026/clauses-results.json.gz",
    "reports/h200_driver-580.159.04/2026-11-29/explore-21122026/clauses-results.json.gz",
    "reports/h200_driver-580.159.04/2026-11-29/explore-22122026/clauses-results.json.gz",
    "reports/h200_driver-580.159.04/2026-11-29/explore-6122026/clauses-results.json.gz",
    "reports/h200_driver-580.159.04/2026-11-29/probes-claims/clauses-results-1.json.gz",
    "reports/h200_driver-580.159.04/2026-11-29/probes-claims/clauses-results-2.json.gz",
    "reports/h200_driver-580.159.04/2026-11-29/probes-claims/clauses-results-3.json.gz",
    "reports/h200_driver-580.159.04/2026-11-29/probes-claims/clauses-results-4.json.gz",
    "reports/h200_driver-580.159.04/2026-11-29/probes-open-claims/clauses-results.json.gz",
    "reports/h200_driver-580.159.04/2026-11-29/probes-own-copy-context/clauses-results-1.json.gz",
    "reports/h200_driver-580.159.04/2026-11-29/probes-seed-10122026/clauses-results-1.json.gz",
    "reports/h200_driver-580.159.04/2026-11-29/probes-seed-10122026/clauses-results-2.json.gz",
];

/// Steps of committed GPU clause runs the simulator's defaults do not
/// reproduce, each with the reason: (run, clause id, dialect, why). The
/// defaults follow the H100; these are other GPUs or runs that disagree.
const GPU_CLAUSE_DEVIATIONS: [(&str, &str, &str, &str); 2] = [
    (
        "reports/h200x2-nvlink_driver-580.159.04/2026-11-23/catalogue-differential-all-dialects/differential/differential.json.gz",
        "mem.handle.corrupted-fields",
        "driver",
        "2 x H200, whole-catalogue differential of 2026-11-23: a copy with byte 28 flipped opened at a new address; the same clause on the same GPUs (all-areas run) and on the H100 (every whole-catalogue differential) was AlreadyMapped",
    ),
    (
        "reports/h100-80gb-hbm3_driver-580.159.04/2026-11-25/catalogue-differential/differential.json.gz",
        "mem.lifetime.exporter-exit-before-format",
        "runtime",
        "H100, whole-catalogue differential of 2026-11-25: the damaged copy's opens after the exporter's exit were InvalidValue, not InvalidHandle; three fresh runs of the clause the same day, and every earlier run on the H100 and the 2 x H200, gave InvalidHandle (2026-11-25/exit-before-format-reruns)",
    ),
];

/// The differential, offline: every clause that ran on the GPU (and still
/// exists) gives the same observation at every step on the simulator, so a
/// simulator change that breaks agreement with measured hardware fails CI
/// without a GPU. Undefined clauses are recorded, not judged, as in
/// `differential`.
#[test]
fn the_simulator_reproduces_the_committed_gpu_clause_traces() {
    use ipc_conformance::catalogue::{Catalogue, ClauseKind};
    use ipc_conformance::runner::run_clause;
    use ipc_harness::scenario::Expectation;
    use ipc_harness::{Status, Trace};
    let catalogue = Catalogue::load(&root().join("conformance/clauses")).expect("the catalogue");
    let sim = SimBackend::default();
    let mut compared = 0;
    let mut compared_per_tier: std::collections::BTreeMap<&str, usize> = Default::default();
    let mut unmeasured = 0;
    let mut either_answers = 0;
    let mut deviations = 0;
    let mut rewritten = Vec::new();
    let mut differing = Vec::new();
    for file in GPU_CLAUSE_RUNS {
        let text =
            ipc_conformance::compressed::read_to_string(&root().join(file)).expect("readable");
        let v: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        let results = v
            .get("real_results")
            .or_else(|| v.get("results"))
            .and_then(|r| r.as_array())
            .cloned()
            .unwrap_or_default();
        assert!(!results.is_empty(), "{file}: no results");
        for r in results {
            let id = r["id"].as_str().unwrap_or_default();
            let status: Status = serde_json::from_value(r["status"].clone()).expect("a status");
            // Broken: the harness failed, not the driver (what followed
            // is not the scenario's answer); the next GPU run judges it.
            if matches!(status, Status::NotSupported | Status::Broken) {
                continue;
            }
            let Some(clause) = catalogue.clauses.iter().find(|c| c.id == id) else {
                continue; // renamed or removed since: the run names the old id
            };
            if clause.kind == Some(ClauseKind::Undefined) {
                continue;
            }
            let dialect: Dialect = serde_json::from_value(r["dialect"].clone()).expect("a dialect");
            let real: Trace = serde_json::from_value(r["trace"].clone()).expect("a trace");
            let seed = r["seed"].as_u64().unwrap_or(1);
            let ran = run_clause(
                clause,
                &sim,
                dialect,
                seed,
                std::time::Duration::from_secs(20),
            );
            let Some(trace) = ran.trace else {
                differing.push(format!(
                    "{id} [{dialect}]: no trace on the simulator ({:?})",
                    ran.status
                ));
                continue;
            };
            if GPU_CLAUSE_DEVIATIONS
                .iter()
                .any(|(run, cid, d, _)| *run == file && *cid == id && *d == dialect.to_string())
            {
                deviations += 1;
                continue;
            }
            // A clause rewritten after its run (other steps where the GPU ran
            // some) is not the scenario the GPU answered: the next GPU run
            // judges it.
            if real
                .steps
                .iter()
                .zip(&trace.steps)
                .any(|(r, s)| r.op != s.op)
            {
                rewritten.push(format!("{id} [{dialect}] ({file})"));
                continue;
            }
            compared += 1;
            *compared_per_tier
                .entry(clause.tier.map_or("-", |t| t.as_str()))
                .or_default() += 1;
            // A clause extended after the run has steps the GPU never ran:
            // they cannot be judged here (the next GPU run measures them);
            // every step the GPU did run must still agree.
            // A clause shortened since has GPU steps it no longer runs.
            for d in trace.differences(&real) {
                if d.right.is_none() || d.left.is_none() {
                    unmeasured += 1;
                    continue;
                }
                // A read the clause lets answer either of two byte patterns
                // (`bytes 5a*16 | bytes 00*16`: the GPU answers both ways,
                // run to run), where both runs hold: not a difference.
                let either_bytes = clause
                    .scenario
                    .as_ref()
                    .and_then(|sc| sc.steps.get(d.index))
                    .is_some_and(|step| {
                        step.expect.in_force(dialect).items.iter().any(|e| {
                            matches!(e, Expectation::OneOf(alternatives)
                                if alternatives.iter().all(|a| matches!(a, Expectation::Bytes(_))))
                        })
                    });
                let held = |t: &Trace| {
                    t.steps
                        .get(d.index)
                        .and_then(|s| s.check.as_ref())
                        .is_some_and(|c| c.passed)
                };
                if either_bytes && held(&trace) && held(&real) {
                    either_answers += 1;
                    continue;
                }
                differing.push(format!(
                    "{id} [{dialect}] line {} '{}': simulator {:?}, GPU {:?}",
                    d.line, d.op, d.left, d.right
                ));
            }
        }
    }
    assert!(compared >= 200, "{compared} clause runs compared");
    eprintln!("{compared} clause runs compared (per tier: {compared_per_tier:?}); {either_answers} reads answered the other of two byte patterns their clause admits; {unmeasured} steps added to or removed from clauses since their GPU run not judged; rewritten since their run, not judged: {rewritten:?}");
    assert_eq!(
        deviations,
        GPU_CLAUSE_DEVIATIONS.len(),
        "every listed deviation names a clause run that exists"
    );
    assert!(
        differing.is_empty(),
        "the simulator no longer reproduces these GPU traces:\n{}",
        differing.join("\n")
    );
}
