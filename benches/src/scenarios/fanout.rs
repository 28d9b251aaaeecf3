//! `fanout`: N SSE clients on one agent through the real `holdfast api`.
//! The driver commits an input (one `input.received` event; the first one
//! also opens a turn) and times, per client, until the client has the
//! commit's first event: from just before the statement is sent
//! (`commit_to_client`), and from the commit's acknowledgement
//! (`commit_ack_to_client`). Commits are
//! sequential: the next one waits until every client has the previous.
//! No worker runs: the agent only collects inputs.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use holdfast_db::store;
use serde_json::json;

use super::agent_config;
use crate::fleet::Fleet;
use crate::postgres::{connect_to, notify_round_trip};
use crate::sse::StreamClients;
use crate::stats::{round3, Samples};
use crate::{Bench, Outcome};

const DB: &str = "bench_fanout";
const DELIVERY_LIMIT: Duration = Duration::from_secs(30);
const COMMIT_GAP: Duration = Duration::from_millis(100);

pub async fn run(bench: &Bench) -> Result<Outcome> {
    let clients = bench.pick(bench.opts.clients, 1000, 50);
    let commits = bench.pick(bench.opts.commits, 30, 5);

    let config = bench.fresh_database(DB).await?;
    let notify = notify_round_trip(&config, bench.pick(None, 200, 50)).await?;
    let admin = connect_to(&config).await?;
    let key = store::create_api_key(&admin, "bench").await?;
    let agent = store::create_agent(&admin, key.project_id, &agent_config()).await?;
    let fleet = Fleet::new(bench, DB, None);
    let (api, base) = fleet.api("bench-fanout-api").await?;
    let rss_idle = api.rss_bytes()?;

    let streams = StreamClients::open(&base, &key.key, agent, clients).await?;
    let rss_streams = api.rss_bytes()?;

    let committer = connect_to(&config).await?;
    // The first seq each commit produced, when it was sent, and when its
    // commit was acknowledged.
    let mut sent: Vec<(i64, Instant, Instant)> = Vec::with_capacity(commits);
    let mut last_seq = 0;
    let mut undelivered = 0;
    for k in 0..commits {
        tokio::time::sleep(COMMIT_GAP).await;
        let started = Instant::now();
        store::create_input(&committer, agent, &json!(format!("ping {k}")), None).await?;
        sent.push((last_seq + 1, started, Instant::now()));
        // Nothing else writes to this agent: the new seqs are this commit's.
        last_seq = store::last_event_seq(&admin, agent).await?.unwrap_or(0);
        undelivered += streams.wait_all_received(last_seq, DELIVERY_LIMIT).await;
    }
    let rss_after = api.rss_bytes()?;
    let cpu_ticks = api.cpu_ticks()?;
    let connect_time = streams.connect_time;
    let opened = streams.len();
    let arrivals = streams.close().await?;
    api.stop(Duration::from_secs(10)).await?;
    if undelivered > 0 {
        bail!("{undelivered} (client, commit) deliveries missing after {DELIVERY_LIMIT:?} each");
    }

    let mut delay = Samples::new();
    let mut after_ack = Samples::new();
    let mut slowest_client = Samples::new();
    let mut per_commit: HashMap<i64, f64> = HashMap::new();
    for client in &arrivals {
        let first_arrival: HashMap<i64, Instant> =
            client.iter().rev().map(|(seq, at)| (*seq, *at)).collect();
        for (seq, started, acked) in &sent {
            if let Some(at) = first_arrival.get(seq) {
                let ms = at.duration_since(*started).as_secs_f64() * 1000.0;
                delay.push_ms(ms);
                after_ack.push(at.saturating_duration_since(*acked));
                let slowest = per_commit.entry(*seq).or_insert(0.0);
                *slowest = slowest.max(ms);
            }
        }
    }
    for ms in per_commit.values() {
        slowest_client.push_ms(*ms);
    }
    let mib = 1024.0 * 1024.0;
    Ok(Outcome {
        params: json!({
            "clients": clients,
            "commits": commits,
            "commit_gap_ms": COMMIT_GAP.as_millis() as u64,
            "delay": "from just before the input's statement is sent until a client has read the event",
        }),
        metrics: json!({
            "streams_opened": opened,
            "open_all_streams_seconds": round3(connect_time.as_secs_f64()),
            "commit_to_client": delay.summary(),
            "commit_ack_to_client": after_ack.summary(),
            "commit_to_last_client": slowest_client.summary(),
            "api_rss_idle_mib": round3(rss_idle as f64 / mib),
            "api_rss_with_streams_mib": round3(rss_streams as f64 / mib),
            "api_rss_after_commits_mib": round3(rss_after as f64 / mib),
            "api_rss_per_stream_kib": round3((rss_streams.saturating_sub(rss_idle)) as f64 / 1024.0 / clients as f64),
            "api_cpu_seconds_total": round3(cpu_ticks as f64 / crate::processes::ticks_per_second()),
        }),
        baseline: json!({
            "notify_round_trip": notify.summary(),
            "what": "pg_notify committed on one session until a LISTENing session of the driver receives it: the floor under commit-to-client delay",
        }),
    })
}
