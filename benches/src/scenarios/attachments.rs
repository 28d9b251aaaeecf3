//! `attachments`: what a model step costs the worker when its agent's
//! history holds images. One agent (Anthropic protocol) is sent N images
//! (distinct, incompressible PNG-signed bytes) in one turn, then S more
//! turns of text; every model call sends the whole history, so each of the
//! S + 1 requests carries all N images. Reported: the worker's peak
//! resident memory (VmHWM, which a step's transient buffers cannot hide
//! from) against its idle RSS, and the size of the requests the fake
//! provider received.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use base64::Engine;
use holdfast_db::store;
use holdfast_fakes::{FakeProvider, Protocol, Reply};
use serde_json::{json, Value};
use tokio_postgres::Client;
use uuid::Uuid;

use crate::fleet::Fleet;
use crate::postgres::connect_to;
use crate::processes::peak_rss_bytes;
use crate::stats::round3;
use crate::{Bench, Outcome};

const DB: &str = "bench_attachments";
const WORKER: &str = "bench-att-worker";
const TURN_LIMIT: Duration = Duration::from_secs(120);
const MIB: f64 = 1024.0 * 1024.0;

pub async fn run(bench: &Bench) -> Result<Outcome> {
    let images = bench.pick(bench.opts.images, 20, 4);
    let image_bytes = bench.pick(bench.opts.image_bytes, 1024 * 1024, 64 * 1024);
    let steps = bench.pick(bench.opts.steps, 10, 2);

    let config = bench.fresh_database(DB).await?;
    let admin = connect_to(&config).await?;
    let fake = FakeProvider::start().await;
    fake.set_default(Reply::text("Seen."));
    let fleet = Fleet::new(bench, DB, Some(&fake));
    let worker = fleet.worker(&admin, WORKER, 1, &[]).await?;
    let worker_idle = worker.rss_bytes()?;

    let key = store::create_api_key(&admin, "bench").await?;
    let agent = store::create_agent(
        &admin,
        key.project_id,
        &json!({"model": {"provider": "anthropic", "name": "bench-model", "max_tokens": 256}}),
    )
    .await?;
    let mut content = vec![json!({"type": "text", "text": "What is in these pictures?"})];
    content.extend((0..images).map(|_| image(image_bytes)));
    store::create_input(&admin, agent, &Value::Array(content), None).await?;
    let started = Instant::now();
    wait_for_turns(&admin, agent, 1).await?;
    for turn in 2..=steps + 1 {
        store::create_input(&admin, agent, &json!("And now?"), None).await?;
        wait_for_turns(&admin, agent, turn).await?;
    }
    let seconds_per_step = started.elapsed().as_secs_f64() / (steps + 1) as f64;
    let worker_peak = peak_rss_bytes(worker.pid())?;
    let worker_after = worker.rss_bytes()?;
    worker.stop(Duration::from_secs(10)).await?;

    let sizes: Vec<usize> = fake
        .requests()
        .into_iter()
        .filter(|r| r.protocol == Protocol::Anthropic)
        .map(|r| serde_json::to_vec(&r.body).map_or(0, |b| b.len()))
        .collect();
    if sizes.len() != steps + 1 {
        bail!("{} model requests for {} turns", sizes.len(), steps + 1);
    }
    let largest = sizes.iter().copied().max().unwrap_or(0);
    Ok(Outcome {
        params: json!({
            "images": images,
            "image_bytes": image_bytes,
            "model_steps": steps + 1,
            "worker_concurrency": 1,
            "rss": "VmRSS from /proc idle and after the last step; the peak is VmHWM",
            "request_bytes": "each request body the fake received, as compact JSON",
        }),
        metrics: json!({
            "worker_rss_idle_mib": round3(worker_idle as f64 / MIB),
            "worker_rss_peak_mib": round3(worker_peak as f64 / MIB),
            "worker_rss_after_mib": round3(worker_after as f64 / MIB),
            "worker_peak_over_idle_mib": round3(worker_peak.saturating_sub(worker_idle) as f64 / MIB),
            "request_mib_largest": round3(largest as f64 / MIB),
            "request_mib_first": round3(sizes[0] as f64 / MIB),
            "request_mib_last": round3(sizes[sizes.len() - 1] as f64 / MIB),
            "images_mib_raw": round3((images * image_bytes) as f64 / MIB),
            "seconds_per_step": round3(seconds_per_step),
        }),
        baseline: json!({
            "worker_rss_idle_mib": round3(worker_idle as f64 / MIB),
            "what": "the same worker idle, measured in this run",
        }),
    })
}

/// An image block of `bytes` random bytes behind a PNG signature.
fn image(bytes: usize) -> Value {
    let mut data = b"\x89PNG\r\n\x1a\n".to_vec();
    data.extend((8..bytes).map(|_| rand::random::<u8>()));
    let data = base64::engine::general_purpose::STANDARD.encode(data);
    json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}})
}

/// Wait until `agent` has completed `turns` turns.
async fn wait_for_turns(admin: &Client, agent: Uuid, turns: usize) -> Result<()> {
    let started = Instant::now();
    loop {
        let done: i64 = admin
            .query_one(
                "SELECT count(*) FROM holdfast.events WHERE agent_id = $1 AND type = 'turn.completed'",
                &[&agent],
            )
            .await?
            .get(0);
        if done as usize >= turns {
            return Ok(());
        }
        if started.elapsed() > TURN_LIMIT {
            bail!("turn {turns} of {agent} did not complete within {TURN_LIMIT:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
