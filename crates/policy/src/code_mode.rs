//! `[code_mode]`: the bounds on the calls code makes through an
//! interpreter's door (the host's code mode): how many inner calls one run
//! may make, and which tools' code may call the same tool again.
//!
//! ```toml
//! [code_mode]
//! max_inner_calls = 1000      # optional: per run, 1 to 1000000 (default 1000)
//! allow_nesting = ["python"]  # optional: tools whose code may call themselves
//!                             # (default none; at most MAX_NESTING deep)
//! ```

use crate::error::LoadError;
use serde::Deserialize;
use toml::Spanned;

/// Inner calls one run may make unless the policy says otherwise.
pub const DEFAULT_MAX_INNER_CALLS: usize = 1000;
/// The most `max_inner_calls` may be.
pub const MAX_MAX_INNER_CALLS: usize = 1_000_000;
/// How deep code may call itself where `allow_nesting` lets it.
pub const MAX_NESTING: u32 = 4;

/// `[code_mode]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCodeMode {
    max_inner_calls: Option<Spanned<i64>>,
    #[serde(default)]
    allow_nesting: Vec<Spanned<String>>,
}

/// The file's `[code_mode]`; the defaults when absent.
#[derive(Debug, Clone)]
pub struct CodeMode {
    max_inner_calls: usize,
    allow_nesting: Vec<String>,
}

impl Default for CodeMode {
    fn default() -> Self {
        CodeMode {
            max_inner_calls: DEFAULT_MAX_INNER_CALLS,
            allow_nesting: Vec::new(),
        }
    }
}

impl CodeMode {
    /// The inner calls one run may make.
    pub fn max_inner_calls(&self) -> usize {
        self.max_inner_calls
    }

    /// Whether code run by `tool` may call `tool` (up to [`MAX_NESTING`] deep).
    pub fn nesting_allowed(&self, tool: &str) -> bool {
        self.allow_nesting.iter().any(|t| t == tool)
    }
}

/// Checks `[code_mode]`; errors name the key and its place.
pub(crate) fn compile(raw: &Spanned<RawCodeMode>) -> Result<CodeMode, LoadError> {
    let r = raw.get_ref();
    let max_inner_calls = match &r.max_inner_calls {
        None => DEFAULT_MAX_INNER_CALLS,
        Some(n) => usize::try_from(*n.get_ref())
            .ok()
            .filter(|n| (1..=MAX_MAX_INNER_CALLS).contains(n))
            .ok_or_else(|| {
                LoadError::new(
                    n.span(),
                    format!(
                        "code_mode.max_inner_calls: {} is not between 1 and {MAX_MAX_INNER_CALLS}",
                        n.get_ref()
                    ),
                )
            })?,
    };
    let mut allow_nesting = Vec::new();
    for (i, t) in r.allow_nesting.iter().enumerate() {
        if t.get_ref().is_empty() {
            return Err(LoadError::new(
                t.span(),
                format!("code_mode.allow_nesting[{i}]: a tool name, not empty"),
            ));
        }
        allow_nesting.push(t.get_ref().clone());
    }
    Ok(CodeMode {
        max_inner_calls,
        allow_nesting,
    })
}

#[cfg(test)]
mod tests {
    use crate::Policy;

    #[test]
    fn code_mode_bounds_are_read_and_checked() {
        let p = Policy::from_toml("version = 1\n", "p.toml").unwrap();
        assert_eq!(
            p.code_mode().max_inner_calls(),
            super::DEFAULT_MAX_INNER_CALLS
        );
        assert!(!p.code_mode().nesting_allowed("python"));
        let src = "version = 1\n[code_mode]\nmax_inner_calls = 5\nallow_nesting = [\"python\"]\n";
        let p = Policy::from_toml(src, "p.toml").unwrap();
        assert_eq!(p.code_mode().max_inner_calls(), 5);
        assert!(p.code_mode().nesting_allowed("python"));
        for bad in [
            "max_inner_calls = 0",
            "max_inner_calls = 2000000",
            "depth = 3",
        ] {
            let src = format!("version = 1\n[code_mode]\n{bad}\n");
            assert!(Policy::from_toml(&src, "p.toml").is_err(), "{bad}");
        }
    }
}
