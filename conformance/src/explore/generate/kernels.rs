//! Kernels that write more than one constant byte (`kernel_fill` of a word,
//! `kernel_iota`, sometimes as a small `repeat N` step), and a child forked after CUDA is initialised
//! (`fork_child_call`). Low weight: each adds one step to a program.

use super::{name, KernelWrite, Lowering};
use ipc_harness::scenario::{KernelContent, Op};
use proptest::sample::Index;

impl Lowering {
    /// A pattern kernel over (at most 4 KiB of) a live device allocation
    /// of a process that may run generated kernels; `repeat` above 1 is a
    /// `repeat N` step (the same bytes, launched N times).
    pub(super) fn pattern_kernel(&mut self, alloc: &Index, write: &KernelWrite, repeat: u32) {
        let Some(a) = self.kernel_alloc(alloc) else {
            return;
        };
        let rec = self.allocs[a].clone();
        let len = rec.size.min(4096);
        let repeat = if repeat > 1 {
            self.stats.repeat_steps += 1;
            Some(repeat)
        } else {
            None
        };
        let content = match write {
            KernelWrite::Word(word) => KernelContent::Word(word.clone()),
            KernelWrite::Iota(base) => KernelContent::Iota(*base),
        };
        let op = Op::KernelPattern {
            ptr: name(&rec.name),
            content,
            at: None,
            len: Some(len),
            resolved_len: len,
        };
        self.emit_step(rec.proc, None, op, repeat);
        self.stats.pattern_kernels += 1;
    }

    /// `fork_child_call alloc 1MiB` in a live process: the child's answer
    /// (NotInitialized, mem.fork.child-call-after-init); the parent goes on.
    pub(super) fn fork_child(&mut self, proc: &Index) {
        if let Some(p) = self.pick_proc(proc) {
            self.emit(p, Op::ForkChildAlloc { size: 1 << 20 });
            self.stats.fork_children += 1;
        }
    }
}
