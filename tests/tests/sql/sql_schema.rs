//! The schema source itself: the area files are the current schema (a
//! fresh install, an upgraded Holdfast 0.1.0 and the checked-in dump agree),
//! each function is defined once in them, changed code is re-applied and
//! removed code dropped, an install stopped partway through the old history
//! is refused; every event type the SQL emits is a known event type; each
//! text enum of the domain has exactly the strings its column's CHECK allows.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use holdfast_db::migrate::{self, MIGRATIONS, SCHEMA_FILES};
use holdfast_tests::TestDb;
use holdfast_wire::config::Provider;
use holdfast_wire::domain::{
    AgentState, ApprovalStatus, CommandResultState, InputMode, QuestionStatus, ToolCallStatus,
    ToolKind, TurnOutcome, WebhookDeliveryStatus,
};
use strum::VariantArray;
use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

/// `CREATE [OR REPLACE] FUNCTION holdfast.NAME(` at the start of a line.
fn defined_functions(sql: &str) -> Vec<String> {
    sql.lines()
        .filter_map(|line| {
            let rest = line
                .strip_prefix("CREATE OR REPLACE FUNCTION holdfast.")
                .or_else(|| line.strip_prefix("CREATE FUNCTION holdfast."))?;
            Some(rest.split('(').next()?.to_owned())
        })
        .collect()
}

fn repo_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(relative)
}

/// The checked-in dump of a fresh install's schema.
const SCHEMA_DUMP: &str = "sql/schema.dump.sql";

/// `pg_dump --schema-only` of the holdfast schema, made comparable: no
/// owners or grants, no weekly event partitions (which ones exist depends
/// on the day), and without the lines that change from run to run or with
/// the dumping client's version.
fn schema_dump(db: &TestDb) -> String {
    let bin = holdfast_db::cluster::find_bin_dir().expect("PostgreSQL binaries");
    let output = std::process::Command::new(bin.join("pg_dump"))
        .args([
            "--schema-only",
            "--schema=holdfast",
            "--exclude-table=holdfast.events_w*",
            "--no-owner",
            "--no-privileges",
            "--dbname",
        ])
        .arg(db.url())
        .output()
        .expect("run pg_dump");
    assert!(
        output.status.success(),
        "pg_dump failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let dump = String::from_utf8(output.stdout).expect("pg_dump writes UTF-8");
    dump.lines()
        .filter(|line| {
            !line.starts_with("\\restrict")
                && !line.starts_with("\\unrestrict")
                && !line.starts_with("-- Dumped from")
                && !line.starts_with("-- Dumped by")
        })
        .map(|line| format!("{line}\n"))
        .collect()
}

/// The first lines where two dumps differ, with a little context.
fn first_difference(expected: &str, actual: &str) -> String {
    let (expected, actual): (Vec<&str>, Vec<&str>) =
        (expected.lines().collect(), actual.lines().collect());
    let at = expected
        .iter()
        .zip(&actual)
        .position(|(a, b)| a != b)
        .unwrap_or(expected.len().min(actual.len()));
    let from = at.saturating_sub(3);
    format!(
        "first difference at line {}:\n--- expected\n{}\n--- actual\n{}",
        at + 1,
        expected[from..(at + 8).min(expected.len())].join("\n"),
        actual[from..(at + 8).min(actual.len())].join("\n")
    )
}

/// A fresh install is exactly the checked-in dump. After changing the
/// schema, regenerate the dump with
/// `HOLDFAST_WRITE_SCHEMA_DUMP=1 cargo test -p holdfast-tests --test sql a_fresh_install`
/// (and read its diff: it is the change a DBA will see).
#[tokio::test]
async fn a_fresh_install_is_the_checked_in_schema_dump() {
    let db = TestDb::new().await;
    let fresh = schema_dump(&db);
    let path = repo_path(SCHEMA_DUMP);
    if std::env::var_os("HOLDFAST_WRITE_SCHEMA_DUMP").is_some() {
        std::fs::write(&path, &fresh).expect("write the schema dump");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == fresh,
        "{SCHEMA_DUMP} is not a fresh install's schema (regenerate it: see this test's doc); {}",
        first_difference(&committed, &fresh)
    );
}

/// An install of Holdfast 0.1.0 (its schema as `sql/releases/0.1.0.sql`
/// keeps it), upgraded by this runner, is exactly a fresh install: the
/// area files and the migrations since the baseline agree, and the upgrade
/// keeps its data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgraded_0_1_0_install_is_a_fresh_install() {
    let db = TestDb::empty().await;
    let client = db.connect().await;
    let release = std::fs::read_to_string(repo_path("sql/releases/0.1.0.sql")).unwrap();
    client.batch_execute(&release).await.unwrap();
    // Reconnect: the dump sets this session's search_path to nothing.
    drop(client);
    let mut client = db.connect().await;
    client
        .batch_execute(
            "INSERT INTO holdfast.projects (id, name) VALUES ('0190b6a0-0000-7000-8000-000000000001', 'kept');
             INSERT INTO holdfast.agents (id, project_id, config)
             VALUES ('0190b6a0-0000-7000-8000-000000000002', '0190b6a0-0000-7000-8000-000000000001',
                     '{\"model\": {\"provider\": \"anthropic\", \"name\": \"m\"}}');",
        )
        .await
        .unwrap();
    let applied = migrate::migrate(&mut client).await.unwrap();
    let expected: Vec<&str> = MIGRATIONS
        .iter()
        .map(|m| m.name)
        .chain(SCHEMA_FILES.iter().map(|f| f.name))
        .collect();
    assert_eq!(
        applied, expected,
        "the migrations since the baseline, then every area's code"
    );
    assert!(
        migrate::migrate(&mut client).await.unwrap().is_empty(),
        "a second run finds the upgraded database current"
    );
    let kept: i64 = client
        .query_one(
            "SELECT count(*) FROM holdfast.agents a JOIN holdfast.projects p ON p.id = a.project_id
              WHERE p.name = 'kept'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(kept, 1, "the upgrade kept the data");

    let fresh = TestDb::new().await;
    let (expected, upgraded) = (schema_dump(&fresh), schema_dump(&db));
    assert!(
        expected == upgraded,
        "an upgraded 0.1.0 install differs from a fresh install; {}",
        first_difference(&expected, &upgraded)
    );
}

/// An install that stopped partway through the migrations squashed into
/// the baseline cannot be finished by this runner: it refuses, changes
/// nothing, and says what to do.
#[tokio::test]
async fn an_install_stopped_partway_through_the_old_history_is_refused() {
    let db = TestDb::empty().await;
    let mut client = db.connect().await;
    client
        .batch_execute(
            "CREATE SCHEMA holdfast;
             CREATE TABLE holdfast.schema_migrations (
                 version integer PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,
                 applied_at timestamptz NOT NULL DEFAULT clock_timestamp());
             INSERT INTO holdfast.schema_migrations (version, name, checksum)
             VALUES (1, '0001_core.sql', 'x'), (32, '0032_partitions.sql', 'y');",
        )
        .await
        .unwrap();
    let refused = migrate::migrate(&mut client).await.unwrap_err().to_string();
    for needle in [
        "stopped partway",
        "0032_partitions.sql",
        "Holdfast 0.1.0",
        "holdfast migrate",
    ] {
        assert!(refused.contains(needle), "{needle:?} in: {refused}");
    }
    let tables: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_class WHERE relnamespace = 'holdfast'::regnamespace
                AND relkind IN ('r', 'p')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(tables, 2, "only the runner's bookkeeping tables");
}

#[tokio::test]
async fn every_function_is_defined_once_in_the_area_files() {
    let mut files_by_function: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for file in SCHEMA_FILES {
        for name in defined_functions(file.code()) {
            files_by_function.entry(name).or_default().push(file.name);
        }
    }
    let twice: Vec<_> = files_by_function
        .iter()
        .filter(|(_, files)| files.len() > 1)
        .collect();
    assert!(twice.is_empty(), "defined more than once: {twice:?}");

    let db = TestDb::new().await;
    let client = db.connect().await;
    let signatures: Vec<(String, String)> = client
        .query(
            "SELECT p.proname::text, p.oid::regprocedure::text FROM pg_proc p
               JOIN pg_namespace n ON n.oid = p.pronamespace
              WHERE n.nspname = 'holdfast'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let in_database: BTreeSet<String> = signatures.iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(
        in_database.len(),
        signatures.len(),
        "overloaded functions: {signatures:?}"
    );
    let in_files: BTreeSet<String> = files_by_function.keys().cloned().collect();
    let only_in_database: Vec<_> = in_database.difference(&in_files).collect();
    let only_in_files: Vec<_> = in_files.difference(&in_database).collect();
    assert!(
        only_in_database.is_empty() && only_in_files.is_empty(),
        "area files and database disagree: only in the database {only_in_database:?}, \
         only in the files {only_in_files:?}"
    );
}

#[test]
fn docs_sql_indexes_every_function_under_its_file() {
    let docs = include_str!("../../../docs/sql.md");
    for file in SCHEMA_FILES {
        let defined: BTreeSet<String> = defined_functions(file.code()).into_iter().collect();
        let row = docs
            .lines()
            .find(|l| l.starts_with(&format!("| `{}` |", file.name)))
            .unwrap_or_else(|| panic!("docs/sql.md has no row for {}", file.name));
        let listed: BTreeSet<&str> = row
            .split(" | ")
            .nth(2)
            .unwrap_or_default()
            .split('`')
            .skip(1)
            .step_by(2)
            .collect();
        let defined: BTreeSet<&str> = defined.iter().map(String::as_str).collect();
        assert_eq!(listed, defined, "docs/sql.md's row for {}", file.name);
    }
}

/// Functions and triggers live in the area files' code, which is
/// re-applied as a whole; a migration holds structure and data only.
#[test]
fn migrations_define_no_functions_or_triggers() {
    for migration in MIGRATIONS {
        let functions = defined_functions(migration.sql);
        let triggers = migration
            .sql
            .lines()
            .any(|line| line.starts_with("CREATE TRIGGER"));
        assert!(
            functions.is_empty() && !triggers,
            "{} defines functions {functions:?} or triggers: put them in their area file \
             under sql/schema/, after its code marker",
            migration.name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changed_code_is_reapplied_and_unchanged_code_is_not() {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    assert!(
        migrate::migrate(&mut client).await.unwrap().is_empty(),
        "a migrated database is current"
    );

    // Simulate a database whose steps code predates this build's: an older
    // recorded checksum and an older body.
    client
        .batch_execute(
            "UPDATE holdfast.schema_functions SET checksum = 'older'
              WHERE name = 'schema/steps.sql';
             CREATE OR REPLACE FUNCTION holdfast.interrupted_output() RETURNS jsonb
             LANGUAGE sql IMMUTABLE AS $$ SELECT '\"stale\"'::jsonb $$;",
        )
        .await
        .unwrap();
    let applied = migrate::migrate(&mut client).await.unwrap();
    assert_eq!(applied, vec!["schema/steps.sql"]);
    let output: serde_json::Value = client
        .query_one("SELECT holdfast.interrupted_output()", &[])
        .await
        .unwrap()
        .get(0);
    assert_ne!(
        output,
        serde_json::json!("stale"),
        "the current body is back"
    );
    assert!(migrate::migrate(&mut client).await.unwrap().is_empty());
}

/// A function or trigger that is no longer in the area files (removed, or
/// a function's old signature) is dropped when the code is re-applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_removed_from_the_area_files_is_dropped() {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    client
        .batch_execute(
            "CREATE FUNCTION holdfast.removed_function() RETURNS trigger
             LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
             CREATE TRIGGER _999_removed AFTER INSERT ON holdfast.agents
                 FOR EACH ROW EXECUTE FUNCTION holdfast.removed_function();
             CREATE FUNCTION holdfast.interrupted_output(old_argument int) RETURNS jsonb
             LANGUAGE sql IMMUTABLE AS $$ SELECT 'null'::jsonb $$;
             UPDATE holdfast.schema_functions SET checksum = 'older'
              WHERE name = 'schema/base.sql';",
        )
        .await
        .unwrap();
    assert_eq!(
        migrate::migrate(&mut client).await.unwrap(),
        vec!["schema/base.sql"]
    );
    let left: Vec<String> = client
        .query(
            "SELECT p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')'
               FROM pg_proc p
              WHERE p.pronamespace = 'holdfast'::regnamespace
                AND p.proname IN ('removed_function', 'interrupted_output')
             UNION ALL
             SELECT tgname::text FROM pg_trigger WHERE tgname = '_999_removed'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(left, ["interrupted_output()"]);
}

#[tokio::test]
async fn every_event_type_the_sql_emits_is_in_event_types() {
    // Event types are the dotted literals of the area files' code, less the
    // field names (passed to holdfast.raise, or returned as a check's
    // `(field, message)` row) and the holdfast.* settings.
    let mut emitted = BTreeSet::new();
    for file in SCHEMA_FILES {
        for line in file
            .code()
            .lines()
            .filter(|l| !l.contains("holdfast.raise(") && !l.contains("RETURN QUERY SELECT '"))
        {
            for literal in line.split('\'').skip(1).step_by(2) {
                let mut parts = literal.split('.');
                let dotted_word = matches!(
                    (parts.next(), parts.next(), parts.next()),
                    (Some(a), Some(b), None)
                        if !a.is_empty() && !b.is_empty()
                            && literal.chars().all(|c| c.is_ascii_lowercase() || c == '_' || c == '.')
                );
                if dotted_word && !literal.starts_with("holdfast.") {
                    emitted.insert(literal.to_owned());
                }
            }
        }
    }
    assert!(emitted.contains("turn.completed"), "found {emitted:?}");

    let db = TestDb::new().await;
    let client = db.connect().await;
    let known: BTreeSet<String> = client
        .query_one("SELECT holdfast.event_types()", &[])
        .await
        .unwrap()
        .get::<_, Vec<String>>(0)
        .into_iter()
        .collect();
    let unknown: Vec<_> = emitted.difference(&known).collect();
    assert!(
        unknown.is_empty(),
        "emitted but missing from event_types() (webhooks can't subscribe): {unknown:?}"
    );
    // So an endpoint may subscribe to each of them.
    let all: serde_json::Value = emitted.iter().cloned().collect();
    client
        .execute("SELECT holdfast.validate_webhook_events($1)", &[&all])
        .await
        .unwrap();
}

/// The strings the `column IN (...)` CHECK of `holdfast.table` allows, as
/// the migrated database has it (Postgres shows it as
/// `(column = ANY (ARRAY['a'::text, ...]))`).
async fn check_strings(client: &Client, table: &str, column: &str) -> BTreeSet<String> {
    let definitions: Vec<String> = client
        .query(
            "SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c
               JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]
              WHERE c.conrelid = ('holdfast.' || $1)::regclass AND c.contype = 'c'
                AND cardinality(c.conkey) = 1 AND a.attname = $2",
            &[&table, &column],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .filter(|d: &String| d.contains("ANY (ARRAY["))
        .collect();
    assert_eq!(
        definitions.len(),
        1,
        "one IN list on {table}.{column}: {definitions:?}"
    );
    // The quoted literals are every other piece between single quotes.
    definitions[0]
        .split('\'')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

fn strings_of<T: VariantArray + Copy + Into<&'static str>>() -> BTreeSet<String> {
    T::VARIANTS.iter().map(|&v| v.into().to_owned()).collect()
}

/// The providers' vendors (`Provider::vendor`), by name.
fn vendors() -> BTreeSet<String> {
    Provider::VARIANTS
        .iter()
        .map(|p| <&str>::from(p.vendor()).to_owned())
        .collect()
}

#[tokio::test]
async fn each_text_enum_has_the_strings_of_its_column_check() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let columns = [
        ("agents", "state", strings_of::<AgentState>()),
        ("agents", "last_turn_outcome", strings_of::<TurnOutcome>()),
        ("inputs", "mode", strings_of::<InputMode>()),
        ("tool_calls", "kind", strings_of::<ToolKind>()),
        ("tool_calls", "status", strings_of::<ToolCallStatus>()),
        ("approvals", "status", strings_of::<ApprovalStatus>()),
        ("questions", "status", strings_of::<QuestionStatus>()),
        (
            "webhook_deliveries",
            "status",
            strings_of::<WebhookDeliveryStatus>(),
        ),
        (
            "commands",
            "result_state",
            strings_of::<CommandResultState>(),
        ),
        // Endpoints and project keys are per vendor: both OpenAI APIs use
        // `openai`'s.
        ("model_endpoints", "kind", vendors()),
        ("project_provider_keys", "provider", vendors()),
    ];
    for (table, column, expected) in columns {
        assert_eq!(
            check_strings(&client, table, column).await,
            expected,
            "{table}.{column}"
        );
    }
}

/// The two unique keys most rows leave NULL (a subagent's parent tool call,
/// a message's input) are partial: they still refuse a second row
/// with the same value, and their indexes hold only the rows that have one
/// (every agent-row rewrite used to add a NULL entry).
#[tokio::test]
async fn a_unique_key_most_rows_leave_null_refuses_duplicates_and_indexes_only_set_values() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, parent) = holdfast_tests::project_and_agent(&client).await;
    let children = [
        holdfast_tests::new_agent(&client, project).await,
        holdfast_tests::new_agent(&client, project).await,
    ];
    let tool_call: uuid::Uuid = client
        .query_one(
            "WITH step AS (
                 INSERT INTO holdfast.steps (agent_id, step_seq, kind, epoch)
                 VALUES ($1, 1, 'model', 1) RETURNING id)
             INSERT INTO holdfast.tool_calls (agent_id, step_id, position, provider_id, name, input, kind, status)
             SELECT $1, step.id, 0, 'toolu_1', 'spawn_subagent', '{}', 'internal', 'pending' FROM step
             RETURNING id",
            &[&parent],
        )
        .await
        .unwrap()
        .get(0);
    let set_parent = "UPDATE holdfast.agents SET parent_tool_call_id = $2 WHERE id = $1";
    client
        .execute(set_parent, &[&children[0], &tool_call])
        .await
        .unwrap();
    assert_unique_violation(&client, set_parent, &[&children[1], &tool_call]).await;

    let input: uuid::Uuid = client
        .query_one(
            "SELECT holdfast.create_input($1, '[{\"type\": \"text\", \"text\": \"hi\"}]')",
            &[&parent],
        )
        .await
        .unwrap()
        .get(0);
    let add_message = "INSERT INTO holdfast.messages (agent_id, seq, role, content, input_id)
                       VALUES ($1, $2, 'user', '[]', $3)";
    for (seq, input_id) in [(1i64, None), (2, None), (3, Some(input))] {
        client
            .execute(add_message, &[&parent, &seq, &input_id])
            .await
            .unwrap();
    }
    assert_unique_violation(&client, add_message, &[&parent, &4i64, &Some(input)]).await;

    // ANALYZE counts each partial index's rows from its sample, which for
    // tables this small is every row: 1 set value each, out of 3 agents
    // and 3 messages.
    client
        .batch_execute("ANALYZE holdfast.agents; ANALYZE holdfast.messages")
        .await
        .unwrap();
    let entries = client
        .query(
            "SELECT c.relname::text, c.reltuples::bigint, t.reltuples::bigint
               FROM pg_index i
               JOIN pg_class c ON c.oid = i.indexrelid
               JOIN pg_class t ON t.oid = i.indrelid
              WHERE i.indexrelid IN ('holdfast.agents_parent_tool_call_idx'::regclass,
                                     'holdfast.messages_input_idx'::regclass)
                AND i.indisunique
              ORDER BY 1",
            &[],
        )
        .await
        .unwrap();
    let entries: Vec<(String, i64, i64)> = entries
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect();
    assert_eq!(
        entries,
        [
            ("agents_parent_tool_call_idx".to_string(), 1, 3),
            ("messages_input_idx".to_string(), 1, 3),
        ]
    );
}

async fn assert_unique_violation(
    client: &Client,
    statement: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) {
    let refused = client.execute(statement, params).await.unwrap_err();
    assert_eq!(
        refused.code(),
        Some(&SqlState::UNIQUE_VIOLATION),
        "{statement}: {refused}"
    );
}
