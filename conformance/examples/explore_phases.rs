//! Where one explore case's CPU time goes, phase by phase (release mode):
//! `cargo run --release -p ipc-conformance --example explore_phases [CASES [full]]`
//! (`full`: only cases whose program fills all 32 steps, chosen beforehand).
//! The phases are those of `explore::run_case` on the simulator, timed with
//! this thread's CPU clock (other load on the machine does not count).

use ipc_conformance::explore::{self, generate, properties, CaseId};
use ipc_harness::scenario::{self, ExecOptions};
use ipc_harness::Dialect;
use ipc_mock_driver::SimBackend;
use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The binary's allocator, counting allocations (and reallocations).
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is passed on to the binary's allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { ipc_conformance::allocator::Allocator.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { ipc_conformance::allocator::Allocator.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { ipc_conformance::allocator::Allocator.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { ipc_conformance::allocator::Allocator.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// This thread's CPU time.
fn cpu_now() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a pointer to a timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

const PHASES: [&str; 10] = [
    "draw the program tree (proptest)",
    "tree.current()",
    "lower to a scenario",
    "its text (a finding's file; not in run_case)",
    "execute (first run)",
    "execute (second run)",
    "compare the two runs",
    "check_trace",
    "drop the tree",
    "drop the rest",
];

fn main() {
    let cases: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5000);
    let full = std::env::args().nth(2).as_deref() == Some("full");
    let ids: Vec<CaseId> = (0..)
        .map(|index| CaseId {
            index,
            seed: explore::case_seed(1, index),
            dialect: Dialect::Runtime,
        })
        .filter(|&id| {
            !full || {
                let tree = explore::case_tree_on(id, 32, 2);
                generate::lower(&tree.current(), 32).stats.steps >= 32
            }
        })
        .take(cases as usize)
        .collect();
    let sim = SimBackend::default();
    let mut t = [Duration::ZERO; PHASES.len()];
    let mut allocs = [0u64; PHASES.len()];
    let mut steps = 0usize;
    let all = cpu_now();
    for &id in &ids {
        let mut clock = cpu_now();
        let mut counted = ALLOCS.load(Ordering::Relaxed);
        let mut lap = |k: usize| {
            let now = cpu_now();
            t[k] += now - clock;
            clock = now;
            let n = ALLOCS.load(Ordering::Relaxed);
            allocs[k] += n - counted;
            counted = n;
        };
        let tree = explore::case_tree_on(id, 32, 2);
        lap(0);
        let program = tree.current();
        lap(1);
        let lowered = generate::lower(&program, 32);
        lap(2);
        std::hint::black_box(lowered.text());
        lap(3);
        let sc = &lowered.scenario;
        let opts = ExecOptions {
            dialect: id.dialect,
            seed: id.seed,
            step_timeout: Duration::from_secs(5),
        };
        let a = scenario::execute(sc, &sim, &opts);
        lap(4);
        let b = scenario::execute(sc, &sim, &opts);
        lap(5);
        assert!(a.trace.same_observations(&b.trace));
        lap(6);
        let choices = properties::Choices::of(&sim, id.dialect);
        let v = properties::check_trace(sc, &a.trace, id.dialect, &choices);
        assert!(v.is_empty());
        lap(7);
        steps += sc.steps.len();
        drop(tree);
        lap(8);
        drop((program, lowered, a, b));
        lap(9);
    }
    let total = cpu_now() - all;
    println!(
        "{cases} cases, {:.1} steps/case: {:.0} cases per CPU-second ({:.2} us/case)",
        steps as f64 / cases as f64,
        cases as f64 / total.as_secs_f64(),
        total.as_secs_f64() * 1e6 / cases as f64
    );
    for ((n, d), a) in PHASES.iter().zip(t).zip(allocs) {
        println!(
            "  {n:<34} {:6.2} us/case {:5.1}% {:7.1} allocations/case",
            d.as_secs_f64() * 1e6 / cases as f64,
            100.0 * d.as_secs_f64() / total.as_secs_f64(),
            a as f64 / cases as f64
        );
    }
}
