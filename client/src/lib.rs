//! Holdfast's HTTP API as Rust types, for every Rust caller of the API (the
//! CLI, the demo, the machine daemon, the tests and the benchmarks).
//!
//! [`wire`] holds the request and response bodies. They are the API's own
//! types: `holdfast-api` serves them and derives its OpenAPI document from
//! their schemas, so a client cannot drift from the server. [`Client`] calls
//! the routes with them: the bearer token, the API's error body as a typed
//! [`CallError`], retries of requests that are safe to repeat, and an
//! agent's event stream followed across reconnects ([`follow`]).

pub mod follow;
mod http;
pub mod wire;

pub use http::{Answer, ApiFailure, CallError, Client, Retry};
