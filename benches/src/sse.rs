//! Many SSE clients on one agent's `GET /v1/agents/{id}/stream`: each a
//! task on its own HTTP connection that records when every saved event
//! (`id: SEQ`) arrives. Opened with the shared API client and read with
//! holdfast-outbound's SSE decoder, as the CLI and the demo read streams.

use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use holdfast_client::Client;
use holdfast_outbound::sse::SseDecoder;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinHandle;
use uuid::Uuid;

/// Streams opened at once (the API authenticates and catches up each one).
const CONNECT_AT_ONCE: usize = 32;
const OPEN_LIMIT: Duration = Duration::from_secs(120);

/// One event's arrival at one client.
pub type Arrival = (i64, Instant);

pub struct StreamClients {
    tasks: Vec<JoinHandle<Result<Vec<Arrival>>>>,
    stop: watch::Sender<bool>,
    /// The highest seq each client has received.
    highest: Arc<Vec<AtomicI64>>,
    pub connect_time: Duration,
}

impl StreamClients {
    /// Open `n` streams on `agent` and return once every one has its
    /// response headers (it is registered with the API's fan-out by then).
    pub async fn open(base: &str, key: &str, agent: Uuid, n: usize) -> Result<StreamClients> {
        let http = holdfast_outbound::client_builder().http1_only().build()?;
        let api = Client::with_http(http, base, key);
        let (stop, stop_rx) = watch::channel(false);
        let highest: Arc<Vec<AtomicI64>> = Arc::new((0..n).map(|_| AtomicI64::new(0)).collect());
        // Streams past their headers, and streams that failed to open.
        let opened = Arc::new(AtomicUsize::new(0));
        let failed = Arc::new(AtomicUsize::new(0));
        let (settled_tx, mut settled_rx) = watch::channel(0usize);
        let gate = Arc::new(Semaphore::new(CONNECT_AT_ONCE));
        let started = Instant::now();
        let mut tasks = Vec::with_capacity(n);
        for i in 0..n {
            let api = api.clone();
            let mut stop_rx = stop_rx.clone();
            let highest = highest.clone();
            let (opened, failed, settled_tx) = (opened.clone(), failed.clone(), settled_tx.clone());
            let gate = gate.clone();
            tasks.push(tokio::spawn(async move {
                let response = async {
                    let _permit = gate.acquire_owned().await?;
                    let response = api
                        .open_stream(agent, 0)
                        .await
                        .map_err(|e| anyhow!("stream {i}: {e}"))?;
                    anyhow::Ok(response)
                }
                .await;
                let counter = if response.is_ok() { &opened } else { &failed };
                counter.fetch_add(1, Ordering::SeqCst);
                settled_tx.send_modify(|settled| *settled += 1);
                let mut response = response?;
                let mut arrivals = Vec::new();
                let mut decoder = SseDecoder::default();
                loop {
                    let chunk = tokio::select! {
                        chunk = response.chunk() => chunk?,
                        _ = stop_rx.changed() => break,
                    };
                    let Some(chunk) = chunk else {
                        bail!("stream {i}: the server ended the stream");
                    };
                    let now = Instant::now();
                    let saved = decoder
                        .push(&chunk)
                        .into_iter()
                        .filter_map(|event| event.id?.parse().ok());
                    for seq in saved {
                        arrivals.push((seq, now));
                        highest[i].fetch_max(seq, Ordering::SeqCst);
                    }
                }
                Ok(arrivals)
            }));
        }
        let settled =
            tokio::time::timeout(OPEN_LIMIT, settled_rx.wait_for(|settled| *settled >= n)).await;
        if settled.is_err() || failed.load(Ordering::SeqCst) > 0 {
            let _ = stop.send(true);
            let mut first_error = None;
            for task in tasks {
                if task.is_finished() {
                    if let Ok(Err(e)) = task.await {
                        first_error.get_or_insert(e);
                    }
                } else {
                    task.abort();
                }
            }
            let opened = opened.load(Ordering::SeqCst);
            return Err(match first_error {
                Some(e) => e.context(format!("{opened} of {n} streams opened")),
                None => anyhow!("only {opened} of {n} streams opened within {OPEN_LIMIT:?}"),
            });
        }
        Ok(StreamClients {
            tasks,
            stop,
            highest,
            connect_time: started.elapsed(),
        })
    }

    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Wait until every client has received `seq` (or `limit` passes).
    /// Returns how many have not.
    pub async fn wait_all_received(&self, seq: i64, limit: Duration) -> usize {
        let deadline = Instant::now() + limit;
        loop {
            let behind = self
                .highest
                .iter()
                .filter(|h| h.load(Ordering::SeqCst) < seq)
                .count();
            if behind == 0 || Instant::now() > deadline {
                return behind;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Close every stream; each client's arrivals.
    pub async fn close(self) -> Result<Vec<Vec<Arrival>>> {
        let _ = self.stop.send(true);
        let mut out = Vec::with_capacity(self.tasks.len());
        for task in self.tasks {
            out.push(task.await.map_err(|e| anyhow!("stream task: {e}"))??);
        }
        Ok(out)
    }
}
