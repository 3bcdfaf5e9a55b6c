//! The hazard log: undefined behaviour the simulator noticed, in order, each
//! tagged with the scenario step that caused it.

use ipc_harness::{Hazard, HazardKind, ProcessIndex};

#[derive(Debug, Default)]
pub(crate) struct HazardLog {
    step: Option<usize>,
    entries: Vec<Hazard>,
}

impl HazardLog {
    pub(crate) fn set_step(&mut self, step: usize) {
        self.step = Some(step);
    }

    pub(crate) fn record(&mut self, kind: HazardKind, process: ProcessIndex, detail: String) {
        self.entries.push(Hazard {
            kind,
            process,
            step: self.step,
            detail,
        });
    }

    pub(crate) fn entries(&self) -> &[Hazard] {
        &self.entries
    }
}
