//! Whether a scenario may run on workers that served earlier scenarios
//! (reset and reused), or needs fresh processes ([`sharing`]): a function
//! of what the scenario does and asserts, and of what `run
//! --check-sharing` measured on a GPU ([`CheckedClauses`]).
//!
//! A reused worker has been reset (every allocation, mapping, event,
//! context, VMM object and descriptor its requests made released; see
//! `cuda/worker.rs`), but driver state no call releases survives: where the
//! next allocation lands, the primary contexts it retained, what loaded
//! modules occupy. Two kinds of rule follow, each giving the reason that
//! [`WorkerSharing::Fresh`] carries.
//!
//! **Rules a check cannot lift**, for what a scenario does that a reset
//! does not undo, or that a reused worker cannot do at all. Most concern
//! one process, the one whose step meets them: that process takes a fresh
//! worker (its [`WorkerFit::fresh`]) and its worker serves no other
//! scenario, while the scenario's other processes still share. Only when
//! every process, or the scenario as a whole, meets one does the scenario
//! get fresh processes throughout.
//!
//! - `# workers: fresh` in the header marks a scenario fresh by hand (the
//!   whole scenario).
//! - A process declared `pidns=new`: pooled workers run in the harness's
//!   PID namespace.
//! - A step expected to kill its process (`=> crash`), and `exit`: process
//!   ends, which a reset neither undoes nor replays.
//! - Ops whose effect a reset does not undo: `ctx_destroy` (a destroyed
//!   context's VA goes to the next context), `enable_peer`, `set_device` /
//!   `primary_ctx` / `ctx_create` / `copy_peer` of a device other than the
//!   process's own (a retained primary context), interprocess events
//!   (`event_create flags=interprocess`, `ipc_get_event`, `ipc_open_event`:
//!   per-process shared event memory), a device's default memory pool
//!   (`pool_default`: it lives as long as the process).
//! - A memory pool destroyed with an allocation of it outstanding
//!   (documented: the pool goes once the allocation is freed), memory
//!   pools in a scenario whose behaviour is undefined, and the pool
//!   patterns that make it so (an exporter freeing an allocation another
//!   process imports, an import after the exporter's free; both sides): on
//!   2 x H200 (driver 580.159.04) the reset worker of such a process died
//!   of SIGFPE at the next scenario's first `pool_alloc`.
//! - A damaged handle (`handle_flip`) in a scenario that makes VMM
//!   allocations: the error depends on every VMM allocation the exporter's
//!   process made (mem.handle.check-word-with-vmm-allocation); the whole
//!   scenario.
//! - `ctx_create` in a scenario that opens a damaged handle: a reused
//!   worker serves it with a spare context, so no descriptor is taken and
//!   no VA arena begins (mem.handle.memory-type-before-context-rules
//!   failed on reset workers); the process that creates the context. In a
//!   scenario that compares values, that process instead needs new
//!   contexts ([`WorkerFit::new_contexts`]): it takes a served worker only
//!   if that worker never made a context, and the comparison waits for a
//!   check like any other.
//! - Any op not classified here yet (new ops start fresh until someone
//!   checks what a reset leaves of them).
//!
//! Shared by these rules: streams (the reset destroys them), copies on one device, the
//! `pointer_attr` queries, `pidfd_getfd` (the reset closes the copied
//! descriptor) and `fork_child_call` (the child is gone when the step
//! ends).
//!
//! **Rules a check lifts**, for what a scenario may *observe* of a worker's
//! history:
//!
//! - `# tier: incidental`: one driver's accident may well be one of history.
//! - An expectation that compares values (`== X`, `!= X`, `base == X`,
//!   `base != X`): pointers and handles, whose values depend on what the
//!   process allocated before.
//!
//! A clause held back only by these shares once `run --check-sharing` has
//! run it on fresh and on reused workers and found every step identical:
//! the check writes what it found, clause by clause, in the format of
//! [`CheckedClauses`], and the policy reads the file compiled in from
//! `sharing_checked.txt` (or the one [`SHARING_CHECKED_ENV`] names). A
//! clause the check found different keeps fresh processes, whatever its
//! tier, with what differed as the reason; so does a clause edited since
//! it was checked (each entry carries the scenario's [`fingerprint`]).
//! The check itself runs with these rules lifted ([`checking`]).
//!
//! Three further rules are off by default, because `run --check-sharing`
//! found every clause they concern identical on fresh and reused workers
//! ([`ShareAlso::CONFIRMED`]): `interprocess-events` (the reset destroys
//! the events a scenario created or opened; the worker then comes back
//! although it made interprocess events) and `exits` (a scenario's
//! surviving workers come back when others exited by an `exit` step), on
//! an H100; `pools` (a process that creates or imports a memory pool
//! shares unless the rule above holds it back), on an H200.
//! [`SHARE_ALSO_ENV`] chooses them by hand: `none` turns all three back
//! on, for a driver where a `--check-sharing` run disagrees.

use super::ast::{Expectation, Op};
use super::model::Scenario;
use crate::machine::WorkerFit;
use crate::tier::Tier;
use std::collections::{HashMap, HashSet};

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
    /// `pools`: creating or importing a memory pool no longer asks for
    /// fresh processes (the reset releases imported pool pointers and
    /// pools in every worker before any frees what it exported), except
    /// for a process that destroys a pool with an allocation outstanding,
    /// or in a scenario whose behaviour is undefined.
    pub pools: bool,
}

impl ShareAlso {
    /// The rules a `run --check-sharing` on a GPU confirmed may be off
    /// (every clause they concern gave identical results on fresh and
    /// reused workers): all three. `pools` on one H200 (580.159.04): the
    /// pool clauses' check, and the whole catalogue with no crash.
    pub const CONFIRMED: ShareAlso = ShareAlso {
        interprocess_events: true,
        exits: true,
        pools: true,
    };

    /// Every name, in the order [`SHARE_ALSO_ENV`] documents them.
    pub const NAMES: [&'static str; 3] = ["interprocess-events", "exits", "pools"];

    /// `interprocess-events,exits,pools` (any of them), or `none` (or
    /// empty).
    pub fn parse(list: &str) -> Result<ShareAlso, String> {
        let mut also = ShareAlso::default();
        if list.trim() == "none" {
            return Ok(also);
        }
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match name {
                "interprocess-events" => also.interprocess_events = true,
                "exits" => also.exits = true,
                "pools" => also.pools = true,
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

/// Names a file of check results ([`CheckedClauses`]) that the policy
/// reads instead of the compiled-in one, or `none` for no results at all
/// (every clause that only a check can let share gets fresh processes).
pub const SHARING_CHECKED_ENV: &str = "IPC_CONFORMANCE_SHARING_CHECKED";

/// The check results compiled in: what the last `run --check-sharing` over
/// the whole catalogue on a GPU found (its `sharing-checked.txt`).
const COMPILED_IN: &str = include_str!("sharing_checked.txt");

/// What `run --check-sharing` found for one clause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckVerdict {
    /// Every step of every dialect compared was identical on fresh and on
    /// reused workers.
    Identical,
    /// Something differed: what, as one line.
    Differs(String),
}

/// One clause's check result: the verdict, for the scenario with this
/// [`fingerprint`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckEntry {
    /// The [`fingerprint`] of the scenario that was checked.
    pub fingerprint: String,
    /// What the check found.
    pub verdict: CheckVerdict,
}

/// What `run --check-sharing` found, by clause id: the file it writes
/// (`sharing-checked.txt`) and the policy reads. One line per clause,
/// `ID identical FINGERPRINT` or `ID differs FINGERPRINT: WHAT`, and one
/// `checked-on: WHERE` line naming the GPU and driver; `#` starts a
/// comment line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckedClauses {
    /// Where the check ran (GPU, driver), if the file says.
    pub checked_on: Option<String>,
    clauses: std::collections::BTreeMap<String, CheckEntry>,
}

impl CheckedClauses {
    /// Reads the file format; an error names the line and what is wrong.
    pub fn parse(text: &str) -> Result<CheckedClauses, String> {
        let mut checked = CheckedClauses::default();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            let bad = |what: &str| {
                Err::<CheckedClauses, String>(format!("line {}: {what}: '{line}'", i + 1))
            };
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some(on) = line.strip_prefix("checked-on:") {
                checked.checked_on = Some(on.trim().to_string());
                continue;
            }
            let (head, detail) = match line.split_once(':') {
                Some((head, detail)) => (head, Some(detail.trim())),
                None => (line, None),
            };
            let words: Vec<&str> = head.split_whitespace().collect();
            let [id, verdict, fingerprint] = words[..] else {
                return bad(
                    "expected 'ID identical FINGERPRINT' or 'ID differs FINGERPRINT: WHAT'",
                );
            };
            let verdict = match (verdict, detail) {
                ("identical", None) => CheckVerdict::Identical,
                ("differs", Some(what)) if !what.is_empty() => {
                    CheckVerdict::Differs(what.to_string())
                }
                ("differs", _) => return bad("'differs' needs ': WHAT' after the fingerprint"),
                ("identical", Some(_)) => {
                    return bad("'identical' takes nothing after the fingerprint")
                }
                _ => return bad("the verdict is 'identical' or 'differs'"),
            };
            let entry = CheckEntry {
                fingerprint: fingerprint.to_string(),
                verdict,
            };
            if checked.clauses.insert(id.to_string(), entry).is_some() {
                return bad("a second line for this clause");
            }
        }
        Ok(checked)
    }

    /// The file's text: a header, the `checked-on` line, then one line per
    /// clause sorted by id.
    pub fn to_text(&self) -> String {
        let mut s = String::from(
            "# Clauses run on fresh and on reused workers by `ipc-conformance run\n\
             # --check-sharing`, every step compared; the worker sharing policy reads\n\
             # this file (ipc_harness::sharing). A check writes it as\n\
             # sharing-checked.txt. One line per clause:\n\
             #   ID identical FINGERPRINT\n\
             #   ID differs FINGERPRINT: WHAT DIFFERED\n",
        );
        if let Some(on) = &self.checked_on {
            s.push_str(&format!("checked-on: {on}\n"));
        }
        for (id, e) in &self.clauses {
            match &e.verdict {
                CheckVerdict::Identical => {
                    s.push_str(&format!("{id} identical {}\n", e.fingerprint))
                }
                CheckVerdict::Differs(what) => {
                    s.push_str(&format!("{id} differs {}: {what}\n", e.fingerprint))
                }
            }
        }
        s
    }

    /// The result for clause `id`.
    pub fn get(&self, id: &str) -> Option<&CheckEntry> {
        self.clauses.get(id)
    }

    /// Records the result for clause `id` (replacing an earlier one).
    pub fn insert(&mut self, id: &str, entry: CheckEntry) {
        self.clauses.insert(id.to_string(), entry);
    }

    /// Every clause's result, by id.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &CheckEntry)> {
        self.clauses.iter().map(|(id, e)| (id.as_str(), e))
    }

    /// The results compiled into this build.
    pub fn compiled_in() -> CheckedClauses {
        CheckedClauses::parse(COMPILED_IN).unwrap_or_default()
    }

    /// What [`SHARING_CHECKED_ENV`] asks for: `Ok(None)` when it is unset
    /// (the compiled-in results hold), the results of the file it names, or
    /// none for `none`; an error for a file that cannot be read or parsed.
    pub fn from_env() -> Result<Option<CheckedClauses>, String> {
        let Some(value) = std::env::var_os(SHARING_CHECKED_ENV) else {
            return Ok(None);
        };
        if value == "none" {
            return Ok(Some(CheckedClauses::default()));
        }
        let path = std::path::Path::new(&value);
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("{SHARING_CHECKED_ENV}: cannot read {}: {e}", path.display()))?;
        CheckedClauses::parse(&text)
            .map(Some)
            .map_err(|e| format!("{SHARING_CHECKED_ENV}: {}: {e}", path.display()))
    }

    /// The results the policy reads in this process (read once):
    /// [`from_env`](Self::from_env)'s, else the compiled-in ones; none when
    /// the variable names a bad file (callers that can report an error
    /// check it with `from_env` first).
    pub fn in_force() -> &'static CheckedClauses {
        static IN_FORCE: std::sync::OnceLock<CheckedClauses> = std::sync::OnceLock::new();
        IN_FORCE.get_or_init(|| match CheckedClauses::from_env() {
            Ok(Some(c)) => c,
            Ok(None) => CheckedClauses::compiled_in(),
            Err(_) => CheckedClauses::default(),
        })
    }

    /// ` (run --check-sharing on WHERE)`, or nothing when unknown.
    fn on(&self) -> String {
        self.checked_on
            .as_ref()
            .map(|on| format!(" (run --check-sharing on {on})"))
            .unwrap_or_default()
    }
}

/// What identifies the scenario a check ran, 16 hex digits: a hash of its
/// devices, processes, and every step's process, text and expectations,
/// and whether a process needs new contexts ([`WorkerFit::new_contexts`]:
/// the checks before that rule gave such a process a fresh worker, so
/// their entries do not speak for a reused one). A clause edited since its
/// check no longer matches its entry, which then does not apply.
pub fn fingerprint(scenario: &Scenario) -> String {
    let new_contexts = needs_new_contexts(scenario)
        && scenario
            .steps
            .iter()
            .any(|s| matches!(s.op, Op::CtxCreate { .. }));
    fingerprint_with(scenario, new_contexts)
}

/// [`fingerprint`], saying by hand whether a process needs new contexts.
fn fingerprint_with(scenario: &Scenario, new_contexts: bool) -> String {
    // FNV-1a, 64 bits: stable across builds and platforms.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |text: &str| {
        for b in text.bytes().chain(std::iter::once(0)) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    eat(&scenario.devices.to_string());
    for p in &scenario.processes {
        eat(&format!(
            "{} {} {:?} {:?}",
            p.name, p.device, p.visible_devices, p.pid_namespace
        ));
    }
    for step in &scenario.steps {
        eat(&step.process.to_string());
        eat(&step.text());
        for list in step.expect.lists() {
            eat(&list.text);
        }
    }
    if new_contexts {
        eat("new contexts");
    }
    format!("{h:016x}")
}

/// The sharing [`Scenario`] allows (see the [module docs](self)) with the
/// rules [`SHARE_ALSO_ENV`] turns off and the check results in force
/// ([`CheckedClauses::in_force`]); the first rule that asks for fresh
/// processes gives the reason.
pub fn sharing(scenario: &Scenario) -> WorkerSharing {
    sharing_with(scenario, ShareAlso::from_env())
}

/// [`sharing`] with the rules `also` turns off.
pub fn sharing_with(scenario: &Scenario, also: ShareAlso) -> WorkerSharing {
    decide(scenario, also, in_force()).sharing
}

/// [`sharing`] with the rules `also` turns off and the check results
/// `checked`; `None`: as while [`checking`], every rule a check lifts is
/// lifted.
pub fn sharing_checked(
    scenario: &Scenario,
    also: ShareAlso,
    checked: Option<&CheckedClauses>,
) -> WorkerSharing {
    decide(scenario, also, checked).sharing
}

/// [`sharing`] as `list --workers` shows it: `reused`, `reused (WHY)` for
/// a clause that shares because a check showed it identical, or `fresh
/// (WHY)`; then the processes that take fresh workers in a clause that
/// shares, and those `run` gives one hardware queue
/// ([`WorkerFit::one_queue`]).
pub fn explain(scenario: &Scenario) -> String {
    let d = decide(scenario, ShareAlso::from_env(), in_force());
    let mut text = match (&d.sharing, d.checked) {
        (WorkerSharing::Reused, Some(why)) => format!("reused ({why})"),
        (sharing, _) => sharing.to_string(),
    };
    for (name, why) in &d.fresh_processes {
        text.push_str(&format!("; process '{name}' fresh ({why})"));
    }
    // Which processes `run` starts with one hardware queue
    // (`WorkerFit::one_queue`).
    let fits = worker_fits(scenario);
    let one_queue: Vec<&str> = scenario
        .processes
        .iter()
        .zip(&fits)
        .filter(|(_, f)| f.one_queue)
        .map(|(p, _)| p.name.as_str())
        .collect();
    if !one_queue.is_empty() && one_queue.len() == fits.len() {
        text.push_str("; one hardware queue each");
    } else if !one_queue.is_empty() {
        text.push_str(&format!("; one hardware queue: {}", one_queue.join(", ")));
    }
    text
}

/// Whether `scenario` shares workers once a check has shown it identical
/// on fresh and reused workers: no rule but those a check lifts holds the
/// whole of it back (some of its processes may still need fresh workers).
/// These are the clauses `run --check-sharing` compares.
pub fn may_share_once_checked(scenario: &Scenario) -> bool {
    sharing_checked(scenario, ShareAlso::from_env(), None).is_reused()
}

thread_local! {
    static CHECKING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with every rule a check lifts lifted, on this thread: what
/// `run --check-sharing` runs its shared side under, so that each clause
/// it compares really ran on reused workers.
pub fn checking<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            CHECKING.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(CHECKING.with(|c| c.replace(true)));
    f()
}

/// The check results [`sharing`] reads on this thread (`None` while
/// [`checking`]).
fn in_force() -> Option<&'static CheckedClauses> {
    (!CHECKING.with(|c| c.get())).then(CheckedClauses::in_force)
}

/// A decision; for a clause that shares because a check showed it
/// identical, what the check lifted; and the processes of a shared
/// scenario that still need fresh workers, each with its reason.
struct Decision {
    sharing: WorkerSharing,
    checked: Option<String>,
    fresh_processes: Vec<(String, String)>,
}

fn decide(scenario: &Scenario, also: ShareAlso, checked: Option<&CheckedClauses>) -> Decision {
    let fresh = |why: String| Decision {
        sharing: WorkerSharing::Fresh(why),
        checked: None,
        fresh_processes: Vec::new(),
    };
    if let Some(why) = scenario_fixed_reason(scenario) {
        return fresh(why);
    }
    let per_process = process_fixed_reasons(scenario, also);
    // Every process needs a fresh worker: the scenario as a whole does,
    // for the rule met first.
    if !per_process.is_empty() && per_process.iter().all(Option::is_some) {
        let first = per_process.into_iter().flatten().min_by_key(|r| r.line);
        return fresh(first.map(|r| r.text()).unwrap_or_default());
    }
    let fresh_processes: Vec<(String, String)> = scenario
        .processes
        .iter()
        .zip(&per_process)
        .filter_map(|(p, r)| r.as_ref().map(|r| (p.name.clone(), r.text())))
        .collect();
    let shared = |checked: Option<String>| Decision {
        sharing: WorkerSharing::Reused,
        checked,
        fresh_processes: fresh_processes.clone(),
    };
    let Some(checked) = checked else {
        return shared(None);
    };
    let entry = scenario
        .meta
        .get("id")
        .and_then(|id| checked.get(id.trim()))
        .filter(|e| e.fingerprint == fingerprint(scenario));
    let lifted = history_reason(scenario);
    match (entry.map(|e| &e.verdict), lifted) {
        (Some(CheckVerdict::Differs(what)), _) => {
            fresh(format!("differs on reused workers{}: {what}", checked.on()))
        }
        (Some(CheckVerdict::Identical), Some(why)) => shared(Some(format!(
            "{why}, but identical on fresh and reused workers{}",
            checked.on()
        ))),
        (Some(CheckVerdict::Identical), None) | (None, None) => shared(None),
        (None, Some(why)) => fresh(format!(
            "{why}; not shown identical on reused workers (run --check-sharing)"
        )),
    }
}

/// What each process of `scenario` will ask of its worker, in process
/// order (see [`WorkerFit`]).
pub fn worker_fits(scenario: &Scenario) -> Vec<WorkerFit> {
    let mut fits = vec![
        WorkerFit {
            one_queue: true,
            ..WorkerFit::default()
        };
        scenario.processes.len()
    ];
    for (fit, reason) in fits
        .iter_mut()
        .zip(process_fixed_reasons(scenario, ShareAlso::from_env()))
    {
        fit.fresh = reason.is_some();
    }
    for step in &scenario.steps {
        let Some(fit) = fits.get_mut(step.process) else {
            continue;
        };
        fit.creates_contexts |= matches!(step.op, Op::CtxCreate { .. });
        fit.one_queue &= !names_a_stream(&step.op);
        fit.ends |= matches!(step.op, Op::Exit) || expects_crash(step);
    }
    if needs_new_contexts(scenario) {
        for fit in &mut fits {
            fit.new_contexts = fit.creates_contexts;
        }
    }
    // The error a damaged handle gets depends on the driver objects its
    // exporter's process made (mem.handle.check-word-with-vmm-allocation),
    // and a context's hardware queues are such objects: with one queue in
    // every process, that clause's handle was InvalidValue instead of
    // NotPermitted (H200, 580.159.04). Where a damaged handle is opened,
    // every process keeps the driver's default queues.
    if opens_damaged_handle(scenario) {
        for fit in &mut fits {
            fit.one_queue = false;
        }
    }
    fits
}

/// Whether `op` makes or uses a stream other than the legacy default one
/// (a `stream_create`, a stream op, a `stream=` argument, the per-thread
/// stream included): its process then needs the driver's hardware queues
/// ([`WorkerFit::one_queue`]).
fn names_a_stream(op: &Op) -> bool {
    matches!(
        op,
        Op::StreamCreate { .. }
            | Op::StreamDestroy { .. }
            | Op::StreamSync { .. }
            | Op::StreamQuery { .. }
            | Op::EventRecord {
                stream: Some(_),
                ..
            }
            | Op::StreamWait {
                stream: Some(_),
                ..
            }
            | Op::SlowFill {
                stream: Some(_),
                ..
            }
            | Op::Copy {
                stream: Some(_),
                ..
            }
    )
}

/// Whether the contexts `scenario` creates must be new ones, not a reused
/// worker's spares ([`WorkerFit::new_contexts`]): it compares values, and
/// a spare takes no descriptor and starts no VA arena.
fn needs_new_contexts(scenario: &Scenario) -> bool {
    first_comparison(scenario).is_some()
}

/// Whether `scenario` opens a damaged handle (`handle_flip`,
/// `handle_zero`, `handle_random`).
fn opens_damaged_handle(scenario: &Scenario) -> bool {
    scenario.steps.iter().any(|s| {
        matches!(
            s.op,
            Op::HandleFlip { .. } | Op::HandleZero | Op::HandleRandom
        )
    })
}

/// A rule a check cannot lift, met by one process: the line of the step
/// that meets it (0 for the process's declaration) and why.
struct ProcessReason {
    line: usize,
    why: String,
}

impl ProcessReason {
    fn text(&self) -> String {
        if self.line == 0 {
            self.why.clone()
        } else {
            format!("line {}: {}", self.line, self.why)
        }
    }
}

/// The first rule a check cannot lift that holds the whole of `scenario`
/// back: what concerns more than one process.
fn scenario_fixed_reason(scenario: &Scenario) -> Option<String> {
    if let Some(value) = scenario.meta.get(WORKERS_KEY) {
        return Some(match value.trim() {
            "fresh" => "marked '# workers: fresh'".to_string(),
            other => format!("unknown '# workers: {other}' (only 'fresh' is known)"),
        });
    }
    // Measured on 2 x H200 (580.159.04): the error a damaged handle gets
    // depends on the VMM allocations the exporter's process ever made
    // (mem.handle.check-word-with-vmm-allocation), which a reset does not
    // undo; both check-word clauses, found identical by a check, failed on
    // reset workers in a later run.
    let has = |f: fn(&Op) -> bool| scenario.steps.iter().find(|s| f(&s.op));
    if let (Some(flip), Some(_)) = (
        has(|o| matches!(o, Op::HandleFlip { .. })),
        has(|o| matches!(o, Op::VmmCreate { .. })),
    ) {
        return Some(format!(
            "line {}: a damaged handle's error depends on the VMM allocations its exporter's process ever made",
            flip.line
        ));
    }
    None
}

/// For each process of `scenario`, the first rule a check cannot lift
/// that its own steps meet: what its worker does that a reset does not
/// undo. Such a process takes a fresh worker; the others may share.
fn process_fixed_reasons(scenario: &Scenario, also: ShareAlso) -> Vec<Option<ProcessReason>> {
    let mut reasons: Vec<Option<ProcessReason>> = scenario
        .processes
        .iter()
        .map(|p| {
            p.in_new_pid_namespace().then(|| ProcessReason {
                line: 0,
                why: format!(
                    "process '{}' runs in a PID namespace of its own (pidns=new)",
                    p.name
                ),
            })
        })
        .collect();
    let mut note = |process: usize, line: usize, why: String| {
        if let Some(slot @ None) = reasons.get_mut(process) {
            *slot = Some(ProcessReason { line, why });
        }
    };
    // A reused worker serves `ctx_create` with a spare context: no
    // descriptor is taken and no VA arena begins. Measured on 2 x H200
    // (580.159.04): vmm.export.descriptor-after-ctx-create and
    // mem.handle.memory-type-before-context-rules, found identical by a
    // check, failed on reset workers in a later run, and generated cases
    // placed allocations after `ctx_create` as a fresh process does not.
    // A scenario that compares values takes a worker that never made a
    // context instead (`WorkerFit::new_contexts`), which a check then
    // judges; one that opens a damaged handle keeps a fresh process.
    let damaged = opens_damaged_handle(scenario);
    let mut pools = PoolPatterns::of(scenario);
    for step in &scenario.steps {
        let own_device = scenario.processes.get(step.process).map_or(0, |p| p.device);
        if let Some(why) = op_fresh_reason(&step.op, own_device, also) {
            note(step.process, step.line, why);
        }
        for (process, why) in pools.step(step) {
            note(process, step.line, why.to_string());
        }
        if expects_crash(step) {
            note(
                step.process,
                step.line,
                "a step is expected to kill its process".to_string(),
            );
        }
        if matches!(step.op, Op::CtxCreate { .. }) && damaged {
            note(
                step.process,
                step.line,
                "a reused worker's ctx_create takes a spare context (no new descriptor, no new VA arena), and the scenario opens a damaged handle".to_string(),
            );
        }
    }
    reasons
}

/// What a reset worker cannot be trusted after, with memory pools (where
/// the memory-pool rule is lifted, `pools`), followed step by step.
/// Measured on 2 x H200 (580.159.04): a reused worker whose last scenario
/// destroyed a pool while an allocation of it was outstanding (documented:
/// the pool's resources go once the allocation is freed) died of SIGFPE at
/// its next scenario's first pool allocation. Such a process, every
/// process of a scenario with pools whose behaviour is undefined, and both
/// sides of what makes a scenario undefined with pools wherever it is
/// written (a generated case has no `kind`) keep their workers: an
/// exporter freeing a pool allocation another process still imports, and
/// an import of a pointer its exporter already freed
/// (pool.lifetime.exporter-frees-first,
/// pool.lifetime.import-after-exporter-free).
struct PoolPatterns<'a> {
    undefined: bool,
    /// (process, allocation) -> its pool.
    pool_of: HashMap<(usize, &'a str), &'a str>,
    /// Export data -> (exporter, its allocation).
    exported: HashMap<&'a str, (usize, &'a str)>,
    /// Pointers imported and not freed: (importer, binding, exporter,
    /// allocation).
    imported: Vec<(usize, &'a str, usize, &'a str)>,
    /// Allocations their process freed.
    freed: HashSet<(usize, &'a str)>,
}

const EARLY_FREE: &str =
    "a pool allocation freed by its exporter while another process imports it (undefined)";

impl<'a> PoolPatterns<'a> {
    fn of(scenario: &Scenario) -> PoolPatterns<'a> {
        PoolPatterns {
            undefined: scenario
                .meta
                .get("kind")
                .is_some_and(|k| k.trim() == "undefined"),
            pool_of: HashMap::new(),
            exported: HashMap::new(),
            imported: Vec::new(),
            freed: HashSet::new(),
        }
    }

    /// The processes `step` holds back, each with why.
    fn step(&mut self, step: &'a super::ast::Step) -> Vec<(usize, &'static str)> {
        let p = step.process;
        match &step.op {
            Op::PoolCreate { .. } | Op::PoolImport { .. } if self.undefined => {
                vec![(p, "memory pools in a scenario whose behaviour is undefined")]
            }
            Op::PoolAlloc { pool, .. } => {
                if let Some(bind) = step.bind.as_deref() {
                    self.pool_of.insert((p, bind), pool.as_str());
                }
                Vec::new()
            }
            Op::PoolExportPtr { ptr } => {
                if let (Some(x), Some(a)) = (step.bind.as_deref(), ptr.name()) {
                    self.exported.insert(x, (p, a));
                }
                Vec::new()
            }
            Op::PoolImportPtr { data, .. } => match self.exported.get(data.as_str()) {
                Some(&(e, a)) if self.freed.contains(&(e, a)) => {
                    vec![(p, EARLY_FREE), (e, EARLY_FREE)]
                }
                Some(&(e, a)) => {
                    if let Some(q) = step.bind.as_deref() {
                        self.imported.push((p, q, e, a));
                    }
                    Vec::new()
                }
                None => Vec::new(),
            },
            Op::PoolFree { ptr } | Op::Free { ptr, .. } => {
                let Some(name) = ptr.name() else {
                    return Vec::new();
                };
                self.pool_of.remove(&(p, name));
                self.imported.retain(|&(i, q, _, _)| !(i == p && q == name));
                self.freed.insert((p, name));
                let holders: Vec<(usize, &'static str)> = self
                    .imported
                    .iter()
                    .filter(|&&(_, _, e, a)| e == p && a == name)
                    .map(|&(i, ..)| (i, EARLY_FREE))
                    .collect();
                if holders.is_empty() {
                    holders
                } else {
                    std::iter::once((p, EARLY_FREE)).chain(holders).collect()
                }
            }
            Op::PoolDestroy { pool }
                if self
                    .pool_of
                    .iter()
                    .any(|(&(q, _), &of)| q == p && of == pool) =>
            {
                vec![(
                    p,
                    "a memory pool destroyed with an allocation outstanding: a reused worker's next pool allocation died of SIGFPE (2 x H200, 580.159.04)",
                )]
            }
            _ => Vec::new(),
        }
    }
}

/// Whether `step` is expected to kill its process (`=> crash`).
fn expects_crash(step: &super::ast::Step) -> bool {
    step.expect
        .lists()
        .iter()
        .flat_map(|l| l.items.iter())
        .any(|e| expectation_rule(e) == ExpectationRule::Crash)
}

/// The first rule a check lifts that holds `scenario` back: what it may
/// observe of a worker's history.
fn history_reason(scenario: &Scenario) -> Option<String> {
    if let Some(tier) = scenario.meta.get("tier") {
        if tier.trim() == Tier::Incidental.as_str() {
            return Some("incidental tier".to_string());
        }
    }
    first_comparison(scenario).map(|(line, e)| {
        format!("line {line}: '{e}' compares values that depend on allocation history")
    })
}

/// The first expectation of `scenario` that compares values, and its line.
fn first_comparison(scenario: &Scenario) -> Option<(usize, String)> {
    scenario.steps.iter().find_map(|step| {
        let lists = step.expect.lists();
        let e = lists
            .iter()
            .flat_map(|l| l.items.iter())
            .find(|e| expectation_rule(e) == ExpectationRule::ComparesValues)?;
        Some((step.line, e.to_string()))
    })
}

/// What an expectation asks of the workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ExpectationRule {
    /// Nothing.
    None,
    /// It compares values that depend on allocation history (a check
    /// lifts this).
    ComparesValues,
    /// It expects its process killed.
    Crash,
}

fn expectation_rule(e: &Expectation) -> ExpectationRule {
    match e {
        Expectation::Eq(_)
        | Expectation::Ne(_)
        | Expectation::BaseEq(_)
        | Expectation::BaseNe(_) => ExpectationRule::ComparesValues,
        Expectation::Crash => ExpectationRule::Crash,
        Expectation::Ok
        | Expectation::Any
        | Expectation::AnyError
        | Expectation::Error { .. }
        | Expectation::OneOf(_)
        | Expectation::Bytes(_)
        | Expectation::Value(_)
        | Expectation::Size(_)
        | Expectation::Type(_)
        | Expectation::Device(_) => ExpectationRule::None,
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
        // The rule `pools` of ShareAlso lifts (by default): on 2 x H200
        // (580.159.04) a reset worker's pool_alloc died of SIGFPE and its
        // pool_free of SIGSEGV, which process_fixed_reasons now traces to
        // a pool destroyed with an allocation outstanding.
        Op::PoolCreate { .. } | Op::PoolImport { .. } if also.pools => None,
        Op::PoolCreate { .. } | Op::PoolImport { .. } => Some(
            "memory pools on a reset worker (IPC_CONFORMANCE_SHARE_ALSO leaves out pools)"
                .to_string(),
        ),
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
        sharing_checked(&parse(text), also, Some(&CheckedClauses::default()))
    }

    fn parse(text: &str) -> Scenario {
        crate::scenario::parser::parse(text, Path::new("<inline>")).expect("parses")
    }

    fn reason(text: &str) -> String {
        match of(text) {
            WorkerSharing::Fresh(why) => why,
            WorkerSharing::Reused => panic!("expected fresh:\n{text}"),
        }
    }

    const BASE: &str = "devices 1\nprocess a device=0\nprocess b device=0\n";
    /// One process, on as many lines as [`BASE`] (so line numbers agree).
    const ONE: &str = "devices 1\n\nprocess a device=0\n";

    /// The processes of a scenario the policy shares that still take
    /// fresh workers, with `also`, by name.
    fn fresh_processes(text: &str, also: ShareAlso) -> Vec<String> {
        let d = decide(&parse(text), also, Some(&CheckedClauses::default()));
        assert!(d.sharing.is_reused(), "expected shared: {}", d.sharing);
        d.fresh_processes
            .into_iter()
            .map(|(name, _)| name)
            .collect()
    }

    #[test]
    fn a_rule_one_process_meets_keeps_only_that_process_fresh() {
        let destroy = format!("{BASE}a: c = ctx_create 0\na: ctx_destroy c\nb: p = malloc 64\n");
        assert_eq!(of(&destroy), WorkerSharing::Reused);
        assert_eq!(fresh_processes(&destroy, ShareAlso::default()), vec!["a"]);
        let fits: Vec<bool> = worker_fits(&parse(&destroy))
            .iter()
            .map(|f| f.fresh)
            .collect();
        assert_eq!(fits, vec![true, false]);
        let shown = explain(&parse(&destroy));
        assert_eq!(
            shown,
            "reused; process 'a' fresh (line 5: a destroyed context's VA goes to the next one); \
             one hardware queue each"
        );
        // Both processes meet one: the whole scenario is fresh, for the
        // rule met first.
        let both = format!("{BASE}b: pl = pool_create\na: c = ctx_create 0\na: ctx_destroy c\n");
        let why = reason(&both);
        assert!(why.starts_with("line 4: memory pools"), "{why}");
        // A rule of the whole scenario keeps every process fresh.
        let flip = format!(
            "{BASE}a: p = malloc 64\na: h = ipc_get p\na: v = vmm_create 2MiB\n\
             a: f = handle_flip h 8\na: send f -> b\nb: q = ipc_open f => any\n"
        );
        assert!(
            reason(&flip).contains("VMM allocations its exporter"),
            "{}",
            reason(&flip)
        );
        // ctx_create with compared values: no process is fresh (the
        // creating one needs new contexts), and the comparison waits for a
        // check.
        let compares = format!(
            "{BASE}a: c = ctx_create 0\nb: p = malloc 64\nb: free p\nb: q = malloc 64 => == p\n"
        );
        assert!(reason(&compares).contains("compares values that depend on allocation history"));
        let scenario = parse(&compares);
        let fits: Vec<bool> = worker_fits(&scenario).iter().map(|f| f.fresh).collect();
        assert_eq!(fits, vec![false, false]);
        assert!(may_share_once_checked(&scenario));
        // ctx_create where a damaged handle is opened: that process is fresh.
        let damaged = format!(
            "{BASE}a: c = ctx_create 0\nb: p = malloc 64\nb: h = ipc_get p\n\
             b: f = handle_flip h 8\nb: send f -> a\na: q = ipc_open f => any\n"
        );
        assert_eq!(fresh_processes(&damaged, ShareAlso::default()), vec!["a"]);
    }

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
        assert!(worker_fits(&scenario).iter().all(|f| !f.ends));
    }

    #[test]
    fn only_a_process_on_the_legacy_stream_alone_may_have_one_queue() {
        let text = format!(
            "{BASE}a: x = malloc 4KiB\na: slow_fill x 0x01 us=100\n\
             b: s = stream_create\nb: y = malloc 4KiB\nb: slow_fill y 0x02 us=100 stream=s\n"
        );
        let scenario =
            crate::scenario::parser::parse(&text, Path::new("<inline>")).expect("parses");
        let queues: Vec<bool> = worker_fits(&scenario).iter().map(|f| f.one_queue).collect();
        assert_eq!(queues, vec![true, false]);
        // The per-thread default stream is a second stream too.
        let per_thread =
            format!("{BASE}a: e = event_create\na: event_record e stream=per_thread\n");
        let scenario =
            crate::scenario::parser::parse(&per_thread, Path::new("<inline>")).expect("parses");
        let queues: Vec<bool> = worker_fits(&scenario).iter().map(|f| f.one_queue).collect();
        assert_eq!(queues, vec![false, true]);
        // Where a damaged handle is opened, no process has one queue.
        let damaged = format!(
            "{BASE}a: p = malloc 64\na: h = ipc_get p\na: f = handle_flip h 8\n\
             a: send f -> b\nb: q = ipc_open f => any\n"
        );
        let scenario =
            crate::scenario::parser::parse(&damaged, Path::new("<inline>")).expect("parses");
        assert!(worker_fits(&scenario).iter().all(|f| !f.one_queue));
    }

    #[test]
    fn explain_names_the_processes_with_one_queue() {
        let parse =
            |t: &str| crate::scenario::parser::parse(t, Path::new("<inline>")).expect("parses");
        let plain = format!("{BASE}a: x = malloc 4KiB\nb: y = malloc 4KiB\n");
        assert!(explain(&parse(&plain)).ends_with("; one hardware queue each"));
        let streams = format!("{plain}b: s = stream_create\n");
        assert!(explain(&parse(&streams)).ends_with("; one hardware queue: a"));
        let both = format!("{streams}a: t = stream_create\n");
        assert!(!explain(&parse(&both)).contains("hardware queue"));
    }

    #[test]
    fn a_process_that_creates_contexts_where_values_are_compared_needs_new_ones() {
        let plain = format!("{BASE}b: c = ctx_create 0\na: x = malloc 4KiB\nb: y = malloc 4KiB\n");
        let compared = format!("{plain}a: z = malloc 4KiB => != x\n");
        let parse =
            |t: &str| crate::scenario::parser::parse(t, Path::new("<inline>")).expect("parses");
        let new_contexts = |t: &str| -> Vec<bool> {
            worker_fits(&parse(t))
                .iter()
                .map(|f| f.new_contexts)
                .collect()
        };
        assert_eq!(new_contexts(&plain), vec![false, false]);
        assert_eq!(new_contexts(&compared), vec![false, true]);
        // Not a rule a check cannot lift: no process is fresh for it.
        assert!(worker_fits(&parse(&compared)).iter().all(|f| !f.fresh));
        // An entry of a check made before the rule (which gave that
        // process a fresh worker) does not speak for it; other clauses'
        // entries still do.
        let compared = parse(&compared);
        assert_ne!(fingerprint(&compared), fingerprint_with(&compared, false));
        assert_eq!(
            fingerprint(&parse(&plain)),
            fingerprint_with(&parse(&plain), false)
        );
    }

    #[test]
    fn a_process_that_exits_or_crashes_ends_its_worker() {
        let three = "devices 1\nprocess a device=0\nprocess b device=0\nprocess c device=0\n\
                     a: exit\nb: p = malloc 4 => crash\nc: q = malloc 4\n";
        let ends: Vec<bool> = worker_fits(&parse(three)).iter().map(|f| f.ends).collect();
        assert_eq!(ends, vec![true, true, false]);
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
        let exit = format!("{ONE}a: p = malloc 64\na: exit\n");
        assert_eq!(reason(&exit), "line 5: a process exits");
        let destroy = format!("{ONE}a: c = ctx_create 0\na: ctx_destroy c\n");
        assert!(reason(&destroy).contains("destroyed context"));
    }

    #[test]
    fn tier_and_header_decide_first() {
        let incidental = format!("# tier: incidental\n{BASE}a: p = malloc 64\n");
        assert_eq!(
            reason(&incidental),
            "incidental tier; not shown identical on reused workers (run --check-sharing)"
        );
        let marked = format!("# tier: contract\n# workers: fresh\n{BASE}a: p = malloc 64\n");
        assert_eq!(reason(&marked), "marked '# workers: fresh'");
        let unknown = format!("# workers: shared\n{BASE}a: p = malloc 64\n");
        assert!(reason(&unknown).contains("unknown '# workers: shared'"));
    }

    #[test]
    fn interprocess_events_and_other_devices_need_fresh_workers() {
        let timing = format!("{BASE}a: e = event_create flags=disable_timing\n");
        assert_eq!(of(&timing), WorkerSharing::Reused);
        let ipc = format!("{ONE}a: e = event_create flags=disable_timing,interprocess\n");
        assert!(reason(&ipc).contains("interprocess event"));
        let own = "devices 2\nprocess a device=1\na: set_device 1\n";
        assert_eq!(of(own), WorkerSharing::Reused);
        let other = "devices 2\nprocess a device=0\na: set_device 1\n";
        assert!(reason(other).contains("set_device 1 retains a primary context"));
    }

    #[test]
    fn streams_and_copies_are_shared_pools_and_peer_copies_not() {
        let streams = format!(
            "{BASE}a: s = stream_create flags=nonblocking\na: p = malloc 64\na: q = malloc 64\n\
             a: copy q p 64 stream=s\na: stream_sync s\na: stream_destroy s\n"
        );
        assert_eq!(of(&streams), WorkerSharing::Reused);
        let pool = format!(
            "{ONE}a: pl = pool_create\na: q = pool_alloc pl 64\na: pool_free q\na: pool_destroy pl\n"
        );
        assert!(reason(&pool).contains("memory pools on a reset worker"));
        let default_pool = format!("{ONE}a: pl = pool_default\n");
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
            pools: false,
        };
        assert_eq!(ShareAlso::parse(" exits , interprocess-events "), Ok(both));
        assert_eq!(
            ShareAlso::parse("pools").map(|a| (a.pools, a.exits)),
            Ok((true, false))
        );
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
        let exit = format!("{ONE}a: exit\n");
        assert_eq!(of_with(&exit, exits), WorkerSharing::Reused);
        assert!(matches!(of_with(&exit, events), WorkerSharing::Fresh(_)));
        // The other rules still hold.
        let crash = format!("{ONE}a: p = malloc 4 => crash\n");
        assert!(reason_with(&crash, exits).contains("kill its process"));
        let crash_b = format!("{BASE}a: exit\nb: p = malloc 4 => crash\n");
        assert_eq!(fresh_processes(&crash_b, exits), vec!["b"]);
        let both = format!("{ipc}a: exit\n");
        assert_eq!(fresh_processes(&both, events), vec!["a"]);
        assert_eq!(
            of_with(
                &both,
                ShareAlso {
                    interprocess_events: true,
                    exits: true,
                    pools: false,
                }
            ),
            WorkerSharing::Reused
        );
        let pools = ShareAlso {
            pools: true,
            ..ShareAlso::default()
        };
        let pool = format!("{ONE}a: pl = pool_create\na: q = pool_alloc pl 64\na: pool_free q\n");
        assert_eq!(of_with(&pool, pools), WorkerSharing::Reused);
        assert!(reason_with(&pool, exits).contains("memory pools"));
        assert!(reason_with(&format!("{ONE}a: pl = pool_default\n"), pools)
            .contains("default memory pool"));
        // Still fresh with pools lifted: a pool destroyed with an
        // allocation outstanding, and pools in an undefined scenario.
        let outstanding = format!(
            "{BASE}a: pl = pool_create\na: q = pool_alloc pl 64\na: pool_destroy pl\na: pool_free q\n\
             b: pm = pool_create\nb: r = pool_alloc pm 64\nb: pool_free r\nb: pool_destroy pm\n"
        );
        assert_eq!(fresh_processes(&outstanding, pools), vec!["a"]);
        let undefined = format!("# kind: undefined\n{pool}");
        assert!(reason_with(&undefined, pools).contains("undefined"));
        // The undefined patterns themselves, with no `kind` header (as in
        // a generated case): both sides keep their workers.
        let share = "a: pl = pool_create types=posix_fd\na: fd = pool_export pl\n\
                     a: pfd = send_fd fd -> b\nb: ipl = pool_import pfd\n\
                     a: q = pool_alloc pl 64\na: x = pool_export_ptr q\na: send x -> b\n";
        let early =
            format!("{BASE}{share}b: r = pool_import_ptr ipl x\na: pool_free q\nb: pool_free r\n");
        assert!(reason_with(&early, pools).contains("freed by its exporter"));
        let late = format!("{BASE}{share}a: pool_free q\nb: r = pool_import_ptr ipl x\n");
        assert!(reason_with(&late, pools).contains("freed by its exporter"));
        let ordered =
            format!("{BASE}{share}b: r = pool_import_ptr ipl x\nb: pool_free r\na: pool_free q\n");
        assert!(fresh_processes(&ordered, pools).is_empty());
    }

    fn reason_with(text: &str, also: ShareAlso) -> String {
        match of_with(text, also) {
            WorkerSharing::Fresh(why) => why,
            WorkerSharing::Reused => panic!("expected fresh:\n{text}"),
        }
    }

    const CHECKED_TEXT: &str = "# a comment\n\
        checked-on: NVIDIA H100 80GB HBM3, driver 580.159.04\n\
        a.b.same identical 0123456789abcdef\n\
        \n\
        a.b.other differs fedcba9876543210: runtime L7 'x = malloc 4': fresh ok | reused error\n";

    #[test]
    fn check_results_parse_and_print_back() {
        let checked = CheckedClauses::parse(CHECKED_TEXT).expect("parses");
        assert_eq!(
            checked.checked_on.as_deref(),
            Some("NVIDIA H100 80GB HBM3, driver 580.159.04")
        );
        let same = checked.get("a.b.same").expect("an entry");
        assert_eq!(
            (same.fingerprint.as_str(), &same.verdict),
            ("0123456789abcdef", &CheckVerdict::Identical)
        );
        assert_eq!(
            checked.get("a.b.other").map(|e| &e.verdict),
            Some(&CheckVerdict::Differs(
                "runtime L7 'x = malloc 4': fresh ok | reused error".into()
            ))
        );
        assert_eq!(checked.entries().count(), 2);
        assert_eq!(CheckedClauses::parse(&checked.to_text()), Ok(checked));
        assert_eq!(
            CheckedClauses::compiled_in().entries().count(),
            CheckedClauses::parse(COMPILED_IN)
                .unwrap()
                .entries()
                .count(),
            "the compiled-in file parses"
        );
        for (bad, why) in [
            ("a.b identical\n", "expected 'ID identical"),
            ("a.b same 01\n", "'identical' or 'differs'"),
            ("a.b differs 01\n", "needs ': WHAT'"),
            ("a.b differs 01:  \n", "needs ': WHAT'"),
            ("a.b identical 01: x\n", "takes nothing"),
            (
                "a.b identical 01\na.b identical 02\n",
                "line 2: a second line",
            ),
        ] {
            let e = CheckedClauses::parse(bad).unwrap_err();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
    }

    /// An incidental clause with a value comparison, checked as `checked`
    /// says (its fingerprint is filled in unless `stale`).
    fn checked_as(text: &str, verdict: CheckVerdict, stale: bool) -> WorkerSharing {
        let scenario = parse(text);
        let mut checked = CheckedClauses::parse("checked-on: GPU X, driver 1").unwrap();
        let fingerprint = if stale {
            "0000000000000000".to_string()
        } else {
            fingerprint(&scenario)
        };
        checked.insert(
            "t.c.x",
            CheckEntry {
                fingerprint,
                verdict,
            },
        );
        sharing_checked(&scenario, ShareAlso::CONFIRMED, Some(&checked))
    }

    #[test]
    fn a_check_lifts_the_history_rules_and_keeps_the_others() {
        let history = format!(
            "# id: t.c.x\n# tier: incidental\n{BASE}a: p = malloc 64\na: free p\n\
             a: q = malloc 64 => == p\n"
        );
        let identical = CheckVerdict::Identical;
        assert_eq!(
            checked_as(&history, identical.clone(), false),
            WorkerSharing::Reused
        );
        let stale = checked_as(&history, identical.clone(), true);
        assert!(
            matches!(&stale, WorkerSharing::Fresh(why) if why.starts_with("incidental tier; not shown")),
            "{stale}"
        );
        let differs = checked_as(&history, CheckVerdict::Differs("L7 differs".into()), false);
        assert_eq!(
            differs,
            WorkerSharing::Fresh(
                "differs on reused workers (run --check-sharing on GPU X, driver 1): L7 differs"
                    .into()
            )
        );
        // A clause the rules let share keeps fresh processes once a check
        // saw it differ, and shares without any check.
        let contract = format!("# id: t.c.x\n# tier: contract\n{BASE}a: p = malloc 64\n");
        assert!(matches!(
            checked_as(&contract, CheckVerdict::Differs("x".into()), false),
            WorkerSharing::Fresh(_)
        ));
        assert_eq!(of(&contract), WorkerSharing::Reused);
        // A check never lifts what a reset cannot undo.
        let crash = format!("# id: t.c.x\n# tier: incidental\n{ONE}a: p = malloc 4 => crash\n");
        let kept = checked_as(&crash, identical.clone(), false);
        assert!(
            matches!(&kept, WorkerSharing::Fresh(why) if why.contains("kill its process")),
            "{kept}"
        );
        let destroy = format!(
            "# id: t.c.x\n# tier: incidental\n{ONE}a: c = ctx_create 0\na: ctx_destroy c\n"
        );
        assert!(matches!(
            checked_as(&destroy, identical, false),
            WorkerSharing::Fresh(_)
        ));
    }

    #[test]
    fn checking_lifts_the_history_rules_on_its_thread_only() {
        let text =
            format!("# tier: incidental\n{BASE}a: p = malloc 64\na: q = malloc 64 => != p\n");
        let scenario = parse(&text);
        assert!(!sharing(&scenario).is_reused());
        assert!(may_share_once_checked(&scenario));
        checking(|| {
            assert_eq!(sharing(&scenario), WorkerSharing::Reused);
            let elsewhere = std::thread::scope(|s| s.spawn(|| sharing(&scenario)).join());
            assert!(!elsewhere.expect("no panic").is_reused());
        });
        assert!(!sharing(&scenario).is_reused());
        let exits = format!("# tier: incidental\n{ONE}a: q = malloc 64 => crash\n");
        assert!(!may_share_once_checked(&parse(&exits)));
        // One process of two crashing: the other may share once checked.
        let one_of_two = format!("# tier: incidental\n{BASE}a: q = malloc 64 => crash\n");
        assert!(may_share_once_checked(&parse(&one_of_two)));
        let shown = explain(&parse(&text));
        assert!(shown.starts_with("fresh (incidental tier; "), "{shown}");
    }

    #[test]
    fn a_fingerprint_follows_steps_expectations_and_processes() {
        let base = format!("{BASE}a: p = malloc 64 => ok\n");
        let f = fingerprint(&parse(&base));
        assert_eq!(f.len(), 16);
        assert_eq!(f, fingerprint(&parse(&format!("# tier: contract\n{base}"))));
        for other in [
            format!("{BASE}a: p = malloc 65 => ok\n"),
            format!("{BASE}a: p = malloc 64 => any\n"),
            format!("{BASE}b: p = malloc 64 => ok\n"),
            "devices 1\nprocess a device=0\nprocess c device=0\na: p = malloc 64 => ok\n"
                .to_string(),
        ] {
            assert_ne!(f, fingerprint(&parse(&other)), "{other}");
        }
    }
}
