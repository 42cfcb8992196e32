//! Policy as a fixed stack of layers that only narrow, and the trace of one
//! call through it ([`Policy::trace`]).
//!
//! The order is fixed: profile (the preset) → global (the file's top level
//! and its `[principals]`) → group → principal → agent (the call's scope and
//! its parents) → sandbox mode → subagent. The file's `[[layers]]` entries
//! are sorted into that order (file order within a kind); only those that
//! apply to the call's [`Subject`] and mode take part.
//!
//! Why a layer can never widen, by construction:
//!
//! * visibility: a tool is visible only when *no* layer hides it (each
//!   `allow` list is one more intersection, each `deny` one more removal);
//! * decisions: each layer proposes at most one decision and the strictest
//!   over all layers wins, so a later `allow` cannot undo an earlier `ask` or
//!   `deny` (inside one layer an allow rule still beats that layer's own
//!   default, which is how a layer writes an allow-list of calls);
//! * guards accumulate and can only deny;
//! * `approval = "never"` in any layer means nobody is asked.
//!
//! Subagents are narrowed by default: a call from a scope that has a parent
//! does not see the session and orchestration tools ([`DEFAULT_SUBAGENT_WITHHELD`],
//! or the file's `[subagents] withheld`), unless a subagent layer that
//! applies to it lists them in `open`. `open` gives back only what this
//! default withheld: a tool another layer hides, or that owner-only keeps
//! from the principal, stays hidden, and `open` changes no decision.
//!
//! Profile and global are decided together, exactly as the single policy
//! file always was ([`Policy::evaluate`]): the strictest matching rule of the
//! preset and the file, else the file's default.

use crate::arg_globs::ArgGlobs;
use crate::decision::{ApprovalSetting, Decision, DecisionKind};
use crate::error::{LoadError, line_col};
use crate::facts::CallFacts;
use crate::file::{RawLayer, RawPolicy};
use crate::guard::{Guard, GuardDenial, GuardVerdict};
use crate::load::{
    at, check_guard_examples, check_rule_examples, compile_guard, compile_rule, name,
};
use crate::matcher::ToolPattern;
use crate::patch::Patch;
use crate::policy::Policy;
use crate::policy_guard::PolicyGuard;
use crate::principal::{Principals, Subject, check_principal_name};
use crate::rule::{Rule, RuleOrigin};
use std::fmt;
use std::str::FromStr;
use toml::Spanned;
use toolhost_core::SandboxMode;

/// The tools a subagent scope does not get unless a subagent layer opens
/// them, when the policy has no `[subagents] withheld`: tools that list,
/// read or drive sessions and that spawn or steer other agents, by the
/// names such tools go by. A policy names its own with `withheld`
/// (`withheld = []` withholds nothing).
pub const DEFAULT_SUBAGENT_WITHHELD: [&str; 6] = [
    "session_*",
    "sessions_*",
    "subagent_*",
    "subagents_*",
    "spawn_*",
    "agents_*",
];

/// The kinds of layer, in the order they apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LayerKind {
    /// The preset's built-in rule.
    Profile,
    /// The policy file's top level (rules, default, guards, `[principals]`).
    Global,
    /// A `[[layers]]` entry for a group of principals.
    Group,
    /// A `[[layers]]` entry for one principal.
    Principal,
    /// A `[[layers]]` entry for a scope (an agent), applied to calls from it
    /// and from its sub-scopes.
    Agent,
    /// A `[[layers]]` entry for calls running in one sandbox mode.
    Mode,
    /// A `[[layers]]` entry for calls from a scope that has a parent.
    Subagent,
}

impl LayerKind {
    /// Every kind, in the order they apply.
    pub const ALL: [LayerKind; 7] = [
        LayerKind::Profile,
        LayerKind::Global,
        LayerKind::Group,
        LayerKind::Principal,
        LayerKind::Agent,
        LayerKind::Mode,
        LayerKind::Subagent,
    ];

    /// The name as written in `kind = "..."`.
    pub fn as_str(self) -> &'static str {
        match self {
            LayerKind::Profile => "profile",
            LayerKind::Global => "global",
            LayerKind::Group => "group",
            LayerKind::Principal => "principal",
            LayerKind::Agent => "agent",
            LayerKind::Mode => "mode",
            LayerKind::Subagent => "subagent",
        }
    }
}

impl fmt::Display for LayerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for LayerKind {
    type Err = crate::error::UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        LayerKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                crate::error::UnknownName::new(
                    "layer kind",
                    s,
                    "group, principal, agent, mode or subagent",
                )
            })
    }
}

/// Which layer and which of its rules made a decision or hid a tool.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Blame {
    /// The layer, e.g. `global`, `profile:read-only`, `principal:bob`.
    pub layer: String,
    /// The rule in it, e.g. `rules[0] (line 8)`, `default`,
    /// `principals.owner_only[0] (line 3)`, `layers[1].deny[0] (line 12)`.
    pub rule: String,
}

impl fmt::Display for Blame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "layer {}, {}", self.layer, self.rule)
    }
}

/// What one layer says about one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerStep {
    /// The layer, as in [`Blame::layer`].
    pub layer: String,
    /// The rule of this layer that hides the tool, if any.
    pub hidden_by: Option<String>,
    /// The layer's decision; `None` when it has no opinion (no rule matched
    /// and it sets no default).
    pub decision: Option<Decision>,
    /// The rule behind `decision` (`default` for the layer's default).
    pub rule: Option<String>,
    /// The first of this layer's guards that denies, if any.
    pub guard: Option<GuardDenial>,
    /// The layer's approval setting, if it sets one.
    pub approval: Option<ApprovalSetting>,
}

/// A call's way through every layer that applies: what [`Policy::trace`]
/// returns. Pure: computing it runs nothing and records nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    /// One step per layer that applies, in order.
    pub steps: Vec<LayerStep>,
    /// The first layer that hides the tool; a hidden tool is refused.
    pub hidden: Option<Blame>,
    /// The strictest decision over all layers.
    pub decision: Decision,
    /// Where the decision came from (the first layer with the strictest one).
    pub decided_by: Blame,
    /// The first denial of a layer's guard (the file's top-level guards are
    /// run by [`Guards`](crate::Guards), not here).
    pub guard: Option<(Blame, GuardDenial)>,
    /// The strictest approval setting over all layers.
    pub approval: ApprovalSetting,
    /// The layer that set `approval = "never"`, if one did.
    pub approval_by: Option<String>,
}

/// A compiled `[[layers]]` entry.
#[derive(Debug, Clone)]
pub(crate) struct Layer {
    kind: LayerKind,
    name: Option<String>,
    mode: Option<SandboxMode>,
    allow: Option<(Vec<ToolPattern>, usize)>,
    deny: Vec<(ToolPattern, usize)>,
    default: Option<DecisionKind>,
    approval: Option<ApprovalSetting>,
    rules: Vec<Rule>,
    /// The deny and ask rules' argument globs, one set per pointer.
    arg_globs: ArgGlobs,
    guards: Vec<PolicyGuard>,
    /// Subagent layers: withheld tools given back.
    open: Vec<ToolPattern>,
    /// Its position among the file's `[[layers]]`.
    index: usize,
}

impl Layer {
    fn label(&self) -> String {
        match &self.name {
            Some(n) => format!("{}:{n}", self.kind),
            None => self.kind.to_string(),
        }
    }

    fn applies(&self, principals: &Principals, subject: &Subject<'_>, mode: SandboxMode) -> bool {
        let name = self.name.as_deref();
        match self.kind {
            LayerKind::Group => name.is_some_and(|g| principals.in_group(g, subject.principal)),
            LayerKind::Principal => name == Some(subject.principal),
            LayerKind::Agent => name.is_some_and(|n| subject.scopes.iter().any(|s| s == n)),
            LayerKind::Mode => self.mode == Some(mode),
            LayerKind::Subagent => {
                subject.is_subagent() && name.is_none_or(|n| subject.scope() == Some(n))
            }
            LayerKind::Profile | LayerKind::Global => true,
        }
    }

    fn hides(&self, tool: &str) -> Option<String> {
        let i = self.index;
        if let Some((allow, line)) = &self.allow
            && !allow.iter().any(|p| p.matches(tool))
        {
            return Some(format!("layers[{i}].allow (line {line})"));
        }
        self.deny
            .iter()
            .enumerate()
            .find(|(_, (p, _))| p.matches(tool))
            .map(|(j, (_, line))| format!("layers[{i}].deny[{j}] (line {line})"))
    }

    /// The strictest matching rule, else the default, else no opinion.
    fn decide(&self, facts: &CallFacts<'_>) -> Option<(Decision, String)> {
        let mut hits = self.arg_globs.hits(facts.args);
        let mut best: Option<(usize, &Rule)> = None;
        for (j, rule) in self.rules.iter().enumerate() {
            if best.is_some_and(|(_, b)| b.decision() >= rule.decision())
                || !hits.rule_matches(j, rule, facts)
            {
                continue;
            }
            best = Some((j, rule));
        }
        match best {
            Some((j, rule)) => {
                let line = match rule.origin() {
                    RuleOrigin::File { line, .. } => line,
                    RuleOrigin::Preset(_) => 0,
                };
                Some((
                    with_reason(rule.decision(), rule.reason().to_string()),
                    format!("layers[{}].rules[{j}] (line {line})", self.index),
                ))
            }
            None => self.default.map(|d| {
                (
                    with_reason(
                        d,
                        format!(
                            "no rule of layer {} matched tool {:?} and its default is {d}",
                            self.label(),
                            facts.tool
                        ),
                    ),
                    format!("layers[{}].default", self.index),
                )
            }),
        }
    }
}

/// Principals, layers, patches and the subagent default of a policy;
/// empty (but for the built-in subagent default) for a file that has none
/// of these sections.
#[derive(Debug, Clone)]
pub(crate) struct Stack {
    pub(crate) principals: Principals,
    pub(crate) layers: Vec<Layer>,
    pub(crate) patches: Vec<Patch>,
    /// What subagents do not get by default, each pattern with its line
    /// (`None`: built in).
    pub(crate) withheld: Vec<(ToolPattern, Option<usize>)>,
}

impl Default for Stack {
    fn default() -> Self {
        Stack {
            principals: Principals::default(),
            layers: Vec::new(),
            patches: Vec::new(),
            withheld: built_in_withheld(),
        }
    }
}

fn built_in_withheld() -> Vec<(ToolPattern, Option<usize>)> {
    DEFAULT_SUBAGENT_WITHHELD
        .iter()
        .filter_map(|p| ToolPattern::new(p).ok().map(|p| (p, None)))
        .collect()
}

impl Policy {
    /// True when `principal` is an owner: [`LOCAL_PRINCIPAL`](crate::LOCAL_PRINCIPAL)
    /// or one of `[principals] owners`.
    pub fn is_owner(&self, principal: &str) -> bool {
        self.stack.principals.is_owner(principal)
    }

    /// True when the file declares `[[layers]]` or `owner_only` tools (a
    /// call's principal and scope can then change what it may do).
    pub fn has_layers(&self) -> bool {
        !self.stack.layers.is_empty() || !self.stack.principals.owner_only.is_empty()
    }

    /// The patterns of the tools a subagent does not get unless a subagent
    /// layer opens them (see [`DEFAULT_SUBAGENT_WITHHELD`]).
    pub fn subagent_withheld(&self) -> Vec<&str> {
        self.stack
            .withheld
            .iter()
            .map(|(p, _)| p.as_str())
            .collect()
    }

    /// Whether `tool` is visible to `subject` in `mode`: `None` when it is,
    /// else the first layer (and its rule) that hides it. Listing and lookup
    /// both use this; hidden tools are also refused.
    pub fn hidden(&self, tool: &str, subject: &Subject<'_>, mode: SandboxMode) -> Option<Blame> {
        if let Some(b) = self.owner_only_hides(tool, subject) {
            return Some(b);
        }
        self.applying(subject, mode)
            .find_map(|l| l.hides(tool).map(|rule| blame(&l.label(), rule)))
            .or_else(|| self.subagent_withholds(tool, subject, mode))
    }

    /// The subagent default: `Some` when `subject` is a subagent, `tool` is
    /// withheld and no subagent layer that applies opens it.
    fn subagent_withholds(
        &self,
        tool: &str,
        subject: &Subject<'_>,
        mode: SandboxMode,
    ) -> Option<Blame> {
        if !subject.is_subagent() {
            return None;
        }
        let (i, line) = self
            .stack
            .withheld
            .iter()
            .enumerate()
            .find(|(_, (p, _))| p.matches(tool))
            .map(|(i, (_, line))| (i, *line))?;
        let opened = self
            .applying(subject, mode)
            .any(|l| l.kind == LayerKind::Subagent && l.open.iter().any(|p| p.matches(tool)));
        if opened {
            return None;
        }
        let rule = match line {
            Some(line) => format!("subagents.withheld[{i}] (line {line})"),
            None => format!(
                "the built-in subagent default {:?}",
                DEFAULT_SUBAGENT_WITHHELD
                    .get(i)
                    .copied()
                    .unwrap_or_default()
            ),
        };
        Some(blame(
            "subagent",
            format!(
                "{rule}: a subagent gets no session or orchestration tool unless a subagent layer opens it"
            ),
        ))
    }

    fn owner_only_hides(&self, tool: &str, subject: &Subject<'_>) -> Option<Blame> {
        self.stack
            .principals
            .withheld(tool, subject.principal)
            .map(|(i, line)| {
                blame(
                    "global",
                    format!("principals.owner_only[{i}] (line {line}): only owners may use it"),
                )
            })
    }

    fn applying<'s>(
        &'s self,
        subject: &'s Subject<'_>,
        mode: SandboxMode,
    ) -> impl Iterator<Item = &'s Layer> + 's {
        self.stack
            .layers
            .iter()
            .filter(move |l| l.applies(&self.stack.principals, subject, mode))
    }

    /// Runs one call through every layer that applies to `subject` (in
    /// `facts.mode`) and says what each one decides. Pure.
    pub fn trace(&self, facts: &CallFacts<'_>, subject: &Subject<'_>) -> Trace {
        let mut steps = Vec::new();
        // Profile and global, decided together as the single file always was.
        let base = self.evaluate(facts);
        let base_blame = match base.matched.map(|m| m.origin) {
            Some(RuleOrigin::Preset(p)) => blame(
                &format!("profile:{p}"),
                format!("the built-in rule of preset {p}"),
            ),
            Some(RuleOrigin::File { index, line }) => {
                blame("global", format!("rules[{index}] (line {line})"))
            }
            None => blame("global", "default".to_string()),
        };
        if let Some(p) = self.preset() {
            let matched = self
                .rules()
                .iter()
                .find(|r| matches!(r.origin(), RuleOrigin::Preset(_)) && r.matches(facts));
            steps.push(LayerStep {
                layer: format!("profile:{p}"),
                hidden_by: None,
                decision: matched.map(|r| with_reason(r.decision(), r.reason().to_string())),
                rule: matched.map(|_| format!("the built-in rule of preset {p}")),
                guard: None,
                approval: None,
            });
        }
        let owner_only = self.owner_only_hides(facts.tool, subject);
        steps.push(LayerStep {
            layer: "global".into(),
            hidden_by: owner_only.as_ref().map(|b| b.rule.clone()),
            decision: Some(base.decision.clone()),
            rule: Some(if base_blame.layer == "global" {
                base_blame.rule.clone()
            } else {
                format!("{} (with the preset)", base_blame.rule)
            }),
            guard: None,
            approval: Some(self.approval()),
        });
        let mut hidden = owner_only;
        let mut decision = base.decision;
        let mut decided_by = base_blame;
        let mut guard = None;
        let (mut approval, mut approval_by) = match self.approval() {
            ApprovalSetting::Never => (ApprovalSetting::Never, Some("global".to_string())),
            ApprovalSetting::Ask => (ApprovalSetting::Ask, None),
        };
        for layer in self.applying(subject, facts.mode) {
            let label = layer.label();
            let hidden_by = layer.hides(facts.tool);
            if hidden.is_none()
                && let Some(rule) = &hidden_by
            {
                hidden = Some(blame(&label, rule.clone()));
            }
            let decided = layer.decide(facts);
            if let Some((d, rule)) = &decided
                && d.kind() > decision.kind()
            {
                decision = d.clone();
                decided_by = blame(&label, rule.clone());
            }
            let denial = layer.guards.iter().find_map(|g| match g.check(facts) {
                GuardVerdict::Pass => None,
                GuardVerdict::Deny { reason } => Some(GuardDenial {
                    guard: g.name().to_string(),
                    reason,
                }),
            });
            if guard.is_none()
                && let Some(d) = &denial
            {
                guard = Some((blame(&label, format!("guard {}", d.guard)), d.clone()));
            }
            if layer.approval == Some(ApprovalSetting::Never) && approval_by.is_none() {
                approval = ApprovalSetting::Never;
                approval_by = Some(label.clone());
            }
            let (decision, rule) = match decided {
                Some((d, r)) => (Some(d), Some(r)),
                None => (None, None),
            };
            steps.push(LayerStep {
                layer: label,
                hidden_by,
                decision,
                rule,
                guard: denial,
                approval: layer.approval,
            });
        }
        // The subagent default, after every layer: only what no layer hid.
        if let Some(b) = self.subagent_withholds(facts.tool, subject, facts.mode) {
            steps.push(LayerStep {
                layer: b.layer.clone(),
                hidden_by: Some(b.rule.clone()),
                decision: None,
                rule: None,
                guard: None,
                approval: None,
            });
            if hidden.is_none() {
                hidden = Some(b);
            }
        }
        Trace {
            steps,
            hidden,
            decision,
            decided_by,
            guard,
            approval,
            approval_by,
        }
    }
}

fn blame(layer: &str, rule: String) -> Blame {
    Blame {
        layer: layer.to_string(),
        rule,
    }
}

fn with_reason(kind: DecisionKind, reason: String) -> Decision {
    match kind {
        DecisionKind::Allow => Decision::Allow,
        DecisionKind::Ask => Decision::Ask { reason },
        DecisionKind::Deny => Decision::Deny { reason },
    }
}

type LoadResult<T> = std::result::Result<T, LoadError>;

/// Compiles `[principals]`, `[[layers]]` and `[[patches]]`. `mode` is the
/// policy's default mode (for layer rule examples that name none).
pub(crate) fn compile(raw: &RawPolicy, src: &str, mode: SandboxMode) -> LoadResult<Stack> {
    let principals = match &raw.principals {
        None => Principals::default(),
        Some(p) => compile_principals(p.get_ref(), src)?,
    };
    let mut layers = Vec::new();
    for (index, l) in raw.layers.iter().enumerate() {
        layers.push(compile_layer(l, index, src, &principals, mode)?);
    }
    // Sorted into the fixed order; stable, so file order within a kind.
    layers.sort_by_key(|l| l.kind);
    let patches = crate::patch::compile(&raw.patches, src)?;
    let withheld = match raw
        .subagents
        .as_ref()
        .and_then(|s| s.get_ref().withheld.as_ref())
    {
        None => built_in_withheld(),
        Some(list) => list
            .get_ref()
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let p = at(
                    t.span(),
                    ToolPattern::new(t.get_ref()),
                    &format!("subagents.withheld[{i}]"),
                )?;
                Ok((p, Some(line_col(src, t.span().start).0)))
            })
            .collect::<LoadResult<Vec<_>>>()?,
    };
    Ok(Stack {
        principals,
        layers,
        patches,
        withheld,
    })
}

fn principal_name(s: &Spanned<String>, key: &str) -> LoadResult<String> {
    at(s.span(), check_principal_name(s.get_ref()), key)?;
    Ok(s.get_ref().clone())
}

fn compile_principals(p: &crate::file::RawPrincipals, src: &str) -> LoadResult<Principals> {
    let owners = p
        .owners
        .iter()
        .map(|o| principal_name(o, "principals.owners"))
        .collect::<LoadResult<Vec<_>>>()?;
    let owner_only = p
        .owner_only
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let pattern = at(
                t.span(),
                ToolPattern::new(t.get_ref()),
                &format!("principals.owner_only[{i}]"),
            )?;
            Ok((pattern, line_col(src, t.span().start).0))
        })
        .collect::<LoadResult<Vec<_>>>()?;
    let mut groups = std::collections::BTreeMap::new();
    for (group, members) in &p.groups {
        at(
            members.span(),
            check_principal_name(group),
            "principals.groups",
        )?;
        if members.get_ref().is_empty() {
            return Err(LoadError::new(
                members.span(),
                format!("principals.groups.{group}: an empty group never applies"),
            ));
        }
        let names = members
            .get_ref()
            .iter()
            .map(|m| principal_name(m, &format!("principals.groups.{group}")))
            .collect::<LoadResult<Vec<_>>>()?;
        groups.insert(group.clone(), names);
    }
    Ok(Principals {
        owners,
        owner_only,
        groups,
    })
}

fn compile_layer(
    raw: &Spanned<RawLayer>,
    index: usize,
    src: &str,
    principals: &Principals,
    policy_mode: SandboxMode,
) -> LoadResult<Layer> {
    let key = format!("layers[{index}]");
    let l = raw.get_ref();
    let kind = name::<LayerKind>(&l.kind, &format!("{key}.kind"))?;
    if matches!(kind, LayerKind::Profile | LayerKind::Global) {
        return Err(LoadError::new(
            l.kind.span(),
            format!(
                "{key}.kind: the {kind} layer is the file itself (`preset`, and the top-level keys); \
                 a [[layers]] entry is a group, principal, agent, mode or subagent layer"
            ),
        ));
    }
    let layer_name = match (&l.name, kind) {
        (None, LayerKind::Subagent) => None,
        (None, _) => {
            return Err(LoadError::new(
                raw.span(),
                format!("{key}: a {kind} layer needs `name`"),
            ));
        }
        (Some(n), _) => Some(n),
    };
    let mut mode = None;
    if let Some(n) = layer_name {
        let nkey = format!("{key}.name");
        match kind {
            LayerKind::Mode => mode = Some(name::<SandboxMode>(n, &nkey)?),
            LayerKind::Group => {
                if !principals.groups.contains_key(n.get_ref()) {
                    return Err(LoadError::new(
                        n.span(),
                        format!(
                            "{nkey}: group {:?} is not declared in [principals.groups]",
                            n.get_ref()
                        ),
                    ));
                }
            }
            LayerKind::Principal => {
                principal_name(n, &nkey)?;
            }
            _ => {
                if n.get_ref().trim().is_empty() {
                    return Err(LoadError::new(n.span(), format!("{nkey}: empty name")));
                }
            }
        }
    }
    let pattern = |s: &Spanned<String>, k: &str| -> LoadResult<(ToolPattern, usize)> {
        let p = at(s.span(), ToolPattern::new(s.get_ref()), k)?;
        Ok((p, line_col(src, s.span().start).0))
    };
    let allow = match &l.allow {
        None => None,
        Some(list) if list.get_ref().is_empty() => {
            return Err(LoadError::new(
                list.span(),
                format!(
                    "{key}.allow: an empty list hides every tool; use deny = [\"*\"] to mean that"
                ),
            ));
        }
        Some(list) => Some((
            list.get_ref()
                .iter()
                .map(|s| pattern(s, &format!("{key}.allow")).map(|(p, _)| p))
                .collect::<LoadResult<Vec<_>>>()?,
            line_col(src, list.span().start).0,
        )),
    };
    let deny = l
        .deny
        .iter()
        .enumerate()
        .map(|(j, s)| pattern(s, &format!("{key}.deny[{j}]")))
        .collect::<LoadResult<Vec<_>>>()?;
    let default = l
        .default
        .as_ref()
        .map(|d| name::<DecisionKind>(d, &format!("{key}.default")))
        .transpose()?;
    let approval = l
        .approval
        .as_ref()
        .map(|a| name::<ApprovalSetting>(a, &format!("{key}.approval")))
        .transpose()?;
    if kind != LayerKind::Subagent
        && let Some(first) = l.open.first()
    {
        return Err(LoadError::new(
            first.span(),
            format!(
                "{key}.open: only a subagent layer opens tools (what subagents are withheld by default); \
                 a {kind} layer can only narrow"
            ),
        ));
    }
    let open = l
        .open
        .iter()
        .enumerate()
        .map(|(j, s)| pattern(s, &format!("{key}.open[{j}]")).map(|(p, _)| p))
        .collect::<LoadResult<Vec<_>>>()?;
    let prefix = format!("{key}.");
    let example_mode = mode.unwrap_or(policy_mode);
    let mut rules = Vec::new();
    for (j, r) in l.rules.iter().enumerate() {
        let line = line_col(src, r.span().start).0;
        let rule = compile_rule(r, &prefix, j, line)?;
        check_rule_examples(&rule, &prefix, j, r.get_ref(), example_mode)?;
        rules.push(rule);
    }
    let mut guards = Vec::new();
    for (j, g) in l.guards.iter().enumerate() {
        let guard = compile_guard(g, &prefix, j)?;
        check_guard_examples(&guard, g.get_ref(), example_mode)?;
        guards.push(guard);
    }
    Ok(Layer {
        kind,
        name: layer_name.map(|n| n.get_ref().clone()),
        mode,
        allow,
        deny,
        default,
        approval,
        arg_globs: ArgGlobs::new(&rules),
        rules,
        guards,
        open,
        index,
    })
}
