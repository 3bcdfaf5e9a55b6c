//! The simulator's property tests: programs drawn from explore's generator
//! (`explore::generate::program_strategy`), lowered to scenario text and
//! judged on the simulator by explore's properties (robustness,
//! determinism, documented returns, conservation, coherence), with proptest
//! shrinking a failure to its smallest program.
//!
//! One property needs the end of a whole run, which explore's programs do
//! not reach: after every process exited, nothing is left allocated, so a
//! fresh process on each device allocates, writes and reads back the
//! device's whole memory.
//!
//! The seed is fixed, so CI judges the same programs every run (a failure is
//! a change, not the dice); `PROPTEST_CASES=N` runs more programs and
//! `PROPTEST_RNG_SEED=N` other ones.

use ipc_conformance::explore::generate::{self, Program};
use ipc_conformance::explore::properties::check_on_sim;
use ipc_harness::scenario::{self, ExecOptions};
use ipc_harness::Dialect;
use ipc_mock_driver::SimBackend;
use proptest::prelude::*;
use std::path::Path;

/// Steps of a generated program (explore's default).
const MAX_STEPS: usize = 32;
const CASES: u32 = 256;
/// The simulated device's memory (H100 80 GB).
const DEVICE_MEMORY: &str = "80GiB";
/// The name of the fresh process on each device (`fresh0`, `fresh1`).
const FRESH: &str = "fresh";

fn config() -> ProptestConfig {
    // An explicit `cases` would override PROPTEST_CASES, so read it here.
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CASES);
    let rng_seed = if std::env::var_os("PROPTEST_RNG_SEED").is_some() {
        ProptestConfig::default().rng_seed
    } else {
        proptest::test_runner::RngSeed::Fixed(20_261_125)
    };
    ProptestConfig {
        cases,
        max_shrink_iters: 4096,
        // Failures are reported with their minimal program; no files are written.
        failure_persistence: None,
        rng_seed,
        ..ProptestConfig::default()
    }
}

fn dialect_strategy() -> impl Strategy<Value = Dialect> {
    proptest::sample::select(Dialect::ALL.to_vec())
}

/// `text` (a lowered program) followed by the end of a whole run: every
/// process still running exits, then a fresh process on each device
/// allocates that device's whole memory and reads back what it wrote.
fn with_whole_machine_tail(text: &str, program: &Program) -> String {
    let mut out = String::new();
    let mut declared = Vec::new();
    let mut exited = Vec::new();
    let mut lines = text.lines().peekable();
    // The header: comments, `devices`, `process NAME device=D` lines.
    while let Some(line) = lines.next_if(|l| !l.contains(": ")) {
        if let Some(rest) = line.strip_prefix("process ") {
            declared.extend(rest.split_whitespace().next().map(str::to_string));
        }
        out.push_str(line);
        out.push('\n');
    }
    for device in 0..program.devices {
        out.push_str(&format!("process {FRESH}{device} device={device}\n"));
    }
    for line in lines {
        if let Some(name) = line.strip_suffix(": exit => any") {
            exited.push(name.trim().to_string());
        }
        out.push_str(line);
        out.push('\n');
    }
    for name in declared.iter().filter(|n| !exited.contains(n)) {
        out.push_str(&format!("{name}: exit => any\n"));
    }
    for device in 0..program.devices {
        let who = format!("{FRESH}{device}");
        out.push_str(&format!(
            "{who}: whole{device} = malloc {DEVICE_MEMORY} => ok\n\
             {who}: fill whole{device} 0x5a len=64 => ok\n\
             {who}: read whole{device} 0 64 => bytes 5a*64\n\
             {who}: free whole{device} => ok\n"
        ));
    }
    out
}

proptest! {
    #![proptest_config(config())]

    /// Every generated program keeps explore's properties on the simulator.
    #[test]
    fn generated_programs_keep_every_property(
        program in generate::program_strategy(MAX_STEPS, 2),
        dialect in dialect_strategy(),
        seed in any::<u64>(),
    ) {
        let text = generate::lower(&program, MAX_STEPS).text();
        let sc = scenario::parse(&text, Path::new("generated.ipc"))
            .map_err(|e| TestCaseError::fail(format!("invalid scenario: {e}\n{text}")))?;
        let sim = SimBackend::default();
        let opts = ExecOptions { dialect, seed, ..ExecOptions::default() };
        let (_, violations) = check_on_sim(&sc, &sim, &opts);
        prop_assert!(
            violations.is_empty(),
            "{dialect:?}, seed {seed}:\n{violations:#?}\n{text}"
        );
    }

    /// After every process of a generated program exited, the machine is
    /// whole: a fresh process can use each device's entire memory.
    #[test]
    fn every_exit_gives_back_all_device_memory(
        program in generate::program_strategy(MAX_STEPS, 2),
        dialect in dialect_strategy(),
        seed in any::<u64>(),
    ) {
        let text = with_whole_machine_tail(&generate::lower(&program, MAX_STEPS).text(), &program);
        let sc = scenario::parse(&text, Path::new("generated.ipc"))
            .map_err(|e| TestCaseError::fail(format!("invalid scenario: {e}\n{text}")))?;
        let sim = SimBackend::default();
        let opts = ExecOptions { dialect, seed, ..ExecOptions::default() };
        let run = scenario::execute(&sc, &sim, &opts);
        // A generated program may crash a process on purpose, so the
        // verdict is not judged: the fresh processes' steps are.
        let fresh: Vec<_> = run
            .trace
            .steps
            .iter()
            .filter(|s| s.process.starts_with(FRESH))
            .collect();
        prop_assert_eq!(fresh.len(), 4 * program.devices as usize, "{}", text);
        for step in fresh {
            let held = step.check.as_ref().is_some_and(|c| c.passed);
            prop_assert!(
                held,
                "{:?}, seed {}: {} '{}': {:?} {:?}\n{}",
                dialect,
                seed,
                step.process,
                step.op,
                step.outcome,
                step.check,
                text
            );
        }
    }
}

/// The tail the whole-machine property appends names every process and
/// exits exactly the ones still running.
#[test]
fn the_whole_machine_tail_exits_the_running_processes() {
    let program = Program {
        processes: 2,
        devices: 1,
        placement: vec![0, 0],
        actions: Vec::new(),
    };
    let text = "devices 1\nprocess p0 device=0\nprocess p1 device=0\np0: a = malloc 4KiB => any\np1: exit => any\n";
    let tail = with_whole_machine_tail(text, &program);
    let want = "devices 1\nprocess p0 device=0\nprocess p1 device=0\nprocess fresh0 device=0\n\
        p0: a = malloc 4KiB => any\np1: exit => any\np0: exit => any\n\
        fresh0: whole0 = malloc 80GiB => ok\nfresh0: fill whole0 0x5a len=64 => ok\n\
        fresh0: read whole0 0 64 => bytes 5a*64\nfresh0: free whole0 => ok\n";
    assert_eq!(tail, want);
    scenario::parse(&tail, Path::new("tail.ipc")).expect("the tail parses");
}
