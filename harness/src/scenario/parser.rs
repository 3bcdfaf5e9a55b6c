//! The hand-written, line-oriented parser and its validation (one pass: every
//! rule of the language only looks backwards in the file).

use super::ast::{
    fmt_size, BytePattern, Expect, ExpectList, Expectation, HazardCheck, HazardExpectation, Op,
    ProcIndex, Ref, Step, ValueType, NULL_CONTEXT, NULL_EVENT, PER_THREAD_STREAM,
};
use super::ast::{KernelContent, PatternItem, MAX_KERNEL_WORD};
use super::lexer::{strip_comment, tokenize, Token};
use super::model::{Metadata, ParseError, Scenario};
use crate::calls::CallKind;
use crate::driver::PointerAttribute;
use crate::driver::{
    event_flags, stream_flags, DeviceAttribute, FreeKind, GranularityKind, HandleTypes, MemKind,
    MemoryType, OutArg, ShareableHandleType, VmmAccess, IPC_HANDLE_SIZE,
    IPC_MEM_LAZY_ENABLE_PEER_ACCESS,
};
use crate::errors::ErrorKind;
use crate::machine::{HazardKind, PidNamespace, ProcessSpec, Topology};
// Keys are names and driver values chosen by the scenario: no need for
// SipHash's flood resistance.
use rustc_hash::FxHashMap as HashMap;
use std::path::Path;

/// Longest pattern `write` accepts (it is expanded in memory).
pub const MAX_WRITE_BYTES: u64 = 64 << 20;

type PResult<T> = Result<T, ParseError>;

/// What validation knows about a binding.
struct Binding {
    ty: ValueType,
    line: usize,
    process: ProcIndex,
    /// The size given to the `malloc*` that bound it.
    alloc_size: Option<u64>,
    /// Processes that may use it (handles: the maker and every `send` target).
    holders: Vec<ProcIndex>,
    /// Events: the line of the `event_destroy` that released it.
    destroyed: Option<usize>,
}

struct Parser<'f> {
    file: &'f str,
    meta: Metadata,
    seen_statement: bool,
    devices: Option<(u32, usize)>,
    /// `topology ...` and its line.
    topology: Option<(Topology, usize)>,
    /// `semantics ...`: the `(name, value)` settings and the line.
    semantics: Option<(Vec<(String, String)>, usize)>,
    processes: Vec<ProcessSpec>,
    process_lines: Vec<usize>,
    exited: Vec<Option<usize>>,
    first_step_line: Option<usize>,
    bindings: HashMap<String, Binding>,
    /// Each list binding's element count (its `repeat` step's count).
    list_counts: HashMap<String, u32>,
    steps: Vec<Step>,
    hazards: Vec<HazardExpectation>,
}

/// Tokens of one line with a position; builds errors with line and column.
struct Line<'a> {
    file: &'a str,
    line: usize,
    /// The line without its comment (the tokens are slices of it).
    code: &'a str,
    toks: &'a [Token<'a>],
    pos: usize,
}

impl<'a> Line<'a> {
    fn err(&self, col: usize, message: impl Into<String>) -> ParseError {
        ParseError {
            file: self.file.to_string(),
            line: self.line,
            column: col,
            message: message.into(),
        }
    }

    /// Column of the next token, or just past the last one at end of line.
    fn col(&self) -> usize {
        match self.toks.get(self.pos) {
            Some(t) => t.col,
            None => self.toks.last().map_or(1, |t| t.end + 1),
        }
    }

    fn peek(&self) -> Option<&Token<'a>> {
        self.toks.get(self.pos)
    }

    fn peek_at(&self, n: usize) -> Option<&Token<'a>> {
        self.toks.get(self.pos + n)
    }

    fn at_end(&self) -> bool {
        self.pos >= self.toks.len()
    }

    fn found(&self) -> String {
        match self.peek() {
            Some(t) => format!("'{}'", t.text),
            None => "end of line".to_string(),
        }
    }

    fn expected(&self, what: &str) -> ParseError {
        self.err(
            self.col(),
            format!("expected {what}, found {}", self.found()),
        )
    }

    fn next_word(&mut self, what: &str) -> PResult<Token<'a>> {
        match self.peek() {
            Some(t) if t.is_word() => {
                let t = *t;
                self.pos += 1;
                Ok(t)
            }
            _ => Err(self.expected(what)),
        }
    }

    fn is_punct(&self, p: &str) -> bool {
        self.peek().is_some_and(|t| t.is_punct(p))
    }

    fn eat_punct(&mut self, p: &str) -> bool {
        let yes = self.is_punct(p);
        if yes {
            self.pos += 1;
        }
        yes
    }

    fn expect_punct(&mut self, p: &str, what: &str) -> PResult<()> {
        if self.eat_punct(p) {
            Ok(())
        } else {
            Err(self.expected(what))
        }
    }

    fn expect_end(&self, what: &str) -> PResult<()> {
        if self.at_end() {
            Ok(())
        } else {
            Err(self.expected(what))
        }
    }

    /// Source text from the start of token `from` to the end of token `to` (inclusive).
    fn text(&self, from: usize, to: usize) -> String {
        match (self.toks.get(from), self.toks.get(to)) {
            (Some(a), Some(b)) if a.bytes.0 <= b.bytes.1 => {
                self.code[a.bytes.0..b.bytes.1].to_string()
            }
            _ => String::new(),
        }
    }

    // --- value syntax ------------------------------------------------------

    fn name(&mut self, what: &str) -> PResult<Token<'a>> {
        let col = self.col();
        let t = self.next_word(what)?;
        if !is_name(t.text) {
            return Err(self.err(col, format!("expected {what}, found '{}'", t.text)));
        }
        Ok(t)
    }

    fn int(&mut self, what: &str) -> PResult<u64> {
        let col = self.col();
        match self.peek() {
            Some(t) if t.is_word() && t.text.starts_with(|c: char| c.is_ascii_digit()) => {
                let text = t.text;
                self.pos += 1;
                parse_int(text).map_err(|m| self.err(col, m))
            }
            _ => Err(self.expected(what)),
        }
    }

    fn u32(&mut self, what: &str) -> PResult<u32> {
        let col = self.col();
        let v = self.int(what)?;
        u32::try_from(v).map_err(|_| self.err(col, format!("{what} {v} is too large")))
    }

    fn signed(&mut self, what: &str) -> PResult<i64> {
        let col = self.col();
        let neg = self
            .peek()
            .is_some_and(|t| t.is_word() && t.text.starts_with('-'));
        if !neg {
            let v = self.int(what)?;
            return i64::try_from(v)
                .map_err(|_| self.err(col, format!("integer {v} is too large")));
        }
        let text = self.peek().map(|t| t.text).unwrap_or_default();
        self.pos += 1;
        let v = parse_int(&text[1..]).map_err(|m| self.err(col, m))?;
        if v > i64::MAX as u64 + 1 {
            return Err(self.err(col, format!("integer '{text}' is too small")));
        }
        Ok((v as i64).wrapping_neg())
    }

    fn byte(&mut self) -> PResult<u8> {
        let col = self.col();
        let what = "a byte (two hex digits)";
        let t = self.next_word(what)?;
        parse_byte(t.text)
            .ok_or_else(|| self.err(col, format!("expected {what}, found '{}'", t.text)))
    }

    /// `BYTE`, `BYTE*COUNT`, `(BYTE ...)[*COUNT]` and `iota(BASE)*LEN`
    /// items up to `=>`, `,`, `;`, `|` (the next alternative) or the end
    /// of the line.
    fn pattern(&mut self) -> PResult<BytePattern> {
        let mut items: Vec<PatternItem> = Vec::new();
        let mut total: u64 = 0;
        let start_col = self.col();
        while let Some(t) = self.peek() {
            if t.is_punct("=>") || t.is_punct(",") || t.is_punct(";") || t.is_punct("|") {
                break;
            }
            let item = if t.is_punct("(") {
                let group = self.byte_group()?;
                PatternItem::Group(group, self.run_count(1)?)
            } else if t.text == "iota" {
                self.pos += 1;
                if !self.eat_punct("(") {
                    return Err(self.expected("'(' after 'iota' (iota(BASE)*LEN)"));
                }
                let base = self.byte()?;
                if !self.eat_punct(")") {
                    return Err(self.expected("')' after the iota base"));
                }
                if !matches!(self.peek(), Some(t) if t.is_punct("*")) {
                    return Err(self.expected("'*LEN' after iota(BASE)"));
                }
                PatternItem::Iota(base, self.run_count(1)?)
            } else {
                let b = self.byte()?;
                PatternItem::Run(b, self.run_count(1)?)
            };
            total = total
                .checked_add(item.len())
                .ok_or_else(|| self.err(start_col, "byte pattern is too long"))?;
            match (items.last_mut(), &item) {
                (Some(PatternItem::Run(lb, ln)), PatternItem::Run(b, n)) if lb == b => *ln += n,
                _ => items.push(item),
            }
        }
        if items.is_empty() {
            return Err(self.expected("a byte pattern"));
        }
        Ok(BytePattern { items })
    }

    /// `*COUNT` (at least 1) if present, else `default`.
    fn run_count(&mut self, default: u64) -> PResult<u64> {
        if !self.eat_punct("*") {
            return Ok(default);
        }
        let col = self.col();
        let n = self.int("a count after '*'")?;
        if n == 0 {
            return Err(self.err(col, "a run count must be at least 1"));
        }
        Ok(n)
    }

    /// `(BYTE BYTE ...)`: one or more bytes in parentheses.
    fn byte_group(&mut self) -> PResult<Vec<u8>> {
        let col = self.col();
        if !self.eat_punct("(") {
            return Err(self.expected("'(' and bytes, as in (01 02 03 04)"));
        }
        let mut group = Vec::new();
        while !self.eat_punct(")") {
            if self.peek().is_none() {
                return Err(self.expected("')' closing the byte group"));
            }
            group.push(self.byte()?);
        }
        if group.is_empty() {
            return Err(self.err(col, "a byte group needs at least one byte"));
        }
        Ok(group)
    }

    /// `kernel_fill`'s word: `(BYTE ...)` of 1 to 8 bytes, or one `BYTE`.
    fn kernel_word(&mut self) -> PResult<Vec<u8>> {
        if matches!(self.peek(), Some(t) if t.is_punct("(")) {
            let col = self.col();
            let word = self.byte_group()?;
            if word.len() > MAX_KERNEL_WORD {
                return Err(self.err(
                    col,
                    format!(
                        "a kernel_fill word has 1 to {MAX_KERNEL_WORD} bytes, found {}",
                        word.len()
                    ),
                ));
            }
            Ok(word)
        } else {
            Ok(vec![self.byte()?])
        }
    }
}

fn is_name(s: &str) -> bool {
    let s = s.strip_suffix(LIST_SUFFIX).unwrap_or(s);
    let mut cs = s.chars();
    cs.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && cs.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The suffix of a list binding (`e[]`): one element per iteration of the
/// `repeat` step that binds it.
pub(crate) const LIST_SUFFIX: &str = "[]";

/// The most iterations one `repeat` step may run.
pub const MAX_REPEAT: u32 = 1_000_000;

/// Decimal or `0x` hex, `_` separators, optional `KiB`/`MiB`/`GiB` suffix.
pub(crate) fn parse_int(text: &str) -> Result<u64, String> {
    let (digits, radix) = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(rest) => (rest, 16),
        None => (text, 10),
    };
    let split = digits
        .char_indices()
        .find(|&(_, c)| !(c.is_digit(radix) || c == '_'))
        .map_or(digits.len(), |(i, _)| i);
    let (num, suffix) = digits.split_at(split);
    let mult: u64 = match suffix {
        "" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        other => {
            return Err(format!(
                "bad size suffix '{other}' in '{text}' (expected KiB, MiB or GiB)"
            ))
        }
    };
    // Digits accumulate in place (no copy without the separators); `num`
    // holds only digits of `radix` and `_`.
    let mut value: Option<u64> = Some(0);
    let mut any_digit = false;
    for c in num.chars().filter(|&c| c != '_') {
        any_digit = true;
        let d = c.to_digit(radix).map(u64::from);
        value = value.and_then(|v| v.checked_mul(u64::from(radix))?.checked_add(d?));
    }
    if !any_digit {
        return Err(format!("bad integer '{text}'"));
    }
    value
        .and_then(|v| v.checked_mul(mult))
        .ok_or_else(|| format!("integer '{text}' is too large"))
}

/// Two hex digits, optionally `0x`-prefixed.
pub(crate) fn parse_byte(text: &str) -> Option<u8> {
    let hex = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))
        .unwrap_or(text);
    if hex.len() == 2 && hex.chars().all(|c| c.is_ascii_hexdigit()) {
        u8::from_str_radix(hex, 16).ok()
    } else {
        None
    }
}

/// Parse a metadata comment (`# key: value`); `None` for other comments.
fn metadata_line(line: &str) -> Option<(String, String)> {
    let rest = line.trim_start().strip_prefix('#')?.trim_start();
    let (key, value) = rest.split_once(':')?;
    let valid = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_lowercase() || c == '_' || c == '-');
    valid.then(|| (key.to_string(), value.trim().to_string()))
}

/// How an expectation talks about the result: which classes of values can be
/// compared with `==`.
fn comparable(result: ValueType, binding: ValueType) -> bool {
    let class = |t: ValueType| match t {
        ValueType::Range => ValueType::Ptr,
        t => t,
    };
    result != ValueType::Unit && class(result) == class(binding)
}

fn looks_like_error_name(word: &str) -> bool {
    word.starts_with(|c: char| c.is_ascii_uppercase())
        || word.starts_with("cudaError")
        || word.starts_with("CUDA_")
}

pub(crate) fn parse(source: &str, path: &Path) -> Result<Scenario, ParseError> {
    let file = path.display().to_string();
    let mut p = Parser {
        file: &file,
        meta: Metadata::default(),
        seen_statement: false,
        devices: None,
        topology: None,
        semantics: None,
        processes: Vec::new(),
        process_lines: Vec::new(),
        exited: Vec::new(),
        first_step_line: None,
        // Room for a generated program's names without regrowing.
        bindings: HashMap::with_capacity_and_hasher(32, Default::default()),
        list_counts: HashMap::default(),
        steps: Vec::new(),
        hazards: Vec::new(),
    };
    let source = source.strip_prefix('\u{feff}').unwrap_or(source);
    // The last line and its number, for an error at the end of the file.
    let mut last = (1, "");
    // One token buffer for every line.
    let mut toks = Vec::new();
    for (i, raw) in source.lines().enumerate() {
        let lineno = i + 1;
        last = (lineno, raw);
        p.line(raw, lineno, &mut toks)?;
    }
    // Bound reads keep their bytes until the run ends: bound their sum.
    let mut kept: u64 = 0;
    for step in &p.steps {
        if let (Some(_), Op::Read { len, .. } | Op::DeviceRead { len, .. }) = (&step.bind, &step.op)
        {
            kept = kept.saturating_add(*len);
            if kept > super::limits::MAX_BOUND_READ_BYTES {
                return Err(ParseError {
                    file,
                    line: step.line,
                    column: 1,
                    message: format!(
                        "the bound reads up to this line keep {kept} bytes, above the limit of 1GiB for a scenario"
                    ),
                });
            }
        }
    }
    let Some((devices, _)) = p.devices else {
        return Err(ParseError {
            file,
            line: last.0,
            column: last.1.chars().count() + 1,
            message: "expected 'devices N', found end of file".to_string(),
        });
    };
    Ok(Scenario {
        path: path.to_path_buf(),
        meta: p.meta,
        devices,
        topology: p.topology.map(|t| t.0),
        semantics: p.semantics.map(|s| s.0).unwrap_or_default(),
        processes: p.processes,
        steps: p.steps,
        hazard_expectations: p.hazards,
    })
}

impl<'f> Parser<'f> {
    fn line<'s>(&mut self, raw: &'s str, lineno: usize, toks: &mut Vec<Token<'s>>) -> PResult<()> {
        if !self.seen_statement {
            if let Some((k, v)) = metadata_line(raw) {
                self.meta.entries.push((k, v));
                return Ok(());
            }
        }
        let code = strip_comment(raw);
        tokenize(code, toks).map_err(|e| ParseError {
            file: self.file.to_string(),
            line: lineno,
            column: e.col,
            message: format!("unexpected character '{}'", e.ch.escape_default()),
        })?;
        if toks.is_empty() {
            return Ok(());
        }
        self.seen_statement = true;
        let mut l = Line {
            file: self.file,
            line: lineno,
            code,
            toks,
            pos: 0,
        };
        let first = l.toks[0];
        let is_step = first.is_word() && l.toks.get(1).is_some_and(|t| t.is_punct(":"));
        if self.devices.is_none() && !(first.is_word() && first.text == "devices") {
            return Err(l.expected("'devices N' first"));
        }
        if is_step {
            return self.step(&mut l);
        }
        match first.text {
            "devices" if first.is_word() => self.devices_decl(&mut l),
            "process" if first.is_word() => self.process_decl(&mut l),
            "topology" if first.is_word() => self.topology_decl(&mut l),
            "semantics" if first.is_word() => self.semantics_decl(&mut l),
            "expect" if first.is_word() => self.hazard_decl(&mut l),
            _ => {
                if self.processes.iter().any(|p| p.name == first.text) {
                    l.pos = 1;
                    return Err(l.expected(&format!("':' after process '{}'", first.text)));
                }
                Err(l.expected("'process', 'expect' or a step 'PROC: OP ...'"))
            }
        }
    }

    fn devices_decl(&mut self, l: &mut Line) -> PResult<()> {
        let col = l.col();
        l.pos += 1;
        if let Some((_, line)) = self.devices {
            return Err(l.err(
                col,
                format!("duplicate 'devices' declaration (first at line {line})"),
            ));
        }
        let ncol = l.col();
        let n = l.u32("a device count")?;
        if n == 0 {
            return Err(l.err(ncol, "a machine needs at least 1 device"));
        }
        if n > super::limits::MAX_DEVICES {
            return Err(l.err(
                ncol,
                format!(
                    "devices {n} is above the limit of {} devices",
                    super::limits::MAX_DEVICES
                ),
            ));
        }
        l.expect_end("end of line")?;
        self.devices = Some((n, l.line));
        Ok(())
    }

    /// `topology [peers=all|none|A:B,...] [peer_budget=N]`: after `devices`,
    /// before every `process`, at most once.
    fn topology_decl(&mut self, l: &mut Line) -> PResult<()> {
        l.pos += 1;
        if let Some((_, line)) = self.topology {
            return Err(l.err(
                1,
                format!("duplicate 'topology' declaration (first at line {line})"),
            ));
        }
        if !self.processes.is_empty() {
            return Err(l.err(1, "'topology' must come before the first 'process'"));
        }
        let what = "'peers=all', 'peers=none', 'peers=A:B,...' or 'peer_budget=N'";
        let devices = self.devices.map_or(0, |d| d.0);
        let mut topology = Topology {
            all_peers: true,
            peer_pairs: Vec::new(),
            peer_budget: None,
        };
        let (mut seen_peers, mut seen_budget) = (false, false);
        while !l.at_end() {
            let key = l.next_word(what)?;
            if !l.eat_punct("=") {
                l.pos -= 1;
                return Err(l.expected(what));
            }
            match key.text {
                "peers" if !seen_peers => {
                    seen_peers = true;
                    let keyword = l
                        .peek()
                        .is_some_and(|t| t.text.starts_with(|c: char| c.is_ascii_alphabetic()));
                    if keyword {
                        let v = l.next_word("'all', 'none' or device pairs")?;
                        topology.all_peers = match v.text {
                            "all" => true,
                            "none" => false,
                            _ => {
                                l.pos -= 1;
                                return Err(l.expected("'all', 'none' or device pairs 'A:B,...'"));
                            }
                        };
                    } else {
                        topology.all_peers = false;
                        loop {
                            let col = l.col();
                            let a = l.u32("a device number")?;
                            l.expect_punct(":", "':' between the two devices of a pair")?;
                            let b = l.u32("a device number")?;
                            if a >= devices || b >= devices || a == b {
                                return Err(l.err(
                                    col,
                                    format!(
                                        "peer pair {a}:{b} needs two different devices below {devices}"
                                    ),
                                ));
                            }
                            let pair = (a.min(b), a.max(b));
                            if topology.peer_pairs.contains(&pair) {
                                return Err(
                                    l.err(col, format!("peer pair {a}:{b} is listed twice"))
                                );
                            }
                            topology.peer_pairs.push(pair);
                            if !l.eat_punct(",") {
                                break;
                            }
                        }
                    }
                }
                "peer_budget" if !seen_budget => {
                    seen_budget = true;
                    let col = l.col();
                    let n = l.u32("a number of peer connections")?;
                    if n == 0 {
                        return Err(l.err(col, "a peer budget must be at least 1"));
                    }
                    topology.peer_budget = Some(n);
                }
                "peers" | "peer_budget" => {
                    return Err(l.err(key.col, format!("duplicate option '{}='", key.text)))
                }
                other => {
                    return Err(l.err(
                        key.col,
                        format!("unknown option '{other}' for 'topology' (expected {what})"),
                    ))
                }
            }
        }
        self.topology = Some((topology, l.line));
        Ok(())
    }

    /// `semantics NAME=VALUE[,NAME=VALUE...]`: after `devices`, before every
    /// `process`, at most once, each name once. The names and values are the
    /// simulator's (`ipc-conformance semantics`); the simulator checks them
    /// when it starts the machine, the harness only their form.
    fn semantics_decl(&mut self, l: &mut Line) -> PResult<()> {
        l.pos += 1;
        if let Some((_, line)) = self.semantics {
            return Err(l.err(
                1,
                format!("duplicate 'semantics' declaration (first at line {line})"),
            ));
        }
        if !self.processes.is_empty() {
            return Err(l.err(1, "'semantics' must come before the first 'process'"));
        }
        let mut settings: Vec<(String, String)> = Vec::new();
        loop {
            let name = l.next_word("a semantic choice 'NAME=VALUE'")?;
            if settings.iter().any(|(n, _)| n == name.text) {
                return Err(l.err(name.col, format!("semantic '{}' is set twice", name.text)));
            }
            l.expect_punct("=", "'=' after the semantic's name")?;
            let value = l.next_word(&format!("a value for semantic '{}'", name.text))?;
            settings.push((name.text.to_string(), value.text.to_string()));
            if l.at_end() {
                break;
            }
            l.expect_punct(",", "',' between semantic choices, or end of line")?;
        }
        self.semantics = Some((settings, l.line));
        Ok(())
    }

    fn process_decl(&mut self, l: &mut Line) -> PResult<()> {
        l.pos += 1;
        if let Some(first) = self.first_step_line {
            return Err(l.err(
                1,
                format!("process declarations must come before steps (first step at line {first})"),
            ));
        }
        let name_tok = l.name("a process name")?;
        // The bound also keeps the name lookups here and in every step short.
        if self.processes.len() >= super::limits::MAX_PROCESSES {
            return Err(l.err(
                name_tok.col,
                format!(
                    "more than {} processes (the limit of a scenario)",
                    super::limits::MAX_PROCESSES
                ),
            ));
        }
        if let Some(i) = self.processes.iter().position(|p| p.name == name_tok.text) {
            return Err(l.err(
                name_tok.col,
                format!(
                    "duplicate process '{}' (first declared at line {})",
                    name_tok.text, self.process_lines[i]
                ),
            ));
        }
        let mut device: Option<(u32, usize)> = None;
        let mut visible: Option<(Vec<u32>, usize)> = None;
        let mut pid_namespace: Option<PidNamespace> = None;
        while !l.at_end() {
            let key = l.next_word("'device=D' or 'visible=LIST'")?;
            if !l.is_punct("=") {
                l.pos -= 1;
                return Err(l.expected("'device=D' or 'visible=LIST'"));
            }
            l.pos += 1;
            match key.text {
                "device" => {
                    if device.is_some() {
                        return Err(l.err(key.col, "duplicate option 'device='"));
                    }
                    let col = l.col();
                    device = Some((l.u32("a device number")?, col));
                }
                "visible" => {
                    if visible.is_some() {
                        return Err(l.err(key.col, "duplicate option 'visible='"));
                    }
                    let mut list = Vec::new();
                    let devices = self.devices.map_or(0, |d| d.0);
                    loop {
                        let col = l.col();
                        let d = l.u32("a device number")?;
                        if d >= devices {
                            return Err(l.err(
                                col,
                                format!("visible device {d} does not exist (devices {devices})"),
                            ));
                        }
                        if list.contains(&d) {
                            return Err(l.err(col, format!("device {d} is listed twice")));
                        }
                        list.push(d);
                        if !l.eat_punct(",") {
                            break;
                        }
                    }
                    visible = Some((list, key.col));
                }
                "pidns" => {
                    if pid_namespace.is_some() {
                        return Err(l.err(key.col, "duplicate option 'pidns='"));
                    }
                    let col = l.col();
                    let v = l.next_word("'new' or 'harness'")?;
                    pid_namespace = Some(match v.text {
                        "new" => PidNamespace::New,
                        "harness" => PidNamespace::Harness,
                        other => {
                            return Err(l.err(
                                col,
                                format!(
                                    "unknown PID namespace '{other}' (expected new or harness)"
                                ),
                            ))
                        }
                    });
                }
                other => {
                    return Err(l.err(
                        key.col,
                        format!(
                            "unknown option '{other}' for 'process' (expected device=, visible= or pidns=)"
                        ),
                    ))
                }
            }
        }
        let Some((device, dcol)) = device else {
            return Err(l.expected("'device=D'"));
        };
        let seen = match &visible {
            Some((v, _)) => v.len() as u32,
            None => self.devices.map_or(0, |d| d.0),
        };
        if device >= seen {
            return Err(l.err(
                dcol,
                format!(
                    "device {device} is out of range: process '{}' sees {seen} device{}",
                    name_tok.text,
                    if seen == 1 { "" } else { "s" }
                ),
            ));
        }
        self.processes.push(ProcessSpec {
            name: name_tok.text.to_string(),
            device,
            visible_devices: visible.map(|v| v.0),
            pid_namespace: pid_namespace.unwrap_or_default(),
        });
        self.process_lines.push(l.line);
        self.exited.push(None);
        Ok(())
    }

    fn hazard_decl(&mut self, l: &mut Line) -> PResult<()> {
        l.pos += 1;
        let what = "'hazard KIND' or 'no-hazards' after 'expect'";
        let t = l.next_word(what)?;
        let check = match t.text {
            "no-hazards" => HazardCheck::NoHazards,
            "hazard" => {
                let col = l.col();
                let k = l.next_word("a hazard kind")?;
                match HazardKind::from_name(k.text) {
                    Some(kind) => HazardCheck::Hazard(kind),
                    None => {
                        let known: Vec<&str> = HazardKind::ALL.iter().map(|h| h.name()).collect();
                        return Err(l.err(
                            col,
                            format!(
                                "unknown hazard '{}' (expected one of {})",
                                k.text,
                                known.join(", ")
                            ),
                        ));
                    }
                }
            }
            _ => {
                l.pos -= 1;
                return Err(l.expected(what));
            }
        };
        l.expect_end("end of line")?;
        self.hazards.push(HazardExpectation {
            line: l.line,
            check,
        });
        Ok(())
    }

    // --- steps -------------------------------------------------------------

    fn step(&mut self, l: &mut Line) -> PResult<()> {
        let ptok = l.toks[0];
        let Some(proc_idx) = self.processes.iter().position(|p| p.name == ptok.text) else {
            return Err(l.err(ptok.col, format!("unknown process '{}'", ptok.text)));
        };
        if let Some(line) = self.exited[proc_idx] {
            return Err(l.err(
                ptok.col,
                format!(
                    "process '{}' already exited at line {line}; it runs no further steps",
                    ptok.text
                ),
            ));
        }
        self.first_step_line.get_or_insert(l.line);
        l.pos = 2;
        let repeat = if l.peek().is_some_and(|t| t.text == "repeat")
            && !l.peek_at(1).is_some_and(|t| t.is_punct("="))
        {
            l.pos += 1;
            let col = l.col();
            let n = l.int("an iteration count after 'repeat'")?;
            match u32::try_from(n) {
                Ok(n) if (1..=MAX_REPEAT).contains(&n) => Some(n),
                _ => {
                    return Err(l.err(
                        col,
                        format!("expected a repeat count from 1 to {MAX_REPEAT}, found {n}"),
                    ))
                }
            }
        } else {
            None
        };
        let bind = if l.peek_at(1).is_some_and(|t| t.is_punct("=")) {
            let t = l.name("a binding name")?;
            l.pos += 1;
            if t.text == "null" {
                return Err(l.err(t.col, "'null' cannot be bound"));
            }
            if t.text == PER_THREAD_STREAM {
                return Err(l.err(
                    t.col,
                    "'per_thread' names the per-thread default stream and cannot be bound",
                ));
            }
            if let Some(b) = self.bindings.get(t.text) {
                return Err(l.err(
                    t.col,
                    format!("'{}' is already bound (line {})", t.text, b.line),
                ));
            }
            Some(t)
        } else {
            None
        };
        let op_tok = l.next_word("an op")?;
        let op = self.op(l, proc_idx, &op_tok)?;
        self.check_lists(l, repeat, bind.as_ref(), &op)?;
        if let Some(b) = &bind {
            if op.result_type() == ValueType::Unit {
                return Err(l.err(
                    b.col,
                    format!(
                        "'{}' produces no value to bind to '{}'",
                        op.keyword(),
                        b.text
                    ),
                ));
            }
        }
        let expect = if l.at_end() {
            Expect::Default
        } else if l.eat_punct("=>") {
            self.expectations(l, &op)?
        } else {
            return Err(l.expected("'=>' or end of line"));
        };
        // Effects on validation state.
        match &op {
            Op::Exit => self.exited[proc_idx] = Some(l.line),
            Op::EventDestroy { event } | Op::StreamDestroy { stream: event } => {
                if let Some(b) = self.bindings.get_mut(event) {
                    b.destroyed = Some(l.line);
                }
            }
            Op::Send { handle, to, .. } => {
                if let Some(b) = self.bindings.get_mut(handle) {
                    if !b.holders.contains(to) {
                        b.holders.push(*to);
                    }
                }
            }
            _ => {}
        }
        // A descriptor passed with send_fd belongs to the receiver.
        let owner = match &op {
            Op::SendFd { to, .. } => *to,
            _ => proc_idx,
        };
        let bind = bind.map(|b| b.text.to_string());
        if let Some(b) = &bind {
            let alloc_size = match &op {
                Op::Malloc { size, .. } => Some(*size),
                _ => None,
            };
            self.bindings.insert(
                b.clone(),
                Binding {
                    ty: op.result_type(),
                    line: l.line,
                    process: owner,
                    alloc_size,
                    holders: vec![owner],
                    destroyed: None,
                },
            );
        }
        if let (Some(b), Some(n)) = (&bind, repeat) {
            self.list_counts.insert(b.clone(), n);
        }
        self.steps.push(Step {
            line: l.line,
            process: proc_idx,
            bind,
            op,
            expect,
            repeat,
        });
        Ok(())
    }

    /// List names (`e[]`) belong to `repeat` steps: a repeat step binds only
    /// a list, and uses a list only if it was bound with the same count.
    fn check_lists(
        &self,
        l: &Line,
        repeat: Option<u32>,
        bind: Option<&Token>,
        op: &Op,
    ) -> PResult<()> {
        let is_list = |n: &str| n.ends_with(LIST_SUFFIX);
        if let Some(b) = bind {
            match (repeat, is_list(b.text)) {
                (Some(_), false) => {
                    return Err(l.err(
                        b.col,
                        format!(
                            "a repeat step binds a list: expected '{}[]', found '{}'",
                            b.text, b.text
                        ),
                    ))
                }
                (None, true) => {
                    return Err(l.err(
                        b.col,
                        format!("only a repeat step binds a list such as '{}'", b.text),
                    ))
                }
                _ => {}
            }
        }
        for n in op.used().into_iter().flatten().filter(|n| is_list(n)) {
            let bound = self.list_counts.get(n).copied();
            if repeat.is_none() || bound != repeat {
                let col = l
                    .toks
                    .iter()
                    .find(|t| t.text == n)
                    .map_or(l.col(), |t| t.col);
                return Err(l.err(
                    col,
                    format!(
                        "list '{n}' holds {} elements: use it in a 'repeat {}' step",
                        bound.unwrap_or(0),
                        bound.unwrap_or(0)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// A binding used as an argument: must exist and have type `ty`.
    fn binding_arg(&self, l: &mut Line, ty: ValueType, op: &str) -> PResult<(String, usize)> {
        let col = l.col();
        let what = match ty {
            ValueType::Ptr => "a pointer (a binding or 'null')",
            ValueType::Context => "a context binding",
            ValueType::Handle => "a handle binding",
            ValueType::VmmHandle => "a VMM allocation handle binding",
            ValueType::Fd => "a file descriptor binding",
            ValueType::Event => "an event binding",
            ValueType::EventHandle => "an event handle binding",
            ValueType::Pool => "a memory pool binding",
            ValueType::PoolExport => "a pool pointer export binding",
            ValueType::Stream => "a stream binding",
            _ => "a binding",
        };
        let t = l.name(what)?;
        let Some(b) = self.bindings.get(t.text) else {
            return Err(l.err(
                col,
                format!("unknown name '{}' (not bound by an earlier step)", t.text),
            ));
        };
        if b.ty != ty {
            return Err(l.err(
                col,
                format!(
                    "'{}' is {}, but '{op}' needs {}",
                    t.text,
                    b.ty.describe(),
                    ty.describe()
                ),
            ));
        }
        Ok((t.text.to_string(), col))
    }

    fn ptr_arg(&self, l: &mut Line, op: &str) -> PResult<Ref> {
        if l.peek().is_some_and(|t| t.is_word() && t.text == "null") {
            l.pos += 1;
            return Ok(Ref::Null);
        }
        Ok(Ref::Name(self.binding_arg(l, ValueType::Ptr, op)?.0))
    }

    fn handle_arg(&self, l: &mut Line, proc_idx: ProcIndex, op: &str) -> PResult<String> {
        self.held_arg(l, proc_idx, op, ValueType::Handle)
    }

    /// A handle of type `ty` (memory or event handle) that `proc_idx` holds.
    fn held_arg(
        &self,
        l: &mut Line,
        proc_idx: ProcIndex,
        op: &str,
        ty: ValueType,
    ) -> PResult<String> {
        let (name, col) = self.binding_arg(l, ty, op)?;
        if let Some(b) = self.bindings.get(&name) {
            if !b.holders.contains(&proc_idx) {
                return Err(l.err(
                    col,
                    format!(
                        "process '{}' does not hold handle '{name}' (made by '{}'; send it first)",
                        self.processes[proc_idx].name, self.processes[b.process].name
                    ),
                ));
            }
        }
        Ok(name)
    }

    /// A per-process binding (VMM handle, descriptor): only the process that
    /// holds it may use it.
    fn held_local_arg(
        &self,
        l: &mut Line,
        proc_idx: ProcIndex,
        ty: ValueType,
        op: &str,
    ) -> PResult<String> {
        let (name, col) = self.binding_arg(l, ty, op)?;
        if let Some(b) = self.bindings.get(&name) {
            if !b.holders.contains(&proc_idx) {
                let how = if ty == ValueType::Fd {
                    "pass it with send_fd first"
                } else {
                    "it is valid in that process only"
                };
                return Err(l.err(
                    col,
                    format!(
                        "process '{}' does not hold {} '{name}' (it belongs to '{}'; {how})",
                        self.processes[proc_idx].name,
                        ty.describe(),
                        self.processes[b.process].name
                    ),
                ));
            }
        }
        Ok(name)
    }

    /// An event argument: events are process-local objects, so only the
    /// process that created or opened it may use it, and not after its
    /// `event_destroy` (the real call would get a dangling pointer).
    fn event_arg(&self, l: &mut Line, proc_idx: ProcIndex, op: &str) -> PResult<String> {
        // `null`: the NULL cudaEvent_t (event.null.*).
        if l.peek()
            .is_some_and(|t| t.is_word() && t.text == NULL_EVENT)
        {
            l.pos += 1;
            return Ok(NULL_EVENT.to_string());
        }
        let (name, col) = self.binding_arg(l, ValueType::Event, op)?;
        if let Some(b) = self.bindings.get(&name) {
            if b.process != proc_idx {
                return Err(l.err(
                    col,
                    format!(
                        "event '{name}' belongs to process '{}' (share it with ipc_get_event and send)",
                        self.processes[b.process].name
                    ),
                ));
            }
            if let Some(line) = b.destroyed {
                return Err(l.err(col, format!("event '{name}' was destroyed at line {line}")));
            }
        }
        Ok(name)
    }

    /// A stream of process `proc_idx` that was not destroyed, or
    /// `per_thread` (the per-thread default stream, which is never
    /// destroyed).
    fn stream_arg(&self, l: &mut Line, proc_idx: ProcIndex, op: &str) -> PResult<String> {
        if l.peek()
            .is_some_and(|t| t.is_word() && t.text == PER_THREAD_STREAM)
        {
            let col = l.col();
            if op == CallKind::StreamDestroy.keyword() {
                return Err(l.err(col, "the per-thread default stream cannot be destroyed"));
            }
            l.pos += 1;
            return Ok(PER_THREAD_STREAM.to_string());
        }
        let (name, col) = self.binding_arg(l, ValueType::Stream, op)?;
        if let Some(b) = self.bindings.get(&name) {
            if b.process != proc_idx {
                return Err(l.err(
                    col,
                    format!(
                        "stream '{name}' belongs to process '{}' (streams are per process)",
                        self.processes[b.process].name
                    ),
                ));
            }
            if let Some(line) = b.destroyed {
                return Err(l.err(col, format!("stream '{name}' was destroyed at line {line}")));
            }
        }
        Ok(name)
    }

    /// An optional trailing `stream=S` (else the legacy default stream).
    fn stream_option(
        &self,
        l: &mut Line,
        proc_idx: ProcIndex,
        op: &str,
    ) -> PResult<Option<String>> {
        let mut stream = None;
        self.options(l, op, &["stream"], |l, _| {
            stream = Some(self.stream_arg(l, proc_idx, op)?);
            Ok(())
        })?;
        Ok(stream)
    }

    fn word_choice<T>(
        l: &mut Line,
        what: &str,
        names: &[&str],
        from: impl Fn(&str) -> Option<T>,
    ) -> PResult<T> {
        let col = l.col();
        let t = l.next_word(what)?;
        from(t.text).ok_or_else(|| {
            l.err(
                col,
                format!("expected {what} ({}), found '{}'", names.join(", "), t.text),
            )
        })
    }

    fn handle_types(l: &mut Line) -> PResult<HandleTypes> {
        Self::word_choice(
            l,
            "handle types after 'types='",
            &["none", "posix_fd", "fabric", "an integer bit set"],
            HandleTypes::from_name,
        )
    }

    /// The length a `fill`-like op writes: `len=`, or the size given to the
    /// `malloc*` that bound `ptr`, minus `at`.
    fn fill_len(
        &self,
        l: &Line,
        kw: &str,
        ptr: &Ref,
        pcol: usize,
        at: Option<(u64, usize)>,
        len: Option<u64>,
    ) -> PResult<u64> {
        if let Some(n) = len {
            return Ok(n);
        }
        let size = ptr
            .name()
            .and_then(|n| self.bindings.get(n))
            .and_then(|b| b.alloc_size);
        let Some(size) = size else {
            return Err(l.err(
                pcol,
                format!("'{kw}' of '{ptr}' needs len=N ('{ptr}' was not bound by malloc*)"),
            ));
        };
        match at {
            Some((a, col)) if a > size => Err(l.err(
                col,
                format!(
                    "at={} is past the end of '{ptr}' (size {}); give len=",
                    fmt_size(a),
                    fmt_size(size)
                ),
            )),
            Some((a, _)) => Ok(size - a),
            None => Ok(size),
        }
    }

    /// `flags=` of `event_create`: names joined by `,`, or an integer.
    fn event_flags(l: &mut Line) -> PResult<u32> {
        let what = "event flags (default, blocking_sync, disable_timing, interprocess, joined by ',') or an integer after 'flags='";
        let col = l.col();
        if l.peek()
            .is_some_and(|t| t.is_word() && t.text.starts_with(|c: char| c.is_ascii_digit()))
        {
            let v = l.int(what)?;
            return u32::try_from(v).map_err(|_| l.err(col, format!("flags {v} is too large")));
        }
        let mut flags = 0u32;
        loop {
            let col = l.col();
            let w = l.next_word(what)?;
            let Some((_, bit)) = event_flags::NAMES.iter().find(|(n, _)| *n == w.text) else {
                return Err(l.err(col, format!("unknown event flag '{}' (expected default, blocking_sync, disable_timing or interprocess)", w.text)));
            };
            flags |= bit;
            if !l.eat_punct(",") {
                return Ok(flags);
            }
        }
    }

    /// `key=value` options after the positional arguments.
    fn options(
        &self,
        l: &mut Line,
        op: &str,
        allowed: &[&str],
        mut each: impl FnMut(&mut Line, &Token) -> PResult<()>,
    ) -> PResult<()> {
        let mut seen: Vec<&str> = Vec::new();
        while l.peek().is_some_and(|t| t.is_word()) && l.peek_at(1).is_some_and(|t| t.is_punct("="))
        {
            let key = l.next_word("an option")?;
            l.pos += 1;
            if !allowed.contains(&key.text) {
                let list: Vec<String> = allowed.iter().map(|a| format!("{a}=")).collect();
                let expected = if list.is_empty() {
                    "it takes none".to_string()
                } else {
                    format!("expected {}", list.join(" or "))
                };
                return Err(l.err(
                    key.col,
                    format!("unknown option '{}' for '{op}' ({expected})", key.text),
                ));
            }
            if seen.contains(&key.text) {
                return Err(l.err(key.col, format!("duplicate option '{}='", key.text)));
            }
            seen.push(key.text);
            each(l, &key)?;
        }
        Ok(())
    }

    fn out_null(l: &mut Line) -> PResult<OutArg> {
        match l.peek() {
            Some(t) if t.is_word() && t.text == "null" => {
                l.pos += 1;
                Ok(OutArg::Null)
            }
            _ => Err(l.expected("'null' after 'out='")),
        }
    }

    fn op(&mut self, l: &mut Line, proc_idx: ProcIndex, op_tok: &Token) -> PResult<Op> {
        let kw = op_tok.text;
        let call = CallKind::from_keyword(kw);
        let op = match (call, kw) {
            (Some(CallKind::DeviceCount), _) => Op::DeviceCount,
            (Some(CallKind::DeviceAttribute), _) => {
                let device = l.u32("a device number")?;
                let col = l.col();
                let a = l.next_word("an attribute name")?;
                let Some(attr) = DeviceAttribute::from_name(a.text) else {
                    let known: Vec<&str> = DeviceAttribute::ALL.iter().map(|a| a.name()).collect();
                    return Err(l.err(
                        col,
                        format!(
                            "unknown attribute '{}' (expected one of {})",
                            a.text,
                            known.join(", ")
                        ),
                    ));
                };
                Op::Attr { device, attr }
            }
            (Some(CallKind::SetDevice), _) => Op::SetDevice {
                device: l.u32("a device number")?,
            },
            (Some(CallKind::CanAccessPeer), _) => Op::CanAccessPeer {
                device: l.u32("a device number")?,
                peer: l.u32("a peer device number")?,
            },
            (Some(CallKind::EnablePeerAccess), _) => Op::EnablePeer {
                peer: l.u32("a peer device number")?,
            },
            (Some(CallKind::PrimaryContext), _) => Op::PrimaryCtx {
                device: l.u32("a device number")?,
            },
            (Some(CallKind::CreateContext), _) => Op::CtxCreate {
                device: l.u32("a device number")?,
            },
            (Some(CallKind::SetCurrentContext), _) => Op::CtxSet {
                ctx: if l
                    .peek()
                    .is_some_and(|t| t.is_word() && t.text == NULL_CONTEXT)
                {
                    l.pos += 1;
                    NULL_CONTEXT.to_string()
                } else {
                    self.binding_arg(l, ValueType::Context, kw)?.0
                },
            },
            (Some(CallKind::CurrentContext), _) => Op::CtxCurrent,
            (Some(CallKind::DestroyContext), _) => {
                if l.peek()
                    .is_some_and(|t| t.is_word() && t.text == NULL_CONTEXT)
                {
                    let col = l.col();
                    return Err(l.err(
                        col,
                        "ctx_destroy needs a bound context ('ctx_set null' pops the current one)",
                    ));
                }
                Op::CtxDestroy {
                    ctx: self.binding_arg(l, ValueType::Context, kw)?.0,
                }
            }
            (Some(CallKind::Alloc), _)
            | (None, "malloc_managed" | "malloc_host" | "malloc_async") => {
                let kind = match kw {
                    _ if call.is_some() => MemKind::Device,
                    "malloc_managed" => MemKind::Managed,
                    "malloc_host" => MemKind::PinnedHost,
                    _ => MemKind::StreamOrdered,
                };
                Op::Malloc {
                    kind,
                    size: l.int("a size in bytes")?,
                }
            }
            (Some(CallKind::Free), _) | (None, "free_host" | "free_async") => {
                let kind = match kw {
                    _ if call.is_some() => FreeKind::Device,
                    "free_host" => FreeKind::Host,
                    _ => FreeKind::StreamOrdered,
                };
                Op::Free {
                    kind,
                    ptr: self.ptr_arg(l, kw)?,
                }
            }
            (None, "offset") => {
                let ptr = self.ptr_arg(l, kw)?;
                Op::Offset {
                    ptr,
                    bytes: l.int("a byte offset")?,
                }
            }
            (Some(CallKind::Memset), _) => {
                let pcol = l.col();
                let ptr = self.ptr_arg(l, kw)?;
                let value = l.byte()?;
                let mut at: Option<(u64, usize)> = None;
                let mut len = None;
                self.options(l, kw, &["at", "len"], |l, key| {
                    let col = l.col();
                    let v = l.int("an integer")?;
                    if key.text == "at" {
                        at = Some((v, col));
                    } else {
                        len = Some(v);
                    }
                    Ok(())
                })?;
                let resolved_len = self.fill_len(l, kw, &ptr, pcol, at, len)?;
                Op::Fill {
                    ptr,
                    value,
                    at: at.map(|a| a.0),
                    len,
                    resolved_len,
                }
            }
            (Some(CallKind::Write), _) => {
                let ptr = self.ptr_arg(l, kw)?;
                let offset = l.int("a byte offset")?;
                let col = l.col();
                let pattern = l.pattern()?;
                if pattern.len() > MAX_WRITE_BYTES {
                    return Err(l.err(
                        col,
                        format!(
                            "pattern of {} bytes is too long for 'write' (at most 64MiB)",
                            pattern.len()
                        ),
                    ));
                }
                Op::Write {
                    ptr,
                    offset,
                    pattern,
                }
            }
            (Some(CallKind::Read | CallKind::DeviceRead), _) => {
                let ptr = self.ptr_arg(l, kw)?;
                let offset = l.int("a byte offset")?;
                let col = l.col();
                let len = l.int("a length in bytes")?;
                if len > super::limits::MAX_READ_BYTES {
                    return Err(l.err(
                        col,
                        format!("'{kw}' of {len} bytes is above the limit of 256MiB for one read"),
                    ));
                }
                if call == Some(CallKind::Read) {
                    Op::Read { ptr, offset, len }
                } else {
                    Op::DeviceRead { ptr, offset, len }
                }
            }
            (Some(CallKind::AddressRange), _) => Op::AddressRange {
                ptr: self.ptr_arg(l, kw)?,
            },
            (Some(CallKind::ForkChildAlloc), _) => {
                // The child's one call; only an allocation so far.
                let col = l.col();
                let call = l.next_word("the child's call ('alloc')")?;
                if call.text != "alloc" {
                    return Err(l.err(
                        col,
                        format!("unknown child call '{}' (expected alloc)", call.text),
                    ));
                }
                Op::ForkChildAlloc {
                    size: l.int("a size in bytes")?,
                }
            }
            (Some(CallKind::PointerInfo), _) => {
                let ptr = self.ptr_arg(l, kw)?;
                // With an attribute name: one cuPointerGetAttribute query.
                match l.peek().filter(|t| t.is_word()).copied() {
                    None => Op::PointerAttr { ptr },
                    Some(a) => {
                        l.pos += 1;
                        let Some(attr) = PointerAttribute::from_name(a.text) else {
                            let known: Vec<&str> =
                                PointerAttribute::ALL.iter().map(|a| a.name()).collect();
                            return Err(l.err(
                                a.col,
                                format!(
                                    "unknown pointer attribute '{}' (expected one of {})",
                                    a.text,
                                    known.join(", ")
                                ),
                            ));
                        };
                        Op::PointerAttribute { ptr, attr }
                    }
                }
            }
            (Some(CallKind::IpcGetMemHandle), _) => {
                let ptr = self.ptr_arg(l, kw)?;
                let mut out = OutArg::Valid;
                self.options(l, kw, &["out"], |l, _| {
                    out = Self::out_null(l)?;
                    Ok(())
                })?;
                Op::IpcGet { ptr, out }
            }
            (Some(CallKind::IpcOpenMemHandle), _) => {
                let handle = self.handle_arg(l, proc_idx, kw)?;
                let mut out = OutArg::Valid;
                let mut flags = IPC_MEM_LAZY_ENABLE_PEER_ACCESS;
                self.options(l, kw, &["flags", "out"], |l, key| {
                    if key.text == "out" {
                        out = Self::out_null(l)?;
                        return Ok(());
                    }
                    let what = "'lazy' or an integer after 'flags='";
                    let col = l.col();
                    match l.peek() {
                        Some(t) if t.is_word() && t.text == "lazy" => {
                            l.pos += 1;
                        }
                        Some(t)
                            if t.is_word() && t.text.starts_with(|c: char| c.is_ascii_digit()) =>
                        {
                            let v = l.int(what)?;
                            flags = u32::try_from(v)
                                .map_err(|_| l.err(col, format!("flags {v} is too large")))?;
                        }
                        _ => return Err(l.expected(what)),
                    }
                    Ok(())
                })?;
                Op::IpcOpen { handle, flags, out }
            }
            (Some(CallKind::IpcCloseMemHandle), _) => Op::IpcClose {
                ptr: self.ptr_arg(l, kw)?,
            },
            (Some(CallKind::Synchronize), _) => Op::Sync,
            (None, "handle_zero") => Op::HandleZero,
            (None, "handle_random") => Op::HandleRandom,
            (None, "handle_flip") => {
                let handle = self.handle_arg(l, proc_idx, kw)?;
                let col = l.col();
                let off = l.int("a byte offset (0..63)")?;
                if off >= IPC_HANDLE_SIZE as u64 {
                    return Err(l.err(
                        col,
                        format!("handle byte offset must be 0..63, found {off}"),
                    ));
                }
                Op::HandleFlip {
                    handle,
                    offset: off as u8,
                }
            }
            (None, "send") => {
                let ty = match l.peek().and_then(|t| self.bindings.get(t.text)) {
                    Some(b) if b.ty == ValueType::EventHandle => ValueType::EventHandle,
                    Some(b) if b.ty == ValueType::PoolExport => ValueType::PoolExport,
                    _ => ValueType::Handle,
                };
                let handle = self.held_arg(l, proc_idx, kw, ty)?;
                l.expect_punct("->", "'->' after the handle")?;
                let col = l.col();
                let to = l.name("a process name")?;
                let Some(to_idx) = self.processes.iter().position(|p| p.name == to.text) else {
                    return Err(l.err(col, format!("unknown process '{}'", to.text)));
                };
                Op::Send {
                    handle,
                    to: to_idx,
                    to_name: to.text.to_string(),
                }
            }
            (None, "exit") => Op::Exit,
            (Some(CallKind::VmmGranularity), _) => {
                let device = l.u32("a device number")?;
                let kind =
                    Self::word_choice(l, "a granularity kind", &["minimum", "recommended"], |w| {
                        match w {
                            "minimum" => Some(GranularityKind::Minimum),
                            "recommended" => Some(GranularityKind::Recommended),
                            _ => None,
                        }
                    })?;
                let mut types = HandleTypes::NONE;
                self.options(l, kw, &["types"], |l, _| {
                    types = Self::handle_types(l)?;
                    Ok(())
                })?;
                Op::VmmGranularity {
                    device,
                    kind,
                    types,
                }
            }
            (Some(CallKind::VmmCreate), _) => {
                let size = l.int("a size in bytes")?;
                let mut types = HandleTypes::NONE;
                let mut device = 0;
                self.options(l, kw, &["types", "device"], |l, key| {
                    if key.text == "types" {
                        types = Self::handle_types(l)?;
                    } else {
                        device = l.u32("a device number")?;
                    }
                    Ok(())
                })?;
                Op::VmmCreate {
                    size,
                    types,
                    device,
                }
            }
            (Some(CallKind::VmmExport), _) => {
                let handle = self.held_local_arg(l, proc_idx, ValueType::VmmHandle, kw)?;
                let ty = Self::word_choice(
                    l,
                    "a shareable handle type",
                    &["posix_fd", "fabric"],
                    ShareableHandleType::from_name,
                )?;
                Op::VmmExport { handle, ty }
            }
            (Some(CallKind::VmmImport), _) => Op::VmmImport {
                fd: self.held_local_arg(l, proc_idx, ValueType::Fd, kw)?,
            },
            (Some(CallKind::VmmReserve), _) => Op::VmmReserve {
                size: l.int("a size in bytes")?,
            },
            (Some(CallKind::VmmMap), _) => {
                let va = self.ptr_arg(l, kw)?;
                let size = l.int("a size in bytes")?;
                let handle = self.held_local_arg(l, proc_idx, ValueType::VmmHandle, kw)?;
                let mut offset = 0;
                self.options(l, kw, &["offset"], |l, _| {
                    offset = l.int("an offset in bytes")?;
                    Ok(())
                })?;
                Op::VmmMap {
                    va,
                    size,
                    handle,
                    offset,
                }
            }
            (Some(CallKind::VmmSetAccess), _) => {
                let va = self.ptr_arg(l, kw)?;
                let size = l.int("a size in bytes")?;
                let access = Self::word_choice(
                    l,
                    "an access mode",
                    &["none", "read", "rw"],
                    VmmAccess::from_name,
                )?;
                let mut device = 0;
                self.options(l, kw, &["device"], |l, _| {
                    device = l.u32("a device number")?;
                    Ok(())
                })?;
                Op::VmmSetAccess {
                    va,
                    size,
                    access,
                    device,
                }
            }
            (Some(CallKind::VmmUnmap | CallKind::VmmAddressFree), _) => {
                let va = self.ptr_arg(l, kw)?;
                let size = l.int("a size in bytes")?;
                if call == Some(CallKind::VmmUnmap) {
                    Op::VmmUnmap { va, size }
                } else {
                    Op::VmmAddressFree { va, size }
                }
            }
            (Some(CallKind::VmmRelease), _) => Op::VmmRelease {
                handle: self.held_local_arg(l, proc_idx, ValueType::VmmHandle, kw)?,
            },
            (Some(CallKind::FdClose), _) => Op::FdClose {
                fd: self.held_local_arg(l, proc_idx, ValueType::Fd, kw)?,
            },
            (Some(CallKind::FdOpenNullDevice), _) => Op::FdNullDevice,
            // --- memory pools ---
            (Some(CallKind::PoolCreate), _) => {
                let mut types = HandleTypes::NONE;
                let mut device = 0;
                self.options(l, kw, &["types", "device"], |l, key| {
                    if key.text == "types" {
                        types = Self::handle_types(l)?;
                    } else {
                        device = l.u32("a device number")?;
                    }
                    Ok(())
                })?;
                Op::PoolCreate { types, device }
            }
            (Some(CallKind::PoolDefault), _) => {
                let mut device = 0;
                self.options(l, kw, &["device"], |l, _| {
                    device = l.u32("a device number")?;
                    Ok(())
                })?;
                Op::PoolDefault { device }
            }
            (Some(CallKind::PoolDestroy), _) => Op::PoolDestroy {
                pool: self.held_local_arg(l, proc_idx, ValueType::Pool, kw)?,
            },
            (Some(CallKind::PoolExport), _) => Op::PoolExport {
                pool: self.held_local_arg(l, proc_idx, ValueType::Pool, kw)?,
            },
            (Some(CallKind::PoolImport), _) => Op::PoolImport {
                fd: self.held_local_arg(l, proc_idx, ValueType::Fd, kw)?,
            },
            (Some(CallKind::PoolSetAccess), _) => {
                let pool = self.held_local_arg(l, proc_idx, ValueType::Pool, kw)?;
                let access = Self::word_choice(
                    l,
                    "an access mode",
                    &["none", "read", "rw"],
                    VmmAccess::from_name,
                )?;
                let mut device = 0;
                self.options(l, kw, &["device"], |l, _| {
                    device = l.u32("a device number")?;
                    Ok(())
                })?;
                Op::PoolSetAccess {
                    pool,
                    access,
                    device,
                }
            }
            (Some(CallKind::PoolGetAccess), _) => {
                let pool = self.held_local_arg(l, proc_idx, ValueType::Pool, kw)?;
                let mut device = 0;
                self.options(l, kw, &["device"], |l, _| {
                    device = l.u32("a device number")?;
                    Ok(())
                })?;
                Op::PoolGetAccess { pool, device }
            }
            (Some(CallKind::PoolAlloc), _) => {
                let pool = self.held_local_arg(l, proc_idx, ValueType::Pool, kw)?;
                let size = l.int("a size in bytes")?;
                Op::PoolAlloc { pool, size }
            }
            (Some(CallKind::PoolFree), _) => Op::PoolFree {
                ptr: self.ptr_arg(l, kw)?,
            },
            (Some(CallKind::PoolExportPtr), _) => Op::PoolExportPtr {
                ptr: self.ptr_arg(l, kw)?,
            },
            (Some(CallKind::PoolImportPtr), _) => {
                let pool = self.held_local_arg(l, proc_idx, ValueType::Pool, kw)?;
                let data = self.held_arg(l, proc_idx, kw, ValueType::PoolExport)?;
                Op::PoolImportPtr { pool, data }
            }
            (None, "fd_number") => {
                let col = l.col();
                let v = l.signed("a descriptor number")?;
                let number = i32::try_from(v).map_err(|_| {
                    l.err(col, format!("descriptor number {v} does not fit an int"))
                })?;
                Op::FdNumber { number }
            }
            (None, "send_fd") => {
                let fd = self.held_local_arg(l, proc_idx, ValueType::Fd, kw)?;
                l.expect_punct("->", "'->' after the descriptor")?;
                let col = l.col();
                let to = l.name("a process name")?;
                let Some(to_idx) = self.processes.iter().position(|p| p.name == to.text) else {
                    return Err(l.err(col, format!("unknown process '{}'", to.text)));
                };
                if to_idx == proc_idx {
                    return Err(l.err(col, "send_fd needs another process"));
                }
                Op::SendFd {
                    fd,
                    to: to_idx,
                    to_name: to.text.to_string(),
                }
            }
            (Some(CallKind::PidfdGetfd), _) => {
                // The descriptor is the owner's: its number in the owner is
                // what pidfd_getfd takes.
                let col = l.col();
                let owner = l.name("the owning process's name")?;
                let Some(owner_idx) = self.processes.iter().position(|p| p.name == owner.text)
                else {
                    return Err(l.err(col, format!("unknown process '{}'", owner.text)));
                };
                let fd = self.held_local_arg(l, owner_idx, ValueType::Fd, kw)?;
                Op::PidfdGetfd {
                    owner: owner_idx,
                    owner_name: owner.text.to_string(),
                    fd,
                }
            }
            (Some(CallKind::EventCreate), _) => {
                let mut flags = event_flags::DEFAULT;
                self.options(l, kw, &["flags"], |l, _| {
                    flags = Self::event_flags(l)?;
                    Ok(())
                })?;
                Op::EventCreate { flags }
            }
            (Some(CallKind::EventRecord), _) => {
                let event = self.event_arg(l, proc_idx, kw)?;
                let stream = self.stream_option(l, proc_idx, kw)?;
                Op::EventRecord { event, stream }
            }
            (Some(CallKind::EventQuery), _) => Op::EventQuery {
                event: self.event_arg(l, proc_idx, kw)?,
            },
            (Some(CallKind::EventSynchronize), _) => Op::EventSync {
                event: self.event_arg(l, proc_idx, kw)?,
            },
            (Some(CallKind::StreamWaitEvent), _) => {
                let event = self.event_arg(l, proc_idx, kw)?;
                let stream = self.stream_option(l, proc_idx, kw)?;
                Op::StreamWait { event, stream }
            }
            (Some(CallKind::StreamCreate), _) => {
                let mut flags = stream_flags::DEFAULT;
                self.options(l, kw, &["flags"], |l, _| {
                    flags = Self::word_choice(
                        l,
                        "stream flags after 'flags='",
                        &["default", "nonblocking"],
                        |w| match w {
                            "default" => Some(stream_flags::DEFAULT),
                            "nonblocking" => Some(stream_flags::NON_BLOCKING),
                            _ => None,
                        },
                    )?;
                    Ok(())
                })?;
                Op::StreamCreate { flags }
            }
            (Some(CallKind::StreamDestroy), _) => Op::StreamDestroy {
                stream: self.stream_arg(l, proc_idx, kw)?,
            },
            (Some(CallKind::StreamSynchronize), _) => Op::StreamSync {
                stream: self.stream_arg(l, proc_idx, kw)?,
            },
            (Some(CallKind::StreamQuery), _) => Op::StreamQuery {
                stream: self.stream_arg(l, proc_idx, kw)?,
            },
            (Some(CallKind::CopyDevice), _) => {
                let dst = self.ptr_arg(l, kw)?;
                let src = self.ptr_arg(l, kw)?;
                let len = l.int("a length in bytes")?;
                let stream = self.stream_option(l, proc_idx, kw)?;
                Op::Copy {
                    dst,
                    src,
                    len,
                    stream,
                }
            }
            (Some(CallKind::CopyPeer), _) => {
                let dst = self.ptr_arg(l, kw)?;
                let dst_device = l.u32("the destination's device number")?;
                let src = self.ptr_arg(l, kw)?;
                let src_device = l.u32("the source's device number")?;
                let len = l.int("a length in bytes")?;
                Op::CopyPeer {
                    dst,
                    dst_device,
                    src,
                    src_device,
                    len,
                }
            }
            (Some(CallKind::EventDestroy), _) => Op::EventDestroy {
                event: self.event_arg(l, proc_idx, kw)?,
            },
            (Some(CallKind::EventElapsed), _) => {
                let start = self.event_arg(l, proc_idx, kw)?;
                let end = self.event_arg(l, proc_idx, kw)?;
                Op::EventElapsed { start, end }
            }
            (Some(CallKind::IpcGetEventHandle), _) => {
                let event = self.event_arg(l, proc_idx, kw)?;
                let mut out = OutArg::Valid;
                self.options(l, kw, &["out"], |l, _| {
                    out = Self::out_null(l)?;
                    Ok(())
                })?;
                Op::IpcGetEvent { event, out }
            }
            (Some(CallKind::IpcOpenEventHandle), _) => {
                let handle = self.held_arg(l, proc_idx, kw, ValueType::EventHandle)?;
                let mut out = OutArg::Valid;
                self.options(l, kw, &["out"], |l, _| {
                    out = Self::out_null(l)?;
                    Ok(())
                })?;
                Op::IpcOpenEvent { handle, out }
            }
            (None, "event_handle_zero") => Op::EventHandleZero,
            (None, "event_handle_random") => Op::EventHandleRandom,
            (Some(CallKind::SlowFill), _) => {
                let pcol = l.col();
                let ptr = self.ptr_arg(l, kw)?;
                let value = l.byte()?;
                let mut at: Option<(u64, usize)> = None;
                let mut len = None;
                let mut micros = None;
                let mut stream = None;
                self.options(l, kw, &["us", "at", "len", "stream"], |l, key| {
                    if key.text == "stream" {
                        stream = Some(self.stream_arg(l, proc_idx, kw)?);
                        return Ok(());
                    }
                    let col = l.col();
                    let v = l.int("an integer")?;
                    match key.text {
                        "at" => at = Some((v, col)),
                        "len" => len = Some(v),
                        _ => micros = Some(v),
                    }
                    Ok(())
                })?;
                let Some(micros) = micros else {
                    return Err(l.expected("us=N (microseconds of work before the fill)"));
                };
                let resolved_len = self.fill_len(l, kw, &ptr, pcol, at, len)?;
                Op::SlowFill {
                    ptr,
                    value,
                    micros,
                    at: at.map(|a| a.0),
                    len,
                    resolved_len,
                    stream,
                }
            }
            (Some(CallKind::KernelPattern), _) | (None, "kernel_iota") => {
                let pcol = l.col();
                let ptr = self.ptr_arg(l, kw)?;
                let content = if kw == "kernel_fill" {
                    KernelContent::Word(l.kernel_word()?)
                } else {
                    KernelContent::Iota(l.byte()?)
                };
                let mut at: Option<(u64, usize)> = None;
                let mut len = None;
                self.options(l, kw, &["at", "len"], |l, key| {
                    let col = l.col();
                    let v = l.int("an integer")?;
                    match key.text {
                        "at" => at = Some((v, col)),
                        _ => len = Some(v),
                    }
                    Ok(())
                })?;
                let resolved_len = self.fill_len(l, kw, &ptr, pcol, at, len)?;
                Op::KernelPattern {
                    ptr,
                    content,
                    at: at.map(|a| a.0),
                    len,
                    resolved_len,
                }
            }
            (_, other) => {
                return Err(l.err(op_tok.col, format!("unknown op '{other}'")));
            }
        };
        Ok(op)
    }

    // --- expectations ------------------------------------------------------

    fn expectations(&self, l: &mut Line, op: &Op) -> PResult<Expect> {
        let is_arm = |l: &Line| {
            l.peek()
                .is_some_and(|t| t.is_word() && matches!(t.text, "runtime" | "driver" | "hip"))
                && l.peek_at(1).is_some_and(|t| t.is_punct(":"))
        };
        if !is_arm(l) {
            let list = self.expect_list(l, op, "'=>'")?;
            if l.is_punct(";") {
                return Err(l.err(
                    l.col(),
                    "';' only separates dialect arms ('runtime: ...; driver: ...; hip: ...')",
                ));
            }
            l.expect_end("',' or end of line")?;
            return Ok(Expect::List(list));
        }
        let mut runtime: Option<ExpectList> = None;
        let mut driver: Option<ExpectList> = None;
        let mut hip: Option<ExpectList> = None;
        loop {
            if !is_arm(l) {
                return Err(l.expected("'runtime:', 'driver:' or 'hip:' after ';'"));
            }
            let d = l.next_word("a dialect")?;
            l.pos += 1;
            let slot = match d.text {
                "runtime" => &mut runtime,
                "driver" => &mut driver,
                _ => &mut hip,
            };
            if slot.is_some() {
                return Err(l.err(d.col, format!("duplicate '{}' arm", d.text)));
            }
            *slot = Some(self.expect_list(l, op, &format!("'{}:'", d.text))?);
            if l.eat_punct(";") {
                continue;
            }
            l.expect_end("',', ';' or end of line")?;
            break;
        }
        Ok(Expect::ByDialect {
            runtime,
            driver,
            hip,
        })
    }

    fn expect_list(&self, l: &mut Line, op: &Op, after: &str) -> PResult<ExpectList> {
        let first = l.pos;
        let mut items = vec![self.one_of(l, op, after)?];
        while l.eat_punct(",") {
            items.push(self.one_of(l, op, "','")?);
        }
        let text = l.text(first, l.pos.saturating_sub(1)).into();
        Ok(ExpectList {
            items: items.into(),
            text,
        })
    }

    /// One expectation, or alternatives joined by `|` (`InvalidValue |
    /// InvalidHandle`, `ok | NotSupported`, `bytes 5a*16 | bytes 00*16`):
    /// `ok` and error names join, and byte patterns join each other (where
    /// the GPU answers a read both ways), each at most once.
    fn one_of(&self, l: &mut Line, op: &Op, after: &str) -> PResult<Expectation> {
        let outcome = |e: &Expectation| matches!(e, Expectation::Ok | Expectation::Error { .. });
        let bytes = |e: &Expectation| matches!(e, Expectation::Bytes(_));
        let col = l.col();
        let first = self.expectation(l, op, after)?;
        if !l.is_punct("|") {
            return Ok(first);
        }
        let joinable: fn(&Expectation) -> bool = if outcome(&first) {
            outcome
        } else if bytes(&first) {
            bytes
        } else {
            return Err(l.err(
                col,
                format!("'|' joins only 'ok' and error names, or byte patterns, not '{first}'"),
            ));
        };
        let mut alternatives = vec![first];
        while l.eat_punct("|") {
            let col = l.col();
            let next = self.expectation(l, op, "'|'")?;
            if !joinable(&next) {
                return Err(l.err(
                    col,
                    format!(
                        "'|' joins 'ok' and error names with each other, and byte patterns with each other, not '{next}' with '{}'",
                        alternatives[0]
                    ),
                ));
            }
            let same = |a: &Expectation| match (a, &next) {
                (Expectation::Error { kind: x, .. }, Expectation::Error { kind: y, .. }) => x == y,
                (a, b) => a == b,
            };
            if alternatives.iter().any(same) {
                return Err(l.err(col, format!("'{next}' is already an alternative")));
            }
            alternatives.push(next);
        }
        Ok(Expectation::OneOf(alternatives))
    }

    fn ref_arg(&self, l: &mut Line, op: &Op, col_item: usize) -> PResult<Ref> {
        let col = l.col();
        let rt = op.result_type();
        if rt == ValueType::Unit {
            return Err(l.err(
                col_item,
                format!("'{}' produces no value to compare", op.keyword()),
            ));
        }
        let t = l.name("a binding or 'null'")?;
        if t.text.ends_with(LIST_SUFFIX) {
            return Err(l.err(col, format!("a list ('{}') cannot be compared", t.text)));
        }
        let want = if matches!(rt, ValueType::Range) {
            ValueType::Ptr
        } else {
            rt
        };
        if t.text == "null" {
            if !matches!(want, ValueType::Ptr | ValueType::Context) {
                return Err(l.err(
                    col,
                    format!(
                        "'null' cannot be compared with {} ('{}' produces it)",
                        rt.describe(),
                        op.keyword()
                    ),
                ));
            }
            return Ok(Ref::Null);
        }
        let Some(b) = self.bindings.get(t.text) else {
            return Err(l.err(
                col,
                format!("unknown name '{}' (not bound by an earlier step)", t.text),
            ));
        };
        if !comparable(rt, b.ty) {
            return Err(l.err(
                col,
                format!(
                    "cannot compare {} ('{}' produces it) with '{}' ({})",
                    rt.describe(),
                    op.keyword(),
                    t.text,
                    b.ty.describe()
                ),
            ));
        }
        Ok(Ref::Name(t.text.to_string()))
    }

    fn expectation(&self, l: &mut Line, op: &Op, after: &str) -> PResult<Expectation> {
        let col = l.col();
        let rt = op.result_type();
        let need = |l: &Line, ty: ValueType, what: &str| -> PResult<()> {
            if rt == ty {
                Ok(())
            } else {
                Err(l.err(
                    col,
                    format!(
                        "'{what}' needs {} result, but '{}' produces {}",
                        ty.describe(),
                        op.keyword(),
                        rt.describe()
                    ),
                ))
            }
        };
        if l.eat_punct("==") {
            return Ok(Expectation::Eq(self.ref_arg(l, op, col)?));
        }
        if l.eat_punct("!=") {
            return Ok(Expectation::Ne(self.ref_arg(l, op, col)?));
        }
        let Some(t) = l.peek().filter(|t| t.is_word()).copied() else {
            return Err(l.expected(&format!("an expectation after {after}")));
        };
        l.pos += 1;
        let e = match t.text {
            "ok" => Expectation::Ok,
            "any" => Expectation::Any,
            "error" => Expectation::AnyError,
            "crash" => Expectation::Crash,
            "bytes" => {
                need(l, ValueType::Bytes, "bytes")?;
                let pcol = l.col();
                let p = l.pattern()?;
                if let Op::Read { len, .. } | Op::DeviceRead { len, .. } = op {
                    if p.len() != *len {
                        return Err(l.err(
                            pcol,
                            format!(
                                "pattern has {} bytes, but '{}' reads {len}",
                                p.len(),
                                op.keyword()
                            ),
                        ));
                    }
                }
                Expectation::Bytes(p)
            }
            "value" => {
                need(l, ValueType::Int, "value")?;
                Expectation::Value(l.signed("an integer")?)
            }
            "size" => {
                need(l, ValueType::Range, "size")?;
                Expectation::Size(l.int("a size in bytes")?)
            }
            "base" => {
                need(l, ValueType::Range, "base")?;
                if l.eat_punct("==") {
                    Expectation::BaseEq(self.ref_arg(l, op, col)?)
                } else if l.eat_punct("!=") {
                    Expectation::BaseNe(self.ref_arg(l, op, col)?)
                } else {
                    return Err(l.expected("'==' or '!=' after 'base'"));
                }
            }
            "type" => {
                need(l, ValueType::PointerInfo, "type")?;
                let tcol = l.col();
                let w = l.next_word("a memory type")?;
                let ty = match w.text {
                    "device" => MemoryType::Device,
                    "host" => MemoryType::Host,
                    "managed" => MemoryType::Managed,
                    "unregistered" => MemoryType::Unregistered,
                    other => {
                        return Err(l.err(
                            tcol,
                            format!(
                                "unknown memory type '{other}' (expected device, host, managed or unregistered)"
                            ),
                        ))
                    }
                };
                Expectation::Type(ty)
            }
            "device" => {
                need(l, ValueType::PointerInfo, "device")?;
                Expectation::Device(l.u32("a device number")?)
            }
            word => match ErrorKind::from_name(word) {
                Some(kind) => Expectation::Error {
                    kind,
                    name: word.to_string(),
                },
                None if looks_like_error_name(word) => {
                    return Err(l.err(col, format!("unknown error name '{word}'")));
                }
                None => {
                    return Err(l.err(
                        col,
                        format!("expected an expectation after {after}, found '{word}'"),
                    ));
                }
            },
        };
        Ok(e)
    }
}

#[cfg(test)]
mod parse_int_tests {
    use super::parse_int;

    /// The reading of an integer: the digits without separators, in the
    /// radix, times the suffix; too large for u64 is an error.
    fn by_std(text: &str) -> Result<u64, String> {
        let (digits, radix) = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
            Some(rest) => (rest, 16),
            None => (text, 10),
        };
        let (num, mult) = [("KiB", 1u64 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30)]
            .iter()
            .find_map(|&(sfx, m)| digits.strip_suffix(sfx).map(|n| (n, m)))
            .unwrap_or((digits, 1));
        let clean: String = num.chars().filter(|&c| c != '_').collect();
        if clean.is_empty() {
            return Err(format!("bad integer '{text}'"));
        }
        u64::from_str_radix(&clean, radix)
            .ok()
            .and_then(|v| v.checked_mul(mult))
            .ok_or_else(|| format!("integer '{text}' is too large"))
    }

    #[test]
    fn integers_read_as_the_standard_library_reads_their_digits() {
        for text in [
            "0",
            "7",
            "4096",
            "1_000_000",
            "2MiB",
            "64KiB",
            "1GiB",
            "0x10",
            "0XfF",
            "0xFFFF_FFFF_FFFF_FFFF",
            "18446744073709551615",
            "18446744073709551616",
            "0x1_0000_0000_0000_0000",
            "17179869184GiB",
            "17179869183GiB",
            "99999999999999999999999",
            "0x",
            "_",
            "__KiB",
        ] {
            assert_eq!(parse_int(text), by_std(text), "{text}");
        }
        assert_eq!(parse_int("2MiB"), Ok(2 << 20));
        assert!(parse_int("3TiB").is_err_and(|m| m.contains("bad size suffix 'TiB'")));
    }
}
