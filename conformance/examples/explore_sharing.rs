//! How many generated explore cases may run on reused CUDA workers, and
//! why the others need fresh processes (the first rule of
//! `ipc_harness::sharing` that asks for them, without its line number):
//! `cargo run -p ipc-conformance --example explore_sharing [CASES [SEED [DEVICES]]]`.
//! Every fresh case pays the driver's serialised context creation and
//! teardown for each of its processes, which bounds GPU exploration's speed
//! whatever `--jobs` says.

use ipc_conformance::explore::{case_seed, case_tree_on, generate, CaseId};
use ipc_harness::driver::event_flags::INTERPROCESS;
use ipc_harness::scenario::ast::Op;
use ipc_harness::scenario::Scenario;
use ipc_harness::sharing::{sharing, WorkerSharing};
use ipc_harness::Dialect;
use proptest::strategy::ValueTree;
use std::collections::BTreeMap;
use std::path::Path;

fn arg(n: usize, default: u64) -> u64 {
    std::env::args()
        .nth(n)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

/// Whether `scenario` would share workers were the steps `drop` picks not
/// there (what a rule that let them share would buy).
fn shares_without(scenario: &Scenario, drop: &dyn Fn(&Op) -> bool) -> bool {
    let mut s = scenario.clone();
    s.steps.retain(|step| !drop(&step.op));
    sharing(&s).is_reused()
}

fn is_exit(op: &Op) -> bool {
    matches!(op, Op::Exit)
}

fn is_interprocess_event(op: &Op) -> bool {
    matches!(op, Op::IpcGetEvent { .. } | Op::IpcOpenEvent { .. })
        || matches!(op, Op::EventCreate { flags } if flags & INTERPROCESS != 0)
}

fn main() {
    let (cases, seed, devices) = (arg(1, 2000), arg(2, 1), arg(3, 1) as u32);
    let max_steps = 32;
    let mut reused = 0u64;
    let mut processes = [0u64; 2];
    let mut reasons: BTreeMap<String, u64> = BTreeMap::new();
    // Fresh cases that would share without their exits / interprocess
    // events / both.
    let mut only = [0u64; 3];
    for index in 0..cases {
        let id = CaseId {
            index,
            seed: case_seed(seed, index),
            dialect: if index % 2 == 0 {
                Dialect::Runtime
            } else {
                Dialect::Driver
            },
        };
        let tree = case_tree_on(id, max_steps, devices);
        let text = generate::lower(&tree.current(), max_steps).text();
        let scenario = match ipc_harness::scenario::parse(&text, Path::new("<case>")) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("case {index} does not parse: {e}");
                continue;
            }
        };
        let share = sharing(&scenario);
        let n = scenario.processes.len() as u64;
        match share {
            WorkerSharing::Reused => {
                reused += 1;
                processes[0] += n;
            }
            WorkerSharing::Fresh(why) => {
                processes[1] += n;
                only[0] += u64::from(shares_without(&scenario, &is_exit));
                only[1] += u64::from(shares_without(&scenario, &is_interprocess_event));
                only[2] += u64::from(shares_without(&scenario, &|op| {
                    is_exit(op) || is_interprocess_event(op)
                }));
                // "line 12: an interprocess event outlives a reset" -> the rule.
                let rule = why.split_once(": ").map_or(why.as_str(), |(_, r)| r);
                let rule = if rule.starts_with('\'') {
                    "compares values"
                } else {
                    rule
                };
                *reasons.entry(rule.to_string()).or_default() += 1;
            }
        }
    }
    let fresh = cases - reused;
    println!(
        "{cases} cases (seed {seed}, {devices} device(s)): {reused} may reuse workers ({:.1} %), {fresh} need fresh processes",
        100.0 * reused as f64 / cases.max(1) as f64
    );
    println!(
        "processes per case: reused {:.2}, fresh {:.2}",
        processes[0] as f64 / reused.max(1) as f64,
        processes[1] as f64 / fresh.max(1) as f64
    );
    println!(
        "fresh cases that would share without: their exits {}, their interprocess events {}, both {}",
        only[0], only[1], only[2]
    );
    let mut sorted: Vec<_> = reasons.into_iter().collect();
    sorted.sort_by_key(|r| std::cmp::Reverse(r.1));
    for (rule, n) in sorted {
        println!("{n:>7}  {rule}");
    }
}
