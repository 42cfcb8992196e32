//! [`Policy`]: a loaded policy file, and [`Policy::evaluate`], the pure
//! pre-execute decision (DESIGN.md §1, step 3).
//!
//! A `Policy` is immutable once built and cheap to share; evaluation reads it
//! and the call's facts, nothing else.

use crate::arg_globs::ArgGlobs;
use crate::decision::{ApprovalSetting, Decision, DecisionKind, Evaluation};
use crate::error::PolicyError;
use crate::facts::CallFacts;
use crate::policy_guard::PolicyGuard;
use crate::post_execute::PostExecuteRules;
use crate::preset::Preset;
use crate::rate_limit::RateLimits;
use crate::rule::{Rule, RuleRef};
use toolhost_core::SandboxMode;
use toolhost_egress::{NetworkPolicy, RuleGrants};

/// A policy: pre-execute rules, guards and post-execute rules.
///
/// # File format (version 1)
///
/// ```toml
/// version = 1                  # required; a larger number is "written for a newer toolhost"
/// preset = "workspace-write"   # optional: read-only | workspace-write | danger-full-access
/// default = "allow"            # allow | deny | ask, for calls no rule matches
/// approval = "ask"             # ask | never (never: every ask is refused without asking)
/// mode = "workspace-write"     # default sandbox mode: none | read-only | workspace-write | danger-full-access
///
/// [[rules]]
/// tool = "write_file"          # exact name or glob (globset syntax); not empty
/// decision = "ask"             # allow | deny | ask
/// reason = "writes need a human"   # required (non-empty) for deny and ask
/// # optional; every matcher must match. `pointer` is a JSON pointer into the
/// # arguments; exactly one of `glob` (`*` stays within a `/` segment, `**`
/// # crosses) or `regex`. A missing value or null never matches; an array or
/// # object matches a deny or ask rule when any key or value in it does (at any
/// # depth), never an allow rule.
/// args = [ { pointer = "/path", glob = "src/**" }, { pointer = "/content", regex = "TODO" } ]
/// side_effect = ["write", "external"]   # optional: none | read | write | external
/// # optional examples, checked at load against this rule alone. Keys: tool,
/// # args (default {}), side_effect (default "none"), mode (default the policy's);
/// # judged as the host runs the call: mode capped by the side effect, and a
/// # tool that declares "none" seen as "read" in any mode but "none".
/// must_match = [ { tool = "write_file", args = { path = "src/a.rs", content = "TODO" }, side_effect = "write" } ]
/// must_not_match = [ { tool = "write_file", args = { path = "docs/a.md", content = "x" }, side_effect = "write" } ]
/// # optional, allow and ask rules only: network grants of the calls this rule
/// # matches, entries as in [network] allow (see `Policy::network_grants`)
/// # network = ["https://api.example.com", { url = "http://127.0.0.1:8080", methods = ["GET"] }]
///
/// [[guards]]
/// name = "no-secrets"          # optional; defaults to "guards[N]"
/// tool = "*"
/// reason = "no secrets through tools"   # required, non-empty
/// deny_args_matching = "(?i)secret"     # regex over the arguments as compact JSON
/// # and/or: deny when a string at `pointer` (or in an array or object there) matches a glob
/// # deny_paths = ["/etc/**", "**/.git/**"]
/// # pointer = "/path"
/// # optional examples, checked at load against this guard alone (same keys as above)
/// must_deny = [ { tool = "x", args = { token = "my secret" } } ]
/// must_allow = [ { tool = "x", args = { token = "hello" } } ]
///
/// [post_execute]
/// redact = ["sk-[A-Za-z0-9]{20,}"]      # matches in content become "[REDACTED]"
/// max_content_chars = 20000
/// block_matching = "BEGIN PRIVATE KEY"  # blocks when content or canonical matches
///
/// [network]                    # optional; without it (or a rule's network) no call reaches the network
/// allow = ["https://api.example.com", { url = "http://127.0.0.1:8080", methods = ["GET"] }]
/// ask = ["https://*.github.com"]        # needs an approval per call (see the host's docs)
/// max_requests = 32                     # per call
/// max_response_bytes = 8388608          # per call, response bodies summed
/// request_timeout_ms = 30000            # per request, inside the call's deadline
/// ca_file = "/etc/toolhost/private-ca.pem"   # extra trusted roots for https
///
/// [[credentials]]              # attached by the host; the tool never sees it
/// host = "api.example.com"     # its origin: https, port 443 (else `scheme`, `port`)
/// header = "Authorization"
/// value_env = "EXAMPLE_TOKEN"  # or value_file = "/run/secrets/token"
/// prefix = "Bearer "
/// [principals]
/// owners = ["alice"]           # owners besides "local" (the CLI operator, a library caller)
/// owner_only = ["write_*"]     # tool patterns hidden from and refused for non-owners
/// [principals.groups]
/// crew = ["bob", "carol"]
///
/// [[layers]]                   # narrows, never widens (see `Policy::trace`)
/// kind = "principal"           # group | principal | agent (a scope) | mode | subagent
/// name = "bob"                 # the principal, group, scope or mode; optional for subagent
/// allow = ["read_file", "grep"]   # optional: only these stay visible
/// deny = ["grep"]              # hidden and refused
/// default = "ask"              # optional: this layer's decision when none of its rules match
/// approval = "never"           # optional
/// [[layers.rules]]             # as [[rules]] (but no `network`); [[layers.guards]] as [[guards]]
/// tool = "read_file"
/// decision = "allow"
///
/// [[patches]]                  # rewrites arguments before policy, guards and approval
/// tool = "grep"
/// pointer = "/max_results"
/// clamp = { min = 1, max = 50 }   # or: set = V (when absent), force = V,
///                                 # rewrite_prefix = { from = "/tmp/", to = "scratch/" }
///
/// [rate_limits]                # see `RateLimits`; refusals are RATE_LIMITED
/// per_client = { calls = 120, per_seconds = 60, burst = 20 }
/// [[rate_limits.tools]]
/// tool = "write_file"
/// calls = 10
/// per_seconds = 60
///
/// [code_mode]                  # see `CodeMode`: code calling tools through an interpreter
/// max_inner_calls = 1000
/// allow_nesting = []
/// ```
///
/// `[network]` and `[[credentials]]` are read by
/// [`toolhost_egress::NetworkPolicy::from_toml`] (see its docs for every
/// key); their errors name the item and its line like the others.
///
/// Unknown keys, unknown names, empty tool patterns, invalid globs or
/// regexes, malformed pointers and failing examples are errors that name the
/// item and its line; the whole file is then rejected.
///
/// Keys left out take the preset's value (see [`Preset`]), or without a
/// preset the value of [`Policy::default`].
#[derive(Debug, Clone)]
pub struct Policy {
    preset: Option<Preset>,
    default: DecisionKind,
    approval: ApprovalSetting,
    mode: SandboxMode,
    rules: Vec<Rule>,
    /// The deny and ask rules' argument globs, one set per pointer.
    arg_globs: ArgGlobs,
    guards: Vec<PolicyGuard>,
    post_execute: PostExecuteRules,
    network: NetworkPolicy,
    /// Principals, narrowing layers and argument patches (see `layer.rs`).
    pub(crate) stack: crate::layer::Stack,
    rate_limits: RateLimits,
    code_mode: crate::code_mode::CodeMode,
}

impl Default for Policy {
    /// The built-in policy used when no file is given: conservative on the
    /// sandbox, not on the decision.
    ///
    /// * `default = "allow"`: calls run, but only inside the sandbox below;
    /// * `approval = "ask"`;
    /// * `mode = "read-only"`: the workspace is visible read-only;
    /// * no preset, no rules, no guards, no post-execute rules;
    /// * no network grant.
    fn default() -> Self {
        Policy {
            preset: None,
            default: DecisionKind::Allow,
            approval: ApprovalSetting::Ask,
            mode: SandboxMode::ReadOnly,
            rules: Vec::new(),
            arg_globs: ArgGlobs::default(),
            guards: Vec::new(),
            post_execute: PostExecuteRules::default(),
            network: NetworkPolicy::default(),
            stack: crate::layer::Stack::default(),
            rate_limits: RateLimits::default(),
            code_mode: crate::code_mode::CodeMode::default(),
        }
    }
}

impl Policy {
    /// Parses and validates a policy file. `origin` names it in errors
    /// (usually its path). The file is accepted whole or rejected whole.
    pub fn from_toml(src: &str, origin: &str) -> Result<Policy, PolicyError> {
        let policy = crate::load::load(src)
            .map_err(|e| PolicyError::at(src, origin, e.span.start, e.message))?;
        let network = NetworkPolicy::from_toml(src, origin).map_err(|e| {
            PolicyError::located(origin, e.line(), e.column(), e.message().to_string())
        })?;
        Ok(policy.with_network(network))
    }

    /// This policy with `network` as its network grants, limits and
    /// credentials (replacing the file's `[network]` and `[[credentials]]`;
    /// the rules' own grants, [`Policy::network_grants`], stay).
    pub fn with_network(mut self, network: NetworkPolicy) -> Policy {
        self.network = network;
        self
    }

    /// The network grants, limits and credential specs (`[network]` and
    /// `[[credentials]]`). The default grants nothing: no sandbox mode
    /// implies any network access.
    pub fn network(&self) -> &NetworkPolicy {
        &self.network
    }

    pub(crate) fn from_parts(
        preset: Option<Preset>,
        default: DecisionKind,
        approval: ApprovalSetting,
        mode: SandboxMode,
        rules: Vec<Rule>,
        guards: Vec<PolicyGuard>,
        post_execute: PostExecuteRules,
    ) -> Self {
        Policy {
            preset,
            default,
            approval,
            mode,
            arg_globs: ArgGlobs::new(&rules),
            rules,
            guards,
            post_execute,
            network: NetworkPolicy::default(),
            stack: crate::layer::Stack::default(),
            rate_limits: RateLimits::default(),
            code_mode: crate::code_mode::CodeMode::default(),
        }
    }

    pub(crate) fn with_stack(mut self, stack: crate::layer::Stack) -> Self {
        self.stack = stack;
        self
    }

    /// Sets the `[rate_limits]` (kept apart from [`Policy::from_parts`] so
    /// the section stays in its own module).
    pub(crate) fn with_rate_limits(mut self, rate_limits: RateLimits) -> Self {
        self.rate_limits = rate_limits;
        self
    }

    /// Sets the `[code_mode]` bounds.
    pub(crate) fn with_code_mode(mut self, code_mode: crate::code_mode::CodeMode) -> Self {
        self.code_mode = code_mode;
        self
    }

    /// Decides one call. Pure: the result depends only on `self` and `facts`.
    ///
    /// Every rule that matches proposes its decision; the strictest wins
    /// (deny > ask > allow), and among equally strict rules the first in
    /// [`Policy::rules`] order is reported. When no rule matches, the policy
    /// default applies and `matched` is `None`. Guards are not consulted here:
    /// they run separately and can only deny.
    ///
    /// The deny and ask rules' argument globs are answered by one pass over
    /// the argument at each pointer, not one per rule.
    pub fn evaluate(&self, facts: &CallFacts<'_>) -> Evaluation {
        let mut hits = self.arg_globs.hits(facts.args);
        let mut best: Option<(usize, &Rule)> = None;
        for (index, rule) in self.rules.iter().enumerate() {
            if best.is_some_and(|(_, b)| b.decision() >= rule.decision())
                || !hits.rule_matches(index, rule, facts)
            {
                continue;
            }
            best = Some((index, rule));
            if rule.decision() == DecisionKind::Deny {
                break;
            }
        }
        match best {
            Some((index, rule)) => Evaluation {
                decision: decision(rule.decision(), rule.reason().to_string()),
                matched: Some(RuleRef {
                    index,
                    origin: rule.origin(),
                }),
            },
            None => Evaluation {
                decision: decision(
                    self.default,
                    format!(
                        "no policy rule matched tool {:?} and the policy default is {}",
                        facts.tool, self.default
                    ),
                ),
                matched: None,
            },
        }
    }

    /// The network grants of the file's `[[rules]]` that match this call
    /// (by [`Rule::grants_to`]: as an allow rule matches, strictly), in file
    /// order: the rules' `network` entries, `allow` grants of this call
    /// alone. Whether the call runs at all is [`Policy::trace`]'s answer
    /// (an `ask` rule's call runs once approved; a call something denies
    /// never runs); network reaches only tools that declare `external`,
    /// which is the host's to enforce.
    ///
    /// Empty, and nothing allocated, when no matching rule grants network.
    pub fn network_grants(&self, facts: &CallFacts<'_>) -> Vec<RuleGrants> {
        self.rules
            .iter()
            .filter_map(|r| r.network().filter(|_| r.grants_to(facts)))
            .cloned()
            .collect()
    }

    /// Every rule's network grants, in file order.
    pub fn rule_grants(&self) -> impl Iterator<Item = &RuleGrants> {
        self.rules.iter().filter_map(Rule::network)
    }

    /// Whether a rule's network grants could reach some call of `tool`: a
    /// rule that grants network and whose tool pattern matches it (its
    /// other matchers depend on the call).
    pub fn may_grant_network(&self, tool: &str) -> bool {
        self.rules
            .iter()
            .any(|r| r.network().is_some() && r.matches_tool(tool))
    }

    /// The sandbox mode calls run in unless they escalate.
    pub fn default_mode(&self) -> SandboxMode {
        self.mode
    }

    /// Whether a human may be asked.
    pub fn approval(&self) -> ApprovalSetting {
        self.approval
    }

    /// The decision for calls no rule matches.
    pub fn default_decision(&self) -> DecisionKind {
        self.default
    }

    /// The rules in evaluation order: the preset's built-in rule (if any), then
    /// the file's `[[rules]]` in file order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The preset the file chose, if any.
    pub fn preset(&self) -> Option<Preset> {
        self.preset
    }

    /// The file's `[[guards]]`, in file order. Register them with
    /// [`Guards::from_policy`](crate::Guards::from_policy).
    pub fn guards(&self) -> &[PolicyGuard] {
        &self.guards
    }

    /// The file's `[rate_limits]` (empty when the section is absent).
    pub fn rate_limits(&self) -> &RateLimits {
        &self.rate_limits
    }

    /// The file's `[code_mode]` bounds (the defaults when it is absent).
    pub fn code_mode(&self) -> &crate::code_mode::CodeMode {
        &self.code_mode
    }

    /// The file's `[post_execute]` rules (empty when the section is absent).
    pub fn post_execute(&self) -> &PostExecuteRules {
        &self.post_execute
    }
}

/// Attaches a reason to a decision kind (allow carries none).
fn decision(kind: DecisionKind, reason: String) -> Decision {
    match kind {
        DecisionKind::Allow => Decision::Allow,
        DecisionKind::Ask => Decision::Ask { reason },
        DecisionKind::Deny => Decision::Deny { reason },
    }
}
