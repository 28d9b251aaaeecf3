//! What a claimed agent needs next, and the model requests it needs:
//! decided from its [`StepContext`] (the saved state, read fresh at every
//! attempt). Pure functions, so they are tested without a database.

use holdfast_db::Error;
use holdfast_providers::{
    compaction_split, summary_message, summary_request, ContentBlock, Message, ModelRequest, Role,
    ToolDefinition,
};
use holdfast_wire::config::ToolChoice;
use holdfast_wire::domain::{ModelInput, StepContext, ToolCallRecord};
use serde::Deserialize;
use serde_json::{json, Value};

/// What a claimed agent needs next.
#[derive(Clone, Debug, PartialEq)]
pub enum NextAction<'a> {
    /// Run these tool calls (a batch), in order.
    Tools(Vec<ToolCallRecord>),
    /// Call the model, with what the context read for it.
    Model(&'a ModelInput),
    /// Nothing to do (the claim raced a change): release.
    NoWork,
}

/// What the model is told about a call its turn's cancel closed.
const CANCELLED_OUTPUT: &str = "Tool call was cancelled.";

/// Decided from saved state only: runnable tool calls first (their
/// results must exist before the model is asked again), then the model.
/// A context without its model input and with no call pending is an
/// error: `load_step_context` leaves that input out only when one is.
pub fn next_action(context: &StepContext) -> Result<NextAction<'_>, Error> {
    let runnable: Vec<ToolCallRecord> = context
        .tool_calls
        .iter()
        .filter(|c| c.status == "pending")
        .cloned()
        .collect();
    if !runnable.is_empty() {
        return Ok(NextAction::Tools(runnable));
    }
    let Some(input) = &context.model else {
        return Err(Error::Invalid {
            field: Some("messages".into()),
            message: "the step context left out the model's input, but no tool call is pending"
                .into(),
        });
    };
    Ok(if context.turn_open || !input.pending_inputs.is_empty() {
        NextAction::Model(input)
    } else {
        NextAction::NoWork
    })
}

/// The provider-neutral request: the compaction summary (if any), the
/// history, each assistant message followed by its tool results, then
/// the pending inputs (steering).
///
/// A forcing `tool_choice` (a tool must be called) applies to the turn's
/// first model call only (no model step of the turn committed yet, so its
/// retries are first calls too); later calls of the turn use `auto`, or a
/// forced tool every step would never let the model answer: an endless
/// paid loop.
/// The model request for `context` with `tools`; the system prompt ends
/// with `notice` when there is one (the tools left out of this call,
/// [`crate::toolbox::unavailable_notice`]).
pub fn model_request(
    context: &StepContext,
    input: &ModelInput,
    tools: Vec<ToolDefinition>,
    notice: Option<String>,
) -> ModelRequest {
    let (messages, _) = rendered_messages(context, input);
    let mut model = context.config.model.clone();
    let first_call = !context.turn_open || context.turn_model_steps == 0;
    if !first_call
        && model
            .tool_choice
            .as_ref()
            .is_some_and(ToolChoice::forces_a_call)
    {
        model.tool_choice = Some(ToolChoice::Auto {});
    }
    let system = match (context.config.system.clone(), notice) {
        (Some(system), Some(notice)) => Some(format!("{system}\n\n{notice}")),
        (system, notice) => system.or(notice),
    };
    ModelRequest {
        model,
        system,
        messages,
        tools,
        provider_tools: context.config.provider_tools(),
    }
}

/// How to compact this context keeping about the last `keep_last`
/// messages: the summarisation request, and the first saved message
/// kept verbatim. `None` when nothing saved can be summarised (the
/// context is all pending inputs, or the tail cannot be split).
pub fn compaction_plan(
    context: &StepContext,
    input: &ModelInput,
    request: &ModelRequest,
    keep_last: usize,
) -> Option<CompactionPlan> {
    let (messages, seqs) = rendered_messages(context, input);
    let split = compaction_split(&messages, keep_last);
    if split == 0 {
        return None;
    }
    let next_seq = input.messages.last().map_or(0, |m| m.seq) + 1;
    // The first kept message's seq; a pending input (no seq yet) or the
    // end means every saved message is summarised.
    let keep_from_seq = seqs.get(split).copied().flatten().unwrap_or(next_seq);
    let first_saved = input.messages.first().map(|m| m.seq)?;
    if keep_from_seq <= first_saved {
        return None;
    }
    Some(CompactionPlan {
        request: summary_request(request, keep_last),
        keep_from_seq,
    })
}

/// The messages of a request, each with the saved seq it came from
/// (tool results carry their assistant message's seq; the summary and
/// pending inputs have none).
fn rendered_messages(
    context: &StepContext,
    input: &ModelInput,
) -> (Vec<Message>, Vec<Option<i64>>) {
    let mut messages = Vec::new();
    let mut seqs = Vec::new();
    if let Some(summary) = &input.context_summary {
        messages.push(summary_message(summary));
        seqs.push(None);
    }
    for message in &input.messages {
        let role = match message.role.as_str() {
            "assistant" => Role::Assistant,
            _ => Role::User,
        };
        messages.push(Message {
            role,
            content: saved_blocks(&message.content),
        });
        seqs.push(Some(message.seq));
        if role == Role::Assistant {
            let results: Vec<ContentBlock> = context
                .tool_calls
                .iter()
                .filter(|c| Some(c.step_id) == message.step_id)
                .map(tool_result_block)
                .collect();
            if !results.is_empty() {
                messages.push(Message {
                    role: Role::User,
                    content: results,
                });
                seqs.push(Some(message.seq));
            }
        }
    }
    for pending in &input.pending_inputs {
        messages.push(Message {
            role: Role::User,
            content: input_blocks(&pending.content),
        });
        seqs.push(None);
    }
    (messages, seqs)
}

/// A planned compaction (see [`compaction_plan`]).
#[derive(Clone, Debug, PartialEq)]
pub struct CompactionPlan {
    /// The model call that writes the summary.
    pub request: ModelRequest,
    /// Messages from this seq on stay verbatim.
    pub keep_from_seq: i64,
}

fn tool_result_block(call: &ToolCallRecord) -> ContentBlock {
    let (content, is_error) = match (call.status.as_str(), &call.output) {
        ("completed", Some(output)) => (output.clone(), call.is_error.unwrap_or(false)),
        ("cancelled", _) => (json!(CANCELLED_OUTPUT), true),
        // Not reachable at model time (settle_agent only readies the model
        // when every call is terminal), but a request must still pair every
        // tool_use with a result.
        _ => (json!("Tool call has no result."), true),
    };
    ContentBlock::ToolResult {
        tool_use_id: call.provider_id.clone(),
        content,
        is_error,
    }
}

/// Saved content blocks; a block this version does not model is passed to
/// the model as its JSON text rather than dropped. Each is read from the
/// loaded JSON in place (not from a copy of it): a step renders its whole
/// history.
fn blocks(content: &Value) -> Vec<ContentBlock> {
    content
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|b| {
                    ContentBlock::deserialize(b).unwrap_or_else(|_| ContentBlock::Text {
                        text: b.to_string(),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A saved message's blocks, read straight from its stored JSON text (a
/// step renders its whole history: no JSON tree is built first). Every
/// JSON value reads as a block (unmodelled ones as [`ContentBlock::Raw`]),
/// so only content that is not an array takes the slower path, and renders
/// as [`blocks`] renders it.
fn saved_blocks(json: &str) -> Vec<ContentBlock> {
    serde_json::from_str::<Vec<ContentBlock>>(json).unwrap_or_else(|_| {
        serde_json::from_str::<Value>(json)
            .map(|content| blocks(&content))
            .unwrap_or_default()
    })
}

fn input_blocks(content: &Value) -> Vec<ContentBlock> {
    match content {
        Value::String(text) => vec![ContentBlock::Text { text: text.clone() }],
        other => blocks(other),
    }
}

#[cfg(test)]
mod tests {
    use holdfast_wire::config::AgentConfig;
    use holdfast_wire::domain::{
        HistoryMessage, ModelDestination, ModelRoute, PendingInput, ToolKind,
    };
    use uuid::Uuid;

    use super::*;

    fn context() -> StepContext {
        StepContext {
            agent_id: Uuid::nil(),
            config: AgentConfig::from_value(
                &json!({"model": {"provider": "anthropic", "name": "m"}, "system": "be brief"}),
            )
            .unwrap(),
            config_version: 1,
            turn_open: true,
            model_attempts: 0,
            turn_model_steps: 1,
            cancel_requested: false,
            tool_calls: vec![],
            trace: Default::default(),
            replay: false,
            model: Some(ModelInput {
                over_budget: false,
                context_summary: None,
                messages: vec![],
                pending_inputs: vec![],
                route: ModelRoute {
                    project_id: Uuid::nil(),
                    destination: ModelDestination::Operator {
                        endpoint: "default".into(),
                        base_url: None,
                        credential_env: None,
                    },
                    project_key: None,
                },
            }),
        }
    }

    /// `ctx`'s model request, with no tools.
    fn request(ctx: &StepContext) -> ModelRequest {
        model_request(ctx, ctx.model.as_ref().unwrap(), Vec::new(), None)
    }

    fn input(ctx: &mut StepContext) -> &mut ModelInput {
        ctx.model.as_mut().unwrap()
    }

    fn call(step: Uuid, status: &str, output: Option<Value>) -> ToolCallRecord {
        ToolCallRecord {
            id: Uuid::now_v7(),
            step_id: step,
            position: 0,
            provider_id: "toolu_1".into(),
            name: "t".into(),
            input: json!({}),
            kind: ToolKind::Custom,
            status: status.into(),
            output,
            is_error: Some(false),
        }
    }

    #[test]
    fn a_forcing_tool_choice_applies_to_the_first_call_of_a_turn_only() {
        let mut ctx = context();
        ctx.config.model.tool_choice = Some(ToolChoice::Any {});
        ctx.turn_model_steps = 0;
        let first = request(&ctx);
        assert_eq!(first.model.tool_choice, Some(ToolChoice::Any {}));
        ctx.turn_model_steps = 1;
        let later = request(&ctx);
        assert_eq!(later.model.tool_choice, Some(ToolChoice::Auto {}));
        ctx.config.model.tool_choice = Some(ToolChoice::None {});
        let none = request(&ctx);
        assert_eq!(
            none.model.tool_choice,
            Some(ToolChoice::None {}),
            "not forcing: kept"
        );
    }

    #[test]
    fn saved_blocks_are_the_blocks_of_the_parsed_content() {
        for content in [
            json!([{"type": "text", "text": "hi"}]),
            json!([{"type": "text", "text": "cited", "citations": []}]),
            json!([{"type": "tool_use", "id": "toolu_1", "name": "t", "input": {"a": [1, 2.5, null]}}]),
            json!([{"type": "thinking", "thinking": "hm", "signature": "s"}]),
            json!([{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]),
            json!(["a bare string", 7, {"no": "type"}]),
            json!("not an array"),
            json!({"type": "text", "text": "an object"}),
        ] {
            assert_eq!(
                saved_blocks(&content.to_string()),
                blocks(&content),
                "{content}"
            );
        }
    }

    #[test]
    fn pending_tool_calls_come_before_the_model() {
        let mut ctx = context();
        ctx.tool_calls.push(call(Uuid::nil(), "pending", None));
        assert!(matches!(next_action(&ctx), Ok(NextAction::Tools(c)) if c.len() == 1));
        ctx.tool_calls[0].status = "completed".into();
        assert!(matches!(next_action(&ctx), Ok(NextAction::Model(_))));
        ctx.turn_open = false;
        assert!(matches!(next_action(&ctx), Ok(NextAction::NoWork)));
    }

    #[test]
    fn a_context_without_its_model_input_runs_its_pending_calls_or_fails() {
        let mut ctx = context();
        ctx.model = None;
        ctx.tool_calls.push(call(Uuid::nil(), "pending", None));
        assert!(matches!(next_action(&ctx), Ok(NextAction::Tools(c)) if c.len() == 1));
        ctx.tool_calls[0].status = "completed".into();
        assert!(matches!(
            next_action(&ctx),
            Err(Error::Invalid { field: Some(field), .. }) if field == "messages"
        ));
    }

    #[test]
    fn tool_results_follow_their_assistant_message_and_inputs_come_last() {
        let step = Uuid::now_v7();
        let mut ctx = context();
        input(&mut ctx).messages = vec![
            HistoryMessage {
                seq: 1,
                role: "user".into(),
                content: json!([{"type": "text", "text": "hi"}]).to_string().into(),
                step_id: Some(step),
            },
            HistoryMessage {
                seq: 2,
                role: "assistant".into(),
                content: json!([{"type": "tool_use", "id": "toolu_1", "name": "t", "input": {}}])
                    .to_string()
                    .into(),
                step_id: Some(step),
            },
        ];
        ctx.tool_calls
            .push(call(step, "completed", Some(json!("42"))));
        input(&mut ctx).pending_inputs.push(PendingInput {
            id: Uuid::now_v7(),
            content: json!("steer"),
        });
        let request = request(&ctx);
        assert_eq!(request.system.as_deref(), Some("be brief"));
        let roles: Vec<Role> = request.messages.iter().map(|m| m.role).collect();
        assert_eq!(roles, [Role::User, Role::Assistant, Role::User, Role::User]);
        assert_eq!(
            request.messages[2].content,
            [ContentBlock::ToolResult {
                tool_use_id: "toolu_1".into(),
                content: json!("42"),
                is_error: false
            }]
        );
        assert_eq!(
            request.messages[3].content,
            [ContentBlock::Text {
                text: "steer".into()
            }]
        );
    }

    #[test]
    fn a_cancelled_call_is_reported_to_the_model_as_an_error() {
        let step = Uuid::now_v7();
        let mut ctx = context();
        input(&mut ctx).messages.push(HistoryMessage {
            seq: 1,
            role: "assistant".into(),
            content: json!([{"type": "tool_use", "id": "toolu_1", "name": "t", "input": {}}])
                .to_string()
                .into(),
            step_id: Some(step),
        });
        ctx.tool_calls.push(call(step, "cancelled", None));
        let request = request(&ctx);
        assert!(matches!(
            &request.messages[1].content[0],
            ContentBlock::ToolResult { is_error: true, .. }
        ));
    }
}
