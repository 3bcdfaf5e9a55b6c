//! `ipc-conformance portability FILE...`: each scenario under every
//! simulator profile, and where its outcomes depend on the profile
//! (docs/portability.md). The work is `ipc_mock_driver::portability`; this
//! module reads the files and prints the verdicts.

use crate::report::text::outcome_text;
use crate::{EXIT_FAILURES, EXIT_OK};
use ipc_harness::scenario::{self, ExecOptions, Scenario};
use ipc_harness::Dialect;
use ipc_mock_driver::portability::{check_scenario, ScenarioPortability};
use ipc_mock_driver::profiles::{choice_tier, Profile};
use ipc_mock_driver::SimConfig;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What a `portability` run takes from its command line.
pub struct PortabilityRun<'a> {
    pub files: &'a [PathBuf],
    pub dialects: Vec<Dialect>,
    pub seed: u64,
    pub step_timeout: Duration,
    pub sim_devices: Option<u32>,
    /// Print only the files whose outcome depends on the profile.
    pub quiet: bool,
}

pub fn command(a: &PortabilityRun) -> Result<u8, String> {
    let mut machine = SimConfig::default();
    if let Some(devices) = a.sim_devices {
        if devices == 0 {
            return Err("--sim-devices must be at least 1".into());
        }
        machine.devices = devices;
    }
    // Every file is read before anything runs: bad input is one clear error.
    let scenarios: Vec<(PathBuf, Scenario)> = a
        .files
        .iter()
        .map(|f| {
            scenario::parse_file(f)
                .map(|s| (f.clone(), s))
                .map_err(|e| e.to_string())
        })
        .collect::<Result<_, _>>()?;
    let mut differing = 0;
    let mut checked = 0;
    for (file, scenario) in &scenarios {
        for &dialect in &a.dialects {
            let opts = ExecOptions {
                dialect,
                seed: a.seed,
                step_timeout: a.step_timeout,
            };
            let report = check_scenario(scenario, &opts, &machine);
            checked += 1;
            if !report.is_portable() {
                differing += 1;
            }
            if !a.quiet || !report.is_portable() {
                print(&report_text(file, &report));
            }
        }
    }
    print(&format!(
        "{differing} of {checked} scenario runs depend on the profile ({})\n",
        Profile::ALL.map(Profile::as_str).join(", ")
    ));
    Ok(if differing == 0 {
        EXIT_OK
    } else {
        EXIT_FAILURES
    })
}

fn print(text: &str) {
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

/// The verdict for one file and dialect, as printed.
pub fn report_text(file: &Path, r: &ScenarioPortability) -> String {
    let mut out = String::new();
    let verdicts: Vec<String> = r
        .verdicts
        .iter()
        .map(|(p, s, _)| format!("{p} {}", s.name()))
        .collect();
    if r.is_portable() {
        let _ = writeln!(
            out,
            "== {} [{}]: portable ({})",
            file.display(),
            r.dialect,
            verdicts.join(", ")
        );
        return out;
    }
    let tiers: Vec<&str> = r.tiers().into_iter().map(|t| t.as_str()).collect();
    let _ = writeln!(
        out,
        "== {} [{}]: depends on the profile (tiers: {}; {})",
        file.display(),
        r.dialect,
        if tiers.is_empty() {
            "unnamed".to_string()
        } else {
            tiers.join(", ")
        },
        verdicts.join(", ")
    );
    for d in &r.divergences {
        let side = |o: &Option<ipc_harness::trace::StepOutcome>| {
            o.as_ref()
                .map(outcome_text)
                .unwrap_or_else(|| "(not run)".into())
        };
        let _ = writeln!(
            out,
            "  {} line {} `{}`: measured {}, {} {}",
            d.profile,
            d.line,
            d.op,
            side(&d.measured),
            d.profile,
            side(&d.other)
        );
        let _ = writeln!(out, "      because {}", d.causes.text());
    }
    out
}

/// The profiles and what each one sets, for `ipc-conformance semantics`.
pub fn profiles_text() -> String {
    let mut out = String::from("Profiles (--profile NAME; --semantics applies on top):\n\n");
    for p in Profile::ALL {
        let _ = writeln!(out, "{} - {}", p, p.summary());
        let settings = p.settings();
        if settings.is_empty() {
            let _ = writeln!(out, "    (the defaults)");
        }
        for (name, value) in settings {
            let tier = choice_tier(name).map_or("?", |c| c.tier.as_str());
            let _ = writeln!(
                out,
                "    {name} = {value}    (tier of the measured value: {tier})"
            );
        }
        out.push('\n');
    }
    out
}

/// The tier of a choice's default, for the semantics listing.
pub fn tier_text(name: &str) -> String {
    match choice_tier(name) {
        Some(c) => format!("{}: {}", c.tier, c.rests_on),
        None => "no tier".into(),
    }
}
