//! `throughput`: A agents × S model steps, with a custom tool step between
//! each two, on W worker processes at concurrency C, against the instant
//! fake model. Every model reply calls the custom tool `lookup`; the driver
//! answers each call through `holdfast.submit_tool_result` (what a client's
//! backend does) until the agent has had its S model steps. With
//! `--worker-tools`, the workers run the tool steps themselves (the call's
//! input fails the tool's schema, answered at once with an error result)
//! and each agent's turn ends at its S-th model step
//! (`limits.max_model_steps_per_turn`): the driver only starts the turns.
//!
//! A *step* is one durable unit of an agent's progress: a model step
//! (claimed, run and committed by a worker) or a tool step (a tool result
//! committed). Timing and counts come from the database (event timestamps,
//! rows), not from the driver's view of them.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use futures::{StreamExt, TryStreamExt};
use holdfast_db::connect::{self, ConnectConfig};
use holdfast_db::store;
use holdfast_fakes::{FakeProvider, Reply};
use serde_json::{json, Value};
use uuid::Uuid;

use super::{agent_config, target, LOOKUP_TOOL};
use crate::fleet::Fleet;
use crate::postgres::{connect_to, next_xid, statement_counts, transactions_ended, WaitSampler};
use crate::processes::{
    children_cpu_ticks, cpu_count, cpu_ticks, machine_busy_ticks, ticks_per_second,
};
use crate::stats::{ratio, round3, Samples};
use crate::{Bench, Outcome};

const DB: &str = "bench_throughput";
/// The driver's connections answering tool calls.
const ANSWERERS: usize = 8;
/// How often the driver looks for waiting tool calls when it found none.
const ANSWER_POLL: Duration = Duration::from_millis(5);
const RUN_LIMIT: Duration = Duration::from_secs(900);
/// How often the driver looks for ended turns (`--worker-tools`).
const TURNS_POLL: Duration = Duration::from_millis(20);
/// The workers' statements listed by calls per model step.
const STATEMENTS_LISTED: i64 = 12;

pub async fn run(bench: &Bench) -> Result<Outcome> {
    let agents = bench.pick(bench.opts.agents, 128, 16);
    let steps = bench.pick(bench.opts.steps, 20, 3).max(1);
    let workers = bench.pick(bench.opts.workers, 2, 2);
    let concurrency = bench.pick(bench.opts.concurrency, 32, 8);

    let config = bench.fresh_database(DB).await?;
    // The driver's sessions (inputs, tool results, sampling) under a role
    // of their own: the statement counts tell them from the workers'.
    let driver = bench.cluster.driver_config(DB).await?;
    // The baselines first, on an idle cluster, right before the run.
    let mut baseline = bench.pgbench().await?;
    crate::merge(&mut baseline, bench.plain_queue().await?);
    crate::merge(&mut baseline, bench.checkpoint_baseline().await?);

    let worker_tools = bench.opts.worker_tools;
    let fake = FakeProvider::start().await;
    let call_input = if worker_tools {
        json!({"not_q": "bench"})
    } else {
        json!({"q": "bench"})
    };
    fake.set_default(Reply::tool_calls(vec![(LOOKUP_TOOL, call_input)]));
    let mut config_of_each = agent_config();
    if worker_tools {
        config_of_each["limits"] = json!({"max_model_steps_per_turn": steps});
    }
    let admin = connect_to(&config).await?;
    let project = store::ensure_project(&admin, "bench").await?;
    let mut ids = Vec::with_capacity(agents);
    for _ in 0..agents {
        ids.push(store::create_agent(&admin, project, &config_of_each).await?);
    }

    let fleet = Fleet::new(bench, DB, Some(&fake));
    let mut procs = Vec::new();
    for i in 0..workers {
        procs.push(
            fleet
                .worker(&admin, &format!("bench-tp-w{i}"), concurrency, &[])
                .await?,
        );
    }

    let postmaster = bench.cluster.postmaster_pid();
    let pg_ticks_before = postmaster.map_or(0, children_cpu_ticks);
    let mut worker_ticks_before = 0;
    for p in &procs {
        worker_ticks_before += p.cpu_ticks()?;
    }
    // The driver is this process: the fake model and the tool results.
    let driver_ticks_before = cpu_ticks(std::process::id())?;
    let machine_ticks_before = machine_busy_ticks()?;
    let xid_before = next_xid(&admin).await?;
    let transactions_before = transactions_ended(&admin).await?;
    let waits = WaitSampler::start(&driver, "bench-tp-w%").await?;
    // pg_stat_statements lives in the cluster's `postgres` database.
    let cluster_admin = bench.cluster.admin().await?;
    cluster_admin
        .batch_execute("SELECT pg_stat_statements_reset()")
        .await?;
    let started = Instant::now();

    // Every agent gets its input in one transaction: one wake-up for all.
    let mut inputs_client = connect_to(&driver).await?;
    let tx = inputs_client.transaction().await?;
    for id in &ids {
        store::create_input(&tx, *id, &json!("Start the benchmark task."), None).await?;
    }
    tx.commit().await?;
    let tool_results = if worker_tools {
        wait_for_turns_to_end(&driver, agents).await?;
        0
    } else {
        answer_tool_calls(&driver, agents, steps).await?
    };
    let wall = started.elapsed();
    let machine_ticks = machine_busy_ticks()?.saturating_sub(machine_ticks_before);
    let driver_ticks = cpu_ticks(std::process::id())?.saturating_sub(driver_ticks_before);
    let waits = waits.finish().await?;

    let xid_after = next_xid(&admin).await?;
    let statements = statement_counts(&cluster_admin, DB, STATEMENTS_LISTED).await?;
    // The postmaster's children: the workers' sessions, the driver's
    // answering sessions (closed by now: the server side of the tool
    // steps) and the background processes.
    let pg_ticks = postmaster
        .map_or(0, children_cpu_ticks)
        .saturating_sub(pg_ticks_before);
    let mut worker_ticks = 0;
    for p in &procs {
        worker_ticks += p.cpu_ticks()?;
    }
    let worker_ticks = worker_ticks.saturating_sub(worker_ticks_before);
    for p in procs {
        p.stop(Duration::from_secs(30)).await?;
    }
    // The sessions that ran the steps have ended, reporting their counts.
    drop(inputs_client);
    let transactions = transactions_ended(&admin).await? - transactions_before;

    let counts = admin
        .query_one(
            "SELECT (SELECT count(*) FROM holdfast.steps WHERE kind = 'model'),
                    (SELECT count(*) FROM holdfast.tool_calls WHERE status = 'completed'),
                    (SELECT count(*) FROM holdfast.events WHERE type = 'model.retry'
                        OR (type = 'turn.failed' AND data #>> '{error,type}' IS DISTINCT FROM 'limit_exceeded')),
                    (SELECT extract(epoch FROM max(created_at) FILTER (WHERE type = 'model.response')
                                            - min(created_at) FILTER (WHERE type = 'input.received'))::float8
                       FROM holdfast.events)",
            &[],
        )
        .await?;
    let model_steps: i64 = counts.get(0);
    let tool_steps: i64 = counts.get(1);
    let failures: i64 = counts.get(2);
    let seconds: f64 = counts.get(3);
    let expected = (agents * steps) as i64;
    if model_steps != expected {
        bail!("expected {expected} model steps, the database has {model_steps}");
    }
    let total_steps = (model_steps + tool_steps) as f64;

    // Ready → saved, per model step: from the event that made the agent
    // ready (turn.started, or the tool result) to its model.response. The
    // first steps (after turn.started) are also reported apart: all 128
    // agents start at once on 64 slots, so they wait for a slot.
    let rows = admin
        .query(
            "SELECT extract(epoch FROM wait)::float8 * 1000, coalesce(ready_by = 'turn.started', false) FROM (
                 SELECT type, lag(type) OVER w AS ready_by, created_at - lag(created_at) OVER w AS wait
                   FROM holdfast.events
                 WINDOW w AS (PARTITION BY agent_id ORDER BY seq)) e
              WHERE type = 'model.response'",
            &[],
        )
        .await?;
    let mut latency = Samples::new();
    let mut first_latency = Samples::new();
    let mut later_latency = Samples::new();
    for row in rows {
        let ms: f64 = row.get(0);
        latency.push_ms(ms);
        if row.get::<_, bool>(1) {
            first_latency.push_ms(ms);
        } else {
            later_latency.push_ms(ms);
        }
    }

    // Write transactions: every worker commit (claims, deltas, steps,
    // releases) plus the driver's (one for the inputs, one per tool result).
    let writes = (xid_after - xid_before) as f64;
    let driver_writes = 1.0 + tool_results as f64;
    let ticks = ticks_per_second();
    let cores = cpu_count() as f64;
    let steps_per_sec = total_steps / seconds;
    let model_steps_per_sec = model_steps as f64 / seconds;
    let pgbench_tps = baseline["pgbench_tps"].as_f64().unwrap_or(f64::NAN);
    let plain_queue_jobs_per_sec = baseline["plain_queue_jobs_per_sec"]
        .as_f64()
        .unwrap_or(f64::NAN);
    let checkpoint_steps_per_sec = baseline["checkpoint_steps_per_sec"]
        .as_f64()
        .unwrap_or(f64::NAN);
    let model_steps_f = model_steps as f64;
    let worker_statements: Vec<Value> = statements
        .product_top
        .iter()
        .map(|(calls, query)| {
            json!({"per_model_step": round3(*calls as f64 / model_steps_f), "query": query})
        })
        .collect();

    let mut metrics = json!({
        "steps": total_steps,
        "model_steps": model_steps,
        "tool_steps": tool_steps,
        "retries_or_failures": failures,
        "seconds": round3(seconds),
        "driver_wall_seconds": round3(wall.as_secs_f64()),
        "steps_per_sec": round3(steps_per_sec),
        "model_steps_per_sec": round3(model_steps_per_sec),
        "commits_per_step": round3(writes / total_steps),
        "worker_commits_per_model_step": round3((writes - driver_writes) / model_steps as f64),
        // Every transaction, read-only ones included (pg_stat_database).
        "transactions_per_step": round3(transactions as f64 / total_steps),
        // Top-level statements (pg_stat_statements): the workers' per model
        // step (claims, loads, commits, releases, polls), the driver's per
        // tool step (each tool result with its wake), and the workers'
        // most-called statements.
        "statements_per_step": round3((statements.product + statements.driver) as f64 / total_steps),
        "worker_statements_per_model_step": round3(statements.product as f64 / model_steps_f),
        "driver_statements_per_tool_step": round3(statements.driver as f64 / (tool_steps as f64).max(1.0)),
        "worker_statements": worker_statements,
        "model_step_latency": latency.summary(),
        "first_model_step_latency": first_latency.summary(),
        "later_model_step_latency": later_latency.summary(),
        "worker_cpu_ms_per_step": round3(worker_ticks as f64 / ticks * 1000.0 / total_steps),
        "postgres_cpu_ms_per_step": round3(pg_ticks as f64 / ticks * 1000.0 / total_steps),
        "driver_cpu_ms_per_step": round3(driver_ticks as f64 / ticks * 1000.0 / total_steps),
        // Everything the machine did while the driver ran, per step, and
        // how busy its cores were; beside it, the machine time per step
        // that half of pgbench -N's rate would leave (pgbench ran on the
        // same cores).
        "machine_cpu_ms_per_step": round3(machine_ticks as f64 / ticks * 1000.0 / total_steps),
        "machine_busy_share": round3(machine_ticks as f64 / ticks / (cores * wall.as_secs_f64())),
        "machine_ms_per_step_at_half_pgbench": round3(cores * 1000.0 / (0.5 * pgbench_tps)),
        "worker_sessions_in_statement": waits,
        "ratio_steps_per_sec_to_pgbench_tps": ratio(steps_per_sec, pgbench_tps),
        "ratio_model_steps_per_sec_to_pgbench_tps": ratio(model_steps_per_sec, pgbench_tps),
        "ratio_steps_per_sec_to_plain_queue_jobs_per_sec": ratio(steps_per_sec, plain_queue_jobs_per_sec),
        "ratio_steps_per_sec_to_checkpoint_steps_per_sec": ratio(steps_per_sec, checkpoint_steps_per_sec),
    });
    metrics["target"] = target(
        "steps/s >= 1.5 x the same run's checkpoint baseline steps/s",
        steps_per_sec >= 1.5 * checkpoint_steps_per_sec,
    );
    Ok(Outcome {
        params: json!({
            "agents": agents,
            "model_steps_per_agent": steps,
            "tool_steps_per_agent": steps - 1,
            "workers": workers,
            "concurrency": concurrency,
            "model": "instant fake (Anthropic protocol, streamed)",
            "tool": if worker_tools {
                "run by the workers: a lookup call with input its schema refuses, answered with an error"
            } else {
                "custom tool answered by the driver via holdfast.submit_tool_result"
            },
        }),
        metrics,
        baseline,
    })
}

/// Wait until every agent's turn has ended (at its step limit).
async fn wait_for_turns_to_end(config: &ConnectConfig, agents: usize) -> Result<()> {
    let poller = connect_to(config).await?;
    let deadline = Instant::now() + RUN_LIMIT;
    loop {
        let ended: i64 = poller
            .query_one(
                "SELECT count(*) FROM holdfast.agents WHERE last_turn_ended_at IS NOT NULL",
                &[],
            )
            .await?
            .get(0);
        if ended as usize >= agents {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{ended} of {agents} agents finished within {RUN_LIMIT:?}");
        }
        tokio::time::sleep(TURNS_POLL).await;
    }
}

/// Answer every waiting `lookup` call until each agent has had `steps`
/// model steps (its last call is left waiting). Polls for waiting calls, as
/// a client backend's job poller does: it streams no agent, so no events
/// hints are sent for them, and the driver does not wait for any.
/// Returns the number of results submitted.
async fn answer_tool_calls(config: &ConnectConfig, agents: usize, steps: usize) -> Result<u64> {
    let poller = connect_to(config).await?;
    let pool = connect::pool(config.clone(), ANSWERERS)?;
    let mut calls_seen: HashMap<Uuid, usize> = HashMap::new();
    let mut handled: HashSet<Uuid> = HashSet::new();
    let mut done = 0;
    let mut submitted = 0u64;
    let deadline = Instant::now() + RUN_LIMIT;
    while done < agents {
        let rows = poller
            .query(
                "SELECT id, agent_id FROM holdfast.tool_calls WHERE status = 'waiting'",
                &[],
            )
            .await?;
        let mut answer = Vec::new();
        for row in rows {
            let call: Uuid = row.get(0);
            if !handled.insert(call) {
                continue;
            }
            let seen = calls_seen.entry(row.get(1)).or_insert(0);
            *seen += 1;
            if *seen >= steps {
                done += 1;
            } else {
                answer.push(call);
            }
        }
        if answer.is_empty() {
            if Instant::now() > deadline {
                bail!("{done} of {agents} agents finished within {RUN_LIMIT:?}");
            }
            tokio::time::sleep(ANSWER_POLL).await;
            continue;
        }
        submitted += answer.len() as u64;
        futures::stream::iter(answer)
            .map(|call| {
                let pool = pool.clone();
                async move {
                    let client = pool.get().await?;
                    store::submit_tool_result(&client, call, &json!({"answer": 42}), false).await?;
                    anyhow::Ok(())
                }
            })
            .buffer_unordered(ANSWERERS)
            .try_collect::<Vec<()>>()
            .await?;
    }
    Ok(submitted)
}
