//! The semantic-choice table: listing, setting, and refusing bad input.

mod common;

use ipc_harness::{Backend, ErrorKind};
use ipc_mock_driver::semantics::{
    ExportRule, FreeOfIpcPointer, FreedExport, GetNullOut, MemcpyBounds, OpenAddress, OpenFlags,
    Reopen, Switch, VaReuse,
};
use ipc_mock_driver::{Semantics, SimBackend, SimConfig};
use rstest::rstest;

#[test]
fn every_choice_round_trips_every_option() {
    let base = Semantics::default();
    let listed = base.describe();
    assert!(listed.len() >= 20);
    let mut names: Vec<_> = listed.iter().map(|c| c.name).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), listed.len(), "names are unique");
    for choice in &listed {
        assert!(!choice.description.is_empty());
        assert!(
            choice.options.contains(&choice.value),
            "{}: default is an option",
            choice.name
        );
        for option in &choice.options {
            let mut s = base.clone();
            s.set(choice.name, option).unwrap();
            let now = s.describe();
            let got = now.iter().find(|c| c.name == choice.name).unwrap();
            assert_eq!(&got.value, option);
            // Setting back restores the default.
            s.set(choice.name, &choice.value).unwrap();
            assert_eq!(s, base);
        }
    }
}

#[test]
fn defaults_follow_the_h100_measurements() {
    // H100 80GB HBM3, driver 580.159.04 (reports/probe/ and the clauses).
    let s = Semantics::default();
    assert_eq!(s.reopen, Reopen::Refcount);
    assert_eq!(s.open_flags, OpenFlags::LazyBit);
    assert_eq!(
        s.second_context,
        ExportRule::Refuse(ErrorKind::InvalidHandle)
    );
    assert_eq!(s.memcpy_bounds, MemcpyBounds::Allocation);
    assert_eq!(s.dead_handle_error, ErrorKind::InvalidHandle);
    assert_eq!(s.freed_export, FreedExport::Refused);
    assert_eq!(s.open_address, OpenAddress::AllocationBase);
    assert_eq!(s.va_reuse, VaReuse::TopDown);
    assert_eq!(s.get_null_out, GetNullOut::CrashInRuntime);
    assert_eq!(s.open_in_exporter, ErrorKind::InvalidContext);
    assert_eq!(
        (
            s.zero_handle_error,
            s.garbage_handle_error,
            s.close_unopened
        ),
        (
            ErrorKind::InvalidValue,
            ErrorKind::InvalidValue,
            ErrorKind::InvalidValue
        )
    );
    assert_eq!(
        s.free_of_ipc_pointer,
        FreeOfIpcPointer::Error(ErrorKind::InvalidValue)
    );
    for rule in [s.ipc_managed, s.ipc_pinned_host, s.ipc_pool] {
        assert_eq!(rule, ExportRule::Refuse(ErrorKind::InvalidValue));
    }
}

#[test]
fn set_changes_the_field() {
    let mut s = Semantics::default();
    s.set("reopen", "error").unwrap();
    s.set("suballocation", "off").unwrap();
    s.set("open_address", "block-base").unwrap();
    s.set("dead_handle_error", "CUDA_ERROR_INVALID_HANDLE")
        .unwrap();
    s.set("zero_handle_error", "cudaErrorInvalidResourceHandle")
        .unwrap();
    assert_eq!(s.reopen, Reopen::Error);
    assert_eq!(s.suballocation, Switch::Off);
    assert_eq!(s.open_address, OpenAddress::BlockBase);
    assert_eq!(s.dead_handle_error, ErrorKind::InvalidHandle);
    assert_eq!(s.zero_handle_error, ErrorKind::InvalidHandle);
    s.set("second_context", "allow").unwrap();
    s.set("freed_export", "opens-while-exporter-lives").unwrap();
    s.set("open_flags", "lazy-only").unwrap();
    s.set("va_reuse", "never").unwrap();
    s.set("get_null_out", "invalid-value").unwrap();
    assert_eq!(s.second_context, ExportRule::Allow);
    assert_eq!(s.freed_export, FreedExport::Opens);
    assert_eq!(s.open_flags, OpenFlags::LazyOnly);
    assert_eq!(s.va_reuse, VaReuse::Never);
    assert_eq!(s.get_null_out, GetNullOut::InvalidValue);
    s.set("second_context", "cudaErrorInvalidResourceHandle")
        .unwrap();
    assert_eq!(
        s.second_context,
        ExportRule::Refuse(ErrorKind::InvalidHandle)
    );
}

#[rstest]
#[case::unknown_name("no_such_choice", "on", "unknown semantic")]
#[case::bad_keyword("reopen", "sometimes", "refcount, new-mapping, error")]
#[case::exact_open_address_is_gone("open_address", "exact", "allocation-base, block-base")]
#[case::bad_error_name("dead_handle_error", "cudaErrorBogus", "MapFailed")]
#[case::keyword_for_error_kind("zero_handle_error", "allow", "InvalidValue")]
fn set_refuses_with_the_allowed_list(
    #[case] name: &str,
    #[case] value: &str,
    #[case] mentions: &str,
) {
    let mut s = Semantics::default();
    let e = s.set(name, value).unwrap_err();
    assert!(e.contains(mentions), "{e}");
    assert_eq!(s, Semantics::default(), "a refused set changes nothing");
}

#[test]
fn apply_takes_name_value_lists() {
    let mut s = Semantics::default();
    s.apply("reopen=error, suballocation=off  ipc_pool=allow")
        .unwrap();
    assert_eq!(s.reopen, Reopen::Error);
    assert_eq!(s.suballocation, Switch::Off);
    assert!(s.apply("reopen").unwrap_err().contains("name=value"));
    assert!(s.apply("reopen=maybe").is_err());
    s.apply("").unwrap();
}

#[test]
fn backend_info_reports_the_semantics_in_force() {
    let mut semantics = Semantics::default();
    semantics.set("import_range", "block").unwrap();
    let b = SimBackend::new(SimConfig {
        devices: 4,
        semantics,
        ..SimConfig::default()
    });
    assert_eq!(b.name(), "sim");
    assert!(b.has_hazard_log());
    let info = b.info();
    assert_eq!(info.backend, "sim");
    assert_eq!(info.device_count, Some(4));
    assert_eq!(
        info.semantics.get("import_range").map(String::as_str),
        Some("block")
    );
    assert_eq!(
        info.semantics.get("reopen").map(String::as_str),
        Some("refcount")
    );
    let cuda_entries = info.semantics.keys().filter(|k| !k.starts_with("hip."));
    assert_eq!(cuda_entries.count(), Semantics::default().describe().len());
    // The hip dialect's choices appear as `hip.NAME` where they differ.
    assert_eq!(
        info.semantics.get("hip.open_flags").map(String::as_str),
        Some("lazy-only")
    );
    assert_eq!(
        info.semantics.get("hip.import_range").map(String::as_str),
        Some("allocation")
    );
    assert_eq!(info.semantics.get("hip.reopen"), None);
    assert_eq!(b.config().devices, 4);
    assert_eq!(SimBackend::default().config(), &SimConfig::default());
}

/// A scenario's `semantics` line: the same run gives what that choice gives,
/// on top of the dialect's profile, and leaves the backend's config alone.
#[test]
fn a_scenario_semantics_line_overrides_the_configured_choice() {
    use ipc_harness::scenario::{execute, parse, ExecOptions};
    use ipc_harness::{Dialect, Status};
    let text = |semantics: &str| {
        format!(
            "devices 1\n{semantics}\nprocess owner device=0\nprocess peer device=0\n\
             owner: a = malloc 2MiB\nowner: h = ipc_get a\nowner: send h -> peer\n\
             peer: p = ipc_open h\npeer: q = ipc_open h => AlreadyMapped\n"
        )
    };
    let sim = SimBackend::default();
    for dialect in [Dialect::Runtime, Dialect::Driver, Dialect::Hip] {
        let opts = ExecOptions {
            dialect,
            ..ExecOptions::default()
        };
        let chosen = parse(&text("semantics reopen=error"), "chosen.ipc".as_ref()).unwrap();
        let run = execute(&chosen, &sim, &opts);
        assert_eq!(
            run.verdict.status,
            Status::Pass,
            "{dialect:?}: {}",
            run.verdict.message
        );
        // Without the line the default (refcount) holds, so the step fails.
        let plain = parse(&text(""), "plain.ipc".as_ref()).unwrap();
        assert_eq!(execute(&plain, &sim, &opts).verdict.status, Status::Fail);
    }
    assert_eq!(sim.config().semantics, Semantics::default());
}

#[rstest]
#[case::unknown_name("semantics reopn=error", "unknown semantic 'reopn' (known: ")]
#[case::unknown_value(
    "semantics reopen=sometimes",
    "semantic 'reopen' has no value 'sometimes' (allowed: refcount, new-mapping, error)"
)]
fn a_bad_scenario_semantics_line_is_broken_with_the_valid_choices(
    #[case] line: &str,
    #[case] message: &str,
) {
    use ipc_harness::scenario::{execute, parse, ExecOptions};
    use ipc_harness::Status;
    let text = format!("devices 1\n{line}\nprocess a device=0\na: device_count\n");
    let scenario = parse(&text, "bad.ipc".as_ref()).unwrap();
    let run = execute(&scenario, &SimBackend::default(), &ExecOptions::default());
    assert_eq!(run.verdict.status, Status::Broken);
    assert!(
        run.verdict.message.contains(message),
        "{}",
        run.verdict.message
    );
    assert!(run
        .verdict
        .message
        .contains(&format!("in the scenario's '{line}'")));
}

#[test]
fn the_default_config_runs_the_default_semantics() {
    assert_eq!(SimConfig::default().semantics, Semantics::default());
}
