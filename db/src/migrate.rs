//! The migration runner: installs the current schema on a fresh database,
//! applies the migrations written since the baseline on an existing one, and
//! re-applies the functions and triggers whenever they changed.
//!
//! The schema is kept as its current definition, one file per area under
//! `sql/schema/` (docs/sql.md lists them), each holding that area's tables,
//! indexes and views and then, after the line [`CODE_MARKER`], its functions
//! and triggers. Two kinds of SQL, because they change differently:
//! - **Structure** (tables, indexes, views, types, seed rows) holds data, so an
//!   existing database changes by a migration, `sql/NNNN_name.sql`, applied
//!   once and recorded in `holdfast.schema_migrations` with a SHA-256 of its
//!   text; a recorded file whose text changed stops the runner. A structural
//!   change is a new migration *and* the same edit in the area file, so the
//!   area files stay the current truth (the `sql_schema` tests compare a fresh
//!   install with a migrated one).
//! - **Code** (functions and triggers) holds no data, so it is re-applied as a
//!   whole, in one transaction after the migrations, whenever any area's code
//!   differs from the checksum recorded in `holdfast.schema_functions`: every
//!   trigger on a holdfast table is dropped, every area's code applied, and
//!   every function the files no longer define (a removed one, or an old
//!   signature) dropped. Changing a function or trigger is an edit of its
//!   area file and nothing else.
//!
//! A fresh database gets the area files, whole and in order, and this and
//! the next two weeks' event partitions, in one transaction, and records the
//! baseline and every migration as applied without running them: the area
//! files already hold what they do.
//!
//! The baseline is version [`BASELINE_VERSION`]: the migrations before it
//! (0001 to 0045, Holdfast 0.1.0) were squashed into the area files. A
//! database that applied all of them is at the baseline and continues from
//! there; one that stopped partway is refused, with what to do.
//!
//! A session-level advisory lock makes concurrent runners (two processes
//! starting at once) take turns: the second finds everything applied and
//! does nothing.

use sha2::{Digest, Sha256};
use tokio_postgres::{Client, Transaction};

use crate::error::{Error, Result};

/// One migration file, embedded at build time.
pub struct Migration {
    pub version: i32,
    pub name: &'static str,
    pub sql: &'static str,
}

/// The version of the squashed history: a database that recorded it (or
/// whose history ran up to it) is at the baseline the area files start from.
pub const BASELINE_VERSION: i32 = 45;

/// The name a fresh install records for [`BASELINE_VERSION`]. A database
/// migrated through the old history has `0045_last_turn.sql` there instead.
pub const BASELINE_NAME: &str = "baseline";

/// The migrations written since the baseline, in order. Add new files here
/// (and only append); each is also an edit of its area file.
pub const MIGRATIONS: &[Migration] = &[
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
    Migration {
        version: 50,
        name: "0050_step_rows_without_foreign_keys.sql",
        sql: include_str!("../../sql/0050_step_rows_without_foreign_keys.sql"),
    },
    Migration {
        version: 51,
        name: "0051_time_travel.sql",
        sql: include_str!("../../sql/0051_time_travel.sql"),
    },
    Migration {
        version: 52,
        name: "0052_schedules_backlog_config_versions.sql",
        sql: include_str!("../../sql/0052_schedules_backlog_config_versions.sql"),
    },
    Migration {
        version: 53,
        name: "0053_attachment_sources_index.sql",
        sql: include_str!("../../sql/0053_attachment_sources_index.sql"),
    },
    Migration {
        version: 54,
        name: "0054_model_step_config_version.sql",
        sql: include_str!("../../sql/0054_model_step_config_version.sql"),
    },
    Migration {
        version: 57,
        name: "0057_cancelled_commands_may_have_run.sql",
        sql: include_str!("../../sql/0057_cancelled_commands_may_have_run.sql"),
    },
    Migration {
        version: 59,
        name: "0059_step_context_type.sql",
        sql: include_str!("../../sql/0059_step_context_type.sql"),
    },
    Migration {
        version: 60,
        name: "0060_step_context_json.sql",
        sql: include_str!("../../sql/0060_step_context_json.sql"),
    },
];

/// The line of an area file after which its functions and triggers begin.
pub const CODE_MARKER: &str = "-- ==== functions and triggers ====";

/// One area file of the current schema, embedded at build time.
pub struct SchemaFile {
    pub name: &'static str,
    pub sql: &'static str,
}

macro_rules! schema_files {
    ($($name:literal),* $(,)?) => {
        &[$(SchemaFile {
            name: concat!("schema/", $name),
            sql: include_str!(concat!("../../sql/schema/", $name)),
        }),*]
    };
}

/// Every area file, in the order a fresh install applies them: each one's
/// tables refer only to tables of the files before it (and its own).
pub const SCHEMA_FILES: &[SchemaFile] = schema_files![
    "base.sql",
    "agents.sql",
    "api_keys.sql",
    "endpoints.sql",
    "events.sql",
    "leases.sql",
    "steps.sql",
    "content.sql",
    "tools.sql",
    "cancel.sql",
    "usage.sql",
    "machines.sql",
    "webhooks.sql",
    "retention.sql",
    "operations.sql",
    "schedules.sql",
    "time_travel.sql",
];

impl SchemaFile {
    /// The tables, indexes, views and seed rows: everything before
    /// [`CODE_MARKER`].
    pub fn structure(&self) -> &'static str {
        self.sql
            .split_once(CODE_MARKER)
            .map_or(self.sql, |(structure, _)| structure)
    }

    /// The functions and triggers: everything after [`CODE_MARKER`] (empty
    /// for an area of views only).
    pub fn code(&self) -> &'static str {
        self.sql
            .split_once(CODE_MARKER)
            .map_or("", |(_, code)| code)
    }

    pub fn code_checksum(&self) -> String {
        checksum(self.code())
    }
}

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

/// A fingerprint of the whole schema source, area files and migrations
/// (test templates are keyed by it).
pub fn fingerprint() -> String {
    let mut hasher = Sha256::new();
    let files = SCHEMA_FILES
        .iter()
        .map(|f| (f.name, f.sql))
        .chain(MIGRATIONS.iter().map(|m| (m.name, m.sql)));
    for (name, sql) in files {
        hasher.update(name.as_bytes());
        hasher.update(sql.as_bytes());
    }
    hex::encode(&hasher.finalize()[..8])
}

/// Bring the database to the current schema: a fresh one gets the area
/// files; an existing one the migrations not yet applied, then the code if
/// any changed. Returns the names applied by this call (empty when the
/// schema was already current).
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

/// The runner's own bookkeeping, the same on every install.
const BOOKKEEPING: &str = "SET client_min_messages = warning;
     CREATE SCHEMA IF NOT EXISTS holdfast;
     CREATE TABLE IF NOT EXISTS holdfast.schema_migrations (
         version    integer PRIMARY KEY,
         name       text NOT NULL,
         checksum   text NOT NULL,
         applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
     );
     CREATE TABLE IF NOT EXISTS holdfast.schema_functions (
         name       text PRIMARY KEY,
         checksum   text NOT NULL,
         applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
     );
     RESET client_min_messages;";

async fn apply_pending(client: &mut Client) -> Result<Vec<&'static str>> {
    client.batch_execute(BOOKKEEPING).await?;
    let recorded: Vec<(i32, String, String)> = client
        .query(
            "SELECT version, name, checksum FROM holdfast.schema_migrations ORDER BY version",
            &[],
        )
        .await?
        .iter()
        .map(|r| (r.get("version"), r.get("name"), r.get("checksum")))
        .collect();
    if recorded.is_empty() {
        return install(client).await;
    }
    check_baseline(&recorded)?;
    let mut applied = Vec::new();
    for migration in unapplied(MIGRATIONS, &recorded)? {
        let checksum = migration.checksum();
        let tx = client.transaction().await?;
        tx.batch_execute(migration.sql)
            .await
            .map_err(|e| failed(migration.name, &e))?;
        record_migration(&tx, migration.version, migration.name, &checksum).await?;
        tx.commit().await?;
        tracing::info!(migration = migration.name, "applied migration");
        applied.push(migration.name);
    }
    applied.extend(apply_code(client).await?);
    Ok(applied)
}

/// The migrations not yet recorded, in order; an error when a recorded one's
/// text changed since (migrations are forward-only).
fn unapplied<'a>(
    migrations: &'a [Migration],
    recorded: &[(i32, String, String)],
) -> Result<Vec<&'a Migration>> {
    let mut pending = Vec::new();
    for migration in migrations {
        let checksum = migration.checksum();
        match recorded.iter().find(|(v, _, _)| *v == migration.version) {
            Some((_, _, was)) if *was != checksum => {
                return Err(Error::Migration(format!(
                    "{} was changed after it was applied (recorded checksum {}, file {}); \
                     migrations are forward-only: add a new migration instead",
                    migration.name, was, checksum
                )));
            }
            Some(_) => {}
            None => pending.push(migration),
        }
    }
    Ok(pending)
}

/// A database that recorded migrations must have reached the baseline:
/// the migrations before it are no longer shipped, so one that stopped
/// partway cannot be finished by this version.
fn check_baseline(recorded: &[(i32, String, String)]) -> Result<()> {
    if recorded.iter().any(|(v, _, _)| *v == BASELINE_VERSION) {
        return Ok(());
    }
    let (version, name, _) = recorded.last().expect("checked non-empty");
    Err(Error::Migration(format!(
        "this database stopped partway through Holdfast 0.1.0's migrations (the last one \
         applied is {name}, version {version}, and they run to {BASELINE_VERSION:04}); \
         this version starts from where they end. Run `holdfast migrate` with Holdfast \
         0.1.0 first to finish them, then run this version again"
    )))
}

/// A fresh install: every area file, whole and in order, in one
/// transaction; the baseline and every migration recorded as applied (the
/// area files hold what they do), and the code's checksums.
async fn install(client: &mut Client) -> Result<Vec<&'static str>> {
    let tx = client.transaction().await?;
    // Bodies may refer to functions and tables of later files.
    tx.batch_execute("SET LOCAL check_function_bodies = off")
        .await?;
    for file in SCHEMA_FILES {
        tx.batch_execute(file.sql)
            .await
            .map_err(|e| failed(file.name, &e))?;
    }
    // The weekly event partitions from this week to two weeks ahead, as
    // maintenance keeps creating them (retention.sql): until then every
    // event would go to the default partition.
    tx.batch_execute(
        "SELECT holdfast.ensure_event_partitions(holdfast.now(), holdfast.now() + interval '14 days')",
    )
    .await
    .map_err(|e| failed("the first event partitions", &e))?;
    record_migration(&tx, BASELINE_VERSION, BASELINE_NAME, "").await?;
    for migration in MIGRATIONS {
        record_migration(
            &tx,
            migration.version,
            migration.name,
            &migration.checksum(),
        )
        .await?;
    }
    record_code(&tx).await?;
    tx.commit().await?;
    let names: Vec<&'static str> = SCHEMA_FILES.iter().map(|f| f.name).collect();
    tracing::info!(files = ?names, "installed the schema");
    Ok(names)
}

async fn record_migration(
    tx: &Transaction<'_>,
    version: i32,
    name: &str,
    checksum: &str,
) -> Result<()> {
    tx.execute(
        "INSERT INTO holdfast.schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
        &[&version, &name, &checksum],
    )
    .await?;
    Ok(())
}

/// Record each area's code checksum, forgetting names no longer shipped.
async fn record_code(tx: &Transaction<'_>) -> Result<()> {
    let names: Vec<&str> = SCHEMA_FILES.iter().map(|f| f.name).collect();
    tx.execute(
        "DELETE FROM holdfast.schema_functions WHERE name <> ALL($1)",
        &[&names],
    )
    .await?;
    for file in SCHEMA_FILES {
        tx.execute(
            "INSERT INTO holdfast.schema_functions (name, checksum) VALUES ($1, $2)
             ON CONFLICT (name) DO UPDATE
                SET checksum = EXCLUDED.checksum, applied_at = clock_timestamp()",
            &[&file.name, &file.code_checksum()],
        )
        .await?;
    }
    Ok(())
}

fn failed(name: &str, e: &tokio_postgres::Error) -> Error {
    Error::Migration(format!(
        "{name} failed: {}",
        e.as_db_error()
            .map_or(e.to_string(), |d| d.message().to_owned())
    ))
}

/// Re-apply every area's code when any differs from what was recorded: all
/// of it, in one transaction, so the database never runs a mix of old and
/// new definitions. Triggers are dropped first and created by the files, so
/// a trigger removed from its file is gone; functions the files did not
/// (re)define in this transaction are dropped, so a removed function or a
/// changed signature leaves nothing behind. `check_function_bodies = off`
/// lets a function refer to one defined later in the set.
async fn apply_code(client: &mut Client) -> Result<Vec<&'static str>> {
    let recorded = client
        .query("SELECT name, checksum FROM holdfast.schema_functions", &[])
        .await?;
    let changed: Vec<&'static str> = SCHEMA_FILES
        .iter()
        .filter(|file| {
            !recorded.iter().any(|r| {
                r.get::<_, &str>("name") == file.name
                    && r.get::<_, &str>("checksum") == file.code_checksum()
            })
        })
        .map(|file| file.name)
        .collect();
    if changed.is_empty() {
        return Ok(Vec::new());
    }
    let tx = client.transaction().await?;
    tx.batch_execute(
        "SET LOCAL check_function_bodies = off;
         SET LOCAL client_min_messages = warning;
         DO $$
         DECLARE t record;
         BEGIN
             FOR t IN SELECT tg.tgname, tg.tgrelid::regclass AS rel
                        FROM pg_trigger tg JOIN pg_class c ON c.oid = tg.tgrelid
                       WHERE c.relnamespace = 'holdfast'::regnamespace
                         AND NOT tg.tgisinternal AND tg.tgparentid = 0
             LOOP
                 EXECUTE format('DROP TRIGGER %I ON %s', t.tgname, t.rel);
             END LOOP;
         END $$;",
    )
    .await?;
    for file in SCHEMA_FILES {
        tx.batch_execute(file.code())
            .await
            .map_err(|e| failed(file.name, &e))?;
    }
    // CREATE OR REPLACE writes a new catalog row, so a function the files
    // defined carries this transaction's id; any other is stale.
    let stale: Vec<String> = tx
        .query(
            "SELECT p.oid::regprocedure::text FROM pg_proc p
              WHERE p.pronamespace = 'holdfast'::regnamespace
                AND p.xmin <> xid(pg_current_xact_id())
              ORDER BY 1",
            &[],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    for function in &stale {
        tx.batch_execute(&format!("DROP FUNCTION {function}"))
            .await
            .map_err(|e| failed(function, &e))?;
    }
    record_code(&tx).await?;
    tx.commit().await?;
    tracing::info!(files = ?changed, dropped = ?stale, "applied the schema's functions and triggers");
    Ok(changed)
}

/// What [`migrate`] would apply, applying nothing: every area file on a
/// database never migrated; else the migrations not yet recorded, then the
/// areas whose code differs from what was recorded. For the commands that
/// need the current schema but leave changing it to `holdfast migrate`.
pub async fn pending(client: &Client) -> Result<Vec<&'static str>> {
    let tables = client
        .query_one(
            "SELECT to_regclass('holdfast.schema_migrations') IS NOT NULL AS migrations,
                    to_regclass('holdfast.schema_functions') IS NOT NULL AS functions",
            &[],
        )
        .await?;
    let applied: Vec<i32> = match tables.get("migrations") {
        true => client
            .query("SELECT version FROM holdfast.schema_migrations", &[])
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect(),
        false => Vec::new(),
    };
    if applied.is_empty() {
        return Ok(SCHEMA_FILES.iter().map(|f| f.name).collect());
    }
    let code: Vec<(String, String)> = match tables.get("functions") {
        true => client
            .query("SELECT name, checksum FROM holdfast.schema_functions", &[])
            .await?
            .iter()
            .map(|r| (r.get("name"), r.get("checksum")))
            .collect(),
        false => Vec::new(),
    };
    let migrations = MIGRATIONS
        .iter()
        .filter(|m| !applied.contains(&m.version))
        .map(|m| m.name);
    let areas = SCHEMA_FILES
        .iter()
        .filter(|f| {
            !code
                .iter()
                .any(|(name, checksum)| name == f.name && *checksum == f.code_checksum())
        })
        .map(|f| f.name);
    Ok(migrations.chain(areas).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_increasing_after_the_baseline_and_match_file_names() {
        let mut last = BASELINE_VERSION;
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

    #[test]
    fn a_recorded_migration_whose_text_changed_is_refused_and_the_rest_are_pending() {
        let migrations = [
            Migration {
                version: 46,
                name: "0046_a.sql",
                sql: "SELECT 1",
            },
            Migration {
                version: 47,
                name: "0047_b.sql",
                sql: "SELECT 2",
            },
        ];
        let recorded = |checksum: String| vec![(46, "0046_a.sql".to_owned(), checksum)];
        let pending = unapplied(&migrations, &recorded(migrations[0].checksum())).unwrap();
        assert_eq!(
            pending.iter().map(|m| m.name).collect::<Vec<_>>(),
            ["0047_b.sql"]
        );
        let refused = unapplied(&migrations, &recorded("tampered".to_owned()))
            .err()
            .expect("a changed migration is refused")
            .to_string();
        assert!(
            refused.contains("0046_a.sql was changed after it was applied"),
            "{refused}"
        );
    }

    #[test]
    fn every_area_file_has_its_code_after_the_marker_once() {
        for file in SCHEMA_FILES {
            assert!(
                file.sql.matches(CODE_MARKER).count() <= 1,
                "{} has more than one {CODE_MARKER:?}",
                file.name
            );
            let structure = file.structure();
            for word in [
                "CREATE OR REPLACE FUNCTION",
                "CREATE FUNCTION",
                "CREATE TRIGGER",
            ] {
                assert!(
                    !structure.contains(word),
                    "{}: {word} before {CODE_MARKER:?} would not be re-applied",
                    file.name
                );
            }
            for word in [
                "CREATE TABLE",
                "CREATE INDEX",
                "CREATE UNIQUE INDEX",
                "CREATE VIEW",
                "CREATE TYPE",
                "ALTER TABLE",
                "INSERT",
            ] {
                assert!(
                    !file.code().lines().any(|line| line.starts_with(word)),
                    "{}: {word} after {CODE_MARKER:?} would be applied again with the code",
                    file.name
                );
            }
        }
    }
}
