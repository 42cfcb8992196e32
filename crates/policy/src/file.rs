//! The policy file as written (format version 1): serde shapes with spans,
//! before any validation. Private: [`crate::load`] turns these into a
//! [`Policy`](crate::Policy) or an error.
//!
//! Every table denies unknown keys, so a typo is an error, never ignored.

use serde::Deserialize;
use toml::Spanned;

/// Just enough to read `version` before anything else, so that a file for a
/// newer format is reported as such rather than as a list of unknown keys.
#[derive(Deserialize)]
pub(crate) struct VersionProbe {
    pub(crate) version: Option<Spanned<toml::Value>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPolicy {
    #[serde(rename = "version")]
    pub(crate) _version: Option<Spanned<toml::Value>>,
    pub(crate) preset: Option<Spanned<String>>,
    pub(crate) default: Option<Spanned<String>>,
    pub(crate) approval: Option<Spanned<String>>,
    pub(crate) mode: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) rules: Vec<Spanned<RawRule>>,
    #[serde(default)]
    pub(crate) guards: Vec<Spanned<RawGuard>>,
    pub(crate) post_execute: Option<Spanned<RawPostExecute>>,
    /// `[network]`: read and validated by `toolhost_egress`, which locates
    /// its own errors; accepted here so that the key is not unknown.
    #[serde(rename = "network")]
    pub(crate) _network: Option<toml::Value>,
    /// `[[credentials]]`: as `[network]`.
    #[serde(rename = "credentials")]
    pub(crate) _credentials: Option<toml::Value>,
    pub(crate) principals: Option<Spanned<RawPrincipals>>,
    #[serde(default)]
    pub(crate) layers: Vec<Spanned<RawLayer>>,
    #[serde(default)]
    pub(crate) patches: Vec<Spanned<RawPatch>>,
    pub(crate) rate_limits: Option<Spanned<crate::rate_limit::RawRateLimits>>,
    pub(crate) code_mode: Option<Spanned<crate::code_mode::RawCodeMode>>,
    pub(crate) subagents: Option<Spanned<RawSubagents>>,
}

/// `[subagents]`: the tools a subagent scope does not get by default.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSubagents {
    pub(crate) withheld: Option<Spanned<Vec<Spanned<String>>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRule {
    pub(crate) tool: Spanned<String>,
    pub(crate) decision: Spanned<String>,
    pub(crate) reason: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) args: Vec<Spanned<RawArgMatcher>>,
    pub(crate) side_effect: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    pub(crate) must_match: Vec<Spanned<RawExample>>,
    #[serde(default)]
    pub(crate) must_not_match: Vec<Spanned<RawExample>>,
    /// Network grants of the calls the rule matches, each entry as in
    /// `[network] allow` (read by `toolhost_egress`).
    pub(crate) network: Option<Spanned<RawGrants>>,
}

/// A list of grants as written, each entry with its place in the file.
pub(crate) struct RawGrants(pub(crate) Vec<Spanned<toml::Value>>);

impl<'de> Deserialize<'de> for RawGrants {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ListVisitor;

        impl<'de> serde::de::Visitor<'de> for ListVisitor {
            type Value = RawGrants;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an array of grants: network = [\"https://api.example.com\"]")
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<RawGrants, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = seq.next_element()? {
                    entries.push(entry);
                }
                Ok(RawGrants(entries))
            }
        }

        d.deserialize_seq(ListVisitor)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawArgMatcher {
    pub(crate) pointer: Spanned<String>,
    pub(crate) glob: Option<Spanned<String>>,
    pub(crate) regex: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawGuard {
    pub(crate) name: Option<Spanned<String>>,
    pub(crate) tool: Spanned<String>,
    pub(crate) reason: Spanned<String>,
    pub(crate) deny_args_matching: Option<Spanned<String>>,
    pub(crate) deny_paths: Option<Spanned<Vec<Spanned<String>>>>,
    pub(crate) pointer: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) must_deny: Vec<Spanned<RawExample>>,
    #[serde(default)]
    pub(crate) must_allow: Vec<Spanned<RawExample>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPostExecute {
    #[serde(default)]
    pub(crate) redact: Vec<Spanned<String>>,
    pub(crate) max_content_chars: Option<Spanned<i64>>,
    pub(crate) block_matching: Option<Spanned<String>>,
}

/// An example call in `must_match`, `must_not_match`, `must_deny` or `must_allow`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawExample {
    pub(crate) tool: Spanned<String>,
    #[serde(default)]
    pub(crate) args: toml::Table,
    pub(crate) side_effect: Option<Spanned<String>>,
    pub(crate) mode: Option<Spanned<String>>,
}

/// `[principals]`: who is an owner, which tools only owners get, groups.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPrincipals {
    #[serde(default)]
    pub(crate) owners: Vec<Spanned<String>>,
    #[serde(default)]
    pub(crate) owner_only: Vec<Spanned<String>>,
    #[serde(default)]
    pub(crate) groups: std::collections::BTreeMap<String, Spanned<Vec<Spanned<String>>>>,
}

/// One `[[layers]]` entry: a narrowing layer for a principal, group, agent
/// (scope), sandbox mode or subagent.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLayer {
    pub(crate) kind: Spanned<String>,
    pub(crate) name: Option<Spanned<String>>,
    pub(crate) allow: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    pub(crate) deny: Vec<Spanned<String>>,
    pub(crate) default: Option<Spanned<String>>,
    pub(crate) approval: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) rules: Vec<Spanned<RawRule>>,
    #[serde(default)]
    pub(crate) guards: Vec<Spanned<RawGuard>>,
    /// Subagent layers only: withheld tools this layer gives back.
    #[serde(default)]
    pub(crate) open: Vec<Spanned<String>>,
}

/// One `[[patches]]` entry: a controlled rewrite of one argument.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPatch {
    pub(crate) tool: Spanned<String>,
    pub(crate) pointer: Spanned<String>,
    pub(crate) set: Option<Spanned<toml::Value>>,
    pub(crate) force: Option<Spanned<toml::Value>>,
    pub(crate) clamp: Option<Spanned<RawClamp>>,
    pub(crate) rewrite_prefix: Option<Spanned<RawRewrite>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawClamp {
    pub(crate) min: Option<Spanned<toml::Value>>,
    pub(crate) max: Option<Spanned<toml::Value>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRewrite {
    pub(crate) from: Spanned<String>,
    pub(crate) to: Spanned<String>,
}

/// Converts TOML to JSON; datetimes become their TOML text.
pub(crate) fn toml_to_json(value: &toml::Value) -> serde_json::Value {
    use serde_json::Value as J;
    match value {
        toml::Value::String(s) => J::String(s.clone()),
        toml::Value::Integer(i) => J::from(*i),
        toml::Value::Float(f) => serde_json::Number::from_f64(*f).map_or(J::Null, J::Number),
        toml::Value::Boolean(b) => J::Bool(*b),
        toml::Value::Datetime(d) => J::String(d.to_string()),
        toml::Value::Array(items) => J::Array(items.iter().map(toml_to_json).collect()),
        toml::Value::Table(t) => table_to_json(t),
    }
}

/// Converts a TOML table to a JSON object.
pub(crate) fn table_to_json(table: &toml::Table) -> serde_json::Value {
    serde_json::Value::Object(
        table
            .iter()
            .map(|(k, v)| (k.clone(), toml_to_json(v)))
            .collect(),
    )
}
