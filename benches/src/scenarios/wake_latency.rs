//! `wake_latency`: with every worker idle (blocked on LISTEN), commit an
//! input and time until the step starts: until the worker's model request
//! arrives at the fake provider (claim, context load and request building
//! included). `wake_after_commit_ack` is timed from when the driver has
//! the commit's acknowledgement: "commit → step started", what the target
//! is about (it errs short by the ack's trip back, tens of µs on a
//! socket). `wake` is timed from just before the input's statement is
//! sent, so it adds running `create_input` and its round trips
//! (`input_commit`). Samples are sequential, 10–30 ms apart, each on an
//! agent whose previous turn has finished.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use holdfast_db::store;
use holdfast_fakes::FakeProvider;
use rand::Rng;
use serde_json::json;
use tokio_postgres::Client;
use uuid::Uuid;

use super::{agent_config, target};
use crate::fleet::Fleet;
use crate::postgres::{connect_to, notify_round_trip};
use crate::stats::Samples;
use crate::{Bench, Outcome};

const DB: &str = "bench_wake";
const AGENTS: usize = 16;
const WAIT_LIMIT: Duration = Duration::from_secs(20);

pub async fn run(bench: &Bench) -> Result<Outcome> {
    let samples = bench.pick(bench.opts.samples, 1000, 100);
    let workers = bench.pick(bench.opts.workers, 2, 2);
    let concurrency = bench.pick(bench.opts.concurrency, 32, 8);

    let config = bench.fresh_database(DB).await?;
    let notify = notify_round_trip(&config, samples).await?;

    let fake = FakeProvider::start().await;
    let admin = connect_to(&config).await?;
    let project = store::ensure_project(&admin, "bench").await?;
    let mut agents = Vec::with_capacity(AGENTS);
    for _ in 0..AGENTS {
        agents.push(store::create_agent(&admin, project, &agent_config()).await?);
    }
    let fleet = Fleet::new(bench, DB, Some(&fake));
    let mut procs = Vec::new();
    for i in 0..workers {
        procs.push(
            fleet
                .worker(&admin, &format!("bench-wake-w{i}"), concurrency, &[])
                .await?,
        );
    }

    let committer = connect_to(&config).await?;
    let mut latency = Samples::new();
    let mut commit = Samples::new();
    let mut after_commit = Samples::new();
    for i in 0..samples {
        let agent = agents[i % AGENTS];
        wait_idle(&admin, agent).await?;
        let gap = rand::rng().random_range(10..=30);
        tokio::time::sleep(Duration::from_millis(gap)).await;
        let expected = fake.request_count() + 1;
        let started = Instant::now();
        store::create_input(&committer, agent, &json!("ping"), None).await?;
        let committed = Instant::now();
        tokio::time::timeout(WAIT_LIMIT, fake.wait_for_requests(expected))
            .await
            .map_err(|_| anyhow!("sample {i}: no model request within {WAIT_LIMIT:?}"))?;
        let arrived = Instant::now();
        commit.push(committed - started);
        latency.push(arrived - started);
        after_commit.push(arrived.saturating_duration_since(committed));
    }
    for p in procs {
        p.stop(Duration::from_secs(30)).await?;
    }

    let mut metrics = json!({
        "wake": latency.summary(),
        "wake_after_commit_ack": after_commit.summary(),
        "input_commit": commit.summary(),
    });
    metrics["target"] = target(
        "wake p50 < 5 ms and p99 < 20 ms (from the commit: wake_after_commit_ack)",
        after_commit.p50() < 5.0 && after_commit.p99() < 20.0,
    );
    Ok(Outcome {
        params: json!({
            "samples": samples,
            "workers": workers,
            "concurrency": concurrency,
            "poll_interval": "1s (default)",
            "step_start": "the model request arrives at the fake provider",
        }),
        metrics,
        baseline: json!({
            "notify_round_trip": notify.summary(),
            "what": "pg_notify committed on one session until a LISTENing session of the driver receives it",
        }),
    })
}

/// Wait until the agent's last turn has ended (a fresh input then starts a
/// new turn at once, and the workers are idle again).
async fn wait_idle(admin: &Client, agent: Uuid) -> Result<()> {
    let deadline = Instant::now() + WAIT_LIMIT;
    loop {
        let state: String = admin
            .query_one("SELECT state FROM holdfast.agents WHERE id = $1", &[&agent])
            .await?
            .get(0);
        if state == "idle" {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("agent {agent} still {state} after {WAIT_LIMIT:?}");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}
