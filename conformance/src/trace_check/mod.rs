//! `ipc-conformance check DIR`: judge the IPC of a traced program.
//!
//! The per-process records (`ipc-conformance trace`) are merged into one
//! history, lowered to a scenario that the simulator runs (its hazard log
//! judges frees, closes, leaks and event lifetimes as it does for clauses),
//! and checked by the rules a scenario cannot carry (closes without an
//! open, kernels ordered by interprocess events, errors carried on past).
//! Writes `check.txt`, `check.json`, `summary.md` and `replay.ipc`; exits 1
//! on a hazard.

pub mod analyze;
pub mod load;
pub mod reliance;

use crate::backend::{self, BackendKind, SimSettings};
use crate::{EXIT_FAILURES, EXIT_OK};
use analyze::{Finding, FindingClass};
use ipc_harness::scenario::{self, ExecOptions};
use ipc_harness::{Dialect, Status};
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The directory `ipc-conformance trace --out` wrote.
    pub dir: PathBuf,
    /// Where to write check.txt, check.json, summary.md and replay.ipc
    /// (default: DIR itself).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Serialize)]
pub struct ProcessSummary {
    pub name: String,
    pub pid: u32,
    pub ppid: Option<u32>,
    pub exe: String,
    pub calls: usize,
    /// `exit` when the process wrote its exit record, else `no exit record`
    /// (a crash, a signal, or `_exit`).
    pub end: String,
    pub unreadable_lines: Vec<usize>,
}

/// The simulator's run of the lowered scenario in one dialect.
#[derive(Debug, Serialize)]
pub struct SimulatorRun {
    pub dialect: String,
    /// Pass when the simulator answered every call as the real driver did.
    pub status: String,
    pub message: String,
    pub hazards: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct CheckReport {
    pub dir: String,
    /// `clean`, `hazards`, or `nothing recorded`.
    pub verdict: String,
    pub processes: Vec<ProcessSummary>,
    pub calls: usize,
    pub findings: Vec<Finding>,
    /// The replay on the simulator, per dialect profile.
    pub simulator: Vec<SimulatorRun>,
    /// Which semantic choices the program's outcome rests on, step by step,
    /// with their tiers (absent when nothing was recorded). Never a hazard.
    pub reliance: Option<reliance::Reliance>,
    /// Calls recorded that the replay carries as comments only.
    pub not_replayed: usize,
    pub replay: String,
}

impl CheckReport {
    pub fn hazards(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| f.class == FindingClass::Hazard)
            .count()
    }
}

/// Read, merge, lower and judge the traces in `dir`.
pub fn check_dir(dir: &Path) -> Result<(CheckReport, String), String> {
    let processes = load::read_dir(dir)?;
    let summaries: Vec<ProcessSummary> = processes
        .iter()
        .enumerate()
        .map(|(i, p)| ProcessSummary {
            name: format!("p{}", i + 1),
            pid: p.pid,
            ppid: p.header.as_ref().map(|h| h.ppid),
            exe: p.header.as_ref().map(|h| h.exe.clone()).unwrap_or_default(),
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
    let calls = summaries.iter().map(|p| p.calls).sum();
    let merged = load::Merged::new(processes);
    let analysis = analyze::analyze(&merged);
    let replay = format!(
        "# title: the IPC pattern of the program traced in {}\n\
         # kind: measured\n\
         # source: ipc-conformance check (each step is a call the real driver answered with success)\n\n{}",
        dir.display(),
        analysis.lowered.text
    );
    let mut findings = analysis.findings;
    let mut simulator = Vec::new();
    let mut reliance = None;
    if calls > 0 {
        let parsed = scenario::parse(&replay, Path::new("replay.ipc")).map_err(|e| {
            format!(
                "the replay of {} does not parse (a bug of check): {e}",
                dir.display()
            )
        })?;
        reliance = Some(reliance::judge(
            &parsed,
            analysis.devices,
            &analysis.lowered.step_origin,
        ));
        let backend = backend::make(BackendKind::Sim, &SimSettings::default())?;
        for dialect in [Dialect::Driver, Dialect::Runtime, Dialect::Hip] {
            let opts = ExecOptions {
                dialect,
                ..ExecOptions::default()
            };
            let exec = scenario::execute(&parsed, backend.as_ref(), &opts);
            let hazards = exec.trace.hazards.clone().unwrap_or_default();
            if dialect == Dialect::Driver {
                for h in &hazards {
                    let origin = h.step.and_then(|s| analysis.lowered.step_origin.get(s));
                    let (pid, seq, call) = match origin {
                        Some((pid, seq, call)) => (*pid, *seq, call.clone()),
                        None => (0, None, String::new()),
                    };
                    findings.push(Finding {
                        class: FindingClass::Hazard,
                        kind: h.kind.name().to_string(),
                        pid,
                        seq,
                        call,
                        detail: h.detail.clone(),
                        found_by: "simulator".into(),
                    });
                }
            }
            let mut kinds: Vec<String> =
                hazards.iter().map(|h| h.kind.name().to_string()).collect();
            kinds.sort();
            kinds.dedup();
            simulator.push(SimulatorRun {
                dialect: dialect.as_str().to_string(),
                status: exec.verdict.status.name().to_string(),
                message: exec.verdict.message.clone(),
                hazards: kinds,
            });
        }
    }
    // One finding per kind and call, whichever rule found it first.
    findings.sort();
    findings.dedup_by(|a, b| {
        a.class == b.class && a.kind == b.kind && a.pid == b.pid && a.seq == b.seq
    });
    if let (Some(r), Some(first)) = (reliance.as_mut(), simulator.first()) {
        for run in &simulator[1..] {
            if run.hazards != first.hazards {
                r.notes.push(format!(
                    "hazards under the {} dialect [{}] differ from the driver dialect [{}]",
                    run.dialect,
                    run.hazards.join(", "),
                    first.hazards.join(", ")
                ));
            }
        }
        for run in &simulator {
            if run.status != Status::Pass.name() {
                r.notes.push(format!(
                    "in the {} dialect the simulator answers a call otherwise than the driver did: {}",
                    run.dialect, run.message
                ));
            }
        }
    }
    let hazards = findings
        .iter()
        .filter(|f| f.class == FindingClass::Hazard)
        .count();
    let report = CheckReport {
        dir: dir.display().to_string(),
        verdict: if calls == 0 {
            "nothing recorded"
        } else if hazards > 0 {
            "hazards"
        } else {
            "clean"
        }
        .into(),
        processes: summaries,
        calls,
        findings,
        simulator,
        reliance,
        not_replayed: analysis.lowered.not_lowered,
        replay: "replay.ipc".into(),
    };
    Ok((report, replay))
}

fn process_name(report: &CheckReport, pid: u32) -> String {
    report.processes.iter().find(|p| p.pid == pid).map_or_else(
        || format!("pid {pid}"),
        |p| format!("{} (pid {pid})", p.name),
    )
}

/// The human report (also printed).
pub fn text_report(report: &CheckReport) -> String {
    let mut t = String::new();
    let mut line = |s: String| {
        t.push_str(&s);
        t.push('\n');
    };
    line(format!(
        "check {}: {} calls in {} processes",
        report.dir,
        report.calls,
        report.processes.len()
    ));
    for p in &report.processes {
        let bad = if p.unreadable_lines.is_empty() {
            String::new()
        } else {
            format!(", unreadable lines {:?}", p.unreadable_lines)
        };
        line(format!(
            "  {} pid {} {}: {} calls, {}{bad}",
            p.name, p.pid, p.exe, p.calls, p.end
        ));
    }
    if report.calls == 0 {
        line("nothing was recorded: no traced driver call was made".into());
        return t;
    }
    for f in &report.findings {
        let class = match f.class {
            FindingClass::Hazard => "HAZARD",
            FindingClass::IgnoredError => "IGNORED ERROR",
        };
        let at = f.seq.map_or_else(String::new, |s| format!(" seq {s}"));
        line(format!(
            "{class} {} in {} at {}{at}: {} [{}]",
            f.kind,
            process_name(report, f.pid),
            f.call,
            f.detail,
            f.found_by
        ));
    }
    for run in &report.simulator {
        let hazards = if run.hazards.is_empty() {
            "none".into()
        } else {
            run.hazards.join(", ")
        };
        line(format!(
            "simulator ({} profile): replay {}, hazards: {hazards}",
            run.dialect, run.status
        ));
    }
    if let Some(r) = &report.reliance {
        for l in reliance_lines(report, r) {
            line(l);
        }
    }
    line(format!(
        "{} calls are in the replay as comments only (kernels, failed calls, ...)",
        report.not_replayed
    ));
    let ignored = report.findings.len() - report.hazards();
    line(format!(
        "verdict: {} ({} hazards, {} ignored errors)",
        report.verdict,
        report.hazards(),
        ignored
    ));
    t
}

fn markdown_report(report: &CheckReport) -> String {
    let mut m = format!(
        "# check {}\n\n**{}**: {} hazards, {} ignored errors; {} calls in {} processes.\n\n",
        report.dir,
        report.verdict,
        report.hazards(),
        report.findings.len() - report.hazards(),
        report.calls,
        report.processes.len()
    );
    if !report.findings.is_empty() {
        m.push_str("| class | kind | process | call | detail |\n| --- | --- | --- | --- | --- |\n");
        for f in &report.findings {
            m.push_str(&format!(
                "| {:?} | {} | {} | {} {} | {} |\n",
                f.class,
                f.kind,
                process_name(report, f.pid),
                f.call,
                f.seq.map_or_else(String::new, |s| format!("(seq {s})")),
                f.detail.replace('|', "\\|")
            ));
        }
        m.push('\n');
    }
    for run in &report.simulator {
        m.push_str(&format!(
            "- simulator, {} profile: replay {}, hazards: {}\n",
            run.dialect,
            run.status,
            if run.hazards.is_empty() {
                "none".into()
            } else {
                run.hazards.join(", ")
            }
        ));
    }
    if let Some(r) = &report.reliance {
        m.push_str("\n## Reliance\n\n");
        for l in reliance_lines(report, r) {
            m.push_str(&format!("- {}\n", l.trim_start()));
        }
    }
    m
}

/// The reliance section: the summary, then each differing step with the
/// traced call behind it and the choices (with tiers) that decide it.
fn reliance_lines(report: &CheckReport, r: &reliance::Reliance) -> Vec<String> {
    let mut out = vec![format!("reliance: {}", r.summary)];
    for s in &r.steps {
        let at = s.seq.map_or_else(String::new, |q| format!(" seq {q}"));
        let tier = s.tier.map_or("unattributed", |t| t.as_str());
        out.push(format!(
            "  relies on {tier} behaviour at replay line {} `{}` ({} {}{at}): \
             measured {}, {} {}; because {}",
            s.replay_line,
            s.op,
            process_name(report, s.pid),
            s.call,
            s.measured,
            s.profile,
            s.other,
            s.because()
        ));
    }
    for n in &r.notes {
        out.push(format!("  note: {n}"));
    }
    out
}

/// `ipc-conformance check DIR`.
pub fn command(args: &CheckArgs) -> Result<u8, String> {
    let (report, replay) = check_dir(&args.dir)?;
    let text = text_report(&report);
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
    if report.calls == 0 {
        return Ok(EXIT_OK);
    }
    let out = args.out.clone().unwrap_or_else(|| args.dir.clone());
    std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let json = serde_json::to_vec_pretty(&report).map_err(|e| e.to_string())?;
    for (name, bytes) in [
        ("check.txt", text.as_bytes()),
        ("check.json", json.as_slice()),
        ("summary.md", markdown_report(&report).as_bytes()),
        ("replay.ipc", replay.as_bytes()),
    ] {
        crate::report::write_atomic(&out.join(name), bytes).map_err(|e| e.to_string())?;
    }
    println!(
        "wrote check.txt, check.json, summary.md and replay.ipc to {}",
        out.display()
    );
    Ok(if report.hazards() > 0 {
        EXIT_FAILURES
    } else {
        EXIT_OK
    })
}
