//! `toolhost conformance`: a tool component checked against the contract.

use crate::args::ConformanceArgs;
use anyhow::{Result, anyhow};
use std::process::ExitCode;
use toolhost::conformance::{Verdict, counted};

/// Checks the component and prints the report; exits 1 when a check failed.
pub(crate) async fn conformance(a: ConformanceArgs) -> Result<ExitCode> {
    let bytes = toolhost::runtime::read_wasm_file(&a.tool)
        .map_err(|e| anyhow!("cannot read {}: {e}", a.tool.display()))?;
    let runtime = toolhost::conformance::runtime_for_checks().map_err(|e| anyhow!("{e}"))?;
    let report =
        toolhost::conformance::check_component(runtime, &a.tool.display().to_string(), &bytes)
            .await;
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        outln!(
            "conformance of {} (made with {})",
            report.component,
            report.made_with
        );
        for c in &report.checks {
            let v = match c.verdict {
                Verdict::Pass => "pass",
                Verdict::Fail => "FAIL",
                Verdict::Warn => "warn",
            };
            outln!("  {v:<4}  {:<28} {}", c.check, c.detail);
        }
        outln!(
            "{}: {} failed, {}",
            counted(report.checks.len(), "check"),
            report.count(Verdict::Fail),
            counted(report.count(Verdict::Warn), "warning")
        );
    }
    Ok(if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
