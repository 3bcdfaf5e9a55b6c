//! The conformance catalogue and runner.
