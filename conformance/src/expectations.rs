//! Expectations: which clause results a CI gate accepts on which hardware.
//!
//! An expectations file (TOML, `docs/expectations.md`) lists `[[expect]]`
//! entries. Each entry selects clause results by clause id (or glob) and,
//! optionally, by backend, dialect, GPU name, compute capability and driver
//! version, and states the outcome expected of them (`Fail`, `Crash`,
//! `Timeout`, `NotSupported`, `Flaky`) with a required `reason`.
//!
//! Every result of a run is then classified against the *first* entry that
//! matches it ([`classify`]): Pass, ExpectedFail, UnexpectedFail,
//! UnexpectedPass, NotSupported or Flaky. The gate ([`gate_passed`]) fails
//! only on UnexpectedFail and UnexpectedPass (Broken is always
//! UnexpectedFail), so a known failure does not block CI, and an expectation
//! that stops coming true does, which keeps the file from rotting.
//!
//! [`Gate`] is the run's observer when `--expectations` is given: it tells
//! the runner which results to re-run (clauses marked `Flaky` that did not
//! pass), prints each result with its classification, and [`Gate::finish`]
//! writes the classification into the finished report. The exit code is the
//! command line's to decide.

use crate::catalogue::Clause;
use crate::guard::guarded;
pub use crate::model::{
    classification_of, classification_totals, gate_passed, Attempt, Classification,
    ExpectationRecord, ExpectationsRun, ExpectedOutcome,
};
use crate::model::{ClauseResult, RunInfo, RunReport};
use crate::report::text::{self, describe};
use crate::runner::{self, Console, Observer, RetryPolicy, RunConfig};
use globset::{Glob, GlobBuilder, GlobMatcher, GlobSet, GlobSetBuilder};
use ipc_harness::trace::StepOutcome;
use ipc_harness::{Backend, BackendInfo, Dialect, ErrorKind, Status};
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

/// `--flaky-retries` default: a `Flaky` clause that does not pass runs up to
/// this many more times.
pub const DEFAULT_FLAKY_RETRIES: u32 = 2;

// ---------------------------------------------------------------------------
// Vocabulary

// ---------------------------------------------------------------------------
// Versions

/// A comparison operator of a [`VersionRange`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Lt,
    Le,
    Gt,
    Ge,
}

/// A version constraint such as `>=580, <590` or `9.0`: comparators joined
/// by commas, all of which must hold. Versions are dotted numbers
/// (`580.159.04`, compared numerically, `04` = 4).
///
/// A version in a comparator stands for every version it is a prefix of,
/// as in Cargo: `=580` (or plain `580`) is any 580.x, `<=580` includes
/// 580.159.04, `>580` starts at 581, `<580` ends before 580.0, `>=580`
/// starts at 580.0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionRange {
    text: String,
    comparators: Vec<(Op, Vec<u64>)>,
}

impl VersionRange {
    pub fn parse(text: &str) -> Result<VersionRange, String> {
        let hint = "expected comparators such as \">=580, <590\" or a version such as \"9.0\"";
        if text.trim().is_empty() {
            return Err(format!("empty version range ({hint})"));
        }
        let mut comparators = Vec::new();
        for part in text.split(',') {
            let part = part.trim();
            if part.is_empty() {
                return Err(format!(
                    "bad version range \"{text}\": an empty comparator ({hint})"
                ));
            }
            let (op, rest) = [
                (">=", Op::Ge),
                ("<=", Op::Le),
                ("==", Op::Eq),
                (">", Op::Gt),
                ("<", Op::Lt),
                ("=", Op::Eq),
            ]
            .into_iter()
            .find_map(|(p, op)| part.strip_prefix(p).map(|rest| (op, rest.trim_start())))
            .unwrap_or((Op::Eq, part));
            let version = parse_version_strict(rest).ok_or_else(|| {
                if rest.is_empty() {
                    format!("bad version range \"{text}\": '{part}' has no version ({hint})")
                } else {
                    format!(
                        "bad version range \"{text}\": '{rest}' is not a dotted numeric version ({hint})"
                    )
                }
            })?;
            comparators.push((op, version));
        }
        Ok(VersionRange {
            text: text.to_string(),
            comparators,
        })
    }

    /// The range as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether `version` (as a backend reports it: leading dotted digits
    /// count, anything after is ignored) lies in the range. A version with
    /// no leading digits lies in no range.
    pub fn matches(&self, version: &str) -> bool {
        let Some(v) = parse_version_lenient(version) else {
            return false;
        };
        self.comparators.iter().all(|(op, bound)| {
            let ord = compare_prefix(&v, bound);
            match op {
                Op::Eq => ord == Ordering::Equal,
                Op::Lt => ord == Ordering::Less,
                Op::Le => ord != Ordering::Greater,
                Op::Gt => ord == Ordering::Greater,
                Op::Ge => ord != Ordering::Less,
            }
        })
    }
}

impl fmt::Display for VersionRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// `v` against `bound`, looking only at as many components as `bound` has
/// (missing components of `v` are 0).
fn compare_prefix(v: &[u64], bound: &[u64]) -> Ordering {
    for (i, b) in bound.iter().enumerate() {
        let x = v.get(i).copied().unwrap_or(0);
        match x.cmp(b) {
            Ordering::Equal => {}
            other => return other,
        }
    }
    Ordering::Equal
}

fn parse_version_strict(s: &str) -> Option<Vec<u64>> {
    s.split('.')
        .map(|c| {
            if !c.is_empty() && c.bytes().all(|b| b.is_ascii_digit()) {
                c.parse::<u64>().ok()
            } else {
                None
            }
        })
        .collect()
}

fn parse_version_lenient(s: &str) -> Option<Vec<u64>> {
    let s = s.trim();
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let head = s[..end].trim_end_matches('.');
    if head.is_empty() {
        return None;
    }
    parse_version_strict(head)
}

// ---------------------------------------------------------------------------
// Entries

/// A GPU name pattern: a glob when it has glob characters, else a substring;
/// both ignore case.
#[derive(Debug, Clone)]
enum TextPattern {
    Substring(String),
    Glob(GlobMatcher),
}

impl TextPattern {
    fn new(text: &str) -> Result<TextPattern, String> {
        if has_glob_chars(text) {
            GlobBuilder::new(text)
                .case_insensitive(true)
                .build()
                .map(|g| TextPattern::Glob(g.compile_matcher()))
                .map_err(|e| format!("bad glob \"{text}\": {}", e.kind()))
        } else if text.trim().is_empty() {
            Err("an empty pattern".to_string())
        } else {
            Ok(TextPattern::Substring(text.to_lowercase()))
        }
    }

    fn matches(&self, s: &str) -> bool {
        match self {
            TextPattern::Substring(p) => s.to_lowercase().contains(p.as_str()),
            TextPattern::Glob(g) => g.is_match(s),
        }
    }
}

fn has_glob_chars(s: &str) -> bool {
    s.contains(['*', '?', '[', ']', '{', '}', '\\'])
}

/// One `[[expect]]` entry.
#[derive(Debug, Clone)]
pub struct Entry {
    /// 1-based position among the file's entries.
    pub index: usize,
    /// Line of the entry's `[[expect]]` header (1-based).
    pub line: usize,
    /// Clause id or glob, as written.
    pub clause: String,
    clause_glob: Glob,
    /// Compiled on the first [`Entry::matches`] (a file's entries are
    /// matched through [`Expectations`]'s automata instead), the same way;
    /// `None`: it does not compile, and the file was refused.
    clause_matcher: OnceLock<Option<GlobSet>>,
    /// GPU name substring or glob, as written.
    pub gpu: Option<String>,
    gpu_pattern: Option<TextPattern>,
    /// Compute capability (`9.0`, `>=8.0, <9.0`).
    pub cc: Option<VersionRange>,
    /// Kernel driver version range (`>=580, <590`).
    pub driver: Option<VersionRange>,
    /// `sim` or `cuda`.
    pub backend: Option<String>,
    pub dialect: Option<Dialect>,
    pub outcome: ExpectedOutcome,
    /// With `Fail`: the error the failing step must have observed (a kind
    /// such as `InvalidValue` or either dialect's name).
    pub error: Option<String>,
    pub reason: String,
    pub link: Option<String>,
}

/// What an entry is matched against: one result on one platform.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    pub id: &'a str,
    pub backend: &'a str,
    pub dialect: Dialect,
    pub gpu_name: Option<&'a str>,
    pub compute_capability: Option<&'a str>,
    pub driver_version: Option<&'a str>,
}

/// The hardware and driver of a run: [`BackendInfo`] or the report's
/// [`RunInfo`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Platform {
    pub gpu_name: Option<String>,
    pub compute_capability: Option<String>,
    pub driver_version: Option<String>,
}

impl Platform {
    pub fn from_info(info: &BackendInfo) -> Platform {
        Platform {
            gpu_name: info.gpu_name.clone(),
            compute_capability: info.compute_capability.clone(),
            driver_version: info.driver_version.clone(),
        }
    }

    pub fn from_run(run: &RunInfo) -> Platform {
        Platform {
            gpu_name: run.gpu_name.clone(),
            compute_capability: run.compute_capability.clone(),
            driver_version: run.driver_version.clone(),
        }
    }

    /// The subject for `result` on this platform.
    pub fn subject<'a>(&'a self, result: &'a ClauseResult) -> Subject<'a> {
        Subject {
            id: &result.id,
            backend: &result.backend,
            dialect: result.dialect,
            gpu_name: self.gpu_name.as_deref(),
            compute_capability: self.compute_capability.as_deref(),
            driver_version: self.driver_version.as_deref(),
        }
    }
}

impl Entry {
    /// Whether every condition of the entry holds for `s`. A condition on
    /// the GPU, compute capability or driver never holds where the backend
    /// does not report that fact.
    pub fn matches(&self, s: &Subject) -> bool {
        self.matches_clause(s.id) && self.matches_platform(s)
    }

    /// Every condition of [`Entry::matches`] but the clause pattern.
    fn matches_platform(&self, s: &Subject) -> bool {
        self.backend.as_deref().is_none_or(|b| b == s.backend)
            && self.dialect.is_none_or(|d| d == s.dialect)
            && self
                .gpu_pattern
                .as_ref()
                .is_none_or(|p| s.gpu_name.is_some_and(|g| p.matches(g)))
            && self
                .cc
                .as_ref()
                .is_none_or(|r| s.compute_capability.is_some_and(|v| r.matches(v)))
            && self
                .driver
                .as_ref()
                .is_none_or(|r| s.driver_version.is_some_and(|v| r.matches(v)))
    }

    /// Whether the clause pattern matches `id`, whatever the platform.
    pub fn matches_clause(&self, id: &str) -> bool {
        self.clause_matcher
            .get_or_init(|| GlobSet::new([self.clause_glob.clone()]).ok())
            .as_ref()
            .is_some_and(|set| set.is_match(id))
    }
}

/// A parsed expectations file.
#[derive(Debug, Clone)]
pub struct Expectations {
    /// The file, as given.
    pub path: PathBuf,
    pub entries: Vec<Entry>,
    /// Every entry's clause pattern, compiled together.
    clauses: ClauseIndex,
}

/// The clause patterns of a file's entries compiled into a few automata
/// (a `GlobSet` each), in entry order: one search per automaton finds
/// every entry whose pattern matches an id. Matching each entry's own
/// pattern against each result made 20,000 entries take 20 s against the
/// catalogue. An automaton takes at most [`ClauseIndex::CHUNK`] patterns,
/// so that tens of thousands of wildcard patterns stay within the regex
/// engine's size limit.
#[derive(Debug, Clone, Default)]
struct ClauseIndex {
    /// (position of the automaton's first entry, the automaton).
    sets: Vec<(usize, GlobSet)>,
}

impl ClauseIndex {
    const CHUNK: usize = 1024;

    /// Compile `globs`; `Err(i)`: pattern `i` does not compile even alone.
    fn new(globs: &[&Glob]) -> Result<ClauseIndex, usize> {
        let mut index = ClauseIndex::default();
        for start in (0..globs.len()).step_by(Self::CHUNK) {
            let end = (start + Self::CHUNK).min(globs.len());
            index.compile(globs, start, end)?;
        }
        Ok(index)
    }

    /// Compile `globs[start..end]`, in halves if they do not fit together.
    fn compile(&mut self, globs: &[&Glob], start: usize, end: usize) -> Result<(), usize> {
        let mut set = GlobSetBuilder::new();
        for g in &globs[start..end] {
            set.add((*g).clone());
        }
        match set.build() {
            Ok(set) => {
                self.sets.push((start, set));
                Ok(())
            }
            Err(_) if end - start == 1 => Err(start),
            Err(_) => {
                let mid = start + (end - start) / 2;
                self.compile(globs, start, mid)?;
                self.compile(globs, mid, end)
            }
        }
    }

    /// The first entry, by position, whose pattern matches `id` and that
    /// `accept`s.
    fn first(&self, id: &str, mut accept: impl FnMut(usize) -> bool) -> Option<usize> {
        let mut found = Vec::new();
        for (first, set) in &self.sets {
            set.matches_into(id, &mut found);
            if let Some(i) = found.iter().map(|i| first + i).find(|&i| accept(i)) {
                return Some(i);
            }
        }
        None
    }

    /// Which of `entries` entries' patterns match at least one of `ids`.
    fn matching_any(&self, entries: usize, ids: &[&str]) -> Vec<bool> {
        let mut matched = vec![false; entries];
        let mut found = Vec::new();
        for id in ids {
            for (first, set) in &self.sets {
                set.matches_into(id, &mut found);
                for &i in &found {
                    matched[first + i] = true;
                }
            }
        }
        matched
    }
}

/// One thing wrong in an expectations file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// 1-based entry index, when the problem is in an entry.
    pub entry: Option<usize>,
    /// 1-based line, when known.
    pub line: Option<usize>,
    pub message: String,
}

/// Why an expectations file was refused: every problem found, each with
/// the file, line and entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectationsError {
    pub file: String,
    pub problems: Vec<Problem>,
}

impl fmt::Display for ExpectationsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            f.write_str(&self.file)?;
            if let Some(line) = p.line {
                write!(f, ":{line}")?;
            }
            f.write_str(": ")?;
            if let Some(entry) = p.entry {
                write!(f, "[[expect]] entry {entry}: ")?;
            }
            f.write_str(&p.message)?;
        }
        Ok(())
    }
}

impl std::error::Error for ExpectationsError {}

const KEYS: [&str; 10] = [
    "clause", "outcome", "reason", "link", "error", "backend", "dialect", "gpu", "cc", "driver",
];

impl Expectations {
    /// Read and parse `path`.
    pub fn load(path: &Path) -> Result<Expectations, ExpectationsError> {
        let text = crate::safe_fs::read_bounded_text(
            path,
            crate::limits::MAX_EXPECTATIONS_FILE_BYTES,
            "an expectations file",
        )
        .map_err(|e| ExpectationsError {
            file: path.display().to_string(),
            problems: vec![Problem {
                entry: None,
                line: None,
                message: format!("cannot read: {e}"),
            }],
        })?;
        Expectations::parse(&text, path)
    }

    /// Parse `text`; `path` names the file in errors and in reports. Never
    /// panics: a panic in the TOML parser is a problem too.
    pub fn parse(text: &str, path: &Path) -> Result<Expectations, ExpectationsError> {
        let file = path.display().to_string();
        let parsed = guarded(|| parse_entries(text)).unwrap_or_else(|panic| {
            Err(vec![Problem {
                entry: None,
                line: None,
                message: format!("the TOML parser panicked: {panic}"),
            }])
        });
        match parsed {
            Ok(entries) => {
                let globs: Vec<&Glob> = entries.iter().map(|e| &e.clause_glob).collect();
                let clauses = ClauseIndex::new(&globs).map_err(|i| ExpectationsError {
                    file: file.clone(),
                    problems: vec![Problem {
                        entry: Some(entries[i].index),
                        line: Some(entries[i].line),
                        message: format!(
                            "the glob in `clause` is too large to compile ({} bytes)",
                            entries[i].clause.len()
                        ),
                    }],
                })?;
                Ok(Expectations {
                    path: path.to_path_buf(),
                    entries,
                    clauses,
                })
            }
            Err(problems) => Err(ExpectationsError { file, problems }),
        }
    }

    /// The first entry that matches `s`.
    pub fn first_match(&self, s: &Subject) -> Option<&Entry> {
        let i = self
            .clauses
            .first(s.id, |i| self.entries[i].matches_platform(s))?;
        Some(&self.entries[i])
    }

    /// Which entries' clause patterns match at least one of `ids`, by
    /// entry position.
    fn matching_any(&self, ids: &[&str]) -> Vec<bool> {
        self.clauses.matching_any(self.entries.len(), ids)
    }
}

/// Line and column of byte offsets in one text, found by binary search in
/// the newline offsets counted once (counting from the start of the file
/// for every key made large files quadratic).
struct LineIndex<'t> {
    text: &'t str,
    newlines: Vec<usize>,
}

impl<'t> LineIndex<'t> {
    fn new(text: &'t str) -> LineIndex<'t> {
        let newlines = text
            .bytes()
            .enumerate()
            .filter(|&(_, b)| b == b'\n')
            .map(|(i, _)| i)
            .collect();
        LineIndex { text, newlines }
    }

    /// 1-based line of byte `offset`.
    fn line(&self, offset: usize) -> usize {
        let end = offset.min(self.text.len());
        self.newlines.partition_point(|&n| n < end) + 1
    }

    /// 1-based column (in characters) of byte `offset`.
    fn column(&self, offset: usize) -> usize {
        let end = offset.min(self.text.len());
        let line = self.line(end);
        let start = if line == 1 {
            0
        } else {
            self.newlines[line - 2] + 1
        };
        self.text
            .get(start..end)
            .map_or(1, |s| s.chars().count() + 1)
    }
}

/// Entries sorted by where they appear (the table's own order is by key).
fn in_file_order<'a, 'i>(
    table: &'a DeTable<'i>,
) -> Vec<(
    &'a Spanned<std::borrow::Cow<'i, str>>,
    &'a Spanned<DeValue<'i>>,
)> {
    let mut items: Vec<_> = table.iter().collect();
    items.sort_by_key(|(k, _)| k.span().start);
    items
}

fn parse_entries(text: &str) -> Result<Vec<Entry>, Vec<Problem>> {
    let lines = LineIndex::new(text);
    let doc = DeTable::parse(text).map_err(|e| {
        let (line, message) = match e.span() {
            Some(span) => (
                Some(lines.line(span.start)),
                format!(
                    "column {}: TOML syntax error: {}",
                    lines.column(span.start),
                    e.message()
                ),
            ),
            None => (None, format!("TOML syntax error: {}", e.message())),
        };
        vec![Problem {
            entry: None,
            line,
            message,
        }]
    })?;
    let mut problems = Vec::new();
    let mut entries = Vec::new();
    for (key, value) in in_file_order(doc.get_ref()) {
        let line = Some(lines.line(key.span().start));
        if key.get_ref().as_ref() != "expect" {
            problems.push(Problem {
                entry: None,
                line,
                message: format!(
                    "unknown key `{}` at the top level (the only one is `expect`: write entries as [[expect]])",
                    key.get_ref()
                ),
            });
            continue;
        }
        let Some(array) = value.get_ref().as_array() else {
            problems.push(Problem {
                entry: None,
                line,
                message: format!(
                    "`expect` must be an array of tables (write each entry as [[expect]]), found a {}",
                    value.get_ref().type_str()
                ),
            });
            continue;
        };
        for (i, item) in array.iter().enumerate() {
            let index = i + 1;
            let entry_line = lines.line(item.span().start);
            match item.get_ref().as_table() {
                Some(table) => match parse_entry(&lines, index, entry_line, table) {
                    Ok(e) => entries.push(e),
                    Err(mut ps) => {
                        ps.sort_by_key(|p| p.line);
                        problems.append(&mut ps)
                    }
                },
                None => problems.push(Problem {
                    entry: Some(index),
                    line: Some(entry_line),
                    message: format!(
                        "an entry must be a table, found a {}",
                        item.get_ref().type_str()
                    ),
                }),
            }
        }
    }
    if problems.is_empty() {
        Ok(entries)
    } else {
        Err(problems)
    }
}

fn parse_entry(
    lines: &LineIndex<'_>,
    index: usize,
    entry_line: usize,
    table: &DeTable<'_>,
) -> Result<Entry, Vec<Problem>> {
    let mut problems = Vec::new();
    let mut problem = |line: usize, message: String| {
        problems.push(Problem {
            entry: Some(index),
            line: Some(line),
            message,
        })
    };
    // Every key: known, and a string.
    let mut values: BTreeMap<&str, (String, usize)> = BTreeMap::new();
    for (key, value) in in_file_order(table) {
        let name = key.get_ref().as_ref();
        let line = lines.line(key.span().start);
        let Some(known) = KEYS.iter().find(|k| **k == name) else {
            problem(
                line,
                format!("unknown key `{name}` (known keys: {})", KEYS.join(", ")),
            );
            continue;
        };
        match value.get_ref().as_str() {
            Some(s) => {
                values.insert(known, (s.to_string(), line));
            }
            None => problem(
                line,
                format!(
                    "`{name}` must be a string, found a {}{}",
                    value.get_ref().type_str(),
                    if name == "cc" {
                        " (write cc = \"9.0\")"
                    } else {
                        ""
                    }
                ),
            ),
        }
    }
    let get = |k: &str| values.get(k).cloned();

    let clause = match get("clause") {
        None => {
            problem(
                entry_line,
                "missing required key `clause` (a clause id or glob)".into(),
            );
            None
        }
        Some((c, line)) if c.trim().is_empty() => {
            problem(line, "`clause` is empty".into());
            None
        }
        Some((c, line)) => match Glob::new(&c) {
            Ok(g) => Some((c, g)),
            Err(e) => {
                problem(line, format!("bad glob in `clause` \"{c}\": {}", e.kind()));
                None
            }
        },
    };
    let outcome = match get("outcome") {
        None => {
            problem(
                entry_line,
                "missing required key `outcome` (Fail, Crash, Timeout, NotSupported or Flaky)"
                    .into(),
            );
            None
        }
        Some((o, line)) => match ExpectedOutcome::from_name(&o) {
            Some(o) => Some(o),
            None => {
                problem(
                    line,
                    format!(
                        "bad outcome \"{o}\" (expected Fail, Crash, Timeout, NotSupported or Flaky)"
                    ),
                );
                None
            }
        },
    };
    let reason = match get("reason") {
        None => {
            problem(
                entry_line,
                "missing required key `reason` (why this outcome is expected)".into(),
            );
            None
        }
        Some((r, line)) if r.trim().is_empty() => {
            problem(
                line,
                "`reason` is empty (say why this outcome is expected)".into(),
            );
            None
        }
        Some((r, _)) => Some(r),
    };
    let link = match get("link") {
        Some((l, line)) if l.trim().is_empty() => {
            problem(line, "`link` is empty (leave it out instead)".into());
            None
        }
        other => other.map(|(l, _)| l),
    };
    let error = match get("error") {
        None => None,
        Some((e, line)) => {
            if outcome.is_some_and(|o| o != ExpectedOutcome::Fail) {
                problem(
                    line,
                    format!(
                        "`error` only goes with outcome = \"Fail\" (this entry expects {})",
                        outcome.map(|o| o.name()).unwrap_or("?")
                    ),
                );
                None
            } else if !is_error_name(&e) {
                problem(
                    line,
                    format!(
                        "unknown error \"{e}\" (write a kind such as InvalidValue, or a dialect's name such as cudaErrorInvalidValue or CUDA_ERROR_INVALID_VALUE)"
                    ),
                );
                None
            } else {
                Some(e)
            }
        }
    };
    let backend = match get("backend") {
        None => None,
        Some((b, _)) if b == "sim" || b == "cuda" => Some(b),
        Some((b, line)) => {
            problem(line, format!("bad backend \"{b}\" (expected sim or cuda)"));
            None
        }
    };
    let dialect = match get("dialect") {
        None => None,
        Some((d, _)) if d == "runtime" => Some(Dialect::Runtime),
        Some((d, _)) if d == "driver" => Some(Dialect::Driver),
        Some((d, line)) => {
            problem(
                line,
                format!("bad dialect \"{d}\" (expected runtime or driver)"),
            );
            None
        }
    };
    let gpu = match get("gpu") {
        None => None,
        Some((g, line)) => match TextPattern::new(&g) {
            Ok(p) => Some((g, p)),
            Err(e) => {
                problem(line, format!("bad `gpu`: {e}"));
                None
            }
        },
    };
    let mut range = |key: &str| match get(key) {
        None => None,
        Some((r, line)) => match VersionRange::parse(&r) {
            Ok(r) => Some(r),
            Err(e) => {
                problem(line, format!("bad `{key}`: {e}"));
                None
            }
        },
    };
    let cc = range("cc");
    let driver = range("driver");

    match (clause, outcome, reason) {
        (Some((clause, clause_glob)), Some(outcome), Some(reason)) if problems.is_empty() => {
            let (gpu, gpu_pattern) = match gpu {
                Some((g, p)) => (Some(g), Some(p)),
                None => (None, None),
            };
            Ok(Entry {
                index,
                line: entry_line,
                clause,
                clause_glob,
                clause_matcher: OnceLock::new(),
                gpu,
                gpu_pattern,
                cc,
                driver,
                backend,
                dialect,
                outcome,
                error,
                reason,
                link,
            })
        }
        _ => Err(problems),
    }
}

/// A name the error table knows (a kind, or either dialect's name), or the
/// spelling of a code it does not know (`cudaError(999)`, `CUresult(999)`,
/// `hipError_t(999)`).
fn is_error_name(name: &str) -> bool {
    ErrorKind::from_name(name).is_some() || unknown_code_name(name)
}

fn unknown_code_name(name: &str) -> bool {
    ["cudaError(", "CUresult(", "hipError_t("]
        .iter()
        .any(|prefix| {
            name.strip_prefix(prefix)
                .and_then(|rest| rest.strip_suffix(')'))
                .is_some_and(|n| n.trim_start_matches('-').parse::<i64>().is_ok())
        })
}

/// Whether an observed error `name` is the `expected` one: the same
/// spelling, or the same dialect-neutral kind.
pub fn error_matches(expected: &str, observed: &str) -> bool {
    expected == observed
        || ErrorKind::from_name(expected).is_some_and(|k| ErrorKind::from_name(observed) == Some(k))
}

// ---------------------------------------------------------------------------
// Classification

/// The first step whose expectation did not hold.
fn failing_step(r: &ClauseResult) -> Option<&ipc_harness::trace::StepRecord> {
    r.trace
        .as_ref()?
        .steps
        .iter()
        .find(|s| s.check.as_ref().is_some_and(|c| !c.passed))
}

/// Classify `result` against `entry` (the first entry that matches it, if
/// any). `attempts` are the statuses of every attempt, the first included
/// (empty = just `result.status`); only a Flaky entry causes more than one.
/// Returns the classification and, where useful, why.
pub fn classify(
    entry: Option<&Entry>,
    result: &ClauseResult,
    attempts: &[Status],
) -> (Classification, String) {
    use Classification as C;
    let status = result.status;
    let first = [status];
    let attempts = if attempts.is_empty() {
        &first[..]
    } else {
        attempts
    };
    if attempts.contains(&Status::Broken) {
        let why = if entry.is_some() {
            "Broken is always unexpected (the harness or the clause file is at fault)"
        } else {
            ""
        };
        return (C::UnexpectedFail, why.to_string());
    }
    let Some(entry) = entry else {
        return (C::unmatched(status), String::new());
    };
    match (status, entry.outcome) {
        (Status::Pass, ExpectedOutcome::Flaky) => (C::Pass, String::new()),
        (Status::Pass, expected) => (
            C::UnexpectedPass,
            format!("expected {expected}, but it passed"),
        ),
        (Status::NotSupported, _) => (C::NotSupported, String::new()),
        (_, ExpectedOutcome::Flaky) => {
            if attempts.iter().any(|a| *a != status) {
                let seq: Vec<&str> = attempts.iter().map(|s| s.name()).collect();
                (C::Flaky, format!("attempts: {}", seq.join(", ")))
            } else {
                let why = if attempts.len() == 1 {
                    format!("marked Flaky, but {} with no re-run to differ", status.name())
                } else {
                    format!(
                        "marked Flaky, but {} in all {} attempts",
                        status.name(),
                        attempts.len()
                    )
                };
                (C::UnexpectedFail, why)
            }
        }
        (_, expected) if expected.status() != Some(status) => (
            C::UnexpectedFail,
            format!("expected {expected}, got {}", status.name()),
        ),
        (Status::Fail, _) => match &entry.error {
            None => (C::ExpectedFail, String::new()),
            Some(want) => match failing_step(result).map(|s| (s.line, &s.outcome)) {
                Some((_, StepOutcome::Error { name, .. })) if error_matches(want, name) => {
                    (C::ExpectedFail, String::new())
                }
                Some((line, got)) => (
                    C::UnexpectedFail,
                    format!(
                        "expected error {want}, but the failing step (line {line}) got {}",
                        text::outcome_text(got)
                    ),
                ),
                None => (
                    C::UnexpectedFail,
                    format!("expected error {want}, but no step failed (a hazard check or the harness did)"),
                ),
            },
        },
        _ => (C::ExpectedFail, String::new()),
    }
}

/// The record of `result` against `entry`, with its attempts (more than
/// one only when re-run).
pub fn record(
    entry: Option<&Entry>,
    result: &ClauseResult,
    attempts: Vec<Attempt>,
) -> ExpectationRecord {
    let statuses: Vec<Status> = attempts.iter().map(|a| a.status).collect();
    let (classification, detail) = classify(entry, result, &statuses);
    ExpectationRecord {
        classification,
        entry: entry.map(|e| e.index),
        line: entry.map(|e| e.line),
        expected: entry.map(|e| e.outcome),
        error: entry.and_then(|e| e.error.clone()),
        reason: entry.map(|e| e.reason.clone()),
        link: entry.and_then(|e| e.link.clone()),
        detail,
        attempts: if attempts.len() > 1 {
            attempts
        } else {
            Vec::new()
        },
    }
}

/// `51 results: 49 Pass, 2 ExpectedFail`.
pub fn classification_line(results: &[ClauseResult]) -> String {
    let mut counts: BTreeMap<Classification, usize> = BTreeMap::new();
    for r in results {
        *counts.entry(classification_of(r)).or_default() += 1;
    }
    let parts: Vec<String> = Classification::ALL
        .iter()
        .filter_map(|c| counts.get(c).map(|n| format!("{n} {c}")))
        .collect();
    let noun = if results.len() == 1 {
        "result"
    } else {
        "results"
    };
    if parts.is_empty() {
        format!("0 {noun}")
    } else {
        format!("{} {noun}: {}", results.len(), parts.join(", "))
    }
}

/// Classify every result of `report` (with the attempts of re-run Flaky
/// clauses, keyed by [`attempt_key`]), record the file in the run info and
/// set the classification totals.
pub fn apply(
    exp: &Expectations,
    report: &mut RunReport,
    attempts: &HashMap<(String, Dialect, String), Vec<Attempt>>,
    flaky_retries: u32,
) {
    let platform = Platform::from_run(&report.run);
    for r in &mut report.results {
        let entry = exp.first_match(&platform.subject(r));
        let tries = attempts.get(&attempt_key(r)).cloned().unwrap_or_default();
        r.expectation = Some(record(entry, r, tries));
    }
    report.run.expectations = Some(ExpectationsRun {
        file: exp.path.display().to_string(),
        entries: exp.entries.len(),
        flaky_retries,
    });
    report.classification_totals = classification_totals(&report.results);
}

/// A result's identity within a run: id, dialect, clause file.
pub fn attempt_key(r: &ClauseResult) -> (String, Dialect, String) {
    (r.id.clone(), r.dialect, r.path.clone())
}

// ---------------------------------------------------------------------------
// Text

/// The console lines of a result: [`runner::result_lines`] with the
/// classification after the first line (left out for a plain Pass or
/// NotSupported that no entry matched), and the attempts of a re-run.
pub fn result_lines(r: &ClauseResult, show_dialect: bool) -> String {
    let mut out = runner::result_lines(r, show_dialect);
    let Some(rec) = &r.expectation else {
        return out;
    };
    let plain = rec.entry.is_none()
        && matches!(
            rec.classification,
            Classification::Pass | Classification::NotSupported
        );
    if !plain {
        let first_end = out.find('\n').unwrap_or(out.len());
        out.insert_str(first_end, &format!("  => {}", describe(rec)));
    }
    if !rec.attempts.is_empty() && rec.classification != Classification::Flaky {
        let seq: Vec<&str> = rec.attempts.iter().map(|a| a.status.name()).collect();
        let _ = write!(out, "\n        attempts: {}", seq.join(", "));
    }
    out
}

/// Lines printed after the run: the classification totals, the verdict of
/// the gate, and entries that matched nothing (with `known_ids`, the whole
/// catalogue's ids, saying when an entry's clause pattern matches no clause
/// at all).
pub fn footer_lines(report: &RunReport, exp: &Expectations, known_ids: &[&str]) -> Vec<String> {
    let mut lines = vec![format!(
        "expectations {} ({} entr{}): {}",
        exp.path.display(),
        exp.entries.len(),
        if exp.entries.len() == 1 { "y" } else { "ies" },
        classification_line(&report.results)
    )];
    let unexpected = |gated: bool| -> Vec<&ClauseResult> {
        report
            .results
            .iter()
            .filter(|r| classification_of(r).fails_gate() || r.status == Status::Broken)
            .filter(|r| report.gates(r) == gated)
            .collect()
    };
    let listed = |lines: &mut Vec<String>, results: Vec<&ClauseResult>| {
        for r in results {
            let what = match &r.expectation {
                Some(rec) => describe(rec),
                None => Classification::UnexpectedFail.name().to_string(),
            };
            lines.push(format!(
                "  {} [{}] {} ({}): {what}",
                r.id,
                r.dialect,
                r.status.name(),
                crate::model::tier_name(r.tier)
            ));
        }
    };
    let gated = unexpected(true);
    let tiers = crate::model::tiers_text(report.gated_tiers());
    if gated.is_empty() {
        lines.push(format!(
            "gate: passed (nothing unexpected in the gated tiers: {tiers})"
        ));
    } else {
        lines.push(format!(
            "gate: FAILED ({} unexpected result{} in the gated tiers: {tiers})",
            gated.len(),
            if gated.len() == 1 { "" } else { "s" }
        ));
        listed(&mut lines, gated);
    }
    // An expectations entry still classifies a clause of an ungated tier;
    // what it finds unexpected is told, never gated (--tiers all gates it).
    let ungated = unexpected(false);
    if !ungated.is_empty() {
        lines.push(format!(
            "not gated: {} unexpected result{} outside the gated tiers (reported only; \
             --tiers all gates them)",
            ungated.len(),
            if ungated.len() == 1 { "" } else { "s" }
        ));
        listed(&mut lines, ungated);
    }
    let used: std::collections::BTreeSet<usize> = report
        .results
        .iter()
        .filter_map(|r| r.expectation.as_ref().and_then(|e| e.entry))
        .collect();
    let known = exp.matching_any(known_ids);
    for (e, known) in exp.entries.iter().zip(known) {
        if used.contains(&e.index) {
            continue;
        }
        let why = if known {
            "in this run"
        } else {
            "(its clause pattern matches no clause in the catalogue)"
        };
        lines.push(format!(
            "note: {}:{}: entry {} (clause = \"{}\") matched no result {why}",
            exp.path.display(),
            e.line,
            e.index,
            e.clause
        ));
    }
    lines
}

// ---------------------------------------------------------------------------
// The observer

/// The run's observer. Without expectations it is the [`Console`], nothing
/// more. With them, it prints each result with its classification and keeps
/// the attempts of clauses the runner re-ran ([`Gate::retry_policy`]: a
/// clause whose first matching entry is `Flaky` and that did not pass, up
/// to `flaky_retries` more times); [`Gate::finish`] then classifies the
/// finished report ([`apply`]). It never runs a clause itself.
pub struct Gate<'a> {
    console: Console,
    active: Option<Active<'a>>,
}

struct Active<'a> {
    exp: &'a Expectations,
    platform: Platform,
    retries: u32,
    quiet: bool,
    show_dialect: bool,
    attempts: HashMap<(String, Dialect, String), Vec<Attempt>>,
}

impl<'a> Gate<'a> {
    pub fn new(
        exp: Option<&'a Expectations>,
        console: Console,
        backend: &dyn Backend,
        cfg: &RunConfig,
        flaky_retries: u32,
        quiet: bool,
    ) -> Gate<'a> {
        let active = exp.map(|exp| {
            // The runner asks too; the real backend probes once.
            let info = guarded(|| backend.info()).unwrap_or_default();
            Active {
                exp,
                platform: Platform::from_info(&info),
                retries: flaky_retries,
                quiet,
                show_dialect: cfg.dialects.len() > 1,
                attempts: HashMap::new(),
            }
        });
        Gate { console, active }
    }

    /// The runner's re-runs ([`RunConfig::retries`]): `flaky_retries` for a
    /// result whose first matching entry is `Flaky`, none otherwise (and
    /// none without expectations).
    pub fn retry_policy(&self) -> RetryPolicy {
        let Some(a) = &self.active else {
            return RetryPolicy::default();
        };
        let (exp, platform, retries) = (a.exp.clone(), a.platform.clone(), a.retries);
        RetryPolicy::new(move |r| {
            let entry = exp.first_match(&platform.subject(r));
            if entry.is_some_and(|e| e.outcome == ExpectedOutcome::Flaky) {
                retries
            } else {
                0
            }
        })
    }

    /// Classify `report` (left as it is without expectations).
    pub fn finish(&self, report: &mut RunReport) {
        if let Some(a) = &self.active {
            apply(a.exp, report, &a.attempts, a.retries);
        }
    }
}

impl Observer for Gate<'_> {
    fn begin(&mut self, total: usize) {
        self.console.begin(total)
    }

    fn clause_started(&mut self, clause: &Clause, dialect: Dialect) {
        self.console.clause_started(clause, dialect)
    }

    fn clause_finished(&mut self, r: &ClauseResult, attempts: &[Attempt]) {
        let Some(a) = &mut self.active else {
            self.console.clause_finished(r, attempts);
            return;
        };
        self.console.tick();
        let entry = a.exp.first_match(&a.platform.subject(r));
        let rec = record(entry, r, attempts.to_vec());
        if attempts.len() > 1 {
            a.attempts.insert(attempt_key(r), attempts.to_vec());
        }
        let shown = !a.quiet
            || rec.classification.fails_gate()
            || rec.classification == Classification::Flaky;
        if shown {
            let mut classified = r.clone();
            classified.expectation = Some(rec);
            let lines = runner::mark_ungated(
                result_lines(&classified, a.show_dialect),
                &classified,
                self.console.gated_tiers(),
            );
            self.console.print_result(&lines);
        }
    }

    fn end(&mut self) {
        self.console.end()
    }

    fn stop_requested(&mut self) -> bool {
        self.console.stop_requested()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixtures;
    use ipc_harness::trace::{CheckResult, ValueSummary};
    use ipc_harness::Tier;

    fn parse(text: &str) -> Result<Expectations, ExpectationsError> {
        Expectations::parse(text, Path::new("ci/exp.toml"))
    }

    fn one(text: &str) -> Entry {
        let mut e = parse(text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(e.entries.len(), 1);
        e.entries.remove(0)
    }

    #[test]
    fn version_ranges_compare_numerically_with_prefix_semantics() {
        let r = VersionRange::parse(">=580, <590").unwrap();
        assert!(r.matches("580.159.04"));
        assert!(r.matches("580"));
        assert!(r.matches("589.99"));
        assert!(!r.matches("590.0"));
        assert!(!r.matches("579.999.99"));
        assert!(!r.matches("unknown"));
        let le = VersionRange::parse("<=580").unwrap();
        assert!(le.matches("580.159.04") && le.matches("12") && !le.matches("581"));
        let gt = VersionRange::parse("> 580").unwrap();
        assert!(!gt.matches("580.159.04") && gt.matches("581.0.1"));
        let eq = VersionRange::parse("580.159").unwrap();
        assert!(eq.matches("580.159.04") && !eq.matches("580.15") && !eq.matches("580.1590"));
        let eq = VersionRange::parse("==580.159.4").unwrap();
        assert!(eq.matches("580.159.04"), "leading zeros are numeric");
        assert!(VersionRange::parse("9.0").unwrap().matches("9.0"));
        assert!(!VersionRange::parse("9.0").unwrap().matches("8.9"));
        // Trailing text on the observed side is ignored.
        assert!(VersionRange::parse("580")
            .unwrap()
            .matches("580.159.04 (open)"));
        for bad in [
            "",
            " ",
            ">=",
            ">=58x",
            "~580",
            "580,",
            ">=580,,<590",
            "=>580",
            "1..2",
            "v580",
        ] {
            assert!(VersionRange::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn gpu_patterns_are_substrings_or_globs_ignoring_case() {
        let sub = TextPattern::new("h100").unwrap();
        assert!(sub.matches("NVIDIA H100 80GB HBM3"));
        assert!(!sub.matches("NVIDIA H200"));
        let glob = TextPattern::new("*H100*").unwrap();
        assert!(glob.matches("nvidia h100 80gb"));
        let anchored = TextPattern::new("NVIDIA H?00*").unwrap();
        assert!(anchored.matches("NVIDIA H200 NVL"));
        assert!(!anchored.matches("simulated (H100-like)"));
        assert!(TextPattern::new("[H100").is_err());
        assert!(TextPattern::new(" ").is_err());
    }

    #[test]
    fn error_names_match_by_spelling_or_kind() {
        assert!(error_matches(
            "cudaErrorInvalidValue",
            "cudaErrorInvalidValue"
        ));
        assert!(error_matches("InvalidValue", "cudaErrorInvalidValue"));
        assert!(error_matches("InvalidValue", "CUDA_ERROR_INVALID_VALUE"));
        assert!(error_matches(
            "cudaErrorInvalidValue",
            "CUDA_ERROR_INVALID_VALUE"
        ));
        assert!(!error_matches(
            "InvalidValue",
            "cudaErrorInvalidResourceHandle"
        ));
        assert!(error_matches("cudaError(999)", "cudaError(999)"));
        assert!(is_error_name("CUresult(-3)"));
        assert!(is_error_name("hipError_t(1052)"));
        assert!(!is_error_name("cudaErrorNoSuchThing"));
        assert!(!is_error_name("cudaError(x)"));
    }

    #[test]
    fn the_example_of_the_documentation_parses() {
        let exp = parse(
            r#"
# single-GPU runners
[[expect]]
clause = "mem.context.two-devices"
backend = "cuda"
gpu = "*H100*"
outcome = "NotSupported"
reason = "single-GPU runners"

[[expect]]
clause = "mem.lifetime.free-before-open"
driver = ">=580, <590"
outcome = "Fail"
error = "cudaErrorInvalidValue"
reason = "driver 580 refuses opens of freed exports"
link = "https://example.invalid/bug/1"
"#,
        )
        .unwrap();
        assert_eq!(exp.entries.len(), 2);
        let a = &exp.entries[0];
        assert_eq!((a.index, a.line), (1, 3));
        assert_eq!(a.backend.as_deref(), Some("cuda"));
        assert_eq!(a.gpu.as_deref(), Some("*H100*"));
        assert_eq!(a.outcome, ExpectedOutcome::NotSupported);
        let b = &exp.entries[1];
        assert_eq!((b.index, b.line), (2, 10));
        assert_eq!(b.driver.as_ref().unwrap().as_str(), ">=580, <590");
        assert_eq!(b.error.as_deref(), Some("cudaErrorInvalidValue"));
        assert_eq!(b.link.as_deref(), Some("https://example.invalid/bug/1"));
    }

    #[test]
    fn every_problem_is_reported_with_file_line_and_entry() {
        let err = parse(
            "[[expect]]\nclause = \"a.b\"\noutcome = \"Fail\"\n\n\
             [[expect]]\nclause = \"a.[c\"\noutcome = \"Sometimes\"\nreason = \"r\"\ncolour = \"red\"\n",
        )
        .unwrap_err();
        let text = err.to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(err.problems.len(), 4, "{text}");
        assert!(
            lines[0]
                .starts_with("ci/exp.toml:1: [[expect]] entry 1: missing required key `reason`"),
            "{text}"
        );
        assert!(
            lines[1].starts_with("ci/exp.toml:6: [[expect]] entry 2: bad glob in `clause`"),
            "{text}"
        );
        assert!(
            lines[2].starts_with("ci/exp.toml:7: [[expect]] entry 2: bad outcome \"Sometimes\""),
            "{text}"
        );
        assert!(
            lines[3].starts_with("ci/exp.toml:9: [[expect]] entry 2: unknown key `colour`"),
            "{text}"
        );
    }

    /// The patterns are compiled in automata of [`ClauseIndex::CHUNK`]: the
    /// first matching entry is still the first in the file, across them.
    #[test]
    fn the_first_entry_in_file_order_matches_across_automata() {
        let n = 3 * ClauseIndex::CHUNK + 10;
        let mut text = String::new();
        for i in 0..n {
            let (clause, backend) = match i {
                // Matches the id, but not the platform.
                5 => ("mem.*.basic".to_string(), "cuda"),
                // The first that matches both, in the third automaton.
                i if i == 2 * ClauseIndex::CHUNK + 7 => ("mem.open.b?sic".to_string(), "sim"),
                i if i == 3 * ClauseIndex::CHUNK + 1 => ("*".to_string(), "sim"),
                _ => (format!("mem.x{i}.*"), "sim"),
            };
            text.push_str(&format!(
                "[[expect]]\nclause = \"{clause}\"\nbackend = \"{backend}\"\n\
                 outcome = \"Fail\"\nreason = \"entry {i}\"\n"
            ));
        }
        let exp = parse(&text).unwrap();
        assert_eq!(exp.clauses.sets.len(), 4);
        let s = Subject {
            id: "mem.open.basic",
            backend: "sim",
            dialect: Dialect::Runtime,
            gpu_name: None,
            compute_capability: None,
            driver_version: None,
        };
        let first = exp.first_match(&s).unwrap();
        assert_eq!(first.index, 2 * ClauseIndex::CHUNK + 8);
        let other = exp
            .first_match(&Subject {
                id: "pool.a.b",
                ..s
            })
            .unwrap();
        assert_eq!(other.index, 3 * ClauseIndex::CHUNK + 2);
        let cuda = exp
            .first_match(&Subject {
                backend: "cuda",
                ..s
            })
            .unwrap();
        assert_eq!(cuda.index, 6);
        let any = exp.matching_any(&["mem.x7.y", "nothing"]);
        let matched: Vec<usize> = (0..n).filter(|&i| any[i]).collect();
        assert_eq!(matched, [7, 3 * ClauseIndex::CHUNK + 1]);
    }

    #[test]
    fn matching_checks_every_condition() {
        let e = one(
            "[[expect]]\nclause = \"mem.open.*\"\nbackend = \"cuda\"\ndialect = \"driver\"\n\
             gpu = \"H100\"\ncc = \">=9.0\"\ndriver = \"580\"\noutcome = \"Crash\"\nreason = \"r\"\n",
        );
        let s = Subject {
            id: "mem.open.basic",
            backend: "cuda",
            dialect: Dialect::Driver,
            gpu_name: Some("NVIDIA H100 80GB HBM3"),
            compute_capability: Some("9.0"),
            driver_version: Some("580.159.04"),
        };
        assert!(e.matches(&s));
        assert!(!e.matches(&Subject {
            id: "mem.close.twice",
            ..s
        }));
        assert!(!e.matches(&Subject {
            backend: "sim",
            ..s
        }));
        assert!(!e.matches(&Subject {
            dialect: Dialect::Runtime,
            ..s
        }));
        assert!(!e.matches(&Subject {
            gpu_name: Some("NVIDIA H200"),
            ..s
        }));
        assert!(!e.matches(&Subject {
            gpu_name: None,
            ..s
        }));
        assert!(!e.matches(&Subject {
            compute_capability: Some("8.6"),
            ..s
        }));
        assert!(!e.matches(&Subject {
            compute_capability: None,
            ..s
        }));
        assert!(!e.matches(&Subject {
            driver_version: Some("575.57.08"),
            ..s
        }));
        assert!(!e.matches(&Subject {
            driver_version: None,
            ..s
        }));
        // No conditions but the clause: any platform.
        let any =
            one("[[expect]]\nclause = \"mem.open.basic\"\noutcome = \"Fail\"\nreason = \"r\"\n");
        assert!(any.matches(&Subject {
            gpu_name: None,
            driver_version: None,
            backend: "sim",
            ..s
        }));
        assert!(!any.matches(&Subject {
            id: "mem.open.basic2",
            ..s
        }));
    }

    fn failing(error: Option<&str>) -> ClauseResult {
        let mut r = fixtures::result("mem.open.x", Status::Fail, Dialect::Runtime, "sim");
        if let Some(name) = error {
            r.trace.as_mut().unwrap().steps[1].outcome = StepOutcome::Error {
                code: 400,
                name: name.into(),
            };
        }
        r
    }

    fn entry(outcome: &str, error: Option<&str>) -> Entry {
        let error = error
            .map(|e| format!("error = \"{e}\"\n"))
            .unwrap_or_default();
        one(&format!(
            "[[expect]]\nclause = \"*\"\noutcome = \"{outcome}\"\n{error}reason = \"known\"\n"
        ))
    }

    #[test]
    fn classification_of_each_status_without_an_entry() {
        use Classification as C;
        let c = |s: Status| {
            classify(
                None,
                &fixtures::result("a.b", s, Dialect::Runtime, "sim"),
                &[],
            )
            .0
        };
        assert_eq!(c(Status::Pass), C::Pass);
        assert_eq!(c(Status::NotSupported), C::NotSupported);
        for s in [Status::Fail, Status::Crash, Status::Timeout, Status::Broken] {
            assert_eq!(c(s), C::UnexpectedFail, "{s:?}");
        }
    }

    #[test]
    fn classification_against_fail_entries_and_error_names() {
        use Classification as C;
        let r = failing(None); // the fixture fails with cudaErrorInvalidValue
        assert_eq!(
            classify(Some(&entry("Fail", None)), &r, &[]).0,
            C::ExpectedFail
        );
        assert_eq!(
            classify(Some(&entry("Fail", Some("cudaErrorInvalidValue"))), &r, &[]).0,
            C::ExpectedFail
        );
        assert_eq!(
            classify(Some(&entry("Fail", Some("InvalidValue"))), &r, &[]).0,
            C::ExpectedFail
        );
        let (c, why) = classify(Some(&entry("Fail", Some("InvalidHandle"))), &r, &[]);
        assert_eq!(c, C::UnexpectedFail);
        assert!(why.contains("expected error InvalidHandle"), "{why}");
        assert!(
            why.contains("line 13") && why.contains("cudaErrorInvalidValue"),
            "{why}"
        );
        // The failing step observed a value, not an error.
        let mut ok = failing(None);
        ok.trace.as_mut().unwrap().steps[1].outcome = StepOutcome::Ok {
            value: ValueSummary::Ptr {
                label: "peer.p2".into(),
            },
        };
        let (c, why) = classify(Some(&entry("Fail", Some("InvalidValue"))), &ok, &[]);
        assert_eq!(c, C::UnexpectedFail);
        assert!(why.contains("got ok ptr peer.p2"), "{why}");
        assert_eq!(
            classify(Some(&entry("Fail", None)), &ok, &[]).0,
            C::ExpectedFail
        );
        // No failing step at all (a hazard check failed).
        let mut hz = failing(None);
        hz.trace.as_mut().unwrap().steps[1].check = Some(CheckResult {
            passed: true,
            expected: "ok".into(),
            message: String::new(),
        });
        let (c, why) = classify(Some(&entry("Fail", Some("InvalidValue"))), &hz, &[]);
        assert_eq!(c, C::UnexpectedFail);
        assert!(why.contains("no step failed"), "{why}");
        // Another dialect's spelling of the same error.
        let drv = failing(Some("CUDA_ERROR_INVALID_VALUE"));
        assert_eq!(
            classify(
                Some(&entry("Fail", Some("cudaErrorInvalidValue"))),
                &drv,
                &[]
            )
            .0,
            C::ExpectedFail
        );
    }

    #[test]
    fn classification_against_other_outcomes() {
        use Classification as C;
        let res = |s: Status| fixtures::result("a.b", s, Dialect::Runtime, "sim");
        let c = |outcome: &str, s: Status| classify(Some(&entry(outcome, None)), &res(s), &[]);
        for o in ["Fail", "Crash", "Timeout", "NotSupported"] {
            let (cl, why) = c(o, Status::Pass);
            assert_eq!(cl, C::UnexpectedPass, "{o}");
            assert!(
                why.contains(&format!("expected {o}, but it passed")),
                "{why}"
            );
        }
        assert_eq!(c("Crash", Status::Crash).0, C::ExpectedFail);
        assert_eq!(c("Timeout", Status::Timeout).0, C::ExpectedFail);
        assert_eq!(c("Crash", Status::Timeout).0, C::UnexpectedFail);
        assert_eq!(c("Crash", Status::Fail).1, "expected Crash, got Fail");
        assert_eq!(c("Fail", Status::Crash).0, C::UnexpectedFail);
        assert_eq!(c("NotSupported", Status::NotSupported).0, C::NotSupported);
        assert_eq!(c("NotSupported", Status::Fail).0, C::UnexpectedFail);
        // A clause that could not run is NotSupported whatever was expected.
        assert_eq!(c("Fail", Status::NotSupported).0, C::NotSupported);
        // Broken is always unexpected.
        for o in ["Fail", "Crash", "Timeout", "NotSupported", "Flaky"] {
            let (cl, why) = c(o, Status::Broken);
            assert_eq!(cl, C::UnexpectedFail, "{o}");
            assert!(why.contains("always unexpected"), "{why}");
        }
    }

    #[test]
    fn flaky_entries_look_at_every_attempt() {
        use Classification as C;
        use Status::*;
        let e = entry("Flaky", None);
        let res = |s: Status| fixtures::result("a.b", s, Dialect::Runtime, "sim");
        assert_eq!(classify(Some(&e), &res(Pass), &[Pass]).0, C::Pass);
        let (c, why) = classify(Some(&e), &res(Fail), &[Fail, Pass]);
        assert_eq!(c, C::Flaky);
        assert_eq!(why, "attempts: Fail, Pass");
        assert_eq!(
            classify(Some(&e), &res(Fail), &[Fail, Fail, Crash]).0,
            C::Flaky
        );
        assert_eq!(
            classify(Some(&e), &res(Timeout), &[Timeout, Fail]).0,
            C::Flaky
        );
        let (c, why) = classify(Some(&e), &res(Fail), &[Fail, Fail, Fail]);
        assert_eq!(c, C::UnexpectedFail);
        assert!(why.contains("but Fail in all 3 attempts"), "{why}");
        assert_eq!(classify(Some(&e), &res(Crash), &[]).0, C::UnexpectedFail);
        assert_eq!(
            classify(Some(&e), &res(Fail), &[Fail, Broken]).0,
            C::UnexpectedFail
        );
        assert_eq!(
            classify(Some(&e), &res(NotSupported), &[]).0,
            C::NotSupported
        );
    }

    #[test]
    fn retries_stop_at_the_first_different_outcome() {
        use Status::*;
        let res = |s: Status| fixtures::result("a.b", s, Dialect::Runtime, "sim");
        let scripted = |seq: Vec<Status>| {
            let mut it = seq.into_iter();
            move || res(it.next().expect("no more attempts scripted"))
        };
        let statuses = |a: Vec<Attempt>| a.into_iter().map(|a| a.status).collect::<Vec<_>>();
        // Fails, then passes: two attempts.
        assert_eq!(
            statuses(runner::attempts_with_retries(
                &res(Fail),
                2,
                scripted(vec![Pass])
            )),
            [Fail, Pass]
        );
        // Fails every time: 1 + N attempts.
        assert_eq!(
            statuses(runner::attempts_with_retries(
                &res(Fail),
                2,
                scripted(vec![Fail, Fail])
            )),
            [Fail, Fail, Fail]
        );
        // Zero retries, and statuses that are never re-run.
        assert_eq!(
            statuses(runner::attempts_with_retries(
                &res(Fail),
                0,
                scripted(vec![])
            )),
            [Fail]
        );
        for s in [Pass, NotSupported, Broken] {
            assert_eq!(
                statuses(runner::attempts_with_retries(&res(s), 5, scripted(vec![]))),
                [s]
            );
        }
        // And the record keeps them.
        let e = entry("Flaky", None);
        let rec = record(
            Some(&e),
            &res(Crash),
            runner::attempts_with_retries(&res(Crash), 3, scripted(vec![Crash, Pass])),
        );
        assert_eq!(rec.classification, Classification::Flaky);
        assert_eq!(rec.attempts.len(), 3);
        assert_eq!(rec.entry, Some(1));
    }

    #[test]
    fn gate_policy() {
        use Classification as C;
        let with = |s: Status, c: Option<C>| {
            let mut r = fixtures::result("a.b", s, Dialect::Runtime, "sim");
            if let Some(c) = c {
                let mut rec = record(None, &r, vec![]);
                rec.classification = c;
                r.expectation = Some(rec);
            }
            r
        };
        let every = None;
        assert!(gate_passed(&[], every));
        assert!(gate_passed(
            &[
                with(Status::Pass, Some(C::Pass)),
                with(Status::Fail, Some(C::ExpectedFail)),
                with(Status::Crash, Some(C::ExpectedFail)),
                with(Status::NotSupported, Some(C::NotSupported)),
                with(Status::Fail, Some(C::Flaky)),
            ],
            every
        ));
        assert!(!gate_passed(
            &[with(Status::Fail, Some(C::UnexpectedFail))],
            every
        ));
        assert!(!gate_passed(
            &[with(Status::Pass, Some(C::UnexpectedPass))],
            every
        ));
        // Broken fails the gate even if a record somehow says otherwise.
        assert!(!gate_passed(
            &[with(Status::Broken, Some(C::ExpectedFail))],
            every
        ));
        // Results without a record count by status.
        assert!(gate_passed(&[with(Status::Pass, None)], every));
        assert!(!gate_passed(&[with(Status::Fail, None)], every));
    }

    /// Only results of the gated tiers can fail the gate, unexpected passes
    /// included; Broken and results without a tier always can.
    #[test]
    fn the_gate_judges_only_the_gated_tiers() {
        use Classification as C;
        let incidental = |s: Status, c: C| {
            let mut r = fixtures::result("a.b", s, Dialect::Runtime, "sim");
            r.tier = Some(Tier::Incidental);
            let mut rec = record(None, &r, vec![]);
            rec.classification = c;
            r.expectation = Some(rec);
            r
        };
        let default = Some(&crate::model::DEFAULT_GATED_TIERS[..]);
        let all = Some(&Tier::ALL[..]);
        for r in [
            incidental(Status::Fail, C::UnexpectedFail),
            incidental(Status::Timeout, C::UnexpectedFail),
            incidental(Status::Pass, C::UnexpectedPass),
        ] {
            assert!(gate_passed(std::slice::from_ref(&r), default), "{r:?}");
            assert!(!gate_passed(std::slice::from_ref(&r), all), "{r:?}");
        }
        let broken = incidental(Status::Broken, C::UnexpectedFail);
        assert!(!gate_passed(std::slice::from_ref(&broken), default));
        let mut untiered = incidental(Status::Fail, C::UnexpectedFail);
        untiered.tier = None;
        assert!(!gate_passed(&[untiered], default));
        let mut contract = incidental(Status::Fail, C::UnexpectedFail);
        contract.tier = Some(Tier::Contract);
        assert!(!gate_passed(std::slice::from_ref(&contract), default));
        assert!(gate_passed(&[contract], Some(&[Tier::Incidental][..])));
    }

    fn classified_run() -> RunReport {
        let mut report = fixtures::mixed_run();
        apply(&classified_exp(), &mut report, &HashMap::new(), 2);
        report
    }

    fn classified_exp() -> Expectations {
        parse(
            "[[expect]]\nclause = \"mem.open.twice\"\noutcome = \"Fail\"\nreason = \"twice is refused\"\nlink = \"https://example.invalid/1\"\n\
             [[expect]]\nclause = \"mem.open.refcount\"\noutcome = \"Fail\"\nreason = \"refcounts are broken\"\n\
             [[expect]]\nclause = \"ctx.crash.*\"\noutcome = \"Crash\"\nreason = \"driver bug\"\n\
             [[expect]]\nclause = \"never.matches\"\noutcome = \"Crash\"\nreason = \"rot\"\n",
        )
        .unwrap()
    }

    #[test]
    fn apply_classifies_a_report_and_counts() {
        let report = classified_run();
        let cls: Vec<(&str, Classification)> = report
            .results
            .iter()
            .map(|r| {
                (
                    r.id.as_str(),
                    r.expectation.as_ref().unwrap().classification,
                )
            })
            .collect();
        use Classification as C;
        assert_eq!(
            cls,
            [
                ("mem.open.refcount", C::UnexpectedPass),
                ("mem.open.twice", C::ExpectedFail),
                ("ctx.peer.needs-two", C::NotSupported),
                ("ctx.crash.x", C::ExpectedFail),
                ("handle.slow.y", C::UnexpectedFail),
                ("handle.broken.z", C::UnexpectedFail),
            ]
        );
        let t = report.classification_totals.as_ref().unwrap();
        assert_eq!(t.len(), 6);
        assert_eq!(
            (t["ExpectedFail"], t["UnexpectedFail"], t["UnexpectedPass"]),
            (2, 2, 1)
        );
        assert_eq!(t["Pass"], 0);
        assert!(!report.gate_passed());
        let run = report.run.expectations.as_ref().unwrap();
        assert_eq!(
            (run.file.as_str(), run.entries, run.flaky_retries),
            ("ci/exp.toml", 4, 2)
        );
        let twice = report.results[1].expectation.as_ref().unwrap();
        assert_eq!(twice.entry, Some(1));
        assert_eq!(twice.line, Some(1));
        assert_eq!(twice.link.as_deref(), Some("https://example.invalid/1"));
    }

    #[test]
    fn console_lines_footer_junit_and_markdown_show_the_classification() {
        let report = classified_run();
        let twice = result_lines(&report.results[1], false);
        assert!(
            twice.lines().next().unwrap().ends_with(
                "=> ExpectedFail (entry 1: twice is refused <https://example.invalid/1>)"
            ),
            "{twice}"
        );
        let refcount = result_lines(&report.results[0], false);
        assert!(refcount.contains("PASS    mem.open.refcount"), "{refcount}");
        assert!(
            refcount.contains(
                "=> UnexpectedPass (expected Fail, but it passed; entry 2: refcounts are broken)"
            ),
            "{refcount}"
        );
        let exp = classified_exp();
        let footer = footer_lines(&report, &exp, &["mem.open.twice"]).join("\n");
        assert!(
            footer.contains(
                "6 results: 2 ExpectedFail, 2 UnexpectedFail, 1 UnexpectedPass, 1 NotSupported"
            ),
            "{footer}"
        );
        assert!(
            footer.contains(
                "gate: FAILED (3 unexpected results in the gated tiers: contract, relied-on)"
            ),
            "{footer}"
        );
        assert!(
            footer.contains("matches no clause in the catalogue"),
            "{footer}"
        );

        let xml = crate::report::junit::to_string(&report).unwrap();
        assert!(
            xml.contains("unexpected pass: refcounts are broken"),
            "{xml}"
        );
        assert!(xml.contains("type=\"UnexpectedPass\""), "{xml}");
        assert!(
            xml.contains("expectation: ExpectedFail (entry 1: twice is refused"),
            "{xml}"
        );
        let back = quick_junit::Report::deserialize_from_str(&xml).unwrap();
        // refcount (unexpected pass) is a failure, twice (expected) is not;
        // crash x is expected, so only slow y and broken z are errors.
        assert_eq!((back.tests, back.failures, back.errors), (6, 1, 2));

        let md = crate::report::markdown::summary(std::slice::from_ref(&report));
        assert!(md.contains("## Expectations"), "{md}");
        assert!(
            md.contains("| 1 (sim runtime) | ci/exp.toml | 0 | 2 | 2 | 1 | 1 | 0 | **FAILED** |"),
            "{md}"
        );
        assert!(md.contains("### Unexpected results"), "{md}");
        assert!(md.contains("`mem.open.refcount` (sim runtime) UnexpectedPass — expected Fail, but it passed — entry 2: refcounts are broken"), "{md}");
        assert!(md.contains("### Expected failures"), "{md}");
        assert!(md.contains("([link](https://example.invalid/1))"), "{md}");

        // Without expectations, no section and no record.
        let plain = crate::report::markdown::summary(&[fixtures::mixed_run()]);
        assert!(!plain.contains("## Expectations"));
    }

    #[test]
    fn classified_results_json_round_trips_and_plain_has_no_new_keys() {
        let report = classified_run();
        let text = crate::report::json::to_string(&report).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["run"]["expectations"]["file"], "ci/exp.toml");
        assert_eq!(v["classification_totals"]["ExpectedFail"], 2);
        let rec = &v["results"][1]["expectation"];
        assert_eq!(rec["classification"], "ExpectedFail");
        assert_eq!(rec["entry"], 1);
        assert_eq!(rec["expected"], "Fail");
        assert_eq!(rec["reason"], "twice is refused");
        let back = crate::report::json::from_str(&text).unwrap();
        assert_eq!(back, report);
        assert!(!back.gate_passed());

        let plain = crate::report::json::to_string(&fixtures::mixed_run()).unwrap();
        for key in ["expectation", "classification_totals"] {
            assert!(!plain.contains(key), "{key} in a run without expectations");
        }
    }
}
