//! Selecting clauses by id.
//!
//! `--filter` takes globs on clause ids (`mem.open.*`, `*.refcount`,
//! `mem.{open,close}.*`); several may be given, comma-separated (commas
//! inside `{}` belong to the alternation) or by repeating the flag, and a clause is selected when any matches. A pattern
//! without glob characters also selects everything below it: `mem` selects
//! `mem` and `mem.*`, `mem.open` selects `mem.open` and `mem.open.*`.

use globset::{Glob, GlobSet, GlobSetBuilder};

#[derive(Debug, thiserror::Error)]
#[error("bad --filter pattern '{pattern}': {message}")]
pub struct FilterError {
    pub pattern: String,
    pub message: String,
}

#[derive(Debug, Clone)]
pub struct Filter {
    patterns: Vec<String>,
    globs: Option<GlobSet>,
    prefixes: Vec<String>,
}

impl Default for Filter {
    fn default() -> Self {
        Filter::all()
    }
}

impl Filter {
    /// Selects every clause.
    pub fn all() -> Filter {
        Filter {
            patterns: Vec::new(),
            globs: None,
            prefixes: Vec::new(),
        }
    }

    /// Build from `--filter` arguments (each may hold several comma-separated
    /// patterns). No pattern at all selects everything.
    pub fn new<S: AsRef<str>>(args: &[S]) -> Result<Filter, FilterError> {
        let patterns: Vec<String> = args
            .iter()
            .flat_map(|a| split_top_level(a.as_ref()))
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect();
        if patterns.is_empty() {
            return Ok(Filter::all());
        }
        let mut builder = GlobSetBuilder::new();
        let mut prefixes = Vec::new();
        for p in &patterns {
            if p.contains(['*', '?', '[', ']', '{', '}', '\\']) {
                let glob = Glob::new(p).map_err(|e| FilterError {
                    pattern: p.clone(),
                    message: e.kind().to_string(),
                })?;
                builder.add(glob);
            } else {
                prefixes.push(p.clone());
            }
        }
        let globs = builder.build().map_err(|e| FilterError {
            pattern: patterns.join(","),
            message: e.to_string(),
        })?;
        Ok(Filter {
            patterns,
            globs: Some(globs),
            prefixes,
        })
    }

    /// The patterns as given (split on commas), for reports.
    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }

    pub fn is_all(&self) -> bool {
        self.patterns.is_empty()
    }

    pub fn matches(&self, id: &str) -> bool {
        let Some(globs) = &self.globs else {
            return true;
        };
        self.prefixes.iter().any(|p| {
            id == p
                || id
                    .strip_prefix(p.as_str())
                    .is_some_and(|rest| rest.starts_with('.'))
        }) || globs.is_match(id)
    }
}

/// Split on commas that are not inside a `{a,b}` alternation.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case(&[], "mem.open.refcount", true)]
    #[case(&["mem.*"], "mem.open.refcount", true)]
    #[case(&["mem.*"], "ctx.open", false)]
    #[case(&["*.refcount"], "mem.open.refcount", true)]
    #[case(&["mem.open.refcount"], "mem.open.refcount", true)]
    #[case(&["mem.open"], "mem.open.refcount", true)]
    #[case(&["mem.open"], "mem.opened.x", false)]
    #[case(&["mem"], "memory.x", false)]
    #[case(&["ctx.*,mem.open.*"], "mem.open.refcount", true)]
    #[case(&["ctx.*", "mem.open.*"], "mem.open.refcount", true)]
    #[case(&["ctx.*", "handle.*"], "mem.open.refcount", false)]
    #[case(&["mem.{open,close}.*"], "mem.close.twice", true)]
    #[case(&["mem.?pen.*"], "mem.open.twice", true)]
    #[case(&["ctx.*,mem.{open,close}.*"], "mem.close.twice", true)]
    #[case(&[" , "], "anything", true)]
    fn globs_select_ids(#[case] args: &[&str], #[case] id: &str, #[case] selected: bool) {
        let f = Filter::new(args).unwrap();
        assert_eq!(f.matches(id), selected, "{args:?} on {id}");
    }

    #[test]
    fn bad_globs_are_errors_not_panics() {
        let err = Filter::new(&["mem.[open"]).unwrap_err();
        assert!(err.to_string().contains("mem.[open"), "{err}");
        assert!(Filter::new(&["mem.{a"]).is_err());
    }

    #[test]
    fn patterns_are_kept_for_reports() {
        let f = Filter::new(&["a.*, b.c", "d"]).unwrap();
        assert_eq!(f.patterns(), ["a.*", "b.c", "d"]);
        assert!(Filter::all().is_all());
    }
}
