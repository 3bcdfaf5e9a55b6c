//! Where a run spends its time, when [`PROFILE_ENV`] is set: wall time per
//! phase of the harness side (for the real backend: a machine's launch,
//! worker spawns, the pool's refill, each request's round trip by request
//! name, the reset and shutdown at a machine's end; for `explore`: each
//! case's simulator checks and real run), summed over the whole run and
//! printed by the CLI at its end. Off by default: then [`timed`] costs one
//! check of a value initialised once.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Set (to anything but `0`) to collect and print the profile.
pub const PROFILE_ENV: &str = "IPC_CONFORMANCE_PROFILE";

/// Count and total wall time of one phase.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PhaseTime {
    /// How many times the phase ran.
    pub count: u64,
    /// Their summed wall time.
    pub total: Duration,
}

fn table() -> Option<&'static Mutex<BTreeMap<&'static str, PhaseTime>>> {
    static TABLE: OnceLock<Option<Mutex<BTreeMap<&'static str, PhaseTime>>>> = OnceLock::new();
    TABLE
        .get_or_init(|| {
            std::env::var(PROFILE_ENV)
                .is_ok_and(|v| v.trim() != "0" && !v.trim().is_empty())
                .then(|| Mutex::new(BTreeMap::new()))
        })
        .as_ref()
}

/// Whether this process collects a profile.
pub fn enabled() -> bool {
    table().is_some()
}

/// Runs `f`, adding its wall time to `phase` when profiling.
pub fn timed<T>(phase: &'static str, f: impl FnOnce() -> T) -> T {
    match table() {
        None => f(),
        Some(t) => {
            let started = Instant::now();
            let out = f();
            let elapsed = started.elapsed();
            let mut t = t.lock().unwrap_or_else(|e| e.into_inner());
            let entry = t.entry(phase).or_default();
            entry.count += 1;
            entry.total += elapsed;
            out
        }
    }
}

/// The phases so far (empty when not profiling).
pub fn snapshot() -> BTreeMap<&'static str, PhaseTime> {
    table()
        .map(|t| t.lock().unwrap_or_else(|e| e.into_inner()).clone())
        .unwrap_or_default()
}

/// The profile as a table, slowest phase first; `None` when not profiling.
/// Phases nest (a launch includes the pool's refill and the `init` waits),
/// so the totals do not add up to the run's wall time.
pub fn report() -> Option<String> {
    enabled().then(|| render(&snapshot()))
}

fn render(phases: &BTreeMap<&'static str, PhaseTime>) -> String {
    let mut rows: Vec<(&&str, &PhaseTime)> = phases.iter().collect();
    rows.sort_by(|a, b| b.1.total.cmp(&a.1.total).then(a.0.cmp(b.0)));
    let mut out = String::from("profile (harness side, wall time; phases nest):\n");
    out.push_str(&format!(
        "  {:<28} {:>8} {:>11} {:>10}\n",
        "phase", "count", "total ms", "mean ms"
    ));
    for (name, p) in rows {
        let total = p.total.as_secs_f64() * 1e3;
        let mean = if p.count == 0 {
            0.0
        } else {
            total / p.count as f64
        };
        out.push_str(&format!(
            "  {:<28} {:>8} {:>11.1} {:>10.3}\n",
            name, p.count, total, mean
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_puts_the_slowest_phase_first_with_its_mean() {
        let mut phases = BTreeMap::new();
        phases.insert(
            "request malloc",
            PhaseTime {
                count: 4,
                total: Duration::from_millis(2),
            },
        );
        phases.insert(
            "launch",
            PhaseTime {
                count: 2,
                total: Duration::from_millis(300),
            },
        );
        let text = render(&phases);
        let launch = text.find("launch").expect("launch row");
        let malloc = text.find("request malloc").expect("malloc row");
        assert!(launch < malloc, "{text}");
        assert!(text.contains("150.000"), "mean of launch: {text}");
        assert!(text.contains("0.500"), "mean of malloc: {text}");
    }
}
