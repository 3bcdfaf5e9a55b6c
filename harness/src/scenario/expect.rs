//! Judging one step's observation against its expectations.

use super::ast::{ExpectList, Expectation, Ref};
use crate::driver::{
    ContextId, DevicePtr, EventId, Fd, IpcEventHandle, IpcMemHandle, PointerInfo, PoolId,
    PoolPtrExport, StreamId, VmmHandle,
};
use crate::errors::ApiError;
use crate::trace::{encode_bytes, push_decimal, CheckResult, StepOutcome, ValueSummary};
// Keys are names and driver values chosen by the scenario: no need for
// SipHash's flood resistance.
use rustc_hash::FxHashMap as HashMap;

/// The raw value a successful step produced (kept for bindings and `==`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Value {
    Unit,
    Ptr(DevicePtr),
    /// `None`: no context was current (`ctx_current`).
    Ctx(Option<ContextId>),
    Handle(IpcMemHandle),
    Int(i64),
    Bytes(Vec<u8>),
    Range(DevicePtr, u64),
    Info(PointerInfo),
    VmmHandle(VmmHandle),
    Fd(Fd),
    Event(EventId),
    EventHandle(IpcEventHandle),
    Pool(PoolId),
    PoolExport(PoolPtrExport),
    /// `CU_POINTER_ATTRIBUTE_BUFFER_ID`.
    BufferId(u64),
    Stream(StreamId),
}

/// What `==` compares: pointers and range bases are addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Key {
    Addr(u64),
    Ctx(Option<u64>),
    Handle([u8; 64]),
    Int(i64),
    Bytes(Vec<u8>),
    Info(PointerInfo),
    Event(u64),
    EventHandle([u8; 64]),
    Unit,
    VmmHandle(u64),
    Fd(i32),
    Pool(u64),
    PoolExport([u8; 64]),
    BufferId(u64),
    Stream(u64),
}

impl Value {
    fn key(&self) -> Key {
        match self {
            Value::Unit => Key::Unit,
            Value::Ptr(p) | Value::Range(p, _) => Key::Addr(p.0),
            Value::Ctx(c) => Key::Ctx(c.map(|c| c.0)),
            Value::Handle(h) => Key::Handle(h.0),
            Value::Int(i) => Key::Int(*i),
            Value::Bytes(b) => Key::Bytes(b.clone()),
            Value::Info(i) => Key::Info(*i),
            Value::VmmHandle(h) => Key::VmmHandle(h.0),
            Value::Fd(f) => Key::Fd(f.0),
            Value::Event(e) => Key::Event(e.0),
            Value::EventHandle(h) => Key::EventHandle(h.0),
            Value::Pool(p) => Key::Pool(p.0),
            Value::PoolExport(x) => Key::PoolExport(x.0),
            Value::BufferId(b) => Key::BufferId(*b),
            Value::Stream(s) => Key::Stream(s.0),
        }
    }
}

/// The label of a value in traces and messages: `{scope}.{prefix}{number}`
/// (`owner.p1`), `{prefix}{number}` without a scope (`h2`), or `null`.
/// Held as its parts, so that a label costs nothing until it is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Label<'s> {
    Null,
    Issued {
        /// The process name; empty for labels shared by all processes.
        scope: &'s str,
        prefix: &'static str,
        number: u64,
    },
}

impl Label<'_> {
    /// The label as traces write it.
    pub fn text(self) -> String {
        match self {
            Label::Null => "null".to_string(),
            Label::Issued {
                scope,
                prefix,
                number,
            } => {
                let mut s = String::with_capacity(scope.len() + prefix.len() + 6);
                if !scope.is_empty() {
                    s.push_str(scope);
                    s.push('.');
                }
                s.push_str(prefix);
                push_decimal(&mut s, number);
                s
            }
        }
    }
}

impl std::fmt::Display for Label<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text())
    }
}

/// A bound name: its value and its label (for messages).
#[derive(Debug, Clone)]
pub(crate) struct Bound<'s> {
    pub value: Value,
    pub label: Option<Label<'s>>,
}

/// The bindings of a run by name (names are the scenario's own strings).
pub(crate) type Bindings<'s> = HashMap<&'s str, Bound<'s>>;

/// What the step observed, for judging.
pub(crate) enum Observed<'a> {
    Ok(&'a Value),
    Api(ApiError),
    /// The process crashed during the step.
    Crash,
    /// The step did not run, for this reason.
    Skipped(&'a str),
    /// Timeout or harness failure: no answer from the driver.
    NoAnswer,
}

/// Longest observation quoted in a message.
const MAX_GOT: usize = 160;

fn shorten(s: String) -> String {
    if s.chars().count() <= MAX_GOT {
        s
    } else {
        let mut t: String = s.chars().take(MAX_GOT).collect();
        t.push('…');
        t
    }
}

/// How an outcome reads in messages: `ok (peer.p1)`, `cudaErrorInvalidValue`.
pub(crate) fn describe(outcome: &StepOutcome) -> String {
    let s = match outcome {
        StepOutcome::Ok { value } => match value {
            ValueSummary::Unit => "ok".to_string(),
            ValueSummary::Ptr { label }
            | ValueSummary::Context { label }
            | ValueSummary::Handle { label }
            | ValueSummary::VmmHandle { label }
            | ValueSummary::Fd { label } => format!("ok ({label})"),
            ValueSummary::Event { label }
            | ValueSummary::Pool { label }
            | ValueSummary::Stream { label } => format!("ok ({label})"),
            ValueSummary::Range { base, size } => format!("ok (base {base}, size {size})"),
            ValueSummary::Int { value } => format!("ok (value {value})"),
            ValueSummary::Bytes { pattern } => format!("ok (bytes {pattern})"),
            ValueSummary::PointerInfo {
                memory_type,
                device,
            } => match device {
                Some(d) => format!("ok (type {memory_type}, device {d})"),
                None => format!("ok (type {memory_type})"),
            },
        },
        StepOutcome::Error { name, .. } => name.clone(),
        StepOutcome::Crash { detail } => format!("crash ({detail})"),
        StepOutcome::Timeout { after_ms } => format!("timeout after {after_ms} ms"),
        StepOutcome::Broken { detail } => format!("harness error ({detail})"),
        StepOutcome::Skipped { reason } => format!("skipped ({reason})"),
    };
    shorten(s)
}

fn ref_key(r: &Ref, result: &Value, bindings: &Bindings<'_>) -> Result<Key, String> {
    match r {
        Ref::Null => Ok(match result {
            Value::Ctx(_) => Key::Ctx(None),
            _ => Key::Addr(0),
        }),
        Ref::Name(n) => bindings
            .get(n.as_str())
            .map(|b| b.value.key())
            .ok_or_else(|| format!("'{n}' was never bound")),
    }
}

fn ref_text(r: &Ref, bindings: &Bindings<'_>) -> String {
    match r {
        Ref::Null => "null".to_string(),
        Ref::Name(n) => match bindings.get(n.as_str()).and_then(|b| b.label.as_ref()) {
            Some(label) => format!("{n} ({label})"),
            None => n.clone(),
        },
    }
}

/// Why an expectation did not hold.
enum Miss {
    /// `expected {0}, got ...` (what was observed is described by the caller).
    Expected(String),
    /// The whole reason.
    Other(String),
}

/// `Ok(())` when `e` holds, else the reason.
fn holds(e: &Expectation, obs: &Observed, bindings: &Bindings<'_>) -> Result<(), Miss> {
    let fail = |shown: String| Err(Miss::Expected(shown));
    let value = match obs {
        Observed::Ok(v) => Some(*v),
        _ => None,
    };
    match e {
        Expectation::Any => Ok(()),
        Expectation::Ok => match obs {
            Observed::Ok(_) => Ok(()),
            _ => fail(e.to_string()),
        },
        // Judged from the step outcome in `check`; an answer is never a crash.
        Expectation::Crash => fail(e.to_string()),
        Expectation::AnyError => match obs {
            Observed::Api(_) => Ok(()),
            _ => fail(e.to_string()),
        },
        Expectation::Error { kind, .. } => match obs {
            Observed::Api(err) => {
                let same = match err.kind() {
                    Some(k) => k == *kind,
                    None => kind.code(err.dialect) == Some(err.code),
                };
                if same {
                    Ok(())
                } else {
                    fail(e.to_string())
                }
            }
            _ => fail(e.to_string()),
        },
        Expectation::Eq(r)
        | Expectation::Ne(r)
        | Expectation::BaseEq(r)
        | Expectation::BaseNe(r) => {
            let want_equal = matches!(e, Expectation::Eq(_) | Expectation::BaseEq(_));
            let op = if want_equal { "==" } else { "!=" };
            let prefix = if matches!(e, Expectation::BaseEq(_) | Expectation::BaseNe(_)) {
                "base "
            } else {
                ""
            };
            // Written only for a miss.
            let shown = || format!("{prefix}{op} {}", ref_text(r, bindings));
            let Some(v) = value else {
                return fail(shown());
            };
            let other = match ref_key(r, v, bindings) {
                Ok(k) => k,
                Err(why) => return Err(Miss::Other(format!("expected {}, but {why}", shown()))),
            };
            if (v.key() == other) == want_equal {
                Ok(())
            } else {
                fail(shown())
            }
        }
        Expectation::Bytes(p) => match value {
            Some(Value::Bytes(b)) if p.matches(b) => Ok(()),
            _ => fail(shorten(e.to_string())),
        },
        Expectation::Value(n) => match value {
            Some(Value::Int(v)) if v == n => Ok(()),
            _ => fail(e.to_string()),
        },
        Expectation::Size(n) => match value {
            Some(Value::Range(_, s)) if s == n => Ok(()),
            _ => fail(e.to_string()),
        },
        Expectation::Type(t) => match value {
            Some(Value::Info(i)) if i.memory_type == *t => Ok(()),
            _ => fail(e.to_string()),
        },
        Expectation::Device(d) => match value {
            Some(Value::Info(i)) if i.device == Some(*d) => Ok(()),
            _ => fail(e.to_string()),
        },
        Expectation::OneOf(alternatives) => {
            if alternatives.iter().any(|a| holds(a, obs, bindings).is_ok()) {
                Ok(())
            } else {
                fail(e.to_string())
            }
        }
    }
}

/// Judge what the step observed against `list`: `None` when it holds,
/// else the message, which names the first expectation that failed and
/// what was observed (`described`, the step outcome's [`describe`], made
/// only for a message).
pub(crate) fn failure(
    list: &ExpectList,
    obs: &Observed,
    described: impl FnOnce() -> String,
    bindings: &Bindings<'_>,
) -> Option<String> {
    if let Observed::Skipped(reason) = obs {
        // Joined, not formatted: a skipped step of a generated case is common.
        Some(["skipped: ", reason].concat())
    } else {
        list.items
            .iter()
            .find_map(|e| match (e, obs) {
                (Expectation::Crash, Observed::Crash) => None,
                // What most steps expect, judged without a call.
                (Expectation::Ok, Observed::Ok(_)) | (Expectation::Any, _) => None,
                _ => holds(e, obs, bindings).err(),
            })
            .map(|miss| match miss {
                Miss::Expected(shown) => format!("expected {shown}, got {}", described()),
                Miss::Other(why) => why,
            })
    }
}

/// The check record of an expectation list written `expected` with the
/// [`failure`] it had.
pub(crate) fn check_result(expected: &str, failure: Option<String>) -> CheckResult {
    CheckResult {
        passed: failure.is_none(),
        expected: expected.to_string(),
        message: failure.unwrap_or_default(),
    }
}

/// The run-length summary of bytes (what traces record).
pub(crate) fn bytes_summary(bytes: &[u8]) -> ValueSummary {
    ValueSummary::Bytes {
        pattern: encode_bytes(bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errors::{Dialect, ErrorKind};
    use std::borrow::Cow;

    /// [`failure`] as it was before `ok` and `any` were judged without
    /// calling [`holds`].
    fn failure_by_holds(
        list: &ExpectList,
        obs: &Observed,
        described: impl FnOnce() -> String,
        bindings: &Bindings<'_>,
    ) -> Option<String> {
        if let Observed::Skipped(reason) = obs {
            return Some(["skipped: ", reason].concat());
        }
        list.items
            .iter()
            .find_map(|e| match (e, obs) {
                (Expectation::Crash, Observed::Crash) => None,
                _ => holds(e, obs, bindings).err(),
            })
            .map(|miss| match miss {
                Miss::Expected(shown) => format!("expected {shown}, got {}", described()),
                Miss::Other(why) => why,
            })
    }

    /// The fast path agrees with `holds`, messages included, for every
    /// kind of observation and lists with `ok` and `any` before, after
    /// and without other expectations.
    #[test]
    fn ok_and_any_are_judged_as_holds_judges_them() {
        let int = Value::Int(3);
        let unit = Value::Unit;
        let observations = [
            Observed::Ok(&int),
            Observed::Ok(&unit),
            Observed::Api(ApiError::new(Dialect::Runtime, ErrorKind::InvalidValue)),
            Observed::Crash,
            Observed::Skipped("'p' was never bound"),
            Observed::NoAnswer,
        ];
        use Expectation as E;
        let lists: [&[Expectation]; 9] = [
            &[E::Ok],
            &[E::Any],
            &[E::Ok, E::Value(3)],
            &[E::Ok, E::Value(4)],
            &[E::Value(4), E::Ok],
            &[E::Any, E::Value(4)],
            &[E::Ok, E::Any],
            &[E::AnyError, E::Any],
            &[E::Crash],
        ];
        let bindings = Bindings::default();
        for items in lists {
            let list = ExpectList {
                items: Cow::Owned(items.to_vec()),
                text: Cow::Borrowed(""),
            };
            for obs in &observations {
                let described = || "what came".to_string();
                assert_eq!(
                    failure(&list, obs, described, &bindings),
                    failure_by_holds(&list, obs, described, &bindings),
                    "{items:?}"
                );
            }
        }
    }
}
