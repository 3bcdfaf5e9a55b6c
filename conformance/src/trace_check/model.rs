//! What `check` finds and reports, below everything that makes or renders
//! it: findings, their classes, and the verdict's three outcomes.

use serde::Serialize;

/// Most findings of one class a report lists; the rest are counted.
pub const MAX_LISTED: usize = 1000;

/// What one finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FindingClass {
    /// Undefined behaviour or a broken IPC protocol: `check` exits 1.
    Hazard,
    /// A failing IPC call whose result the program went on to use; listed,
    /// it does not change the exit code.
    IgnoredError,
    /// The simulator answered a call otherwise than the driver did.
    Fidelity,
    /// Worth knowing, never a hazard: accesses ordered only by what the
    /// tracer cannot see, query results that depend on timing.
    Note,
}

/// One finding, at the traced call behind it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Finding {
    pub class: FindingClass,
    /// `free-while-mapped`, `double-release`, `diverged`, `host-ordered`, ...
    pub kind: String,
    /// The process's name in the replay (`p2`).
    pub process: String,
    pub pid: u32,
    /// The call's `seq` in its process's file (absent for a process's exit).
    pub seq: Option<u64>,
    /// The entry point (`cuMemcpyDtoH_v2`), or `exit`.
    pub call: String,
    pub detail: String,
    /// The rows of the synchronisation table a race finding rests on
    /// (`sync_rules.rs`): the writer's call's, then the reader's.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<String>,
    /// `simulator` (its hazard log or its answers on the replay) or `replay`
    /// (a rule of the replay itself: releases made twice, VMM resources held
    /// at exit, errors carried on past, what orders two processes).
    pub found_by: String,
    /// A hazard the simulator logged after the replay diverged from the
    /// driver: listed, not counted, since the simulator's state was then no
    /// longer the driver's.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub after_divergence: bool,
}

/// The three outcomes of a judged trace, and the folder with no call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Every call replayed as the driver answered, and no hazard.
    Clean,
    /// At least one hazard (counted, before any divergence).
    Hazards,
    /// Neither clean nor hazards: `reasons` says why.
    NotJudged,
    /// No traced driver call at all.
    NothingRecorded,
}

impl Verdict {
    /// As reports write it.
    pub fn text(self) -> &'static str {
        match self {
            Verdict::Clean => "clean",
            Verdict::Hazards => "hazards",
            Verdict::NotJudged => "not judged",
            Verdict::NothingRecorded => "nothing recorded",
        }
    }
}
