//! Holdfast's types as they cross the API: the request and response bodies
//! ([`api`]), the domain values they carry ([`domain`]: agents, events,
//! inputs, usage, ...) and an agent's configuration ([`config`]), with their
//! serde forms and OpenAPI schemas. The server, the Rust client and the
//! machine daemon share them; how they are read from and written to the
//! database is the database layer's, so this crate links no Postgres.

pub mod api;
pub mod config;
pub mod domain;
pub mod duration;
pub mod pg_text;
pub mod schedule;
