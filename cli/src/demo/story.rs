//! The story: create the agent, send the input, and follow its stream,
//! answering what waits (the approval, the custom tools' results) over the
//! HTTP API as a client's backend would; and in the middle of the last
//! answer, the crash.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use holdfast_client::follow::{follow, SavedEvent, StreamItem};
use holdfast_wire::api::approvals::{ApprovalStatusName, Decision, DecisionRequest};
use holdfast_wire::api::inputs::InputRequest;
use holdfast_wire::api::tool_calls::{KindName, StatusFilter, ToolResultRequest};
use holdfast_wire::domain::InputMode;
use serde_json::json;
use tokio::sync::mpsc;
use uuid::Uuid;

use super::script;
use super::stack::{Stack, DAEMON};
use super::timeline::Timeline;
use super::verdict::Summary;
use crate::client::ours_already;

/// Who the demo approves as.
const OPERATOR: &str = "demo-operator";
/// The whole story must be over by then (it takes a few seconds).
const STORY_LIMIT: Duration = Duration::from_secs(120);

impl Stack {
    /// The conversation, from creating the agent to its turn's end.
    pub(super) async fn play(&mut self, out: &mut Timeline) -> Result<Summary> {
        let agent = self
            .api
            .create_agent(&script::agent_config(&self.machine))
            .await?
            .id;
        out.line(
            "agent",
            format!(
                "{agent} created: custom tools lookup_order and issue_refund (issue_refund needs \
                 approval), and run_command on {}",
                self.machine
            ),
        );

        let (items_tx, mut items) = mpsc::channel(256);
        let stop_following = self.shutdown.child_token();
        let follower = tokio::spawn(follow(
            self.api.clone(),
            agent,
            0,
            items_tx,
            stop_following.clone(),
        ));

        let input = InputRequest {
            content: json!(script::INPUT),
            mode: InputMode::Steer,
        };
        self.api.send_input(agent, &input, "demo-input-1").await?;

        let mut story = Story::new(agent);
        let mut held = self.fake.held_watch();
        let mut held_seen = false;
        let limit = tokio::time::sleep(STORY_LIMIT);
        tokio::pin!(limit);
        while !story.done {
            tokio::select! {
                item = items.recv() => match item {
                    Some(item) => self.on_item(&mut story, item, out).await?,
                    None => break,
                },
                _ = held.wait_for(|n| *n >= 1), if !held_seen => held_seen = true,
                _ = &mut limit => bail!(
                    "the story did not end within {STORY_LIMIT:?}; worker logs: {}",
                    self.log_paths()
                ),
            }
            // The crash point: the closing answer is streaming (its first
            // words are on screen) and the model server holds it there.
            if held_seen && story.crash.is_none() && story.streaming_epoch.is_some() {
                self.crash(&mut story, out).await?;
            }
        }
        stop_following.cancel();
        drop(items);
        if let Ok(Err(e)) = follower.await {
            return Err(e.into());
        }
        if !story.done {
            bail!("the event stream ended before the turn did");
        }
        Summary::read(&self.client, &story, &self.fake).await
    }

    async fn on_item(
        &mut self,
        story: &mut Story,
        item: StreamItem,
        out: &mut Timeline,
    ) -> Result<()> {
        match item {
            StreamItem::Delta { text, epoch } => {
                if story.crash.as_ref().is_some_and(|c| epoch <= c.epoch) {
                    // Late words of the killed call: not shown twice.
                    return Ok(());
                }
                self.note_recovery(story, Some(epoch), out).await?;
                story.streaming_epoch = Some(epoch);
                out.delta(&text);
            }
            StreamItem::Saved(event) => self.on_event(story, event, out).await?,
            StreamItem::Reconnected { after } => {
                out.line(
                    "stream",
                    format!("reconnected after event #{after}; re-reading what waits"),
                );
                self.approve_pending(story, out).await?;
                self.answer_waiting_calls(story, out).await?;
            }
        }
        Ok(())
    }

    async fn on_event(
        &mut self,
        story: &mut Story,
        event: SavedEvent,
        out: &mut Timeline,
    ) -> Result<()> {
        let d = &event.data;
        let name = d["name"].as_str().unwrap_or("?");
        match event.kind.as_str() {
            "input.received" => out.line(
                "input",
                format!("{:?} (Idempotency-Key demo-input-1)", script::INPUT),
            ),
            "turn.started" => out.line("turn", "started"),
            "model.response" => {
                self.note_recovery(story, None, out).await?;
                story.streaming_epoch = None;
                story.responses += 1;
                let calls = d["tool_calls"].as_array().map_or(0, Vec::len);
                let what = match calls {
                    0 => "the final answer".to_owned(),
                    1 => "the answer and its tool call, in one transaction".to_owned(),
                    n => format!("the answer and its {n} tool calls, in one transaction"),
                };
                out.line("saved", format!("model step {}: {what}", story.responses));
            }
            "tool_call.created" => {
                if d["kind"] == "command" {
                    let command = d["input"]["command"].as_str().unwrap_or("?");
                    out.line(
                        "tool call",
                        format!("{name} on {}: {command}", self.machine),
                    );
                } else if d["status"] == "awaiting_approval" {
                    out.line(
                        "tool call",
                        format!("{name} {} waits for approval", d["input"]),
                    );
                } else {
                    out.line(
                        "tool call",
                        format!("{name} {} waits for the client", d["input"]),
                    );
                    self.answer_waiting_calls(story, out).await?;
                }
            }
            "approval.requested" => self.approve_pending(story, out).await?,
            "approval.answered" => {
                let decision = match d["decision"].as_str() {
                    Some("approve") => "approved",
                    Some("deny") => "denied",
                    _ => "decided",
                };
                out.line(
                    "approval",
                    format!("{decision} by {}", d["by"].as_str().unwrap_or("?")),
                );
                self.answer_waiting_calls(story, out).await?;
            }
            "command.accepted" => {
                let pid = self.daemon.as_ref().map_or(0, |daemon| daemon.pid);
                out.line(
                    "machine",
                    format!("{DAEMON} (pid {pid}) accepted the command and runs it with sh -c"),
                );
            }
            "command.finished" => {
                let exit = d["exit_code"]
                    .as_i64()
                    .map_or_else(|| "no exit code".to_owned(), |code| format!("exit {code}"));
                out.line("machine", format!("the command finished: {exit}"));
                for line in d["stdout"].as_str().unwrap_or_default().lines() {
                    out.line("stdout", format!("│ {line}"));
                }
                for line in d["stderr"].as_str().unwrap_or_default().lines() {
                    out.line("stderr", format!("│ {line}"));
                }
            }
            "command.failed" | "command.unknown" | "machine.unreachable" => {
                out.line("machine", format!("{} {}", event.kind, d));
            }
            "tool_call.completed" if d["output"]["exit_code"].is_i64() => out.line(
                "tool result",
                format!(
                    "{name} ✓ exit {}, stdout {:?} → the model",
                    d["output"]["exit_code"],
                    d["output"]["stdout"]
                        .as_str()
                        .unwrap_or_default()
                        .trim_end()
                ),
            ),
            "tool_call.completed" => out.line("tool result", format!("{name} ✓ {}", d["output"])),
            "tool_call.interrupted" => out.line("interrupted", format!("{name}: {}", d["output"])),
            "model.retry" => out.line(
                "retry",
                format!("model call retried: {}", d["error"]["message"]),
            ),
            "turn.completed" => {
                out.line("turn", "completed");
                story.done = true;
            }
            "turn.failed" | "turn.cancelled" => {
                out.line("turn", format!("{} {}", event.kind, d));
                bail!("the turn ended with {}", event.kind);
            }
            _ => {}
        }
        Ok(())
    }

    /// The first sign of the agent moving again after the crash: the
    /// retried answer streaming under a new lease `epoch` (or, should no
    /// delta come through, its saved response).
    async fn note_recovery(
        &self,
        story: &mut Story,
        epoch: Option<i64>,
        out: &mut Timeline,
    ) -> Result<()> {
        let agent = story.agent;
        let Some(crash) = story.crash.as_mut().filter(|c| c.recovered_after.is_none()) else {
            return Ok(());
        };
        let after = crash.at.elapsed();
        crash.recovered_after = Some(after);
        let holder = self
            .lease_holder(agent)
            .await?
            .map_or_else(|| "another worker".to_owned(), |(name, _, _)| name);
        let epochs = match epoch {
            Some(epoch) => format!(" (lease epoch {} → {epoch})", crash.epoch),
            None => String::new(),
        };
        out.line(
            "recovered",
            format!(
                "{holder} took the agent over {:.1}s later{epochs} and retries the answer from saved step {}",
                after.as_secs_f64(),
                crash.last_saved_step
            ),
        );
        Ok(())
    }

    /// Approve every pending approval, over the HTTP API.
    async fn approve_pending(&mut self, story: &mut Story, out: &mut Timeline) -> Result<()> {
        let pending = self
            .api
            .approvals(story.agent, Some(ApprovalStatusName::Pending))
            .await?;
        for approval in pending.approvals {
            let id = approval.id;
            out.line(
                "approval",
                format!(
                    "{} needs approval: the demo approves it (POST /v1/approvals/{id})",
                    approval.subject()
                ),
            );
            let decision = DecisionRequest {
                decision: Decision::Approve,
                by: OPERATOR.into(),
                reason: None,
            };
            self.api.decide(id, &decision).await?;
        }
        Ok(())
    }

    /// Run and answer every custom tool call that waits for a result and
    /// that this demo has not run yet: deduped by tool-call id, as a
    /// client's backend should.
    async fn answer_waiting_calls(&mut self, story: &mut Story, out: &mut Timeline) -> Result<()> {
        let waiting = self
            .api
            .tool_calls(
                story.agent,
                Some(StatusFilter::Waiting),
                Some(KindName::Custom),
            )
            .await?;
        for call in waiting.tool_calls {
            let id = call.id;
            if story.executions.contains_key(&id) {
                continue;
            }
            let (output, is_error) = script::run_tool(&call.name, &call.input);
            story.executions.insert(id, (call.name.clone(), 1));
            out.line(
                "client",
                format!(
                    "runs {} and posts its result (POST /v1/tool-calls/{id}/result)",
                    call.name
                ),
            );
            let result = ToolResultRequest { output, is_error };
            match self.api.post_tool_result(id, &result).await {
                Ok(_) => {}
                // The call has a result already: ours, from a retry whose
                // first answer was lost. Nothing to do.
                Err(e) if ours_already(&e, &result).is_some() => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// SIGKILL the worker holding the agent, mid-stream.
    async fn crash(&mut self, story: &mut Story, out: &mut Timeline) -> Result<()> {
        let (holder, epoch, _) = self
            .lease_holder(story.agent)
            .await?
            .context("the agent is streaming but no worker holds it")?;
        let last_saved_step: i64 = self
            .client
            .query_one(
                "SELECT coalesce(max(step_seq), 0) FROM holdfast.steps WHERE agent_id = $1",
                &[&story.agent],
            )
            .await?
            .get(0);
        let (name, pid) = self.kill_worker(&holder).await?;
        out.line(
            "crash",
            format!(
                "SIGKILL {name} (pid {pid}) in the middle of the answer; nothing of it is saved"
            ),
        );
        story.crash = Some(Crash {
            epoch,
            at: Instant::now(),
            last_saved_step,
            recovered_after: None,
        });
        Ok(())
    }
}

/// What the demo saw and did.
pub(super) struct Story {
    pub(super) agent: Uuid,
    /// Per custom tool call the demo ran: (tool name, times run).
    pub(super) executions: HashMap<Uuid, (String, u32)>,
    /// Model responses saved so far.
    responses: usize,
    /// The lease epoch of the model call streaming right now.
    streaming_epoch: Option<i64>,
    pub(super) crash: Option<Crash>,
    done: bool,
}

impl Story {
    fn new(agent: Uuid) -> Story {
        Story {
            agent,
            executions: HashMap::new(),
            responses: 0,
            streaming_epoch: None,
            crash: None,
            done: false,
        }
    }
}

pub(super) struct Crash {
    /// The killed worker's lease epoch.
    epoch: i64,
    at: Instant,
    last_saved_step: i64,
    /// From the kill to the next worker streaming the retried call.
    pub(super) recovered_after: Option<Duration>,
}
