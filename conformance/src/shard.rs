//! Splitting a run over several CI machines (`run --shard K/N`) and merging
//! the shards' `results.json` files back into one report (`merge`).
//!
//! # Partition
//!
//! The selected clauses (after `--filter`) are sorted by id (then path) and
//! dealt round-robin: the clause at 0-based position `i` belongs to shard
//! `i % N + 1`. Shards therefore differ in size by at most one clause, every
//! clause is in exactly one shard, and the assignment depends only on the
//! set of selected ids, never on the machine. Every shard of one CI run must
//! use the same catalogue and the same `--filter`; adding a clause may move
//! later clauses to another shard, which is harmless because all shards of
//! one pipeline run the same revision. Each selected clause runs in every
//! `--dialect` of its shard, so a clause's dialects stay together.
//!
//! # Merge
//!
//! [`merge`] concatenates shard results into one [`RunReport`] whose totals
//! are the sum of the inputs'. It refuses (unless forced) inputs that differ
//! in identity ([`IDENTITY_FIELDS`]), a mix of sharded and unsharded inputs,
//! shards of different counts, a repeated shard and an incomplete set of
//! shards; it always refuses a result (clause id, dialect) that appears in
//! two inputs.

use crate::catalogue::Clause;
use crate::model::{ClauseResult, MergeInfo, MergedInput, RunInfo, RunReport};
use ipc_harness::Dialect;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Shard `index` of `count` (both 1-based: `2/4` is the second of four).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

impl Shard {
    /// The shard `index`/`count`, validated (1 ≤ index ≤ count).
    pub fn new(index: u32, count: u32) -> Result<Shard, String> {
        if count == 0 {
            return Err(format!(
                "shard {index}/{count}: the number of shards N must be at least 1"
            ));
        }
        if count > crate::limits::MAX_SHARDS {
            return Err(format!(
                "shard {index}/{count}: N is above the limit of {} shards",
                crate::limits::MAX_SHARDS
            ));
        }
        if index == 0 || index > count {
            return Err(format!(
                "shard {index}/{count}: K must be between 1 and N (shards are numbered from 1)"
            ));
        }
        Ok(Shard { index, count })
    }

    /// Whether the item at 0-based position `position` of the sorted list
    /// belongs to this shard (round-robin).
    pub fn owns(&self, position: usize) -> bool {
        position % self.count as usize == (self.index - 1) as usize
    }

    /// This shard's part of `clauses`: sorted by id (then path), dealt
    /// round-robin. The result is in sorted order.
    pub fn select<'a>(&self, clauses: &[&'a Clause]) -> Vec<&'a Clause> {
        let mut sorted: Vec<&'a Clause> = clauses.to_vec();
        sorted.sort_by(|a, b| a.id.cmp(&b.id).then_with(|| a.path.cmp(&b.path)));
        sorted
            .into_iter()
            .enumerate()
            .filter(|(i, _)| self.owns(*i))
            .map(|(_, c)| c)
            .collect()
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl FromStr for Shard {
    type Err = String;

    fn from_str(s: &str) -> Result<Shard, String> {
        let syntax = || format!("'{s}' is not K/N (shard K of N, 1 ≤ K ≤ N, e.g. 2/4)");
        let (k, n) = s.trim().split_once('/').ok_or_else(syntax)?;
        let k: u32 = k.trim().parse().map_err(|_| syntax())?;
        let n: u32 = n.trim().parse().map_err(|_| syntax())?;
        Shard::new(k, n)
    }
}

/// `--shard` applied to a clause list: everything when `None`.
pub fn apply(shard: Option<Shard>, clauses: Vec<&Clause>) -> Vec<&Clause> {
    match shard {
        Some(s) => s.select(&clauses),
        None => clauses,
    }
}

// ---------------------------------------------------------------------------
// Merge

/// Run-info fields that must agree between merged inputs (unless forced).
pub const IDENTITY_FIELDS: [&str; 16] = [
    "tool_version",
    "backend",
    "dialect",
    "seed",
    "step_timeout_ms",
    "git_revision",
    "filter",
    "gpu_name",
    "compute_capability",
    "driver_version",
    "cuda_driver_version",
    "cuda_runtime_version",
    "device_count",
    "semantics",
    "workers",
    "gated_tiers",
];

/// The value of an identity field, as shown in messages.
fn identity_value(run: &RunInfo, field: &str) -> String {
    let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "null".into());
    match field {
        "tool_version" => run.tool_version.clone(),
        "backend" => run.backend.clone(),
        "dialect" => run.dialect.clone(),
        "seed" => run.seed.to_string(),
        "step_timeout_ms" => run.step_timeout_ms.to_string(),
        "git_revision" => opt(&run.git_revision),
        "filter" => format!("[{}]", run.filter.join(", ")),
        "gpu_name" => opt(&run.gpu_name),
        "compute_capability" => opt(&run.compute_capability),
        "driver_version" => opt(&run.driver_version),
        "cuda_driver_version" => opt(&run.cuda_driver_version),
        "cuda_runtime_version" => opt(&run.cuda_runtime_version),
        "device_count" => run
            .device_count
            .map(|d| d.to_string())
            .unwrap_or_else(|| "null".into()),
        "semantics" => run
            .semantics
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(","),
        "workers" => opt(&run.workers),
        "gated_tiers" => crate::model::tiers_text(run.gated_tiers.as_deref()),
        _ => String::new(),
    }
}

/// A merged report and what was let through (with `force`) or is worth
/// knowing.
#[derive(Debug, Clone)]
pub struct Merged {
    pub report: RunReport,
    pub warnings: Vec<String>,
}

/// Merge the reports of several runs (normally the shards of one run).
/// `inputs` pairs a label (the file path) with its report.
pub fn merge(inputs: Vec<(String, RunReport)>, force: bool) -> Result<Merged, String> {
    let Some((first_path, first)) = inputs.first() else {
        return Err("nothing to merge: no results.json given".into());
    };
    let mut problems: Vec<String> = Vec::new();

    // Identity.
    for (path, r) in inputs.iter().skip(1) {
        for field in IDENTITY_FIELDS {
            let (a, b) = (
                identity_value(&first.run, field),
                identity_value(&r.run, field),
            );
            if a != b {
                problems.push(format!(
                    "{field} differs: {first_path} has '{a}', {path} has '{b}'"
                ));
            }
        }
    }

    // Shards.
    let mut shards: Vec<(Shard, &str)> = Vec::new();
    let mut unsharded: Vec<&str> = Vec::new();
    for (path, r) in &inputs {
        match &r.run.shard {
            Some(label) => {
                let s: Shard = label
                    .parse()
                    .map_err(|e| format!("{path}: run.shard: {e}"))?;
                shards.push((s, path));
            }
            None => unsharded.push(path),
        }
    }
    if !shards.is_empty() {
        if !unsharded.is_empty() {
            problems.push(format!(
                "a mix of shards and whole runs: {} {} not a shard",
                unsharded.join(", "),
                if unsharded.len() == 1 { "is" } else { "are" }
            ));
        }
        let counts: BTreeSet<u32> = shards.iter().map(|(s, _)| s.count).collect();
        if counts.len() > 1 {
            problems.push(format!(
                "shards of different counts: {}",
                shards
                    .iter()
                    .map(|(s, p)| format!("{s} ({p})"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        } else {
            let n = *counts.iter().next().expect("one count");
            let mut seen: BTreeMap<u32, &str> = BTreeMap::new();
            for (s, p) in &shards {
                if let Some(other) = seen.insert(s.index, p) {
                    problems.push(format!("shard {s} given twice: {other} and {p}"));
                }
            }
            let missing: Vec<String> = (1..=n)
                .filter(|k| !seen.contains_key(k))
                .map(|k| format!("{k}/{n}"))
                .collect();
            if !missing.is_empty() {
                problems.push(format!(
                    "incomplete set of shards: missing {}",
                    missing.join(", ")
                ));
            }
        }
    }

    let mut warnings = Vec::new();
    if !problems.is_empty() {
        if !force {
            return Err(format!(
                "cannot merge: {} (use --force to merge anyway)",
                problems.join("; ")
            ));
        }
        warnings.extend(problems.into_iter().map(|p| format!("merged anyway: {p}")));
    }

    // A result may come from one input only.
    let mut owner: BTreeMap<(String, &str), usize> = BTreeMap::new();
    for (i, (path, r)) in inputs.iter().enumerate() {
        for res in &r.results {
            let k = (res.id.clone(), res.dialect.as_str());
            match owner.get(&k) {
                Some(&j) if j != i => {
                    return Err(format!(
                        "cannot merge: {} [{}] is in both {} and {} (shards overlap, or the same run was given twice)",
                        res.id, res.dialect, inputs[j].0, path
                    ));
                }
                Some(_) => {
                    return Err(format!(
                        "cannot merge: {} [{}] is in {} twice (a results.json holds each clause and dialect once)",
                        res.id, res.dialect, path
                    ));
                }
                None => {
                    owner.insert(k, i);
                }
            }
        }
    }

    for (path, r) in &inputs {
        if r.run.interrupted {
            warnings.push(format!(
                "{path} is an interrupted run: its clauses that did not run are missing"
            ));
        }
    }

    let mut run = first.run.clone();
    run.started_at = inputs
        .iter()
        .map(|(_, r)| r.run.started_at.clone())
        .min()
        .unwrap_or_default();
    run.duration_ms = inputs
        .iter()
        .map(|(_, r)| r.run.duration_ms)
        .fold(0.0, f64::max);
    let hosts: BTreeSet<Option<&str>> = inputs.iter().map(|(_, r)| r.run.host.as_deref()).collect();
    run.host = match hosts.into_iter().collect::<Vec<_>>().as_slice() {
        [one] => one.map(str::to_string),
        _ => None,
    };
    let dialects: BTreeSet<&str> = inputs.iter().map(|(_, r)| r.run.dialect.as_str()).collect();
    if dialects.len() > 1 {
        let used: Vec<Dialect> = Dialect::ALL
            .into_iter()
            .filter(|d| {
                inputs
                    .iter()
                    .any(|(_, r)| r.results.iter().any(|r| r.dialect == *d))
            })
            .collect();
        run.dialect = if used.len() == Dialect::ALL.len() {
            "all".into()
        } else {
            used.iter()
                .map(|d| d.as_str())
                .collect::<Vec<_>>()
                .join(",")
        };
    }
    run.interrupted = inputs.iter().any(|(_, r)| r.run.interrupted);
    run.shard = None;
    let mut shard_labels: Vec<Shard> = shards.iter().map(|(s, _)| *s).collect();
    shard_labels.sort_by_key(|s| (s.count, s.index));
    run.merged = Some(MergeInfo {
        shards: shard_labels.iter().map(Shard::to_string).collect(),
        inputs: inputs
            .iter()
            .map(|(path, r)| MergedInput {
                path: path.clone(),
                shard: r.run.shard.clone(),
                host: r.run.host.clone(),
                started_at: r.run.started_at.clone(),
                duration_ms: r.run.duration_ms,
                interrupted: r.run.interrupted,
                results: r.results.len(),
            })
            .collect(),
    });
    // Results in run order: dialect (runtime, driver), then id and path;
    // moved out of the inputs, not copied.
    let mut results: Vec<ClauseResult> = inputs.into_iter().flat_map(|(_, r)| r.results).collect();
    let dialect_rank = |d: Dialect| Dialect::ALL.iter().position(|x| *x == d).unwrap_or(0);
    results.sort_by(|a, b| {
        dialect_rank(a.dialect)
            .cmp(&dialect_rank(b.dialect))
            .then_with(|| a.id.cmp(&b.id))
            .then_with(|| a.path.cmp(&b.path))
    });
    Ok(Merged {
        report: RunReport::new(run, results),
        warnings,
    })
}

// ---------------------------------------------------------------------------
// `ipc-conformance merge`

/// `ipc-conformance merge A.json B.json ... --out DIR [--force]`.
#[derive(Debug, Clone, clap::Args)]
pub struct MergeArgs {
    /// results.json files of the shards (or of runs to combine).
    #[arg(required = true, value_name = "RESULTS_JSON")]
    pub results: Vec<PathBuf>,
    /// Report directory for the merged results.json, junit.xml, summary.md.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Merge inputs whose identity differs (backend, dialect, GPU, driver,
    /// revision, ...) or whose shards are incomplete; a clause that appears
    /// in two inputs is refused even so.
    #[arg(long)]
    pub force: bool,
}

/// Run `merge` and return the merged report (its exit code is the command
/// line's to decide); `Err` is a usage or I/O error (exit 2).
pub fn command(a: &MergeArgs) -> Result<RunReport, String> {
    let inputs: Vec<(String, RunReport)> = a
        .results
        .iter()
        .map(|p| p.display().to_string())
        .zip(crate::diff::load_all(&a.results)?)
        .collect();
    let n = inputs.len();
    let merged = merge(inputs, a.force)?;
    write_merged(&a.out, &merged)?;
    let report = &merged.report;
    let shards = report
        .run
        .merged
        .as_ref()
        .map(|m| m.shards.clone())
        .unwrap_or_default();
    say(&format!(
        "merged {n} file{}{}: {}",
        if n == 1 { "" } else { "s" },
        if shards.is_empty() {
            String::new()
        } else {
            format!(" (shards {})", shards.join(", "))
        },
        report.totals_line()
    ));
    say(&format!(
        "reports: {} (results.json, junit.xml, summary.md)",
        a.out.display()
    ));
    Ok(merged.report)
}

fn write_merged(out: &Path, merged: &Merged) -> Result<(), String> {
    for w in &merged.warnings {
        let _ = std::io::Write::write_all(
            &mut std::io::stderr().lock(),
            format!("ipc-conformance: warning: {w}\n").as_bytes(),
        );
    }
    crate::report::write_run(out, &merged.report).map_err(|e| e.to_string())?;
    Ok(())
}

fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixtures::{result, run};
    use ipc_harness::Status;

    #[test]
    fn shard_syntax() {
        assert_eq!(
            "2/4".parse::<Shard>().unwrap(),
            Shard { index: 2, count: 4 }
        );
        assert_eq!(" 1 / 1 ".parse::<Shard>().unwrap().to_string(), "1/1");
        for bad in [
            "0/4", "5/4", "x", "1/0", "0/0", "/4", "2/", "-1/4", "1/4/2", "",
        ] {
            let err = bad.parse::<Shard>().unwrap_err();
            assert!(!err.is_empty(), "{bad}");
        }
        assert!("5/4"
            .parse::<Shard>()
            .unwrap_err()
            .contains("between 1 and N"));
        assert!("x".parse::<Shard>().unwrap_err().contains("K/N"));
    }

    #[test]
    fn round_robin_is_balanced_and_exact() {
        for n in 1..=7u32 {
            let mut owners = vec![0; 23];
            for k in 1..=n {
                let s = Shard::new(k, n).unwrap();
                for (i, o) in owners.iter_mut().enumerate() {
                    if s.owns(i) {
                        *o += 1;
                    }
                }
                let size = (0..23).filter(|i| s.owns(*i)).count();
                assert!(size == 23 / n as usize || size == 23 / n as usize + 1);
            }
            assert!(owners.iter().all(|&o| o == 1), "{n}: {owners:?}");
        }
    }

    fn shard_run(shard: Option<&str>, ids: &[&str]) -> RunReport {
        let mut r = run(
            "sim",
            "runtime",
            ids.iter()
                .map(|id| result(id, Status::Pass, Dialect::Runtime, "sim"))
                .collect(),
        );
        r.run.shard = shard.map(str::to_string);
        r
    }

    #[test]
    fn merge_sums_and_orders() {
        let a = shard_run(Some("1/2"), &["a.x", "c.x"]);
        let mut b = shard_run(Some("2/2"), &["b.x"]);
        b.results[0].status = Status::Fail;
        b.run.host = Some("other".into());
        b.run.started_at = "2026-01-01T00:00:00.000Z".into();
        b.run.duration_ms = 99.0;
        let m = merge(vec![("a".into(), a), ("b".into(), b)], false).unwrap();
        let r = &m.report;
        let ids: Vec<&str> = r.results.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["a.x", "b.x", "c.x"]);
        assert_eq!(r.totals["Pass"], 2);
        assert_eq!(r.totals["Fail"], 1);
        assert_eq!(r.run.host, None);
        assert_eq!(r.run.started_at, "2026-01-01T00:00:00.000Z");
        assert_eq!(r.run.duration_ms, 99.0);
        assert_eq!(r.run.shard, None);
        let info = r.run.merged.as_ref().unwrap();
        assert_eq!(info.shards, ["1/2", "2/2"]);
        assert_eq!(info.inputs[1].results, 1);
        assert!(m.warnings.is_empty());
    }

    #[test]
    fn merge_refusals() {
        let ok = |s, ids: &[&str]| shard_run(Some(s), ids);
        // Incomplete.
        let e = merge(vec![("a".into(), ok("1/3", &["a.x"]))], false).unwrap_err();
        assert!(e.contains("missing 2/3, 3/3"), "{e}");
        // Forced: a warning instead.
        let m = merge(vec![("a".into(), ok("1/3", &["a.x"]))], true).unwrap();
        assert!(m.warnings[0].contains("missing"), "{:?}", m.warnings);
        // Different counts; repeated shard; mixed.
        let e = merge(
            vec![
                ("a".into(), ok("1/2", &["a.x"])),
                ("b".into(), ok("2/3", &["b.x"])),
            ],
            false,
        )
        .unwrap_err();
        assert!(e.contains("different counts"), "{e}");
        let e = merge(
            vec![
                ("a".into(), ok("1/1", &["a.x"])),
                ("b".into(), ok("1/1", &["b.x"])),
            ],
            false,
        )
        .unwrap_err();
        assert!(e.contains("given twice"), "{e}");
        let e = merge(
            vec![
                ("a".into(), ok("1/1", &["a.x"])),
                ("b".into(), shard_run(None, &["b.x"])),
            ],
            false,
        )
        .unwrap_err();
        assert!(e.contains("mix of shards"), "{e}");
        // Duplicates: refused even with --force.
        let e = merge(
            vec![
                ("a".into(), shard_run(None, &["a.x"])),
                ("b".into(), shard_run(None, &["a.x"])),
            ],
            true,
        )
        .unwrap_err();
        assert!(e.contains("a.x [runtime] is in both a and b"), "{e}");
        // Identity.
        let mut cuda = ok("2/2", &["b.x"]);
        cuda.run.backend = "cuda".into();
        cuda.run.driver_version = Some("580.159.04".into());
        cuda.run.workers = Some("policy; the driver's default hardware queues".into());
        let e = merge(
            vec![
                ("a".into(), ok("1/2", &["a.x"])),
                ("b".into(), cuda.clone()),
            ],
            false,
        )
        .unwrap_err();
        assert!(
            e.contains("backend differs: a has 'sim', b has 'cuda'"),
            "{e}"
        );
        assert!(e.contains("driver_version differs"), "{e}");
        assert!(e.contains("workers differs"), "{e}");
        assert!(e.contains("--force"), "{e}");
        let m = merge(
            vec![("a".into(), ok("1/2", &["a.x"])), ("b".into(), cuda)],
            true,
        )
        .unwrap();
        assert_eq!(m.report.results.len(), 2);
        assert_eq!(m.warnings.len(), 3);
    }

    #[test]
    fn summary_notes_shards_merges_and_interruptions() {
        let mut a = shard_run(Some("1/2"), &["a.x"]);
        assert_eq!(
            crate::report::markdown::run_notes(std::slice::from_ref(&a)),
            ["run 1: shard 1/2 of the selected clauses"]
        );
        a.run.interrupted = true;
        let b = shard_run(Some("2/2"), &["b.x"]);
        let m = merge(vec![("a".into(), a), ("b".into(), b)], false).unwrap();
        let md = crate::report::markdown::summary(&[m.report]);
        assert!(
            md.contains("- run 1: merged from 2 files (shards 1/2, 2/2)"),
            "{md}"
        );
        assert!(
            md.contains("- run 1: **interrupted**: only the 2 results"),
            "{md}"
        );
        assert!(!shard_run(None, &["a.x"]).run.interrupted);
        assert!(crate::report::markdown::run_notes(&[shard_run(None, &["a.x"])]).is_empty());
    }

    #[test]
    fn forced_merge_of_two_dialects_names_both() {
        let rt = shard_run(None, &["a.x"]);
        let mut dr = run(
            "sim",
            "driver",
            vec![result("a.x", Status::Pass, Dialect::Driver, "sim")],
        );
        dr.run.shard = None;
        assert!(merge(
            vec![("r".into(), rt.clone()), ("d".into(), dr.clone())],
            false
        )
        .is_err());
        let m = merge(vec![("d".into(), dr), ("r".into(), rt)], true).unwrap();
        // `all` is every dialect, hip included.
        assert_eq!(m.report.run.dialect, "runtime,driver");
        assert_eq!(m.report.results[0].dialect, Dialect::Runtime);
        assert_eq!(m.report.results.len(), 2);
    }
}
