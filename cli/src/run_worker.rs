//! `holdfast server worker`: flags, signals, and the worker loop.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use clap::builder::TypedValueParser;
use clap::Args;
use holdfast_db::group_commit::GroupCommit;
use holdfast_outbound::backoff::Backoff;
use holdfast_providers::egress::EgressPolicy;
use holdfast_providers::{ProviderSettings, Providers};
use holdfast_wire::domain::LimitMaxima;
use holdfast_wire::duration::parse_duration;
use holdfast_worker::tools::web_search::{ApiKey, WebSearchBackend, WebSearchLimits};
use holdfast_worker::WorkerSettings;
use tokio_util::sync::CancellationToken;

use crate::database::Database;

#[derive(Args, Debug)]
pub struct WorkerArgs {
    /// Steps run at once.
    #[arg(
        long = "concurrency",
        env = "HOLDFAST_WORKER_CONCURRENCY",
        default_value_t = 16
    )]
    concurrency: usize,
    /// Lease time-to-live: how long a silent worker keeps an agent.
    #[arg(long = "lease-ttl", env = "HOLDFAST_LEASE_TTL", default_value = "60s", value_parser = parse_duration)]
    lease_ttl: Duration,
    /// How often leases are renewed (one batched call).
    #[arg(long = "lease-renew-interval", env = "HOLDFAST_LEASE_RENEW_INTERVAL", default_value = "30s", value_parser = parse_duration)]
    lease_renew_interval: Duration,
    /// On SIGTERM/SIGINT, how long in-flight steps may take to finish.
    #[arg(long = "drain-timeout", env = "HOLDFAST_WORKER_DRAIN_TIMEOUT", default_value = "20s", value_parser = parse_duration)]
    drain_timeout: Duration,
    /// Poll for ready agents this often, besides LISTEN.
    #[arg(long = "poll-interval", env = "HOLDFAST_POLL_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    poll_interval: Duration,
    /// Retries of a failing model call before the turn fails.
    #[arg(
        long = "model-max-retries",
        env = "HOLDFAST_MODEL_MAX_RETRIES",
        default_value_t = 8
    )]
    model_max_retries: u32,
    /// The first model retry waits up to this long (jittered); it doubles per retry.
    #[arg(long = "model-backoff-base", env = "HOLDFAST_MODEL_BACKOFF_BASE", default_value = "1s", value_parser = parse_duration)]
    model_backoff_base: Duration,
    /// No computed model retry delay exceeds this (a provider's Retry-After may).
    #[arg(long = "model-backoff-max", env = "HOLDFAST_MODEL_BACKOFF_MAX", default_value = "60s", value_parser = parse_duration)]
    model_backoff_max: Duration,
    /// Failed steps in a row (errors, panics) before the turn fails with internal_error.
    #[arg(
        long = "step-max-attempts",
        env = "HOLDFAST_STEP_MAX_ATTEMPTS",
        default_value_t = 5
    )]
    step_max_attempts: u32,
    /// A failed step is tried again after up to this long (jittered); it doubles per failure.
    #[arg(long = "step-backoff-base", env = "HOLDFAST_STEP_BACKOFF_BASE", default_value = "1s", value_parser = parse_duration)]
    step_backoff_base: Duration,
    /// No delay before a failed step is tried again exceeds this.
    #[arg(long = "step-backoff-max", env = "HOLDFAST_STEP_BACKOFF_MAX", default_value = "60s", value_parser = parse_duration)]
    step_backoff_max: Duration,
    /// Most model calls an agent's turn may make (agents may set less in `limits`).
    #[arg(long = "max-model-steps-per-turn", env = "HOLDFAST_MAX_MODEL_STEPS_PER_TURN", default_value_t = LimitMaxima::default().model_steps_per_turn, value_parser = clap::value_parser!(i32).range(1..))]
    max_model_steps_per_turn: i32,
    /// Most tool calls one model response may ask for.
    #[arg(long = "max-tool-calls-per-response", env = "HOLDFAST_MAX_TOOL_CALLS_PER_RESPONSE", default_value_t = LimitMaxima::default().tool_calls_per_response, value_parser = clap::value_parser!(i32).range(1..))]
    max_tool_calls_per_response: i32,
    /// Most levels of subagents below a client's agent.
    #[arg(long = "max-subagent-depth", env = "HOLDFAST_MAX_SUBAGENT_DEPTH", default_value_t = LimitMaxima::default().subagent_depth, value_parser = clap::value_parser!(i32).range(1..))]
    max_subagent_depth: i32,
    /// Most subagents one agent may have running at once.
    #[arg(long = "max-live-children", env = "HOLDFAST_MAX_LIVE_CHILDREN", default_value_t = LimitMaxima::default().live_children, value_parser = clap::value_parser!(i32).range(1..))]
    max_live_children: i32,
    /// Most subagents one tree may ever have.
    #[arg(long = "max-descendants", env = "HOLDFAST_MAX_DESCENDANTS", default_value_t = LimitMaxima::default().descendants, value_parser = clap::value_parser!(i32).range(1..))]
    max_descendants: i32,
    #[command(flatten)]
    pub group_commit: GroupCommitArgs,
    /// This worker's name in leases (default: host-pid-nonce).
    #[arg(long = "name", env = "HOLDFAST_WORKER_NAME")]
    name: Option<String>,
    /// The `web_search` tool's backend: `searxng` or `brave` (unset: calls
    /// end with an error result saying no backend is configured).
    #[arg(long = "web-search-backend", env = "HOLDFAST_WEB_SEARCH_BACKEND", value_parser = ["searxng", "brave"])]
    web_search_backend: Option<String>,
    /// The backend's base URL (required for SearXNG; Brave's default is
    /// https://api.search.brave.com).
    #[arg(long = "web-search-url", env = "HOLDFAST_WEB_SEARCH_URL")]
    web_search_url: Option<String>,
    /// The backend's key (Brave's subscription token).
    #[arg(
        long = "web-search-api-key",
        env = "HOLDFAST_WEB_SEARCH_API_KEY",
        hide_env_values = true
    )]
    web_search_api_key: Option<ApiKey>,
    /// Retries of a search the backend answers with 429 or 5xx.
    #[arg(long = "web-search-max-retries", env = "HOLDFAST_WEB_SEARCH_MAX_RETRIES", default_value_t = WebSearchLimits::default().max_retries)]
    web_search_max_retries: u32,
    /// The first search retry waits up to this long (jittered); it doubles per retry.
    #[arg(long = "web-search-backoff-base", env = "HOLDFAST_WEB_SEARCH_BACKOFF_BASE", default_value = "500ms", value_parser = parse_duration)]
    web_search_backoff_base: Duration,
    /// No computed search retry delay exceeds this.
    #[arg(long = "web-search-backoff-max", env = "HOLDFAST_WEB_SEARCH_BACKOFF_MAX", default_value = "8s", value_parser = parse_duration)]
    web_search_backoff_max: Duration,
}

/// How writes are grouped into commits (`holdfast server worker`: model steps;
/// `holdfast server api`: custom tool results; `holdfast up`: both).
#[derive(Args, Debug)]
pub struct GroupCommitArgs {
    /// How long a finished write waits for others to share its commit (one
    /// WAL flush for all); 0ms: only writes already waiting.
    #[arg(long = "commit-window", env = "HOLDFAST_COMMIT_WINDOW", default_value = "2ms", value_parser = parse_duration)]
    commit_window: Duration,
    /// Most writes in one commit; a full batch commits without waiting out
    /// the window. 1 turns group commit off.
    #[arg(long = "commit-batch", env = "HOLDFAST_COMMIT_BATCH", default_value_t = GroupCommit::default().batch, value_parser = clap::value_parser!(u16).range(1..).map(usize::from))]
    commit_batch: usize,
}

impl GroupCommitArgs {
    pub fn settings(&self) -> GroupCommit {
        GroupCommit {
            window: self.commit_window,
            batch: self.commit_batch,
        }
    }
}

impl WorkerArgs {
    /// The worker's settings; `egress` decides what `web_fetch` and MCP
    /// servers may reach.
    pub fn settings(&self, egress: Arc<EgressPolicy>) -> Result<WorkerSettings> {
        anyhow::ensure!(
            self.concurrency > 0,
            "HOLDFAST_WORKER_CONCURRENCY must be at least 1"
        );
        anyhow::ensure!(
            self.lease_renew_interval < self.lease_ttl,
            "HOLDFAST_LEASE_RENEW_INTERVAL must be shorter than HOLDFAST_LEASE_TTL"
        );
        anyhow::ensure!(
            self.step_max_attempts > 0,
            "HOLDFAST_STEP_MAX_ATTEMPTS must be at least 1"
        );
        Ok(WorkerSettings {
            name: self
                .name
                .clone()
                .unwrap_or_else(WorkerSettings::default_name),
            concurrency: self.concurrency,
            lease_ttl: self.lease_ttl,
            renew_interval: self.lease_renew_interval,
            drain_timeout: self.drain_timeout,
            poll_interval: self.poll_interval,
            model_max_retries: self.model_max_retries,
            egress,
            model_backoff: Backoff {
                base: self.model_backoff_base,
                cap: self.model_backoff_max,
            },
            step_max_attempts: self.step_max_attempts,
            step_backoff: Backoff {
                base: self.step_backoff_base,
                cap: self.step_backoff_max,
            },
            limits: LimitMaxima {
                model_steps_per_turn: self.max_model_steps_per_turn,
                tool_calls_per_response: self.max_tool_calls_per_response,
                subagent_depth: self.max_subagent_depth,
                live_children: self.max_live_children,
                descendants: self.max_descendants,
            },
            group_commit: self.group_commit.settings(),
            web_search: WebSearchLimits {
                backend: self.web_search_backend()?,
                max_retries: self.web_search_max_retries,
                backoff: Backoff {
                    base: self.web_search_backoff_base,
                    cap: self.web_search_backoff_max,
                },
                ..WebSearchLimits::default()
            },
        })
    }

    /// The configured search backend; a URL that does not parse, a SearXNG
    /// without a URL or a Brave without a key stops the worker at start.
    fn web_search_backend(&self) -> Result<Option<WebSearchBackend>> {
        let url = |default: Option<&str>| -> Result<reqwest::Url> {
            let given = self.web_search_url.as_deref().or(default).ok_or_else(|| {
                anyhow::anyhow!("HOLDFAST_WEB_SEARCH_URL is required for the searxng backend")
            })?;
            let url = reqwest::Url::parse(given)
                .map_err(|e| anyhow::anyhow!("HOLDFAST_WEB_SEARCH_URL {given:?}: {e}"))?;
            anyhow::ensure!(
                matches!(url.scheme(), "http" | "https"),
                "HOLDFAST_WEB_SEARCH_URL must be an http(s) URL"
            );
            Ok(url)
        };
        Ok(match self.web_search_backend.as_deref() {
            None => None,
            Some("searxng") => Some(WebSearchBackend::Searxng { url: url(None)? }),
            Some(_) => Some(WebSearchBackend::Brave {
                url: url(Some(WebSearchBackend::BRAVE_URL))?,
                api_key: self.web_search_api_key.clone().ok_or_else(|| {
                    anyhow::anyhow!("HOLDFAST_WEB_SEARCH_API_KEY is required for the brave backend")
                })?,
            }),
        })
    }
}

pub async fn run(db: &Database, args: &WorkerArgs, egress: Arc<EgressPolicy>) -> Result<()> {
    db.migrate().await?;
    let settings = args.settings(egress.clone())?;
    let providers = providers(egress)?;
    let shutdown = shutdown_on_signal();
    holdfast_worker::worker::run(settings, db.config.clone(), providers, shutdown).await?;
    Ok(())
}

/// The model clients, from the environment; `egress` judges agents' own
/// base URLs.
pub fn providers(egress: Arc<EgressPolicy>) -> Result<Arc<Providers>> {
    let settings = ProviderSettings {
        egress,
        ..ProviderSettings::from_env()?
    };
    Ok(Arc::new(Providers::new(settings)?))
}

/// A token cancelled by the first SIGTERM or SIGINT.
pub fn shutdown_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let fired = token.clone();
    tokio::spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            tracing::error!("cannot install signal handlers");
            return;
        };
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = int.recv() => tracing::info!("SIGINT: shutting down"),
        }
        fired.cancel();
    });
    token
}
