//! A fake web search backend on loopback that speaks two real wire formats:
//! SearXNG's JSON API (`GET /search?q=…&format=json`) and the Brave Search
//! API (`GET /res/v1/web/search?q=…`, key in `X-Subscription-Token`).
//!
//! Every request is recorded (path, query parameters, the token header)
//! before it is answered, so a test can await "the search arrived" and
//! count requests exactly. Answers: the statuses queued with
//! [`SearchBackend::fail_next`] first (429 with `Retry-After`, 5xx), then
//! the canned results below; [`SearchBackend::hold`] keeps answers back
//! until [`SearchBackend::release`].

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The Brave key the fake accepts.
pub const BRAVE_KEY: &str = "BSA-test-subscription-token";

/// One request as the backend saw it.
#[derive(Clone, Debug)]
pub struct SeenRequest {
    pub path: String,
    pub params: HashMap<String, String>,
    pub token: Option<String>,
}

#[derive(Default)]
struct Script {
    seen: Vec<SeenRequest>,
    failures: VecDeque<u16>,
}

struct BackendState {
    script: Mutex<Script>,
    /// Requests seen; bumped after each is recorded, for waiters.
    arrivals: watch::Sender<usize>,
    /// `false` while answers are held.
    released: watch::Sender<bool>,
}

/// A running fake on 127.0.0.1; stops when dropped.
pub struct SearchBackend {
    pub url: String,
    state: Arc<BackendState>,
    shutdown: CancellationToken,
}

impl SearchBackend {
    pub async fn start() -> SearchBackend {
        let state = Arc::new(BackendState {
            script: Mutex::default(),
            arrivals: watch::channel(0).0,
            released: watch::channel(true).0,
        });
        let app = axum::Router::new()
            .route("/search", axum::routing::get(searxng))
            .route("/res/v1/web/search", axum::routing::get(brave))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the search backend");
        let addr: SocketAddr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await;
        });
        SearchBackend {
            url: format!("http://{addr}"),
            state,
            shutdown,
        }
    }

    /// The next requests answer with these statuses, in order.
    pub fn fail_next(&self, statuses: &[u16]) {
        self.state
            .script
            .lock()
            .unwrap()
            .failures
            .extend(statuses.iter().copied());
    }

    /// Answers wait until [`SearchBackend::release`].
    pub fn hold(&self) {
        self.state.released.send_replace(false);
    }

    pub fn release(&self) {
        self.state.released.send_replace(true);
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<SeenRequest> {
        self.state.script.lock().unwrap().seen.clone()
    }

    /// Waits until `count` requests have arrived; panics after 10 s.
    pub async fn wait_for_requests(&self, count: usize) {
        let mut arrivals = self.state.arrivals.subscribe();
        let waited = tokio::time::timeout(Duration::from_secs(10), async {
            while *arrivals.borrow_and_update() < count {
                if arrivals.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
        assert!(
            waited.is_ok(),
            "timed out waiting for {count} search request(s); saw {}",
            self.requests().len()
        );
    }
}

impl Drop for SearchBackend {
    fn drop(&mut self) {
        self.release();
        self.shutdown.cancel();
    }
}

/// Records the request and waits while held; the status to fail with, if
/// one is queued.
async fn arrive(
    state: &BackendState,
    uri: &Uri,
    params: HashMap<String, String>,
    headers: &HeaderMap,
) -> Option<u16> {
    let failure = {
        let mut script = state.script.lock().unwrap();
        script.seen.push(SeenRequest {
            path: uri.path().to_owned(),
            params,
            token: headers
                .get("x-subscription-token")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
        });
        script.failures.pop_front()
    };
    state.arrivals.send_modify(|n| *n += 1);
    let mut released = state.released.subscribe();
    while !*released.borrow_and_update() {
        if released.changed().await.is_err() {
            break;
        }
    }
    failure
}

/// SearXNG's `/search`: only `format=json` is served as JSON (an instance
/// without the json format enabled answers 403).
async fn searxng(
    State(state): State<Arc<BackendState>>,
    uri: Uri,
    headers: HeaderMap,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let query = params.get("q").cloned().unwrap_or_default();
    let format = params.get("format").cloned();
    if let Some(status) = arrive(&state, &uri, params, &headers).await {
        let status = StatusCode::from_u16(status).unwrap();
        return (
            status,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            status.canonical_reason().unwrap_or_default(),
        )
            .into_response();
    }
    if format.as_deref() != Some("json") {
        return (StatusCode::FORBIDDEN, "Forbidden").into_response();
    }
    let body = json!({
        "query": query,
        "number_of_results": 0,
        "results": [
            {
                "url": "https://docs.example/durable-agents",
                "title": "Durable agents on PostgreSQL",
                "content": "Every step is saved as it happens, so a crash loses nothing.",
                "publishedDate": "2026-11-20T00:00:00",
                "thumbnail": "",
                "engine": "duckduckgo",
                "template": "default.html",
                "parsed_url": ["https", "docs.example", "/durable-agents", "", "", ""],
                "img_src": "",
                "priority": "",
                "engines": ["duckduckgo", "brave"],
                "positions": [1, 2],
                "score": 3.0,
                "category": "general"
            },
            {
                "url": "https://blog.example/exactly-once",
                "title": "Exactly once, or at most once?",
                "content": "Tools that touch the outside world must never run twice.",
                "publishedDate": null,
                "engine": "brave",
                "template": "default.html",
                "parsed_url": ["https", "blog.example", "/exactly-once", "", "", ""],
                "engines": ["brave"],
                "positions": [2],
                "score": 1.0,
                "category": "general"
            }
        ],
        "answers": [],
        "corrections": [],
        "infoboxes": [],
        "suggestions": [],
        "unresponsive_engines": []
    });
    json_response(StatusCode::OK, &body)
}

/// Brave's `/res/v1/web/search`: the subscription token is checked as
/// Brave does (a missing or wrong one is a 422 error object).
async fn brave(
    State(state): State<Arc<BackendState>>,
    uri: Uri,
    headers: HeaderMap,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let query = params.get("q").cloned().unwrap_or_default();
    if let Some(status) = arrive(&state, &uri, params, &headers).await {
        let code = if status == 429 {
            "RATE_LIMITED"
        } else {
            "INTERNAL_ERROR"
        };
        let body = json!({
            "type": "ErrorResponse",
            "error": {"id": "5c4e6c4a-0000-4000-8000-000000000000", "status": status,
                      "code": code, "detail": "Request rate limit exceeded for plan.",
                      "meta": {"plan": "Free", "rate_limit": 1, "rate_current": 2}},
            "time": 1764633600
        });
        let mut response = json_response(StatusCode::from_u16(status).unwrap(), &body);
        if status == 429 {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, "1".parse().unwrap());
        }
        return response;
    }
    let token = headers
        .get("x-subscription-token")
        .and_then(|v| v.to_str().ok());
    if token != Some(BRAVE_KEY) {
        let body = json!({
            "type": "ErrorResponse",
            "error": {"id": "5c4e6c4a-0000-4000-8000-000000000001", "status": 422,
                      "code": "SUBSCRIPTION_TOKEN_INVALID",
                      "detail": "The provided subscription token is invalid."},
            "time": 1764633600
        });
        return json_response(StatusCode::UNPROCESSABLE_ENTITY, &body);
    }
    let body = json!({
        "query": {"original": query, "show_strict_warning": false, "is_navigational": false,
                  "is_news_breaking": false, "spellcheck_off": true, "country": "us",
                  "bad_results": false, "should_fallback": false, "postal_code": "",
                  "city": "", "header_country": "", "more_results_available": true, "state": ""},
        "mixed": {"type": "mixed", "main": [{"type": "web", "index": 0, "all": false},
                                             {"type": "web", "index": 1, "all": false}],
                  "top": [], "side": []},
        "type": "search",
        "web": {
            "type": "search",
            "results": [
                {
                    "title": "The <strong>Rust</strong> Programming Language",
                    "url": "https://doc.rust-lang.org/book/",
                    "is_source_local": false,
                    "is_source_both": false,
                    "description": "Welcome to <strong>The Rust Programming Language</strong>, an introductory book about Rust.",
                    "page_age": "2026-10-01T08:00:00",
                    "profile": {"name": "Rust", "url": "https://doc.rust-lang.org/book/",
                                "long_name": "doc.rust-lang.org",
                                "img": "https://imgs.search.brave.com/x/favicon.png"},
                    "language": "en",
                    "family_friendly": true,
                    "type": "search_result",
                    "subtype": "generic",
                    "meta_url": {"scheme": "https", "netloc": "doc.rust-lang.org",
                                 "hostname": "doc.rust-lang.org",
                                 "favicon": "https://imgs.search.brave.com/x/favicon.png",
                                 "path": "› book"},
                    "age": "October 1, 2026"
                },
                {
                    "title": "Rust by Example",
                    "url": "https://doc.rust-lang.org/rust-by-example/",
                    "is_source_local": false,
                    "is_source_both": false,
                    "description": "A collection of runnable examples.",
                    "profile": {"name": "Rust", "url": "https://doc.rust-lang.org/rust-by-example/",
                                "long_name": "doc.rust-lang.org",
                                "img": "https://imgs.search.brave.com/x/favicon.png"},
                    "language": "en",
                    "family_friendly": true,
                    "type": "search_result",
                    "subtype": "generic"
                }
            ],
            "family_friendly": true
        }
    });
    json_response(StatusCode::OK, &body)
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}
