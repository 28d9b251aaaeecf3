//! [`Providers`]: the HTTP client the provider protocols share, with its
//! settings, timeouts and streaming loop.
//!
//! Cancellation is by drop: the worker drops the [`Providers::complete`]
//! future (lease lost, cancel, shutdown), which drops the in-flight request
//! or response body, and with it the connection, so the provider stops
//! generating for nobody.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use reqwest::header::CONTENT_TYPE;
use reqwest::RequestBuilder;
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;
use tokio::time::timeout;

use super::anthropic::{self, AnthropicStream};
use super::classify::{
    classify_status, egress_refused, idle_timeout, invalid_response, transport_error,
    ERROR_BODY_LIMIT,
};
use super::compaction::estimate_tokens;
use super::media::{body_bytes, RequestFiles};
use super::openai::{self, OpenAiStream};
use super::responses::{self, ResponsesStream};
use super::{Delta, DeltaKind, ModelError, ModelRequest, ModelResponse, Provider};
use crate::egress::{EgressKind, EgressPolicy};
use crate::secrets::SecretKey;
use holdfast_outbound::sse::{SseDecoder, SseEvent};
use holdfast_wire::domain::{ModelDestination, ModelRoute};
use holdfast_wire::duration::parse_duration;

pub const DEFAULT_ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";
pub const DEFAULT_OPENAI_BASE_URL: &str = "https://api.openai.com/v1";

/// How the provider clients connect, and how big a context may grow.
#[derive(Clone)]
pub struct ProviderSettings {
    /// `ANTHROPIC_BASE_URL`; `/v1/messages` is appended.
    pub anthropic_base_url: String,
    /// `ANTHROPIC_API_KEY`, sent as `x-api-key` (not sent when unset, for
    /// compatible servers that need none).
    pub anthropic_api_key: Option<String>,
    /// `OPENAI_BASE_URL`, including the `/v1`; `/chat/completions` is
    /// appended (provider `openai`), or `/responses` (`openai_responses`).
    pub openai_base_url: String,
    /// `OPENAI_API_KEY`, sent as `Authorization: Bearer` (when set).
    pub openai_api_key: Option<String>,
    /// `HOLDFAST_SECRET_KEY`: opens projects' own provider keys.
    pub secret_key: Option<SecretKey>,
    /// Time allowed to establish a connection (TCP and TLS).
    /// `HOLDFAST_MODEL_CONNECT_TIMEOUT`, default 10 s.
    pub connect_timeout: Duration,
    /// Longest silence tolerated: for the response headers after sending,
    /// then between two chunks of the stream. A call may stream for as long
    /// as it keeps streaming; a stalled one fails as retryable.
    /// `HOLDFAST_MODEL_IDLE_TIMEOUT`, default 120 s (reasoning models can
    /// think silently for a while; Anthropic sends pings meanwhile).
    pub idle_timeout: Duration,
    /// Context window assumed for models neither in `context_windows` nor
    /// of a known family (`MODEL_FAMILY_CONTEXT_WINDOWS`).
    /// `HOLDFAST_MODEL_CONTEXT_WINDOW`, default 128 000 tokens.
    pub default_context_window: u64,
    /// Context windows by exact model name (before the family table).
    pub context_windows: HashMap<String, u64>,
    /// [`Providers::should_compact`] is true once the estimated request plus
    /// its output reservation exceeds this fraction of the context window.
    /// Below 1 because [`estimate_tokens`] is a rough estimate. Default 0.9.
    pub compact_threshold: f64,
    /// Which addresses an agent's own `model.base_url` may reach (kind
    /// `model`, `HOLDFAST_EGRESS_ALLOW`). The base URLs above are the
    /// operator's and are not checked.
    pub egress: Arc<EgressPolicy>,
}

impl Default for ProviderSettings {
    fn default() -> Self {
        ProviderSettings {
            anthropic_base_url: DEFAULT_ANTHROPIC_BASE_URL.into(),
            anthropic_api_key: None,
            openai_base_url: DEFAULT_OPENAI_BASE_URL.into(),
            openai_api_key: None,
            secret_key: None,
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            default_context_window: 128_000,
            context_windows: HashMap::new(),
            compact_threshold: 0.9,
            egress: Arc::default(),
        }
    }
}

impl std::fmt::Debug for ProviderSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let key = |k: &Option<String>| if k.is_some() { "<set>" } else { "<unset>" };
        f.debug_struct("ProviderSettings")
            .field("anthropic_base_url", &self.anthropic_base_url)
            .field("anthropic_api_key", &key(&self.anthropic_api_key))
            .field("openai_base_url", &self.openai_base_url)
            .field("openai_api_key", &key(&self.openai_api_key))
            .field("secret_key", &self.secret_key)
            .field("connect_timeout", &self.connect_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("default_context_window", &self.default_context_window)
            .field("context_windows", &self.context_windows)
            .field("compact_threshold", &self.compact_threshold)
            .field("egress", &self.egress)
            .finish()
    }
}

impl ProviderSettings {
    /// Settings from the environment; unset or empty variables keep the
    /// defaults.
    pub fn from_env() -> Result<Self, ProviderSetupError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Settings from any variable lookup (the environment, a test's map).
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ProviderSetupError> {
        let var = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let duration = |name: &str, default: Duration| match var(name) {
            None => Ok(default),
            Some(v) => parse_duration(&v).map_err(|message| ProviderSetupError::InvalidSetting {
                name: name.to_owned(),
                message,
            }),
        };
        let defaults = ProviderSettings::default();
        let default_context_window = match var("HOLDFAST_MODEL_CONTEXT_WINDOW") {
            None => defaults.default_context_window,
            Some(v) => v
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| ProviderSetupError::InvalidSetting {
                    name: "HOLDFAST_MODEL_CONTEXT_WINDOW".into(),
                    message: format!("{v:?} is not a positive number of tokens"),
                })?,
        };
        Ok(ProviderSettings {
            anthropic_base_url: var("ANTHROPIC_BASE_URL").unwrap_or(defaults.anthropic_base_url),
            anthropic_api_key: var("ANTHROPIC_API_KEY"),
            openai_base_url: var("OPENAI_BASE_URL").unwrap_or(defaults.openai_base_url),
            openai_api_key: var("OPENAI_API_KEY"),
            secret_key: SecretKey::from_lookup(&lookup).map_err(|e| {
                ProviderSetupError::InvalidSetting {
                    name: crate::secrets::SECRET_KEY_ENV.into(),
                    message: e.to_string(),
                }
            })?,
            connect_timeout: duration("HOLDFAST_MODEL_CONNECT_TIMEOUT", defaults.connect_timeout)?,
            idle_timeout: duration("HOLDFAST_MODEL_IDLE_TIMEOUT", defaults.idle_timeout)?,
            default_context_window,
            ..defaults
        })
    }
}

/// Why the provider clients could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ProviderSetupError {
    #[error("{name}: {message}")]
    InvalidSetting { name: String, message: String },
    #[error("building the HTTP client: {0}")]
    Client(#[source] reqwest::Error),
}

/// The model provider clients. Cheap to clone; share one per process (it
/// pools connections).
#[derive(Clone, Debug)]
pub struct Providers {
    /// For the operator's base URLs (reads proxy variables as usual).
    http: reqwest::Client,
    /// For agent-chosen base URLs: through the egress policy, no proxy, no
    /// redirects (a model API has no reason to send a POST elsewhere).
    tenant_http: reqwest::Client,
    settings: Arc<ProviderSettings>,
}

/// Where one model call goes and the credential it carries, decided per
/// call by [`Providers::target`].
#[derive(Clone, PartialEq)]
pub enum ModelTarget {
    /// An operator endpoint (or `default`): the credential is the project's
    /// own key, else the operator's.
    Operator {
        base_url: String,
        api_key: Option<String>,
    },
    /// A tenant-set URL: the project's own key or nothing.
    CustomUrl {
        base_url: String,
        project_key: Option<String>,
    },
}

impl std::fmt::Debug for ModelTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (kind, base_url, key) = match self {
            ModelTarget::Operator { base_url, api_key } => ("Operator", base_url, api_key),
            ModelTarget::CustomUrl {
                base_url,
                project_key,
            } => ("CustomUrl", base_url, project_key),
        };
        f.debug_struct(kind)
            .field("base_url", base_url)
            .field("key", &if key.is_some() { "<set>" } else { "<unset>" })
            .finish()
    }
}

/// Turns a protocol's SSE events into a [`ModelResponse`].
pub(crate) trait StreamAssembler {
    /// Take one event; `Ok(true)` when the provider said the response is
    /// complete (`message_stop`, `[DONE]`).
    fn event(
        &mut self,
        event: SseEvent,
        deltas: Option<&UnboundedSender<Delta>>,
    ) -> Result<bool, ModelError>;

    /// The assembled response; an error if the stream never completed.
    fn finish(self) -> Result<ModelResponse, ModelError>;
}

/// A typed event's JSON (Anthropic Messages, the Responses API).
pub(crate) fn event_data(event: &SseEvent) -> Result<Value, ModelError> {
    serde_json::from_str(&event.data)
        .map_err(|e| invalid_response(format!("event {:?} is not JSON: {e}", event.event)))
}

/// The model a response names as the one that answered (its `model`
/// field), when it names one.
pub(crate) fn answering_model(model: Option<&Value>) -> Option<String> {
    model
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
        .map(str::to_owned)
}

/// A typed event's type: its `type` field, else the SSE `event:` name.
pub(crate) fn event_type<'a>(data: &'a Value, event: &'a SseEvent) -> &'a str {
    data.get("type")
        .and_then(Value::as_str)
        .or(event.event.as_deref())
        .unwrap_or_default()
}

/// `body[name] = value` when the agent set it (a request leaves out what
/// the config leaves out, so the provider's default applies).
pub(crate) fn insert_if_set<T: serde::Serialize>(
    body: &mut serde_json::Map<String, serde_json::Value>,
    name: &str,
    value: &Option<T>,
) {
    if let Some(value) = value {
        body.insert(name.into(), serde_json::json!(value));
    }
}

/// Send a non-empty piece to the live listeners, if any.
pub(crate) fn forward(deltas: Option<&UnboundedSender<Delta>>, kind: DeltaKind, piece: &str) {
    if let (Some(tx), false) = (deltas, piece.is_empty()) {
        // A receiver gone away only means nobody watches live.
        let _ = tx.send(Delta {
            kind,
            text: piece.to_owned(),
        });
    }
}

impl Providers {
    pub fn new(settings: ProviderSettings) -> Result<Self, ProviderSetupError> {
        let http = holdfast_outbound::client_builder()
            .connect_timeout(settings.connect_timeout)
            .user_agent(concat!("holdfast/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(ProviderSetupError::Client)?;
        let tenant_http = settings
            .egress
            .client_builder(EgressKind::Model)
            .connect_timeout(settings.connect_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("holdfast/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(ProviderSetupError::Client)?;
        Ok(Providers {
            http,
            tenant_http,
            settings: Arc::new(settings),
        })
    }

    /// [`Providers::new`] with [`ProviderSettings::from_env`].
    pub fn from_env() -> Result<Self, ProviderSetupError> {
        Self::new(ProviderSettings::from_env()?)
    }

    pub fn settings(&self) -> &ProviderSettings {
        &self.settings
    }

    /// Where a call of `provider` goes, and with which credential, for the
    /// route the database resolved at this call:
    /// - a refused route ends the turn (`invalid_request_error`, the field
    ///   named);
    /// - a custom URL gets the project's own key, if any, and never an
    ///   operator credential;
    /// - `default` is this worker's environment pair for the provider
    ///   (`ANTHROPIC_*` or `OPENAI_*`), a named endpoint its base URL and the
    ///   variable it names; the project's own key, when set, replaces the
    ///   operator credential.
    pub fn target(
        &self,
        route: &ModelRoute,
        provider: Provider,
    ) -> Result<ModelTarget, ModelError> {
        let project_key = match &route.project_key {
            None => None,
            Some(sealed) => {
                let secret = self.settings.secret_key.as_ref().ok_or_else(|| ModelError::Fatal {
                    error_type: "authentication_error".into(),
                    message: format!(
                        "the project's own provider key cannot be opened: {} is not set on this worker",
                        crate::secrets::SECRET_KEY_ENV
                    ),
                })?;
                let opened = secret
                    .open_provider_key(route.project_id, provider.vendor().into(), sealed)
                    .map_err(|e| ModelError::Fatal {
                        error_type: "authentication_error".into(),
                        message: e.to_string(),
                    })?;
                Some(opened)
            }
        };
        match &route.destination {
            ModelDestination::Refused { field, message } => Err(ModelError::Fatal {
                error_type: "invalid_request_error".into(),
                message: format!("{field}: {message}"),
            }),
            ModelDestination::CustomUrl { base_url } => Ok(ModelTarget::CustomUrl {
                base_url: base_url.clone(),
                project_key,
            }),
            ModelDestination::Operator { base_url: None, .. } => {
                let (base_url, operator_key) = self.environment_pair(provider);
                Ok(ModelTarget::Operator {
                    base_url: base_url.clone(),
                    api_key: project_key.or_else(|| operator_key.clone()),
                })
            }
            ModelDestination::Operator {
                base_url: Some(base_url),
                credential_env,
                ..
            } => Ok(ModelTarget::Operator {
                base_url: base_url.clone(),
                api_key: project_key.or_else(|| {
                    credential_env
                        .as_deref()
                        .and_then(|name| std::env::var(name).ok())
                        .filter(|v| !v.trim().is_empty())
                }),
            }),
        }
    }

    /// The endpoint `default` for `provider`: this worker's environment pair
    /// (`ANTHROPIC_BASE_URL`/`_API_KEY`, or `OPENAI_BASE_URL`/`_API_KEY`).
    pub fn default_target(&self, provider: Provider) -> ModelTarget {
        let (base_url, api_key) = self.environment_pair(provider);
        ModelTarget::Operator {
            base_url: base_url.clone(),
            api_key: api_key.clone(),
        }
    }

    /// The base URL and key of `provider` from this worker's environment.
    fn environment_pair(&self, provider: Provider) -> (&String, &Option<String>) {
        match provider.vendor() {
            Provider::Anthropic => (
                &self.settings.anthropic_base_url,
                &self.settings.anthropic_api_key,
            ),
            _ => (
                &self.settings.openai_base_url,
                &self.settings.openai_api_key,
            ),
        }
    }

    /// One streaming model call to `target`. Each text or thinking delta
    /// goes to `deltas` as it arrives (send errors are ignored: nobody watching is
    /// fine); the result is the assembled response, or the failure
    /// classified. Drop the future to cancel: the connection is closed.
    /// A request that sends no stored file is [`Providers::complete`]d
    /// with no files.
    pub async fn complete(
        &self,
        request: &ModelRequest,
        target: &ModelTarget,
        deltas: Option<&UnboundedSender<Delta>>,
    ) -> Result<ModelResponse, ModelError> {
        self.complete_with_files(request, &RequestFiles::default(), target, deltas)
            .await
    }

    /// [`Providers::complete`] for a request whose messages reference
    /// stored files: `files` holds their bytes (every id
    /// [`super::attachment_ids`] names), written into the body as it is
    /// serialized.
    pub async fn complete_with_files(
        &self,
        request: &ModelRequest,
        files: &RequestFiles,
        target: &ModelTarget,
        deltas: Option<&UnboundedSender<Delta>>,
    ) -> Result<ModelResponse, ModelError> {
        match target {
            ModelTarget::Operator { base_url, api_key } => {
                self.send(
                    request,
                    files,
                    &self.http,
                    base_url,
                    api_key.as_deref(),
                    deltas,
                )
                .await
            }
            ModelTarget::CustomUrl {
                base_url,
                project_key,
            } => {
                self.complete_at_custom_url(
                    request,
                    files,
                    base_url,
                    project_key.as_deref(),
                    deltas,
                )
                .await
            }
        }
    }

    /// The one path of requests to a tenant-set URL. It is handed nothing
    /// but the project's own key, so no operator credential can reach a host
    /// the tenant chose, and it goes through the egress-checked client: the
    /// URL's literal host is judged here, a name's addresses when they
    /// resolve, and redirects are not followed.
    async fn complete_at_custom_url(
        &self,
        request: &ModelRequest,
        files: &RequestFiles,
        base_url: &str,
        project_key: Option<&str>,
        deltas: Option<&UnboundedSender<Delta>>,
    ) -> Result<ModelResponse, ModelError> {
        if let Ok(url) = reqwest::Url::parse(base_url) {
            self.settings
                .egress
                .check_url(EgressKind::Model, &url)
                .map_err(|refused| egress_refused(&refused))?;
        }
        self.send(
            request,
            files,
            &self.tenant_http,
            base_url,
            project_key,
            deltas,
        )
        .await
    }

    /// Send `request` to `base` over `client` in its provider's protocol,
    /// with `api_key` (as `x-api-key` or a bearer token) when given.
    async fn send(
        &self,
        request: &ModelRequest,
        files: &RequestFiles,
        client: &reqwest::Client,
        base: &str,
        api_key: Option<&str>,
        deltas: Option<&UnboundedSender<Delta>>,
    ) -> Result<ModelResponse, ModelError> {
        match request.model.provider {
            Provider::Anthropic => {
                let mut http = client
                    .post(endpoint(base, "/v1/messages"))
                    .header("anthropic-version", anthropic::API_VERSION)
                    .header(CONTENT_TYPE, "application/json")
                    .body(body_bytes(&anthropic::request_body(request), files)?);
                if let Some(key) = api_key {
                    http = http.header("x-api-key", key);
                }
                if let Some(beta) = anthropic::beta_header(request) {
                    http = http.header("anthropic-beta", beta);
                }
                self.stream(http, AnthropicStream::default(), deltas).await
            }
            Provider::Openai => {
                let mut http = client
                    .post(endpoint(base, "/chat/completions"))
                    .header(CONTENT_TYPE, "application/json")
                    .body(body_bytes(&openai::request_body(request), files)?);
                if let Some(key) = api_key {
                    http = http.bearer_auth(key);
                }
                self.stream(http, OpenAiStream::default(), deltas).await
            }
            Provider::OpenaiResponses => {
                let mut http = client
                    .post(endpoint(base, "/responses"))
                    .header(CONTENT_TYPE, "application/json")
                    .body(body_bytes(&responses::request_body(request), files)?);
                if let Some(key) = api_key {
                    http = http.bearer_auth(key);
                }
                self.stream(http, ResponsesStream::default(), deltas).await
            }
        }
    }

    /// The context window assumed for `model_name`, in tokens: the exact
    /// name's in `context_windows`, else its family's, else the default.
    pub fn context_window(&self, model_name: &str) -> u64 {
        self.settings
            .context_windows
            .get(model_name)
            .copied()
            .or_else(|| family_context_window(model_name))
            .unwrap_or(self.settings.default_context_window)
    }

    /// True when `request` should be compacted before sending: its
    /// estimated size plus the output it reserves (`max_tokens`) exceeds
    /// `compact_threshold` of the model's context window.
    pub fn should_compact(&self, request: &ModelRequest) -> bool {
        let output = request.model.output_limit();
        let needed = estimate_tokens(request) + u64::from(output);
        let window = self.context_window(&request.model.name) as f64;
        needed as f64 > window * self.settings.compact_threshold
    }

    /// Send, then read the SSE stream into `assembler`, with the idle
    /// timeout on the headers and on every chunk.
    async fn stream(
        &self,
        http: RequestBuilder,
        mut assembler: impl StreamAssembler,
        deltas: Option<&UnboundedSender<Delta>>,
    ) -> Result<ModelResponse, ModelError> {
        let idle = self.settings.idle_timeout;
        let response = timeout(idle, http.send())
            .await
            .map_err(|_| idle_timeout("response", idle))?
            .map_err(|e| transport_error(&e))?;
        let status = response.status();
        if !status.is_success() {
            let headers = response.headers().clone();
            let body = read_error_body(response, idle).await;
            return Err(classify_status(status.as_u16(), &headers, &body));
        }
        let mut body = response.bytes_stream();
        let mut decoder = SseDecoder::default();
        loop {
            let chunk = match timeout(idle, body.next()).await {
                Err(_) => return Err(idle_timeout("stream data", idle)),
                Ok(None) => return assembler.finish(),
                Ok(Some(Err(e))) => return Err(transport_error(&e)),
                Ok(Some(Ok(chunk))) => chunk,
            };
            for event in decoder.push(&chunk) {
                if assembler.event(event, deltas)? {
                    // Read the body's end (normally already buffered) so the
                    // connection can be reused; never wait long for it.
                    let _ = timeout(Duration::from_millis(100).min(idle), async {
                        while let Some(Ok(_)) = body.next().await {}
                    })
                    .await;
                    return assembler.finish();
                }
            }
        }
    }
}

/// The providers' documented context windows by model-name prefix (the
/// longest matching prefix wins), in tokens. Where a family has grown (newer
/// GPT-5 versions, Claude's 1M beta) the family's smaller, long-standing
/// window is used: compacting a little early costs less than a call refused
/// as too long.
const MODEL_FAMILY_CONTEXT_WINDOWS: [(&str, u64); 9] = [
    ("claude-", 200_000),
    ("gpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-4.1", 1_047_576),
    ("gpt-5", 400_000),
    ("o1", 200_000),
    ("o1-mini", 128_000),
    ("o3", 200_000),
    ("o4-mini", 200_000),
];

/// The context window of `model_name`'s family, if it is a known one.
fn family_context_window(model_name: &str) -> Option<u64> {
    MODEL_FAMILY_CONTEXT_WINDOWS
        .iter()
        .filter(|(prefix, _)| model_name.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|(_, window)| *window)
}

/// `base` + `path`, tolerating a trailing slash on `base`.
fn endpoint(base: &str, path: &str) -> String {
    format!("{}{path}", base.trim_end_matches('/'))
}

/// The start of an error response's body; whatever arrived if reading fails.
async fn read_error_body(response: reqwest::Response, idle: Duration) -> String {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while body.len() < ERROR_BODY_LIMIT {
        match timeout(idle, stream.next()).await {
            Ok(Some(Ok(chunk))) => body.extend_from_slice(&chunk),
            _ => break,
        }
    }
    body.truncate(ERROR_BODY_LIMIT);
    String::from_utf8_lossy(&body).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_come_from_the_environment_with_defaults() {
        let env: HashMap<&str, &str> = [
            ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/"),
            ("OPENAI_API_KEY", "sk-test"),
            ("ANTHROPIC_API_KEY", ""),
            ("HOLDFAST_MODEL_IDLE_TIMEOUT", "30s"),
            ("HOLDFAST_MODEL_CONTEXT_WINDOW", "8192"),
        ]
        .into_iter()
        .collect();
        let s = ProviderSettings::from_lookup(|k| env.get(k).map(|v| v.to_string())).unwrap();
        assert_eq!(s.anthropic_base_url, "http://127.0.0.1:9/");
        assert_eq!(s.anthropic_api_key, None, "empty means unset");
        assert_eq!(s.openai_base_url, DEFAULT_OPENAI_BASE_URL);
        assert_eq!(s.openai_api_key.as_deref(), Some("sk-test"));
        assert_eq!(s.idle_timeout, Duration::from_secs(30));
        assert_eq!(s.connect_timeout, Duration::from_secs(10));
        assert_eq!(s.default_context_window, 8192);
        assert!(!format!("{s:?}").contains("sk-test"), "keys are not logged");

        let bad = ProviderSettings::from_lookup(|k| {
            (k == "HOLDFAST_MODEL_IDLE_TIMEOUT").then(|| "soon".to_owned())
        });
        assert!(matches!(
            bad,
            Err(ProviderSetupError::InvalidSetting { .. })
        ));
    }

    #[test]
    fn context_windows_come_by_exact_name_then_family_then_default() {
        let mut settings = ProviderSettings {
            default_context_window: 32_000,
            ..ProviderSettings::default()
        };
        settings
            .context_windows
            .insert("claude-sonnet-4-5".into(), 1_000_000);
        let providers = Providers::new(settings).unwrap();
        for (model, window) in [
            ("claude-sonnet-4-5", 1_000_000),
            ("claude-haiku-4-5-20251001", 200_000),
            ("gpt-4o-mini", 128_000),
            ("gpt-4.1-mini", 1_047_576),
            ("gpt-5-mini", 400_000),
            ("o1-mini", 128_000),
            ("o1", 200_000),
            ("o3-pro", 200_000),
            ("o4-mini-2025-04-16", 200_000),
            ("llama-3.3-70b", 32_000),
            ("gpt-4", 32_000),
        ] {
            assert_eq!(providers.context_window(model), window, "{model}");
        }
    }

    #[test]
    fn endpoint_joins_with_or_without_a_trailing_slash() {
        assert_eq!(
            endpoint("https://api.openai.com/v1/", "/chat/completions"),
            "https://api.openai.com/v1/chat/completions"
        );
        assert_eq!(
            endpoint("https://api.anthropic.com", "/v1/messages"),
            "https://api.anthropic.com/v1/messages"
        );
    }
}
