//! `claim_scaling`: does claiming slow down as finished agents pile up?
//! The tables are filled, stage by stage, with finished (idle) agents and
//! their history — 10 events, 2 messages, 1 consumed input, 1 step and 1
//! completed tool call each (1M agents: 10M events) — generated with
//! `generate_series` in bulk (triggers off: `session_replication_role =
//! replica`), then vacuumed, analysed and checkpointed. At each stage the
//! driver times `holdfast.claim_agents(worker, 1, ttl)` on one session
//! while 64 live agents are ready, releasing each claim (untimed, though
//! its latency is reported too) so that the next claim finds work.
//! Every stage runs the same number of claim/release cycles from a freshly
//! vacuumed table, so the stages differ only in what has piled up.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use holdfast_db::store;
use serde_json::{json, Value};
use tokio_postgres::Client;
use uuid::Uuid;

use super::{agent_config, target};
use crate::postgres::connect_to;
use crate::stats::{ratio, round3, Samples};
use crate::{Bench, Outcome};

const DB: &str = "bench_claim";
const LIVE_AGENTS: usize = 64;
const WARMUP: usize = 50;
const TTL: Duration = Duration::from_secs(60);
/// Finished agents generated per statement.
const CHUNK: i64 = 50_000;

pub async fn run(bench: &Bench) -> Result<Outcome> {
    let sizes = bench.pick(
        bench.opts.sizes.clone(),
        vec![1_000, 100_000, 1_000_000],
        vec![100, 1_000, 10_000],
    );
    if sizes.is_empty() || sizes.windows(2).any(|w| w[0] >= w[1]) {
        bail!("--sizes must be ascending");
    }
    let events_per_agent = bench.pick(bench.opts.events_per_agent, 10, 10).max(1);
    let samples = bench.pick(bench.opts.samples, 1000, 200);

    let config = bench.fresh_database(DB).await?;
    let admin = connect_to(&config).await?;
    let project = store::ensure_project(&admin, "bench").await?;
    let mut live = Vec::with_capacity(LIVE_AGENTS);
    for _ in 0..LIVE_AGENTS {
        let agent = store::create_agent(&admin, project, &agent_config()).await?;
        store::create_input(&admin, agent, &json!("ready"), None).await?;
        live.push(agent);
    }
    let claimer = connect_to(&config).await?;
    let loader = connect_to(&config).await?;
    loader
        .batch_execute("SET session_replication_role = replica")
        .await?;

    let mut stages = Vec::new();
    let mut loaded: i64 = 0;
    let mut first_p50 = f64::NAN;
    let mut first_p99 = f64::NAN;
    let mut last_p50 = f64::NAN;
    let mut last_p99 = f64::NAN;
    for &size in &sizes {
        let load_started = Instant::now();
        while loaded < size as i64 {
            let to = (loaded + CHUNK).min(size as i64);
            load_finished_agents(&loader, project, loaded + 1, to, events_per_agent as i64).await?;
            loaded = to;
        }
        // Separate statements: VACUUM cannot run in the implicit
        // transaction of a multi-statement query.
        admin
            .batch_execute("VACUUM (ANALYZE) holdfast.agents, holdfast.events, holdfast.messages, holdfast.inputs, holdfast.steps, holdfast.tool_calls")
            .await?;
        admin.batch_execute("CHECKPOINT").await?;
        let load_seconds = load_started.elapsed().as_secs_f64();

        let (claims, releases) = claim_cycles(&claimer, samples).await?;
        let plan = claim_plan(&admin).await?;
        let sizes_row = admin
            .query_one(
                "SELECT (SELECT count(*) FROM holdfast.agents),
                        (SELECT count(*) FROM holdfast.events),
                        pg_total_relation_size('holdfast.agents'),
                        pg_total_relation_size('holdfast.events'),
                        pg_database_size(current_database())",
                &[],
            )
            .await?;
        if first_p50.is_nan() {
            first_p50 = claims.p50();
            first_p99 = claims.p99();
        }
        last_p50 = claims.p50();
        last_p99 = claims.p99();
        stages.push(json!({
            "finished_agents": size,
            "agents_rows": sizes_row.get::<_, i64>(0),
            "events_rows": sizes_row.get::<_, i64>(1),
            "agents_bytes": sizes_row.get::<_, i64>(2),
            "events_bytes": sizes_row.get::<_, i64>(3),
            "database_bytes": sizes_row.get::<_, i64>(4),
            "load_seconds": round3(load_seconds),
            "claim": claims.summary(),
            "release": releases.summary(),
            "claim_plan": plan,
        }));
    }
    drop(loader);
    drop(claimer);
    drop(admin);
    bench.cluster.drop_database(DB).await?;

    let ratio_p50 = last_p50 / first_p50;
    let mut metrics = json!({
        "stages": stages,
        "ratio_p50_largest_to_smallest": ratio(last_p50, first_p50),
        "ratio_p99_largest_to_smallest": ratio(last_p99, first_p99),
    });
    metrics["target"] = target(
        "claim p50 with the largest size / with the smallest < 1.5",
        ratio_p50 < 1.5,
    );
    Ok(Outcome {
        params: json!({
            "sizes": sizes,
            "events_per_agent": events_per_agent,
            "live_ready_agents": LIVE_AGENTS,
            "claims_per_stage": samples,
            "claim": "holdfast.claim_agents(worker, 1, '60s') on one session; each claim released (holdfast.release_agent) before the next",
        }),
        metrics,
        baseline: json!({
            "smallest_size": sizes[0],
            "claim_p50_ms_at_smallest": round3(first_p50),
            "claim_p99_ms_at_smallest": round3(first_p99),
        }),
    })
}

/// Finished agents `from..=to` with their history, in one statement per
/// table. Ids are made from the row number (prefixed per table), ascending
/// like UUIDv7s, so index inserts stay append-mostly as real ones would.
async fn load_finished_agents(
    client: &Client,
    project: Uuid,
    from: i64,
    to: i64,
    events_per_agent: i64,
) -> Result<()> {
    let config = agent_config();
    let transaction = format!(
        "BEGIN;
         CREATE TEMP TABLE IF NOT EXISTS bench_ids (g bigint PRIMARY KEY, agent uuid, step uuid, input uuid);
         TRUNCATE bench_ids;
         INSERT INTO bench_ids
         SELECT g, ('1' || lpad(to_hex(g), 31, '0'))::uuid, ('5' || lpad(to_hex(g), 31, '0'))::uuid,
                ('3' || lpad(to_hex(g), 31, '0'))::uuid
           FROM generate_series({from}::bigint, {to}::bigint) g;
         INSERT INTO holdfast.agents (id, project_id, config, state, turn_open, last_event_seq,
                                      last_message_seq, last_step_seq, last_event_at, lease_epoch,
                                      run_after, state_changed_at, created_at, updated_at)
         SELECT agent, '{project}', '{config}', 'idle', false, {events_per_agent}, 2, 1, now(), 1,
                now(), now(), now(), now()
           FROM bench_ids;
         INSERT INTO holdfast.steps (id, agent_id, step_seq, kind, epoch, created_at)
         SELECT step, agent, 1, 'model', 1, now() FROM bench_ids;
         INSERT INTO holdfast.inputs (id, project_id, agent_id, content, consumed_at, created_at)
         SELECT input, '{project}', agent, '\"Hello.\"', now(), now() FROM bench_ids;
         INSERT INTO holdfast.messages (agent_id, seq, id, role, content, step_id, input_id, created_at)
         SELECT agent, m, ('4' || lpad(to_hex(g * 2 + m), 31, '0'))::uuid,
                CASE m WHEN 1 THEN 'user' ELSE 'assistant' END,
                '[{{\"type\": \"text\", \"text\": \"Hello.\"}}]', step,
                CASE m WHEN 1 THEN input END, now()
           FROM bench_ids, generate_series(1, 2) m;
         INSERT INTO holdfast.tool_calls (id, agent_id, step_id, position, provider_id, name, input,
                                          kind, status, output, is_error, completed_at, created_at)
         SELECT ('6' || lpad(to_hex(g), 31, '0'))::uuid, agent, step, 0, 'toolu_' || g, 'lookup',
                '{{\"q\": \"x\"}}', 'custom', 'completed', '{{\"answer\": 42}}', false, now(), now()
           FROM bench_ids;
         INSERT INTO holdfast.events (agent_id, seq, id, type, data, created_at)
         SELECT agent, s, ('2' || lpad(to_hex(g * {events_per_agent} + s), 31, '0'))::uuid,
                (ARRAY['input.received', 'turn.started', 'model.response', 'tool_call.created',
                       'tool_call.completed', 'model.response', 'turn.completed'])[1 + (s - 1) % 7],
                '{{\"bench\": true, \"text\": \"Hello from a finished agent.\"}}', now()
           FROM bench_ids, generate_series(1, {events_per_agent}) s;
         COMMIT;",
        config = config.to_string().replace('\'', "''"),
    );
    client.batch_execute(&transaction).await?;
    Ok(())
}

/// Warm up, then `samples` claim/release cycles; their latencies.
async fn claim_cycles(claimer: &Client, samples: usize) -> Result<(Samples, Samples)> {
    let mut claims = Samples::new();
    let mut releases = Samples::new();
    for i in 0..WARMUP + samples {
        let started = Instant::now();
        let claimed = store::claim_agents(claimer, "bench-claimer", 1, TTL).await?;
        let claim_time = started.elapsed();
        let Some(claim) = claimed.first().copied() else {
            bail!("claim {i} found no ready agent");
        };
        let started = Instant::now();
        store::release_agent(claimer, claim, None).await?;
        if i >= WARMUP {
            claims.push(claim_time);
            releases.push(started.elapsed());
        }
    }
    Ok((claims, releases))
}

/// EXPLAIN ANALYZE of claim_agents' candidate reads (the first
/// project head of the skip scan, then that project's oldest-ready agent),
/// in a rolled-back transaction: it locks what it finds. `now()` stands in
/// for the function's `v_now`, a plan parameter there as here.
async fn claim_plan(admin: &Client) -> Result<Value> {
    admin.batch_execute("BEGIN").await?;
    let rows = admin
        .query(
            "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF)
             SELECT a.id FROM holdfast.agents a
              WHERE a.project_id = (SELECT h.project_id FROM holdfast.agents h
                                     WHERE h.state = 'ready'
                                     ORDER BY h.project_id, greatest(h.run_after, h.state_changed_at), h.id
                                     LIMIT 1)
                AND a.state = 'ready' AND greatest(a.run_after, a.state_changed_at) <= now()
              ORDER BY greatest(a.run_after, a.state_changed_at), a.id
              LIMIT 1
                FOR UPDATE SKIP LOCKED",
            &[],
        )
        .await;
    admin.batch_execute("ROLLBACK").await?;
    let lines: Vec<String> = rows?.iter().map(|r| r.get(0)).collect();
    Ok(json!(lines))
}
