//! The migration runner: applies `sql/NNNN_name.sql` in order, once each.
//!
//! Applied migrations are recorded in `holdfast.schema_migrations` with a
//! SHA-256 of their text. A session-level advisory lock makes concurrent
//! runners (two processes starting at once) take turns: the second finds
//! everything applied and does nothing. A file that changed after it was
//! applied stops the runner: migrations are forward-only.

use sha2::{Digest, Sha256};
use tokio_postgres::Client;

use crate::error::{Error, Result};

/// One migration file, embedded at build time.
pub struct Migration {
    pub version: i32,
    pub name: &'static str,
    pub sql: &'static str,
}

/// Every migration, in order. Add new files here (and only append).
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "0001_core.sql",
        sql: include_str!("../../sql/0001_core.sql"),
    },
    Migration {
        version: 2,
        name: "0002_api.sql",
        sql: include_str!("../../sql/0002_api.sql"),
    },
    Migration {
        version: 3,
        name: "0003_worker.sql",
        sql: include_str!("../../sql/0003_worker.sql"),
    },
    Migration {
        version: 4,
        name: "0004_models.sql",
        sql: include_str!("../../sql/0004_models.sql"),
    },
    Migration {
        version: 5,
        name: "0005_tools.sql",
        sql: include_str!("../../sql/0005_tools.sql"),
    },
    Migration {
        version: 6,
        name: "0006_cancel.sql",
        sql: include_str!("../../sql/0006_cancel.sql"),
    },
    Migration {
        version: 7,
        name: "0007_webhooks.sql",
        sql: include_str!("../../sql/0007_webhooks.sql"),
    },
    Migration {
        version: 8,
        name: "0008_machines.sql",
        sql: include_str!("../../sql/0008_machines.sql"),
    },
    Migration {
        version: 9,
        name: "0009_lean_commits.sql",
        sql: include_str!("../../sql/0009_lean_commits.sql"),
    },
    Migration {
        version: 15,
        name: "0015_egress.sql",
        sql: include_str!("../../sql/0015_egress.sql"),
    },
];

/// An arbitrary constant key for `pg_advisory_lock`: "HOLDFAST" in ASCII.
const MIGRATION_LOCK_KEY: i64 = 0x484F_4C44_4641_5354;

impl Migration {
    pub fn checksum(&self) -> String {
        hex::encode(Sha256::digest(self.sql.as_bytes()))
    }
}

/// A fingerprint of the whole migration set (test templates are keyed by it).
pub fn fingerprint() -> String {
    let mut hasher = Sha256::new();
    for m in MIGRATIONS {
        hasher.update(m.name.as_bytes());
        hasher.update(m.sql.as_bytes());
    }
    hex::encode(&hasher.finalize()[..8])
}

/// Apply every migration not yet applied. Returns the names applied by this
/// call (empty when the schema was already current).
pub async fn migrate(client: &mut Client) -> Result<Vec<&'static str>> {
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK_KEY])
        .await?;
    let outcome = apply_pending(client).await;
    // Unlock even on failure; a dropped connection unlocks by itself.
    let unlock = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK_KEY])
        .await;
    let applied = outcome?;
    unlock?;
    Ok(applied)
}

async fn apply_pending(client: &mut Client) -> Result<Vec<&'static str>> {
    client
        .batch_execute(
            "SET client_min_messages = warning;
             CREATE SCHEMA IF NOT EXISTS holdfast;
             CREATE TABLE IF NOT EXISTS holdfast.schema_migrations (
                 version    integer PRIMARY KEY,
                 name       text NOT NULL,
                 checksum   text NOT NULL,
                 applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
             );
             RESET client_min_messages;",
        )
        .await?;
    let rows = client
        .query(
            "SELECT version, name, checksum FROM holdfast.schema_migrations ORDER BY version",
            &[],
        )
        .await?;
    let mut applied = Vec::new();
    for migration in MIGRATIONS {
        let checksum = migration.checksum();
        if let Some(row) = rows
            .iter()
            .find(|r| r.get::<_, i32>(0) == migration.version)
        {
            let recorded: String = row.get(2);
            if recorded != checksum {
                return Err(Error::Migration(format!(
                    "{} was changed after it was applied (recorded checksum {}, file {}); \
                     migrations are forward-only: add a new migration instead",
                    migration.name, recorded, checksum
                )));
            }
            continue;
        }
        let tx = client.transaction().await?;
        tx.batch_execute(migration.sql).await.map_err(|e| {
            Error::Migration(format!(
                "{} failed: {}",
                migration.name,
                e.as_db_error()
                    .map_or(e.to_string(), |d| d.message().to_owned())
            ))
        })?;
        tx.execute(
            "INSERT INTO holdfast.schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
            &[&migration.version, &migration.name, &checksum],
        )
        .await?;
        tx.commit().await?;
        tracing::info!(migration = migration.name, "applied migration");
        applied.push(migration.name);
    }
    Ok(applied)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_increasing_and_match_file_names() {
        let mut last = 0;
        for m in MIGRATIONS {
            assert!(m.version > last, "{} is out of order", m.name);
            assert!(
                m.name.starts_with(&format!("{:04}_", m.version)),
                "{} does not start with its version",
                m.name
            );
            last = m.version;
        }
    }
}
