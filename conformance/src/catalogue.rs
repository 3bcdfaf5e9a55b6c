//! The clause catalogue: every `*.ipc` file under a directory, parsed and
//! validated.
//!
//! Loading never fails because of one bad file: a file that does not parse,
//! or whose metadata is incomplete or invalid, becomes a *broken* clause that
//! carries its problems. The runner reports broken clauses as
//! [`Status::Broken`](ipc_harness::Status::Broken) and runs everything else;
//! `ipc-conformance list` prints the problems.
//!
//! # Where the catalogue is
//!
//! [`locate`] picks the catalogue, first match wins:
//!
//! 1. `--clauses DIR` on the command line (used as given, must exist);
//! 2. the environment variable `IPC_CONFORMANCE_CLAUSES` (must exist);
//! 3. the catalogue compiled into the binary ([`Catalogue::embedded`]: the
//!    `conformance/clauses/` it was built from, its files named by their
//!    place in the repository), so an installed binary needs no files.

use crate::filter::Filter;
use ipc_harness::scenario::{self, Scenario};
use ipc_harness::Dialect;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Environment variable that points at the clause directory.
pub const CLAUSES_ENV: &str = "IPC_CONFORMANCE_CLAUSES";

/// The source tree's clause directory (`CARGO_MANIFEST_DIR` at compile
/// time), for tests and benches that read the files themselves.
pub fn compiled_in_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("clauses")
}

/// Where the embedded catalogue's files are said to be: their place in the
/// source repository (results name `conformance/clauses/<area>/...`).
pub const EMBEDDED_DIR: &str = "conformance/clauses";

/// The catalogue compiled in by `build.rs`: (path below the clause
/// directory, text), in the order [`Catalogue::load`] reads a directory.
static EMBEDDED_CLAUSES: &[(&str, &str)] =
    include!(concat!(env!("OUT_DIR"), "/embedded_clauses.rs"));

/// Errors that stop the catalogue from loading at all (as opposed to one
/// broken clause).
#[derive(Debug, thiserror::Error)]
pub enum CatalogueError {
    #[error("clause directory {0} does not exist")]
    Missing(PathBuf),
    #[error("cannot read clause directory {path}: {source}")]
    Unreadable {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Which catalogue to load (see the module documentation for the order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClauseSource {
    /// A clause directory on disk.
    Dir(PathBuf),
    /// The catalogue compiled into the binary.
    Embedded,
}

impl ClauseSource {
    /// Load the catalogue from this source.
    pub fn load(&self) -> Result<Catalogue, CatalogueError> {
        match self {
            ClauseSource::Dir(dir) => Catalogue::load(dir),
            ClauseSource::Embedded => Ok(Catalogue::embedded()),
        }
    }
}

/// Resolve the catalogue (see the module documentation for the order).
pub fn locate(explicit: Option<&Path>) -> Result<ClauseSource, CatalogueError> {
    let env = std::env::var_os(CLAUSES_ENV).filter(|v| !v.is_empty());
    locate_with(explicit, env.as_deref().map(Path::new))
}

/// [`locate`] with every input given (testable).
pub fn locate_with(
    explicit: Option<&Path>,
    env: Option<&Path>,
) -> Result<ClauseSource, CatalogueError> {
    match explicit.or(env) {
        Some(dir) if dir.is_dir() => Ok(ClauseSource::Dir(dir.to_path_buf())),
        Some(dir) => Err(CatalogueError::Missing(dir.to_path_buf())),
        None => Ok(ClauseSource::Embedded),
    }
}

/// What a clause's expectation rests on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClauseKind {
    /// A documented sentence.
    Specified,
    /// The documentation is silent; the expectation is what hardware does.
    Measured,
    /// Documented as undefined behaviour: the simulator's hazard log is
    /// checked, the driver's answers are recorded, not judged.
    Undefined,
    /// Measured on hardware this suite cannot reach (its `source` names the
    /// public measurement): runs on the simulator only, NotSupported elsewhere.
    #[serde(rename = "measured-elsewhere")]
    MeasuredElsewhere,
}

impl ClauseKind {
    pub const ALL: [ClauseKind; 4] = [
        ClauseKind::Specified,
        ClauseKind::Measured,
        ClauseKind::Undefined,
        ClauseKind::MeasuredElsewhere,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ClauseKind::Specified => "specified",
            ClauseKind::Measured => "measured",
            ClauseKind::Undefined => "undefined",
            ClauseKind::MeasuredElsewhere => "measured-elsewhere",
        }
    }
}

impl fmt::Display for ClauseKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ClauseKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        ClauseKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "bad kind '{s}' (expected specified, measured, undefined or measured-elsewhere)"
                )
            })
    }
}

/// How far a user may build on what a clause judges, orthogonal to its
/// [`ClauseKind`] (where the expectation came from).
pub use ipc_harness::Tier;

/// A list of tiers as a `--tiers` flag takes it: `all`, or tier names
/// separated by commas (`contract,relied-on`). Duplicates are dropped; the
/// result is in [`Tier::ALL`] order.
pub fn parse_tiers(list: &str) -> Result<Vec<Tier>, String> {
    let words: Vec<&str> = list.split(',').map(str::trim).collect();
    if words.iter().all(|w| w.is_empty()) {
        return Err(
            "empty tier list (expected 'all' or a comma list of contract, relied-on, incidental)"
                .to_string(),
        );
    }
    let mut chosen = Vec::new();
    for word in words {
        match word {
            "" => {
                return Err(format!(
                    "empty name in tier list '{list}' (expected 'all' or a comma list of \
                     contract, relied-on, incidental)"
                ))
            }
            "all" => chosen.extend(Tier::ALL),
            name => chosen.push(name.parse::<Tier>()?),
        }
    }
    chosen.sort();
    chosen.dedup();
    Ok(chosen)
}

/// What a clause needs from the machine.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Requirements {
    /// `devices N` of the scenario; `None` when the file did not parse.
    pub devices: Option<u32>,
    /// Number of declared processes; `None` when the file did not parse.
    pub processes: Option<usize>,
}

/// One conformance clause.
#[derive(Debug, Clone, Serialize)]
pub struct Clause {
    /// Metadata `id`; for a file without one, its path relative to the
    /// catalogue directory (never a valid id, so it stands out).
    pub id: String,
    pub title: String,
    /// `None` when missing or invalid (the clause is then broken).
    pub kind: Option<ClauseKind>,
    /// `None` when missing or invalid (the clause is then broken).
    pub tier: Option<Tier>,
    /// Metadata `relied-on-by`: the projects and files that depend on the
    /// behaviour; required for, and only allowed on, a `relied-on` clause.
    pub relied_on_by: Option<String>,
    pub source: Option<String>,
    pub quote: Option<String>,
    pub doc: Option<String>,
    pub hardware: Option<String>,
    /// Simulator semantic choices the clause exercises (metadata `semantics`,
    /// split on commas and whitespace).
    pub semantics: Vec<String>,
    /// Metadata `dialects`: the dialects the clause holds for; empty means
    /// every dialect. Other dialects report NotSupported with the `hip` note.
    pub dialects: Vec<Dialect>,
    /// Metadata `hip`: what HIP does here and on what authority (its
    /// profile's source, or why the clause does not apply to HIP).
    pub hip: Option<String>,
    pub requirements: Requirements,
    pub path: PathBuf,
    /// Why the clause is broken; empty for a runnable clause.
    pub problems: Vec<String>,
    /// The parsed scenario; `None` when the file did not parse.
    #[serde(skip)]
    pub scenario: Option<Scenario>,
}

impl Clause {
    /// A clause that cannot run: a parse error, missing or invalid metadata,
    /// a duplicate id.
    pub fn is_broken(&self) -> bool {
        !self.problems.is_empty() || self.scenario.is_none()
    }

    /// The problems joined into one message (empty for a runnable clause).
    pub fn problem_message(&self) -> String {
        if self.problems.is_empty() && self.scenario.is_none() {
            return "the scenario was not parsed".to_string();
        }
        self.problems.join("; ")
    }

    /// Whether the clause holds for `dialect` (metadata `dialects`).
    pub fn applies_to(&self, dialect: Dialect) -> bool {
        self.dialects.is_empty() || self.dialects.contains(&dialect)
    }

    /// First id segment (`mem` for `mem.open.refcount`), used to group
    /// clauses (JUnit test suites).
    pub fn area(&self) -> &str {
        area_of(&self.id)
    }

    /// Parse one clause file's text. `fallback_id` is the id used when the
    /// file has no `id` metadata (its path, so it never looks valid).
    pub fn from_source(source: &str, path: &Path, fallback_id: &str) -> Clause {
        let parsed = guarded_parse(source, path);
        let (meta, scenario, mut problems) = match parsed {
            Ok(scenario) => (
                MetaView::from_entries(&scenario.meta.entries),
                Some(scenario),
                Vec::new(),
            ),
            // The parse failed: recover the header by a light scan so the
            // clause keeps its id (filters and reports still find it).
            Err(message) => (MetaView::scan_header(source), None, vec![message]),
        };

        let id = meta.get("id").map(|s| s.trim().to_string());
        let title = meta.get("title").map(|s| s.trim().to_string());
        let kind_text = meta.get("kind").map(|s| s.trim().to_string());

        let id = match id {
            Some(id) if !id.is_empty() => {
                if !is_valid_id(&id) {
                    problems.push(format!(
                        "id '{id}' is not a hierarchical id (lower case segments of a-z, 0-9, '-', \
                         joined by '.', at least two: area.topic[.case])"
                    ));
                }
                id
            }
            _ => {
                problems.push("missing metadata 'id' (# id: area.topic.case)".to_string());
                fallback_id.to_string()
            }
        };
        let title = match title {
            Some(t) if !t.is_empty() => t,
            _ => {
                problems.push("missing metadata 'title'".to_string());
                String::new()
            }
        };
        let kind = match kind_text {
            Some(k) if !k.is_empty() => match k.parse::<ClauseKind>() {
                Ok(kind) => Some(kind),
                Err(e) => {
                    problems.push(e);
                    None
                }
            },
            _ => {
                problems.push(
                    "missing metadata 'kind' (specified, measured, undefined or measured-elsewhere)"
                        .to_string(),
                );
                None
            }
        };
        let tier = match meta.get("tier").map(|s| s.trim().to_string()) {
            Some(t) if !t.is_empty() => match t.parse::<Tier>() {
                Ok(tier) => Some(tier),
                Err(e) => {
                    problems.push(e);
                    None
                }
            },
            _ => {
                problems.push(
                    "missing metadata 'tier' (contract, relied-on or incidental)".to_string(),
                );
                None
            }
        };
        let relied_on_by = meta
            .get("relied-on-by")
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty());
        match (tier, &relied_on_by) {
            (Some(Tier::ReliedOn), None) => problems.push(
                "a relied-on clause needs a 'relied-on-by' (the project and file that depend \
                 on the behaviour)"
                    .to_string(),
            ),
            (Some(tier @ (Tier::Contract | Tier::Incidental)), Some(_)) => problems.push(format!(
                "'relied-on-by' belongs to a relied-on clause, not to a {tier} one"
            )),
            _ => {}
        }
        let semantics = meta
            .get("semantics")
            .map(|s| {
                s.split(|c: char| c == ',' || c.is_whitespace())
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        let mut dialects = Vec::new();
        for word in meta
            .get("dialects")
            .unwrap_or_default()
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|s| !s.is_empty())
        {
            match word.parse::<Dialect>() {
                Ok(d) if !dialects.contains(&d) => dialects.push(d),
                Ok(_) => problems.push(format!("dialect '{word}' listed twice in 'dialects'")),
                Err(e) => problems.push(format!("metadata 'dialects': {e}")),
            }
        }
        if let Some(problem) = meta.get("source").as_deref().and_then(source_problem) {
            problems.push(problem);
        }
        if kind == Some(ClauseKind::MeasuredElsewhere) && meta.get("source").is_none() {
            problems.push(
                "a measured-elsewhere clause needs a 'source' (the public measurement)".into(),
            );
        }
        let requirements = scenario
            .as_ref()
            .map(|s| Requirements {
                devices: Some(s.devices),
                processes: Some(s.processes.len()),
            })
            .unwrap_or_default();

        Clause {
            id,
            title,
            kind,
            tier,
            relied_on_by,
            source: meta.get("source"),
            quote: meta.get("quote"),
            doc: meta.get("doc"),
            hardware: meta.get("hardware"),
            semantics,
            dialects,
            hip: meta.get("hip"),
            requirements,
            path: path.to_path_buf(),
            problems,
            scenario,
        }
    }
}

/// Why a `source` is not citable, if it is not: a source names a public page
/// by its URL, or says `none:` and why the documents do not apply (a local
/// file name such as a copy of a reference page is not a source a reader can
/// follow).
fn source_problem(source: &str) -> Option<String> {
    let source = source.trim();
    if source.starts_with("none:") || source.contains("https://") || source.contains("http://") {
        None
    } else {
        Some(format!(
            "source '{source}' names no public page: give its URL (https://...) or \
             'none: why the documents do not apply'"
        ))
    }
}

/// First id segment, or `unsorted` for something that is not a valid id.
pub fn area_of(id: &str) -> &str {
    if is_valid_id(id) {
        id.split('.').next().unwrap_or(id)
    } else {
        "unsorted"
    }
}

/// `^[a-z0-9-]+(\.[a-z0-9-]+)+$`
pub fn is_valid_id(id: &str) -> bool {
    let segments: Vec<&str> = id.split('.').collect();
    segments.len() >= 2
        && segments.iter().all(|s| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
}

/// Parse with the harness parser; a parser panic becomes a message too.
fn guarded_parse(source: &str, path: &Path) -> Result<Scenario, String> {
    match crate::guard::guarded(|| scenario::parse(source, path)) {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(e.to_string()),
        Err(panic) => Err(format!(
            "{}: the scenario parser panicked: {panic}",
            path.display()
        )),
    }
}

/// Metadata as `key -> values joined by a space`.
struct MetaView {
    map: BTreeMap<String, String>,
}

impl MetaView {
    fn from_entries(entries: &[(String, String)]) -> MetaView {
        let mut map: BTreeMap<String, String> = BTreeMap::new();
        for (k, v) in entries {
            map.entry(k.clone())
                .and_modify(|s| {
                    s.push(' ');
                    s.push_str(v);
                })
                .or_insert_with(|| v.clone());
        }
        MetaView { map }
    }

    /// `# key: value` comment lines before the first statement (used only
    /// when the real parser rejected the file).
    fn scan_header(source: &str) -> MetaView {
        let mut entries = Vec::new();
        for line in source.lines() {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let Some(comment) = line.strip_prefix('#') else {
                break;
            };
            if let Some((key, value)) = comment.split_once(':') {
                let key = key.trim();
                if !key.is_empty()
                    && key
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
                {
                    entries.push((key.to_string(), value.trim().to_string()));
                }
            }
        }
        MetaView::from_entries(&entries)
    }

    fn get(&self, key: &str) -> Option<String> {
        self.map.get(key).cloned()
    }
}

/// Every clause of a directory, sorted by id (then path).
#[derive(Debug, Clone)]
pub struct Catalogue {
    pub dir: PathBuf,
    pub clauses: Vec<Clause>,
}

impl Catalogue {
    /// Load every `*.ipc` file under `dir`, recursively.
    pub fn load(dir: &Path) -> Result<Catalogue, CatalogueError> {
        if !dir.is_dir() {
            return Err(CatalogueError::Missing(dir.to_path_buf()));
        }
        let mut files = Vec::new();
        collect_ipc_files(dir, &mut files, 0)?;
        files.sort();
        let sources = files.into_iter().map(|path| {
            let text = crate::safe_fs::read_bounded(
                &path,
                crate::limits::MAX_CLAUSE_FILE_BYTES,
                "a clause file",
            )
            .map_err(|e| format!("{}: cannot read file: {e}", path.display()))
            .and_then(|bytes| {
                String::from_utf8(bytes).map_err(|e| format!("{}: not UTF-8: {e}", path.display()))
            });
            (path, text)
        });
        Ok(Catalogue::from_sources(dir, sources))
    }

    /// The catalogue compiled into the binary, its files named below
    /// [`EMBEDDED_DIR`].
    pub fn embedded() -> Catalogue {
        let dir = Path::new(EMBEDDED_DIR);
        let sources = EMBEDDED_CLAUSES
            .iter()
            .map(|(rel, text)| (dir.join(rel), Ok(text.to_string())));
        Catalogue::from_sources(dir, sources)
    }

    /// Build a catalogue from file texts (or read errors), validating ids
    /// across the whole set.
    pub fn from_sources(
        dir: &Path,
        sources: impl IntoIterator<Item = (PathBuf, Result<String, String>)>,
    ) -> Catalogue {
        let mut clauses: Vec<Clause> = sources
            .into_iter()
            .map(|(path, text)| {
                let fallback = path
                    .strip_prefix(dir)
                    .unwrap_or(&path)
                    .display()
                    .to_string();
                match text {
                    Ok(text) => Clause::from_source(&text, &path, &fallback),
                    Err(message) => Clause {
                        id: fallback,
                        title: String::new(),
                        kind: None,
                        tier: None,
                        relied_on_by: None,
                        source: None,
                        quote: None,
                        doc: None,
                        hardware: None,
                        semantics: Vec::new(),
                        dialects: Vec::new(),
                        hip: None,
                        requirements: Requirements::default(),
                        path,
                        problems: vec![message],
                        scenario: None,
                    },
                }
            })
            .collect();
        mark_duplicates(&mut clauses);
        clauses.sort_by(|a, b| a.id.cmp(&b.id).then_with(|| a.path.cmp(&b.path)));
        Catalogue {
            dir: dir.to_path_buf(),
            clauses,
        }
    }

    pub fn len(&self) -> usize {
        self.clauses.len()
    }

    pub fn is_empty(&self) -> bool {
        self.clauses.is_empty()
    }

    /// The clauses whose id the filter selects, in catalogue order.
    pub fn select(&self, filter: &Filter) -> Vec<&Clause> {
        self.clauses
            .iter()
            .filter(|c| filter.matches(&c.id))
            .collect()
    }

    pub fn broken(&self) -> impl Iterator<Item = &Clause> {
        self.clauses.iter().filter(|c| c.is_broken())
    }
}

/// Every clause that shares its id with another is broken (naming the others).
fn mark_duplicates(clauses: &mut [Clause]) {
    let mut by_id: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, c) in clauses.iter().enumerate() {
        by_id.entry(c.id.clone()).or_default().push(i);
    }
    for (id, indices) in by_id {
        if indices.len() < 2 {
            continue;
        }
        let paths: Vec<String> = indices
            .iter()
            .map(|&i| clauses[i].path.display().to_string())
            .collect();
        for (n, &i) in indices.iter().enumerate() {
            let others: Vec<&str> = paths
                .iter()
                .enumerate()
                .filter(|(m, _)| *m != n)
                .map(|(_, p)| p.as_str())
                .collect();
            clauses[i].problems.push(format!(
                "duplicate id '{id}' (also in {})",
                others.join(", ")
            ));
        }
    }
}

/// Directory levels followed below the catalogue root (guards symlink loops).
const MAX_DEPTH: usize = 32;

fn collect_ipc_files(
    dir: &Path,
    out: &mut Vec<PathBuf>,
    depth: usize,
) -> Result<(), CatalogueError> {
    let unreadable = |source| CatalogueError::Unreadable {
        path: dir.to_path_buf(),
        source,
    };
    if depth > MAX_DEPTH {
        return Err(unreadable(std::io::Error::other(format!(
            "more than {MAX_DEPTH} directory levels (a symlink loop?)"
        ))));
    }
    for entry in std::fs::read_dir(dir).map_err(unreadable)? {
        let entry = entry.map_err(unreadable)?;
        let path = entry.path();
        let file_type = entry.file_type().map_err(unreadable)?;
        let is_dir = if file_type.is_symlink() {
            path.is_dir()
        } else {
            file_type.is_dir()
        };
        if is_dir {
            if !entry.file_name().to_string_lossy().starts_with('.') {
                collect_ipc_files(&path, out, depth + 1)?;
            }
        } else if path.extension().is_some_and(|e| e == "ipc") {
            out.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(id: &str, title: &str, kind: &str) -> String {
        format!(
            "# id: {id}\n# title: {title}\n# kind: {kind}\n# tier: contract\n\n\
             devices 1\nprocess a device=0\n"
        )
    }

    #[test]
    fn ids_must_be_hierarchical() {
        for ok in ["mem.open", "mem.open.refcount", "a-b.c-d.e0", "x.y.z.w"] {
            assert!(is_valid_id(ok), "{ok}");
        }
        for bad in [
            "",
            "mem",
            "Mem.open",
            "mem..open",
            ".mem.open",
            "mem.open.",
            "mem open.x",
            "mem_open.x",
            "mem/open.x",
        ] {
            assert!(!is_valid_id(bad), "{bad}");
        }
        assert_eq!(area_of("mem.open.refcount"), "mem");
        assert_eq!(area_of("mem/x.ipc"), "unsorted");
    }

    #[test]
    fn kinds_parse() {
        assert_eq!("specified".parse(), Ok(ClauseKind::Specified));
        assert_eq!("undefined".parse(), Ok(ClauseKind::Undefined));
        assert!("Specified".parse::<ClauseKind>().is_err());
    }

    #[test]
    fn tiers_parse_and_name_the_valid_ones_when_wrong() {
        assert_eq!("contract".parse(), Ok(Tier::Contract));
        assert_eq!("relied-on".parse(), Ok(Tier::ReliedOn));
        assert_eq!("incidental".parse(), Ok(Tier::Incidental));
        for t in Tier::ALL {
            assert_eq!(t.to_string().parse(), Ok(t));
            assert_eq!(
                serde_json::to_string(&t).unwrap(),
                format!("\"{}\"", t.as_str()),
                "serde name and display name agree"
            );
        }
        let err = "relied_on".parse::<Tier>().unwrap_err();
        assert!(err.contains("unknown tier 'relied_on'"), "{err}");
        assert!(err.contains("contract, relied-on, incidental"), "{err}");
    }

    #[test]
    fn tier_lists_take_all_or_comma_lists() {
        assert_eq!(parse_tiers("all"), Ok(Tier::ALL.to_vec()));
        assert_eq!(
            parse_tiers("relied-on, contract"),
            Ok(vec![Tier::Contract, Tier::ReliedOn])
        );
        assert_eq!(
            parse_tiers("incidental,all,incidental"),
            Ok(Tier::ALL.to_vec())
        );
        assert_eq!(parse_tiers("incidental"), Ok(vec![Tier::Incidental]));
        let err = parse_tiers("contract,promised").unwrap_err();
        assert!(err.contains("unknown tier 'promised'"), "{err}");
        assert!(
            err.contains("valid: contract, relied-on, incidental"),
            "{err}"
        );
        for empty in ["", " ", ","] {
            let err = parse_tiers(empty).unwrap_err();
            assert!(err.contains("empty tier list"), "{empty:?}: {err}");
        }
        let err = parse_tiers("contract,,incidental").unwrap_err();
        assert!(err.contains("empty name in tier list"), "{err}");
    }

    #[test]
    fn a_clause_needs_a_valid_tier() {
        let text = |tier_line: &str| {
            format!(
                "# id: mem.x\n# title: t\n# kind: measured\n{tier_line}\
                 devices 1\nprocess a device=0\n"
            )
        };
        let c = clause(&text("# tier: incidental\n"));
        assert!(!c.is_broken(), "{:?}", c.problems);
        assert_eq!(c.tier, Some(Tier::Incidental));
        assert_eq!(c.relied_on_by, None);

        let c = clause(&text(""));
        assert!(c.is_broken());
        assert_eq!(c.tier, None);
        assert!(c
            .problem_message()
            .contains("missing metadata 'tier' (contract, relied-on or incidental)"));

        let c = clause(&text("# tier: documented\n"));
        assert!(c.is_broken());
        assert!(c.problem_message().contains("unknown tier 'documented'"));
        assert_eq!(c.id, "mem.x", "a bad tier keeps the id");
    }

    #[test]
    fn relied_on_names_who_relies_and_only_it_does() {
        let text = |tier: &str, by: &str| {
            format!(
                "# id: mem.x\n# title: t\n# kind: measured\n# tier: {tier}\n{by}\
                 devices 1\nprocess a device=0\n"
            )
        };
        let c = clause(&text(
            "relied-on",
            "# relied-on-by: UCX src/uct/cuda/cuda_ipc/cuda_ipc_cache.c\n",
        ));
        assert!(!c.is_broken(), "{:?}", c.problems);
        assert_eq!(c.tier, Some(Tier::ReliedOn));
        assert_eq!(
            c.relied_on_by.as_deref(),
            Some("UCX src/uct/cuda/cuda_ipc/cuda_ipc_cache.c")
        );

        for by in ["", "# relied-on-by:   \n"] {
            let c = clause(&text("relied-on", by));
            assert!(c.is_broken(), "{by:?}");
            assert!(
                c.problem_message()
                    .contains("a relied-on clause needs a 'relied-on-by'"),
                "{}",
                c.problem_message()
            );
        }

        let c = clause(&text(
            "contract",
            "# relied-on-by: NCCL src/transport/p2p.cc\n",
        ));
        assert!(c.is_broken());
        assert!(c
            .problem_message()
            .contains("'relied-on-by' belongs to a relied-on clause, not to a contract one"));
    }

    #[test]
    fn a_source_is_a_public_page_or_says_none() {
        let text = |source: &str| {
            format!(
                "# id: mem.x\n# title: t\n# kind: specified\n# tier: contract\n\
                 # source: {source}\ndevices 1\nprocess a device=0\n"
            )
        };
        for ok in [
            "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__DEVICE.html (cudaIpcOpenMemHandle)",
            "cudaDeviceCanAccessPeer (https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__PEER.html)",
            "none: the documents are silent",
        ] {
            let c = clause(&text(ok));
            assert!(!c.is_broken(), "{ok}: {:?}", c.problems);
            assert_eq!(c.source.as_deref(), Some(ok));
        }
        let c = clause(&text("cuda-runtime-cudaIpcOpenMemHandle.txt"));
        assert!(c.is_broken());
        let msg = c.problem_message();
        assert!(
            msg.contains("source 'cuda-runtime-cudaIpcOpenMemHandle.txt' names no public page"),
            "{msg}"
        );
    }

    #[test]
    fn header_scan_recovers_metadata() {
        let m = MetaView::scan_header(
            "\n# id: mem.x\n# quote: first half\n# quote: second half\n# a comment\ndevices 1\n# id: late\n",
        );
        assert_eq!(m.get("id").as_deref(), Some("mem.x"));
        assert_eq!(m.get("quote").as_deref(), Some("first half second half"));
    }

    #[test]
    fn duplicates_are_marked_on_every_copy() {
        let mk = |id: &str, p: &str| Clause {
            id: id.into(),
            title: "t".into(),
            kind: Some(ClauseKind::Specified),
            tier: Some(Tier::Contract),
            relied_on_by: None,
            source: None,
            quote: None,
            doc: None,
            hardware: None,
            semantics: vec![],
            dialects: vec![],
            hip: None,
            requirements: Requirements::default(),
            path: p.into(),
            problems: vec![],
            scenario: None,
        };
        let mut clauses = vec![mk("a.b", "1.ipc"), mk("a.c", "2.ipc"), mk("a.b", "3.ipc")];
        mark_duplicates(&mut clauses);
        assert!(clauses[0].problems[0].contains("duplicate id 'a.b' (also in 3.ipc)"));
        assert!(clauses[1].problems.is_empty());
        assert!(clauses[2].problems[0].contains("also in 1.ipc"));
    }

    #[test]
    fn unreadable_files_are_broken_clauses() {
        let dir = Path::new("/x");
        let cat = Catalogue::from_sources(
            dir,
            vec![(
                PathBuf::from("/x/a/b.ipc"),
                Err("/x/a/b.ipc: cannot read file: denied".into()),
            )],
        );
        assert_eq!(cat.clauses[0].id, "a/b.ipc");
        assert!(cat.clauses[0].is_broken());
        assert!(cat.clauses[0].problem_message().contains("denied"));
    }

    fn clause(text: &str) -> Clause {
        Clause::from_source(text, Path::new("/c/mem/x.ipc"), "mem/x.ipc")
    }

    #[test]
    fn a_complete_clause_is_runnable() {
        let c = clause(&format!(
            "{}# source: seed.txt\n# semantics: a, b\n",
            header("mem.open.refcount", "Re-opening works", "specified")
        ));
        // The extra metadata lines come after the first statement here, so
        // they are comments, not metadata.
        assert!(!c.is_broken(), "{:?}", c.problems);
        assert_eq!(c.id, "mem.open.refcount");
        assert_eq!(c.title, "Re-opening works");
        assert_eq!(c.kind, Some(ClauseKind::Specified));
        assert_eq!(c.requirements.devices, Some(1));
        assert_eq!(c.requirements.processes, Some(1));
        assert_eq!(c.area(), "mem");

        let c = clause(
            "# id: a.b\n# title: t\n# kind: measured\n# tier: incidental\n# semantics: x, y z\n\
             # quote: one\n# quote: two\ndevices 2\nprocess a device=0\n",
        );
        assert!(!c.is_broken(), "{:?}", c.problems);
        assert_eq!(c.semantics, ["x", "y", "z"]);
        assert_eq!(c.quote.as_deref(), Some("one two"));
        assert_eq!(c.requirements.devices, Some(2));
    }

    #[test]
    fn missing_metadata_makes_a_broken_clause() {
        let c = clause("devices 1\nprocess a device=0\n");
        assert!(c.is_broken());
        assert_eq!(c.id, "mem/x.ipc");
        let msg = c.problem_message();
        assert!(msg.contains("missing metadata 'id'"), "{msg}");
        assert!(msg.contains("missing metadata 'title'"), "{msg}");
        assert!(msg.contains("missing metadata 'kind'"), "{msg}");
        assert!(msg.contains("missing metadata 'tier'"), "{msg}");
        // The scenario itself parsed, so requirements are known.
        assert_eq!(c.requirements.devices, Some(1));
    }

    #[test]
    fn bad_kind_and_bad_id_are_problems() {
        let c = clause(&header("mem.x", "t", "documented"));
        assert!(c.is_broken());
        assert!(c.problem_message().contains("bad kind 'documented'"));
        assert_eq!(c.id, "mem.x");

        let c = clause(&header("Mem.X", "t", "specified"));
        assert!(c.is_broken());
        assert!(c
            .problem_message()
            .contains("id 'Mem.X' is not a hierarchical id"));
        let c = clause(&header("mem", "t", "specified"));
        assert!(c.is_broken());
    }

    #[test]
    fn a_parse_error_is_a_broken_clause_that_keeps_its_id() {
        let c = clause(&format!(
            "{}a: x = frobnicate 3\n",
            header("mem.bad", "t", "specified")
        ));
        assert!(c.is_broken());
        assert!(c.scenario.is_none());
        assert_eq!(c.id, "mem.bad");
        assert_eq!(c.title, "t");
        let msg = c.problem_message();
        assert!(msg.starts_with("/c/mem/x.ipc:8:"), "{msg}");
        assert_eq!(c.requirements.devices, None);
    }

    #[test]
    fn catalogue_marks_duplicates_and_sorts_by_id() {
        let dir = Path::new("/c");
        let src = |id: &str| Ok(header(id, "t", "specified"));
        let cat = Catalogue::from_sources(
            dir,
            vec![
                (PathBuf::from("/c/z.ipc"), src("mem.b")),
                (PathBuf::from("/c/y.ipc"), src("mem.a")),
                (PathBuf::from("/c/x.ipc"), src("mem.b")),
            ],
        );
        let ids: Vec<&str> = cat.clauses.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["mem.a", "mem.b", "mem.b"]);
        assert!(!cat.clauses[0].is_broken());
        assert!(cat.clauses[1]
            .problem_message()
            .contains("duplicate id 'mem.b' (also in /c/z.ipc)"));
        assert!(cat.clauses[2]
            .problem_message()
            .contains("also in /c/x.ipc"));
        assert_eq!(cat.broken().count(), 2);
        let f = Filter::new(&["mem.a"]).unwrap();
        assert_eq!(cat.select(&f).len(), 1);
    }

    #[test]
    fn load_walks_directories_and_skips_other_files() {
        let tmp = std::env::temp_dir().join(format!("ipc-conf-load-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(tmp.join("mem/open")).unwrap();
        std::fs::create_dir_all(tmp.join(".hidden")).unwrap();
        std::fs::write(
            tmp.join("mem/open/a.ipc"),
            header("mem.open.a", "t", "specified"),
        )
        .unwrap();
        std::fs::write(tmp.join("b.ipc"), header("ctx.b", "t", "measured")).unwrap();
        std::fs::write(tmp.join("README.md"), "not a clause").unwrap();
        std::fs::write(tmp.join(".hidden/c.ipc"), "junk").unwrap();
        std::fs::write(tmp.join("bad.ipc"), [0xffu8, 0xfe]).unwrap();
        let cat = Catalogue::load(&tmp).unwrap();
        let ids: Vec<&str> = cat.clauses.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["bad.ipc", "ctx.b", "mem.open.a"]);
        assert!(cat.clauses[0].problem_message().contains("not UTF-8"));
        std::fs::remove_dir_all(&tmp).unwrap();
        assert!(matches!(
            Catalogue::load(&tmp),
            Err(CatalogueError::Missing(_))
        ));
    }

    #[test]
    fn locate_prefers_explicit_then_env_then_the_embedded_catalogue() {
        let tmp = std::env::temp_dir().join(format!("ipc-conf-locate-{}", std::process::id()));
        let a = tmp.join("a");
        let b = tmp.join("b");
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        let missing = tmp.join("missing");
        let dir = |p: &Path| ClauseSource::Dir(p.to_path_buf());
        assert_eq!(locate_with(Some(&a), Some(&b)).unwrap(), dir(&a));
        assert_eq!(locate_with(None, Some(&b)).unwrap(), dir(&b));
        assert!(matches!(
            locate_with(Some(&missing), Some(&a)),
            Err(CatalogueError::Missing(_))
        ));
        assert!(matches!(
            locate_with(None, Some(&missing)),
            Err(CatalogueError::Missing(_))
        ));
        assert_eq!(locate_with(None, None).unwrap(), ClauseSource::Embedded);
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn the_embedded_catalogue_is_the_source_trees() {
        let embedded = Catalogue::embedded();
        let on_disk = Catalogue::load(&compiled_in_dir()).unwrap();
        assert!(embedded.len() > 100, "{} clauses", embedded.len());
        assert_eq!(embedded.len(), on_disk.len());
        for (e, d) in embedded.clauses.iter().zip(&on_disk.clauses) {
            assert_eq!((&e.id, &e.title, e.kind), (&d.id, &d.title, d.kind));
            assert_eq!(e.scenario.is_some(), d.scenario.is_some(), "{}", e.id);
            let rel = d.path.strip_prefix(compiled_in_dir()).unwrap();
            assert_eq!(e.path, Path::new(EMBEDDED_DIR).join(rel));
        }
    }
}
