//! The benchmark scenarios (docs/internals/benchmarks.md says what each measures).
//! Each runs in a fresh database of the bench cluster and returns its
//! params, metrics and same-run baseline.

pub mod api_inputs;
pub mod attachments;
pub mod claim_scaling;
pub mod command_start;
pub mod fanout;
pub mod history_scaling;
pub mod memory;
pub mod recovery;
pub mod sql_steps;
pub mod throughput;
pub mod wake_latency;

use serde_json::{json, Value};

/// An agent config on the fake provider (Anthropic protocol) with one
/// custom tool, `lookup`, that the driver answers.
pub fn agent_config() -> Value {
    json!({
        "model": {"provider": "anthropic", "name": "bench-model", "max_tokens": 256},
        "system": "You are a benchmark agent.",
        "tools": [{
            "type": "custom",
            "name": LOOKUP_TOOL,
            "description": "Look something up.",
            "input_schema": {
                "type": "object",
                "properties": {"q": {"type": "string"}},
                "required": ["q"]
            }
        }]
    })
}

pub const LOOKUP_TOOL: &str = "lookup";

/// A target from the issue and whether this run met it.
pub fn target(description: &str, met: bool) -> Value {
    json!({"description": description, "met": met})
}
