//! HTTP API behaviour: routes, validation, streams, approvals, budgets, usage and the console's API.
//!
//! One test binary with a module per area, so the workspace links few
//! executables; run one area with `cargo test -p holdfast-tests --test api NAME::`.

mod api;
mod api_approvals;
mod api_input;
mod api_probes;
mod api_sql;
mod api_stream;
mod api_tool_calls;
mod api_webhooks;
mod attachment_limits;
mod audit;
mod backlog_and_versions;
mod budgets;
mod config_rules;
mod console_api;
mod console_inbox;
mod content;
mod endpoints;
mod event_schemas;
mod limits;
mod security;
mod usage;
