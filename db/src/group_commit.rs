//! Group commit: writes that arrive within a short window share one
//! transaction. With fsync on, every commit waits for its WAL flush (and a
//! commit that NOTIFYs takes its turn at the notify queue lock), so N writes
//! in one commit pay those once instead of N times.
//!
//! The worker groups its model steps ([`crate::store::commit_model_step_batch`]),
//! the API its tool results ([`crate::store::submit_tool_results`]) and
//! inputs ([`crate::store::create_inputs`]). Each kind is a
//! [`GroupWrite`]: its batch function is set-based SQL that checks and
//! refuses each row on its own, so every caller gets the outcome a commit
//! of its own would have had, whoever shared its transaction.

use std::future::Future;
use std::time::Duration;

use deadpool_postgres::Pool;
use tokio::sync::{mpsc, oneshot};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;
use uuid::Uuid;

use crate::{Error, Result};

/// How writes are grouped into commits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupCommit {
    /// How long the first waiting write waits for others to join its commit
    /// (zero: only the writes already waiting).
    pub window: Duration,
    /// Most writes in one commit (1 turns grouping off). A full batch
    /// commits at once, without waiting out the window.
    pub batch: usize,
}

impl Default for GroupCommit {
    fn default() -> Self {
        GroupCommit {
            window: Duration::from_millis(2),
            batch: 32,
        }
    }
}

/// One kind of write that can be committed in groups.
pub trait GroupWrite: Send + Sync + 'static {
    /// One write, as its caller hands it in.
    type Item: Send + 'static;
    /// What a write's caller gets back when it was saved.
    type Saved: Send + 'static;
    /// The write's kind in the `holdfast_commit_batch_size{kind}` metric.
    const KIND: &'static str;
    /// What every batch is committed with, given once to
    /// [`GroupCommitter::start`] (the worker's lease ttl, say).
    type Context: Clone + Send + Sync + 'static;

    /// Writes with the same key never share a batch: the later one goes
    /// into the next (a stale step of an earlier lease, fenced by its own
    /// epoch; a second result for one tool call, which then sees the first).
    fn key(item: &Self::Item) -> Uuid;

    /// Commit `items` in one transaction. Returns each item's outcome in
    /// `items`' order; `Err` only when the whole batch failed and nothing of
    /// it was saved.
    fn commit_batch(
        pool: &Pool,
        context: &Self::Context,
        items: &[Self::Item],
    ) -> impl Future<Output = Result<Vec<Result<Self::Saved>>>> + Send;
}

/// A write that was not saved: why, and the write itself, handed back so
/// its caller can try again without having kept a copy.
#[derive(Debug)]
pub struct Refused<T> {
    pub error: Error,
    /// `None` only when the committing task ended with the write in hand.
    pub item: Option<T>,
}

/// What a write's caller gets: saved, or refused with the write back.
type Outcome<W> = std::result::Result<<W as GroupWrite>::Saved, Refused<<W as GroupWrite>::Item>>;

/// A write waiting for its commit, and where its outcome goes.
struct Pending<W: GroupWrite> {
    item: W::Item,
    outcome: oneshot::Sender<Outcome<W>>,
}

/// The handle writes commit through. The committing task ends, after its
/// last commit, once every handle is dropped.
pub struct GroupCommitter<W: GroupWrite> {
    queue: mpsc::Sender<Pending<W>>,
}

impl<W: GroupWrite> Clone for GroupCommitter<W> {
    fn clone(&self) -> Self {
        GroupCommitter {
            queue: self.queue.clone(),
        }
    }
}

impl<W: GroupWrite> GroupCommitter<W> {
    /// Start the committing task on `pool`.
    pub fn start(pool: Pool, settings: GroupCommit, context: W::Context) -> (Self, JoinHandle<()>) {
        let (queue, waiting) = mpsc::channel(settings.batch.max(1) * 4);
        let task = tokio::spawn(run::<W>(pool, settings, context, waiting));
        (GroupCommitter { queue }, task)
    }

    /// Save `item` (with whichever writes join its commit). Returns what a
    /// commit of its own would have returned.
    pub async fn commit(&self, item: W::Item) -> Result<W::Saved> {
        self.try_commit(item).await.map_err(|refused| refused.error)
    }

    /// As [`GroupCommitter::commit`], with a refused write handed back.
    pub async fn try_commit(&self, item: W::Item) -> Outcome<W> {
        let (outcome, answer) = oneshot::channel();
        if let Err(unsent) = self.queue.send(Pending { item, outcome }).await {
            return Err(Refused {
                error: stopped(),
                item: Some(unsent.0.item),
            });
        }
        answer.await.unwrap_or_else(|_| {
            Err(Refused {
                error: stopped(),
                item: None,
            })
        })
    }
}

fn stopped() -> Error {
    Error::Pool("the group committer has stopped".into())
}

/// Collect batches and commit each on its own task, so a batch collects
/// while the one before waits for its WAL flush.
async fn run<W: GroupWrite>(
    pool: Pool,
    settings: GroupCommit,
    context: W::Context,
    mut waiting: mpsc::Receiver<Pending<W>>,
) {
    let mut commits = JoinSet::new();
    let mut next: Vec<Pending<W>> = Vec::new();
    loop {
        // What waited for an earlier batch goes first, one write per key.
        let mut batch: Vec<Pending<W>> = Vec::new();
        for pending in std::mem::take(&mut next) {
            if batch.len() < settings.batch && !has_key::<W>(&batch, &pending) {
                batch.push(pending);
            } else {
                next.push(pending);
            }
        }
        if batch.is_empty() {
            match waiting.recv().await {
                Some(pending) => batch.push(pending),
                None => break,
            }
        }
        let deadline = Instant::now() + settings.window;
        while batch.len() < settings.batch {
            tokio::select! {
                biased;
                pending = waiting.recv() => match pending {
                    Some(pending) if has_key::<W>(&batch, &pending) => {
                        next.push(pending);
                    }
                    Some(pending) => batch.push(pending),
                    None => break,
                },
                _ = tokio::time::sleep_until(deadline) => break,
            }
        }
        commits.spawn(commit::<W>(pool.clone(), context.clone(), batch));
        while commits.try_join_next().is_some() {}
    }
    while commits.join_next().await.is_some() {}
}

/// A write its batch function returned no outcome for.
fn lost_write() -> Error {
    Error::Pool("the group commit lost a write".into())
}

fn has_key<W: GroupWrite>(batch: &[Pending<W>], pending: &Pending<W>) -> bool {
    let key = W::key(&pending.item);
    batch.iter().any(|p| W::key(&p.item) == key)
}

/// Commit one batch and answer each of its writes. When the batch fails as
/// a whole (a deadlock with some other transaction, a lost connection),
/// nothing of it was saved: each write is then committed on its own, so one
/// write's trouble is never another's outcome.
async fn commit<W: GroupWrite>(pool: Pool, context: W::Context, batch: Vec<Pending<W>>) {
    metrics::histogram!("holdfast_commit_batch_size", "kind" => W::KIND).record(batch.len() as f64);
    let (items, senders): (Vec<W::Item>, Vec<_>) =
        batch.into_iter().map(|p| (p.item, p.outcome)).unzip();
    match W::commit_batch(&pool, &context, &items).await {
        Ok(outcomes) => {
            let mut outcomes = outcomes.into_iter();
            for (item, sender) in items.into_iter().zip(senders) {
                let outcome = outcomes.next().unwrap_or_else(|| Err(lost_write()));
                let _ = sender.send(handed_back::<W>(outcome, item));
            }
        }
        Err(error) if items.len() == 1 => {
            if let (Some(item), Some(sender)) =
                (items.into_iter().next(), senders.into_iter().next())
            {
                let _ = sender.send(handed_back::<W>(Err(error), item));
            }
        }
        Err(error) => {
            tracing::warn!(%error, kind = W::KIND, writes = items.len(), "group commit failed: committing its writes one by one");
            for (item, sender) in items.into_iter().zip(senders) {
                let outcome = W::commit_batch(&pool, &context, std::slice::from_ref(&item))
                    .await
                    .and_then(|mut outcomes| outcomes.pop().unwrap_or_else(|| Err(lost_write())));
                let _ = sender.send(handed_back::<W>(outcome, item));
            }
        }
    }
}

/// `outcome` for its caller, with `item` handed back when it was refused.
fn handed_back<W: GroupWrite>(outcome: Result<W::Saved>, item: W::Item) -> Outcome<W> {
    outcome.map_err(|error| Refused {
        error,
        item: Some(item),
    })
}
