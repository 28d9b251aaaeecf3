//! The HTTP side of the client CLI: one [`ApiClient`] per command, bearer
//! auth, the API's error shape turned into [`CallError`], and retries of
//! requests that are safe to repeat.

use std::time::Duration;

use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde_json::Value;
use uuid::Uuid;

/// How often a request that failed in transit (or with 503) is tried again.
const ATTEMPTS: u32 = 4;

/// Why a call failed.
#[derive(Debug)]
pub enum CallError {
    /// The server answered with an error status and (usually) the API's
    /// `{"error": {"type", "message"}}` body.
    Api { status: StatusCode, body: Value },
    /// The request did not get an answer (connection refused, reset, timeout).
    Transport(reqwest::Error),
}

impl CallError {
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            CallError::Api { status, .. } => Some(*status),
            CallError::Transport(_) => None,
        }
    }

    /// The error body for `--json` output (the API's own, or one in its shape).
    pub fn json(&self) -> Value {
        match self {
            CallError::Api { body, .. } => body.clone(),
            CallError::Transport(e) => serde_json::json!({
                "error": {"type": "transport", "message": e.to_string()}
            }),
        }
    }

    /// Worth another try: the request may not have reached the server, or
    /// the server was briefly unable to serve it.
    fn is_transient(&self) -> bool {
        match self {
            CallError::Transport(e) => !e.is_builder(),
            CallError::Api { status, .. } => *status == StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Api { status, body } => {
                let kind = body["error"]["type"].as_str().unwrap_or("error");
                let message = body["error"]["message"]
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| body.to_string());
                write!(f, "{} {kind}: {message}", status.as_u16())
            }
            CallError::Transport(e) => write!(f, "no answer from the server: {e}"),
        }
    }
}

impl std::error::Error for CallError {}

/// A successful answer: its body, and whether it replays an earlier request
/// (`Idempotent-Replayed: true`).
pub struct Answer {
    pub body: Value,
    pub replayed: bool,
}

/// The API at `base_url`, as the holder of `api_key`.
#[derive(Clone)]
pub struct ApiClient {
    http: reqwest::Client,
    base_url: String,
    api_key: String,
}

impl ApiClient {
    pub fn new(base_url: &str, api_key: &str) -> Result<ApiClient, reqwest::Error> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("holdfast-cli/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(ApiClient {
            http,
            base_url: base_url.trim_end_matches('/').to_owned(),
            api_key: api_key.to_owned(),
        })
    }

    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base_url))
            .bearer_auth(&self.api_key)
    }

    pub async fn get(&self, path: &str) -> Result<Answer, CallError> {
        self.send(ATTEMPTS, || {
            self.request(Method::GET, path)
                .timeout(Duration::from_secs(60))
        })
        .await
    }

    /// POST a JSON body, retried on transport errors and 503. Only for
    /// requests whose repeat is harmless: with an `idempotency_key`, or on
    /// routes where the same request again is accepted or answered with the
    /// state it produced (a decision by the same person, a tool result's 409).
    pub async fn post(
        &self,
        path: &str,
        body: &Value,
        idempotency_key: Option<&str>,
    ) -> Result<Answer, CallError> {
        self.send(ATTEMPTS, || self.post_request(path, body, idempotency_key))
            .await
    }

    /// POST a JSON body once: for requests a repeat would duplicate
    /// (creating an agent).
    pub async fn post_once(&self, path: &str, body: &Value) -> Result<Answer, CallError> {
        self.send(1, || self.post_request(path, body, None)).await
    }

    /// DELETE once: a repeat after a lost answer would be a confusing 404.
    pub async fn delete_once(&self, path: &str) -> Result<Answer, CallError> {
        self.send(1, || {
            self.request(Method::DELETE, path)
                .timeout(Duration::from_secs(60))
        })
        .await
    }

    fn post_request(
        &self,
        path: &str,
        body: &Value,
        idempotency_key: Option<&str>,
    ) -> RequestBuilder {
        let mut request = self
            .request(Method::POST, path)
            .timeout(Duration::from_secs(60))
            .json(body);
        if let Some(key) = idempotency_key {
            request = request.header("Idempotency-Key", key);
        }
        request
    }

    /// Open an agent's event stream after `after` (sent as `Last-Event-ID`).
    pub async fn open_stream(&self, agent: Uuid, after: i64) -> Result<Response, CallError> {
        let response = self
            .request(Method::GET, &format!("/v1/agents/{agent}/stream"))
            .header("Last-Event-ID", after.to_string())
            .header("Accept", "text/event-stream")
            .send()
            .await
            .map_err(CallError::Transport)?;
        if response.status().is_success() {
            Ok(response)
        } else {
            Err(api_error(response).await)
        }
    }

    async fn send(
        &self,
        attempts: u32,
        build: impl Fn() -> RequestBuilder,
    ) -> Result<Answer, CallError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result = match build().send().await {
                Ok(response) if response.status().is_success() => {
                    let replayed = response
                        .headers()
                        .get("idempotent-replayed")
                        .is_some_and(|v| v.as_bytes() == b"true");
                    if response.status() == StatusCode::NO_CONTENT {
                        return Ok(Answer {
                            body: Value::Null,
                            replayed,
                        });
                    }
                    match response.json::<Value>().await {
                        Ok(body) => return Ok(Answer { body, replayed }),
                        Err(e) => Err(CallError::Transport(e)),
                    }
                }
                Ok(response) => Err(api_error(response).await),
                Err(e) => Err(CallError::Transport(e)),
            };
            match result {
                Err(e) if e.is_transient() && attempt < attempts => {
                    let delay = Duration::from_millis(200) * 2u32.pow(attempt - 1);
                    eprintln!("{e}; retrying in {delay:?}");
                    tokio::time::sleep(delay).await;
                }
                other => return other,
            }
        }
    }
}

async fn api_error(response: Response) -> CallError {
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    let body = serde_json::from_str(&text).unwrap_or_else(
        |_| serde_json::json!({"error": {"type": "http_error", "message": text.trim()}}),
    );
    CallError::Api { status, body }
}
