//! Turns policy file text into a [`Policy`]: parse, validate, compile, then
//! check the examples. Any failure rejects the whole file; a policy is only
//! built once everything succeeded, so nothing is ever half-applied.

use crate::decision::{ApprovalSetting, DecisionKind};
use crate::error::{LoadError, line_col};
use crate::facts::CallFacts;
use crate::file::{
    RawArgMatcher, RawExample, RawGrants, RawGuard, RawPolicy, RawPostExecute, RawRule,
    VersionProbe, table_to_json,
};
use crate::guard::{Guard, GuardVerdict};
use crate::matcher::{ArgMatcher, ToolPattern, check_pointer, path_glob, regex};
use crate::policy::Policy;
use crate::policy_guard::{PathCheck, PolicyGuard};
use crate::post_execute::PostExecuteRules;
use crate::preset::Preset;
use crate::rule::{Rule, RuleOrigin};
use crate::side_effect::SideEffect;
use std::ops::Range;
use std::str::FromStr;
use toml::Spanned;
use toolhost_core::SandboxMode;
use toolhost_egress::{GrantEntry, KeyPath, RuleGrants};

/// The only format version this crate reads.
const VERSION: i64 = 1;

type Result<T> = std::result::Result<T, LoadError>;

/// Parses and validates `src`.
pub(crate) fn load(src: &str) -> Result<Policy> {
    check_version(src)?;
    let raw: RawPolicy = toml::from_str(src).map_err(toml_error)?;

    let preset = raw
        .preset
        .as_ref()
        .map(|p| name::<Preset>(p, "preset"))
        .transpose()?;
    let base = Policy::default();
    let mode = match &raw.mode {
        Some(m) => name::<SandboxMode>(m, "mode")?,
        None => preset.map_or(base.default_mode(), Preset::mode),
    };
    let approval = match &raw.approval {
        Some(a) => name::<ApprovalSetting>(a, "approval")?,
        None => preset.map_or(base.approval(), Preset::approval),
    };
    let default = match &raw.default {
        Some(d) => name::<DecisionKind>(d, "default")?,
        None => preset.map_or(base.default_decision(), Preset::default_decision),
    };

    let mut rules: Vec<Rule> = preset.and_then(Rule::for_preset).into_iter().collect();
    let mut rule_examples = Vec::new();
    for (index, raw_rule) in raw.rules.iter().enumerate() {
        let line = line_col(src, raw_rule.span().start).0;
        let rule = compile_rule(raw_rule, "", index, line)?;
        rule_examples.push((rules.len(), index, raw_rule));
        rules.push(rule);
    }

    let mut guards = Vec::new();
    for (index, raw_guard) in raw.guards.iter().enumerate() {
        guards.push(compile_guard(raw_guard, "", index)?);
    }

    let post_execute = match &raw.post_execute {
        Some(p) => compile_post_execute(p.get_ref())?,
        None => PostExecuteRules::default(),
    };

    // Examples run against the compiled matchers, so they test exactly what
    // will be enforced.
    for (at, index, raw_rule) in rule_examples {
        check_rule_examples(&rules[at], "", index, raw_rule.get_ref(), mode)?;
    }
    for (guard, raw_guard) in guards.iter().zip(&raw.guards) {
        check_guard_examples(guard, raw_guard.get_ref(), mode)?;
    }

    let stack = crate::layer::compile(&raw, src, mode)?;
    let rate_limits = raw
        .rate_limits
        .as_ref()
        .map(crate::rate_limit::compile)
        .transpose()?
        .unwrap_or_default();
    let code_mode = raw
        .code_mode
        .as_ref()
        .map(crate::code_mode::compile)
        .transpose()?
        .unwrap_or_default();

    Ok(
        Policy::from_parts(preset, default, approval, mode, rules, guards, post_execute)
            .with_stack(stack)
            .with_rate_limits(rate_limits)
            .with_code_mode(code_mode),
    )
}

/// Reads `version` first: a file for a newer format is reported as such
/// rather than as a list of keys this version does not know.
fn check_version(src: &str) -> Result<()> {
    let probe: VersionProbe = toml::from_str(src).map_err(toml_error)?;
    let Some(version) = probe.version else {
        return Err(LoadError::new(
            0..0,
            "missing `version = 1` (the policy file format version)",
        ));
    };
    match version.get_ref() {
        toml::Value::Integer(VERSION) => Ok(()),
        toml::Value::Integer(v) if *v > VERSION => Err(LoadError::new(
            version.span(),
            format!(
                "this policy was written for a newer toolhost (format version {v}); \
                 this toolhost reads version {VERSION}"
            ),
        )),
        other => Err(LoadError::new(
            version.span(),
            format!("unsupported version {other}: expected the integer {VERSION}"),
        )),
    }
}

/// Locates a toml error (syntax, unknown key, wrong type, missing key).
fn toml_error(e: toml::de::Error) -> LoadError {
    LoadError::new(e.span().unwrap_or(0..0), e.message().trim_end().to_string())
}

/// Parses a name such as a decision or a mode, located at its value.
pub(crate) fn name<T>(s: &Spanned<String>, key: &str) -> Result<T>
where
    T: FromStr,
    T::Err: std::fmt::Display,
{
    s.get_ref()
        .parse()
        .map_err(|e: T::Err| LoadError::new(s.span(), format!("{key}: {e}")))
}

pub(crate) fn at<T>(span: Range<usize>, r: std::result::Result<T, String>, key: &str) -> Result<T> {
    r.map_err(|m| LoadError::new(span, format!("{key}: {m}")))
}

/// Compiles one rule; `prefix` names its section in messages (`""` for the
/// top level, `"layers[2]."` inside a layer).
pub(crate) fn compile_rule(
    raw: &Spanned<RawRule>,
    prefix: &str,
    index: usize,
    line: usize,
) -> Result<Rule> {
    let key = format!("{prefix}rules[{index}]");
    let r = raw.get_ref();
    let tool = at(
        r.tool.span(),
        ToolPattern::new(r.tool.get_ref()),
        &format!("{key}.tool"),
    )?;
    let decision = name::<DecisionKind>(&r.decision, &format!("{key}.decision"))?;
    let reason = r.reason.as_ref().map(|s| s.get_ref().trim().to_string());
    if decision != DecisionKind::Allow && reason.as_deref().is_none_or(str::is_empty) {
        let span = r.reason.as_ref().map_or(raw.span(), |s| s.span());
        return Err(LoadError::new(
            span,
            format!(
                "{key}: a {decision} rule needs a non-empty reason \
                 (it is what the model and the approver are told)"
            ),
        ));
    }
    let args = r
        .args
        .iter()
        .enumerate()
        .map(|(i, m)| compile_arg_matcher(m, &format!("{key}.args[{i}]")))
        .collect::<Result<Vec<_>>>()?;
    let side_effects = match &r.side_effect {
        None => None,
        Some(list) if list.get_ref().is_empty() => {
            return Err(LoadError::new(
                list.span(),
                format!(
                    "{key}.side_effect: an empty list never matches; remove the key to match every side effect"
                ),
            ));
        }
        Some(list) => Some(
            list.get_ref()
                .iter()
                .map(|s| name::<SideEffect>(s, &format!("{key}.side_effect")))
                .collect::<Result<Vec<_>>>()?,
        ),
    };
    let network = match &r.network {
        None => None,
        Some(list) if !prefix.is_empty() => {
            return Err(LoadError::new(
                list.span(),
                format!(
                    "{key}.network: a layer only narrows and cannot grant network; \
                     grant it in a top-level [[rules]] entry or in [network]"
                ),
            ));
        }
        Some(list) => compile_rule_network(list, index, decision, side_effects.as_deref())?,
    };
    Ok(Rule::new(
        tool,
        decision,
        reason.unwrap_or_default(),
        args,
        side_effects,
        RuleOrigin::File { index, line },
    )
    .with_network(network))
}

/// The `network` of the file's `rules[index]`: each entry read and parsed
/// as an entry of `[network] allow` (by `toolhost_egress`, with its
/// messages), located at the entry. Refused where it could never grant
/// anything: in a deny rule (its calls never run) and in a rule whose
/// `side_effect` list matches no call of a tool that declares `external`
/// (the only tools network reaches). `None` for an empty list.
fn compile_rule_network(
    list: &Spanned<RawGrants>,
    index: usize,
    decision: DecisionKind,
    side_effects: Option<&[SideEffect]>,
) -> Result<Option<RuleGrants>> {
    let refuse = |why: &str| {
        Err(LoadError::new(
            list.span(),
            format!("rules[{index}].network: {why}"),
        ))
    };
    if decision == DecisionKind::Deny {
        return refuse(
            "a deny rule grants nothing (the calls it matches never run); \
             grant network in an allow or ask rule",
        );
    }
    // A rule's grants go to the calls it matches strictly
    // (`Rule::grants_to`): by the side effect a call is seen with, which
    // is `external` for the only tools network reaches, whatever the
    // rule's decision.
    if side_effects.is_some_and(|list| !list.contains(&SideEffect::External)) {
        return refuse(
            "network reaches only tools that declare side effect external, \
             and this rule's side_effect list matches none of their calls",
        );
    }
    let path = KeyPath::root().key("rules").index(index).key("network");
    let grants = list
        .get_ref()
        .0
        .iter()
        .enumerate()
        .map(|(i, entry)| {
            GrantEntry::grant_from_toml(entry.get_ref(), &path.index(i))
                .map_err(|e| LoadError::new(entry.span(), e.to_string()))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((!grants.is_empty()).then(|| RuleGrants::new(index, grants)))
}

fn compile_arg_matcher(raw: &Spanned<RawArgMatcher>, key: &str) -> Result<ArgMatcher> {
    let m = raw.get_ref();
    let pointer = m.pointer.get_ref();
    at(
        m.pointer.span(),
        check_pointer(pointer),
        &format!("{key}.pointer"),
    )?;
    match (&m.glob, &m.regex) {
        (Some(g), None) => at(
            g.span(),
            ArgMatcher::glob(pointer, g.get_ref()),
            &format!("{key}.glob"),
        ),
        (None, Some(r)) => at(
            r.span(),
            ArgMatcher::regex(pointer, r.get_ref()),
            &format!("{key}.regex"),
        ),
        (Some(_), Some(_)) => Err(LoadError::new(
            raw.span(),
            format!("{key}: a matcher has either `glob` or `regex`, not both"),
        )),
        (None, None) => Err(LoadError::new(
            raw.span(),
            format!("{key}: a matcher needs `glob` or `regex`"),
        )),
    }
}

/// Compiles one guard; `prefix` as for [`compile_rule`].
pub(crate) fn compile_guard(
    raw: &Spanned<RawGuard>,
    prefix: &str,
    index: usize,
) -> Result<PolicyGuard> {
    let key = format!("{prefix}guards[{index}]");
    let g = raw.get_ref();
    let name = match &g.name {
        Some(n) if n.get_ref().trim().is_empty() => {
            return Err(LoadError::new(n.span(), format!("{key}.name: empty name")));
        }
        Some(n) => n.get_ref().trim().to_string(),
        None => key.clone(),
    };
    let tool = at(
        g.tool.span(),
        ToolPattern::new(g.tool.get_ref()),
        &format!("{key}.tool"),
    )?;
    let reason = g.reason.get_ref().trim().to_string();
    if reason.is_empty() {
        return Err(LoadError::new(
            g.reason.span(),
            format!(
                "{key}.reason: a guard needs a non-empty reason (it is what the model is told)"
            ),
        ));
    }
    let args_regex = g
        .deny_args_matching
        .as_ref()
        .map(|r| {
            at(
                r.span(),
                regex(r.get_ref()),
                &format!("{key}.deny_args_matching"),
            )
        })
        .transpose()?;
    let paths = match (&g.deny_paths, &g.pointer) {
        (None, None) => None,
        (Some(list), None) => {
            return Err(LoadError::new(
                list.span(),
                format!(
                    "{key}.deny_paths: needs `pointer`, the argument holding the path (e.g. \"/path\")"
                ),
            ));
        }
        (None, Some(p)) => {
            return Err(LoadError::new(
                p.span(),
                format!("{key}.pointer: only used with `deny_paths`, which is missing"),
            ));
        }
        (Some(list), Some(p)) => {
            at(
                p.span(),
                check_pointer(p.get_ref()),
                &format!("{key}.pointer"),
            )?;
            if list.get_ref().is_empty() {
                return Err(LoadError::new(
                    list.span(),
                    format!("{key}.deny_paths: an empty list never denies"),
                ));
            }
            let globs = list
                .get_ref()
                .iter()
                .map(|s| {
                    at(
                        s.span(),
                        path_glob(s.get_ref()),
                        &format!("{key}.deny_paths"),
                    )
                    .map(|m| (s.get_ref().clone(), m))
                })
                .collect::<Result<Vec<_>>>()?;
            Some(PathCheck::new(p.get_ref().clone(), globs))
        }
    };
    if args_regex.is_none() && paths.is_none() {
        return Err(LoadError::new(
            raw.span(),
            format!(
                "{key}: a guard needs `deny_args_matching` or `deny_paths`, or it never denies"
            ),
        ));
    }
    Ok(PolicyGuard {
        name,
        tool,
        args_regex,
        paths,
        reason,
    })
}

fn compile_post_execute(p: &RawPostExecute) -> Result<PostExecuteRules> {
    let non_empty = |s: &Spanned<String>, key: &str| -> Result<regex::Regex> {
        let re = at(s.span(), regex(s.get_ref()), key)?;
        if re.is_match("") {
            return Err(LoadError::new(
                s.span(),
                format!("{key}: regex {:?} matches the empty string", s.get_ref()),
            ));
        }
        Ok(re)
    };
    let redact = p
        .redact
        .iter()
        .map(|s| non_empty(s, "post_execute.redact"))
        .collect::<Result<Vec<_>>>()?;
    let block_matching = p
        .block_matching
        .as_ref()
        .map(|s| non_empty(s, "post_execute.block_matching"))
        .transpose()?;
    let max_content_chars = p
        .max_content_chars
        .as_ref()
        .map(|n| {
            usize::try_from(*n.get_ref()).map_err(|_| {
                LoadError::new(
                    n.span(),
                    format!(
                        "post_execute.max_content_chars: {} is not a character count",
                        n.get_ref()
                    ),
                )
            })
        })
        .transpose()?;
    Ok(PostExecuteRules {
        redact,
        max_content_chars,
        block_matching,
    })
}

/// An example call, owned, with a short description for messages.
struct Example {
    tool: String,
    args: serde_json::Value,
    side_effect: SideEffect,
    mode: SandboxMode,
}

impl Example {
    fn new(raw: &RawExample, mode: SandboxMode, key: &str) -> Result<Self> {
        let side_effect = raw
            .side_effect
            .as_ref()
            .map(|s| name::<SideEffect>(s, &format!("{key}.side_effect")))
            .transpose()?
            .unwrap_or(SideEffect::None);
        let mode = raw
            .mode
            .as_ref()
            .map(|m| name::<SandboxMode>(m, &format!("{key}.mode")))
            .transpose()?
            .unwrap_or(mode);
        Ok(Example {
            tool: raw.tool.get_ref().clone(),
            args: table_to_json(&raw.args),
            side_effect,
            mode,
        })
    }

    /// The call as the host would judge it ([`CallFacts::of_call`]).
    fn facts(&self) -> CallFacts<'_> {
        CallFacts::of_call(&self.tool, &self.args, self.side_effect, self.mode)
    }

    fn describe(&self) -> String {
        format!("(tool {:?}, args {})", self.tool, self.args)
    }
}

pub(crate) fn check_rule_examples(
    rule: &Rule,
    prefix: &str,
    index: usize,
    raw: &RawRule,
    mode: SandboxMode,
) -> Result<()> {
    let cases = [
        (&raw.must_match, "must_match", true),
        (&raw.must_not_match, "must_not_match", false),
    ];
    for (list, list_name, want) in cases {
        for (i, ex) in list.iter().enumerate() {
            let key = format!("{prefix}rules[{index}].{list_name}[{i}]");
            let example = Example::new(ex.get_ref(), mode, &key)?;
            if rule.matches(&example.facts()) != want {
                let verb = if want { "does not match" } else { "matches" };
                return Err(LoadError::new(
                    ex.span(),
                    format!(
                        "{prefix}rules[{index}] (tool {:?}): example {list_name}[{i}] {} {verb} the rule",
                        rule.tool_pattern(),
                        example.describe()
                    ),
                ));
            }
        }
    }
    Ok(())
}

pub(crate) fn check_guard_examples(
    guard: &PolicyGuard,
    raw: &RawGuard,
    mode: SandboxMode,
) -> Result<()> {
    let cases = [
        (&raw.must_deny, "must_deny", true),
        (&raw.must_allow, "must_allow", false),
    ];
    for (list, list_name, want_deny) in cases {
        for (i, ex) in list.iter().enumerate() {
            let key = format!("{}.{list_name}[{i}]", guard.name());
            let example = Example::new(ex.get_ref(), mode, &key)?;
            let denied = matches!(guard.check(&example.facts()), GuardVerdict::Deny { .. });
            if denied != want_deny {
                let verb = if want_deny {
                    "is not denied by"
                } else {
                    "is denied by"
                };
                return Err(LoadError::new(
                    ex.span(),
                    format!(
                        "guard {}: example {list_name}[{i}] {} {verb} the guard",
                        guard.name(),
                        example.describe()
                    ),
                ));
            }
        }
    }
    Ok(())
}
