//! The API's request and response bodies, by area. Responses derive
//! `Deserialize` as well as `Serialize` (and requests the other way round),
//! so the server and its clients share one definition of each.

pub mod agents;
pub mod approvals;
pub mod error;
pub mod events;
pub mod inbox;
pub mod inputs;
pub mod machines;
pub mod operations;
pub mod provider_keys;
pub mod replays;
pub mod schedules;
pub mod tool_calls;
pub mod usage;
pub mod webhooks;
