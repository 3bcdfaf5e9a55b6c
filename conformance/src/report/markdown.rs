//! `summary.md`: a human-readable summary of one or several runs (sim
//! runtime + sim driver, sim + cuda, ...): the runs, their totals, a
//! clause-by-backend matrix and the problems.

use crate::model::{
    classification_of, tier_name, tiers_text, Classification, ClauseResult, RunReport, ALL_STATUSES,
};
use crate::sysinfo;
use ipc_harness::{Dialect, Status};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// The matrix cell for a status.
pub fn status_symbol(status: Status) -> &'static str {
    match status {
        Status::Pass => "✅",
        Status::Fail => "❌",
        Status::NotSupported => "⏭",
        Status::Crash => "💥",
        Status::Timeout => "⏱",
        Status::Broken => "🔧",
    }
}

pub fn legend() -> String {
    let parts: Vec<String> = ALL_STATUSES
        .iter()
        .map(|s| format!("{} {}", status_symbol(*s), s.name()))
        .collect();
    format!("Legend: {} · (empty) not run", parts.join(" · "))
}

/// Escape text for a table cell: pipes, newlines.
pub fn cell(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('|', "\\|")
        .replace(['\n', '\r'], " ")
}

/// A matrix column: a backend and dialect within one run.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Column {
    run: usize,
    backend: String,
    dialect: Dialect,
}

fn columns(runs: &[RunReport]) -> Vec<(Column, String)> {
    let mut cols: Vec<Column> = Vec::new();
    for (i, run) in runs.iter().enumerate() {
        for r in &run.results {
            let c = Column {
                run: i,
                backend: r.backend.clone(),
                dialect: r.dialect,
            };
            if !cols.contains(&c) {
                cols.push(c);
            }
        }
    }
    // A label is `backend dialect`, plus the run number where the same pair
    // occurs in several runs.
    let mut seen: BTreeMap<(String, &'static str), usize> = BTreeMap::new();
    for c in &cols {
        *seen
            .entry((c.backend.clone(), c.dialect.as_str()))
            .or_default() += 1;
    }
    cols.into_iter()
        .map(|c| {
            let mut label = format!("{} {}", c.backend, c.dialect);
            if seen[&(c.backend.clone(), c.dialect.as_str())] > 1 {
                label.push_str(&format!(" (run {})", c.run + 1));
            }
            (c, label)
        })
        .collect()
}

fn column_of(run: usize, r: &ClauseResult) -> Column {
    Column {
        run,
        backend: r.backend.clone(),
        dialect: r.dialect,
    }
}

/// The clause-by-backend matrix with its legend.
pub fn matrix(runs: &[RunReport]) -> String {
    let cols = columns(runs);
    type Row = (String, &'static str, BTreeMap<usize, Vec<Status>>);
    let mut rows: BTreeMap<&str, Row> = BTreeMap::new();
    for (i, run) in runs.iter().enumerate() {
        for r in &run.results {
            let col = cols
                .iter()
                .position(|(c, _)| *c == column_of(i, r))
                .expect("every result has a column");
            let row = rows.entry(r.id.as_str()).or_insert_with(|| {
                (
                    r.kind.map(|k| k.as_str().to_string()).unwrap_or_default(),
                    tier_name(r.tier),
                    BTreeMap::new(),
                )
            });
            // A run without tiers (an old file) leaves the tier to another.
            if row.1 == "-" {
                row.1 = tier_name(r.tier);
            }
            let statuses = row.2.entry(col).or_default();
            if !statuses.contains(&r.status) {
                statuses.push(r.status);
            }
        }
    }

    let mut out = String::new();
    out.push_str("| clause | kind | tier |");
    for (_, label) in &cols {
        let _ = write!(out, " {} |", cell(label));
    }
    out.push_str("\n| --- | --- | --- |");
    for _ in &cols {
        out.push_str(" :-: |");
    }
    out.push('\n');
    for (id, (kind, tier, cells)) in &rows {
        let _ = write!(out, "| `{}` | {} | {tier} |", cell(id), cell(kind));
        for i in 0..cols.len() {
            let symbols: Vec<&str> = cells
                .get(&i)
                .map(|ss| ss.iter().map(|s| status_symbol(*s)).collect())
                .unwrap_or_default();
            let _ = write!(out, " {} |", symbols.join(""));
        }
        out.push('\n');
    }
    out.push('\n');
    out.push_str(&legend());
    out.push('\n');
    out
}

/// The whole `summary.md` for `runs`.
pub fn summary(runs: &[RunReport]) -> String {
    let mut out = String::from("# IPC conformance summary\n\n");

    out.push_str("## Runs\n\n");
    out.push_str(
        "| run | backend | dialect | seed | started (UTC) | duration | tool | git revision | host | GPU | driver | devices | filter |\n",
    );
    out.push_str(
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for (i, r) in runs.iter().enumerate() {
        let run = &r.run;
        let gpu = match (&run.gpu_name, &run.compute_capability) {
            (Some(n), Some(cc)) => format!("{n} (sm {cc})"),
            (Some(n), None) => n.clone(),
            _ => "—".into(),
        };
        let driver = [
            run.driver_version.as_deref(),
            run.cuda_driver_version.as_deref().map(|v| v.trim()),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(" / ");
        let filter = if run.filter.is_empty() {
            "all".to_string()
        } else {
            run.filter.join(", ")
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            i + 1,
            cell(&run.backend),
            cell(&run.dialect),
            run.seed,
            cell(&run.started_at),
            sysinfo::human_ms(run.duration_ms),
            cell(&run.tool_version),
            cell(run.git_revision.as_deref().unwrap_or("—")),
            cell(run.host.as_deref().unwrap_or("—")),
            cell(&gpu),
            cell(if driver.is_empty() { "—" } else { &driver }),
            run.device_count
                .map(|d| d.to_string())
                .unwrap_or_else(|| "—".into()),
            cell(&filter),
        );
    }
    let semantics: Vec<(usize, &BTreeMap<String, String>)> = runs
        .iter()
        .enumerate()
        .filter(|(_, r)| !r.run.semantics.is_empty())
        .map(|(i, r)| (i + 1, &r.run.semantics))
        .collect();
    if !semantics.is_empty() {
        out.push_str("\nSimulator semantics:\n\n");
        for (i, sem) in semantics {
            let pairs: Vec<String> = sem.iter().map(|(k, v)| format!("`{k}={v}`")).collect();
            let _ = writeln!(out, "- run {i}: {}", pairs.join(", "));
        }
    }
    let notes = run_notes(runs);
    if !notes.is_empty() {
        out.push('\n');
        for note in notes {
            let _ = writeln!(out, "- {note}");
        }
    }

    out.push_str("\n## Totals\n\n| run |");
    for s in ALL_STATUSES {
        let _ = write!(out, " {} {} |", status_symbol(s), s.name());
    }
    out.push_str(" total |\n| --- |");
    for _ in ALL_STATUSES {
        out.push_str(" ---: |");
    }
    out.push_str(" ---: |\n");
    for (i, r) in runs.iter().enumerate() {
        let _ = write!(
            out,
            "| {} ({} {}) |",
            i + 1,
            cell(&r.run.backend),
            cell(&r.run.dialect)
        );
        for s in ALL_STATUSES {
            let n = r.totals.get(s.name()).copied().unwrap_or(0);
            let _ = write!(out, " {n} |");
        }
        let _ = writeln!(out, " {} |", r.results.len());
    }

    out.push_str(&tiers_section(runs));

    out.push_str(&expectations_section(runs));

    out.push_str("\n## Clauses\n\n");
    out.push_str(&matrix(runs));

    let any_problem = runs
        .iter()
        .flat_map(|r| r.results.iter())
        .any(|r| r.status != Status::Pass);
    if any_problem {
        out.push_str("\n## Not passing\n\n");
        let mut seen = BTreeSet::new();
        let problems = runs.iter().flat_map(|run| {
            run.results
                .iter()
                .filter(|r| r.status != Status::Pass)
                .map(move |r| (r, run.gates(r)))
        });
        for (r, gated) in problems {
            let first_line = r.message.lines().next().unwrap_or("");
            let not_gated = if !gated && classification_of(r).fails_gate() {
                ", not gated"
            } else {
                ""
            };
            let line = format!(
                "- {} `{}` ({} {}, {}{not_gated}) {}: {}",
                status_symbol(r.status),
                r.id,
                r.backend,
                r.dialect,
                tier_name(r.tier),
                r.status.name(),
                first_line.replace('\n', " ")
            );
            if seen.insert(line.clone()) {
                out.push_str(&line);
                out.push('\n');
            }
        }
    }
    out
}

/// The `## Tiers` section: per run and tier, whether the tier gates the
/// run and its results per status. Results without a tier (broken
/// clauses, files from before tiers) are the `-` row.
pub fn tiers_section(runs: &[RunReport]) -> String {
    let mut out = String::from("\n## Tiers\n\n");
    for (i, r) in runs.iter().enumerate() {
        let _ = writeln!(
            out,
            "- run {}: gated tiers: {}",
            i + 1,
            tiers_text(r.gated_tiers())
        );
    }
    out.push_str("\n| run | tier | gated |");
    for s in ALL_STATUSES {
        let _ = write!(out, " {} {} |", status_symbol(s), s.name());
    }
    out.push_str(" total |\n| --- | --- | --- |");
    for _ in ALL_STATUSES {
        out.push_str(" ---: |");
    }
    out.push_str(" ---: |\n");
    for (i, r) in runs.iter().enumerate() {
        for (tier, totals) in crate::model::totals_per_tier(&r.results) {
            let gated = match (r.gated_tiers(), tier) {
                (Some(g), Some(t)) => g.contains(&t),
                _ => true,
            };
            let _ = write!(
                out,
                "| {} ({} {}) | {} | {} |",
                i + 1,
                cell(&r.run.backend),
                cell(&r.run.dialect),
                tier_name(tier),
                if gated { "yes" } else { "no" }
            );
            for s in ALL_STATUSES {
                let _ = write!(out, " {} |", totals.get(s.name()).copied().unwrap_or(0));
            }
            let _ = writeln!(out, " {} |", totals.values().sum::<usize>());
        }
    }
    out
}

/// Lines for `summary.md` about shards, merges and interruptions, one per
/// fact: `run 1: shard 2/4 of the selected clauses`, `run 1: merged from 4
/// files (shards 1/4, 2/4, 3/4, 4/4)`, `run 1: **interrupted**: ...`.
pub fn run_notes(runs: &[RunReport]) -> Vec<String> {
    let mut notes = Vec::new();
    for (i, r) in runs.iter().enumerate() {
        let n = i + 1;
        if let Some(shard) = &r.run.shard {
            notes.push(format!("run {n}: shard {shard} of the selected clauses"));
        }
        if let Some(m) = &r.run.merged {
            notes.push(format!(
                "run {n}: merged from {} file{}{}",
                m.inputs.len(),
                if m.inputs.len() == 1 { "" } else { "s" },
                if m.shards.is_empty() {
                    String::new()
                } else {
                    format!(" (shards {})", m.shards.join(", "))
                }
            ));
        }
        if r.run.interrupted {
            notes.push(format!(
                "run {n}: **interrupted**: only the {} results that ran are reported",
                r.results.len()
            ));
        }
    }
    notes
}

/// The `## Expectations` section of summary.md: totals per classification
/// per run and every unexpected, expected-failing and Flaky result with its
/// reason. Empty when no run used an expectations file.
pub fn expectations_section(runs: &[RunReport]) -> String {
    if runs.iter().all(|r| r.classification_totals.is_none()) {
        return String::new();
    }
    let mut out = String::from("\n## Expectations\n\n| run | file |");
    for c in Classification::ALL {
        let _ = write!(out, " {} {} |", c.symbol(), c.name());
    }
    out.push_str(" gate |\n| --- | --- |");
    for _ in Classification::ALL {
        out.push_str(" ---: |");
    }
    out.push_str(" --- |\n");
    for (i, r) in runs.iter().enumerate() {
        let Some(totals) = &r.classification_totals else {
            continue;
        };
        let file = r
            .run
            .expectations
            .as_ref()
            .map(|e| e.file.as_str())
            .unwrap_or("—");
        let _ = write!(
            out,
            "| {} ({} {}) | {} |",
            i + 1,
            cell(&r.run.backend),
            cell(&r.run.dialect),
            cell(file)
        );
        for c in Classification::ALL {
            let _ = write!(out, " {} |", totals.get(c.name()).copied().unwrap_or(0));
        }
        let gate = if r.gate_passed() {
            "passed"
        } else {
            "**FAILED**"
        };
        let _ = writeln!(out, " {gate} |");
    }
    let sections = [
        (
            "Unexpected results (these fail the gate)",
            &[
                Classification::UnexpectedFail,
                Classification::UnexpectedPass,
            ][..],
        ),
        ("Expected failures", &[Classification::ExpectedFail][..]),
        ("Flaky", &[Classification::Flaky][..]),
    ];
    for (title, classes) in sections {
        let mut lines = Vec::new();
        for r in runs.iter().flat_map(|run| run.results.iter()) {
            let Some(rec) = &r.expectation else {
                continue;
            };
            if !classes.contains(&rec.classification) {
                continue;
            }
            let mut line = format!(
                "- {} `{}` ({} {}) {}",
                rec.classification.symbol(),
                r.id,
                r.backend,
                r.dialect,
                rec.classification
            );
            let first = r.message.lines().next().unwrap_or("");
            if !first.is_empty() {
                let _ = write!(line, ": {}", first);
            }
            if !rec.detail.is_empty() {
                let _ = write!(line, " — {}", rec.detail);
            }
            if let (Some(n), Some(reason)) = (rec.entry, &rec.reason) {
                let _ = write!(line, " — entry {n}: {reason}");
                if let Some(link) = &rec.link {
                    let _ = write!(line, " ([link]({link}))");
                }
            }
            if !lines.contains(&line) {
                lines.push(line);
            }
        }
        if !lines.is_empty() {
            let _ = write!(out, "\n### {title}\n\n{}\n", lines.join("\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixtures::{self, result, run};

    #[test]
    fn summary_of_one_run_has_info_totals_and_matrix() {
        let md = summary(&[fixtures::mixed_run()]);
        assert!(md.starts_with("# IPC conformance summary"));
        assert!(md.contains("| 1 | sim | runtime | 1 | 2026-11-01T03:57:44.250Z |"));
        assert!(md.contains("abc123"));
        assert!(md.contains("`close_last_unmaps=true`"));
        assert!(md.contains("| clause | kind | tier | sim runtime |"));
        assert!(md.contains("| `mem.open.refcount` | specified | contract | ✅ |"));
        assert!(md.contains("| `mem.open.twice` | specified | contract | ❌ |"));
        assert!(md.contains("| `ctx.peer.needs-two` | specified | contract | ⏭ |"));
        assert!(md.contains("| `ctx.crash.x` | specified | contract | 💥 |"));
        assert!(md.contains("| `handle.slow.y` | specified | contract | ⏱ |"));
        assert!(md.contains("| `handle.broken.z` | specified | contract | 🔧 |"));
        assert!(md.contains("Legend: ✅ Pass · ❌ Fail · ⏭ NotSupported"));
        // Totals row: 1 of each status, 6 in all.
        assert!(md.contains("| 1 (sim runtime) | 1 | 1 | 1 | 1 | 1 | 1 | 6 |"));
        assert!(md.contains("## Not passing"));
        assert!(
            md.contains("- ❌ `mem.open.twice` (sim runtime, contract) Fail: "),
            "{md}"
        );
        assert!(
            md.contains("| 1 (sim runtime) | contract | yes | 1 | 1 | 1 | 1 | 1 | 1 | 6 |"),
            "{md}"
        );
        assert!(md.contains("(seed 1)"));
    }

    #[test]
    fn summary_combines_runs_into_columns() {
        let sim = run(
            "sim",
            "all",
            vec![
                result("mem.a", Status::Pass, Dialect::Runtime, "sim"),
                result("mem.b", Status::Pass, Dialect::Runtime, "sim"),
                result("mem.a", Status::Fail, Dialect::Driver, "sim"),
                result("mem.b", Status::Pass, Dialect::Driver, "sim"),
            ],
        );
        let cuda = run(
            "cuda",
            "runtime",
            vec![result(
                "mem.a",
                Status::NotSupported,
                Dialect::Runtime,
                "cuda",
            )],
        );
        let md = matrix(&[sim, cuda]);
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(
            lines[0],
            "| clause | kind | tier | sim runtime | sim driver | cuda runtime |"
        );
        assert_eq!(lines[2], "| `mem.a` | specified | contract | ✅ | ❌ | ⏭ |");
        assert_eq!(lines[3], "| `mem.b` | specified | contract | ✅ | ✅ |  |");
    }

    #[test]
    fn same_backend_twice_is_told_apart_by_run() {
        let a = run(
            "sim",
            "runtime",
            vec![result("x.y", Status::Pass, Dialect::Runtime, "sim")],
        );
        let b = run(
            "sim",
            "runtime",
            vec![result("x.y", Status::Fail, Dialect::Runtime, "sim")],
        );
        let md = matrix(&[a, b]);
        assert!(
            md.contains("| sim runtime (run 1) | sim runtime (run 2) |"),
            "{md}"
        );
        assert!(md.contains("| `x.y` | specified | contract | ✅ | ❌ |"));
    }

    /// Each tier has its own totals row; a failure of an ungated tier is
    /// marked "not gated" among the results that did not pass.
    #[test]
    fn tiers_have_totals_and_ungated_failures_are_marked() {
        let mut placement = result("mem.placement", Status::Fail, Dialect::Runtime, "sim");
        placement.tier = Some(ipc_harness::Tier::Incidental);
        let mut broken = result("mem.broken", Status::Broken, Dialect::Runtime, "sim");
        broken.tier = None;
        let r = run(
            "sim",
            "runtime",
            vec![
                result("mem.open", Status::Pass, Dialect::Runtime, "sim"),
                placement,
                broken,
            ],
        );
        let md = summary(&[r]);
        assert!(
            md.contains("- run 1: gated tiers: contract, relied-on"),
            "{md}"
        );
        assert!(
            md.contains("| 1 (sim runtime) | contract | yes | 1 | 0 | 0 | 0 | 0 | 0 | 1 |"),
            "{md}"
        );
        assert!(
            md.contains("| 1 (sim runtime) | incidental | no | 0 | 1 | 0 | 0 | 0 | 0 | 1 |"),
            "{md}"
        );
        assert!(
            md.contains("| 1 (sim runtime) | - | yes | 0 | 0 | 0 | 0 | 0 | 1 | 1 |"),
            "{md}"
        );
        assert!(
            md.contains("`mem.placement` (sim runtime, incidental, not gated) Fail"),
            "{md}"
        );
        assert!(md.contains("`mem.broken` (sim runtime, -) Broken"), "{md}");
        assert!(
            md.contains("| `mem.placement` | specified | incidental | ❌ |"),
            "{md}"
        );
    }

    #[test]
    fn cells_are_escaped() {
        assert_eq!(cell("a|b\nc"), "a\\|b c");
    }
}
