//! `command_start`: how long the machine daemon takes to run `true`, from
//! the call that runs an accepted command to its result (process start,
//! output read, exit status), in its sandbox (bubblewrap, seccomp, the
//! command's cgroups or rlimits, made and removed per command) and with
//! `--sandbox none` (`sh -c` as the daemon's user): the same code the
//! daemon runs (`holdfast_machine::exec::run`). Samples alternate
//! between the two, so both see the same load; neither needs Postgres.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use chrono::Utc;
use holdfast_machine::exec;
use holdfast_machine::sandbox::{Sandbox, SandboxSettings};
use holdfast_wire::config::CommandWorkspace;
use holdfast_wire::domain::ClaimedCommand;
use serde_json::json;
use uuid::Uuid;

use super::target;
use crate::stats::{ratio, round3, Samples};
use crate::{Bench, Outcome};

pub async fn run(bench: &Bench) -> Result<Outcome> {
    let samples = bench.pick(bench.opts.samples, 200, 20);
    let work_dir = std::env::temp_dir().join(format!("holdfast-bench-commands-{}", Uuid::new_v4()));
    std::fs::create_dir_all(&work_dir)?;
    let settings = SandboxSettings {
        limits: SandboxSettings::default().limits.enforce()?,
        ..SandboxSettings::default()
    };
    let uses_rlimits = settings.limits.uses_rlimits();
    let sandbox = Sandbox::prepare(&settings, Vec::new())?;
    sandbox.check(&work_dir).await?;
    let environment = exec::command_environment(&[]);

    let mut sandboxed = Samples::new();
    let mut unsandboxed = Samples::new();
    for i in 0..samples * 2 {
        let in_sandbox = i % 2 == 0;
        let command = ClaimedCommand {
            id: Uuid::now_v7(),
            tool_call_id: Uuid::now_v7(),
            agent_id: Uuid::now_v7(),
            command: "true".into(),
            timeout_secs: 30,
            accepted_at: Utc::now(),
            traceparent: None,
            tracestate: None,
            workspace: CommandWorkspace::Machine,
        };
        let started = Instant::now();
        let result = exec::run(
            &command,
            &work_dir,
            &environment,
            1024,
            in_sandbox.then_some(&sandbox),
            &Default::default(),
            |_| Ok(()),
        )
        .await?;
        let took: Duration = started.elapsed();
        if result.exit_code != Some(0) {
            bail!("`true` failed (sandboxed: {in_sandbox}): {result:?}");
        }
        if in_sandbox {
            sandboxed.push(took);
        } else {
            unsandboxed.push(took);
        }
    }
    std::fs::remove_dir_all(&work_dir).ok();

    let added_p50 = sandboxed.p50() - unsandboxed.p50();
    let mut metrics = json!({
        "sandboxed": sandboxed.summary(),
        "added_p50_ms": round3(added_p50),
        "added_p99_ms": round3(sandboxed.p99() - unsandboxed.p99()),
        "sandboxed_over_unsandboxed_p50": ratio(sandboxed.p50(), unsandboxed.p50()),
    });
    metrics["target"] = target("the sandbox adds under 20 ms at p50", added_p50 < 20.0);
    Ok(Outcome {
        params: json!({
            "samples": samples,
            "command": "true",
            "limits": if uses_rlimits { "rlimits (prlimit)" } else { "cgroups" },
            "interleaved": true,
        }),
        metrics,
        baseline: json!({
            "unsandboxed": unsandboxed.summary(),
            "what": "the same command through the same code with --sandbox none (sh -c as the daemon's user)",
        }),
    })
}
