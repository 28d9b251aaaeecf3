//! Tools whose IO the worker does itself: `web_fetch`, `web_search`, MCP servers over
//! Streamable HTTP, and validation of a tool call's input against its schema.
//!
//! These modules are pure IO: they touch no database. The tool batch step
//! marks a call `running` (committed) before calling into them and commits
//! the [`ToolOutput`] afterwards, so a crash in between is seen as an
//! interrupted call and never reruns the IO.

mod html_text;
pub mod mcp;
pub mod schema;
pub mod web_fetch;
pub mod web_search;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The result of one tool call, as the model will see it: `output` becomes
/// the tool_result content (a string, or any JSON), `is_error` its flag.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolOutput {
    pub output: Value,
    pub is_error: bool,
}

impl ToolOutput {
    pub fn success(output: Value) -> ToolOutput {
        ToolOutput {
            output,
            is_error: false,
        }
    }

    /// An error result whose message tells the model what went wrong and,
    /// where it can, how to call the tool differently.
    pub fn error(message: impl Into<String>) -> ToolOutput {
        ToolOutput {
            output: Value::String(message.into()),
            is_error: true,
        }
    }
}
