//! The end of the demo: what happened to the agent, counted by the
//! database's audit views (`holdfast.agent_audit`, `holdfast.tool_call_audit`,
//! sql/schema/operations.sql), printed as the summary; and the verdict, which fails
//! the demo if any tool ran other than once.

use std::time::Duration;

use anyhow::{bail, Result};
use holdfast_fakes::FakeProvider;
use tokio_postgres::Client;
use uuid::Uuid;

use super::story::Story;

/// The end of the demo, counted from the database.
pub(super) struct Summary {
    model_steps: i64,
    model_requests: usize,
    cut_off: usize,
    recovered_after: Option<Duration>,
    events: i64,
    last_seq: i64,
    /// seq runs 1..last_seq without gaps.
    gap_free: bool,
    /// Per tool call: name, times it ran, results saved.
    tools: Vec<(String, i64, i64)>,
    /// Commands that did not finish on the machine (failed, unknown, ...).
    commands_unfinished: i64,
    interrupted: i64,
    approvals_answered: i64,
}

impl Summary {
    /// Count what happened to the story's agent from the audit views.
    pub(super) async fn read(
        client: &Client,
        story: &Story,
        fake: &FakeProvider,
    ) -> Result<Summary> {
        let audit = client
            .query_one(
                "SELECT model_steps, events, last_seq, gap_free, tool_calls_interrupted, \
                        approvals_answered, commands_unfinished \
                   FROM holdfast.agent_audit WHERE agent_id = $1",
                &[&story.agent],
            )
            .await?;
        // A custom tool ran as often as the demo ran it; a command as often
        // as a machine accepted it (a daemon runs what it accepts, once).
        let calls = client
            .query(
                "SELECT tool_call_id, name, kind, results_saved, commands_accepted \
                   FROM holdfast.tool_call_audit WHERE agent_id = $1 \
                  ORDER BY created_at, position",
                &[&story.agent],
            )
            .await?;
        let tools = calls
            .iter()
            .map(|r| {
                let id: Uuid = r.get("tool_call_id");
                let kind: String = r.get("kind");
                let ran = match kind.as_str() {
                    "command" => r.get::<_, i64>("commands_accepted"),
                    _ => story.executions.get(&id).map_or(0, |(_, n)| i64::from(*n)),
                };
                (r.get("name"), ran, r.get("results_saved"))
            })
            .collect();
        Ok(Summary {
            model_steps: audit.get("model_steps"),
            model_requests: fake.request_count(),
            cut_off: fake.aborted_count(),
            recovered_after: story.crash.as_ref().and_then(|c| c.recovered_after),
            events: audit.get("events"),
            last_seq: audit.get("last_seq"),
            gap_free: audit.get("gap_free"),
            interrupted: audit.get("tool_calls_interrupted"),
            approvals_answered: audit.get("approvals_answered"),
            tools,
            commands_unfinished: audit.get("commands_unfinished"),
        })
    }

    /// Every tool call ran once and has exactly one saved result, every
    /// command finished, nothing was interrupted, the one approval was
    /// answered once.
    fn each_tool_once(&self) -> bool {
        !self.tools.is_empty()
            && self
                .tools
                .iter()
                .all(|(_, ran, saved)| *ran == 1 && *saved == 1)
            && self.commands_unfinished == 0
            && self.interrupted == 0
            && self.approvals_answered == 1
    }

    pub(super) fn print(&self) {
        println!();
        println!("Summary");
        println!(
            "  steps        {} model steps saved; the model was asked {} times ({} answer cut off by the crash, asked again)",
            self.model_steps, self.model_requests, self.cut_off
        );
        match self.recovered_after {
            Some(after) => println!(
                "  recovery     {:.1}s from SIGKILL to the other worker streaming the answer again",
                after.as_secs_f64()
            ),
            None => println!("  recovery     no crash happened"),
        }
        let tools: Vec<String> = self
            .tools
            .iter()
            .map(|(name, ran, _)| format!("{name} ×{ran}"))
            .collect();
        if self.each_tool_once() {
            println!(
                "  tools run    each once: {} (one approval, answered once)",
                tools.join(", ")
            );
        } else {
            let detail: Vec<String> = self
                .tools
                .iter()
                .map(|(name, ran, saved)| format!("{name}: ran {ran}, results saved {saved}"))
                .collect();
            println!(
                "  tools run    NOT each once: {}; commands not finished {}; interrupted {}; approvals answered {}",
                detail.join("; "),
                self.commands_unfinished,
                self.interrupted,
                self.approvals_answered
            );
        }
        let gaps = if self.gap_free {
            "without gaps"
        } else {
            "WITH GAPS"
        };
        println!(
            "  timeline     {} events, seq 1..{} {gaps}",
            self.events, self.last_seq
        );
    }

    pub(super) fn verdict(&self) -> Result<()> {
        if !self.each_tool_once() {
            bail!("a tool ran other than once");
        }
        if !self.gap_free {
            bail!("the timeline has gaps");
        }
        if self.recovered_after.is_none() {
            bail!("the worker was not killed, or no other worker took over");
        }
        Ok(())
    }
}
