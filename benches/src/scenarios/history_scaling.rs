//! `history_scaling`: do claim and commit slow down as the timeline grows?
//! Stage by stage, finished agents with 100 events each are generated with
//! `generate_series` in bulk (triggers off: `session_replication_role =
//! replica`), their `created_at` spread over the eight weeks before now, so
//! the history sits in eight weekly partitions of `events` as it would
//! after two months. Each stage is vacuumed, analysed and
//! checkpointed, then the driver times, on one session, while 64 live
//! agents take turns: `holdfast.claim_agents(worker, 1, ttl)` and the
//! claimed agent's `holdfast.commit_model_step` (a text answer that ends
//! the turn, appending its events); a new input (untimed) makes the agent
//! ready again. The first stage (no history) is the same-run baseline.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use holdfast_db::store;
use holdfast_wire::domain::ModelStep;
use serde_json::json;
use tokio_postgres::Client;
use uuid::Uuid;

use super::{agent_config, target};
use crate::postgres::connect_to;
use crate::stats::{ratio, round3, Samples};
use crate::{Bench, Outcome};

const DB: &str = "bench_history";
const LIVE_AGENTS: usize = 64;
const WARMUP: usize = 50;
const TTL: Duration = Duration::from_secs(60);
/// Weeks the generated history is spread over (one partition each).
const WEEKS: i64 = 8;
/// Events generated per statement.
const CHUNK_EVENTS: i64 = 1_000_000;

pub async fn run(bench: &Bench) -> Result<Outcome> {
    let sizes = bench.pick(
        bench.opts.sizes.clone(),
        vec![0, 10_000_000, 20_000_000],
        vec![0, 100_000, 1_000_000],
    );
    if sizes.is_empty() || sizes.windows(2).any(|w| w[0] >= w[1]) {
        bail!("--sizes must be ascending");
    }
    let events_per_agent = bench.pick(bench.opts.events_per_agent, 100, 100).max(1) as i64;
    let samples = bench.pick(bench.opts.samples, 1000, 200);

    let config = bench.fresh_database(DB).await?;
    let admin = connect_to(&config).await?;
    admin
        .execute(
            "SELECT holdfast.ensure_event_partitions(holdfast.now() - $1 * interval '1 week', holdfast.now())",
            &[&(WEEKS as f64 + 1.0)],
        )
        .await
        .context("creating the history's partitions")?;
    let project = store::ensure_project(&admin, "bench").await?;
    let mut pending = HashMap::new();
    for _ in 0..LIVE_AGENTS {
        let agent = store::create_agent(&admin, project, &agent_config()).await?;
        let input = store::create_input(&admin, agent, &json!("ready"), None).await?;
        pending.insert(agent, input.input_id);
    }
    let session = connect_to(&config).await?;
    let loader = connect_to(&config).await?;
    loader
        .batch_execute("SET session_replication_role = replica")
        .await?;

    let mut stages = Vec::new();
    let mut loaded: i64 = 0;
    let mut agents_loaded: i64 = 0;
    let (mut first, mut last) = ((f64::NAN, f64::NAN), (f64::NAN, f64::NAN));
    for &size in &sizes {
        let load_started = Instant::now();
        while loaded < size as i64 {
            let events = CHUNK_EVENTS.min(size as i64 - loaded);
            let agents = (events / events_per_agent).max(1);
            load_history(
                &loader,
                project,
                agents_loaded + 1,
                agents_loaded + agents,
                events_per_agent,
            )
            .await?;
            agents_loaded += agents;
            loaded += agents * events_per_agent;
        }
        admin
            .batch_execute("VACUUM (ANALYZE) holdfast.agents, holdfast.events")
            .await?;
        admin.batch_execute("CHECKPOINT").await?;
        let load_seconds = load_started.elapsed().as_secs_f64();

        let (claims, commits) = cycles(&session, &mut pending, samples).await?;
        let row = admin
            .query_one(
                "SELECT (SELECT count(*) FROM holdfast.events),
                        (SELECT count(*) FROM holdfast.event_partitions()),
                        (SELECT coalesce(sum(pg_total_relation_size(i.inhrelid)), 0)::bigint
                           FROM pg_inherits i WHERE i.inhparent = 'holdfast.events'::regclass),
                        pg_database_size(current_database())",
                &[],
            )
            .await?;
        if first.0.is_nan() {
            first = (claims.p50(), commits.p50());
        }
        last = (claims.p50(), commits.p50());
        stages.push(json!({
            "history_events": size,
            "events_rows": row.get::<_, i64>(0),
            "partitions": row.get::<_, i64>(1),
            "events_bytes": row.get::<_, i64>(2),
            "database_bytes": row.get::<_, i64>(3),
            "load_seconds": round3(load_seconds),
            "claim": claims.summary(),
            "commit": commits.summary(),
        }));
    }
    drop(loader);
    drop(session);
    drop(admin);
    bench.cluster.drop_database(DB).await?;

    let claim_ratio = last.0 / first.0;
    let commit_ratio = last.1 / first.1;
    let mut metrics = json!({
        "stages": stages,
        "claim_ratio_p50_largest_to_none": ratio(last.0, first.0),
        "commit_ratio_p50_largest_to_none": ratio(last.1, first.1),
    });
    metrics["target"] = target(
        "claim and commit p50 with the largest history / with none < 1.5",
        claim_ratio < 1.5 && commit_ratio < 1.5,
    );
    Ok(Outcome {
        params: json!({
            "sizes": sizes,
            "events_per_agent": events_per_agent,
            "weeks": WEEKS,
            "live_agents": LIVE_AGENTS,
            "cycles_per_stage": samples,
            "cycle": "holdfast.claim_agents(worker, 1, '60s'), then holdfast.commit_model_step (text, ends the turn) on one session; then holdfast.create_input (untimed)",
        }),
        metrics,
        baseline: json!({
            "history_events": sizes[0],
            "claim_p50_ms": round3(first.0),
            "commit_p50_ms": round3(first.1),
        }),
    })
}

/// Finished agents `from..=to`, each with `events_per_agent` events spread
/// over the last WEEKS weeks, in one transaction. Ids are made from the row
/// number, ascending like UUIDv7s.
async fn load_history(
    client: &Client,
    project: Uuid,
    from: i64,
    to: i64,
    events_per_agent: i64,
) -> Result<()> {
    let config = agent_config().to_string().replace('\'', "''");
    let transaction = format!(
        "BEGIN;
         INSERT INTO holdfast.agents (id, project_id, config, state, turn_open, last_event_seq,
                                      lease_epoch, run_after, state_changed_at, created_at, updated_at)
         SELECT ('1' || lpad(to_hex(g), 31, '0'))::uuid, '{project}', '{config}', 'idle', false,
                {events_per_agent}, 1, now(), now(), now() - interval '{WEEKS} weeks', now()
           FROM generate_series({from}::bigint, {to}::bigint) g;
         INSERT INTO holdfast.events (agent_id, seq, id, type, data, created_at)
         SELECT ('1' || lpad(to_hex(g), 31, '0'))::uuid, s,
                ('2' || lpad(to_hex(g * {events_per_agent} + s), 31, '0'))::uuid,
                (ARRAY['input.received', 'turn.started', 'model.response', 'tool_call.created',
                       'tool_call.completed', 'model.response', 'turn.completed'])[1 + (s - 1) % 7],
                '{{\"bench\": true, \"text\": \"Hello from a finished agent.\"}}',
                now() - (1 + g % {WEEKS}) * interval '1 week' + s * interval '1 second'
           FROM generate_series({from}::bigint, {to}::bigint) g, generate_series(1, {events_per_agent}) s;
         COMMIT;"
    );
    client.batch_execute(&transaction).await?;
    Ok(())
}

/// Warm up, then `samples` claim + commit cycles; their latencies.
async fn cycles(
    session: &Client,
    pending: &mut HashMap<Uuid, Uuid>,
    samples: usize,
) -> Result<(Samples, Samples)> {
    let mut claims = Samples::new();
    let mut commits = Samples::new();
    for i in 0..WARMUP + samples {
        let started = Instant::now();
        let claimed = store::claim_agents(session, "bench-history", 1, TTL).await?;
        let claim_time = started.elapsed();
        let Some(claim) = claimed.first().copied() else {
            bail!("claim {i} found no ready agent");
        };
        let input = pending
            .remove(&claim.agent_id)
            .context("a claimed agent has a pending input")?;
        let step = ModelStep {
            input_ids: vec![input],
            message: vec![json!({"type": "text", "text": "Done."})],
            tool_calls: vec![],
            usage: json!({"input_tokens": 10, "output_tokens": 2}),
            stop_reason: Some("end_turn".into()),
            config_version: None,
        };
        let started = Instant::now();
        store::commit_model_step(session, claim, &step).await?;
        let commit_time = started.elapsed();
        let next = store::create_input(session, claim.agent_id, &json!("again"), None).await?;
        pending.insert(claim.agent_id, next.input_id);
        if i >= WARMUP {
            claims.push(claim_time);
            commits.push(commit_time);
        }
    }
    Ok((claims, commits))
}
