//! `check`'s reports: what `check.json` holds ([`CheckReport`]), and its
//! text (`check.txt`, also printed) and markdown (`summary.md`) forms.

use super::judge::SimulatorRun;
use super::model::{Finding, FindingClass, Verdict};
use super::reliance::Reliance;
use super::sync_rules::SyncRule;
use serde::Serialize;

#[derive(Debug, Serialize)]
pub struct ProcessSummary {
    /// Its name in the replay (`p1`).
    pub name: String,
    pub pid: u32,
    pub ppid: Option<u32>,
    /// Its executable, printable on one line.
    pub exe: String,
    /// The trace file it came from, printable on one line.
    pub file: String,
    /// The device its first context was on (where the replay starts it).
    pub device: u32,
    pub calls: usize,
    /// `exit` when the process wrote its exit record, else `no exit record`
    /// (a crash, a signal, or `_exit`).
    pub end: String,
    pub unreadable_lines: Vec<usize>,
}

#[derive(Debug, Serialize)]
pub struct CheckReport {
    pub dir: String,
    /// `clean`, `hazards`, `not judged` or `nothing recorded`.
    pub verdict: String,
    /// The exit code that goes with it: 0 clean (or nothing recorded),
    /// 1 hazards, 4 not judged.
    pub exit_code: u8,
    /// Why the trace is not judged (empty otherwise).
    pub reasons: Vec<String>,
    /// What the reader should know that changes no verdict.
    pub notes: Vec<String>,
    pub processes: Vec<ProcessSummary>,
    pub calls: usize,
    pub findings: Vec<Finding>,
    /// Findings beyond the listed number of each class.
    pub findings_left_out: usize,
    /// The rows of the synchronisation table the findings cite.
    pub sync_rules: Vec<SyncRule>,
    /// The simulator's run of the replay (driver dialect).
    pub simulator: Vec<SimulatorRun>,
    /// Which semantic choices the program's outcome rests on, step by step,
    /// with their tiers (absent when it was not computed). Never a hazard.
    pub reliance: Option<Reliance>,
    /// Why the reliance section was not computed, when it was not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reliance_skipped: Option<String>,
    /// Calls recorded that the replay carries as comments only.
    pub not_replayed: usize,
    pub replay: String,
}

impl CheckReport {
    pub fn count(&self, class: FindingClass) -> usize {
        self.findings
            .iter()
            .filter(|f| f.class == class && !f.after_divergence)
            .count()
    }

    /// Hazards that count (logged before any divergence).
    pub fn hazards(&self) -> usize {
        self.count(FindingClass::Hazard)
    }

    pub fn verdict(&self) -> Verdict {
        match self.verdict.as_str() {
            "clean" => Verdict::Clean,
            "hazards" => Verdict::Hazards,
            "not judged" => Verdict::NotJudged,
            _ => Verdict::NothingRecorded,
        }
    }
}

fn process_name(f: &Finding) -> String {
    format!("{} (pid {})", f.process, f.pid)
}

/// `p2 (pid 29417)` for a pid of the report.
fn pid_name(report: &CheckReport, pid: u32) -> String {
    report.processes.iter().find(|p| p.pid == pid).map_or_else(
        || format!("pid {pid}"),
        |p| format!("{} (pid {pid})", p.name),
    )
}

fn class_word(class: FindingClass) -> &'static str {
    match class {
        FindingClass::Hazard => "HAZARD",
        FindingClass::IgnoredError => "IGNORED ERROR",
        FindingClass::Fidelity => "FIDELITY",
        FindingClass::Note => "NOTE",
    }
}

fn finding_line(f: &Finding) -> String {
    let at = f.seq.map_or_else(String::new, |s| format!(" seq {s}"));
    let late = if f.after_divergence {
        " (after the replay diverged: not counted)"
    } else {
        ""
    };
    format!(
        "{} {} in {} at {}{at}: {} [{}]{late}",
        class_word(f.class),
        f.kind,
        process_name(f),
        f.call,
        f.detail,
        f.found_by
    )
}

/// What the exit code means, for the verdict line.
fn exit_meaning(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Clean | Verdict::NothingRecorded => "exit 0",
        Verdict::Hazards => "exit 1",
        Verdict::NotJudged => "exit 4: neither clean nor hazards",
    }
}

/// The human report (also printed).
pub fn text(report: &CheckReport) -> String {
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
            "  {} pid {} {} ({}): {} calls, {}, device {}{bad}",
            p.name, p.pid, p.exe, p.file, p.calls, p.end, p.device
        ));
    }
    if report.verdict() == Verdict::NothingRecorded {
        line("nothing was recorded: no traced driver call was made".into());
        return t;
    }
    for f in &report.findings {
        line(finding_line(f));
    }
    if report.findings_left_out > 0 {
        line(format!(
            "({} more findings not listed)",
            report.findings_left_out
        ));
    }
    for r in &report.reasons {
        line(format!("not judged: {r}"));
    }
    for n in &report.notes {
        line(format!("note: {n}"));
    }
    for rule in &report.sync_rules {
        line(format!("rule [{}]: {} ({})", rule.id, rule.says, rule.page));
    }
    for run in &report.simulator {
        let hazards = if run.hazards.is_empty() {
            "none".into()
        } else {
            run.hazards.join(", ")
        };
        line(format!(
            "simulator ({} dialect): replay {}, hazards: {hazards}",
            run.dialect, run.status
        ));
    }
    if let Some(r) = &report.reliance {
        for l in reliance_lines(report, r) {
            line(l);
        }
    }
    if let Some(why) = &report.reliance_skipped {
        line(format!("reliance: not computed: {why}"));
    }
    line(format!(
        "{} calls are in the replay as comments only (opaque kernels, failed calls, ...)",
        report.not_replayed
    ));
    line(format!(
        "verdict: {} ({} hazards, {} ignored errors) - {}",
        report.verdict,
        report.hazards(),
        report.count(FindingClass::IgnoredError),
        exit_meaning(report.verdict())
    ));
    t
}

/// `summary.md`.
pub fn markdown(report: &CheckReport) -> String {
    let mut m = format!(
        "# check {}\n\n**{}**: {} hazards, {} ignored errors; {} calls in {} processes.\n\n",
        report.dir,
        report.verdict,
        report.hazards(),
        report.count(FindingClass::IgnoredError),
        report.calls,
        report.processes.len()
    );
    if !report.reasons.is_empty() {
        m.push_str("Not judged:\n\n");
        for r in &report.reasons {
            m.push_str(&format!("- {}\n", r.replace('|', "\\|")));
        }
        m.push('\n');
    }
    if !report.findings.is_empty() {
        m.push_str("| class | kind | process | call | detail |\n| --- | --- | --- | --- | --- |\n");
        for f in &report.findings {
            m.push_str(&format!(
                "| {:?}{} | {} | {} | {} {} | {} |\n",
                f.class,
                if f.after_divergence {
                    " (not counted)"
                } else {
                    ""
                },
                f.kind,
                process_name(f),
                f.call.replace('|', "\\|"),
                f.seq.map_or_else(String::new, |s| format!("(seq {s})")),
                f.detail.replace('|', "\\|")
            ));
        }
        m.push('\n');
    }
    for n in &report.notes {
        m.push_str(&format!("- note: {}\n", n.replace('|', "\\|")));
    }
    for run in &report.simulator {
        m.push_str(&format!(
            "- simulator, {} dialect: replay {}, hazards: {}\n",
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
fn reliance_lines(report: &CheckReport, r: &Reliance) -> Vec<String> {
    let mut out = vec![format!("reliance: {}", r.summary)];
    // Steps the other profile skipped follow from a difference listed
    // before them (a name left unbound there): counted, not listed.
    let (followers, listed): (Vec<_>, Vec<_>) = r
        .steps
        .iter()
        .partition(|s| s.other.starts_with("skipped:"));
    for s in listed {
        let at = s.seq.map_or_else(String::new, |q| format!(" seq {q}"));
        let tier = s.tier.map_or("unattributed", |t| t.as_str());
        out.push(format!(
            "  relies on {tier} behaviour at replay line {} `{}` ({} {}{at}): \
             measured {}, {} {}; because {}",
            s.replay_line,
            s.op,
            pid_name(report, s.pid),
            s.call,
            s.measured,
            s.profile,
            s.other,
            s.because()
        ));
    }
    if !followers.is_empty() {
        out.push(format!(
            "  and {} step(s) the other profile could not run for want of what those left \
             unmade (check.json lists them)",
            followers.len()
        ));
    }
    for n in &r.notes {
        out.push(format!("  note: {n}"));
    }
    out
}
