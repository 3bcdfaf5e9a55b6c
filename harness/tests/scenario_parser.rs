//! The scenario parser: good snippets, the errors that need more than a
//! message to check, and a no-panic sweep over random and mutated inputs.
//! Plain malformed inputs and their messages are files in `parse-errors/`.

use ipc_harness::scenario::{
    parse, parse_file, Expect, Expectation, HazardCheck, Op, ParseError, PatternItem, Ref, Scenario,
};
use ipc_harness::{Dialect, ErrorKind, HazardKind, Topology};
use rstest::rstest;
use std::path::Path;

/// Seven lines every snippet below is appended to (so snippets start at line 8).
const PRELUDE: &str = "\
devices 2
process a device=0
process b device=1
a: p = malloc 2MiB
a: h = ipc_get p
a: send h -> b
a: c = primary_ctx 0
";

fn parse_str(src: &str) -> Result<Scenario, ParseError> {
    parse(src, Path::new("s.ipc"))
}

fn ok(src: &str) -> Scenario {
    parse_str(src).unwrap_or_else(|e| panic!("should parse: {e}\n{src}"))
}

#[rstest]
#[case::device_count("a: n = device_count => value 2", "n = device_count")]
#[case::attr("a: attr 1 unified_addressing => value 1", "attr 1 unified_addressing")]
#[case::attr_vmm(
    "a: attr 0 virtual_memory_management_supported",
    "attr 0 virtual_memory_management_supported"
)]
#[case::set_device("a: set_device 1", "set_device 1")]
#[case::primary_ctx("b: d = primary_ctx 1 => ok", "d = primary_ctx 1")]
#[case::ctx_create("a: ctx_create 0 => ok", "ctx_create 0")]
#[case::ctx_set("a: ctx_set c", "ctx_set c")]
#[case::ctx_set_null("a: ctx_set null", "ctx_set null")]
#[case::ctx_current("a: c2 = ctx_current => == c", "c2 = ctx_current")]
#[case::ctx_current_null("a: ctx_current => == null", "ctx_current")]
#[case::ctx_destroy("a: ctx_destroy c => runtime: any; driver: ok", "ctx_destroy c")]
#[case::malloc_hex("a: m = malloc 0x1_000", "m = malloc 4KiB")]
#[case::malloc_decimal_sep("a: m = malloc 1_000", "m = malloc 1000")]
#[case::malloc_managed("a: m = malloc_managed 1KiB", "m = malloc_managed 1KiB")]
#[case::malloc_host("a: m = malloc_host 0x10MiB", "m = malloc_host 16MiB")]
#[case::malloc_async("a: m = malloc_async 3GiB", "m = malloc_async 3GiB")]
#[case::free("a: free p", "free p")]
#[case::free_null("a: free null => ok", "free null")]
#[case::free_host("a: free_host p => error", "free_host p")]
#[case::free_async("a: free_async p => InvalidValue", "free_async p")]
#[case::offset("a: q = offset p 4096 => != p", "q = offset p 4KiB")]
#[case::fill("a: fill p ab", "fill p 0xab")]
#[case::fill_at_len("a: fill p 0x0F at=16 len=32", "fill p 0x0f at=16 len=32")]
#[case::fill_at_only("a: fill p 00 at=2MiB", "fill p 0x00 at=2MiB")]
#[case::fill_null_len("a: fill null 01 len=4 => error", "fill null 0x01 len=4")]
#[case::write("a: write p 0 ab*16 00*48", "write p 0 ab*16 00*48")]
#[case::write_merges_runs("a: write p 8 0xab ab 01", "write p 8 ab*2 01")]
#[case::read("a: read p 0 64 => bytes ab*16 00*48", "read p 0 64")]
#[case::device_read("a: device_read p 16 4 => ok, bytes 01 02 03 04", "device_read p 16 4")]
#[case::address_range(
    "a: r = address_range p => base == p, size 2MiB, == p",
    "r = address_range p"
)]
#[case::address_range_ne("a: address_range p => base != null", "address_range p")]
#[case::pointer_attr("a: pointer_attr p => type device, device 0", "pointer_attr p")]
#[case::pointer_attr_null("a: pointer_attr null => type unregistered", "pointer_attr null")]
#[case::ipc_get_out_null("a: ipc_get null out=null => InvalidValue", "ipc_get null out=null")]
#[case::ipc_open_opts(
    "b: q = ipc_open h out=null flags=0 => error",
    "q = ipc_open h flags=0 out=null"
)]
#[case::ipc_open_lazy("b: q = ipc_open h flags=lazy => ok", "q = ipc_open h flags=lazy")]
#[case::ipc_open_flags_hex("b: q = ipc_open h flags=0x3", "q = ipc_open h flags=3")]
#[case::ipc_close(
    "b: ipc_close null => runtime: cudaErrorInvalidValue; driver: CUDA_ERROR_INVALID_VALUE",
    "ipc_close null"
)]
#[case::handle_zero("a: z = handle_zero => != h", "z = handle_zero")]
#[case::handle_random("b: r = handle_random", "r = handle_random")]
#[case::handle_flip("b: f = handle_flip h 63 => != h", "f = handle_flip h 63")]
#[case::send_no_spaces("a: send h->b", "send h -> b")]
#[case::exit("a: exit", "exit")]
#[case::any("a: device_count => any", "device_count")]
#[case::negative_value("a: attr 0 ipc_event_support => value -1", "attr 0 ipc_event_support")]
#[case::driver_arm_only("b: device_count => driver: error", "device_count")]
#[case::arms_with_lists("a: free p => driver: InvalidValue; runtime: ok, any", "free p")]
#[case::error_kind_name("a: free p => PeerAccessUnsupported", "free p")]
#[case::comment("a: free p # the rest is a comment => oK", "free p")]
#[case::tabs_and_spaces("\ta:\tfree   p\t=>\tok  ", "free p")]
#[case::can_access_peer("a: can_access_peer 0 1 => value 1", "can_access_peer 0 1")]
#[case::enable_peer(
    "a: enable_peer 1 => hip: hipErrorPeerAccessAlreadyEnabled",
    "enable_peer 1"
)]
#[case::hip_arm(
    "a: free p => runtime: ok; hip: hipErrorInvalidResourceHandle",
    "free p"
)]
fn good_steps(#[case] line: &str, #[case] canonical: &str) {
    let s = ok(&format!("{PRELUDE}{line}\n"));
    let last = s.steps.last().unwrap_or_else(|| panic!("no steps"));
    assert_eq!(last.line, 8);
    assert_eq!(last.text(), canonical);
}

#[rstest]
#[case::hazard(
    "expect hazard free-while-mapped",
    HazardCheck::Hazard(HazardKind::FreeWhileMapped)
)]
#[case::leaked(
    "expect hazard mapping-leaked-at-exit",
    HazardCheck::Hazard(HazardKind::MappingLeakedAtExit)
)]
#[case::none("expect no-hazards", HazardCheck::NoHazards)]
fn good_hazard_lines(#[case] line: &str, #[case] check: HazardCheck) {
    let s = ok(&format!("{PRELUDE}{line}\na: free p\n"));
    assert_eq!(s.hazard_expectations.len(), 1);
    assert_eq!(s.hazard_expectations[0].line, 8);
    assert_eq!(s.hazard_expectations[0].check, check);
}

#[test]
fn expectation_forms_are_modelled() {
    let s = ok(&format!(
        "{PRELUDE}\
b: q = ipc_open h => ok, == p, != null
b: read q 0 4 => bytes ab*2 00 01
b: ipc_close q => runtime: ok; driver: CUDA_ERROR_INVALID_VALUE
b: ipc_close q
"
    ));
    let steps = &s.steps;
    let Expect::List(l) = &steps[4].expect else {
        panic!("{:?}", steps[4].expect)
    };
    assert_eq!(
        &l.items[..],
        [
            Expectation::Ok,
            Expectation::Eq(Ref::Name("p".into())),
            Expectation::Ne(Ref::Null)
        ]
    );
    assert_eq!(l.text, "ok, == p, != null");
    let Expect::List(l) = &steps[5].expect else {
        panic!()
    };
    match &l.items[0] {
        Expectation::Bytes(p) => assert_eq!(
            p.items,
            [
                PatternItem::Run(0xab, 2),
                PatternItem::Run(0, 1),
                PatternItem::Run(1, 1)
            ]
        ),
        other => panic!("{other:?}"),
    }
    let Expect::ByDialect {
        runtime, driver, ..
    } = &steps[6].expect
    else {
        panic!()
    };
    assert_eq!(
        runtime.as_ref().map(|l| l.items.to_vec()),
        Some(vec![Expectation::Ok])
    );
    assert_eq!(
        driver.as_ref().map(|l| l.items.to_vec()),
        Some(vec![Expectation::Error {
            kind: ErrorKind::InvalidValue,
            name: "CUDA_ERROR_INVALID_VALUE".into()
        }])
    );
    assert_eq!(steps[7].expect, Expect::Default);
    assert!(matches!(steps[4].op, Op::IpcOpen { flags: 1, .. }));
}

#[test]
fn fill_length_defaults_to_the_malloc_size() {
    let s = ok(&format!(
        "{PRELUDE}a: fill p ab\na: fill p ab at=1MiB\na: fill p ab len=7\n"
    ));
    let lens: Vec<u64> = s
        .steps
        .iter()
        .filter_map(|st| match st.op {
            Op::Fill { resolved_len, .. } => Some(resolved_len),
            _ => None,
        })
        .collect();
    assert_eq!(lens, [2 << 20, 1 << 20, 7]);
}

#[test]
fn metadata_header_spans_lines() {
    let s = ok("\
# id: mem.open.refcount
# title: Re-opening a handle returns the same pointer
# Note: an ordinary comment (upper-case key) is not metadata
#kind:specified
# quote: If the memory handle has already been opened by the current context,
# quote: the reference count on the handle is incremented by 1.
# not metadata at all

devices 1
# late: comments after the first statement are not metadata
process a device=0
");
    assert_eq!(s.meta.get("id").as_deref(), Some("mem.open.refcount"));
    assert_eq!(s.meta.get("kind").as_deref(), Some("specified"));
    assert_eq!(
        s.meta.get("quote").as_deref(),
        Some(
            "If the memory handle has already been opened by the current context, \
             the reference count on the handle is incremented by 1."
        )
    );
    assert_eq!(s.meta.get("late"), None);
    assert_eq!(s.meta.get("note"), None);
    assert_eq!(s.meta.entries.len(), 5);
    assert_eq!(s.devices, 1);
    assert_eq!(s.processes.len(), 1);
    assert!(s.steps.is_empty());
}

#[test]
fn a_byte_order_mark_and_crlf_line_ends_are_accepted() {
    let s = ok("\u{feff}# id: x.y\r\ndevices 1\r\nprocess a device=0\r\na: free null => error\r\n");
    assert_eq!(s.meta.get("id").as_deref(), Some("x.y"));
    assert_eq!(s.steps[0].line, 4);
}

#[test]
fn topology_is_declared_before_processes() {
    let s = ok("devices 10\ntopology peers=all peer_budget=8\nprocess a device=0\n");
    assert_eq!(
        s.topology,
        Some(Topology {
            all_peers: true,
            peer_pairs: vec![],
            peer_budget: Some(8)
        })
    );
    let s = ok("devices 4\ntopology peers=0:1,3:2 peer_budget=1\nprocess a device=0\n");
    let t = s.topology.unwrap();
    assert_eq!(
        (t.all_peers, t.peer_pairs.clone()),
        (false, vec![(0, 1), (2, 3)])
    );
    assert!(t.can_peer(1, 0) && t.can_peer(2, 3) && !t.can_peer(1, 2) && !t.can_peer(0, 0));
    assert_eq!(t.describe(), "topology peers=0:1,2:3 peer_budget=1");
    let s = ok("devices 2\ntopology peers=none\nprocess a device=0\n");
    assert_eq!(
        s.topology.map(|t| (t.all_peers, t.peer_budget)),
        Some((false, None))
    );
    assert_eq!(ok("devices 1\nprocess a device=0\n").topology, None);
}

#[test]
fn semantics_are_declared_before_processes_in_file_order() {
    let s = ok(
        "devices 1\nsemantics reopen=new-mapping, close_unopened=NotMapped\nprocess a device=0\n",
    );
    assert_eq!(
        s.semantics,
        vec![
            ("reopen".to_string(), "new-mapping".to_string()),
            ("close_unopened".to_string(), "NotMapped".to_string()),
        ]
    );
    assert!(ok("devices 1\nprocess a device=0\n").semantics.is_empty());
}

#[test]
fn a_missing_hip_arm_takes_the_runtime_arm() {
    let s = ok(&format!(
        "{PRELUDE}a: free p => runtime: InvalidValue; driver: ok\na: free p => driver: ok\n"
    ));
    let n = s.steps.len();
    let texts = |i: usize, d: Dialect| s.steps[i].expect.for_dialect(d).text;
    assert_eq!(texts(n - 2, Dialect::Hip), "InvalidValue");
    assert_eq!(texts(n - 1, Dialect::Hip), "any");
    let s = ok(&format!("{PRELUDE}a: free p => runtime: ok; hip: error\n"));
    let last = s
        .steps
        .last()
        .map(|st| st.expect.for_dialect(Dialect::Hip).text);
    assert_eq!(last.as_deref(), Some("error"));
}

#[test]
fn processes_keep_device_and_visible_list() {
    let s = ok("devices 3\nprocess x device=1 visible=2,0\nprocess y visible=1 device=0\n");
    assert_eq!(s.processes[0].name, "x");
    assert_eq!(s.processes[0].device, 1);
    assert_eq!(s.processes[0].visible_devices, Some(vec![2, 0]));
    assert_eq!(s.processes[1].visible_devices, Some(vec![1]));
    assert_eq!(s.path, Path::new("s.ipc"));
}

#[test]
fn the_example_from_the_docs_parses() {
    let s = ok("\
# id: mem.open.refcount
devices 1
process owner device=0
process peer  device=0

owner: a = malloc 2MiB
owner: fill a 0xab
owner: h = ipc_get a
owner: send h -> peer
peer:  p = ipc_open h                  => ok
peer:  q = ipc_open h                  => ok, == p
peer:  ipc_close p
peer:  read q 0 16                     => bytes ab*16
peer:  ipc_close q                     => ok
");
    assert_eq!(s.steps.len(), 9);
    assert_eq!(s.steps[8].line, 14);
    assert_eq!(s.steps[5].process, 1);
}

/// `(source, line, column, message fragment)`.
fn check_error(src: &str, line: usize, column: usize, fragment: &str) {
    match parse_str(src) {
        Ok(_) => panic!("should not parse:\n{src}"),
        Err(e) => {
            assert_eq!(
                (e.line, e.column),
                (line, column),
                "position of {e}\n---\n{src}"
            );
            assert!(e.message.contains(fragment), "message of {e}\n---\n{src}");
            assert_eq!(e.file, "s.ipc");
            assert!(e
                .to_string()
                .starts_with(&format!("s.ipc:{line}:{column}: ")));
        }
    }
}

#[test]
fn parse_file_reads_files_and_reports_io_errors() {
    let dir = std::env::temp_dir().join(format!("ipc-scenario-parser-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let file = dir.join("one.ipc");
    std::fs::write(&file, "devices 1\nprocess a device=0\na: device_count\n")
        .unwrap_or_else(|e| panic!("{e}"));
    let s = parse_file(&file).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.path, file);
    assert_eq!(s.steps.len(), 1);
    let missing = parse_file(&dir.join("missing.ipc"));
    assert!(matches!(missing, Err(ParseError { line: 0, .. })));
    let _ = std::fs::remove_dir_all(&dir);
}

/// xorshift64*: a deterministic generator for the no-panic sweep.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const CORPUS: &str = "\
# id: fuzz.base
# quote: a quote
devices 2
process owner device=0
process peer device=1 visible=1,0
owner: a = malloc 2MiB
owner: fill a 0xab at=16 len=32
owner: write a 0 ab*16 00*48
owner: h = ipc_get a
owner: send h -> peer
peer: p = ipc_open h flags=lazy => ok
peer: q = ipc_open h => runtime: ok, == p; driver: CUDA_ERROR_INVALID_VALUE
peer: r = address_range q => base == q, size 2MiB
peer: pointer_attr q => type device, device 0
peer: read q 0 16 => bytes ab*16
peer: g = handle_flip h 3 => != h
peer: ipc_close p
owner: exit
expect hazard free-while-mapped
expect no-hazards
";

const TOKENS: &[&str] = &[
    "devices",
    "process",
    "expect",
    "hazard",
    "no-hazards",
    "=>",
    "==",
    "!=",
    "=",
    ":",
    ",",
    ";",
    "->",
    "*",
    "null",
    "ok",
    "any",
    "error",
    "0x",
    "0xab",
    "ab",
    "2MiB",
    "99999999999999999999",
    "-1",
    "-",
    "#",
    "flags=",
    "out=null",
    "len=",
    "at=",
    "runtime:",
    "driver:",
    "malloc",
    "fill",
    "ipc_open",
    "send",
    "exit",
    "a",
    "h",
    "p",
    "\t",
    " ",
    "\n",
    "é",
    "\u{0}",
    "GiB",
    "_",
];

fn mutate(rng: &mut Rng, base: &str) -> String {
    let mut chars: Vec<char> = base.chars().collect();
    for _ in 0..=rng.below(6) {
        let pos = rng.below(chars.len() + 1);
        match rng.below(5) {
            0 if !chars.is_empty() => {
                let n = rng.below(8).min(chars.len() - pos.min(chars.len()));
                chars.drain(pos.min(chars.len())..pos.min(chars.len()) + n);
            }
            1 => {
                let t = TOKENS[rng.below(TOKENS.len())];
                for (i, c) in t.chars().enumerate() {
                    chars.insert(pos + i, c);
                }
            }
            2 => chars.insert(pos, char::from(rng.below(128) as u8)),
            3 if !chars.is_empty() => {
                let i = rng.below(chars.len());
                chars[i] = char::from_u32(rng.next() as u32 % 0x3000).unwrap_or('x');
            }
            _ => {
                let lines: Vec<&str> = base.lines().collect();
                let l = lines[rng.below(lines.len())];
                for (i, c) in format!("{l}\n").chars().enumerate() {
                    chars.insert(pos.min(chars.len()) + i, c);
                }
            }
        }
    }
    chars.into_iter().collect()
}

#[test]
fn never_panics_on_random_or_mutated_input() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut oks = 0;
    let mut errs = 0;
    for i in 0..6000 {
        let src = match i % 3 {
            0 => {
                let bytes: Vec<u8> = (0..rng.below(200)).map(|_| rng.next() as u8).collect();
                String::from_utf8_lossy(&bytes).into_owned()
            }
            1 => (0..rng.below(12))
                .map(|_| {
                    (0..rng.below(10))
                        .map(|_| TOKENS[rng.below(TOKENS.len())])
                        .collect::<Vec<_>>()
                        .join(if rng.below(2) == 0 { " " } else { "" })
                })
                .collect::<Vec<_>>()
                .join("\n"),
            _ => mutate(&mut rng, CORPUS),
        };
        match parse_str(&src) {
            Ok(_) => oks += 1,
            Err(e) => {
                errs += 1;
                assert!(e.line >= 1, "{e} for {src:?}");
                assert!(e.column >= 1, "{e} for {src:?}");
            }
        }
    }
    assert_eq!(ok(CORPUS).steps.len(), 13);
    assert!(oks > 0 && errs > 0, "ok {oks}, err {errs}");
}

// --- VMM ---

/// Six lines: a VMM handle `m` and descriptor `fd` of `a`, a reservation `va`.
const VMM_PRELUDE: &str = "devices 1\nprocess a device=0\nprocess b device=0\n\
a: m = vmm_create 2MiB types=posix_fd\na: fd = vmm_export m posix_fd\na: va = vmm_reserve 2MiB\n";

#[rstest]
#[case::granularity(
    "a: g = vmm_granularity 0 recommended => value 2MiB",
    "g = vmm_granularity 0 recommended types=none"
)]
#[case::granularity_types(
    "a: vmm_granularity 0 minimum types=fabric",
    "vmm_granularity 0 minimum types=fabric"
)]
#[case::create_defaults("a: n = vmm_create 4MiB", "n = vmm_create 4MiB types=none device=0")]
#[case::create_bits(
    "a: n = vmm_create 2MiB device=0 types=9 => NotPermitted",
    "n = vmm_create 2MiB types=9 device=0"
)]
#[case::export_compare(
    "a: f2 = vmm_export m posix_fd => ok, != fd",
    "f2 = vmm_export m posix_fd"
)]
#[case::import_in_exporter("a: s = vmm_import fd => != m", "s = vmm_import fd")]
#[case::map("a: vmm_map va 2MiB m", "vmm_map va 2MiB m offset=0")]
#[case::map_offset(
    "a: vmm_map va 2MiB m offset=2MiB => NotSupported",
    "vmm_map va 2MiB m offset=2MiB"
)]
#[case::set_access("a: vmm_set_access va 2MiB rw", "vmm_set_access va 2MiB rw device=0")]
#[case::set_access_read(
    "a: vmm_set_access va 0x200000 read device=0",
    "vmm_set_access va 2MiB read device=0"
)]
#[case::unmap("a: vmm_unmap va 2MiB => error", "vmm_unmap va 2MiB")]
#[case::address_free("a: vmm_address_free va 2MiB", "vmm_address_free va 2MiB")]
#[case::release("a: vmm_release m => InvalidValue", "vmm_release m")]
#[case::fd_close("a: fd_close fd", "fd_close fd")]
#[case::fd_null("a: n = fd_null_device", "n = fd_null_device")]
#[case::fd_number_negative("a: n = fd_number -1", "n = fd_number -1")]
#[case::send_fd("a: pfd = send_fd fd->b => ok", "pfd = send_fd fd -> b")]
fn good_vmm_steps(#[case] line: &str, #[case] canonical: &str) {
    let s = ok(&format!("{VMM_PRELUDE}{line}\n"));
    let last = s.steps.last().unwrap_or_else(|| panic!("no steps"));
    assert_eq!(last.line, 7);
    assert_eq!(last.text(), canonical);
}

#[test]
fn a_passed_descriptor_belongs_to_the_receiver() {
    let s = ok(&format!(
        "{VMM_PRELUDE}a: pfd = send_fd fd -> b\nb: m2 = vmm_import pfd\nb: fd_close pfd\n"
    ));
    assert_eq!(s.steps.len(), 6);
    check_error(
        &format!("{VMM_PRELUDE}a: pfd = send_fd fd -> b\na: fd_close pfd\n"),
        8,
        13,
        "process 'a' does not hold a file descriptor 'pfd' (it belongs to 'b'; pass it with send_fd first)",
    );
}
