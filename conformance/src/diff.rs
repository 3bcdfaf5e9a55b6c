//! `ipc-conformance diff OLD.json NEW.json`: what changed between two runs
//! (a driver upgrade, a new GPU, a new revision of the suite).
//!
//! Results are matched by (clause id, dialect); a clause id repeated within
//! one file (duplicate ids are Broken) is matched by its occurrence. For each
//! pair the status is compared, and the traces step by step with
//! [`Trace::differences`] (observations only: timings and error spellings
//! are ignored). A result on one side only is *added* or *removed*. The
//! runs' identity (backend, GPU, driver, CUDA versions, revision, start) is
//! shown, never judged: comparing two drivers is the point.
//!
//! Each change belongs to its clause's tier (the result's, else the
//! catalogue's for files written before tiers, else none: `-`). Changes are
//! grouped and counted per tier, so a driver upgrade that only moves
//! incidental behaviour reads as such and a contract change stands out.
//!
//! Exit codes: 0 nothing changed in a gated tier (`--tiers`, contract and
//! relied-on by default; changes of other tiers are still listed), 1 a
//! change in a gated tier (or of a clause without a tier), 2 unreadable or
//! malformed input.

use crate::catalogue::{ClauseKind, Tier};
use crate::model::{tier_name, tiers_text, ClauseResult, RunInfo, RunReport, TierList};
use crate::report::markdown::{cell, status_symbol};
use crate::report::text::outcome_text;
use ipc_harness::trace::{StepDifference, StepOutcome};
use ipc_harness::{Dialect, Status, Trace};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Version of the `diff --format json` document. Version 2 added the
/// tiers: each change's `tier`, `gated_tiers`, `gated_changed`, `per_tier`.
pub const DIFF_SCHEMA_VERSION: u32 = 2;

/// Read and validate the `results.json` files of one command (`diff`,
/// `merge`, `summary`). Errors name the file and say why (I/O error, JSON
/// syntax error with line and column, missing or mistyped field,
/// unsupported `schema_version`). The files are bounded all together by
/// [`crate::limits::MAX_RESULTS_BYTES`] (inflated):
/// the work grows with what is read, so the bound is on the sum.
pub fn load_all<P: AsRef<Path>>(paths: &[P]) -> Result<Vec<RunReport>, String> {
    let limit = crate::limits::MAX_RESULTS_BYTES;
    let mut left = limit;
    let mut reports = Vec::with_capacity(paths.len());
    for path in paths {
        let path = path.as_ref();
        let what = if left == limit {
            "a results.json".to_string()
        } else {
            format!(
                "a results.json after the {} bytes of the files before it \
                 (the files one command reads share a limit of {limit} bytes)",
                limit - left
            )
        };
        let text = crate::compressed::read_to_string_bounded(path, left, &what)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        left -= text.len() as u64;
        reports.push(
            crate::report::json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?,
        );
    }
    Ok(reports)
}

/// One side of the comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Side {
    /// The file as given on the command line.
    pub path: String,
    /// Its `run` object, unchanged.
    pub run: RunInfo,
    pub totals: BTreeMap<String, usize>,
}

/// A result present on both sides whose status or trace changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    pub id: String,
    pub title: String,
    pub kind: Option<ClauseKind>,
    /// The clause's tier (`None`: neither file nor catalogue knows it).
    pub tier: Option<Tier>,
    pub dialect: Dialect,
    pub old_status: Status,
    pub new_status: Status,
    pub old_message: String,
    pub new_message: String,
    /// Steps whose observation differs (`left` = old, `right` = new; null
    /// where that side has no such step). May be empty for a status change.
    pub differences: Vec<StepDifference>,
}

/// A result present on one side only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OneSided {
    pub id: String,
    pub title: String,
    pub kind: Option<ClauseKind>,
    pub tier: Option<Tier>,
    pub dialect: Dialect,
    pub status: Status,
    pub message: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DiffTotals {
    pub old_results: usize,
    pub new_results: usize,
    /// Results present on both sides.
    pub compared: usize,
    pub unchanged: usize,
    pub status_changed: usize,
    /// Same status, different trace.
    pub trace_changed: usize,
    pub added: usize,
    pub removed: usize,
}

/// The changes of one tier.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TierChanges {
    /// `contract`, `relied-on`, `incidental`, or `-` (no tier known).
    pub tier: String,
    /// Whether a change of this tier fails the diff (exit 1).
    pub gated: bool,
    pub compared: usize,
    pub unchanged: usize,
    pub status_changed: usize,
    pub trace_changed: usize,
    pub added: usize,
    pub removed: usize,
}

impl TierChanges {
    pub fn changes(&self) -> usize {
        self.status_changed + self.trace_changed + self.added + self.removed
    }
}

/// The whole comparison (`diff --format json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunDiff {
    pub schema_version: u32,
    pub old: Side,
    pub new: Side,
    /// True when anything below is non-empty.
    pub changed: bool,
    /// `--tiers`: the tiers whose changes fail the diff.
    pub gated_tiers: Vec<Tier>,
    /// True when a change is of a gated tier or of a clause without a tier
    /// (exit code 1).
    pub gated_changed: bool,
    pub totals: DiffTotals,
    /// Counts per tier, in tier order, `-` last; every tier is present, `-`
    /// only when some result has no tier.
    pub per_tier: Vec<TierChanges>,
    pub status_changes: Vec<Change>,
    pub trace_changes: Vec<Change>,
    pub added: Vec<OneSided>,
    pub removed: Vec<OneSided>,
}

impl RunDiff {
    pub fn exit_code(&self) -> u8 {
        if self.gated_changed {
            crate::exit::EXIT_FAILURES
        } else {
            crate::exit::EXIT_OK
        }
    }
}

/// (dialect rank, id, occurrence of that id and dialect in its file).
type Key = (usize, String, usize);

fn keyed(results: &[ClauseResult]) -> BTreeMap<Key, &ClauseResult> {
    let mut seen: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    let mut out = BTreeMap::new();
    for r in results {
        let n = seen.entry((r.dialect.as_str(), r.id.as_str())).or_default();
        out.insert((dialect_rank(r.dialect), r.id.clone(), *n), r);
        *n += 1;
    }
    out
}

fn dialect_rank(d: Dialect) -> usize {
    Dialect::ALL.iter().position(|x| *x == d).unwrap_or(0)
}

fn one_sided(r: &ClauseResult, tier: Option<Tier>) -> OneSided {
    OneSided {
        id: r.id.clone(),
        title: r.title.clone(),
        kind: r.kind,
        tier,
        dialect: r.dialect,
        status: r.status,
        message: r.message.clone(),
    }
}

fn ran_no_step(r: &ClauseResult) -> bool {
    r.trace.as_ref().is_none_or(|t| t.steps.is_empty())
}

fn trace_differences(old: Option<&Trace>, new: Option<&Trace>) -> Vec<StepDifference> {
    match (old, new) {
        (None, None) => Vec::new(),
        (a, b) => {
            let empty = Trace::default();
            a.unwrap_or(&empty).differences(b.unwrap_or(&empty))
        }
    }
}

/// Rank of a tier in reports: [`Tier::ALL`] order, no tier last.
fn tier_rank(tier: Option<Tier>) -> usize {
    tier.and_then(|t| Tier::ALL.iter().position(|x| *x == t))
        .unwrap_or(Tier::ALL.len())
}

/// Compare two runs. `old_path` and `new_path` label the sides; changes of
/// `gated` tiers fail the diff. A result without a tier takes the other
/// side's, else `catalogue`'s for its id.
pub fn compare(
    old_path: &str,
    old: &RunReport,
    new_path: &str,
    new: &RunReport,
    gated: &[Tier],
    catalogue: &BTreeMap<String, Tier>,
) -> RunDiff {
    let old_keyed = keyed(&old.results);
    let new_keyed = keyed(&new.results);
    let tier_of = |a: &ClauseResult, b: Option<&ClauseResult>| {
        a.tier
            .or(b.and_then(|b| b.tier))
            .or_else(|| catalogue.get(&a.id).copied())
    };
    let mut d = RunDiff {
        schema_version: DIFF_SCHEMA_VERSION,
        old: Side {
            path: old_path.to_string(),
            run: old.run.clone(),
            totals: old.totals.clone(),
        },
        new: Side {
            path: new_path.to_string(),
            run: new.run.clone(),
            totals: new.totals.clone(),
        },
        changed: false,
        gated_tiers: gated.to_vec(),
        gated_changed: false,
        per_tier: Vec::new(),
        totals: DiffTotals {
            old_results: old.results.len(),
            new_results: new.results.len(),
            ..DiffTotals::default()
        },
        status_changes: Vec::new(),
        trace_changes: Vec::new(),
        added: Vec::new(),
        removed: Vec::new(),
    };
    let mut per_tier: BTreeMap<usize, TierChanges> = Tier::ALL
        .iter()
        .map(|t| {
            let counts = TierChanges {
                tier: t.as_str().to_string(),
                gated: gated.contains(t),
                ..TierChanges::default()
            };
            (tier_rank(Some(*t)), counts)
        })
        .collect();
    fn counts(per_tier: &mut BTreeMap<usize, TierChanges>, tier: Option<Tier>) -> &mut TierChanges {
        per_tier
            .entry(tier_rank(tier))
            .or_insert_with(|| TierChanges {
                tier: "-".into(),
                gated: true,
                ..TierChanges::default()
            })
    }
    for (k, o) in &old_keyed {
        let Some(n) = new_keyed.get(k) else {
            let tier = tier_of(o, None);
            counts(&mut per_tier, tier).removed += 1;
            d.removed.push(one_sided(o, tier));
            continue;
        };
        let tier = tier_of(n, Some(o));
        counts(&mut per_tier, tier).compared += 1;
        d.totals.compared += 1;
        let mut differences = trace_differences(o.trace.as_ref(), n.trace.as_ref());
        // A status change to or from a clause that ran no step (NotSupported,
        // Broken) is told by the statuses; listing every step adds nothing.
        if o.status != n.status && (ran_no_step(o) || ran_no_step(n)) {
            differences.clear();
        }
        let change = Change {
            id: n.id.clone(),
            title: n.title.clone(),
            kind: n.kind,
            tier,
            dialect: n.dialect,
            old_status: o.status,
            new_status: n.status,
            old_message: o.message.clone(),
            new_message: n.message.clone(),
            differences,
        };
        if o.status != n.status {
            counts(&mut per_tier, tier).status_changed += 1;
            d.status_changes.push(change);
        } else if !change.differences.is_empty() {
            counts(&mut per_tier, tier).trace_changed += 1;
            d.trace_changes.push(change);
        } else {
            counts(&mut per_tier, tier).unchanged += 1;
            d.totals.unchanged += 1;
        }
    }
    for (k, n) in &new_keyed {
        if !old_keyed.contains_key(k) {
            let tier = tier_of(n, None);
            counts(&mut per_tier, tier).added += 1;
            d.added.push(one_sided(n, tier));
        }
    }
    // Grouped by tier; within a tier, dialect then id as before (stable).
    d.status_changes.sort_by_key(|c| tier_rank(c.tier));
    d.trace_changes.sort_by_key(|c| tier_rank(c.tier));
    d.added.sort_by_key(|c| tier_rank(c.tier));
    d.removed.sort_by_key(|c| tier_rank(c.tier));
    d.per_tier = per_tier.into_values().collect();
    d.gated_changed = d.per_tier.iter().any(|t| t.gated && t.changes() > 0);
    d.totals.status_changed = d.status_changes.len();
    d.totals.trace_changed = d.trace_changes.len();
    d.totals.added = d.added.len();
    d.totals.removed = d.removed.len();
    d.changed =
        d.totals.status_changed + d.totals.trace_changed + d.totals.added + d.totals.removed > 0;
    d
}

// ---------------------------------------------------------------------------
// Rendering

/// `no changes: 51 results compared` or
/// `3 changes: 1 status changed, 1 trace changed, 1 added, 0 removed (50 compared, 48 unchanged)`.
pub fn totals_line(d: &RunDiff) -> String {
    let t = &d.totals;
    if !d.changed {
        return format!(
            "no changes: {} result{} compared, all identical",
            t.compared,
            if t.compared == 1 { "" } else { "s" }
        );
    }
    let n = t.status_changed + t.trace_changed + t.added + t.removed;
    format!(
        "{n} change{}: {} status changed, {} trace changed, {} added, {} removed ({} compared, {} unchanged)",
        if n == 1 { "" } else { "s" },
        t.status_changed,
        t.trace_changed,
        t.added,
        t.removed,
        t.compared,
        t.unchanged
    )
}

type IdentityRow = (&'static str, String, String);

/// The identity rows shown at the top: (name, old, new).
pub fn identity_rows(d: &RunDiff) -> Vec<IdentityRow> {
    type Getter = fn(&Side) -> String;
    let rows: [(&'static str, Getter); 16] = [
        ("file", |s| s.path.clone()),
        ("backend", |s| s.run.backend.clone()),
        ("dialect", |s| s.run.dialect.clone()),
        ("GPU", |s| dash(&s.run.gpu_name)),
        ("compute capability", |s| dash(&s.run.compute_capability)),
        ("driver", |s| dash(&s.run.driver_version)),
        ("CUDA driver", |s| dash(&s.run.cuda_driver_version)),
        ("CUDA runtime", |s| dash(&s.run.cuda_runtime_version)),
        ("devices", |s| {
            s.run
                .device_count
                .map(|d| d.to_string())
                .unwrap_or_else(|| "—".into())
        }),
        ("workers", |s| dash(&s.run.workers)),
        ("git revision", |s| dash(&s.run.git_revision)),
        ("started at", |s| s.run.started_at.clone()),
        ("tool", |s| s.run.tool_version.clone()),
        ("seed", |s| s.run.seed.to_string()),
        ("shard", |s| dash(&s.run.shard)),
        ("results", |s| {
            format!(
                "{}{}",
                totals_of(&s.totals),
                if s.run.interrupted {
                    " (interrupted)"
                } else {
                    ""
                }
            )
        }),
    ];
    rows.iter()
        .map(|(name, f)| (*name, f(&d.old), f(&d.new)))
        .collect()
}

/// `51 (50 Pass, 1 NotSupported)` from a `totals` object.
fn totals_of(totals: &BTreeMap<String, usize>) -> String {
    let all: usize = totals.values().sum();
    let parts: Vec<String> = crate::model::ALL_STATUSES
        .iter()
        .filter_map(|s| {
            let n = totals.get(s.name()).copied().unwrap_or(0);
            (n > 0).then(|| format!("{n} {}", s.name()))
        })
        .collect();
    if parts.is_empty() {
        format!("{all}")
    } else {
        format!("{all} ({})", parts.join(", "))
    }
}

fn dash(v: &Option<String>) -> String {
    v.clone().unwrap_or_else(|| "—".into())
}

fn outcome_or_missing(o: &Option<StepOutcome>) -> String {
    o.as_ref()
        .map(outcome_text)
        .unwrap_or_else(|| "(no such step)".into())
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

/// One tier's part of the lists of a [`RunDiff`].
pub struct TierPart<'a> {
    pub status_changes: Vec<&'a Change>,
    pub trace_changes: Vec<&'a Change>,
    pub added: Vec<&'a OneSided>,
    pub removed: Vec<&'a OneSided>,
}

impl RunDiff {
    /// The changes of the tier named `tier` (`-`: without a tier).
    pub fn of_tier(&self, tier: &str) -> TierPart<'_> {
        TierPart {
            status_changes: self
                .status_changes
                .iter()
                .filter(|c| tier_name(c.tier) == tier)
                .collect(),
            trace_changes: self
                .trace_changes
                .iter()
                .filter(|c| tier_name(c.tier) == tier)
                .collect(),
            added: self
                .added
                .iter()
                .filter(|c| tier_name(c.tier) == tier)
                .collect(),
            removed: self
                .removed
                .iter()
                .filter(|c| tier_name(c.tier) == tier)
                .collect(),
        }
    }
}

/// The per-tier count lines at the top of the text report:
///
/// ```text
/// per tier (gated: contract, relied-on):
///   contract    no changes (60 compared)
///   incidental  2 changes: 1 status changed, 1 trace changed, 0 added, 0 removed (not gated)
/// ```
pub fn per_tier_lines(d: &RunDiff) -> Vec<String> {
    let mut lines = vec![format!(
        "per tier (gated: {}):",
        tiers_text(Some(&d.gated_tiers))
    )];
    for t in &d.per_tier {
        let n = t.changes();
        let what = if n == 0 {
            format!("no changes ({} compared)", t.compared)
        } else {
            format!(
                "{n} change{}: {} status changed, {} trace changed, {} added, {} removed{}",
                if n == 1 { "" } else { "s" },
                t.status_changed,
                t.trace_changed,
                t.added,
                t.removed,
                if t.gated { "" } else { " (not gated)" }
            )
        };
        lines.push(format!("  {:<10}  {what}", t.tier));
    }
    lines
}

/// The verdict under the totals: which tiers' changes decide the exit code.
pub fn verdict_line(d: &RunDiff) -> Option<String> {
    if !d.changed {
        return None;
    }
    let changed: Vec<&str> = d
        .per_tier
        .iter()
        .filter(|t| t.changes() > 0)
        .map(|t| t.tier.as_str())
        .collect();
    Some(if d.gated_changed {
        format!("a gated tier changed ({}): exit 1", changed.join(", "))
    } else {
        format!(
            "only ungated tiers changed ({}): exit 0 (--tiers all gates them)",
            changed.join(", ")
        )
    })
}

/// The status, trace, added and removed sections of one tier's changes.
fn text_sections(out: &mut String, d: &TierPart<'_>) {
    let change_lines = |out: &mut String, c: &Change| {
        for x in &c.differences {
            let _ = writeln!(
                out,
                "      L{} {}: old {} | new {}",
                x.line,
                x.op,
                outcome_or_missing(&x.left),
                outcome_or_missing(&x.right)
            );
        }
    };
    if !d.status_changes.is_empty() {
        let _ = writeln!(out, "status changed ({}):", d.status_changes.len());
        for c in &d.status_changes {
            let _ = writeln!(
                out,
                "  {} [{}]: {} -> {}",
                c.id,
                c.dialect,
                c.old_status.name(),
                c.new_status.name()
            );
            if !c.new_message.is_empty() {
                let _ = writeln!(out, "      now: {}", first_line(&c.new_message));
            }
            if !c.old_message.is_empty() {
                let _ = writeln!(out, "      was: {}", first_line(&c.old_message));
            }
            change_lines(out, c);
        }
        out.push('\n');
    }
    if !d.trace_changes.is_empty() {
        let _ = writeln!(out, "trace changed ({}):", d.trace_changes.len());
        for c in &d.trace_changes {
            let _ = writeln!(
                out,
                "  {} [{}] ({}): {} step{}",
                c.id,
                c.dialect,
                c.new_status.name(),
                c.differences.len(),
                if c.differences.len() == 1 { "" } else { "s" }
            );
            change_lines(out, c);
        }
        out.push('\n');
    }
    for (label, list) in [("added", &d.added), ("removed", &d.removed)] {
        if list.is_empty() {
            continue;
        }
        let _ = writeln!(out, "{label} ({}):", list.len());
        for r in list.iter() {
            let _ = writeln!(out, "  {} [{}]: {}", r.id, r.dialect, r.status.name());
        }
        out.push('\n');
    }
}

/// Plain text (the default): identity table, then each change, then totals.
pub fn to_text(d: &RunDiff) -> String {
    let mut out = String::new();
    let rows = identity_rows(d);
    let w0 = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    let w1 = rows
        .iter()
        .map(|r| r.1.chars().count())
        .max()
        .unwrap_or(0)
        .max(3);
    let _ = writeln!(out, "  {:<w0$}  {:<w1$}  new", "", "old");
    for (name, old, new) in &rows {
        // `*` marks what differs between the runs (the file always does).
        let mark = if old != new && *name != "file" {
            '*'
        } else {
            ' '
        };
        let _ = writeln!(out, "{mark} {name:<w0$}  {old:<w1$}  {new}");
    }
    out.push('\n');

    for line in per_tier_lines(d) {
        let _ = writeln!(out, "{line}");
    }
    out.push('\n');
    for t in d.per_tier.iter().filter(|t| t.changes() > 0) {
        let n = t.changes();
        let _ = writeln!(
            out,
            "== {} ({}): {n} change{} ==",
            t.tier,
            if t.gated { "gated" } else { "not gated" },
            if n == 1 { "" } else { "s" }
        );
        text_sections(&mut out, &d.of_tier(&t.tier));
    }
    out.push_str(&totals_line(d));
    out.push('\n');
    if let Some(verdict) = verdict_line(d) {
        out.push_str(&verdict);
        out.push('\n');
    }
    out
}

/// Markdown for a CI job summary.
pub fn to_markdown(d: &RunDiff) -> String {
    let mut out = String::from("## IPC conformance diff\n\n");
    out.push_str("| | old | new |\n| --- | --- | --- |\n");
    for (name, old, new) in identity_rows(d) {
        let name = if old != new && name != "file" {
            format!("**{name}**")
        } else {
            name.to_string()
        };
        let _ = writeln!(out, "| {name} | {} | {} |", cell(&old), cell(&new));
    }
    let _ = writeln!(out, "\n**{}**", totals_line(d));
    if let Some(verdict) = verdict_line(d) {
        let _ = writeln!(out, "\n{verdict}");
    }
    let _ = writeln!(
        out,
        "\n| tier | gated | compared | unchanged | status changed | trace changed | added | removed |\n\
         | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for t in &d.per_tier {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            if t.gated && t.changes() > 0 {
                format!("**{}**", t.tier)
            } else {
                t.tier.clone()
            },
            if t.gated { "yes" } else { "no" },
            t.compared,
            t.unchanged,
            t.status_changed,
            t.trace_changed,
            t.added,
            t.removed
        );
    }

    let status = |s: Status| format!("{} {}", status_symbol(s), s.name());
    let step_table = |out: &mut String, c: &Change| {
        out.push_str("| line | step | old | new |\n| ---: | --- | --- | --- |\n");
        for x in &c.differences {
            let _ = writeln!(
                out,
                "| {} | `{}` | {} | {} |",
                x.line,
                cell(&x.op),
                cell(&outcome_or_missing(&x.left)),
                cell(&outcome_or_missing(&x.right))
            );
        }
    };
    if !d.status_changes.is_empty() {
        out.push_str("\n### Status changes\n\n");
        out.push_str(
            "| clause | tier | dialect | old | new | message |\n| --- | --- | --- | --- | --- | --- |\n",
        );
        for c in &d.status_changes {
            let _ = writeln!(
                out,
                "| `{}` | {} | {} | {} | {} | {} |",
                cell(&c.id),
                tier_name(c.tier),
                c.dialect,
                status(c.old_status),
                status(c.new_status),
                cell(&if c.new_message.is_empty() && !c.old_message.is_empty() {
                    format!("was: {}", first_line(&c.old_message))
                } else {
                    first_line(&c.new_message).to_string()
                })
            );
        }
        for c in d
            .status_changes
            .iter()
            .filter(|c| !c.differences.is_empty())
        {
            let _ = writeln!(
                out,
                "\n<details><summary><code>{}</code> ({}, {}): {} step{} differ</summary>\n",
                html_escape(&c.id),
                tier_name(c.tier),
                c.dialect,
                c.differences.len(),
                if c.differences.len() == 1 { "" } else { "s" }
            );
            step_table(&mut out, c);
            out.push_str("\n</details>\n");
        }
    }
    if !d.trace_changes.is_empty() {
        out.push_str("\n### Trace changes\n");
        for c in &d.trace_changes {
            let _ = writeln!(
                out,
                "\n`{}` ({}, {}, {}): {}\n",
                c.id,
                tier_name(c.tier),
                c.dialect,
                status(c.new_status),
                cell(&c.title)
            );
            step_table(&mut out, c);
        }
    }
    for (label, list) in [("Added", &d.added), ("Removed", &d.removed)] {
        if list.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            "\n### {label}\n\n| clause | tier | dialect | status |\n| --- | --- | --- | --- |"
        );
        for r in list.iter() {
            let _ = writeln!(
                out,
                "| `{}` | {} | {} | {} |",
                cell(&r.id),
                tier_name(r.tier),
                r.dialect,
                status(r.status)
            );
        }
    }
    out
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Pretty JSON with a trailing newline.
pub fn to_json(d: &RunDiff) -> Result<String, String> {
    let mut s = serde_json::to_string_pretty(d).map_err(|e| format!("cannot serialize: {e}"))?;
    s.push('\n');
    Ok(s)
}

// ---------------------------------------------------------------------------
// `ipc-conformance diff`

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    /// For a CI job summary.
    Markdown,
    /// For tools (shape in docs/results-schema.md).
    Json,
}

/// `ipc-conformance diff OLD.json NEW.json [--format F] [--out FILE]`.
#[derive(Debug, Clone, clap::Args)]
pub struct DiffArgs {
    /// The earlier results.json (e.g. the baseline).
    #[arg(value_name = "OLD_JSON")]
    pub old: PathBuf,
    /// The later results.json.
    #[arg(value_name = "NEW_JSON")]
    pub new: PathBuf,
    /// How to print the comparison.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// Write the report to FILE (atomically) instead of stdout; the totals
    /// line still goes to stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// The tiers whose changes fail the diff (exit 1): `all`, or a comma
    /// list of contract, relied-on, incidental. Changes of other tiers are
    /// listed all the same.
    #[arg(long, value_name = "LIST", default_value = "contract,relied-on")]
    pub tiers: TierList,
    /// Clause directory whose tiers label results of files written before
    /// tiers existed (default: the catalogue compiled in).
    #[arg(long, value_name = "DIR", env = crate::catalogue::CLAUSES_ENV)]
    pub clauses: Option<PathBuf>,
}

/// Clause id → tier of the catalogue at `dir` (the compiled-in one without),
/// for results that carry no tier. Loaded only when some result lacks one;
/// an unloadable catalogue is an error.
fn catalogue_tiers(
    dir: Option<&Path>,
    reports: [&RunReport; 2],
) -> Result<BTreeMap<String, Tier>, String> {
    let untiered = reports
        .iter()
        .any(|r| r.results.iter().any(|x| x.tier.is_none()));
    if !untiered {
        return Ok(BTreeMap::new());
    }
    let cat = crate::catalogue::locate(dir)
        .and_then(|source| source.load())
        .map_err(|e| format!("cannot load the catalogue for the tiers of old results: {e}"))?;
    Ok(cat
        .clauses
        .iter()
        .filter_map(|c| c.tier.map(|t| (c.id.clone(), t)))
        .collect())
}

/// Run `diff`: `Ok(0)` identical, `Ok(1)` changed, `Err` unreadable or
/// malformed input or unwritable output (exit 2).
pub fn command(a: &DiffArgs) -> Result<u8, String> {
    use std::io::Write;
    let [old, new]: [RunReport; 2] = load_all(&[&a.old, &a.new])?
        .try_into()
        .expect("two files read");
    let catalogue = catalogue_tiers(a.clauses.as_deref(), [&old, &new])?;
    let d = compare(
        &a.old.display().to_string(),
        &old,
        &a.new.display().to_string(),
        &new,
        &a.tiers.0,
        &catalogue,
    );
    let text = match a.format {
        Format::Text => to_text(&d),
        Format::Markdown => to_markdown(&d),
        Format::Json => to_json(&d)?,
    };
    match &a.out {
        Some(path) => {
            crate::report::write_file(path, text.as_bytes()).map_err(|e| e.to_string())?;
            let mut stdout = std::io::stdout().lock();
            let _ = writeln!(stdout, "{} (wrote {})", totals_line(&d), path.display());
            if let Some(verdict) = verdict_line(&d) {
                let _ = writeln!(stdout, "{verdict}");
            }
        }
        None => {
            let _ = std::io::stdout().lock().write_all(text.as_bytes());
        }
    }
    Ok(d.exit_code())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixtures::{result, run};
    use ipc_harness::trace::ValueSummary;

    /// `a` against `b` with the default gated tiers and no catalogue.
    fn compare_default(a: &RunReport, b: &RunReport) -> RunDiff {
        compare(
            "a",
            a,
            "b",
            b,
            &crate::model::DEFAULT_GATED_TIERS,
            &BTreeMap::new(),
        )
    }

    fn pair() -> (RunReport, RunReport) {
        let mk = || {
            run(
                "sim",
                "runtime",
                vec![
                    result("a.one", Status::Pass, Dialect::Runtime, "sim"),
                    result("a.two", Status::Pass, Dialect::Runtime, "sim"),
                    result("a.three", Status::Pass, Dialect::Runtime, "sim"),
                ],
            )
        };
        (mk(), mk())
    }

    #[test]
    fn identical_runs_do_not_change() {
        let (a, mut b) = pair();
        // Timings differ between runs; they are not compared.
        b.results[0].duration_ms = 77.0;
        b.results[0].trace.as_mut().unwrap().steps[0].elapsed_us = 999;
        b.run.started_at = "2027-01-01T00:00:00.000Z".into();
        let d = compare_default(&a, &b);
        assert!(!d.changed);
        assert_eq!(d.exit_code(), 0);
        assert_eq!(d.totals.unchanged, 3);
        assert!(to_text(&d).contains("no changes: 3 results compared"));
        assert!(to_text(&d).contains("* started at"));
    }

    /// Two runs whose workers had different hardware queues are marked so,
    /// beside the driver: such a change alone can move a timing read.
    #[test]
    fn a_change_of_workers_is_shown_not_judged() {
        let (mut a, mut b) = pair();
        a.run.workers = Some("policy; the driver's default hardware queues".into());
        b.run.workers =
            Some("policy; one hardware queue for processes on the legacy stream alone".into());
        let d = compare_default(&a, &b);
        assert_eq!(d.exit_code(), 0);
        let t = to_text(&d);
        assert!(t.contains("* workers"), "{t}");
        assert!(t.contains("one hardware queue for processes"), "{t}");
    }

    #[test]
    fn each_kind_of_change_is_found() {
        let (a, mut b) = pair();
        b.results[0].status = Status::Fail;
        b.results[1].trace.as_mut().unwrap().steps[1].outcome = StepOutcome::Ok {
            value: ValueSummary::Unit,
        };
        b.results.remove(2);
        b.results
            .push(result("a.four", Status::Pass, Dialect::Runtime, "sim"));
        let d = compare_default(&a, &b);
        assert!(d.changed);
        assert_eq!(d.exit_code(), 1);
        assert_eq!(d.totals.status_changed, 1);
        assert_eq!(d.totals.trace_changed, 1);
        assert_eq!(d.totals.added, 1);
        assert_eq!(d.totals.removed, 1);
        assert_eq!(d.trace_changes[0].differences[0].line, 13);
        let t = to_text(&d);
        assert!(t.contains("a.one [runtime]: Pass -> Fail"), "{t}");
        assert!(
            t.contains("L13 p = ipc_open h: old error cudaErrorInvalidValue (1) | new ok"),
            "{t}"
        );
        assert!(t.contains("added (1):\n  a.four [runtime]: Pass"), "{t}");
        assert!(t.contains("removed (1):\n  a.three [runtime]: Pass"), "{t}");
        let md = to_markdown(&d);
        assert!(
            md.contains("| `a.one` | contract | runtime | ✅ Pass | ❌ Fail |"),
            "{md}"
        );
        assert!(md.contains("### Trace changes"), "{md}");
        let v: serde_json::Value = serde_json::from_str(&to_json(&d).unwrap()).unwrap();
        assert_eq!(v["totals"]["removed"], 1);
        assert_eq!(
            v["trace_changes"][0]["differences"][0]["right"]["status"],
            "ok"
        );
    }

    /// Changes are counted and grouped per tier; only a change of a gated
    /// tier fails the diff, and a result without a tier takes the
    /// catalogue's.
    #[test]
    fn changes_count_per_tier_and_only_gated_tiers_fail() {
        let (mut a, mut b) = pair();
        for r in a.results.iter_mut().chain(b.results.iter_mut()) {
            if r.id == "a.two" {
                r.tier = Some(Tier::Incidental);
            }
        }
        b.results[1].status = Status::Fail;
        let default = crate::model::DEFAULT_GATED_TIERS;
        let d = compare("a", &a, "b", &b, &default, &BTreeMap::new());
        assert!(d.changed);
        assert!(!d.gated_changed);
        assert_eq!(d.exit_code(), 0);
        let incidental = d.per_tier.iter().find(|t| t.tier == "incidental").unwrap();
        assert_eq!((incidental.status_changed, incidental.gated), (1, false));
        let t = to_text(&d);
        assert!(
            t.contains(
                "per tier (gated: contract, relied-on):\n  contract    no changes (2 compared)\n"
            ),
            "{t}"
        );
        assert!(t.contains("  incidental  1 change: 1 status changed, 0 trace changed, 0 added, 0 removed (not gated)"), "{t}");
        assert!(t.contains("== incidental (not gated): 1 change ==\nstatus changed (1):\n  a.two [runtime]: Pass -> Fail"), "{t}");
        assert!(
            t.contains("only ungated tiers changed (incidental): exit 0"),
            "{t}"
        );
        assert!(to_markdown(&d).contains("| incidental | no | 1 | 0 | 1 | 0 | 0 | 0 |"));

        let d = compare("a", &a, "b", &b, &Tier::ALL, &BTreeMap::new());
        assert_eq!(d.exit_code(), 1);
        assert!(to_text(&d).contains("a gated tier changed (incidental): exit 1"));

        // Files without tiers: the catalogue's tier, else `-`, which gates.
        for r in a.results.iter_mut().chain(b.results.iter_mut()) {
            r.tier = None;
        }
        let catalogue = BTreeMap::from([("a.two".to_string(), Tier::Incidental)]);
        let d = compare("a", &a, "b", &b, &default, &catalogue);
        assert_eq!(d.status_changes[0].tier, Some(Tier::Incidental));
        assert_eq!(d.exit_code(), 0);
        let d = compare("a", &a, "b", &b, &default, &BTreeMap::new());
        assert_eq!(d.status_changes[0].tier, None);
        assert_eq!(d.per_tier.last().unwrap().tier, "-");
        assert_eq!(d.exit_code(), 1);
    }

    #[test]
    fn duplicate_ids_pair_by_occurrence() {
        let mut a = pair().0;
        a.results[1].id = "a.one".into();
        let b = a.clone();
        assert!(
            !compare(
                "a",
                &a,
                "b",
                &b,
                &crate::model::DEFAULT_GATED_TIERS,
                &BTreeMap::new()
            )
            .changed
        );
    }
}
