//! Many SSE clients on one agent's `GET /v1/agents/{id}/stream`: each a
//! task on its own HTTP connection that records when every saved event
//! (`id: SEQ`) arrives.

use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
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
        let http = reqwest::Client::builder().http1_only().build()?;
        let url = format!("{base}/v1/agents/{agent}/stream");
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
            let request = http
                .get(&url)
                .bearer_auth(key)
                .header("accept", "text/event-stream");
            let mut stop_rx = stop_rx.clone();
            let highest = highest.clone();
            let (opened, failed, settled_tx) = (opened.clone(), failed.clone(), settled_tx.clone());
            let gate = gate.clone();
            tasks.push(tokio::spawn(async move {
                let response = async {
                    let _permit = gate.acquire_owned().await?;
                    let response = request.send().await?;
                    if !response.status().is_success() {
                        bail!("stream {i}: HTTP {}", response.status());
                    }
                    anyhow::Ok(response)
                }
                .await;
                let counter = if response.is_ok() { &opened } else { &failed };
                counter.fetch_add(1, Ordering::SeqCst);
                settled_tx.send_modify(|settled| *settled += 1);
                let mut response = response?;
                let mut arrivals = Vec::new();
                let mut buffer = String::new();
                loop {
                    let chunk = tokio::select! {
                        chunk = response.chunk() => chunk?,
                        _ = stop_rx.changed() => break,
                    };
                    let Some(chunk) = chunk else {
                        bail!("stream {i}: the server ended the stream");
                    };
                    let now = Instant::now();
                    buffer.push_str(&String::from_utf8_lossy(&chunk));
                    for seq in take_event_ids(&mut buffer) {
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

/// Remove the complete SSE messages from `buffer`; the ids they carry.
fn take_event_ids(buffer: &mut String) -> Vec<i64> {
    let mut ids = Vec::new();
    while let Some(end) = buffer.find("\n\n") {
        let message: String = buffer.drain(..end + 2).collect();
        for line in message.lines() {
            if let Some(id) = line.strip_prefix("id:") {
                if let Ok(seq) = id.trim().parse() {
                    ids.push(seq);
                }
            }
        }
    }
    ids
}

#[cfg(test)]
mod tests {
    use super::take_event_ids;

    #[test]
    fn ids_of_complete_messages_only() {
        let mut buffer =
            String::from(": hi\n\nid: 1\nevent: input.received\ndata: {}\n\nevent: delta\ndata: {\"text\":\"a\"}\n\nid: 2\nevent: x\n");
        assert_eq!(take_event_ids(&mut buffer), vec![1]);
        assert_eq!(buffer, "id: 2\nevent: x\n");
        buffer.push_str("data: {}\n\n");
        assert_eq!(take_event_ids(&mut buffer), vec![2]);
        assert!(buffer.is_empty());
    }
}
