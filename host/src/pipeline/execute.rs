//! Phases 7-8: the body in its sandbox (7), its output checked against the
//! tool's output schema (8), then the post-execute hooks and the policy's
//! text rules (8b). Exclusivity (`gate.rs`) is entered first. The result is
//! returned, not committed: every path commits in phase 9.

use super::checkpoint::Admitted;
use super::gate::{Pass, Refused};
use super::redact::redact_secrets;
use super::{Host, Refusal};
use crate::hooks::PostAction;
use crate::result::CallResult;
use crate::sandbox::spec::SandboxSpec;
use crate::sandbox::{BodyOutcome, OnAbandon, Receipt, Watch};
use crate::tools::descriptor::ContentItem;
use crate::tools::registry::{RegisteredTool, ToolBody};
use std::sync::Arc;
use toolhost_core::ErrorCode;
use toolhost_policy::PostVerdict;

impl Host {
    /// Phases 7-8: sandbox, body, output validation and post-execute.
    pub(crate) async fn execute(&self, a: &Admitted<'_>) -> CallResult {
        let name = a.tool.descriptor.name.clone();
        if a.interrupt.is_cancelled() {
            return CallResult::error(
                a.call_id.clone(),
                name,
                ErrorCode::Cancelled,
                "the call was cancelled before the tool started",
                Receipt::default(),
            );
        }
        // A body its call gives up on keeps the pass until it stops.
        let pass = match self.enter_gate(a).await {
            Ok(pass) => pass,
            Err((code, message)) => {
                return CallResult::error(
                    a.call_id.clone(),
                    name,
                    code,
                    message,
                    Receipt::default(),
                );
            }
        };
        let held = pass.clone();
        let on_abandon: OnAbandon = Box::new(move || Box::new(held.map(Pass::abandoned)));
        // 7. sandbox + body.
        let (outcome, receipt) = self.run_body(a, on_abandon).await;
        let (canonical, content, meta) = match outcome {
            BodyOutcome::Err { code, message } => {
                return self.tool_error(a.call_id.clone(), name, code, message, receipt);
            }
            BodyOutcome::Ok {
                canonical,
                content,
                meta,
            } => (canonical, content, meta),
        };
        // 8. output validation.
        if let Err(e) = a.tool.validate_output(&canonical) {
            // The message quotes part of the tool's output.
            return self.tool_error(
                a.call_id.clone(),
                name,
                ErrorCode::OutputInvalid,
                format!("the tool's output does not match its output schema: {e}"),
                receipt,
            );
        }
        let result = CallResult::ok(a.call_id.clone(), name, canonical, content, meta, receipt);
        // 8b. post-execute.
        self.post_process(a.tool, result)
    }

    /// Exclusivity: a body that is not concurrency-safe runs alone on this
    /// host, whoever else is calling. The pass for `a`'s body, or why it
    /// may not start; `None` for an inner call of code mode its outer
    /// call's pass covers (`code_mode.rs`).
    async fn enter_gate(&self, a: &Admitted<'_>) -> Result<Option<Arc<Pass>>, Refusal> {
        if let Some(lent) = a.lent {
            return lent
                .covers(a.tool.descriptor.concurrency_safe)
                .map(|()| None);
        }
        match self
            .gate
            .enter(a.tool.descriptor.concurrency_safe, &a.interrupt)
            .await
        {
            Ok(pass) => Ok(Some(Arc::new(pass))),
            Err(Refused::Cancelled) => Err((
                ErrorCode::Cancelled,
                "the call was cancelled while it waited for another call to finish".into(),
            )),
            Err(Refused::Stuck(why)) => Err((ErrorCode::SandboxUnavailable, why)),
        }
    }

    /// Phase 7: `a`'s body in the sandbox of its mode; `on_abandon` keeps
    /// the gate's pass for a body its call gives up on.
    async fn run_body(&self, a: &Admitted<'_>, on_abandon: OnAbandon) -> (BodyOutcome, Receipt) {
        let spec = SandboxSpec {
            mode: a.mode,
            workspace: self.workspace.clone(),
            limits: self.limits.clone(),
            network: a.network.clone(),
        };
        crate::crashpoint::announce("during-body");
        match &a.tool.body {
            ToolBody::Component(component) => {
                self.runtime
                    .invoke(
                        component,
                        &a.tool.descriptor.name,
                        &a.args_text,
                        &spec,
                        Watch {
                            interrupt: a.interrupt.clone(),
                            progress: a.progress.clone(),
                            on_abandon: Some(on_abandon),
                            witness: a.witness.clone(),
                        },
                    )
                    .await
            }
            ToolBody::Program(program) => {
                let (door, frames) = crate::sandbox::door::door();
                let watch = Watch {
                    interrupt: a.interrupt.clone(),
                    progress: None,
                    on_abandon: Some(on_abandon),
                    witness: a.witness.clone(),
                };
                let body = program.run(&self.runtime, &a.args, &spec, watch, Some(door));
                self.with_door(a, body, frames).await
            }
        }
    }

    /// Phase 8b on a body's validated `result`: the credentials redacted,
    /// then the post-execute hooks and the policy's rules; a program that
    /// exited with a status other than 0 failed.
    fn post_process(&self, tool: &RegisteredTool, mut result: CallResult) -> CallResult {
        // Credentials are redacted before anything edits the content (the
        // content cap could otherwise cut a secret in two, and leave a part
        // that no longer reads as the secret); `commit` redacts again, for
        // what hooks put in and for every other path.
        if let Some(egress) = &self.egress {
            redact_secrets(&mut result, &egress.credentials);
        }
        if let Err(blocked) = self.post_execute(tool, &mut result) {
            return CallResult::error(
                result.call_id,
                result.tool,
                ErrorCode::PostExecuteBlocked,
                blocked,
                result.receipt,
            );
        }
        // A program that exited with a status other than 0 failed as a
        // tool: an error result that keeps its canonical record and the
        // content the model reads (its stderr and status among it).
        if let ToolBody::Program(_) = &tool.body
            && let Some(status) = crate::tools::program_tool::exit_status(&result.canonical)
            && status != 0
        {
            result.status = crate::result::Status::Error;
            result.error = Some(crate::result::CallError {
                code: ErrorCode::ToolError,
                message: format!("the program exited with status {status}"),
            });
        }
        result
    }

    /// An error result whose message carries what the tool wrote (its own
    /// error, or its output quoted by a failed validation): it reaches the
    /// model as content does, so the credentials are redacted from it
    /// first, then the policy's text rules (redact, block, cut) apply.
    fn tool_error(
        &self,
        call_id: String,
        tool: String,
        code: ErrorCode,
        message: String,
        receipt: Receipt,
    ) -> CallResult {
        let mut message = message;
        // First the credentials (the message is whole here: no cut has
        // split a secret), then the policy's rules, then the output cap.
        if let Some(egress) = &self.egress
            && let std::borrow::Cow::Owned(r) = egress
                .credentials
                .redact(&message, toolhost_policy::REDACTED)
        {
            message = r;
        }
        let mut texts = vec![message];
        let rules = self.policy.post_execute();
        if !rules.is_empty()
            && let PostVerdict::Blocked { reason } =
                rules.apply(&mut texts, &serde_json::Value::Null)
        {
            return CallResult::error(
                call_id,
                tool,
                ErrorCode::PostExecuteBlocked,
                format!("blocked by policy: {reason}"),
                receipt,
            );
        }
        let message = texts.pop().unwrap_or_default();
        // An error is part of the result the host carries, records and
        // sends: cut to the output cap, once nothing can be left of a secret.
        let max = self.limits.max_output;
        let message = if message.len() <= max {
            message
        } else {
            let mut end = max;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            format!(
                "{}[... {} bytes of the error cut: the limit is {max}]",
                &message[..end],
                message.len() - end
            )
        };
        CallResult::error(call_id, tool, code, message, receipt)
    }

    /// Library hooks first, then the policy file's rules, so the policy has
    /// the last word: content a hook puts in is still redacted, capped and
    /// checked for blocked patterns.
    fn post_execute(&self, tool: &RegisteredTool, result: &mut CallResult) -> Result<(), String> {
        for hook in &self.post_hooks {
            // A hook is library code: a panic in it (or in its name) blocks.
            let name = crate::sandbox::state::unpanicked(|| hook.name().to_string())
                .unwrap_or_else(|| "(a hook whose name panics)".to_string());
            let action =
                crate::sandbox::state::unpanicked(|| hook.inspect(&tool.descriptor, result))
                    .unwrap_or_else(|| {
                        PostAction::Block(format!("post-execute hook {name} panicked"))
                    });
            match action {
                PostAction::Keep => {}
                PostAction::ReplaceContent(c) => result.content = c,
                PostAction::ReplaceCanonical(v) => {
                    tool.validate_output(&v).map_err(|e| {
                        format!("hook {name} replaced the canonical value with one that breaks the output schema: {e}")
                    })?;
                    result.canonical = v;
                }
                PostAction::Block(reason) => {
                    return Err(format!("blocked by {name}: {reason}"));
                }
            }
        }
        let rules = self.policy.post_execute();
        if rules.is_empty() {
            return Ok(());
        }
        // The text rules see the blocks that carry text (text blocks and
        // embedded text resources); images, audio, links and binary
        // resources pass through them unchanged.
        let mut texts: Vec<String> = result
            .content
            .iter_mut()
            .filter_map(|c| c.text_mut().map(|t| t.clone()))
            .collect();
        match rules.apply(&mut texts, &result.canonical) {
            PostVerdict::Blocked { reason } => return Err(format!("blocked by policy: {reason}")),
            PostVerdict::Changed => write_back(&mut result.content, texts),
            PostVerdict::Keep => {}
        }
        Ok(())
    }
}

/// Puts the texts the policy's rules returned back into the blocks they
/// came from; a text-bearing block the rules dropped (a cap) goes.
fn write_back(content: &mut Vec<ContentItem>, texts: Vec<String>) {
    let mut texts = texts.into_iter();
    content.retain_mut(|c| match c.text_mut() {
        None => true,
        Some(t) => match texts.next() {
            Some(new) => {
                *t = new;
                true
            }
            None => false,
        },
    });
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests fail loudly on a set-up error")]
mod tests {
    use super::*;

    /// A tool's error message is cut to the output cap only after the
    /// credentials are redacted from it: a secret across the cut leaves
    /// nothing of itself (cutting first left its first bytes, which no
    /// longer read as the secret).
    #[tokio::test]
    async fn an_error_is_cut_after_its_secrets_are_redacted() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = tempfile::tempdir().unwrap();
        let secret = "sk-cut-0123456789abcdef";
        let file = dir.path().join("token");
        std::fs::write(&file, secret).unwrap();
        let policy = toolhost_policy::Policy::from_toml(
            &format!(
                "version = 1\n[network]\nallow = [\"https://api.example.com\"]\n\
                 [[credentials]]\nhost = \"api.example.com\"\nheader = \"A\"\nvalue_file = {:?}\n",
                file.display().to_string()
            ),
            "t.toml",
        )
        .unwrap();
        let mut b = crate::HostBuilder::new();
        b.workspace(workspace.path())
            .policy(policy)
            .limits(crate::Limits {
                max_output: 100,
                ..crate::Limits::default()
            })
            .runtime_options(crate::RuntimeOptions {
                cache_dir: None,
                ..crate::RuntimeOptions::default()
            });
        let host = b.build().await.unwrap();
        // The secret starts 90 bytes in: a cut at 100 would keep 10 of it.
        let message = format!("{}{secret} and more", "x".repeat(90));
        let r = host.tool_error(
            "c".into(),
            "t".into(),
            ErrorCode::ToolError,
            message,
            Receipt::default(),
        );
        let text = &r.error.as_ref().unwrap().message;
        assert!(!text.contains(&secret[..6]), "{text}");
        assert!(
            text.contains("bytes of the error cut: the limit is 100"),
            "{text}"
        );
    }
}
