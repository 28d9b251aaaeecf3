//! Machines and the commands they run (docs/api.md, "Machines").
//!
//! Two audiences, two credentials. A project's API key registers machines,
//! lists them, starts wake attempts, rotates their tokens and deletes them
//! ([`manage`]). A machine's daemon
//! (`holdfast machine`) uses the machine's own token on `/v1/machine/...`
//! ([`daemon`]): heartbeats, long-poll claims, results. Neither credential
//! opens the other's routes ([`token`]).

pub mod daemon;
pub mod manage;
pub mod token;
