//! `holdfast-bench`: the load driver. Starts its own Postgres cluster
//! (durable: fsync on, unless `--unsafe-no-fsync`) and the real `holdfast` processes, runs one scenario or all of
//! them, and writes one JSON object per scenario (one per line) to `--json`:
//! `{"scenario", "params", "metrics", "baseline", "postgres_version",
//! "cpu_count", "started_at"}`. Baselines are taken on the same cluster in
//! the same run, because the machines this runs on are shared and noisy:
//! compare ratios and medians, not absolute figures across runs.
//!
//! ```text
//! cargo run --release -p holdfast-bench -- all --json bench.jsonl
//! cargo run -p holdfast-bench -- all --quick --json /tmp/quick.jsonl
//! ```

mod fleet;
mod postgres;
mod processes;
mod scenarios;
mod sse;
mod stats;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, ValueEnum};
use holdfast_db::connect::ConnectConfig;
use serde_json::{json, Value};

use crate::postgres::BenchCluster;
use crate::processes::Holdfast;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Scenario {
    /// A agents × S model steps (custom tool steps between them), W workers at concurrency C, against pgbench -N.
    #[value(name = "throughput")]
    Throughput,
    /// Input committed → the step's model request arrives, with idle workers.
    #[value(name = "wake_latency")]
    WakeLatency,
    /// SIGKILL (and SIGSTOP) the worker holding an agent mid-step; time until another worker starts the step.
    #[value(name = "recovery")]
    Recovery,
    /// Claim latency with 1k, 100k and 1M finished agents (10 events each) in the tables.
    #[value(name = "claim_scaling")]
    ClaimScaling,
    /// Claim and commit latency with no history, then 10M and 20M events of finished agents' history in weekly partitions.
    #[value(name = "history_scaling")]
    HistoryScaling,
    /// Commit → SSE client delay with many clients on one agent, through `holdfast api`.
    #[value(name = "fanout")]
    Fanout,
    /// Worker RSS idle and with many in-flight steps; API RSS with many open streams.
    #[value(name = "memory")]
    Memory,
    /// `POST /v1/agents/{id}/inputs` throughput through `holdfast api`, against pgbench -N.
    #[value(name = "api_inputs")]
    ApiInputs,
    /// Worker peak RSS and request size for an agent whose history holds images.
    #[value(name = "attachments")]
    Attachments,
    /// The SQL of a model step and a tool step with no worker, model or HTTP (C sessions), against pgbench -N.
    #[value(name = "sql_steps")]
    SqlSteps,
    /// A machine daemon's start of `true`, in its sandbox and with --sandbox none, interleaved.
    #[value(name = "command_start")]
    CommandStart,
    /// Every scenario above, in that order (claim_scaling and history_scaling last: they load the most data).
    #[value(name = "all")]
    All,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::Throughput => "throughput",
            Scenario::WakeLatency => "wake_latency",
            Scenario::Recovery => "recovery",
            Scenario::ClaimScaling => "claim_scaling",
            Scenario::HistoryScaling => "history_scaling",
            Scenario::Fanout => "fanout",
            Scenario::Memory => "memory",
            Scenario::ApiInputs => "api_inputs",
            Scenario::Attachments => "attachments",
            Scenario::SqlSteps => "sql_steps",
            Scenario::CommandStart => "command_start",
            Scenario::All => "all",
        }
    }

    fn expand(self) -> Vec<Scenario> {
        match self {
            Scenario::All => vec![
                Scenario::Throughput,
                Scenario::WakeLatency,
                Scenario::Recovery,
                Scenario::Fanout,
                Scenario::Memory,
                Scenario::ApiInputs,
                Scenario::Attachments,
                Scenario::SqlSteps,
                Scenario::CommandStart,
                Scenario::ClaimScaling,
                Scenario::HistoryScaling,
            ],
            one => vec![one],
        }
    }
}

/// Holdfast load driver. Every size flag defaults to the full run, or to a
/// small one with --quick.
#[derive(Parser, Debug)]
#[command(name = "holdfast-bench")]
pub struct Options {
    #[arg(value_enum)]
    scenario: Scenario,
    /// Write the reports here, one JSON object per scenario per line.
    #[arg(long)]
    json: PathBuf,
    /// Small sizes: every scenario in well under two minutes (for CI
    /// breakage, not for numbers).
    #[arg(long)]
    pub quick: bool,
    /// The holdfast binary (default: build this workspace's with the bench's profile).
    #[arg(long)]
    holdfast_bin: Option<PathBuf>,
    /// Scratch directory for the cluster and process logs (must not exist;
    /// removed after a successful run).
    #[arg(long)]
    dir: Option<PathBuf>,

    /// Run each scenario this many times (one report each; take medians:
    /// the machines are shared and noisy).
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Profile Postgres: track nested statements, planning and every
    /// function's calls, and add each scenario's top statements to its
    /// report as `metrics.profile`. Costs some throughput: profile runs
    /// are for finding where time goes, not for the headline figures.
    /// (pg_stat_statements is always loaded, counting top-level statements
    /// only: `throughput` reports statements per step from it.)
    #[arg(long)]
    pub profile: bool,
    /// Experiment: run the bench cluster with `fsync = off` and
    /// `full_page_writes = off` (commits are not durable; recorded in every
    /// report's `params.durability`). Figures from such runs are not
    /// comparable with the durable default.
    #[arg(long)]
    unsafe_no_fsync: bool,
    /// Experiment: run this SQL file in every scenario database after the
    /// migrations (e.g. a candidate fix, before it becomes a migration).
    #[arg(long)]
    sql: Option<PathBuf>,
    /// Experiment: extra environment for every worker, KEY=VALUE (repeatable).
    #[arg(long = "worker-env", value_parser = parse_key_value)]
    pub worker_env: Vec<(String, String)>,
    /// Experiment (sql_steps): `VACUUM holdfast.agents` from one more
    /// session every this many milliseconds while the sessions run, to
    /// show what the agent row's dead versions cost a longer run.
    #[arg(long)]
    pub vacuum_agents_every_ms: Option<u64>,

    /// throughput, api_inputs, sql_steps: agents.
    #[arg(long)]
    pub agents: Option<usize>,
    /// throughput: model steps per agent (a custom tool step between each two);
    /// attachments: text turns after the images.
    #[arg(long)]
    pub steps: Option<usize>,
    /// throughput, wake_latency, recovery: worker processes.
    #[arg(long)]
    pub workers: Option<usize>,
    /// throughput, wake_latency: HOLDFAST_WORKER_CONCURRENCY of each worker;
    /// sql_steps: sessions.
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// wake_latency: inputs timed; claim_scaling: claims timed per size.
    #[arg(long)]
    pub samples: Option<usize>,
    /// recovery: SIGKILL rounds.
    #[arg(long)]
    pub kill_samples: Option<usize>,
    /// recovery: SIGSTOP rounds.
    #[arg(long)]
    pub stop_samples: Option<usize>,
    /// recovery: HOLDFAST_LEASE_TTL of the SIGSTOP round's workers, in ms
    /// (renewal every quarter of it).
    #[arg(long)]
    pub stop_lease_ttl_ms: Option<u64>,
    /// claim_scaling: finished-agent counts; history_scaling: events of
    /// history; comma-separated, ascending.
    #[arg(long, value_delimiter = ',')]
    pub sizes: Option<Vec<usize>>,
    /// claim_scaling and history_scaling: events per finished agent.
    #[arg(long)]
    pub events_per_agent: Option<usize>,
    /// fanout: SSE clients on the agent.
    #[arg(long)]
    pub clients: Option<usize>,
    /// fanout: inputs committed and timed to every client.
    #[arg(long)]
    pub commits: Option<usize>,
    /// memory: in-flight steps on one worker (the fake holds every reply).
    #[arg(long)]
    pub in_flight: Option<usize>,
    /// memory: open SSE streams on the API.
    #[arg(long)]
    pub streams: Option<usize>,
    /// attachments: images in the agent's history.
    #[arg(long)]
    pub images: Option<usize>,
    /// attachments: bytes of each image.
    #[arg(long)]
    pub image_bytes: Option<usize>,
    /// throughput: the model's tool calls are run by the workers, not
    /// answered by the driver (a `lookup` call whose input the tool's
    /// schema refuses, answered at once with an error result); each
    /// agent's turn ends at `limits.max_model_steps_per_turn` = --steps.
    #[arg(long)]
    pub worker_tools: bool,
    /// throughput: jobs drained by the plain-queue baseline.
    #[arg(long)]
    pub plain_queue_jobs: Option<u32>,
    /// throughput: tasks of the checkpoint baseline.
    #[arg(long)]
    pub checkpoint_tasks: Option<u32>,
    /// throughput: checkpointed steps per task of the checkpoint baseline.
    #[arg(long)]
    pub checkpoint_steps: Option<u32>,
    /// api_inputs: concurrent HTTP clients.
    #[arg(long)]
    pub http_clients: Option<usize>,
    /// api_inputs, sql_steps, pgbench: seconds measured.
    #[arg(long)]
    pub seconds: Option<u32>,
    /// pgbench: clients (-c).
    #[arg(long)]
    pub pgbench_clients: Option<u32>,
    /// pgbench: scale factor of `pgbench -i`.
    #[arg(long)]
    pub pgbench_scale: Option<u32>,
}

/// Statements listed per scenario with --profile.
const PROFILE_TOP: i64 = 25;

/// What every scenario gets: its sizes, the cluster, the binary.
pub struct Bench {
    pub opts: Options,
    pub cluster: BenchCluster,
    pub holdfast: Holdfast,
    /// The cluster's durability settings, as the server reports them.
    pub durability: Value,
}

impl Bench {
    /// `explicit` if given, else the full or the quick default.
    pub fn pick<T>(&self, explicit: Option<T>, full: T, quick: T) -> T {
        explicit.unwrap_or(if self.opts.quick { quick } else { full })
    }

    /// A fresh database for a scenario, migrated by the `holdfast` under
    /// test (`holdfast migrate`): a run of another build (`--holdfast-bin`)
    /// gets that build's tables, triggers and functions, not the driver's.
    pub async fn fresh_database(&self, name: &str) -> Result<ConnectConfig> {
        let config = self.cluster.empty_database(name).await?;
        self.holdfast
            .migrate(&self.cluster.url(name, "holdfast-bench-migrate"))
            .await?;
        self.cluster.prepare_database(&config).await?;
        Ok(config)
    }

    /// The same-run `pgbench -N` baseline (tps), with its parameters.
    pub async fn pgbench(&self) -> Result<Value> {
        let scale = self.pick(self.opts.pgbench_scale, 10, 1);
        let clients = self.pick(self.opts.pgbench_clients, 8, 4);
        let seconds = self.pick(self.opts.seconds, 10, 2);
        self.cluster.pgbench(scale, clients, seconds).await
    }

    /// The same-run plain-queue baseline (jobs/s), on as many sessions as
    /// pgbench uses.
    pub async fn plain_queue(&self) -> Result<Value> {
        let jobs = self.pick(self.opts.plain_queue_jobs, 20_000, 1_000);
        let clients = self.pick(self.opts.pgbench_clients, 8, 4);
        self.cluster.plain_queue(jobs, clients).await
    }

    /// The same-run checkpoint baseline (steps/s), on as many sessions as
    /// pgbench uses: 2,000 tasks of 5 steps, the size Absurd's own
    /// comparison used.
    pub async fn checkpoint_baseline(&self) -> Result<Value> {
        let tasks = self.pick(self.opts.checkpoint_tasks, 2_000, 200);
        let steps = self.pick(self.opts.checkpoint_steps, 5, 3);
        let clients = self.pick(self.opts.pgbench_clients, 8, 4);
        self.cluster
            .checkpoint_baseline(tasks, steps, clients)
            .await
    }

    /// Parameters every report carries besides the scenario's own.
    pub fn common_params(&self) -> Value {
        json!({
            "quick": self.opts.quick,
            "durability": self.durability,
            "build": self.holdfast.profile,
            "holdfast_bin": self.holdfast.bin.display().to_string(),
            "profiled": self.opts.profile,
            "sql_experiment": self.opts.sql.as_ref().map(|p| p.display().to_string()),
            "vacuum_agents_every_ms_experiment": self.opts.vacuum_agents_every_ms,
            "worker_env_experiment": self
                .opts
                .worker_env
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>(),
        })
    }
}

/// A scenario's findings; the driver adds the envelope.
pub struct Outcome {
    pub params: Value,
    pub metrics: Value,
    pub baseline: Value,
}

fn main() -> ExitCode {
    let opts = Options::parse();
    let outcome = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(anyhow::Error::from)
        .and_then(|runtime| runtime.block_on(run(opts)));
    match outcome {
        Ok(0) => ExitCode::SUCCESS,
        Ok(failed) => {
            eprintln!("holdfast-bench: {failed} scenario(s) failed");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("holdfast-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Run the scenarios; returns how many failed.
async fn run(opts: Options) -> Result<usize> {
    let dir = opts.dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("holdfast-bench-{}", std::process::id()))
    });
    let holdfast = Holdfast::locate(opts.holdfast_bin.clone(), &dir.join("logs"))?;
    eprintln!(
        "holdfast-bench: {} binary {}; cluster and logs in {}",
        holdfast.profile,
        holdfast.bin.display(),
        dir.display()
    );
    let extra_sql = match &opts.sql {
        Some(path) => Some(
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?,
        ),
        None => None,
    };
    let cluster = BenchCluster::start(&dir.join("pg"), extra_sql, !opts.unsafe_no_fsync).await?;
    cluster.enable_statement_stats(opts.profile).await?;
    let postgres_version = cluster.server_version().await?;
    let durability = cluster.durability().await?;
    let cpu_count = processes::cpu_count();
    let mut out = std::fs::File::create(&opts.json)
        .with_context(|| format!("creating {}", opts.json.display()))?;
    let scenarios: Vec<(Scenario, usize)> = opts
        .scenario
        .expand()
        .into_iter()
        .flat_map(|s| (1..=opts.repeat.max(1)).map(move |i| (s, i)))
        .collect();
    let repeat = opts.repeat.max(1);
    let bench = Bench {
        opts,
        cluster,
        holdfast,
        durability,
    };

    let mut failed = 0;
    for (scenario, run_index) in scenarios {
        let started_at = chrono::Utc::now().to_rfc3339();
        let load_before = load_average();
        eprintln!(
            "holdfast-bench: {} ({run_index}/{repeat}) ...",
            scenario.name()
        );
        let clock = std::time::Instant::now();
        let result = tokio::select! {
            result = run_one(&bench, scenario) => result,
            _ = tokio::signal::ctrl_c() => {
                eprintln!("holdfast-bench: interrupted; stopping");
                failed += 1;
                break;
            }
        };
        let mut report = json!({
            "scenario": scenario.name(),
            "postgres_version": postgres_version,
            "cpu_count": cpu_count,
            "started_at": started_at,
            "load_average_1m": [load_before, load_average()],
        });
        match result {
            Ok(outcome) => {
                let mut params = bench.common_params();
                params["run"] = json!(format!("{run_index}/{repeat}"));
                merge(&mut params, outcome.params);
                report["params"] = params;
                report["metrics"] = outcome.metrics;
                if bench.opts.profile {
                    report["metrics"]["profile"] =
                        bench.cluster.statement_stats(PROFILE_TOP).await?;
                }
                report["baseline"] = outcome.baseline;
                eprintln!(
                    "holdfast-bench: {} done in {:.1} s\n  metrics: {}\n  baseline: {}",
                    scenario.name(),
                    clock.elapsed().as_secs_f64(),
                    report["metrics"],
                    report["baseline"]
                );
            }
            Err(e) => {
                failed += 1;
                report["error"] = json!(format!("{e:#}"));
                eprintln!("holdfast-bench: {} FAILED: {e:#}", scenario.name());
            }
        }
        writeln!(out, "{report}")?;
        out.flush()?;
    }

    let Bench { cluster, .. } = bench;
    if failed == 0 {
        tokio::task::spawn_blocking(move || cluster.destroy()).await??;
        std::fs::remove_dir_all(&dir).ok();
    } else {
        eprintln!(
            "holdfast-bench: keeping {} for the logs",
            dir.join("logs").display()
        );
        drop(cluster);
    }
    Ok(failed)
}

async fn run_one(bench: &Bench, scenario: Scenario) -> Result<Outcome> {
    match scenario {
        Scenario::Throughput => scenarios::throughput::run(bench).await,
        Scenario::WakeLatency => scenarios::wake_latency::run(bench).await,
        Scenario::Recovery => scenarios::recovery::run(bench).await,
        Scenario::ClaimScaling => scenarios::claim_scaling::run(bench).await,
        Scenario::HistoryScaling => scenarios::history_scaling::run(bench).await,
        Scenario::Fanout => scenarios::fanout::run(bench).await,
        Scenario::Memory => scenarios::memory::run(bench).await,
        Scenario::ApiInputs => scenarios::api_inputs::run(bench).await,
        Scenario::Attachments => scenarios::attachments::run(bench).await,
        Scenario::SqlSteps => scenarios::sql_steps::run(bench).await,
        Scenario::CommandStart => scenarios::command_start::run(bench).await,
        Scenario::All => anyhow::bail!("`all` is expanded before running"),
    }
}

/// The 1-minute load average (how busy the shared machine was), if known.
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn parse_key_value(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("expected KEY=VALUE, got {text:?}"))
}

/// Add `extra`'s keys to `base` (both objects).
pub fn merge(base: &mut Value, extra: Value) {
    if let (Some(base), Value::Object(extra)) = (base.as_object_mut(), extra) {
        base.extend(extra);
    }
}
