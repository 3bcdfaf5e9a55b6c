//! `results.json`: the machine-readable record of a run. The schema is
//! documented in `docs/results-schema.md`.

use super::error::ReportError;
use crate::model::{RunReport, OLDEST_READABLE_SCHEMA, SCHEMA_VERSION};

/// Pretty-printed JSON with a trailing newline.
pub fn to_string(report: &RunReport) -> Result<String, ReportError> {
    let mut s = serde_json::to_string_pretty(report).map_err(|e| ReportError::Serialize {
        what: "results.json".into(),
        message: e.to_string(),
    })?;
    s.push('\n');
    Ok(s)
}

/// Write `report` as [`to_string`] does, straight into `w`.
pub fn write(report: &RunReport, w: &mut dyn std::io::Write) -> std::io::Result<()> {
    serde_json::to_writer_pretty(&mut *w, report)?;
    w.write_all(b"\n")
}

/// Read a `results.json` back (e.g. to combine runs in one summary).
///
/// The text is parsed once, straight into the model (a `serde_json::Value`
/// first took several times the file's size and most of the time); only a
/// file that does not fit the model is parsed again, for the reason.
pub fn from_str(text: &str) -> Result<RunReport, String> {
    let report = match serde_json::from_str::<RunReport>(text) {
        Ok(report) => report,
        Err(e) => return Err(why_not(text, e)),
    };
    supported(Some(report.schema_version.into()))?;
    // The totals are derived data: counted again from the results, so a
    // file whose totals were edited or truncated cannot misreport.
    Ok(RunReport::new(report.run, report.results))
}

/// Whether this tool reads `schema_version`.
fn supported(schema_version: Option<u64>) -> Result<(), String> {
    match schema_version {
        Some(v) if (OLDEST_READABLE_SCHEMA as u64..=SCHEMA_VERSION as u64).contains(&v) => Ok(()),
        Some(v) => Err(format!(
            "schema_version {v} is not supported (this tool reads \
             {OLDEST_READABLE_SCHEMA} to {SCHEMA_VERSION})"
        )),
        None => Err("no schema_version: not a results.json".into()),
    }
}

/// Why `text` is not a results.json this tool reads, `error` being what
/// parsing it into the model said: not JSON at all, no or an unsupported
/// `schema_version`, else a field that does not fit.
fn why_not(text: &str, error: serde_json::Error) -> String {
    #[derive(serde::Deserialize)]
    struct Version {
        schema_version: Option<serde_json::Value>,
    }
    use serde_json::error::Category;
    if matches!(error.classify(), Category::Syntax | Category::Eof) {
        // The first error in the text is a syntax error: not JSON at all.
        return format!("not JSON: {error}");
    }
    let version = match serde_json::from_str::<Version>(text) {
        Err(e) if matches!(e.classify(), Category::Syntax | Category::Eof) => {
            return format!("not JSON: {e}")
        }
        Err(_) => None,
        Ok(v) => v.schema_version.and_then(|v| v.as_u64()),
    };
    match supported(version) {
        Err(why) => why,
        Ok(()) => format!("not a results.json: {error}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixtures;
    use serde_json::Value;

    #[test]
    fn results_json_has_the_schema_fields() {
        let report = fixtures::mixed_run();
        let text = to_string(&report).unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["schema_version"], 2);
        assert_eq!(
            v["run"]["gated_tiers"],
            serde_json::json!(["contract", "relied-on"])
        );
        let run = &v["run"];
        for key in [
            "tool_version",
            "backend",
            "dialect",
            "seed",
            "git_revision",
            "started_at",
            "duration_ms",
            "host",
            "filter",
            "interrupted",
            "gpu_name",
            "compute_capability",
            "driver_version",
            "cuda_driver_version",
            "cuda_runtime_version",
            "device_count",
            "semantics",
        ] {
            assert!(run.get(key).is_some(), "run.{key} missing");
        }
        assert_eq!(run["interrupted"], false);
        assert_eq!(run["gpu_name"], Value::Null);
        assert_eq!(v["totals"]["Pass"], 1);
        assert_eq!(v["totals"]["Broken"], 1);
        let results = v["results"].as_array().unwrap();
        assert_eq!(results.len(), 6);
        let r = &results[1];
        for key in [
            "id",
            "title",
            "kind",
            "status",
            "message",
            "duration_ms",
            "dialect",
            "backend",
            "seed",
            "trace",
        ] {
            assert!(r.get(key).is_some(), "result.{key} missing");
        }
        assert_eq!(r["status"], "Fail");
        assert_eq!(r["tier"], "contract");
        assert_eq!(r["kind"], "specified");
        assert_eq!(r["dialect"], "runtime");
        assert_eq!(r["trace"]["steps"][1]["outcome"]["status"], "error");
    }

    #[test]
    fn results_json_round_trips() {
        let report = fixtures::mixed_run();
        let back = from_str(&to_string(&report).unwrap()).unwrap();
        assert_eq!(back, report);
    }

    /// Schema 1 (before tiers): no `tier`, no `run.gated_tiers`. Such a file
    /// still loads, its results without a tier, and every one of them gates.
    #[test]
    fn a_schema_1_file_without_tiers_still_loads_and_gates_every_result() {
        let mut report = fixtures::mixed_run();
        let mut v: Value = serde_json::from_str(&to_string(&report).unwrap()).unwrap();
        v["schema_version"] = 1.into();
        v["run"].as_object_mut().unwrap().remove("gated_tiers");
        for r in v["results"].as_array_mut().unwrap() {
            r.as_object_mut().unwrap().remove("tier");
        }
        let back = from_str(&v.to_string()).unwrap();
        assert_eq!(back.gated_tiers(), None);
        assert!(back.results.iter().all(|r| r.tier.is_none()));
        assert!(back.results.iter().all(|r| back.gates(r)));
        report.run.gated_tiers = None;
        for r in &mut report.results {
            r.tier = None;
        }
        assert_eq!(back, report);
    }

    #[test]
    fn foreign_json_is_refused_with_a_reason() {
        assert!(from_str("{").unwrap_err().contains("not JSON"));
        assert!(from_str("{}").unwrap_err().contains("schema_version"));
        let err = from_str(r#"{"schema_version": 9}"#).unwrap_err();
        assert!(
            err.contains("not supported (this tool reads 1 to 2)"),
            "{err}"
        );
    }
}
