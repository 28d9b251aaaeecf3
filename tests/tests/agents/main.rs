//! Agents run end to end by real workers: turns, tools, providers, steering, failures, traces, schedules, time travel, webhooks.
//!
//! One test binary with a module per area, so the workspace links few
//! executables; run one area with `cargo test -p holdfast-tests --test agents NAME::`.

mod busy_agents;
mod external_tools;
mod model_options;
mod models;
mod provider;
mod responses_api;
mod schedules;
mod server_tools;
mod silent_failures;
mod steering;
mod step_failures;
mod stream_watches;
mod time_travel;
mod tool_waits;
mod tools;
mod traces;
mod web_search;
mod webhooks_delivery;
mod webhooks_process;
mod worker;
