//! Kernel handoffs over streams, right or with the mistakes users make
//! with streams (an all-reduce's, a KV-cache's): the event recorded on
//! another stream than the kernel's, recorded again elsewhere, waited for
//! before it is recorded, the bytes read on another stream than the one
//! that waited, or by the writer itself on another stream. Each lowers to
//! the writer's kernel, its record(s), the reader's wait and read, with the
//! streams they need made before and synchronized and destroyed after.
//! The properties judge each read by the documents' order
//! (`explore/ordering.rs`): a racy one must be logged, an ordered one must
//! read the kernel's bytes.

use super::{
    name, read16, slow_micros, KindSel, Lowering, ReadOn, RecordOn, SizeClass, StreamBug,
    StreamKind, WaitFor,
};
use ipc_harness::driver::stream_flags;
use ipc_harness::scenario::{Op, PER_THREAD_STREAM};
use proptest::sample::Index;

impl Lowering {
    /// A stream of `proc` of `kind`, made now (`None`: the legacy stream;
    /// the per-thread stream is there already).
    fn new_stream(&mut self, proc: usize, kind: StreamKind) -> Option<String> {
        let flags = match kind {
            StreamKind::Legacy => return None,
            StreamKind::PerThread => return Some(PER_THREAD_STREAM.to_string()),
            StreamKind::Blocking => stream_flags::DEFAULT,
            StreamKind::NonBlocking => stream_flags::NON_BLOCKING,
        };
        let s = self.fresh("s");
        self.bind(proc, &s, Op::StreamCreate { flags });
        Some(s.to_string())
    }

    /// See [`StreamBug`]: between a writer and a reader that mapped its
    /// allocation (as a kernel handoff is), both synchronized first so
    /// that only this handoff's order decides.
    pub(super) fn stream_bug(&mut self, pair: &Index, bug: StreamBug) {
        let Some((o, writer, a)) = self.handoff_pair(pair) else {
            // Nothing shared yet: share something.
            self.lower(&super::Action::SendOpen {
                handle: *pair,
                to: *pair,
                flags: 1,
            });
            return;
        };
        let reader = self.opens[o].proc;
        if self.second_ctx[reader] {
            return;
        }
        let Some((e, x)) = self.handoff_events(writer, reader) else {
            return;
        };
        let alloc = self.allocs[a].clone();
        let mapping = self.opens[o].name.to_string();
        self.emit(writer, Op::Sync);
        self.emit(reader, Op::Sync);
        // Streams made here, to synchronize and destroy at the end.
        let mut made: Vec<(usize, String)> = Vec::new();
        // The writer's streams.
        let k = self.new_stream(writer, bug.kernel);
        made.extend(k.iter().map(|s| (writer, s.clone())));
        let r = match bug.record {
            RecordOn::KernelStream => k.clone(),
            RecordOn::Other(kind) => {
                let r = self.new_stream(writer, kind);
                made.extend(r.iter().map(|s| (writer, s.clone())));
                r
            }
        };
        let r2 = if bug.rerecord {
            self.new_stream(writer, StreamKind::NonBlocking)
        } else {
            None
        };
        made.extend(r2.iter().map(|s| (writer, s.clone())));
        // The reader's: the one that waits, and the one a copy runs on.
        let t = match bug.wait {
            WaitFor::Stream(kind) | WaitFor::StreamBeforeRecord(kind) => {
                self.new_stream(reader, kind)
            }
            _ => None,
        };
        made.extend(t.iter().map(|s| (reader, s.clone())));
        let copy_on = match bug.read {
            ReadOn::Host => None,
            ReadOn::WaitedStream => Some(t.clone()),
            ReadOn::OtherStream(kind) => {
                let u = self.new_stream(reader, kind);
                made.extend(u.iter().map(|s| (reader, s.clone())));
                Some(u)
            }
        };
        let local = copy_on.as_ref().map(|_| {
            let l = self.malloc(reader, KindSel::Device, SizeClass::Page, 0);
            self.emit(reader, Op::Sync);
            self.allocs[l].name.to_string()
        });
        if let WaitFor::StreamBeforeRecord(_) = bug.wait {
            self.emit(
                reader,
                Op::StreamWait {
                    event: x.clone(),
                    stream: t.clone(),
                },
            );
            self.stats.waits_before_record += 1;
        }
        let len = alloc.size.min(4096);
        self.emit(
            writer,
            Op::SlowFill {
                ptr: name(&alloc.name),
                value: bug.value,
                micros: slow_micros(bug.long),
                at: None,
                len: Some(len),
                resolved_len: len,
                stream: k.clone(),
            },
        );
        self.stats.slow_fills += 1;
        if bug.writer_reads {
            self.emit(writer, read16(&alloc.name));
            if k.is_some() {
                self.stats.reads_on_other_stream += 1;
            }
        }
        self.emit(
            writer,
            Op::EventRecord {
                event: e.clone(),
                stream: r.clone(),
            },
        );
        if r != k {
            self.stats.records_on_other_stream += 1;
        }
        if let Some(r2) = &r2 {
            self.emit(
                writer,
                Op::EventRecord {
                    event: e,
                    stream: Some(r2.clone()),
                },
            );
        }
        match bug.wait {
            WaitFor::Sync => self.emit(reader, Op::EventSync { event: x }),
            WaitFor::Query => {
                self.emit(reader, Op::EventQuery { event: x });
                self.stats.event_queries += 1;
            }
            WaitFor::Stream(_) => self.emit(
                reader,
                Op::StreamWait {
                    event: x,
                    stream: t.clone(),
                },
            ),
            WaitFor::StreamBeforeRecord(_) | WaitFor::Nothing => {}
        }
        match (copy_on, local) {
            (Some(u), Some(b)) => {
                if u != t || !matches!(bug.wait, WaitFor::Stream(_)) {
                    self.stats.reads_on_other_stream += 1;
                }
                self.emit(
                    reader,
                    Op::Copy {
                        dst: name(&b),
                        src: name(&mapping),
                        len: 16,
                        stream: u.clone(),
                    },
                );
                match &u {
                    Some(u) => self.emit(reader, Op::StreamSync { stream: u.clone() }),
                    None => self.emit(reader, Op::Sync),
                }
                self.emit(reader, read16(&b));
            }
            _ => self.emit(reader, read16(&mapping)),
        }
        // Both sides finish their streams' work and give back those they
        // made.
        made.dedup();
        for (proc, s) in made {
            self.emit(proc, Op::StreamSync { stream: s.clone() });
            if s != PER_THREAD_STREAM {
                self.emit(proc, Op::StreamDestroy { stream: s });
            }
        }
    }
}
