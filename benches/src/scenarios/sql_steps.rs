//! `sql_steps`: the SQL of a step with nothing else running. C sessions
//! each loop over the calls a worker and a custom tool's integration make
//! for one model step and one tool step: `claim_agents` (one agent), the
//! claimed turn's inputs, `commit_model_step_batch` (a response with one custom
//! call), `submit_tool_result`. No worker process, no model, no HTTP, so
//! the figure is Postgres's share of a step alone: steps/s and Postgres CPU
//! per step, against `pgbench -N` of the same run. Low noise next to
//! `throughput`, where the workers, the fake model and the driver share
//! the cores with Postgres; meant for A/B runs of SQL changes.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use holdfast_db::{connect, store};
use holdfast_wire::domain::{ModelStep, NewToolCall, ToolKind};
use serde_json::json;
use uuid::Uuid;

use super::{agent_config, LOOKUP_TOOL};
use crate::postgres::{connect_to, WaitSampler};
use crate::processes::{children_cpu_ticks, ticks_per_second};
use crate::stats::{ratio, round3, Samples};
use crate::{Bench, Outcome};

const DB: &str = "bench_sql_steps";
const LEASE: Duration = Duration::from_secs(60);
/// steps/s is also reported per window of this many seconds, so that a
/// rate that falls as the run goes on shows (a cost that grows with the
/// dead row versions left between vacuums did before the claim locked its
/// candidates by key: docs/internals/benchmarks.md).
const WINDOW_SECONDS: f64 = 5.0;

pub async fn run(bench: &Bench) -> Result<Outcome> {
    let sessions = bench.pick(bench.opts.concurrency, 8, 4);
    let seconds = bench.pick(bench.opts.seconds, 10, 2);
    // Enough that a session always finds a ready agent, few enough that no
    // agent nears max_model_steps_per_turn (100) in one run.
    let agent_count = bench.pick(bench.opts.agents, 256, 32);

    let config = bench.fresh_database(DB).await?;
    let baseline = bench.pgbench().await?;
    let admin = connect_to(&config).await?;
    let project = store::ensure_project(&admin, "bench").await?;
    for _ in 0..agent_count {
        let agent = store::create_agent(&admin, project, &agent_config()).await?;
        store::create_input(&admin, agent, &json!("Start the benchmark task."), None).await?;
    }

    let waits = WaitSampler::start(&config, "bench-sql-%").await?;
    let postmaster = bench.cluster.postmaster_pid();
    let pg_ticks_before = postmaster.map_or(0, children_cpu_ticks);
    let wal_before: String = admin
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await?
        .get(0);
    let started = Instant::now();
    let deadline = started + Duration::from_secs(u64::from(seconds));
    // Pooled connections, as the worker and the API hold theirs: each
    // statement is prepared once per connection.
    let pool = connect::pool(config.clone(), sessions)?;
    let vacuums = match bench.opts.vacuum_agents_every_ms {
        Some(every) => Some(tokio::spawn(vacuum_agents(
            connect_to(&config).await?,
            Duration::from_millis(every),
            deadline,
        ))),
        None => None,
    };
    let mut tasks = Vec::with_capacity(sessions);
    for s in 0..sessions {
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move {
            let pooled = pool.get().await?;
            let name = format!("bench-sql-{s}");
            pooled
                .execute("SELECT set_config('application_name', $1, false)", &[&name])
                .await?;
            let turn_inputs = pooled
                .prepare_cached("SELECT id FROM holdfast.turn_inputs($1)")
                .await?;
            let waiting_call = pooled
                .prepare_cached(
                    "SELECT id FROM holdfast.tool_calls
                      WHERE agent_id = $1 AND step_id = $2 AND status = 'waiting'",
                )
                .await?;
            let mut cycles = Samples::new();
            // When each cycle ended, in seconds since the start.
            let mut ended = Vec::new();
            let mut empty_claims = 0u64;
            while Instant::now() < deadline {
                let began = Instant::now();
                let Some(claim) = store::claim_agents(&pooled, &name, 1, LEASE).await?.pop() else {
                    empty_claims += 1;
                    continue;
                };
                let inputs: Vec<Uuid> = pooled
                    .query(&turn_inputs, &[&claim.agent_id])
                    .await?
                    .iter()
                    .map(|r| r.get(0))
                    .collect();
                let step = model_step(inputs);
                let (_, saved) = store::commit_model_step_batch(&pooled, &[(claim, &step)])
                    .await?
                    .pop()
                    .context("commit_model_step_batch returned no outcome")?;
                let step_id = saved?;
                let call: Uuid = pooled
                    .query_one(&waiting_call, &[&claim.agent_id, &step_id])
                    .await
                    .context("the model step left no waiting custom call")?
                    .get(0);
                store::submit_tool_result(&pooled, call, &json!({"answer": 42}), false).await?;
                cycles.push(began.elapsed());
                ended.push(started.elapsed().as_secs_f64());
            }
            anyhow::Ok((cycles, ended, empty_claims))
        }));
    }
    let mut cycles = Samples::new();
    let mut ended = Vec::new();
    let mut empty_claims = 0;
    for task in tasks {
        let (c, t, e) = task.await??;
        cycles.extend(&c);
        ended.extend(t);
        empty_claims += e;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let vacuums = match vacuums {
        Some(task) => Some(task.await??),
        None => None,
    };
    let pg_ticks = postmaster
        .map_or(0, children_cpu_ticks)
        .saturating_sub(pg_ticks_before);
    let waits = waits.finish().await?;
    let wal_bytes: f64 = admin
        .query_one(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::text::pg_lsn)::float8",
            &[&wal_before],
        )
        .await?
        .get(0);

    let model_steps = cycles.len();
    let saved: i64 = admin
        .query_one(
            "SELECT count(*) FROM holdfast.steps WHERE kind = 'model'",
            &[],
        )
        .await?
        .get(0);
    if saved as usize != model_steps {
        bail!("{model_steps} model steps committed, {saved} in the database");
    }
    // A model step and the tool step its call makes.
    let steps = 2 * model_steps;
    let per_sec = steps as f64 / elapsed;
    let pgbench_tps = baseline["pgbench_tps"].as_f64().unwrap_or(f64::NAN);
    Ok(Outcome {
        params: json!({
            "sessions": sessions,
            "seconds": seconds,
            "agents": agent_count,
            "cycle": "claim_agents(1) → turn_inputs → commit_model_step_batch (one custom call) → the call's id → submit_tool_result, each its own transaction",
        }),
        metrics: json!({
            "steps": steps,
            "steps_per_sec": round3(per_sec),
            "steps_per_sec_by_window": steps_per_sec_by_window(&ended, elapsed),
            "window_seconds": WINDOW_SECONDS,
            "agents_vacuums": vacuums,
            "empty_claims": empty_claims,
            "cycle_latency": cycles.summary(),
            "postgres_cpu_ms_per_step": round3(
                pg_ticks as f64 / ticks_per_second() * 1000.0 / steps.max(1) as f64
            ),
            "wal_bytes_per_step": round3(wal_bytes / steps.max(1) as f64),
            "ratio_steps_per_sec_to_pgbench_tps": ratio(per_sec, pgbench_tps),
            "sessions_in_statement": waits,
        }),
        baseline,
    })
}

/// `VACUUM holdfast.agents` on `client` every `every` until `deadline`;
/// returns how many ran.
async fn vacuum_agents(
    client: tokio_postgres::Client,
    every: Duration,
    deadline: Instant,
) -> Result<u64> {
    let mut vacuums = 0;
    let mut ticks = tokio::time::interval(every);
    ticks.tick().await;
    while Instant::now() < deadline {
        ticks.tick().await;
        client.batch_execute("VACUUM holdfast.agents").await?;
        vacuums += 1;
    }
    Ok(vacuums)
}

/// Steps/s in each whole window of WINDOW_SECONDS from the start (a cycle
/// is two steps), given when each cycle ended; the last, partial window
/// is left out.
fn steps_per_sec_by_window(ended: &[f64], elapsed: f64) -> Vec<serde_json::Value> {
    let windows = (elapsed / WINDOW_SECONDS).floor() as usize;
    let mut cycles = vec![0u64; windows];
    for t in ended {
        if let Some(count) = cycles.get_mut((t / WINDOW_SECONDS) as usize) {
            *count += 1;
        }
    }
    cycles
        .into_iter()
        .map(|c| round3(2.0 * c as f64 / WINDOW_SECONDS))
        .collect()
}

/// The response of the throughput scenario's fake model: a line of text and
/// one call of the custom tool.
fn model_step(input_ids: Vec<Uuid>) -> ModelStep {
    ModelStep {
        input_ids,
        message: vec![
            json!({"type": "text", "text": "Looking it up."}),
            json!({"type": "tool_use", "id": "toolu_bench", "name": LOOKUP_TOOL, "input": {"q": "bench"}}),
        ],
        tool_calls: vec![NewToolCall {
            provider_id: "toolu_bench".into(),
            name: LOOKUP_TOOL.into(),
            input: json!({"q": "bench"}),
            kind: ToolKind::Custom,
        }],
        usage: json!({"input_tokens": 10, "output_tokens": 5}),
        stop_reason: Some("tool_use".into()),
        config_version: None,
    }
}
