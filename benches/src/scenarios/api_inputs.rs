//! `api_inputs`: `POST /v1/agents/{id}/inputs` throughput through
//! the real `holdfast api`, from N concurrent HTTP clients (keep-alive),
//! each input with its own `Idempotency-Key`, spread over many agents. No
//! worker runs. Baseline: `pgbench -N` tps in the same run (an input is
//! one write transaction, as a pgbench -N transaction is).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use holdfast_client::{Answer, CallError, Client, Retry};
use holdfast_db::store;
use holdfast_wire::api::inputs::{InputRequest, InputView};
use holdfast_wire::domain::InputMode;
use serde_json::json;
use uuid::Uuid;

use super::agent_config;
use crate::fleet::Fleet;
use crate::postgres::connect_to;
use crate::processes::{children_cpu_ticks, ticks_per_second};
use crate::stats::{ratio, round3, Samples};
use crate::{Bench, Outcome};

const DB: &str = "bench_inputs";

pub async fn run(bench: &Bench) -> Result<Outcome> {
    let clients = bench.pick(bench.opts.http_clients, 32, 8);
    let seconds = bench.pick(bench.opts.seconds, 10, 2);
    let agent_count = bench.pick(bench.opts.agents, 256, 16);

    let config = bench.fresh_database(DB).await?;
    let baseline = bench.pgbench().await?;
    let admin = connect_to(&config).await?;
    let key = store::create_api_key(&admin, "bench").await?;
    let mut agents = Vec::with_capacity(agent_count);
    for _ in 0..agent_count {
        agents.push(store::create_agent(&admin, key.project_id, &agent_config()).await?);
    }
    let agents = Arc::new(agents);
    let fleet = Fleet::new(bench, DB, None);
    let (api, base) = fleet.api("bench-inputs-api").await?;

    let http = holdfast_outbound::client_builder().http1_only().build()?;
    let http_api = Client::with_http(http, &base, &key.key);
    let input = Arc::new(InputRequest {
        content: json!("Hello from the benchmark."),
        mode: InputMode::Steer,
    });
    let postmaster = bench.cluster.postmaster_pid();
    let pg_ticks_before = postmaster.map_or(0, children_cpu_ticks);
    let api_ticks_before = api.cpu_ticks()?;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(u64::from(seconds));
    let mut tasks = Vec::with_capacity(clients);
    for c in 0..clients {
        let (http_api, agents, input) = (http_api.clone(), agents.clone(), input.clone());
        tasks.push(tokio::spawn(async move {
            let mut latency = Samples::new();
            let mut failures = 0u64;
            let mut i = c;
            while Instant::now() < deadline {
                let agent = agents[i % agents.len()];
                i += clients;
                let sent = Instant::now();
                // Once: a retry would hide a failure and blur the latency.
                let sent_input: Result<Answer<InputView>, CallError> = http_api
                    .post(
                        &format!("/v1/agents/{agent}/inputs"),
                        &*input,
                        Retry::Once,
                        Some(&Uuid::new_v4().to_string()),
                    )
                    .await;
                match sent_input {
                    Ok(_) => latency.push(sent.elapsed()),
                    Err(CallError::Api(_)) => failures += 1,
                    Err(e) => return Err(e.into()),
                }
            }
            anyhow::Ok((latency, failures))
        }));
    }
    let mut latency = Samples::new();
    let mut failures = 0;
    for task in tasks {
        let (l, f) = task.await??;
        latency.extend(&l);
        failures += f;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let api_ticks = api.cpu_ticks()?.saturating_sub(api_ticks_before);
    let pg_ticks = postmaster
        .map_or(0, children_cpu_ticks)
        .saturating_sub(pg_ticks_before);
    api.stop(Duration::from_secs(10)).await?;

    let saved: i64 = admin
        .query_one("SELECT count(*) FROM holdfast.inputs", &[])
        .await?
        .get(0);
    if saved as usize != latency.len() {
        bail!(
            "{} inputs answered 2xx, {saved} in the database",
            latency.len()
        );
    }
    let per_sec = latency.len() as f64 / elapsed;
    let pgbench_tps = baseline["pgbench_tps"].as_f64().unwrap_or(f64::NAN);
    let ticks = ticks_per_second();
    let inputs = latency.len().max(1) as f64;
    Ok(Outcome {
        params: json!({
            "http_clients": clients,
            "seconds": seconds,
            "agents": agent_count,
            "request": "POST /v1/agents/{id}/inputs with a fresh Idempotency-Key, HTTP/1.1 keep-alive",
        }),
        metrics: json!({
            "inputs": latency.len(),
            "failed_requests": failures,
            "inputs_per_sec": round3(per_sec),
            "latency": latency.summary(),
            "api_cpu_ms_per_input": round3(api_ticks as f64 / ticks * 1000.0 / inputs),
            "postgres_cpu_ms_per_input": round3(pg_ticks as f64 / ticks * 1000.0 / inputs),
            "ratio_inputs_per_sec_to_pgbench_tps": ratio(per_sec, pgbench_tps),
        }),
        baseline,
    })
}
