//! `explore --backend cuda --recheck FILE...`: scenario files (finding and
//! case files `explore` wrote, or any scenario) run again on the simulator
//! and on the real backend, with fresh workers. A file whose runs still
//! differ is shrunk against the real backend by deleting chunks of steps
//! (delta debugging: halves first, then smaller pieces, down to single
//! steps) and written out as a minimal finding; one that now agrees shows
//! that what differed was not in the scenario (worker history, a race).

use super::case::{CaseId, Finding, Judge};
use super::properties::Property;
use super::shrink::{finding_from, is_step, step_count};
use crate::report;
use ipc_harness::errors::Dialect;
use ipc_harness::scenario;
use std::path::{Path, PathBuf};

/// What a recheck of one file found.
#[derive(Debug, Clone)]
pub enum Recheck {
    /// Both backends answered every step alike.
    Agrees,
    /// The real backend could not run it (its reason).
    NotCompared(String),
    /// The file is not a scenario.
    Invalid(String),
    /// Still differs: the shrunk finding.
    Differs(Box<Finding>),
}

impl Recheck {
    pub fn line(&self) -> String {
        match self {
            Recheck::Agrees => "agrees now".into(),
            Recheck::NotCompared(why) => format!("not compared: {why}"),
            Recheck::Invalid(why) => format!("invalid: {why}"),
            Recheck::Differs(f) => format!(
                "still differs ({} of {} steps after shrinking): {}",
                f.steps, f.original_steps, f.message
            ),
        }
    }
}

/// The case a file names in its header (`# case N (seed S), dialect D.`),
/// else case `index` with `seed` and `dialect`.
pub fn case_of(text: &str, index: u64, seed: u64, dialect: Dialect) -> CaseId {
    let named = text.lines().take(8).find_map(|l| {
        let rest = l.strip_prefix("# case ")?;
        let (n, rest) = rest.split_once(" (seed ")?;
        let (s, rest) = rest.split_once("), dialect ")?;
        let d = rest.trim_end_matches('.').trim();
        let dialect = Dialect::ALL.into_iter().find(|x| x.to_string() == d)?;
        Some(CaseId {
            index: n.trim().parse().ok()?,
            seed: s.trim().parse().ok()?,
            dialect,
        })
    });
    named.unwrap_or(CaseId {
        index,
        seed,
        dialect,
    })
}

/// The scenario of a file: its text without comment lines.
fn body_of(text: &str) -> String {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Run `text` (comments dropped) as case `id` and, if a step differs,
/// shrink it spending at most `budget` evaluations.
pub fn recheck(judge: &Judge<'_>, text: &str, id: CaseId, budget: usize) -> Recheck {
    let body = body_of(text);
    if let Err(e) = scenario::parse(&body, Path::new("recheck.ipc")) {
        return Recheck::Invalid(e.to_string());
    }
    let eval = judge.evaluate(&body, id);
    if eval.not_compared {
        return Recheck::NotCompared("NotSupported on the real backend".into());
    }
    let lost = eval
        .violations
        .iter()
        .find(|v| v.property == Property::Harness)
        .map(|v| v.message.clone());
    let Some(first) = eval
        .violations
        .into_iter()
        .find(|v| v.property == Property::Differential)
    else {
        // Agreeing up to a step the harness failed at says nothing of
        // the steps after it.
        return match lost {
            Some(m) => Recheck::NotCompared(format!("lost to a harness error: {m}")),
            None => Recheck::Agrees,
        };
    };
    let original_steps = step_count(&body);
    let still_differs = |text: &str| {
        judge
            .evaluate(text, id)
            .violations
            .into_iter()
            .find(|v| v.signature == first.signature)
    };
    let mut lines: Vec<String> = body.lines().map(str::to_string).collect();
    let mut why = first.clone();
    let mut spent = 0;
    // Chunks of `size` steps, the last chunk first (later steps rarely
    // matter to an earlier difference); halve the size when no chunk goes.
    let mut size = original_steps.div_ceil(2).max(1);
    loop {
        let mut removed = false;
        let mut end = lines.len();
        while end > 0 && spent < budget {
            let steps: Vec<usize> = (0..end).filter(|&i| is_step(&lines[i])).collect();
            if steps.is_empty() {
                break;
            }
            let chunk = &steps[steps.len().saturating_sub(size)..];
            let start = chunk[0];
            let candidate: Vec<String> = lines
                .iter()
                .enumerate()
                .filter(|(i, _)| !chunk.contains(i))
                .map(|(_, l)| l.clone())
                .collect();
            let text = candidate.join("\n") + "\n";
            if scenario::parse(&text, Path::new("recheck.ipc")).is_ok() {
                spent += 1;
                if let Some(v) = still_differs(&text) {
                    lines = candidate;
                    why = v;
                    removed = true;
                }
            }
            end = start;
        }
        if spent >= budget || (size == 1 && !removed) {
            break;
        }
        if !removed {
            size = size.div_ceil(2);
        }
    }
    let body = lines.join("\n") + "\n";
    Recheck::Differs(Box::new(finding_from(
        judge,
        id,
        &body,
        &first,
        why,
        original_steps,
    )))
}

/// Read every file to recheck, before anything runs: a file that cannot be
/// read (missing, not a regular file, too long) or that is not a scenario
/// is an error naming it, not a file that "agrees".
pub fn read_inputs(files: &[PathBuf]) -> Result<Vec<(PathBuf, String)>, String> {
    files
        .iter()
        .map(|path| {
            let text = crate::safe_fs::read_bounded_text(
                path,
                ipc_harness::scenario::limits::MAX_SCENARIO_FILE_BYTES,
                "a scenario file",
            )
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            scenario::parse(&body_of(&text), path)
                .map_err(|e| format!("{} is not a scenario: {e}", path.display()))?;
            Ok((path.clone(), text))
        })
        .collect()
}

/// Recheck every file (as [`read_inputs`] gives them); write each shrunk
/// finding to `out/recheck-<name>` and a list of what each file did to
/// `out/recheck.txt`.
pub fn recheck_files(
    judge: &Judge<'_>,
    inputs: &[(PathBuf, String)],
    default: CaseId,
    budget: usize,
    out: &Path,
    progress: &mut dyn FnMut(&Path, &Recheck),
) -> Result<Vec<(PathBuf, Recheck)>, String> {
    let mut results = Vec::new();
    let mut list = String::new();
    for (n, (path, text)) in inputs.iter().enumerate() {
        let id = case_of(text, n as u64, default.seed, default.dialect);
        let outcome = recheck(judge, text, id, budget);
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| format!("file{n}.ipc"));
        if let Recheck::Differs(f) = &outcome {
            let file = out.join(format!("recheck-{name}"));
            report::write_atomic(&file, f.scenario.as_bytes()).map_err(|e| e.to_string())?;
        }
        list.push_str(&format!("{}: {}\n", path.display(), outcome.line()));
        // After every file: a run stopped early keeps what it learned.
        report::write_atomic(&out.join("recheck.txt"), list.as_bytes())
            .map_err(|e| e.to_string())?;
        progress(path, &outcome);
        results.push((path.clone(), outcome));
    }
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{self, BackendKind, SimSettings};
    use std::time::Duration;

    fn sim(semantics: &[(&str, &str)]) -> Box<dyn ipc_harness::machine::Backend> {
        let s = SimSettings {
            devices: None,
            semantics: semantics
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
            profile: None,
        };
        backend::make(BackendKind::Sim, &s).unwrap()
    }

    const PADDED_REOPEN: &str = "\
# Found by `ipc-conformance explore`: property differential.
# something
# case 7 (seed 99), dialect driver.
# replay: ipc-conformance scenario FILE --seed 99 --dialect driver --backend cuda

devices 1
process a device=0
process b device=0
a: m = malloc 1000 => any
a: fill m 0x5a => any
a: n = malloc 4KiB => any
a: fill n 0x11 => any
a: h = ipc_get m => any
a: send h -> b => any
b: p = ipc_open h flags=lazy => any
a: read n 0 16 => any
b: q = ipc_open h flags=lazy => any
a: free n => any
b: read p 0 8 => any
# Both runs of the steps above (simulator | real driver; != differs):
#    L9 a: m = malloc 1000 -> ok ptr a.p1 | ok ptr a.p1
";

    #[test]
    fn header_names_the_case() {
        let id = case_of(PADDED_REOPEN, 0, 1, Dialect::Runtime);
        assert_eq!((id.index, id.seed, id.dialect), (7, 99, Dialect::Driver));
        let plain = case_of("devices 1\n", 3, 5, Dialect::Runtime);
        assert_eq!(
            (plain.index, plain.seed, plain.dialect),
            (3, 5, Dialect::Runtime)
        );
    }

    #[test]
    fn a_difference_is_shrunk_to_the_steps_it_needs() {
        // The "real" side re-opens with an error: only the steps up to the
        // second open matter.
        let default = sim(&[]);
        let other = sim(&[("reopen", "error")]);
        let judge = Judge {
            sim: default.as_ref(),
            real: Some(other.as_ref()),
            step_timeout: Duration::from_secs(5),
        };
        let id = case_of(PADDED_REOPEN, 0, 1, Dialect::Runtime);
        let Recheck::Differs(f) = recheck(&judge, PADDED_REOPEN, id, 200) else {
            panic!("expected a difference");
        };
        assert_eq!(f.original_steps, 11);
        assert_eq!(f.steps, 5, "{}", f.scenario);
        for kept in [
            "m = malloc 1000",
            "h = ipc_get m",
            "send h",
            "p = ipc_open",
            "q = ipc_open",
        ] {
            assert!(f.scenario.contains(kept), "{kept} missing:\n{}", f.scenario);
        }
        assert!(f.scenario.contains("# case 7 (seed 99), dialect driver."));
        assert!(f.scenario.contains("!= L"), "{}", f.scenario);
    }

    #[test]
    fn agreeing_and_invalid_files_are_told_apart() {
        let a = sim(&[]);
        let b = sim(&[]);
        let judge = Judge {
            sim: a.as_ref(),
            real: Some(b.as_ref()),
            step_timeout: Duration::from_secs(5),
        };
        let id = case_of(PADDED_REOPEN, 0, 1, Dialect::Runtime);
        assert!(matches!(
            recheck(&judge, PADDED_REOPEN, id, 50),
            Recheck::Agrees
        ));
        assert!(matches!(
            recheck(
                &judge,
                "devices 1\nprocess a device=0\na: frobnicate\n",
                id,
                50
            ),
            Recheck::Invalid(_)
        ));
    }

    #[test]
    fn files_get_a_list_and_findings() {
        let default = sim(&[]);
        let other = sim(&[("reopen", "error")]);
        let judge = Judge {
            sim: default.as_ref(),
            real: Some(other.as_ref()),
            step_timeout: Duration::from_secs(5),
        };
        let dir = std::env::temp_dir().join(format!("ipc-recheck-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let case = dir.join("case7.ipc");
        std::fs::write(&case, PADDED_REOPEN).unwrap();
        let out = dir.join("out");
        std::fs::create_dir_all(&out).unwrap();
        let default_id = CaseId {
            index: 0,
            seed: 1,
            dialect: Dialect::Runtime,
        };
        let agrees = dir.join("agrees.ipc");
        std::fs::write(
            &agrees,
            "devices 1\nprocess a device=0\na: m = malloc 1000\n",
        )
        .unwrap();
        let inputs = read_inputs(&[case, agrees]).unwrap();
        let mut seen = 0;
        let r = recheck_files(&judge, &inputs, default_id, 100, &out, &mut |_, _| {
            seen += 1
        })
        .unwrap();
        assert_eq!(seen, 2);
        assert!(matches!(r[0].1, Recheck::Differs(_)));
        assert!(matches!(r[1].1, Recheck::Agrees));
        let list = std::fs::read_to_string(out.join("recheck.txt")).unwrap();
        assert!(
            list.contains("case7.ipc: still differs (5 of 11 steps"),
            "{list}"
        );
        assert!(list.contains("agrees.ipc: agrees now"), "{list}");
        assert!(out.join("recheck-case7.ipc").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_file_that_cannot_be_read_or_is_no_scenario_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("good.ipc");
        std::fs::write(&good, PADDED_REOPEN).unwrap();
        let missing = dir.path().join("missing.ipc");
        let err = read_inputs(&[good.clone(), missing]).unwrap_err();
        assert!(err.starts_with("cannot read "), "{err}");
        assert!(err.contains("missing.ipc"), "{err}");
        let folder = dir.path().join("folder.ipc");
        std::fs::create_dir(&folder).unwrap();
        let err = read_inputs(&[folder]).unwrap_err();
        assert!(err.contains("not a regular file"), "{err}");
        let bad = dir.path().join("bad.ipc");
        std::fs::write(&bad, "devices 1\nprocess a device=0\na: frobnicate\n").unwrap();
        let err = read_inputs(&[good.clone(), bad]).unwrap_err();
        assert!(err.contains("bad.ipc is not a scenario"), "{err}");
        assert_eq!(read_inputs(&[good]).unwrap().len(), 1);
    }
}
