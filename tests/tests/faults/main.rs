//! Faults managed Postgres has: failover, a full disk, poolers, partitions, TLS and read replicas.
//!
//! One test binary with a module per area, so the workspace links few
//! executables; run one area with `cargo test -p holdfast-tests --test faults NAME::`.

mod disk_full;
mod faults;
mod partition;
mod poolers;
mod postgres_tls;
mod read_replica;
