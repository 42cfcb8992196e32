//! [`Rule`]: one compiled pre-execute rule, where it came from ([`RuleOrigin`])
//! and how an evaluation names it ([`RuleRef`]).

use crate::decision::DecisionKind;
use crate::facts::CallFacts;
use crate::matcher::{ArgMatcher, ToolPattern};
use crate::preset::Preset;
use crate::side_effect::SideEffect;
use std::fmt;
use toolhost_egress::RuleGrants;

/// Where a rule came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RuleOrigin {
    /// The built-in rule of a preset.
    Preset(Preset),
    /// A `[[rules]]` entry of the policy file.
    File {
        /// Its 0-based position among the file's `[[rules]]`.
        index: usize,
        /// The 1-based line where it starts.
        line: usize,
    },
}

/// Names the rule that decided a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RuleRef {
    /// Its position in [`Policy::rules`](crate::Policy::rules).
    pub index: usize,
    /// Where it came from.
    pub origin: RuleOrigin,
}

impl fmt::Display for RuleRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.origin {
            RuleOrigin::Preset(p) => write!(f, "the built-in rule of preset {p}"),
            RuleOrigin::File { index, line } => write!(f, "rules[{index}] (line {line})"),
        }
    }
}

/// A compiled rule: when its matchers all match a call, it proposes its decision.
#[derive(Debug, Clone)]
pub struct Rule {
    tool: ToolPattern,
    decision: DecisionKind,
    reason: String,
    args: Vec<ArgMatcher>,
    side_effects: Option<Vec<SideEffect>>,
    origin: RuleOrigin,
    /// The network grants of the calls it matches (`None` when it grants none).
    network: Option<RuleGrants>,
}

impl Rule {
    pub(crate) fn new(
        tool: ToolPattern,
        decision: DecisionKind,
        reason: String,
        args: Vec<ArgMatcher>,
        side_effects: Option<Vec<SideEffect>>,
        origin: RuleOrigin,
    ) -> Self {
        Rule {
            tool,
            decision,
            reason,
            args,
            side_effects,
            origin,
            network: None,
        }
    }

    /// This rule granting `network` to the calls it matches.
    pub(crate) fn with_network(mut self, network: Option<RuleGrants>) -> Self {
        self.network = network;
        self
    }

    /// The rule a preset adds, if any.
    pub(crate) fn for_preset(preset: Preset) -> Option<Rule> {
        let (effects, reason) = preset.ask_rule()?;
        let tool = ToolPattern::new("*").ok()?;
        Some(Rule::new(
            tool,
            DecisionKind::Ask,
            reason.to_string(),
            Vec::new(),
            Some(effects.to_vec()),
            RuleOrigin::Preset(preset),
        ))
    }

    /// The tool pattern as written.
    pub fn tool_pattern(&self) -> &str {
        self.tool.as_str()
    }

    /// The decision the rule proposes when it matches.
    pub fn decision(&self) -> DecisionKind {
        self.decision
    }

    /// The rule's reason (may be empty for an allow rule).
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// Where the rule came from.
    pub fn origin(&self) -> RuleOrigin {
        self.origin
    }

    /// The network grants this rule adds to the calls it matches (its
    /// `network` key), if any: `allow` grants, for tools that declare the
    /// side effect `external` (see [`Policy::network_grants`](crate::Policy::network_grants)).
    pub fn network(&self) -> Option<&RuleGrants> {
        self.network.as_ref()
    }

    /// True when the tool pattern matches `tool` (whatever the call's
    /// arguments and side effect).
    pub fn matches_tool(&self, tool: &str) -> bool {
        self.tool.matches(tool)
    }

    /// True when the tool pattern, every argument matcher and the side-effect
    /// list (if any) all match the call. An allow rule's list must name the
    /// side effect the call is seen with; a deny or ask rule's any side
    /// effect the call may have ([`CallFacts::may`]): either way a matching
    /// rule can only make the call's decision stricter than the tool's own
    /// declaration would.
    pub fn matches(&self, facts: &CallFacts<'_>) -> bool {
        self.matches_as(facts, self.decision() == DecisionKind::Allow)
    }

    /// True when the rule matches the call as an allow rule does (the
    /// side effect it is seen with, every argument matcher strictly),
    /// whatever its decision: a rule's network grants widen what the call
    /// may do, so an `ask` rule's looser matching, which could only make a
    /// call stricter, does not hand them out.
    pub fn grants_to(&self, facts: &CallFacts<'_>) -> bool {
        self.matches_as(facts, true)
    }

    fn matches_as(&self, facts: &CallFacts<'_>, strict: bool) -> bool {
        self.matches_by(facts, strict, |_, m| m.matches(facts.args, strict))
    }

    /// [`Rule::matches_as`], with `arg` answering for the `j`th argument
    /// matcher (the callers that evaluate many rules answer their globs
    /// from one pass over the arguments, `arg_globs.rs`).
    pub(crate) fn matches_by(
        &self,
        facts: &CallFacts<'_>,
        strict: bool,
        mut arg: impl FnMut(usize, &ArgMatcher) -> bool,
    ) -> bool {
        self.tool.matches(facts.tool)
            && self.side_effects.as_ref().is_none_or(|list| {
                if strict {
                    list.contains(&facts.side_effect)
                } else {
                    list.iter().any(|e| facts.may(*e))
                }
            })
            && self.args.iter().enumerate().all(|(j, m)| arg(j, m))
    }

    /// The argument matchers, in file order.
    pub(crate) fn args(&self) -> &[ArgMatcher] {
        &self.args
    }
}
