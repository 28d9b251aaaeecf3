//! The bench's private Postgres: one cluster per bench run (durable: fsync,
//! synchronous_commit and full_page_writes on, unless `--unsafe-no-fsync`;
//! the same helper the tests and `holdfast up` use), a fresh migrated
//! database per scenario, and the same-run baselines taken on it (pgbench,
//! a plain Postgres queue, raw NOTIFY round trips).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use holdfast_db::cluster::{ClusterOptions, LocalCluster, SUPERUSER};
use holdfast_db::connect::{self, ConnectConfig};
use serde_json::{json, Value};
use tokio::sync::OnceCell;
use tokio_postgres::Client;

use crate::processes::{cpu_count, machine_busy_ticks, ticks_per_second};
use crate::stats::{round3, Samples};

/// Room for a worker at concurrency 1,000 (its pool grows to concurrency +
/// 2 connections), 1,000 SSE clients' API, and the driver.
const MAX_CONNECTIONS: u32 = 1500;
const PGBENCH_DB: &str = "pgbench";
const PLAIN_QUEUE_DB: &str = "plain_queue";
const CHECKPOINT_DB: &str = "checkpoint_baseline";
/// The role the bench driver's sessions use where a scenario counts the
/// product's statements apart from the driver's.
pub const DRIVER_ROLE: &str = "holdfast_bench_driver";

pub struct BenchCluster {
    cluster: LocalCluster,
    base_dir: PathBuf,
    /// The pgbench scale the `pgbench` database was initialised with.
    pgbench_scale: OnceCell<u32>,
    /// pg_stat_statements is loaded: each fresh database resets it.
    statement_stats: AtomicBool,
    /// The database the last scenario ran in (its function counts are
    /// read there: pg_stat_user_functions is per database).
    scenario_database: std::sync::Mutex<Option<ConnectConfig>>,
    /// SQL run in each fresh database after the migrations (`--sql`).
    extra_sql: Option<String>,
}

impl BenchCluster {
    /// Create and start a new cluster in `base_dir` (which must not hold
    /// one). `extra_sql` is applied to every scenario database after the
    /// migrations: a candidate fix tried without a migration. `durable`
    /// false runs it with fsync and full_page_writes off (experiments only:
    /// a durability product is measured durable).
    pub async fn start(
        base_dir: &Path,
        extra_sql: Option<String>,
        durable: bool,
    ) -> Result<BenchCluster> {
        if base_dir.exists() {
            bail!(
                "{} exists: remove it, or pick another --dir",
                base_dir.display()
            );
        }
        let dir = base_dir.to_path_buf();
        let cluster = tokio::task::spawn_blocking(move || {
            LocalCluster::start(
                &dir,
                &ClusterOptions {
                    fast_unsafe_fsync_off: !durable,
                    max_connections: MAX_CONNECTIONS,
                },
            )
        })
        .await??;
        Ok(BenchCluster {
            cluster,
            base_dir: base_dir.to_path_buf(),
            pgbench_scale: OnceCell::new(),
            statement_stats: AtomicBool::new(false),
            scenario_database: std::sync::Mutex::new(None),
            extra_sql,
        })
    }

    /// Load pg_stat_statements (restarting the server). It counts the
    /// top-level statements, what a client sends (`throughput` reports
    /// them per step); with `nested` (`--profile`) also the statements
    /// inside the SQL functions, planning time, and calls of every
    /// function (SQL functions included: a LANGUAGE sql function that is
    /// not inlined is parsed and planned per call).
    pub async fn enable_statement_stats(&self, nested: bool) -> Result<()> {
        self.admin()
            .await?
            .batch_execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
            .await?;
        self.cluster.stop()?;
        self.cluster.restart()?;
        let admin = self.admin().await?;
        admin
            .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            .await?;
        // The library's settings exist once it is loaded; one statement
        // each (ALTER SYSTEM refuses a multi-statement implicit transaction).
        let settings: &[&str] = if nested {
            &[
                "pg_stat_statements.track = 'all'",
                "pg_stat_statements.track_planning = on",
                "track_functions = 'all'",
            ]
        } else {
            &["pg_stat_statements.track = 'top'"]
        };
        for setting in settings {
            admin
                .batch_execute(&format!("ALTER SYSTEM SET {setting}"))
                .await?;
        }
        admin.execute("SELECT pg_reload_conf()", &[]).await?;
        self.statement_stats.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Statement counts and times since the last fresh database, and the
    /// `top` statements by time (execution plus planning); the baseline's
    /// (pgbench) and the driver's admin statements left out. Nested statements (inside the SQL functions) are listed
    /// besides the top-level calls that ran them (`toplevel` false): their
    /// time is part of their caller's too.
    pub async fn statement_stats(&self, limit: i64) -> Result<Value> {
        let admin = self.admin().await?;
        let totals = admin
            .query_one(
                "SELECT coalesce(sum(calls) FILTER (WHERE toplevel), 0)::bigint,
                        coalesce(sum(calls) FILTER (WHERE NOT toplevel), 0)::bigint,
                        coalesce(sum(total_exec_time) FILTER (WHERE toplevel), 0),
                        coalesce(sum(total_plan_time), 0)
                   FROM pg_stat_statements
                  WHERE dbid NOT IN (SELECT oid FROM pg_database WHERE datname IN ('pgbench', 'postgres'))",
                &[],
            )
            .await?;
        let top = statement_list(&admin, "total_exec_time + total_plan_time", limit).await?;
        // A statement planned on most of its calls is re-planned per row:
        // a custom plan where a generic one would do.
        let top_planned = statement_list(&admin, "total_plan_time", limit).await?;
        // The statements run most often, nested ones included: each pays an
        // executor start-up however little it does. All of a step's (about
        // thirty), not the top `limit`.
        let most_called = statement_list(&admin, "calls", MOST_CALLED).await?;
        let functions = match self.scenario_database() {
            Some(config) => function_stats(&config, limit).await?,
            None => Value::Null,
        };
        Ok(json!({
            "toplevel_calls": totals.get::<_, i64>(0),
            "nested_calls": totals.get::<_, i64>(1),
            "toplevel_exec_ms": round3(totals.get(2)),
            "plan_ms": round3(totals.get(3)),
            "top": top,
            "top_planned": top_planned,
            "most_called": most_called,
            "functions": functions,
        }))
    }

    fn scenario_database(&self) -> Option<ConnectConfig> {
        self.scenario_database
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Stop the server and delete the cluster's files.
    pub fn destroy(self) -> Result<()> {
        let BenchCluster {
            cluster, base_dir, ..
        } = self;
        cluster.stop()?;
        drop(cluster);
        std::fs::remove_dir_all(&base_dir)
            .with_context(|| format!("removing {}", base_dir.display()))
    }

    /// A libpq key/value URL for child processes; `application_name` tags
    /// their sessions in pg_stat_activity (how the driver sees them ready).
    pub fn url(&self, dbname: &str, application_name: &str) -> String {
        format!(
            "{} application_name={application_name}",
            self.cluster.connection_string(dbname)
        )
    }

    /// A connection config for `dbname` as the bench driver's own role
    /// (created on first use, a superuser like the product's): its
    /// statements count apart from the workers' in pg_stat_statements,
    /// which keys them by role.
    pub async fn driver_config(&self, dbname: &str) -> Result<ConnectConfig> {
        self.admin()
            .await?
            .batch_execute(&format!(
                "DO $$ BEGIN
                     IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{DRIVER_ROLE}') THEN
                         CREATE ROLE {DRIVER_ROLE} LOGIN SUPERUSER;
                     END IF;
                 END $$"
            ))
            .await?;
        Ok(ConnectConfig::parse(&format!(
            "{} user={DRIVER_ROLE}",
            self.cluster.connection_string(dbname)
        ))?)
    }

    pub fn config(&self, dbname: &str) -> Result<ConnectConfig> {
        Ok(ConnectConfig::parse(
            &self.cluster.connection_string(dbname),
        )?)
    }

    pub async fn admin(&self) -> Result<Client> {
        connect_to(&self.config("postgres")?).await
    }

    /// Drop `name` if it exists and create it, empty.
    pub async fn empty_database(&self, name: &str) -> Result<ConnectConfig> {
        self.drop_database(name).await?;
        self.admin()
            .await?
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await?;
        self.config(name)
    }

    /// After the migrations: apply `--sql`, and start the statement counts
    /// afresh (the scenario's statements only, from here on).
    pub async fn prepare_database(&self, config: &ConnectConfig) -> Result<()> {
        if let Some(sql) = &self.extra_sql {
            connect_to(config)
                .await?
                .batch_execute(sql)
                .await
                .context("applying --sql")?;
        }
        if self.statement_stats.load(Ordering::SeqCst) {
            self.admin()
                .await?
                .execute("SELECT pg_stat_statements_reset()", &[])
                .await?;
            connect_to(config)
                .await?
                .execute("SELECT pg_stat_reset()", &[])
                .await?;
            *self
                .scenario_database
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(config.clone());
        }
        Ok(())
    }

    pub async fn drop_database(&self, name: &str) -> Result<()> {
        self.admin()
            .await?
            .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .await?;
        Ok(())
    }

    pub async fn server_version(&self) -> Result<String> {
        let row = self
            .admin()
            .await?
            .query_one("SHOW server_version", &[])
            .await?;
        Ok(row.get(0))
    }

    /// The settings that decide whether a commit is durable, as the server
    /// reports them (every report records them in `params.durability`).
    pub async fn durability(&self) -> Result<Value> {
        let admin = self.admin().await?;
        let mut out = serde_json::Map::new();
        for setting in [
            "fsync",
            "synchronous_commit",
            "full_page_writes",
            "wal_sync_method",
        ] {
            let row = admin.query_one(&format!("SHOW {setting}"), &[]).await?;
            out.insert(setting.to_owned(), Value::String(row.get(0)));
        }
        Ok(Value::Object(out))
    }

    /// The postmaster's pid (first line of `postmaster.pid`): its children
    /// are the backends whose CPU time the throughput scenario adds up.
    pub fn postmaster_pid(&self) -> Option<u32> {
        let text = std::fs::read_to_string(self.cluster.data_dir().join("postmaster.pid")).ok()?;
        text.lines().next()?.trim().parse().ok()
    }

    /// `pgbench -N` (simple-update: one UPDATE, one SELECT, one INSERT per
    /// transaction) on this cluster now. The database is initialised at
    /// `scale` on first use. Returns the tps and the command line.
    pub async fn pgbench(&self, scale: u32, clients: u32, seconds: u32) -> Result<Value> {
        let pgbench = self
            .cluster
            .tool("pgbench")
            .ok_or_else(|| anyhow!("pgbench not found next to the Postgres binaries"))?;
        let initialised = *self
            .pgbench_scale
            .get_or_try_init(|| async {
                self.admin()
                    .await?
                    .batch_execute(&format!("CREATE DATABASE {PGBENCH_DB}"))
                    .await?;
                let scale_arg = scale.to_string();
                self.run_pgbench(&pgbench, &["-i", "-q", "-s", &scale_arg])
                    .await?;
                anyhow::Ok(scale)
            })
            .await?;
        let clients_arg = clients.to_string();
        let threads_arg = clients.clamp(1, 2).to_string();
        let seconds_arg = seconds.to_string();
        let args = [
            "-N",
            "-n",
            "-M",
            "prepared",
            "-c",
            &clients_arg,
            "-j",
            &threads_arg,
            "-T",
            &seconds_arg,
        ];
        let busy_before = machine_busy_ticks()?;
        let started = Instant::now();
        let out = self.run_pgbench(&pgbench, &args).await?;
        let busy_seconds =
            machine_busy_ticks()?.saturating_sub(busy_before) as f64 / ticks_per_second();
        let wall = started.elapsed().as_secs_f64();
        let tps = pgbench_figure(&out, "tps = ")?;
        let transactions = pgbench_figure(&out, "number of transactions actually processed: ")?;
        let cores = cpu_count() as f64;
        Ok(json!({
            "pgbench_tps": round3(tps),
            // What one transaction costs the whole machine (pgbench's
            // clients, Postgres, the kernel), and how busy it was: the
            // measure a step's machine time is held against.
            "pgbench_machine_cpu_ms_per_tx": round3(busy_seconds * 1000.0 / transactions),
            "pgbench_machine_busy_share": round3(busy_seconds / (cores * wall)),
            "pgbench_command": format!("pgbench {} {PGBENCH_DB}", args.join(" ")),
            "pgbench_scale": initialised,
        }))
    }

    /// A plain Postgres queue on this cluster now, the way a minimal queue
    /// (Graphile Worker, PgQueuer) runs a job: one transaction claims it
    /// (`FOR UPDATE SKIP LOCKED` on a partial index, as Holdfast's claim),
    /// one transaction completes it (deletes it, fenced by the claimer).
    /// `clients` sessions drain `jobs` jobs; no Holdfast code runs. Returns
    /// jobs/s over the drain, with the statements used.
    pub async fn plain_queue(&self, jobs: u32, clients: u32) -> Result<Value> {
        self.drop_database(PLAIN_QUEUE_DB).await?;
        self.admin()
            .await?
            .batch_execute(&format!("CREATE DATABASE {PLAIN_QUEUE_DB}"))
            .await?;
        let config = self.config(PLAIN_QUEUE_DB)?;
        let setup = connect_to(&config).await?;
        setup
            .batch_execute(PLAIN_QUEUE_SCHEMA)
            .await
            .context("creating the plain queue")?;
        let jobs = i64::from(jobs);
        setup
            .execute(
                "INSERT INTO jobs (payload) SELECT jsonb_build_object('n', n)
                   FROM generate_series(1, $1::bigint) n",
                &[&jobs],
            )
            .await?;
        setup.batch_execute("VACUUM ANALYZE jobs").await?;

        let started = Instant::now();
        let mut drains = Vec::new();
        for i in 0..clients {
            let config = config.clone();
            drains.push(tokio::spawn(async move {
                let client = connect_to(&config).await?;
                let claim = client.prepare(PLAIN_QUEUE_CLAIM).await?;
                let complete = client.prepare(PLAIN_QUEUE_COMPLETE).await?;
                let worker = format!("plain-{i}");
                let mut done = 0u64;
                while let Some(row) = client.query_opt(&claim, &[&worker]).await? {
                    let id: i64 = row.get(0);
                    if client.execute(&complete, &[&id, &worker]).await? != 1 {
                        bail!("job {id} was not held by {worker} at completion");
                    }
                    done += 1;
                }
                anyhow::Ok(done)
            }));
        }
        let mut done = 0;
        for drain in drains {
            done += drain.await??;
        }
        let seconds = started.elapsed().as_secs_f64();
        if done != jobs as u64 {
            bail!("plain queue: {done} of {jobs} jobs completed");
        }
        self.drop_database(PLAIN_QUEUE_DB).await?;
        Ok(json!({
            "plain_queue_jobs_per_sec": round3(done as f64 / seconds),
            "plain_queue_jobs": jobs,
            "plain_queue_clients": clients,
            "plain_queue_claim": PLAIN_QUEUE_CLAIM,
            "plain_queue_complete": PLAIN_QUEUE_COMPLETE,
        }))
    }

    /// A durable-execution baseline on this cluster now, the shape of an
    /// Absurd or DBOS step: `tasks` tasks of `steps` steps; a task is
    /// claimed in one transaction (`FOR UPDATE SKIP LOCKED`), each of its
    /// steps is one transaction that upserts the step's checkpoint row and
    /// extends the task's claim (one statement, fenced by the claimer), and
    /// one transaction completes it. `clients` sessions drain the tasks; no
    /// Holdfast code runs. Returns checkpointed steps/s over the drain.
    pub async fn checkpoint_baseline(&self, tasks: u32, steps: u32, clients: u32) -> Result<Value> {
        self.drop_database(CHECKPOINT_DB).await?;
        self.admin()
            .await?
            .batch_execute(&format!("CREATE DATABASE {CHECKPOINT_DB}"))
            .await?;
        let config = self.config(CHECKPOINT_DB)?;
        let setup = connect_to(&config).await?;
        setup
            .batch_execute(CHECKPOINT_SCHEMA)
            .await
            .context("creating the checkpoint baseline's tables")?;
        let tasks = i64::from(tasks);
        setup
            .execute(
                "INSERT INTO ck_tasks (params) SELECT jsonb_build_object('n', n)
                   FROM generate_series(1, $1::bigint) n",
                &[&tasks],
            )
            .await?;
        setup.batch_execute("VACUUM ANALYZE ck_tasks").await?;

        let steps = i32::try_from(steps)?;
        let started = Instant::now();
        let mut drains = Vec::new();
        for i in 0..clients {
            let config = config.clone();
            drains.push(tokio::spawn(async move {
                let client = connect_to(&config).await?;
                let claim = client.prepare(CHECKPOINT_CLAIM_TASK).await?;
                let step = client.prepare(CHECKPOINT_STEP).await?;
                let complete = client.prepare(CHECKPOINT_COMPLETE).await?;
                let worker = format!("checkpoint-{i}");
                let mut done = 0u64;
                while let Some(row) = client.query_opt(&claim, &[&worker]).await? {
                    let task: i64 = row.get(0);
                    for n in 0..steps {
                        let state = json!({"step": n, "result": "bench"});
                        if client.execute(&step, &[&task, &worker, &n, &state]).await? != 1 {
                            bail!("task {task} was not held by {worker} at step {n}");
                        }
                        done += 1;
                    }
                    if client.execute(&complete, &[&task, &worker]).await? != 1 {
                        bail!("task {task} was not held by {worker} at completion");
                    }
                }
                anyhow::Ok(done)
            }));
        }
        let mut done = 0;
        for drain in drains {
            done += drain.await??;
        }
        let seconds = started.elapsed().as_secs_f64();
        let expected = tasks as u64 * steps as u64;
        if done != expected {
            bail!("checkpoint baseline: {done} of {expected} steps checkpointed");
        }
        self.drop_database(CHECKPOINT_DB).await?;
        Ok(json!({
            "checkpoint_steps_per_sec": round3(done as f64 / seconds),
            "checkpoint_tasks": tasks,
            "checkpoint_steps_per_task": steps,
            "checkpoint_clients": clients,
            "checkpoint_claim": CHECKPOINT_CLAIM_TASK,
            "checkpoint_step": CHECKPOINT_STEP,
            "checkpoint_complete": CHECKPOINT_COMPLETE,
        }))
    }

    async fn run_pgbench(&self, pgbench: &Path, args: &[&str]) -> Result<String> {
        let out = tokio::process::Command::new(pgbench)
            .args(args)
            .args(["-h", &self.cluster.socket_dir().to_string_lossy()])
            .args(["-p", "5432", "-U", SUPERUSER, PGBENCH_DB])
            .stdin(Stdio::null())
            .output()
            .await
            .context("running pgbench")?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            bail!(
                "pgbench {} failed:\n{stdout}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(stdout)
    }
}

/// The number pgbench prints after `prefix` on a line of its report
/// (`tps = 7830.09 (without …)`; `… processed: 78301`, or `78301/80000`
/// when a count was asked for).
fn pgbench_figure(out: &str, prefix: &str) -> Result<f64> {
    out.lines()
        .find_map(|line| {
            line.strip_prefix(prefix)?
                .split(['/', ' '])
                .next()?
                .parse::<f64>()
                .ok()
        })
        .ok_or_else(|| anyhow!("no {prefix:?} line in pgbench output:\n{out}"))
}

/// The plain queue's table: a job row with the columns a minimal queue
/// keeps (state, run_at, who holds it, attempts) and the partial index its
/// claim reads.
const PLAIN_QUEUE_SCHEMA: &str = "
    CREATE TABLE jobs (
        id        bigserial PRIMARY KEY,
        payload   jsonb NOT NULL,
        state     text NOT NULL DEFAULT 'ready',
        run_at    timestamptz NOT NULL DEFAULT now(),
        locked_by text,
        locked_at timestamptz,
        attempts  integer NOT NULL DEFAULT 0
    );
    CREATE INDEX jobs_ready_idx ON jobs (run_at, id) WHERE state = 'ready';";

const PLAIN_QUEUE_CLAIM: &str = "UPDATE jobs
    SET state = 'running', locked_by = $1, locked_at = now(), attempts = attempts + 1
  WHERE id = (SELECT id FROM jobs WHERE state = 'ready' AND run_at <= now()
               ORDER BY run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
  RETURNING id, payload";

const PLAIN_QUEUE_COMPLETE: &str = "DELETE FROM jobs WHERE id = $1 AND locked_by = $2";

/// The checkpoint baseline's tables: a task row as a durable-execution
/// queue keeps it (state, who holds it and until when, attempts) with the
/// partial index its claim reads, and one checkpoint row per task and step.
const CHECKPOINT_SCHEMA: &str = "
    CREATE TABLE ck_tasks (
        id               bigserial PRIMARY KEY,
        params           jsonb NOT NULL,
        state            text NOT NULL DEFAULT 'pending',
        run_at           timestamptz NOT NULL DEFAULT now(),
        claimed_by       text,
        claim_expires_at timestamptz,
        attempts         integer NOT NULL DEFAULT 0,
        completed_at     timestamptz
    );
    CREATE INDEX ck_tasks_pending_idx ON ck_tasks (run_at, id) WHERE state = 'pending';
    CREATE TABLE ck_checkpoints (
        task_id    bigint NOT NULL REFERENCES ck_tasks (id),
        step       integer NOT NULL,
        state      jsonb NOT NULL,
        updated_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (task_id, step)
    );";

const CHECKPOINT_CLAIM_TASK: &str = "UPDATE ck_tasks
    SET state = 'running', claimed_by = $1, claim_expires_at = now() + interval '30 seconds',
        attempts = attempts + 1
  WHERE id = (SELECT id FROM ck_tasks WHERE state = 'pending' AND run_at <= now()
               ORDER BY run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
  RETURNING id, params";

/// One step: the claim extended (only while this worker holds it) and the
/// checkpoint upserted, in one statement and so one transaction.
const CHECKPOINT_STEP: &str = "WITH held AS (
    UPDATE ck_tasks SET claim_expires_at = now() + interval '30 seconds'
     WHERE id = $1 AND claimed_by = $2 AND state = 'running'
    RETURNING id)
  INSERT INTO ck_checkpoints (task_id, step, state)
  SELECT id, $3, $4 FROM held
  ON CONFLICT (task_id, step) DO UPDATE SET state = EXCLUDED.state, updated_at = now()";

const CHECKPOINT_COMPLETE: &str = "UPDATE ck_tasks
    SET state = 'completed', completed_at = now(), claimed_by = NULL, claim_expires_at = NULL
  WHERE id = $1 AND claimed_by = $2 AND state = 'running'";

/// A new session on `config`, its connection driven by a task.
pub async fn connect_to(config: &ConnectConfig) -> Result<Client> {
    let (client, connection) = config.connect().await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// What Postgres alone gives: `NOTIFY` committed on one session until the
/// notification reaches a LISTENing session of this process, `samples`
/// times. The floor under wake latency and stream fan-out delay.
pub async fn notify_round_trip(config: &ConnectConfig, samples: usize) -> Result<Samples> {
    let mut listener = connect::listen(config, &["bench_ping"]).await?;
    let sender = connect_to(config).await?;
    let mut out = Samples::new();
    for i in 0..samples {
        let payload = i.to_string();
        let started = Instant::now();
        sender
            .execute("SELECT pg_notify('bench_ping', $1)", &[&payload])
            .await?;
        loop {
            let n = tokio::time::timeout(Duration::from_secs(5), listener.notifications.recv())
                .await
                .context("waiting for a NOTIFY")?
                .ok_or_else(|| anyhow!("listen session closed"))?;
            if n.payload() == payload {
                break;
            }
        }
        out.push(started.elapsed());
    }
    Ok(out)
}

/// The next transaction id to be assigned, read at a quiet moment (no
/// writer in flight: the snapshot's xmax is then the next xid). Its
/// difference over a run is the number of transactions that wrote
/// (committed or not): read-only transactions take no xid; NOTIFY takes one.
pub async fn next_xid(client: &Client) -> Result<i64> {
    let row = client
        .query_one(
            "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint",
            &[],
        )
        .await?;
    Ok(row.get(0))
}

/// Transactions ended (committed or rolled back) in the current database
/// so far, from pg_stat_database: read-only ones included. Sessions report
/// theirs when they go idle (at most a second late) or exit.
pub async fn transactions_ended(client: &Client) -> Result<i64> {
    client
        .batch_execute("SELECT pg_stat_clear_snapshot()")
        .await?;
    let row = client
        .query_one(
            "SELECT (xact_commit + xact_rollback)::bigint FROM pg_stat_database
              WHERE datname = current_database()",
            &[],
        )
        .await?;
    Ok(row.get(0))
}

/// Top-level statements run in database `dbname` since the last
/// `pg_stat_statements_reset()`: by the driver's role ([`DRIVER_ROLE`])
/// and by every other role (the product's processes), and the product's
/// statements with the most calls, each `(calls, query)`.
pub struct StatementCounts {
    pub product: i64,
    pub driver: i64,
    pub product_top: Vec<(i64, String)>,
}

/// `client` is a session of the database the extension was created in
/// (the cluster's `postgres`: [`BenchCluster::admin`]).
pub async fn statement_counts(client: &Client, dbname: &str, top: i64) -> Result<StatementCounts> {
    let totals = client
        .query_one(
            "SELECT coalesce(sum(s.calls) FILTER (WHERE r.rolname <> $1), 0)::bigint,
                    coalesce(sum(s.calls) FILTER (WHERE r.rolname = $1), 0)::bigint
               FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid
              WHERE s.toplevel AND s.dbid = (SELECT oid FROM pg_database WHERE datname = $2)",
            &[&DRIVER_ROLE, &dbname],
        )
        .await?;
    let rows = client
        .query(
            "SELECT s.calls, regexp_replace(left(s.query, 160), '\\s+', ' ', 'g')
               FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid
              WHERE s.toplevel AND r.rolname <> $1
                AND s.dbid = (SELECT oid FROM pg_database WHERE datname = $2)
              ORDER BY s.calls DESC
              LIMIT $3",
            &[&DRIVER_ROLE, &dbname, &top],
        )
        .await?;
    Ok(StatementCounts {
        product: totals.get(0),
        driver: totals.get(1),
        product_top: rows.iter().map(|r| (r.get(0), r.get(1))).collect(),
    })
}

/// Samples of what the sessions tagged `application_name LIKE pattern` are
/// doing while in a statement: `wait_event_type: wait_event`, or `CPU` when
/// they wait on nothing (running, or runnable and waiting for a core).
pub struct WaitSampler {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<Result<std::collections::HashMap<String, u64>>>,
}

/// How many of the most-called statements a profile lists.
const MOST_CALLED: i64 = 60;

/// Time between two looks at pg_stat_activity.
const WAIT_SAMPLE_EVERY: Duration = Duration::from_millis(20);

impl WaitSampler {
    pub async fn start(config: &ConnectConfig, pattern: &str) -> Result<WaitSampler> {
        let client = connect_to(config).await?;
        let pattern = pattern.to_owned();
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            let mut counts = std::collections::HashMap::new();
            let mut tick = tokio::time::interval(WAIT_SAMPLE_EVERY);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stopped.changed() => break,
                }
                let rows = client
                    .query(
                        "SELECT coalesce(wait_event_type || ': ' || wait_event, 'CPU')
                           FROM pg_stat_activity
                          WHERE application_name LIKE $1 AND state = 'active'",
                        &[&pattern],
                    )
                    .await?;
                for row in rows {
                    *counts.entry(row.get::<_, String>(0)).or_insert(0) += 1;
                }
            }
            anyhow::Ok(counts)
        });
        Ok(WaitSampler { stop, task })
    }

    /// Stop; the share of samples per wait, largest first.
    pub async fn finish(self) -> Result<Value> {
        let _ = self.stop.send(true);
        let counts = self.task.await??;
        let total: u64 = counts.values().sum();
        let mut counts: Vec<(String, u64)> = counts.into_iter().collect();
        counts.sort_by_key(|c| std::cmp::Reverse(c.1));
        Ok(json!({
            "samples": total,
            "share": counts
                .into_iter()
                .map(|(wait, n)| json!({"wait": wait, "share": round3(n as f64 / total.max(1) as f64)}))
                .collect::<Vec<_>>(),
        }))
    }
}
/// The `limit` statements of the scenario's databases with the most of
/// `order` (an expression over pg_stat_statements' columns).
async fn statement_list(admin: &Client, order: &str, limit: i64) -> Result<Value> {
    let rows = admin
        .query(
            &format!(
                "SELECT toplevel, calls, plans, total_exec_time + total_plan_time AS total_ms,
                        (total_exec_time + total_plan_time) / greatest(calls, 1) AS mean_ms,
                        total_plan_time AS plan_ms, rows,
                        regexp_replace(left(query, 240), '\\s+', ' ', 'g') AS query
                   FROM pg_stat_statements
                  WHERE dbid NOT IN (SELECT oid FROM pg_database WHERE datname IN ('pgbench', 'postgres'))
                  ORDER BY {order} DESC
                  LIMIT $1"
            ),
            &[&limit],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| {
            json!({
                "toplevel": r.get::<_, bool>(0),
                "calls": r.get::<_, i64>(1),
                "plans": r.get::<_, i64>(2),
                "total_ms": round3(r.get(3)),
                "mean_ms": round3(r.get(4)),
                "plan_ms": round3(r.get(5)),
                "rows": r.get::<_, i64>(6),
                "query": r.get::<_, String>(7),
            })
        })
        .collect())
}

/// The `top` functions of the scenario's database by their own time (the
/// statements they ran included, the functions they called not): calls,
/// self and total milliseconds. Counts reach the view when a session's
/// transaction ends or it exits; the scenario's processes have stopped.
async fn function_stats(config: &ConnectConfig, top: i64) -> Result<Value> {
    let rows = connect_to(config)
        .await?
        .query(
            "SELECT schemaname || '.' || funcname, calls, self_time, total_time
               FROM pg_stat_user_functions
              ORDER BY self_time DESC
              LIMIT $1",
            &[&top],
        )
        .await?;
    Ok(Value::Array(
        rows.iter()
            .map(|r| {
                json!({
                    "function": r.get::<_, String>(0),
                    "calls": r.get::<_, i64>(1),
                    "self_ms": round3(r.get(2)),
                    "total_ms": round3(r.get(3)),
                })
            })
            .collect(),
    ))
}
