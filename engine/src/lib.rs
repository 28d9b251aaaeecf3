//! Holdfast's engine: the typed SQL surface (the only Rust that names SQL
//! functions), the migration runner and the embedded Postgres
//! helper. Workers, the API and the CLI are thin layers over this.

pub mod cluster;
pub mod connect;
pub mod egress;
pub mod error;
pub mod group_commit;
pub mod migrate;
pub mod pg_text;
pub mod provider;
pub mod secrets;
pub mod store;
pub mod telemetry;

pub use error::{Error, Result};
