//! The API's configuration and the state its handlers share.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Object, Pool};
use holdfast_engine::connect;
use holdfast_engine::egress::EgressPolicy;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::task::JoinHandle;
use tokio_postgres::Config;
use tokio_util::sync::CancellationToken;

use crate::error::ApiError;
use crate::fanout::Fanout;

/// How the API runs. [`ApiConfig::new`] gives the defaults; the fields are
/// public so that an embedding process (`holdfast up`, tests) can tune them.
#[derive(Clone, Debug)]
pub struct ApiConfig {
    /// The database the API serves.
    pub database: Config,
    /// Pooled connections for requests and stream reads (the LISTEN
    /// connection is extra, one per process).
    pub pool_size: usize,
    /// Request bodies past this are refused with 413.
    pub max_body_bytes: usize,
    /// A custom tool result whose `output` serializes past this is refused
    /// with 413: it would be sent to the model on every later call.
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
}

impl ApiConfig {
    pub fn new(database: Config) -> ApiConfig {
        ApiConfig {
            database,
            pool_size: 16,
            max_body_bytes: 1024 * 1024,
            max_tool_output_bytes: 256 * 1024,
            request_timeout: Duration::from_secs(30),
            pool_wait: Duration::from_secs(5),
            sse_heartbeat: Duration::from_secs(15),
            slow_client_timeout: Duration::from_secs(10),
            egress: Arc::default(),
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
    fanout: Fanout,
    metrics: PrometheusHandle,
    shutdown: CancellationToken,
}

impl AppState {
    /// Open the pool and start the LISTEN fan-out. The returned task ends
    /// once `shutdown` is cancelled; join it to know the LISTEN connection
    /// is closed.
    pub fn start(
        config: ApiConfig,
        shutdown: CancellationToken,
    ) -> holdfast_engine::Result<(AppState, JoinHandle<()>)> {
        let pool = connect::pool(config.database.clone(), config.pool_size)?;
        let (fanout, listener) = Fanout::start(pool.clone(), &config.database, shutdown.clone());
        let state = AppState {
            inner: Arc::new(Shared {
                config,
                pool,
                fanout,
                metrics: crate::metrics::prometheus_handle(),
                shutdown,
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

    pub fn shutdown(&self) -> &CancellationToken {
        &self.inner.shutdown
    }

    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// A pooled connection, or 503 when none frees up in time.
    pub async fn db(&self) -> Result<Object, ApiError> {
        match tokio::time::timeout(self.inner.config.pool_wait, self.inner.pool.get()).await {
            Ok(result) => result.map_err(|e| ApiError::from(holdfast_engine::Error::from(e))),
            Err(_) => Err(ApiError::unavailable(
                "no database connection free in time; retry later",
            )),
        }
    }
}
