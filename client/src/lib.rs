//! A typed client of Holdfast's HTTP API, for every Rust caller of the API
//! (the CLI, the demo, the machine daemon, the tests and the benchmarks).
//!
//! The request and response bodies are `holdfast_wire::api`'s: the API's own
//! types, which `holdfast-api` serves and derives its OpenAPI document from,
//! so a client cannot drift from the server. [`Client`] calls
//! the routes with them: the bearer token, the API's error body as a typed
//! [`CallError`], retries of requests that are safe to repeat, and an
//! agent's event stream followed across reconnects ([`follow`]).

pub mod follow;
mod http;

pub use http::{Answer, ApiFailure, CallError, Client, Retry};
