//! `memory`: resident memory (VmRSS, and its anonymous part) of one `holdfast worker` idle and with
//! N steps in flight at once (concurrency N, N agents, the fake provider
//! holding every model reply), and of `holdfast api` idle and with N open
//! SSE streams on one agent. Also what the worker's sessions cost Postgres:
//! the summed Pss of the cluster's backends, idle and in flight.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use holdfast_db::store;
use holdfast_fakes::{FakeProvider, Reply};
use serde_json::json;
use tokio_postgres::Client;

use super::{agent_config, target};
use crate::fleet::Fleet;
use crate::postgres::connect_to;
use crate::processes::{children_pss_bytes, Proc};
use crate::sse::StreamClients;
use crate::stats::round3;
use crate::{Bench, Outcome};

const DB: &str = "bench_memory";
const WORKER: &str = "bench-mem-worker";
const IN_FLIGHT_LIMIT: Duration = Duration::from_secs(120);
/// RSS is sampled this many times, 100 ms apart; the largest is reported.
const RSS_SAMPLES: usize = 10;
const MIB: f64 = 1024.0 * 1024.0;

pub async fn run(bench: &Bench) -> Result<Outcome> {
    let in_flight = bench.pick(bench.opts.in_flight, 1000, 100);
    let streams = bench.pick(bench.opts.streams, 1000, 100);

    let config = bench.fresh_database(DB).await?;
    let admin = connect_to(&config).await?;
    let fake = FakeProvider::start().await;
    fake.set_default(Reply::hang());
    let fleet = Fleet::new(bench, DB, Some(&fake));

    // Worker: idle, then with every step waiting on its model reply.
    let postmaster = bench.cluster.postmaster_pid();
    let worker = fleet.worker(&admin, WORKER, in_flight, &[]).await?;
    let worker_idle = peak_rss(&worker).await?;
    let postgres_idle = postmaster.map_or(0, children_pss_bytes);
    let key = store::create_api_key(&admin, "bench").await?;
    let mut inputs_client = connect_to(&config).await?;
    let tx = inputs_client.transaction().await?;
    for _ in 0..in_flight {
        let agent = store::create_agent(&tx, key.project_id, &agent_config()).await?;
        store::create_input(&tx, agent, &json!("Hang, please."), None).await?;
    }
    tx.commit().await?;
    let started = Instant::now();
    while fake.request_count() < in_flight {
        if started.elapsed() > IN_FLIGHT_LIMIT {
            bail!(
                "only {} of {in_flight} model requests arrived within {IN_FLIGHT_LIMIT:?}",
                fake.request_count()
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let all_in_flight_after = started.elapsed();
    let worker_busy = peak_rss(&worker).await?;
    let worker_sessions = sessions(&admin, WORKER).await?;
    let postgres_busy = postmaster.map_or(0, children_pss_bytes);
    let mut worker = worker;
    worker.kill()?;
    worker.wait_exit(Duration::from_secs(10)).await?;

    // API: idle, then with the streams open.
    let agent = store::create_agent(&admin, key.project_id, &agent_config()).await?;
    let (api, base) = fleet.api("bench-mem-api").await?;
    let api_idle = peak_rss(&api).await?;
    let clients = StreamClients::open(&base, &key.key, agent, streams).await?;
    let api_streams = peak_rss(&api).await?;
    clients.close().await?;
    api.stop(Duration::from_secs(10)).await?;

    let mut metrics = json!({
        "worker_rss_idle_mib": round3(worker_idle.total as f64 / MIB),
        "worker_rss_in_flight_mib": round3(worker_busy.total as f64 / MIB),
        "worker_rss_per_in_flight_step_kib": round3(worker_busy.total.saturating_sub(worker_idle.total) as f64 / 1024.0 / in_flight as f64),
        "worker_rss_anon_idle_mib": round3(worker_idle.anon as f64 / MIB),
        "worker_rss_anon_in_flight_mib": round3(worker_busy.anon as f64 / MIB),
        "worker_db_sessions_in_flight": worker_sessions,
        "postgres_pss_worker_idle_mib": round3(postgres_idle as f64 / MIB),
        "postgres_pss_in_flight_mib": round3(postgres_busy as f64 / MIB),
        "seconds_until_all_in_flight": round3(all_in_flight_after.as_secs_f64()),
        "api_rss_idle_mib": round3(api_idle.total as f64 / MIB),
        "api_rss_with_streams_mib": round3(api_streams.total as f64 / MIB),
        "api_rss_per_stream_kib": round3(api_streams.total.saturating_sub(api_idle.total) as f64 / 1024.0 / streams as f64),
        "api_rss_anon_idle_mib": round3(api_idle.anon as f64 / MIB),
        "api_rss_anon_with_streams_mib": round3(api_streams.anon as f64 / MIB),
    });
    metrics["target"] = target(
        "worker RSS < 64 MiB at 1,000 in-flight steps",
        (worker_busy.total as f64) < 64.0 * MIB,
    );
    Ok(Outcome {
        params: json!({
            "in_flight_steps": in_flight,
            "worker_concurrency": in_flight,
            "streams": streams,
            "rss": format!("VmRSS and RssAnon from /proc, the largest of {RSS_SAMPLES} samples 100 ms apart"),
        }),
        metrics,
        baseline: json!({
            "worker_rss_idle_mib": round3(worker_idle.total as f64 / MIB),
            "api_rss_idle_mib": round3(api_idle.total as f64 / MIB),
            "what": "the same processes idle, measured in this run",
        }),
    })
}

/// The largest VmRSS and the largest RssAnon of `RSS_SAMPLES` samples.
async fn peak_rss(process: &Proc) -> Result<Rss> {
    let mut peak = Rss { total: 0, anon: 0 };
    for _ in 0..RSS_SAMPLES {
        peak.total = peak.total.max(process.rss_bytes()?);
        peak.anon = peak.anon.max(process.rss_anon_bytes()?);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(peak)
}

/// A process's resident memory: VmRSS, and its anonymous part (heap and
/// stacks, without the binary's mapped pages).
struct Rss {
    total: u64,
    anon: u64,
}

/// Postgres sessions of a process (by application_name).
async fn sessions(admin: &Client, application_name: &str) -> Result<i64> {
    Ok(admin
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
            &[&application_name],
        )
        .await?
        .get(0))
}
