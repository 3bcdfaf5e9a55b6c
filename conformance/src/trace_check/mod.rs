//! `ipc-conformance check DIR`: judge the IPC of a traced program.
//!
//! The per-process records (`ipc-conformance trace`) are read within bounds
//! (`load.rs`), merged into one history and lowered to a replay: a
//! scenario whose steps are the recorded calls, each expecting the driver's
//! answer (`replay.rs`, with the synchronisation table of `sync_rules.rs`).
//! The simulator runs it and is the one judge (`judge.rs`): its hazard log
//! gives the hazards, its answers the fidelity findings. The verdict is one
//! of three: clean (exit 0), hazards (exit 1), or not judged (exit 4, with
//! the reasons). Writes `check.txt`, `check.json`, `summary.md` and
//! `replay.ipc` (`report.rs`).

pub mod judge;
pub mod load;
pub mod model;
pub mod reliance;
pub mod replay;
pub mod report;
pub mod sync_rules;

use crate::exit::{EXIT_FAILURES, EXIT_NOT_JUDGED, EXIT_OK};
use ipc_harness::profile;
use load::{escaped, Folder};
use model::{FindingClass, Verdict};
use report::{CheckReport, ProcessSummary};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Largest replay the reliance section is computed for: it runs the replay
/// under every profile, and again for each difference, so its work grows
/// faster than the trace.
pub const MAX_RELIANCE_STEPS: usize = 20_000;

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The directory `ipc-conformance trace --out` wrote.
    pub dir: PathBuf,
    /// Where to write check.txt, check.json, summary.md and replay.ipc
    /// (default: DIR itself).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Read, merge, replay and judge the traces in `dir`; an unreadable folder
/// is an error (exit 2), anything inside it a reason or a finding.
pub fn check_dir(dir: &Path) -> Result<(CheckReport, String), String> {
    let folder = profile::timed_in("check", "load", || load::read_dir(dir))?;
    Ok(check_folder(folder, &dir.display().to_string()))
}

/// Judge a folder already read; `dir` names it in the reports.
pub fn check_folder(mut folder: Folder, dir: &str) -> (CheckReport, String) {
    let merged = profile::timed_in("check", "merge", || load::merged(&folder));
    let mut replay = profile::timed_in("check", "lower", || replay::lower(&folder, &merged, dir));
    drop(merged);
    let text = profile::timed_in("check", "replay text", || replay.text(&folder));
    // The text holds the lines now.
    replay.lines = Vec::new();
    let processes: Vec<ProcessSummary> = folder
        .processes
        .iter()
        .zip(&replay.scenario.processes)
        .map(|(p, spec)| ProcessSummary {
            name: spec.name.clone(),
            pid: p.pid,
            ppid: p.header.as_ref().map(|h| h.ppid),
            exe: p
                .header
                .as_ref()
                .map(|h| escaped(&h.exe))
                .unwrap_or_default(),
            file: escaped(&p.file),
            device: spec.device,
            calls: p.calls.len(),
            end: if p.exit_ns.is_some() {
                "exit"
            } else {
                "no exit record"
            }
            .into(),
            unreadable_lines: p.bad_lines.clone(),
        })
        .collect();
    // The records are in the replay now.
    for p in &mut folder.processes {
        p.calls = Vec::new();
    }
    let calls = folder.calls;
    let mut reasons = folder.problems.clone();
    reasons.extend(replay.reasons.iter().cloned());
    let mut notes = folder.notes.clone();
    notes.extend(replay.notes.iter().cloned());
    let mut findings = replay.findings.clone();
    let mut simulator = Vec::new();
    let mut reliance = None;
    let mut reliance_skipped = None;
    let mut left_out = 0;
    if calls > 0 {
        let judged = profile::timed_in("check", "judge", || judge::judge(&folder, &replay));
        reasons.extend(judged.reasons);
        findings.extend(judged.findings);
        simulator.push(judged.run);
        left_out = judged.left_out;
        let steps = replay.scenario.steps.len();
        if judged.diverged_at.is_some() {
            reliance_skipped = Some("the replay diverged from the driver's answers".to_string());
        } else if steps > MAX_RELIANCE_STEPS {
            reliance_skipped = Some(format!(
                "the replay has {steps} steps, more than the {MAX_RELIANCE_STEPS} it is computed for"
            ));
        } else {
            let origin = |i: usize| match replay.origin.get(i) {
                Some(o) => (
                    folder.processes[o.process()].pid,
                    o.seq(),
                    o.entry()
                        .and_then(|e| folder.entries.get(usize::from(e)))
                        .map_or_else(|| "exit".to_string(), |s| escaped(s)),
                ),
                None => (0, None, String::new()),
            };
            reliance = Some(profile::timed_in("check", "reliance", || {
                reliance::judge(&replay.scenario, replay.scenario.devices, &origin)
            }));
        }
    }
    findings.sort_by(|a, b| {
        (a.class, a.after_divergence, &a.process, a.seq, &a.kind).cmp(&(
            b.class,
            b.after_divergence,
            &b.process,
            b.seq,
            &b.kind,
        ))
    });
    findings.dedup_by(|a, b| {
        a.class == b.class && a.kind == b.kind && a.process == b.process && a.seq == b.seq
    });
    let (findings, more) = judge::bounded(findings);
    let mut cited: Vec<&str> = findings
        .iter()
        .flat_map(|f| f.rules.iter().map(String::as_str))
        .collect();
    cited.sort();
    cited.dedup();
    let sync_rules = sync_rules::TABLE
        .iter()
        .filter(|r| cited.contains(&r.id))
        .copied()
        .collect();
    let hazards = findings
        .iter()
        .filter(|f| f.class == FindingClass::Hazard && !f.after_divergence)
        .count();
    let verdict = if calls == 0 && reasons.is_empty() {
        Verdict::NothingRecorded
    } else if hazards > 0 {
        Verdict::Hazards
    } else if !reasons.is_empty() {
        Verdict::NotJudged
    } else {
        Verdict::Clean
    };
    let exit_code = match verdict {
        Verdict::Clean | Verdict::NothingRecorded => EXIT_OK,
        Verdict::Hazards => EXIT_FAILURES,
        Verdict::NotJudged => EXIT_NOT_JUDGED,
    };
    let report = CheckReport {
        dir: escaped(dir),
        verdict: verdict.text().to_string(),
        exit_code,
        reasons,
        notes,
        processes,
        calls,
        findings,
        findings_left_out: left_out + more + replay.findings_left_out,
        sync_rules,
        simulator,
        reliance,
        reliance_skipped,
        not_replayed: replay.not_replayed,
        replay: "replay.ipc".into(),
    };
    (report, text)
}

/// `ipc-conformance check DIR`.
pub fn command(args: &CheckArgs) -> Result<u8, String> {
    let (report, replay) = check_dir(&args.dir)?;
    let text = report::text(&report);
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
    if report.verdict() == Verdict::NothingRecorded {
        return Ok(EXIT_OK);
    }
    let out = args.out.clone().unwrap_or_else(|| args.dir.clone());
    let shown = escaped(&out.display().to_string());
    std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {shown}: {e}"))?;
    let json = serde_json::to_vec_pretty(&report).map_err(|e| e.to_string())?;
    for (name, bytes) in [
        ("check.txt", text.as_bytes()),
        ("check.json", json.as_slice()),
        ("summary.md", report::markdown(&report).as_bytes()),
        ("replay.ipc", replay.as_bytes()),
    ] {
        crate::report::write_atomic(&out.join(name), bytes).map_err(|e| e.to_string())?;
    }
    println!("wrote check.txt, check.json, summary.md and replay.ipc to {shown}");
    Ok(report.exit_code)
}
