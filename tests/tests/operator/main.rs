//! The operator's paths: the CLI, `demo`, `up`, the docs' commands, the distributables and the dependency tree.
//!
//! One test binary with a module per area, so the workspace links few
//! executables; run one area with `cargo test -p holdfast-tests --test operator NAME::`.

mod cli_commands;
mod dependencies;
mod distributable;
mod docs_reference;
mod embedded_postgres;
mod operator_cli;
mod operator_demo;
mod operator_docs;
mod operator_up;
mod source_rules;
