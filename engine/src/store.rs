//! Typed calls of Holdfast's SQL functions. This module is the one place in
//! Rust that knows their names and signatures; workers and the API call these
//! wrappers, never ad-hoc SQL. Each takes any client (a pooled connection, a
//! dedicated session or a transaction).
//!
//! By area: [`steps`] (the worker), [`agents`], [`events`], [`keys`],
//! [`tool_calls`], [`webhooks`], [`machines`], [`status`], [`models`],
//! [`retention`], [`replication`], [`time_travel`] (forks and replays); each
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
mod time_travel;
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
pub use time_travel::*;
pub use tool_calls::*;
pub use usage::*;
pub use webhooks::*;

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
        let message = || row.get::<_, Option<String>>(2).unwrap_or_default();
        let outcome: &str = row.get(1);
        let outcome = saved(outcome, row).unwrap_or_else(|| match outcome {
            "not_found" => Err(Error::NotFound(message())),
            "conflict" => Err(Error::Conflict(message())),
            _ => Err(Error::Invalid {
                field: row.get(3),
                message: message(),
            }),
        });
        let slot = usize::try_from(row.get::<_, i32>(0) - 1)
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
/// [`crate::domain`]); a string `T` does not know is [`Error::Invalid`]
/// naming `field`.
fn parse_text<T: FromStr>(text: &str, field: &str) -> Result<T> {
    text.parse().map_err(|_| Error::Invalid {
        field: Some(field.into()),
        message: format!("unknown {field} {text:?}"),
    })
}
