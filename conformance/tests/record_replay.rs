//! `explore --record` / `--replay`: the differential judged later against
//! recorded real runs gives what it gave live. A mutant simulator plays the
//! "real driver" so the test needs no GPU and has differences to find.

use ipc_conformance::explore::{self, record, ExploreOptions, Judge};
use ipc_harness::{Backend, Dialect};
use ipc_mock_driver::{Mutant, SimBackend, SimConfig};
use std::path::PathBuf;
use std::time::Duration;

fn sim(mutant: Option<Mutant>) -> SimBackend {
    SimBackend::new(SimConfig {
        mutant,
        ..SimConfig::default()
    })
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ipc-record-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

fn opts(record: Option<PathBuf>, first_case: u64) -> ExploreOptions {
    ExploreOptions {
        cases: 150,
        seed: 77,
        dialects: Dialect::CUDA.to_vec(),
        shrink_runs: 0,
        shrink_runs_real: 0,
        first_case,
        record,
        step_timeout: Duration::from_secs(5),
        ..ExploreOptions::default()
    }
}

#[test]
fn replaying_a_recording_finds_what_the_live_run_found() {
    let dir = scratch("roundtrip");
    let file = dir.join("recorded.jsonl");
    let (good, real) = (sim(None), sim(Some(Mutant::CloseDoesNotDecrement)));
    let judge = Judge {
        sim: &good,
        real: Some(&real),
        step_timeout: Duration::from_secs(5),
    };
    // Two calls of one long run: cases 0..150, then 150..300.
    let first = explore::explore(&opts(Some(file.clone()), 0), &judge, None, &mut |_, _| {});
    let second = explore::explore(&opts(Some(file.clone()), 150), &judge, None, &mut |_, _| {});
    assert_eq!((first.first_case, second.first_case), (0, 150));
    let live = first.differing_cases + second.differing_cases;
    assert!(live > 0, "the mutant must differ somewhere");

    let records = record::read(&file).expect("the recording reads back");
    assert_eq!(records.len(), 300);
    let indices: Vec<u64> = records.iter().map(|r| r.case.index).collect();
    assert_eq!(indices, (0..300).collect::<Vec<u64>>());
    let make = |_: Option<u32>| -> Result<Box<dyn Backend>, String> { Ok(Box::new(sim(None))) };
    let out = dir.join("out");
    let replayed = record::replay(
        &opts(None, 0),
        &make,
        &records,
        "test",
        Some(&out),
        &mut |_, _| {},
    )
    .expect("replay");
    assert_eq!(replayed.cases, 300);
    assert_eq!(replayed.differing_cases, live, "replay and live runs agree");
    // Each finding file holds both runs and replays on the simulator.
    let f = &replayed.findings[0];
    let text = std::fs::read_to_string(f.file.as_ref().expect("written")).expect("readable");
    assert!(text.contains("# Both runs of the steps above"), "{text}");
    ipc_harness::scenario::parse(&text, f.file.as_ref().expect("path")).expect("the file parses");

    // Judged against the mutant itself, nothing differs.
    let mutant = |_: Option<u32>| -> Result<Box<dyn Backend>, String> {
        Ok(Box::new(sim(Some(Mutant::CloseDoesNotDecrement))))
    };
    let same = record::replay(
        &opts(None, 0),
        &mutant,
        &records,
        "test",
        None,
        &mut |_, _| {},
    )
    .expect("replay");
    assert_eq!(same.differing_cases, 0);
}

#[test]
fn a_damaged_recording_is_an_error_naming_the_line_and_a_cut_last_line_is_left_out() {
    let dir = scratch("damaged");
    let (good, real) = (sim(None), sim(None));
    let judge = Judge {
        sim: &good,
        real: Some(&real),
        step_timeout: Duration::from_secs(5),
    };
    let file = dir.join("r.jsonl");
    let mut o = opts(Some(file.clone()), 0);
    o.cases = 3;
    explore::explore(&o, &judge, None, &mut |_, _| {});
    let text = std::fs::read_to_string(&file).expect("written");
    // A run killed while writing leaves an unterminated last line.
    let cut = dir.join("cut.jsonl");
    std::fs::write(&cut, &text[..text.len() - 10]).expect("write");
    assert_eq!(record::read(&cut).expect("reads").len(), 2);
    let bad = dir.join("bad.jsonl");
    std::fs::write(&bad, format!("{text}{{not json}}\n")).expect("write");
    let e = record::read(&bad).expect_err("malformed");
    assert!(e.contains("bad.jsonl:4"), "{e}");
}

#[test]
fn a_recording_gzipped_in_several_members_replays_every_case() {
    use std::io::Write;
    let dir = scratch("members");
    let (good, real) = (sim(None), sim(None));
    let judge = Judge {
        sim: &good,
        real: Some(&real),
        step_timeout: Duration::from_secs(5),
    };
    // Two runs of 15 cases, each gzipped on its own and then joined (`cat
    // a.gz b.gz`): one file of two gzip members.
    let mut joined = Vec::new();
    for (run, first_case) in [("a", 0), ("b", 15)] {
        let file = dir.join(format!("{run}.jsonl"));
        let mut o = opts(Some(file.clone()), first_case);
        o.cases = 15;
        explore::explore(&o, &judge, None, &mut |_, _| {});
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&std::fs::read(&file).expect("recorded"))
            .expect("gzip");
        joined.extend(gz.finish().expect("gzip"));
    }
    let path = dir.join("recorded.jsonl.gz");
    std::fs::write(&path, joined).expect("write");
    let records = record::read(&path).expect("the recording reads");
    let indices: Vec<u64> = records.iter().map(|r| r.case.index).collect();
    assert_eq!(indices, (0..30).collect::<Vec<u64>>());
}
