//! Typed calls of Holdfast's SQL functions. This module is the one place in
//! Rust that knows their names and signatures; workers and the API call these
//! wrappers, never ad-hoc SQL. Each takes any client (a pooled connection, a
//! dedicated session or a transaction).
//!
//! By area: [`steps`] (the worker), [`agents`], [`events`], [`keys`],
//! [`tool_calls`], [`webhooks`], [`machines`], [`status`], [`models`],
//! [`retention`], [`replication`]; each
//! function is re-exported here, so callers write `store::claim_agents`.

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
mod status;
mod steps;
mod tool_calls;
mod usage;
mod webhooks;

pub use agents::*;
pub use events::*;
pub use keys::*;
pub use machines::*;
pub use models::*;
pub use prepared::*;
pub use replication::*;
pub use retention::*;
pub use status::*;
pub use steps::*;
pub use tool_calls::*;
pub use usage::*;
pub use webhooks::*;

/// A text column holding one of `T`'s strings (a domain enum's, see
/// [`crate::domain`]); a string `T` does not know is [`Error::Invalid`]
/// naming `field`.
fn parse_text<T: FromStr>(text: &str, field: &str) -> Result<T> {
    text.parse().map_err(|_| Error::Invalid {
        field: Some(field.into()),
        message: format!("unknown {field} {text:?}"),
    })
}
