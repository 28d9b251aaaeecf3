//! Typed calls of Holdfast's SQL functions. This module is the one place in
//! Rust that knows their names and signatures; workers and the API call these
//! wrappers, never ad-hoc SQL. Each takes `client: &impl` [`Prepared`], and
//! a caller passes a reference to what it holds: `&db` for a pooled
//! connection, the worker's claim session, a bare client, a transaction.
//!
//! By area: [`steps`] (the worker), [`agents`], [`events`], [`keys`],
//! [`tool_calls`], [`webhooks`], [`machines`], [`status`], [`models`],
//! [`retention`], [`replication`], [`schedules`], [`time_travel`] (forks
//! and replays); each
//! function is re-exported here by name, so callers write
//! `store::claim_agents` and the lists below say which module holds it.

use std::str::FromStr;

use crate::error::{Error, Result};

mod agents;
pub mod console;
mod events;
mod keys;
mod machines;
mod models;
mod prepared;
mod replication;
mod retention;
mod schedules;
mod status;
mod steps;
mod time_travel;
mod tool_calls;
mod usage;
mod webhooks;

pub use agents::{
    agent_in_project, archive_agent, create_agent, create_input, create_inputs,
    create_traced_input, ensure_project, get_agent, get_attachment, get_config_version, get_input,
    list_agents, list_config_versions, list_inputs, patch_agent_config, remove_input,
    request_cancel, set_attachment_quotas, set_limit_maxima, set_project_max_running,
    update_agent_config, update_input, Attachment, ConfigApply, NewInput,
};
pub use events::{
    events_after, events_written, last_event_seq, unwatch_agent_events, watch_agent_events,
};
pub use keys::{
    api_key_active, authenticate_api_key, create_api_key, list_api_keys, revoke_api_key,
};
pub use machines::{
    authenticate_machine, claim_commands, delete_machine, list_machines, machine_heartbeat,
    machine_tick, register_machine, relay_command_output, rotate_machine_token, start_machine_wake,
    submit_command_result, unsandboxed_machines, UnsandboxedMachine,
};
pub use models::{
    add_model_endpoint, delete_project_provider_key, list_model_endpoints,
    list_project_provider_keys, remove_model_endpoint, set_project_custom_model_urls,
    set_project_provider_key, set_project_server_tools,
};
pub use prepared::Prepared;
pub use replication::{wal_position, wal_replayed};
pub use retention::{retention_tick, set_project_retention};
pub use schedules::{
    advance_schedule, claim_due_schedules, create_schedule, delete_schedule, get_schedule,
    list_schedules, set_schedule_paused,
};
pub use status::{queue_depth, stuck_agents, worker_leases};
pub use steps::{
    claim_agents, claim_agents_with_context, commit_compaction, commit_model_interrupt,
    commit_model_retry, commit_model_step, commit_model_step_batch,
    commit_model_step_batch_keeping_leases, commit_tool_result, complete_cancel, end_tool_batch,
    fail_step, fail_turn, load_request_files, load_step_context, maintenance_tick,
    record_content_left_out, record_tools_unavailable, release_agent, release_or_keep_agent,
    renew_leases, spawn_subagent, start_tool_call, step_failures, stream_delta, BatchEnd,
    ClaimedStep, SavedModelStep, UnavailableTool,
};
pub use time_travel::{
    answer_replay_calls, create_replay, fork_agent, list_replays, replay_report, ForkAt,
};
pub use tool_calls::{
    answer_approval, answer_question, get_approval, get_question, get_tool_call, list_approvals,
    list_questions, list_tool_calls, submit_tool_result, submit_tool_results, ToolResult,
};
pub use usage::{
    agent_usage, end_turn_over_budget, list_model_prices, project_usage, remove_model_price,
    set_model_price, NewModelPrice, OverBudget,
};
pub use webhooks::{
    claim_webhook_deliveries, create_webhook_endpoint, delete_webhook_endpoint,
    list_webhook_deliveries, list_webhook_endpoints, record_webhook_attempt,
    release_webhook_deliveries, webhook_queue_stats,
};

/// The outcomes of a batch function's rows (`holdfast.submit_tool_results`,
/// `create_inputs`), in the order of the `count` items it was given: each
/// row is `(ord, outcome, message, field, <the saved row>…)`, `ord` the
/// item's place from 1. `saved` reads a row whose outcome it knows as
/// saved (and returns `None` for any other); the refusals are
/// `not_found`, `conflict` and `invalid` (with its field).
fn batch_outcomes<T>(
    rows: &[tokio_postgres::Row],
    count: usize,
    saved: impl Fn(&str, &tokio_postgres::Row) -> Option<Result<T>>,
) -> Vec<Result<T>> {
    let mut outcomes: Vec<Option<Result<T>>> = (0..count).map(|_| None).collect();
    for row in rows {
        let message = || row.get::<_, Option<String>>("message").unwrap_or_default();
        let outcome: &str = row.get("outcome");
        let outcome = saved(outcome, row).unwrap_or_else(|| match outcome {
            "not_found" => Err(Error::NotFound(message())),
            "conflict" => Err(Error::Conflict(message())),
            _ => Err(Error::Invalid {
                field: row.get("field"),
                message: message(),
            }),
        });
        let slot = usize::try_from(row.get::<_, i32>("ord") - 1)
            .ok()
            .and_then(|index| outcomes.get_mut(index));
        if let Some(slot) = slot {
            *slot = Some(outcome);
        }
    }
    outcomes
        .into_iter()
        .map(|outcome| outcome.unwrap_or_else(|| Err(Error::Pool("the batch lost an item".into()))))
        .collect()
}

/// A text column holding one of `T`'s strings (a domain enum's, see
/// [`holdfast_wire::domain`]); a string `T` does not know is [`Error::Invalid`]
/// naming `field`.
fn parse_text<T: FromStr>(text: &str, field: &str) -> Result<T> {
    text.parse().map_err(|_| Error::Invalid {
        field: Some(field.into()),
        message: format!("unknown {field} {text:?}"),
    })
}
