//! The migration runner: applies `sql/NNNN_name.sql` in order, once each,
//! then the function files `sql/functions/*.sql` whenever they changed.
//!
//! Two kinds of SQL, because they age differently:
//! - **Migrations** are history: tables, indexes, triggers, views and data
//!   changes, each applied once and recorded in `holdfast.schema_migrations`
//!   with a SHA-256 of its text. A file that changed after it was applied
//!   stops the runner: migrations are forward-only.
//! - **Function files** hold the one current definition of every function
//!   (`CREATE OR REPLACE`), so a reader finds each function in one place. They
//!   are re-applied, all in one transaction after the migrations, whenever one
//!   of them differs from the checksum recorded in
//!   `holdfast.schema_functions`. Early migrations also define functions (as
//!   they were then); the function files, applied last, are what runs. A
//!   function whose signature changes is dropped by a migration and created
//!   again by its file.
//!
//! A session-level advisory lock makes concurrent runners (two processes
//! starting at once) take turns: the second finds everything applied and
//! does nothing.

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
        version: 10,
        name: "0010_step_failures.sql",
        sql: include_str!("../../sql/0010_step_failures.sql"),
    },
    Migration {
        version: 11,
        name: "0011_limits.sql",
        sql: include_str!("../../sql/0011_limits.sql"),
    },
    Migration {
        version: 12,
        name: "0012_model_endpoints.sql",
        sql: include_str!("../../sql/0012_model_endpoints.sql"),
    },
    Migration {
        version: 13,
        name: "0013_machine_credentials.sql",
        sql: include_str!("../../sql/0013_machine_credentials.sql"),
    },
    Migration {
        version: 17,
        name: "0017_console.sql",
        sql: include_str!("../../sql/0017_console.sql"),
    },
    Migration {
        version: 18,
        name: "0018_group_commit.sql",
        sql: include_str!("../../sql/0018_group_commit.sql"),
    },
    Migration {
        version: 19,
        name: "0019_model_usage.sql",
        sql: include_str!("../../sql/0019_model_usage.sql"),
    },
    Migration {
        version: 20,
        name: "0020_stream_watches.sql",
        sql: include_str!("../../sql/0020_stream_watches.sql"),
    },
    Migration {
        version: 21,
        name: "0021_audit.sql",
        sql: include_str!("../../sql/0021_audit.sql"),
    },
    Migration {
        version: 22,
        name: "0022_usage.sql",
        sql: include_str!("../../sql/0022_usage.sql"),
    },
    Migration {
        version: 26,
        name: "0026_traces.sql",
        sql: include_str!("../../sql/0026_traces.sql"),
    },
    Migration {
        version: 28,
        name: "0028_tool_result_batches.sql",
        sql: include_str!("../../sql/0028_tool_result_batches.sql"),
    },
    Migration {
        version: 29,
        name: "0029_attachments.sql",
        sql: include_str!("../../sql/0029_attachments.sql"),
    },
    Migration {
        version: 30,
        name: "0030_steering.sql",
        sql: include_str!("../../sql/0030_steering.sql"),
    },
    Migration {
        version: 31,
        name: "0031_distributable.sql",
        sql: include_str!("../../sql/0031_distributable.sql"),
    },
    Migration {
        version: 32,
        name: "0032_partitions.sql",
        sql: include_str!("../../sql/0032_partitions.sql"),
    },
    Migration {
        version: 34,
        name: "0034_budget_approvals.sql",
        sql: include_str!("../../sql/0034_budget_approvals.sql"),
    },
    Migration {
        version: 35,
        name: "0035_compaction_usage.sql",
        sql: include_str!("../../sql/0035_compaction_usage.sql"),
    },
    Migration {
        version: 36,
        name: "0036_delivery_traces.sql",
        sql: include_str!("../../sql/0036_delivery_traces.sql"),
    },
    Migration {
        version: 37,
        name: "0037_command_traces.sql",
        sql: include_str!("../../sql/0037_command_traces.sql"),
    },
    Migration {
        version: 38,
        name: "0038_input_batches.sql",
        sql: include_str!("../../sql/0038_input_batches.sql"),
    },
    Migration {
        version: 39,
        name: "0039_fewer_indexes.sql",
        sql: include_str!("../../sql/0039_fewer_indexes.sql"),
    },
    Migration {
        version: 40,
        name: "0040_partial_unique_keys.sql",
        sql: include_str!("../../sql/0040_partial_unique_keys.sql"),
    },
    Migration {
        version: 42,
        name: "0042_security_data.sql",
        sql: include_str!("../../sql/0042_security_data.sql"),
    },
    Migration {
        version: 43,
        name: "0043_command_sandbox.sql",
        sql: include_str!("../../sql/0043_command_sandbox.sql"),
    },
    Migration {
        version: 44,
        name: "0044_attachment_quotas.sql",
        sql: include_str!("../../sql/0044_attachment_quotas.sql"),
    },
    Migration {
        version: 45,
        name: "0045_last_turn.sql",
        sql: include_str!("../../sql/0045_last_turn.sql"),
    },
    Migration {
        version: 46,
        name: "0046_server_tool_usage.sql",
        sql: include_str!("../../sql/0046_server_tool_usage.sql"),
    },
    Migration {
        version: 48,
        name: "0048_console_live.sql",
        sql: include_str!("../../sql/0048_console_live.sql"),
    },
    Migration {
        version: 49,
        name: "0049_lease_session_lock.sql",
        sql: include_str!("../../sql/0049_lease_session_lock.sql"),
    },
];

/// A file of current function definitions, embedded at build time.
pub struct FunctionFile {
    pub name: &'static str,
    pub sql: &'static str,
}

macro_rules! function_files {
    ($($name:literal),* $(,)?) => {
        &[$(FunctionFile {
            name: concat!("functions/", $name),
            sql: include_str!(concat!("../../sql/functions/", $name)),
        }),*]
    };
}

/// Every function file. Order does not matter for correctness (bodies are
/// not checked at creation, see [`apply_function_files`]); it is the order a
/// reader meets them in docs/sql.md.
pub const FUNCTION_FILES: &[FunctionFile] = function_files![
    "base.sql",
    "content.sql",
    "events.sql",
    "agents.sql",
    "leases.sql",
    "usage.sql",
    "steps.sql",
    "cancel.sql",
    "tools.sql",
    "api_keys.sql",
    "webhooks.sql",
    "retention.sql",
    "machines.sql",
    "endpoints.sql",
];

/// An arbitrary constant key for `pg_advisory_lock`: "HOLDFAST" in ASCII.
const MIGRATION_LOCK_KEY: i64 = 0x484F_4C44_4641_5354;

fn checksum(sql: &str) -> String {
    hex::encode(Sha256::digest(sql.as_bytes()))
}

impl Migration {
    pub fn checksum(&self) -> String {
        checksum(self.sql)
    }
}

impl FunctionFile {
    pub fn checksum(&self) -> String {
        checksum(self.sql)
    }
}

/// A fingerprint of the whole schema source, migrations and function files
/// (test templates are keyed by it).
pub fn fingerprint() -> String {
    let mut hasher = Sha256::new();
    let files = MIGRATIONS
        .iter()
        .map(|m| (m.name, m.sql))
        .chain(FUNCTION_FILES.iter().map(|f| (f.name, f.sql)));
    for (name, sql) in files {
        hasher.update(name.as_bytes());
        hasher.update(sql.as_bytes());
    }
    hex::encode(&hasher.finalize()[..8])
}

/// Apply every migration not yet applied, then the function files if any
/// changed. Returns the names applied by this call, migrations first (empty
/// when the schema was already current).
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
    applied.extend(apply_function_files(client).await?);
    Ok(applied)
}

/// Re-apply the function files when any differs from what was recorded:
/// all of them, in one transaction, so the database never runs a mix of old
/// and new definitions. `check_function_bodies = off` lets a function refer
/// to one defined later in the set (plpgsql bodies are parsed, not resolved,
/// either way; this extends that to `LANGUAGE sql` bodies).
async fn apply_function_files(client: &mut Client) -> Result<Vec<&'static str>> {
    client
        .batch_execute(
            "SET client_min_messages = warning;
             CREATE TABLE IF NOT EXISTS holdfast.schema_functions (
                 name       text PRIMARY KEY,
                 checksum   text NOT NULL,
                 applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
             );
             RESET client_min_messages;",
        )
        .await?;
    let recorded = client
        .query("SELECT name, checksum FROM holdfast.schema_functions", &[])
        .await?;
    let changed: Vec<&FunctionFile> = FUNCTION_FILES
        .iter()
        .filter(|file| {
            !recorded
                .iter()
                .any(|r| r.get::<_, &str>(0) == file.name && r.get::<_, &str>(1) == file.checksum())
        })
        .collect();
    if changed.is_empty() {
        return Ok(Vec::new());
    }
    let tx = client.transaction().await?;
    tx.batch_execute("SET LOCAL check_function_bodies = off")
        .await?;
    for file in FUNCTION_FILES {
        tx.batch_execute(file.sql).await.map_err(|e| {
            Error::Migration(format!(
                "{} failed: {}",
                file.name,
                e.as_db_error()
                    .map_or(e.to_string(), |d| d.message().to_owned())
            ))
        })?;
        tx.execute(
            "INSERT INTO holdfast.schema_functions (name, checksum) VALUES ($1, $2)
             ON CONFLICT (name) DO UPDATE
                SET checksum = EXCLUDED.checksum, applied_at = clock_timestamp()",
            &[&file.name, &file.checksum()],
        )
        .await?;
    }
    tx.commit().await?;
    let names: Vec<&'static str> = changed.iter().map(|f| f.name).collect();
    tracing::info!(files = ?names, "applied function files");
    Ok(names)
}

/// What [`migrate`] would apply, applying nothing: the migrations not yet
/// recorded, then the function files whose recorded checksum differs (all of
/// them on a database never migrated). For the commands that need the
/// current schema but leave changing it to `holdfast migrate`.
pub async fn pending(client: &Client) -> Result<Vec<&'static str>> {
    let tables = client
        .query_one(
            "SELECT to_regclass('holdfast.schema_migrations') IS NOT NULL,
                    to_regclass('holdfast.schema_functions') IS NOT NULL",
            &[],
        )
        .await?;
    let applied: Vec<i32> = match tables.get(0) {
        true => client
            .query("SELECT version FROM holdfast.schema_migrations", &[])
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect(),
        false => Vec::new(),
    };
    let functions: Vec<(String, String)> = match tables.get(1) {
        true => client
            .query("SELECT name, checksum FROM holdfast.schema_functions", &[])
            .await?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect(),
        false => Vec::new(),
    };
    let migrations = MIGRATIONS
        .iter()
        .filter(|m| !applied.contains(&m.version))
        .map(|m| m.name);
    let function_files = FUNCTION_FILES
        .iter()
        .filter(|f| {
            !functions
                .iter()
                .any(|(name, checksum)| name == f.name && *checksum == f.checksum())
        })
        .map(|f| f.name);
    Ok(migrations.chain(function_files).collect())
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
