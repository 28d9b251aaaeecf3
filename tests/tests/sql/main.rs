//! The SQL layer alone: the step path's functions, the schema, lease races, machines, webhooks and retention in SQL.
//!
//! One test binary with a module per area, so the workspace links few
//! executables; run one area with `cargo test -p holdfast-tests --test sql NAME::`.

mod kept_leases;
mod lease_races;
mod machines_sql;
mod maintenance;
mod retention;
mod sql_core;
mod sql_schema;
mod webhooks_sql;
