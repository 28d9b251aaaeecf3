//! The API's configuration and the state its handlers share.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use deadpool_postgres::{Object, Pool};
use holdfast_db::connect::{self, ConnectConfig};
use holdfast_db::group_commit::{GroupCommit, GroupCommitter};
use holdfast_providers::egress::EgressPolicy;
use holdfast_providers::secrets::SecretKey;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::error::ApiError;
use crate::fanout::Fanout;
use crate::inputs::Inputs;
use crate::rate_limit::{FailedLookups, KeyRateLimiter, RateLimit, FAILED_LOOKUPS};
use crate::replica::ReadReplica;
use crate::tool_calls::ToolResults;

/// How the API runs. [`ApiConfig::new`] gives the defaults; the fields are
/// public so that an embedding process (`holdfast up`, tests) can tune them.
#[derive(Clone, Debug)]
pub struct ApiConfig {
    /// The database the API serves.
    pub database: ConnectConfig,
    /// A streaming standby of `database` for event listings and stream
    /// history (`HOLDFAST_READ_DATABASE_URL`); `None`: the primary serves
    /// them. See [`crate::replica`].
    pub read_database: Option<ConnectConfig>,
    /// How long a timeline read waits for a replica connection (and, for
    /// a listing, for the replica to replay the caller's last write or
    /// `min_lsn`) before reading from the primary instead.
    pub read_replica_wait: Duration,
    /// Pooled connections for requests and stream reads (the LISTEN
    /// connection is extra, one per process).
    pub pool_size: usize,
    /// Request bodies past this are refused with 413.
    pub max_body_bytes: usize,
    /// The same for the routes that take images and documents (inputs and
    /// custom tool results): a 32 MiB PDF is about 43 MiB of base64.
    pub max_content_body_bytes: usize,
    /// A custom tool result whose `output` serializes past this is refused
    /// with 413: it would be sent to the model on every later call. The
    /// base64 of its images and documents does not count: it is stored
    /// once, apart (`holdfast.attachments`), within the per-file limits.
    pub max_tool_output_bytes: usize,
    /// Time to produce a response (not to stream one).
    pub request_timeout: Duration,
    /// Time to wait for a pooled connection before answering 503.
    pub pool_wait: Duration,
    /// An SSE comment is sent after this much silence, so proxies and
    /// clients can tell an idle stream from a dead one.
    pub sse_heartbeat: Duration,
    /// An SSE client that does not take the next message within this time
    /// is disconnected (it resumes with Last-Event-ID).
    pub slow_client_timeout: Duration,
    /// Which addresses webhook endpoints (checked at registration) and
    /// machine wake URLs (checked when called) may point at
    /// (`HOLDFAST_EGRESS_ALLOW`). The default, public addresses only, keeps
    /// a hosted deployment from being an SSRF tool.
    pub egress: Arc<EgressPolicy>,
    /// When set, `GET /metrics` needs `Authorization: Bearer <this>`
    /// (`HOLDFAST_METRICS_TOKEN`); unset, it is open.
    pub metrics_token: Option<String>,
    /// How long `/metrics` reuses the figures it read from the database:
    /// they cost a scan of the agents table, and scrapes come every few
    /// seconds from every Prometheus that watches.
    pub metrics_cache: Duration,
    /// Requests per API key, and per machine on the daemon's routes
    /// (`None`: unlimited); over it, 429 with `Retry-After`. A stream
    /// counts once, when it opens.
    pub rate_limit: Option<RateLimit>,
    /// Failed API-key and machine-token lookups per client address
    /// (`None`: unlimited); past it, 429 before any lookup. See
    /// [`FailedLookups`].
    pub failed_lookup_limit: Option<RateLimit>,
    /// An open stream re-checks its key this often and ends once the key is
    /// revoked (one primary-key read per stream per interval).
    pub stream_key_recheck: Duration,
    /// `HOLDFAST_SECRET_KEY`: seals projects' own provider keys. Unset:
    /// `PUT /v1/provider-keys/…` answers 503.
    pub secret_key: Option<SecretKey>,
    /// How posted inputs and custom tool results are grouped into commits
    /// (`HOLDFAST_COMMIT_WINDOW`, `HOLDFAST_COMMIT_BATCH`).
    pub group_commit: GroupCommit,
}

impl ApiConfig {
    pub fn new(database: ConnectConfig) -> ApiConfig {
        ApiConfig {
            database,
            read_database: None,
            read_replica_wait: Duration::from_millis(250),
            pool_size: 16,
            max_body_bytes: 1024 * 1024,
            max_content_body_bytes: 48 * 1024 * 1024,
            max_tool_output_bytes: 256 * 1024,
            request_timeout: Duration::from_secs(30),
            pool_wait: Duration::from_secs(5),
            sse_heartbeat: Duration::from_secs(15),
            slow_client_timeout: Duration::from_secs(10),
            egress: Arc::default(),
            metrics_token: None,
            metrics_cache: Duration::from_secs(10),
            rate_limit: Some(RateLimit::DEFAULT),
            failed_lookup_limit: Some(FAILED_LOOKUPS),
            stream_key_recheck: Duration::from_secs(2),
            secret_key: None,
            group_commit: GroupCommit::default(),
        }
    }
}

/// What every handler can reach; cheap to clone.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Shared>,
}

struct Shared {
    config: ApiConfig,
    pool: Pool,
    read_replica: Option<ReadReplica>,
    fanout: Fanout,
    metrics: PrometheusHandle,
    /// The database's figures for `/metrics`, with when they were read.
    database_metrics: Mutex<Option<(Instant, Arc<str>)>>,
    shutdown: CancellationToken,
    rate_limiter: Option<KeyRateLimiter<uuid::Uuid>>,
    machine_rate_limiter: Option<KeyRateLimiter<uuid::Uuid>>,
    failed_lookups: Option<FailedLookups>,
    tool_results: GroupCommitter<ToolResults>,
    inputs: GroupCommitter<Inputs>,
}

impl AppState {
    /// Open the pool and start the LISTEN fan-out. The returned task ends
    /// once `shutdown` is cancelled; join it to know the LISTEN connection
    /// is closed.
    pub fn start(
        config: ApiConfig,
        shutdown: CancellationToken,
    ) -> holdfast_db::Result<(AppState, JoinHandle<()>)> {
        let pool = connect::pool(config.database.clone(), config.pool_size)?;
        let read_replica = match &config.read_database {
            Some(read) => Some(ReadReplica::new(connect::pool(
                read.clone(),
                config.pool_size,
            )?)),
            None => None,
        };
        let (fanout, listener) = Fanout::start(pool.clone(), &config.database, shutdown.clone());
        // Detached: it ends with the last handle, once its last commit is
        // answered, and every request holding a handle has ended by then.
        let (tool_results, _) = GroupCommitter::start(pool.clone(), config.group_commit, ());
        let (inputs, _) = GroupCommitter::start(pool.clone(), config.group_commit, ());
        let state = AppState {
            inner: Arc::new(Shared {
                rate_limiter: config.rate_limit.map(KeyRateLimiter::new),
                machine_rate_limiter: config.rate_limit.map(KeyRateLimiter::new),
                failed_lookups: config.failed_lookup_limit.map(FailedLookups::new),
                config,
                pool,
                read_replica,
                fanout,
                metrics: crate::metrics::prometheus_handle(),
                database_metrics: Mutex::new(None),
                shutdown,
                tool_results,
                inputs,
            }),
        };
        Ok((state, listener))
    }

    pub fn config(&self) -> &ApiConfig {
        &self.inner.config
    }

    pub fn fanout(&self) -> &Fanout {
        &self.inner.fanout
    }

    pub fn metrics(&self) -> &PrometheusHandle {
        &self.inner.metrics
    }

    /// The database's figures for `/metrics` if read within the cache time.
    pub fn cached_database_metrics(&self) -> Option<Arc<str>> {
        let cached = self
            .inner
            .database_metrics
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        cached
            .as_ref()
            .filter(|(read_at, _)| read_at.elapsed() < self.inner.config.metrics_cache)
            .map(|(_, text)| text.clone())
    }

    pub fn cache_database_metrics(&self, text: Arc<str>) {
        *self
            .inner
            .database_metrics
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some((Instant::now(), text));
    }

    /// Take one request from the key's bucket; 429 when it is empty.
    pub fn check_rate(&self, key_id: uuid::Uuid) -> Result<(), ApiError> {
        match &self.inner.rate_limiter {
            Some(limiter) => limiter.check(&key_id),
            None => Ok(()),
        }
    }

    /// Take one request from the machine's bucket; 429 when it is empty.
    pub fn check_machine_rate(&self, machine_id: uuid::Uuid) -> Result<(), ApiError> {
        match &self.inner.machine_rate_limiter {
            Some(limiter) => limiter.check(&machine_id),
            None => Ok(()),
        }
    }

    /// The failed-lookup limit, unless turned off.
    pub fn failed_lookups(&self) -> Option<&FailedLookups> {
        self.inner.failed_lookups.as_ref()
    }

    pub fn shutdown(&self) -> &CancellationToken {
        &self.inner.shutdown
    }

    /// The group commit custom tool results go through.
    pub fn tool_results(&self) -> &GroupCommitter<ToolResults> {
        &self.inner.tool_results
    }

    /// The group commit posted inputs go through.
    pub fn inputs(&self) -> &GroupCommitter<Inputs> {
        &self.inner.inputs
    }

    /// The read replica, when one is configured.
    pub fn read_replica(&self) -> Option<&ReadReplica> {
        self.inner.read_replica.as_ref()
    }

    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// A pooled connection, or 503 when none frees up in time.
    pub async fn db(&self) -> Result<Object, ApiError> {
        match tokio::time::timeout(self.inner.config.pool_wait, self.inner.pool.get()).await {
            Ok(result) => result.map_err(|e| ApiError::from(holdfast_db::Error::from(e))),
            Err(_) => Err(ApiError::unavailable(
                "no database connection free in time; retry later",
            )),
        }
    }
}
