//! Expectations files (`--expectations`): the parser, matching, the Flaky
//! re-runs through the real runner, and the CI gate of the binary.

mod common;
use common::{cli, code, scratch, stderr, stdout};
use ipc_conformance::backend::{self, BackendKind, SimSettings};
use ipc_conformance::catalogue::{self, Catalogue, Clause};
use ipc_conformance::expectations::{
    Classification, Entry, Expectations, ExpectationsError, ExpectedOutcome, Gate, Subject,
};
use ipc_conformance::runner::{self, Console, RunConfig};
use ipc_conformance::Filter;
use ipc_harness::{Backend, BackendInfo, Dialect, Machine, MachineSpec, StartError};
use serde_json::Value;
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::process::Output;

fn parse(text: &str) -> Result<Expectations, ExpectationsError> {
    Expectations::parse(text, Path::new("gate/h100.toml"))
}

fn parse_err(text: &str) -> String {
    match parse(text) {
        Ok(e) => panic!("parsed, {} entries: {text}", e.entries.len()),
        Err(e) => e.to_string(),
    }
}

/// An entry with `extra` lines on top of a valid clause, outcome and reason.
fn entry_with(extra: &str) -> String {
    format!("[[expect]]\nclause = \"mem.open.basic\"\noutcome = \"Fail\"\nreason = \"r\"\n{extra}")
}

// ---------------------------------------------------------------------------
// Parser

#[test]
fn empty_and_comment_only_files_have_no_entries() {
    for text in ["", "\n\n", "# nothing expected yet\n"] {
        assert!(parse(text).unwrap().entries.is_empty(), "{text:?}");
    }
}

#[test]
fn every_key_parses() {
    let exp = parse(
        r#"
[[expect]]
clause = "mem.{open,close}.*"
backend = "cuda"
dialect = "driver"
gpu = "H100"
cc = ">=9.0, <10"
driver = ">=580, <590"
outcome = "Fail"
error = "CUDA_ERROR_INVALID_VALUE"
reason = "the reason"
link = "https://example.invalid/bug/7"

[[expect]]
clause = "*"
outcome = "Flaky"
reason = "timing"
"#,
    )
    .unwrap();
    assert_eq!(exp.entries.len(), 2);
    assert_eq!(exp.path, Path::new("gate/h100.toml"));
    let e = &exp.entries[0];
    assert_eq!((e.index, e.line), (1, 2));
    assert_eq!(e.clause, "mem.{open,close}.*");
    assert_eq!(e.backend.as_deref(), Some("cuda"));
    assert_eq!(e.dialect, Some(Dialect::Driver));
    assert_eq!(e.gpu.as_deref(), Some("H100"));
    assert_eq!(e.cc.as_ref().unwrap().as_str(), ">=9.0, <10");
    assert_eq!(e.driver.as_ref().unwrap().as_str(), ">=580, <590");
    assert_eq!(e.outcome, ExpectedOutcome::Fail);
    assert_eq!(e.error.as_deref(), Some("CUDA_ERROR_INVALID_VALUE"));
    assert_eq!(e.reason, "the reason");
    assert_eq!(e.link.as_deref(), Some("https://example.invalid/bug/7"));
    assert_eq!(exp.entries[1].outcome, ExpectedOutcome::Flaky);
    assert_eq!((exp.entries[1].index, exp.entries[1].line), (2, 14));
    // Inline tables are entries too.
    let inline =
        parse(r#"expect = [{ clause = "a.b", outcome = "Crash", reason = "r" }]"#).unwrap();
    assert_eq!(inline.entries[0].outcome, ExpectedOutcome::Crash);
}

#[test]
fn every_outcome_parses() {
    for o in ["Fail", "Crash", "Timeout", "NotSupported", "Flaky"] {
        let exp = parse(&format!(
            "[[expect]]\nclause = \"a.b\"\noutcome = \"{o}\"\nreason = \"r\"\n"
        ))
        .unwrap();
        assert_eq!(exp.entries[0].outcome.name(), o);
    }
}

// Malformed files and their exact messages: tests/expectations-errors/.

#[test]
fn all_problems_of_a_file_are_reported_at_once() {
    let text = format!(
        "{}\n[[expect]]\nclause = \"a.b\"\noutcome = \"Fail\"\n\n[[expect]]\nclause = \"c.[\"\noutcome = \"Often\"\nreason = \"r\"\n",
        entry_with("")
    );
    let err = parse(&text).unwrap_err();
    let found: Vec<(Option<usize>, Option<usize>)> =
        err.problems.iter().map(|p| (p.entry, p.line)).collect();
    assert_eq!(
        found,
        [(Some(2), Some(6)), (Some(3), Some(11)), (Some(3), Some(12))]
    );
    assert_eq!(err.to_string().lines().count(), 3);
}

#[test]
fn a_missing_file_is_an_error_not_a_panic() {
    let err = Expectations::load(Path::new("/nonexistent/expectations.toml")).unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("/nonexistent/expectations.toml: cannot read:"),
        "{text}"
    );
}

#[test]
fn garbage_never_panics() {
    let inputs = [
        "\u{0}\u{1}",
        "[[expect]",
        "[[expect]]\n[[expect]]\n",
        "[[expect]]\nclause = \"\"\noutcome = \"\"\nreason = \"\"\n",
        "expect = [[1, 2], {}]",
        "[[expect]]\n[expect.nested]\nx = 1\n",
        "[[expect]]\nclause = \"a.b\"\noutcome = \"Fail\"\nreason = \"r\"\ndriver = \">=99999999999999999999999\"\n",
    ];
    for text in inputs {
        let err = parse_err(text);
        assert!(err.starts_with("gate/h100.toml"), "{text:?}: {err}");
    }
}

// ---------------------------------------------------------------------------
// Matching

fn h100<'a>(id: &'a str) -> Subject<'a> {
    Subject {
        id,
        backend: "cuda",
        dialect: Dialect::Runtime,
        gpu_name: Some("NVIDIA H100 80GB HBM3"),
        compute_capability: Some("9.0"),
        driver_version: Some("580.159.04"),
    }
}

fn only(text: &str) -> Entry {
    let mut exp = parse(text).unwrap();
    assert_eq!(exp.entries.len(), 1);
    exp.entries.remove(0)
}

fn with_key(key: &str, value: &str) -> Entry {
    only(&entry_with(&format!("{key} = \"{value}\"\n")))
}

#[test]
fn clauses_match_by_id_or_glob() {
    let s = h100("mem.open.basic");
    assert!(with_key("backend", "cuda").matches(&s));
    let by = |pattern: &str| {
        only(&format!(
            "[[expect]]\nclause = \"{pattern}\"\noutcome = \"Fail\"\nreason = \"r\"\n"
        ))
    };
    assert!(by("mem.open.basic").matches(&s));
    assert!(
        !by("mem.open").matches(&s),
        "a plain id is exact, not a prefix"
    );
    assert!(!by("mem.open.basi").matches(&s));
    assert!(by("mem.open.*").matches(&s));
    assert!(by("*.basic").matches(&s));
    assert!(by("mem.{open,close}.*").matches(&s));
    assert!(!by("mem.close.*").matches(&s));
    assert!(!by("MEM.OPEN.BASIC").matches(&s), "ids are case-sensitive");
}

#[test]
fn gpu_cc_driver_backend_and_dialect_conditions() {
    let s = h100("mem.open.basic");
    // gpu: substring or glob, any case; no GPU name: no match.
    assert!(with_key("gpu", "h100").matches(&s));
    assert!(with_key("gpu", "*H100*").matches(&s));
    assert!(!with_key("gpu", "H100").matches(&Subject {
        gpu_name: Some("NVIDIA H200"),
        ..s
    }));
    assert!(
        !with_key("gpu", "H1??").matches(&s),
        "a glob matches the whole name"
    );
    assert!(!with_key("gpu", "H100").matches(&Subject {
        gpu_name: None,
        ..s
    }));
    // cc
    assert!(with_key("cc", "9.0").matches(&s));
    assert!(with_key("cc", "9").matches(&s));
    assert!(!with_key("cc", "9.0").matches(&Subject {
        compute_capability: Some("8.9"),
        ..s
    }));
    assert!(with_key("cc", ">=8.0, <10").matches(&s));
    assert!(!with_key("cc", "<9.0").matches(&s));
    assert!(!with_key("cc", "9.0").matches(&Subject {
        compute_capability: None,
        ..s
    }));
    // driver range edges
    let range = with_key("driver", ">=580, <590");
    for (v, m) in [
        ("580", true),
        ("580.0.0", true),
        ("580.159.04", true),
        ("589.999.99", true),
        ("579.99", false),
        ("590", false),
        ("590.0.1", false),
        ("1000.1", false),
        ("", false),
        ("unknown", false),
    ] {
        assert_eq!(
            range.matches(&Subject {
                driver_version: Some(v),
                ..s
            }),
            m,
            "{v}"
        );
    }
    assert!(!range.matches(&Subject {
        driver_version: None,
        ..s
    }));
    assert!(
        with_key("driver", "<=580").matches(&s),
        "<=580 includes 580.x"
    );
    assert!(
        !with_key("driver", ">580").matches(&s),
        ">580 starts at 581"
    );
    assert!(with_key("driver", "580.159").matches(&s));
    assert!(with_key("driver", "=580.159.4").matches(&s), "04 is 4");
    assert!(!with_key("driver", "580.15").matches(&s));
    // backend and dialect
    assert!(!with_key("backend", "sim").matches(&s));
    assert!(with_key("backend", "sim").matches(&Subject {
        backend: "sim",
        ..s
    }));
    assert!(with_key("dialect", "runtime").matches(&s));
    assert!(!with_key("dialect", "driver").matches(&s));
}

#[test]
fn the_first_matching_entry_wins() {
    let exp = parse(
        r#"
[[expect]]
clause = "mem.open.basic"
dialect = "driver"
outcome = "Crash"
reason = "only the driver dialect"

[[expect]]
clause = "mem.open.*"
outcome = "Fail"
reason = "the whole topic"

[[expect]]
clause = "mem.open.basic"
outcome = "Timeout"
reason = "never reached"
"#,
    )
    .unwrap();
    let s = h100("mem.open.basic");
    assert_eq!(exp.first_match(&s).unwrap().index, 2);
    let drv = Subject {
        dialect: Dialect::Driver,
        ..s
    };
    assert_eq!(exp.first_match(&drv).unwrap().index, 1);
    assert!(exp.first_match(&h100("mem.close.twice")).is_none());
}

// ---------------------------------------------------------------------------
// Flaky re-runs through the runner

/// The simulator, but every other machine starts with `reopen=new-mapping`
/// (which makes mem.open.reopen-same-context fail): attempts alternate
/// between Fail and Pass.
struct Alternating {
    failing: Box<dyn Backend>,
    passing: Box<dyn Backend>,
    starts: Cell<usize>,
}

impl Alternating {
    fn new() -> Alternating {
        let settings = |sem: &[&str]| SimSettings {
            devices: None,
            semantics: backend::parse_semantics(sem).unwrap(),
            profile: None,
        };
        Alternating {
            failing: backend::make(BackendKind::Sim, &settings(&["reopen=new-mapping"])).unwrap(),
            passing: backend::make(BackendKind::Sim, &settings(&[])).unwrap(),
            starts: Cell::new(0),
        }
    }
}

impl Backend for Alternating {
    fn name(&self) -> &str {
        "sim"
    }
    fn info(&self) -> BackendInfo {
        self.passing.info()
    }
    fn start(&self, spec: &MachineSpec) -> Result<Box<dyn Machine>, StartError> {
        let n = self.starts.get();
        self.starts.set(n + 1);
        if n % 2 == 0 {
            self.failing.start(spec)
        } else {
            self.passing.start(spec)
        }
    }
    fn has_hazard_log(&self) -> bool {
        true
    }
}

fn run_flaky(backend: &dyn Backend, retries: u32) -> ipc_conformance::RunReport {
    let cat = Catalogue::load(&catalogue::compiled_in_dir()).unwrap();
    let filter = Filter::new(&["mem.open.reopen-same-context"]).unwrap();
    let clauses: Vec<&Clause> = cat.select(&filter);
    assert_eq!(clauses.len(), 1);
    let exp = parse(
        "[[expect]]\nclause = \"mem.open.reopen-*\"\noutcome = \"Flaky\"\nreason = \"races\"\n",
    )
    .unwrap();
    let cfg = RunConfig::default();
    let mut gate = Gate::new(
        Some(&exp),
        Console::new(true, false),
        backend,
        &cfg,
        retries,
        true,
    );
    // The runner re-runs; the gate only says which results may be re-run.
    let cfg = RunConfig {
        retries: gate.retry_policy(),
        ..cfg
    };
    let mut report = runner::run_clauses(&clauses, backend, &cfg, &mut gate);
    gate.finish(&mut report);
    report
}

#[test]
fn a_flaky_clause_whose_attempts_differ_is_flaky_and_passes_the_gate() {
    let report = run_flaky(&Alternating::new(), 2);
    let r = &report.results[0];
    let rec = r.expectation.as_ref().unwrap();
    // The result is the first attempt; the record has every attempt.
    assert_eq!(r.status, ipc_harness::Status::Fail);
    assert_eq!(rec.classification, Classification::Flaky);
    let statuses: Vec<&str> = rec.attempts.iter().map(|a| a.status.name()).collect();
    assert_eq!(
        statuses,
        ["Fail", "Pass"],
        "stops at the first different outcome"
    );
    assert_eq!(rec.detail, "attempts: Fail, Pass");
    assert_eq!(report.classification_totals.as_ref().unwrap()["Flaky"], 1);
    assert_eq!(report.run.expectations.as_ref().unwrap().flaky_retries, 2);
    assert_eq!(ipc_conformance::cli::exit_code(&report), 0);
}

#[test]
fn a_flaky_clause_that_always_fails_is_an_unexpected_fail() {
    let always = backend::make(
        BackendKind::Sim,
        &SimSettings {
            devices: None,
            semantics: backend::parse_semantics(&["reopen=new-mapping"]).unwrap(),
            profile: None,
        },
    )
    .unwrap();
    let report = run_flaky(always.as_ref(), 2);
    let rec = report.results[0].expectation.as_ref().unwrap();
    assert_eq!(rec.classification, Classification::UnexpectedFail);
    assert_eq!(rec.attempts.len(), 3, "1 + 2 retries");
    assert!(
        rec.detail.contains("but Fail in all 3 attempts"),
        "{}",
        rec.detail
    );
    assert_eq!(ipc_conformance::cli::exit_code(&report), 1);
    // No retries: one attempt, still unexpected.
    let report = run_flaky(always.as_ref(), 0);
    let rec = report.results[0].expectation.as_ref().unwrap();
    assert_eq!(rec.classification, Classification::UnexpectedFail);
    assert!(rec.attempts.is_empty());
    // And a passing Flaky clause is not re-run at all.
    let passing = backend::make(BackendKind::Sim, &SimSettings::default()).unwrap();
    let report = run_flaky(passing.as_ref(), 2);
    let rec = report.results[0].expectation.as_ref().unwrap();
    assert_eq!(rec.classification, Classification::Pass);
    assert!(rec.attempts.is_empty());
}

// ---------------------------------------------------------------------------
// The binary

/// The clauses that `--semantics reopen=new-mapping` makes fail.
const REOPEN_FAILURES: [&str; 19] = [
    "mem.handle.copy-of-open-handle-table",
    "mem.handle.flipped-offset-importer-with-memory",
    "mem.handle.serial-copy-maps-again",
    "mem.lifetime.reopen-after-exporter-exit",
    "mem.lifetime.new-importer-after-exporter-exit",
    "mem.handle.damaged-offset-while-mapped",
    "mem.lifetime.reopen-after-free-while-open",
    "mem.open.reopen-same-context",
    "mem.handle.damaged-copy-of-open-handle",
    "mem.lifetime.damaged-handle-after-exporter-exit",
    "mem.handle.damaged-offset-disjoint-range",
    "mem.handle.memory-type-before-context-rules",
    "mem.context.second-context-before-memory-type-of-opened-copy",
    "mem.lifetime.import-survives-exporter-crash",
    "mem.context.second-context-fields-of-live-opens",
    "mem.handle.serial-copy-reads-format-word",
    "mem.handle.larger-size-copy-then-original",
    "mem.handle.flipped-offset-importer-with-pinned-host",
    "mem.lifetime.format-word-unread-when-mapped-after-exit",
];

fn fail_entry(id: &str, reason: &str) -> String {
    format!("[[expect]]\nclause = \"{id}\"\nbackend = \"sim\"\noutcome = \"Fail\"\nreason = \"{reason}\"\n\n")
}

/// Run the catalogue with `args` and the expectations `text`; returns the
/// output and results.json.
fn gate(tag: &str, text: &str, args: &[&str]) -> (Output, Value, PathBuf) {
    let dir = scratch(tag);
    let file = dir.join("expectations.toml");
    std::fs::write(&file, text).unwrap();
    let out = dir.join("reports");
    let mut all = vec![
        "run",
        "--out",
        out.to_str().unwrap(),
        "--expectations",
        file.to_str().unwrap(),
    ];
    all.extend_from_slice(args);
    let o = cli(&all);
    let v = if out.join("results.json").is_file() {
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap()
    } else {
        Value::Null
    };
    (o, v, out)
}

fn classification<'a>(v: &'a Value, id: &str) -> &'a Value {
    let r = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id)
        .unwrap_or_else(|| panic!("no result {id}"));
    &r["expectation"]["classification"]
}

#[test]
fn expected_failures_pass_the_gate() {
    let text: String = REOPEN_FAILURES
        .iter()
        .map(|id| fail_entry(id, "reopen=new-mapping gives a second pointer"))
        .collect();
    let (o, v, out) = gate("expected", &text, &["--semantics", "reopen=new-mapping"]);
    let text_out = stdout(&o);
    assert_eq!(code(&o), 0, "{text_out}{}", stderr(&o));
    for id in REOPEN_FAILURES {
        assert_eq!(
            v["results"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["id"] == id)
                .unwrap()["status"],
            "Fail"
        );
        assert_eq!(classification(&v, id), "ExpectedFail", "{id}");
        let line = text_out
            .lines()
            .find(|l| l.contains(id) && l.starts_with("FAIL"))
            .unwrap();
        assert!(line.contains("=> ExpectedFail (entry "), "{line}");
    }
    assert_eq!(classification(&v, "mem.open.basic"), "Pass");
    let n = REOPEN_FAILURES.len();
    assert_eq!(v["classification_totals"]["ExpectedFail"], n);
    assert_eq!(v["classification_totals"]["UnexpectedFail"], 0);
    assert_eq!(v["totals"]["Fail"], n, "statuses are unchanged");
    assert!(v["run"]["expectations"]["file"]
        .as_str()
        .unwrap()
        .ends_with("expectations.toml"));
    assert_eq!(v["run"]["expectations"]["entries"], n);
    assert!(
        text_out.contains(&format!("{n} ExpectedFail")),
        "{text_out}"
    );
    assert!(text_out.contains("gate: passed"), "{text_out}");
    let junit = std::fs::read_to_string(out.join("junit.xml")).unwrap();
    let back = quick_junit::Report::deserialize_from_str(&junit).unwrap();
    assert_eq!((back.failures, back.errors), (0, 0), "{junit}");
    assert!(junit.contains("expectation: ExpectedFail"), "{junit}");
    let md = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(md.contains("## Expectations"), "{md}");
    assert!(md.contains("### Expected failures"), "{md}");
    assert!(!md.contains("### Unexpected results"), "{md}");
}

#[test]
fn a_failure_no_entry_expects_fails_the_gate() {
    let text: String = REOPEN_FAILURES[1..]
        .iter()
        .map(|id| fail_entry(id, "only these are known"))
        .collect();
    let (o, v, out) = gate(
        "unexpected-fail",
        &text,
        &["--semantics", "reopen=new-mapping", "--tiers", "all"],
    );
    let text_out = stdout(&o);
    assert_eq!(code(&o), 1, "{text_out}{}", stderr(&o));
    assert_eq!(classification(&v, REOPEN_FAILURES[1]), "ExpectedFail");
    assert_eq!(classification(&v, REOPEN_FAILURES[0]), "UnexpectedFail");
    assert_eq!(v["classification_totals"]["UnexpectedFail"], 1);
    assert!(
        text_out.contains("gate: FAILED (1 unexpected result in the gated tiers: contract, relied-on, incidental)"),
        "{text_out}"
    );
    assert!(
        text_out.contains(&format!(
            "  {} [runtime] Fail (incidental): UnexpectedFail",
            REOPEN_FAILURES[0]
        )),
        "{text_out}"
    );
    let md = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(md.contains("### Unexpected results"), "{md}");
}

#[test]
fn an_expected_failure_that_passes_fails_the_gate() {
    let mut text: String = REOPEN_FAILURES
        .iter()
        .map(|id| fail_entry(id, "known"))
        .collect();
    text.push_str(&fail_entry("mem.open.basic", "basic opens are broken"));
    let (o, v, out) = gate(
        "unexpected-pass",
        &text,
        &["--semantics", "reopen=new-mapping"],
    );
    let text_out = stdout(&o);
    assert_eq!(code(&o), 1, "{text_out}{}", stderr(&o));
    assert_eq!(classification(&v, "mem.open.basic"), "UnexpectedPass");
    let rec = &v["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == "mem.open.basic")
        .unwrap()["expectation"];
    assert_eq!(rec["entry"], REOPEN_FAILURES.len() + 1);
    assert_eq!(rec["reason"], "basic opens are broken");
    assert_eq!(v["classification_totals"]["UnexpectedPass"], 1);
    assert!(
        text_out.contains("PASS    mem.open.basic") && text_out.contains("=> UnexpectedPass"),
        "{text_out}"
    );
    let junit = std::fs::read_to_string(out.join("junit.xml")).unwrap();
    assert!(
        junit.contains("message=\"unexpected pass: basic opens are broken\""),
        "{junit}"
    );
    let back = quick_junit::Report::deserialize_from_str(&junit).unwrap();
    assert_eq!(back.failures, 1);
}

#[test]
fn error_names_are_checked_in_both_dialects() {
    // garbage_handle_error=InvalidHandle makes four clauses that expect
    // InvalidValue observe InvalidHandle instead.
    let ids = [
        "mem.handle.corrupted-fields",
        "mem.handle.garbage",
        "mem.handle.format-word-unread-when-mapped",
        "mem.handle.memory-type-before-context-rules",
    ];
    let with_error = |error: &str| -> String {
        ids.iter()
            .map(|id| {
                format!("[[expect]]\nclause = \"{id}\"\noutcome = \"Fail\"\nerror = \"{error}\"\nreason = \"r\"\n\n")
            })
            .collect()
    };
    // Only these four: other clauses that expect InvalidValue from a
    // damaged handle (format-byte-odd-size, ...) would observe the switch too.
    let filter = ids.join(",");
    // These clauses are incidental: gate every tier so that the
    // classification decides the exit code.
    let args = [
        "--semantics",
        "garbage_handle_error=InvalidHandle",
        "--dialect",
        "all",
        "--filter",
        filter.as_str(),
        "-q",
        "--tiers",
        "all",
    ];
    // The kind matches both dialects' spellings.
    let (o, v, _) = gate("error-kind", &with_error("InvalidHandle"), &args);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    // Runtime, driver and hip for mem.handle.garbage; the other three hold
    // for the CUDA dialects only (hip: NotSupported).
    assert_eq!(v["classification_totals"]["ExpectedFail"], 9);
    // A runtime spelling matches the driver and hip dialects' errors too.
    let (o, _, _) = gate(
        "error-name",
        &with_error("cudaErrorInvalidResourceHandle"),
        &args,
    );
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    // Another error: unexpected, with what was observed.
    let (o, v, _) = gate(
        "error-mismatch",
        &with_error("cudaErrorInvalidValue"),
        &args,
    );
    let text_out = stdout(&o);
    assert_eq!(code(&o), 1, "{text_out}");
    assert_eq!(v["classification_totals"]["UnexpectedFail"], 9);
    assert!(
        text_out.contains("expected error cudaErrorInvalidValue, but the failing step (line 15) got error cudaErrorInvalidResourceHandle"),
        "{text_out}"
    );
    assert!(
        text_out.contains("got error CUDA_ERROR_INVALID_HANDLE"),
        "{text_out}"
    );
}

#[test]
fn expected_not_supported_holds_and_rots_loudly() {
    let text = "[[expect]]\nclause = \"mem.context.two-devices\"\nbackend = \"sim\"\noutcome = \"NotSupported\"\nreason = \"single-GPU runners\"\n";
    let args = ["--filter", "mem.context", "--sim-devices", "1"];
    let (o, v, _) = gate("notsup", text, &args);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert_eq!(
        classification(&v, "mem.context.two-devices"),
        "NotSupported"
    );
    // With two devices it passes: the expectation has rotted.
    let (o, v, _) = gate("notsup-rot", text, &["--filter", "mem.context"]);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    assert_eq!(
        classification(&v, "mem.context.two-devices"),
        "UnexpectedPass"
    );
}

#[test]
fn flaky_retries_through_the_binary() {
    let text = format!(
        "[[expect]]\nclause = \"mem.open.reopen-same-context\"\noutcome = \"Flaky\"\nreason = \"r\"\n\n{}",
        fail_entry(REOPEN_FAILURES[0], "known")
    );
    // The simulator is deterministic: every attempt fails the same way.
    let (o, v, _) = gate(
        "flaky",
        &text,
        &["--semantics", "reopen=new-mapping", "--flaky-retries", "3"],
    );
    let text_out = stdout(&o);
    assert_eq!(code(&o), 1, "{text_out}");
    assert_eq!(
        classification(&v, "mem.open.reopen-same-context"),
        "UnexpectedFail"
    );
    let r = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == "mem.open.reopen-same-context")
        .unwrap();
    assert_eq!(r["expectation"]["attempts"].as_array().unwrap().len(), 4);
    assert_eq!(v["run"]["expectations"]["flaky_retries"], 3);
    assert!(
        text_out.contains("attempts: Fail, Fail, Fail, Fail"),
        "{text_out}"
    );
}

#[test]
fn bad_files_and_flags_are_usage_errors() {
    let (o, v, _) = gate(
        "bad",
        "[[expect]]\nclause = \"a.b\"\noutcome = \"Fail\"\n",
        &[],
    );
    let err = stderr(&o);
    assert_eq!(code(&o), 2, "{err}");
    assert!(
        err.contains("expectations.toml:1: [[expect]] entry 1: missing required key `reason`"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    assert!(v.is_null(), "nothing ran");
    let o = cli(&[
        "run",
        "--expectations",
        "/nonexistent/x.toml",
        "--out",
        scratch("missing").to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("/nonexistent/x.toml: cannot read"),
        "{}",
        stderr(&o)
    );
    // --flaky-retries needs --expectations.
    let o = cli(&["run", "--flaky-retries", "3"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
}

#[test]
fn without_expectations_nothing_changes() {
    let out = scratch("plain").join("reports");
    let o = cli(&[
        "run",
        "--out",
        out.to_str().unwrap(),
        "--semantics",
        "reopen=new-mapping",
        "-q",
    ]);
    assert_eq!(code(&o), 1);
    let text = std::fs::read_to_string(out.join("results.json")).unwrap();
    for key in ["expectation", "classification_totals"] {
        assert!(!text.contains(key), "{key}");
    }
    assert!(!stdout(&o).contains("=>"), "{}", stdout(&o));
    let md = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(!md.contains("## Expectations"));
}

#[test]
fn flags_parse_with_their_defaults() {
    use clap::Parser;
    use ipc_conformance::cli::{Cli, Command as Cmd};
    let cli =
        Cli::try_parse_from(["ipc-conformance", "run", "--expectations", "ci/h100.toml"]).unwrap();
    let Cmd::Run(a) = cli.command else {
        panic!("not run")
    };
    assert_eq!(a.expectations.as_deref(), Some(Path::new("ci/h100.toml")));
    assert_eq!(a.flaky_retries, 2);
    let cli = Cli::try_parse_from(["ipc-conformance", "run"]).unwrap();
    let Cmd::Run(a) = cli.command else {
        panic!("not run")
    };
    assert!(a.expectations.is_none());
    let err = Cli::try_parse_from(["ipc-conformance", "run", "--flaky-retries", "1"]).unwrap_err();
    assert_eq!(err.exit_code(), 2);
}
