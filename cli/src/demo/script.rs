//! What happens in the demo: the agent, the model's scripted replies, and
//! the demo's own implementation of the agent's custom tools.
//!
//! The model is `holdfast-fakes`' scripted server on 127.0.0.1 speaking the
//! Anthropic Messages protocol, so the worker's real provider client runs
//! against it. Replies answer requests in order:
//!
//! 1. text + `lookup_order` (a custom tool: the demo answers it over HTTP);
//! 2. text + `issue_refund` (needs approval; the demo approves, then answers);
//! 3. text + `run_command` on this machine: the demo's `holdfast machine run`
//!    daemon runs [`COMMAND`], which appends the refund to a ledger file in
//!    its working directory (a side effect that must not happen twice) and
//!    says where it ran;
//! 4. the closing text, which stops mid-stream: the demo kills the worker
//!    there;
//! 5. the same closing text, for the retry on the other worker.

use std::time::Duration;

use holdfast_fakes::{FakeProvider, Reply};
use serde_json::{json, Value};

/// The customer's message that starts the turn.
pub const INPUT: &str = "Order #1001 arrived with a cracked kettle. Can you make it right?";

/// What the agent runs on this machine: harmless, and present on any
/// POSIX system (`sh`, `echo`, `uname`).
pub const COMMAND: &str =
    "echo 'R-7731 order=1001 amount=49.00EUR' >> refunds.log && echo \"refund logged on $(uname -n), $(uname -sr)\"";

/// The reply the worker is killed in: it stops after this many deltas.
pub const DELTAS_BEFORE_CRASH: usize = 4;

const CLOSING: &str = "Done: refund R-7731 of 49.00 EUR is on its way and usually reaches \
                       your card within five days. Sorry about the kettle!";

/// Stream frames this far apart: longer than the worker's 50 ms delta
/// batching, so the text visibly streams word by word.
const WORD_GAP: Duration = Duration::from_millis(80);

/// The model endpoint the demo registers for its scripted model server.
pub const MODEL_ENDPOINT: &str = "demo-model-server";

/// The agent: the two custom tools, and `run_command` on `machine`.
pub fn agent_config(machine: &str) -> Value {
    json!({
        "model": {"provider": "anthropic", "name": "demo-model", "endpoint": MODEL_ENDPOINT},
        "system": "You are the support agent of a small shop. Look orders up before acting.",
        "tools": [
            {
                "type": "custom",
                "name": "lookup_order",
                "description": "Look up an order by its number.",
                "input_schema": {
                    "type": "object",
                    "properties": {"order_id": {"type": "string"}},
                    "required": ["order_id"]
                }
            },
            {
                "type": "custom",
                "name": "issue_refund",
                "description": "Refund an order, fully or in part.",
                "input_schema": {
                    "type": "object",
                    "properties": {"order_id": {"type": "string"}, "amount": {"type": "string"}},
                    "required": ["order_id", "amount"]
                }
            },
            {"type": "run_command", "machine": machine}
        ],
        "approvals": {"require_for": ["issue_refund"]}
    })
}

/// Queue the model's replies, in order.
pub fn script_model(fake: &FakeProvider) {
    fake.push(
        Reply::text_and_tool_calls(
            "Sorry to hear that! Let me look up order #1001 first.",
            vec![("lookup_order", json!({"order_id": "1001"}))],
        )
        .trickle(WORD_GAP),
    );
    fake.push(
        Reply::text_and_tool_calls(
            "The kettle was paid 49.00 EUR and delivered two days ago. I'll refund it in full.",
            vec![(
                "issue_refund",
                json!({"order_id": "1001", "amount": "49.00 EUR"}),
            )],
        )
        .trickle(WORD_GAP),
    );
    fake.push(
        Reply::text_and_tool_calls(
            "Refund issued. I'll note it in the shop's ledger on this machine.",
            vec![(
                "run_command",
                json!({"command": COMMAND, "timeout_secs": 30}),
            )],
        )
        .trickle(WORD_GAP),
    );
    fake.push(
        Reply::text(CLOSING)
            .trickle(WORD_GAP)
            .hold_after_deltas(DELTAS_BEFORE_CRASH),
    );
    fake.push(Reply::text(CLOSING).trickle(WORD_GAP));
    // Anything past the script is a bug the summary's counts would show.
    fake.set_default(Reply::text("(the demo's script has ended)"));
}

/// The demo's own custom tools: what the client's backend would do.
pub fn run_tool(name: &str, input: &Value) -> (Value, bool) {
    match name {
        "lookup_order" => (
            json!({
                "order_id": input["order_id"],
                "item": "Kettle, 1.7 l",
                "paid": "49.00 EUR",
                "status": "delivered 2 days ago"
            }),
            false,
        ),
        "issue_refund" => (
            json!({"refund_id": "R-7731", "order_id": input["order_id"], "amount": input["amount"]}),
            false,
        ),
        other => (json!(format!("the demo has no tool named {other}")), true),
    }
}
