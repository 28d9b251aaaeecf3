//! Machines: the daemon's API and real `holdfast machine run` daemons running commands.
//!
//! One test binary with a module per area, so the workspace links few
//! executables; run one area with `cargo test -p holdfast-tests --test machines NAME::`.

mod machines_api;
mod machines_process;
