//! Shrinking a failing case to a minimal scenario that still breaks the same
//! property: first proptest's own shrinking of the program (fewer, simpler
//! actions), then deleting single steps from the scenario text while it
//! still parses and still fails.

use super::case::{finding_header, CaseId, Finding, Judge, HEADER_LINES};
use super::generate::{self, Program};
use super::properties::Violation;
use ipc_harness::scenario;
use proptest::strategy::ValueTree;
use std::path::Path;

/// Whether a line of scenario text is a step (not a declaration or comment).
pub(crate) fn is_step(line: &str) -> bool {
    let t = line.trim_start();
    !(t.is_empty() || t.starts_with('#') || t.starts_with("devices") || t.starts_with("process "))
}

pub(crate) fn step_count(text: &str) -> usize {
    text.lines().filter(|l| is_step(l)).count()
}

/// Shrink case `id` (whose program is `tree`'s current value) that broke
/// `first`, spending at most `budget` evaluations.
pub fn minimise(
    judge: &Judge<'_>,
    id: CaseId,
    tree: &mut dyn ValueTree<Value = Program>,
    max_steps: usize,
    first: &Violation,
    budget: usize,
) -> Finding {
    let still_fails = |text: &str| -> Option<Violation> {
        judge
            .evaluate(text, id)
            .violations
            .into_iter()
            .find(|v| v.signature == first.signature)
    };
    let mut best = generate::lower(&tree.current(), max_steps).text();
    let original_steps = step_count(&best);
    let mut why = first.clone();

    // 1. proptest's shrinking of the program.
    if tree.simplify() {
        let mut spent = 0;
        while spent < budget {
            spent += 1;
            let text = generate::lower(&tree.current(), max_steps).text();
            match still_fails(&text) {
                Some(v) => {
                    if step_count(&text) <= step_count(&best) {
                        best = text;
                        why = v;
                    }
                    if !tree.simplify() {
                        break;
                    }
                }
                None => {
                    if !tree.complicate() {
                        break;
                    }
                }
            }
        }
    }

    // 2. Drop single steps, last first, until no deletion keeps the failure.
    let mut lines: Vec<String> = best.lines().map(str::to_string).collect();
    let mut spent = 0;
    'outer: loop {
        let mut changed = false;
        let mut i = lines.len();
        while i > 0 {
            i -= 1;
            if !is_step(&lines[i]) {
                continue;
            }
            if spent >= budget {
                break 'outer;
            }
            let mut candidate = lines.clone();
            candidate.remove(i);
            let text = candidate.join("\n") + "\n";
            if scenario::parse(&text, Path::new("explore.ipc")).is_err() {
                continue;
            }
            spent += 1;
            if let Some(v) = still_fails(&text) {
                lines = candidate;
                why = v;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let body = lines.join("\n") + "\n";
    finding_from(judge, id, &body, first, why, original_steps)
}

/// The finding for a shrunk `body` that breaks `first`'s property (`why`
/// the last violation seen): evaluated once more below a header's worth of
/// lines, so the message's line numbers are the file's, and with a real
/// backend ending with both runs step by step.
pub(crate) fn finding_from(
    judge: &Judge<'_>,
    id: CaseId,
    body: &str,
    first: &Violation,
    mut why: Violation,
    original_steps: usize,
) -> Finding {
    let property = first.property;
    let placeholder = "#\n".repeat(HEADER_LINES - 1) + "\n";
    let last = judge.evaluate(&(placeholder + body), id);
    if let Some(v) = last
        .violations
        .iter()
        .find(|v| v.signature == first.signature)
    {
        why = v.clone();
    }
    let both = match (&last.sim_trace, &last.real_trace) {
        (Some(a), Some(b)) if property.needs_real() => super::case::side_by_side(a, b),
        _ => String::new(),
    };
    let real = judge
        .real
        .filter(|_| property.needs_real())
        .map(|r| r.name());
    Finding {
        case: id,
        property: property.name().to_string(),
        message: why.message.clone(),
        original_steps,
        steps: step_count(body),
        scenario: finding_header(id, property, &why.message, real) + body + &both,
        file: None,
        signature: first.signature.clone(),
        repeats: 0,
    }
}
