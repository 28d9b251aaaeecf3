//! Holdfast's database layer: the typed SQL surface (the only Rust that
//! names SQL functions, [`store`]), the migration runner and the schema it
//! embeds, connecting (TLS, failover, read replicas), the group committer,
//! and the embedded Postgres helper.

pub mod cluster;
pub mod connect;
pub mod error;
pub mod group_commit;
pub mod migrate;
pub mod store;

pub use error::{Error, Result};
