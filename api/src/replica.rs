//! The read replica (`HOLDFAST_READ_DATABASE_URL`): a streaming standby that
//! serves event listings and stream history, so that reads of timelines do
//! not load the primary.
//!
//! A standby lags. So that a client never misses its own write, every
//! successful write response carries `Holdfast-Lsn`, the primary's WAL
//! position after the write ([`stamp_writes`]), and this process remembers
//! the last one it served per API key. A lag-aware read needs the larger of
//! that and the request's `min_lsn`: it is served from the replica once the
//! replica has replayed that far, waiting up to `read_replica_wait`, and
//! from the primary otherwise (counted in
//! `holdfast_read_replica_fallbacks_total`). A replica that cannot be
//! reached is a fallback too: reads never fail because of it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use deadpool_postgres::{Object, Pool};
use holdfast_db::store;
use holdfast_db::store::Prepared;
use tokio_postgres::types::PgLsn;
use uuid::Uuid;

use crate::error::ApiError;
use crate::state::AppState;

/// The response header with the primary's WAL position after a write.
pub const LSN_HEADER: &str = "holdfast-lsn";
/// How often a lag-aware read asks the replica how far it has replayed.
const REPLAY_POLL: Duration = Duration::from_millis(5);

/// The replica's pool and the writes this process answered.
pub struct ReadReplica {
    pool: Pool,
    /// Per API key, the WAL position after the last write answered to it.
    /// One entry per key that has written: bounded by the keys that exist.
    last_writes: Mutex<HashMap<Uuid, PgLsn>>,
}

/// Filled by the [`Caller`](crate::auth::Caller) extractor with the key a
/// write authenticated as, so that [`stamp_writes`] can remember its LSN.
#[derive(Clone, Default)]
pub struct Writer(Arc<OnceLock<Uuid>>);

impl Writer {
    pub fn set(&self, key_id: Uuid) {
        let _ = self.0.set(key_id);
    }
}

impl ReadReplica {
    pub fn new(pool: Pool) -> ReadReplica {
        ReadReplica {
            pool,
            last_writes: Mutex::new(HashMap::new()),
        }
    }

    fn remember(&self, key_id: Uuid, lsn: PgLsn) {
        let mut writes = self
            .last_writes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let last = writes.entry(key_id).or_insert(lsn);
        *last = (*last).max(lsn);
    }

    fn last_write(&self, key_id: Uuid) -> Option<PgLsn> {
        self.last_writes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key_id)
            .copied()
    }

    /// A replica connection that has replayed `needed`, within `wait` (the
    /// connection's checkout or connect included, so a replica that is down
    /// costs no more); `None` when the replica fails or is still behind.
    async fn connection(&self, needed: Option<PgLsn>, wait: Duration) -> Option<Object> {
        let caught_up = async {
            let db = match self.pool.get().await {
                Ok(db) => db,
                Err(e) => {
                    tracing::warn!(error = %e, "the read replica is unreachable; reading from the primary");
                    return None;
                }
            };
            let Some(needed) = needed else {
                return Some(db);
            };
            loop {
                match store::wal_replayed(&db).await {
                    // Not a standby: it has every commit.
                    Ok(None) => return Some(db),
                    Ok(Some(replayed)) if replayed >= needed => return Some(db),
                    Ok(Some(_)) => tokio::time::sleep(REPLAY_POLL).await,
                    Err(e) => {
                        tracing::warn!(error = %e, "the read replica failed; reading from the primary");
                        return None;
                    }
                }
            }
        };
        tokio::time::timeout(wait, caught_up).await.ok().flatten()
    }
}

/// Parse a `min_lsn` query value (`X/Y`, hex, as Postgres prints an LSN).
pub fn parse_min_lsn(value: Option<&str>) -> Result<Option<PgLsn>, ApiError> {
    value
        .map(|text| {
            text.trim().parse::<PgLsn>().map_err(|_| {
                ApiError::invalid(
                    "min_lsn",
                    "min_lsn must be a WAL position as in Holdfast-Lsn (e.g. 0/16B3748)",
                )
            })
        })
        .transpose()
}

/// 400 naming `min_lsn` when it is past the primary's current WAL position:
/// no replica reaches it, so the read would wait out `read_replica_wait`
/// polling the replica, then read from the primary anyway.
async fn refuse_future_lsn(primary: &impl Prepared, min_lsn: PgLsn) -> Result<(), ApiError> {
    let current = store::wal_position(primary).await?;
    if min_lsn > current {
        return Err(ApiError::invalid(
            "min_lsn",
            format!("min_lsn {min_lsn} is past the primary's current WAL position ({current})"),
        ));
    }
    Ok(())
}

impl AppState {
    /// A connection for a timeline read by `key_id`: the replica once it
    /// has replayed the key's last write and `min_lsn`, else the primary.
    /// Without a replica, the primary. A `min_lsn` past the primary's
    /// position is refused (400).
    pub async fn read_db(
        &self,
        key_id: Option<Uuid>,
        min_lsn: Option<PgLsn>,
    ) -> Result<Object, ApiError> {
        let Some(replica) = self.read_replica() else {
            let db = self.db().await?;
            if let Some(min_lsn) = min_lsn {
                refuse_future_lsn(&db, min_lsn).await?;
            }
            return Ok(db);
        };
        if let Some(min_lsn) = min_lsn {
            refuse_future_lsn(&self.db().await?, min_lsn).await?;
        }
        let needed = key_id.and_then(|key| replica.last_write(key)).max(min_lsn);
        match replica
            .connection(needed, self.config().read_replica_wait)
            .await
        {
            Some(db) => Ok(db),
            None => {
                metrics::counter!("holdfast_read_replica_fallbacks_total").increment(1);
                self.db().await
            }
        }
    }
}

/// Middleware: with a read replica, stamp each successful write's response
/// with `Holdfast-Lsn` and remember it for the key that wrote. Reads (safe
/// methods) pass through untouched, and so does everything without a
/// replica: the position costs a query.
pub async fn stamp_writes(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let Some(replica) = state.read_replica() else {
        return next.run(request).await;
    };
    if request.method().is_safe() {
        return next.run(request).await;
    }
    let writer = Writer::default();
    request.extensions_mut().insert(writer.clone());
    let mut response = next.run(request).await;
    if !response.status().is_success() {
        return response;
    }
    // Read after the handler's commit, so at or past it.
    let position = async {
        let db = state.db().await.ok()?;
        store::wal_position(&db).await.ok()
    }
    .await;
    match position {
        Some(lsn) => {
            if let Some(key_id) = writer.0.get() {
                replica.remember(*key_id, lsn);
            }
            if let Ok(value) = HeaderValue::from_str(&lsn.to_string()) {
                response.headers_mut().insert(LSN_HEADER, value);
            }
        }
        None => tracing::warn!("could not read the WAL position after a write"),
    }
    response
}
