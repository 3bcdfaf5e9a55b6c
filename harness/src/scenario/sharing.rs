//! Whether a scenario may run on workers that served earlier scenarios
//! (reset and reused), or needs fresh processes: a pure function of what
//! the scenario asserts ([`sharing`]).
//!
//! A reused worker has been reset (every allocation, mapping, event,
//! context, VMM object and descriptor its requests made released; see
//! `cuda/worker.rs`), but driver state no call releases survives: where the
//! next allocation lands, the primary contexts it retained, what loaded
//! modules occupy. A scenario whose expectations cannot see that history
//! gives the same verdict either way; one whose expectations can gets fresh
//! processes. The rules, each with the reason [`WorkerSharing::Fresh`]
//! carries:
//!
//! - `# workers: fresh` in the header marks a scenario fresh by hand.
//! - A process declared `pidns=new`: pooled workers run in the harness's
//!   PID namespace.
//! - `# tier: incidental`: one driver's accident may well be one of history.
//! - An expectation that compares values (`== X`, `!= X`, `base == X`,
//!   `base != X`): pointers and handles, whose values depend on what the
//!   process allocated before.
//! - A step expected to kill its process (`=> crash`), and `exit`: process
//!   ends, which a reset neither undoes nor replays.
//! - Ops whose effect a reset does not undo: `ctx_destroy` (a destroyed
//!   context's VA goes to the next context), `enable_peer`, `set_device` /
//!   `primary_ctx` / `ctx_create` / `copy_peer` of a device other than the
//!   process's own (a retained primary context), interprocess events
//!   (`event_create flags=interprocess`, `ipc_get_event`, `ipc_open_event`:
//!   per-process shared event memory), a device's default memory pool
//!   (`pool_default`: it lives as long as the process).
//! - Shared: streams (the reset destroys them), memory pools a scenario
//!   creates or imports (the reset frees their allocations and imported
//!   pointers, then destroys them), copies on one device, the
//!   `pointer_attr` queries, `pidfd_getfd` (the reset closes the copied
//!   descriptor) and `fork_child_call` (the child is gone when the step
//!   ends).
//! - Any op not classified here yet (new ops start fresh until someone
//!   checks what a reset leaves of them).
//!
//! The policy is checked, not assumed: `run --check-sharing` runs every
//! scenario it lets share both ways and reports any difference.
//!
//! Two further rules are off by default, because `run --check-sharing` on
//! an H100 found every clause they concern identical on fresh and reused
//! workers ([`ShareAlso::CONFIRMED`]): `interprocess-events` (the reset
//! destroys the events a scenario created or opened; the worker then comes
//! back although it made interprocess events) and `exits` (a scenario's
//! surviving workers come back when others exited by an `exit` step).
//! [`SHARE_ALSO_ENV`] chooses them by hand: `none` turns both rules back
//! on, for a driver where a `--check-sharing` run disagrees.

use super::ast::{Expectation, Op};
use super::model::Scenario;
use crate::machine::WorkerFit;
use crate::tier::Tier;

/// The header key that marks a scenario by hand (`# workers: fresh`).
pub const WORKERS_KEY: &str = "workers";

pub use crate::machine::WorkerSharing;

/// Which workers a backend that can reuse them gives a scenario
/// (`--workers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WorkerPolicy {
    /// Fresh processes for every scenario.
    Fresh,
    /// Reused workers where [`sharing`] allows it, fresh ones elsewhere.
    #[default]
    ByScenario,
    /// Reused workers for every scenario (whatever it asserts).
    Reused,
}

impl WorkerPolicy {
    /// Every policy, in `--workers` order.
    pub const ALL: [WorkerPolicy; 3] = [
        WorkerPolicy::ByScenario,
        WorkerPolicy::Fresh,
        WorkerPolicy::Reused,
    ];

    /// `policy`, `fresh` or `reused`.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerPolicy::Fresh => "fresh",
            WorkerPolicy::ByScenario => "policy",
            WorkerPolicy::Reused => "reused",
        }
    }

    /// Whether a scenario of `sharing` runs on reused workers.
    pub fn reuses(self, sharing: &WorkerSharing) -> bool {
        match self {
            WorkerPolicy::Fresh => false,
            WorkerPolicy::ByScenario => sharing.is_reused(),
            WorkerPolicy::Reused => true,
        }
    }
}

impl std::str::FromStr for WorkerPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<WorkerPolicy, String> {
        WorkerPolicy::ALL
            .into_iter()
            .find(|p| p.as_str() == s.trim())
            .ok_or_else(|| {
                format!(
                    "unknown worker policy '{}' (valid: policy, fresh, reused)",
                    s.trim()
                )
            })
    }
}

/// Names the rules of the policy turned off, comma-separated, or `none`
/// (see [`ShareAlso`]); read by the harness and by every worker it starts.
/// Unset: [`ShareAlso::CONFIRMED`].
pub const SHARE_ALSO_ENV: &str = "IPC_CONFORMANCE_SHARE_ALSO";

/// Rules of the policy turned off ([`SHARE_ALSO_ENV`]). `Default` is
/// none (the strictest policy); what runs when the variable is unset is
/// [`ShareAlso::CONFIRMED`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShareAlso {
    /// `interprocess-events`: interprocess events (`event_create
    /// flags=interprocess`, `ipc_get_event`, `ipc_open_event`) no longer
    /// ask for fresh processes, and a worker that made them comes back
    /// after a clean reset (which destroys every event it created or
    /// opened).
    pub interprocess_events: bool,
    /// `exits`: `exit` no longer asks for fresh processes; a machine whose
    /// processes all still run or exited by an `exit` step gives its
    /// running workers back.
    pub exits: bool,
}

impl ShareAlso {
    /// The rules a `run --check-sharing` on a GPU confirmed may be off
    /// (every clause they concern gave identical results on fresh and
    /// reused workers): both.
    pub const CONFIRMED: ShareAlso = ShareAlso {
        interprocess_events: true,
        exits: true,
    };

    /// Every name, in the order [`SHARE_ALSO_ENV`] documents them.
    pub const NAMES: [&'static str; 2] = ["interprocess-events", "exits"];

    /// `interprocess-events,exits` (either, both), or `none` (or empty).
    pub fn parse(list: &str) -> Result<ShareAlso, String> {
        let mut also = ShareAlso::default();
        if list.trim() == "none" {
            return Ok(also);
        }
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match name {
                "interprocess-events" => also.interprocess_events = true,
                "exits" => also.exits = true,
                other => {
                    return Err(format!(
                        "{SHARE_ALSO_ENV}: unknown rule '{other}' (valid: {}, or none)",
                        Self::NAMES.join(", ")
                    ))
                }
            }
        }
        Ok(also)
    }

    /// What [`SHARE_ALSO_ENV`] says in this process (read once):
    /// [`CONFIRMED`](Self::CONFIRMED) when it is unset, none when it is
    /// invalid (callers that can report an error check it with
    /// [`parse`](Self::parse) first).
    pub fn from_env() -> ShareAlso {
        static ALSO: std::sync::OnceLock<ShareAlso> = std::sync::OnceLock::new();
        *ALSO.get_or_init(|| match std::env::var(SHARE_ALSO_ENV) {
            Err(_) => ShareAlso::CONFIRMED,
            Ok(v) => ShareAlso::parse(&v).unwrap_or_default(),
        })
    }
}

/// The sharing [`Scenario`] allows (see the [module docs](self)) with the
/// rules [`SHARE_ALSO_ENV`] turns off; the first rule that asks for fresh
/// processes gives the reason.
pub fn sharing(scenario: &Scenario) -> WorkerSharing {
    sharing_with(scenario, ShareAlso::from_env())
}

/// [`sharing`] with the rules `also` turns off.
pub fn sharing_with(scenario: &Scenario, also: ShareAlso) -> WorkerSharing {
    match fresh_reason(scenario, also) {
        Some(why) => WorkerSharing::Fresh(why),
        None => WorkerSharing::Reused,
    }
}

/// What each process of `scenario` will ask of its worker, in process
/// order (see [`WorkerFit`]).
pub fn worker_fits(scenario: &Scenario) -> Vec<WorkerFit> {
    let mut fits = vec![WorkerFit::default(); scenario.processes.len()];
    for step in &scenario.steps {
        if let (Op::CtxCreate { .. }, Some(fit)) = (&step.op, fits.get_mut(step.process)) {
            fit.creates_contexts = true;
        }
    }
    fits
}

fn fresh_reason(scenario: &Scenario, also: ShareAlso) -> Option<String> {
    if let Some(value) = scenario.meta.get(WORKERS_KEY) {
        return Some(match value.trim() {
            "fresh" => "marked '# workers: fresh'".to_string(),
            other => format!("unknown '# workers: {other}' (only 'fresh' is known)"),
        });
    }
    if let Some(tier) = scenario.meta.get("tier") {
        if tier.trim() == Tier::Incidental.as_str() {
            return Some("incidental tier".to_string());
        }
    }
    if let Some(p) = scenario.processes.iter().find(|p| p.in_new_pid_namespace()) {
        return Some(format!(
            "process '{}' runs in a PID namespace of its own (pidns=new)",
            p.name
        ));
    }
    for step in &scenario.steps {
        let own_device = scenario.processes.get(step.process).map_or(0, |p| p.device);
        if let Some(why) = op_fresh_reason(&step.op, own_device, also) {
            return Some(format!("line {}: {why}", step.line));
        }
        for list in step.expect.lists() {
            for e in list.items.iter() {
                if let Some(why) = expectation_fresh_reason(e) {
                    return Some(format!("line {}: {why}", step.line));
                }
            }
        }
    }
    None
}

fn expectation_fresh_reason(e: &Expectation) -> Option<String> {
    match e {
        Expectation::Eq(_)
        | Expectation::Ne(_)
        | Expectation::BaseEq(_)
        | Expectation::BaseNe(_) => Some(format!(
            "'{e}' compares values that depend on allocation history"
        )),
        Expectation::Crash => Some("a step is expected to kill its process".to_string()),
        Expectation::Ok
        | Expectation::Any
        | Expectation::AnyError
        | Expectation::Error { .. }
        | Expectation::OneOf(_)
        | Expectation::Bytes(_)
        | Expectation::Value(_)
        | Expectation::Size(_)
        | Expectation::Type(_)
        | Expectation::Device(_) => None,
    }
}

fn op_fresh_reason(op: &Op, own_device: u32, also: ShareAlso) -> Option<String> {
    use crate::driver::event_flags::INTERPROCESS;
    let other_device = |device: u32, what: &str| {
        (device != own_device)
            .then(|| format!("{what} {device} retains a primary context a reset does not release"))
    };
    match op {
        Op::Exit if also.exits => None,
        Op::EventCreate { flags } if flags & INTERPROCESS != 0 && also.interprocess_events => None,
        Op::IpcGetEvent { .. } | Op::IpcOpenEvent { .. } if also.interprocess_events => None,
        Op::Exit => Some("a process exits".to_string()),
        Op::CtxDestroy { .. } => Some("a destroyed context's VA goes to the next one".to_string()),
        Op::EnablePeer { .. } => Some("peer access outlives a reset".to_string()),
        Op::SetDevice { device } => other_device(*device, "set_device"),
        Op::PrimaryCtx { device } => other_device(*device, "primary_ctx"),
        Op::CtxCreate { device } => other_device(*device, "ctx_create"),
        Op::EventCreate { flags } if flags & INTERPROCESS != 0 => {
            Some("an interprocess event outlives a reset".to_string())
        }
        Op::IpcGetEvent { .. } | Op::IpcOpenEvent { .. } => {
            Some("an interprocess event outlives a reset".to_string())
        }
        Op::CopyPeer {
            dst_device,
            src_device,
            ..
        } => other_device(*dst_device, "copy_peer to device")
            .or_else(|| other_device(*src_device, "copy_peer from device")),
        Op::PoolCreate { device, .. } => other_device(*device, "pool_create on device"),
        Op::PoolDefault { .. } => {
            Some("a device's default memory pool outlives a reset".to_string())
        }
        Op::DeviceCount
        | Op::Attr { .. }
        | Op::CanAccessPeer { .. }
        | Op::CtxSet { .. }
        | Op::CtxCurrent
        | Op::Malloc { .. }
        | Op::Free { .. }
        | Op::Offset { .. }
        | Op::Fill { .. }
        | Op::Write { .. }
        | Op::Read { .. }
        | Op::DeviceRead { .. }
        | Op::AddressRange { .. }
        | Op::PointerAttr { .. }
        | Op::IpcGet { .. }
        | Op::IpcOpen { .. }
        | Op::Sync
        | Op::IpcClose { .. }
        | Op::HandleZero
        | Op::HandleRandom
        | Op::HandleFlip { .. }
        | Op::Send { .. }
        | Op::VmmGranularity { .. }
        | Op::VmmCreate { .. }
        | Op::VmmExport { .. }
        | Op::VmmImport { .. }
        | Op::VmmReserve { .. }
        | Op::VmmMap { .. }
        | Op::VmmSetAccess { .. }
        | Op::VmmUnmap { .. }
        | Op::VmmAddressFree { .. }
        | Op::VmmRelease { .. }
        | Op::FdClose { .. }
        | Op::FdNullDevice
        | Op::FdNumber { .. }
        | Op::SendFd { .. }
        | Op::EventCreate { .. }
        | Op::EventRecord { .. }
        | Op::EventQuery { .. }
        | Op::EventSync { .. }
        | Op::StreamWait { .. }
        | Op::EventElapsed { .. }
        | Op::EventDestroy { .. }
        | Op::EventHandleZero
        | Op::EventHandleRandom
        | Op::SlowFill { .. }
        | Op::KernelPattern { .. }
        | Op::PointerAttribute { .. }
        | Op::Copy { .. }
        | Op::PidfdGetfd { .. }
        | Op::ForkChildAlloc { .. }
        | Op::StreamCreate { .. }
        | Op::StreamDestroy { .. }
        | Op::StreamSync { .. }
        | Op::StreamQuery { .. }
        | Op::PoolDestroy { .. }
        | Op::PoolExport { .. }
        | Op::PoolImport { .. }
        | Op::PoolSetAccess { .. }
        | Op::PoolGetAccess { .. }
        | Op::PoolAlloc { .. }
        | Op::PoolFree { .. }
        | Op::PoolExportPtr { .. }
        | Op::PoolImportPtr { .. } => None,
        #[allow(unreachable_patterns)]
        other => Some(format!(
            "'{}' is not classified for worker reuse",
            other.keyword()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn of(text: &str) -> WorkerSharing {
        of_with(text, ShareAlso::default())
    }

    fn of_with(text: &str, also: ShareAlso) -> WorkerSharing {
        let scenario = crate::scenario::parser::parse(text, Path::new("<inline>")).expect("parses");
        sharing_with(&scenario, also)
    }

    fn reason(text: &str) -> String {
        match of(text) {
            WorkerSharing::Fresh(why) => why,
            WorkerSharing::Reused => panic!("expected fresh:\n{text}"),
        }
    }

    const BASE: &str = "devices 1\nprocess a device=0\nprocess b device=0\n";

    #[test]
    fn only_a_process_that_creates_contexts_wants_spares() {
        let text = format!("{BASE}b: c = ctx_create 0\na: x = malloc 4KiB\n");
        let scenario =
            crate::scenario::parser::parse(&text, Path::new("<inline>")).expect("parses");
        let fits: Vec<bool> = worker_fits(&scenario)
            .iter()
            .map(|f| f.creates_contexts)
            .collect();
        assert_eq!(fits, vec![false, true]);
    }

    #[test]
    fn policies_parse_and_decide() {
        for p in WorkerPolicy::ALL {
            assert_eq!(p.as_str().parse(), Ok(p));
        }
        assert!("shared"
            .parse::<WorkerPolicy>()
            .unwrap_err()
            .contains("valid: policy, fresh, reused"));
        let fresh = WorkerSharing::Fresh("x".into());
        assert!(WorkerPolicy::ByScenario.reuses(&WorkerSharing::Reused));
        assert!(!WorkerPolicy::ByScenario.reuses(&fresh));
        assert!(!WorkerPolicy::Fresh.reuses(&WorkerSharing::Reused));
        assert!(WorkerPolicy::Reused.reuses(&fresh));
    }

    #[test]
    fn a_value_only_scenario_is_reused() {
        let text = format!(
            "# tier: contract\n{BASE}a: p = malloc 64\na: fill p 0xab\na: h = ipc_get p\n\
             a: send h -> b\nb: q = ipc_open h\nb: read q 0 4 => bytes ab*4\n"
        );
        assert_eq!(of(&text), WorkerSharing::Reused);
        assert_eq!(of(&text).to_string(), "reused");
    }

    #[test]
    fn pointer_comparisons_and_process_ends_need_fresh_workers() {
        let eq = format!("{BASE}a: p = malloc 64\na: free p\na: q = malloc 64 => == p\n");
        assert!(
            reason(&eq).starts_with("line 6: '== p' compares"),
            "{}",
            reason(&eq)
        );
        let exit = format!("{BASE}a: p = malloc 64\na: exit\n");
        assert_eq!(reason(&exit), "line 5: a process exits");
        let destroy = format!("{BASE}a: c = ctx_create 0\na: ctx_destroy c\n");
        assert!(reason(&destroy).contains("destroyed context"));
    }

    #[test]
    fn tier_and_header_decide_first() {
        let incidental = format!("# tier: incidental\n{BASE}a: p = malloc 64\n");
        assert_eq!(reason(&incidental), "incidental tier");
        let marked = format!("# tier: contract\n# workers: fresh\n{BASE}a: p = malloc 64\n");
        assert_eq!(reason(&marked), "marked '# workers: fresh'");
        let unknown = format!("# workers: shared\n{BASE}a: p = malloc 64\n");
        assert!(reason(&unknown).contains("unknown '# workers: shared'"));
    }

    #[test]
    fn interprocess_events_and_other_devices_need_fresh_workers() {
        let timing = format!("{BASE}a: e = event_create flags=disable_timing\n");
        assert_eq!(of(&timing), WorkerSharing::Reused);
        let ipc = format!("{BASE}a: e = event_create flags=disable_timing,interprocess\n");
        assert!(reason(&ipc).contains("interprocess event"));
        let own = "devices 2\nprocess a device=1\na: set_device 1\n";
        assert_eq!(of(own), WorkerSharing::Reused);
        let other = "devices 2\nprocess a device=0\na: set_device 1\n";
        assert!(reason(other).contains("set_device 1 retains a primary context"));
    }

    #[test]
    fn streams_copies_and_pools_are_shared_default_pools_and_peer_copies_not() {
        let streams = format!(
            "{BASE}a: s = stream_create flags=nonblocking\na: p = malloc 64\na: q = malloc 64\n\
             a: copy q p 64 stream=s\na: stream_sync s\na: stream_destroy s\n"
        );
        assert_eq!(of(&streams), WorkerSharing::Reused);
        let pool = format!(
            "{BASE}a: pl = pool_create\na: q = pool_alloc pl 64\na: pool_free q\na: pool_destroy pl\n"
        );
        assert_eq!(of(&pool), WorkerSharing::Reused);
        let default_pool = format!("{BASE}a: pl = pool_default\n");
        assert!(
            reason(&default_pool).contains("default memory pool"),
            "{}",
            reason(&default_pool)
        );
        let peer = "devices 2\nprocess a device=0\n\
                    a: p = malloc 64\na: q = malloc 64\na: copy_peer q 1 p 0 64\n";
        assert!(
            reason(peer).contains("copy_peer to device 1 retains a primary context"),
            "{}",
            reason(peer)
        );
    }

    #[test]
    fn share_also_names_parse_and_unknown_ones_are_refused() {
        assert_eq!(ShareAlso::parse(""), Ok(ShareAlso::default()));
        assert_eq!(ShareAlso::parse(" none "), Ok(ShareAlso::default()));
        assert!(ShareAlso::parse("none,exits").is_err());
        let both = ShareAlso {
            interprocess_events: true,
            exits: true,
        };
        assert_eq!(ShareAlso::parse(" exits , interprocess-events "), Ok(both));
        assert_eq!(
            ShareAlso::parse("exits").map(|a| (a.exits, a.interprocess_events)),
            Ok((true, false))
        );
        let e = ShareAlso::parse("exits,events").unwrap_err();
        assert!(e.contains(SHARE_ALSO_ENV) && e.contains("'events'"), "{e}");
    }

    #[test]
    fn share_also_turns_off_only_the_rules_it_names() {
        let events = ShareAlso {
            interprocess_events: true,
            ..ShareAlso::default()
        };
        let exits = ShareAlso {
            exits: true,
            ..ShareAlso::default()
        };
        let ipc = format!(
            "{BASE}a: e = event_create flags=disable_timing,interprocess\n\
             a: h = ipc_get_event e\na: send h -> b\nb: o = ipc_open_event h\n"
        );
        assert_eq!(of_with(&ipc, events), WorkerSharing::Reused);
        assert!(matches!(of_with(&ipc, exits), WorkerSharing::Fresh(_)));
        let exit = format!("{BASE}a: exit\n");
        assert_eq!(of_with(&exit, exits), WorkerSharing::Reused);
        assert!(matches!(of_with(&exit, events), WorkerSharing::Fresh(_)));
        // The other rules still hold.
        let crash = format!("{BASE}a: exit\nb: p = malloc 4 => crash\n");
        assert!(reason_with(&crash, exits).contains("kill its process"));
        let both = format!("{ipc}a: exit\n");
        assert!(matches!(of_with(&both, events), WorkerSharing::Fresh(_)));
        assert_eq!(
            of_with(
                &both,
                ShareAlso {
                    interprocess_events: true,
                    exits: true
                }
            ),
            WorkerSharing::Reused
        );
    }

    fn reason_with(text: &str, also: ShareAlso) -> String {
        match of_with(text, also) {
            WorkerSharing::Fresh(why) => why,
            WorkerSharing::Reused => panic!("expected fresh:\n{text}"),
        }
    }
}
