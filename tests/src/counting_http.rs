//! A loopback HTTP server for tool tests that counts hits per path.
//!
//! Routes:
//! - `/html`: an article page with script, style, nav and footer noise;
//! - `/json`: a small JSON document;
//! - `/binary`: a PNG header (image/png);
//! - `/large/{bytes}`: `bytes` bytes of text/plain, streamed in 16 KiB chunks;
//! - `/redirect/{n}`: a chain of `n` redirects ending at `/json`;
//! - `/hold/{anything}`: answers only once [`CountingServer::release_held`]
//!   is called (for timeouts, and for "process killed mid-fetch" tests);
//! - any path set with [`CountingServer::set_response`].
//!
//! Every request is counted under its path (without the query) before it is
//! answered, so a test can await "the request arrived" with
//! [`CountingServer::wait_for_hits`] and assert exact counts afterwards.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The page at `/html`.
pub const ARTICLE_HTML: &str = r#"<!DOCTYPE html>
<html>
<head>
  <title>Holdfast field notes</title>
  <style>body { font-family: sans-serif } .secret { color: red }</style>
  <script>window.trackingSecret = "SCRIPT-CONTENT-MUST-NOT-APPEAR";</script>
</head>
<body>
  <nav><a href="/">Home</a> <a href="/about">NAV-CONTENT-MUST-NOT-APPEAR</a></nav>
  <main>
    <h1>Durable agents</h1>
    <p>Every step is saved to <b>PostgreSQL</b> as it happens.</p>
    <p>Read the <a href="/docs/design">design notes</a> for details.</p>
    <h2>Guarantees</h2>
    <ul><li>Finished steps never run again.</li><li>Crash recovery never reruns a tool.</li></ul>
  </main>
  <script type="module">console.log("SCRIPT-CONTENT-MUST-NOT-APPEAR")</script>
  <footer>FOOTER-CONTENT-MUST-NOT-APPEAR</footer>
</body>
</html>"#;

/// The document at `/json`.
pub const SAMPLE_JSON: &str = r#"{"name": "holdfast", "durable": true, "steps": [1, 2, 3]}"#;

#[derive(Clone)]
struct Canned {
    status: StatusCode,
    content_type: String,
    body: Bytes,
}

struct ServerState {
    hits: Mutex<HashMap<String, u64>>,
    /// Total requests seen; bumped after each count, for waiters.
    hit_events: watch::Sender<u64>,
    responses: Mutex<HashMap<String, Canned>>,
    /// `true` once held requests may answer.
    released: watch::Sender<bool>,
}

/// A running server on 127.0.0.1; stops when dropped.
pub struct CountingServer {
    pub addr: SocketAddr,
    state: Arc<ServerState>,
    shutdown: CancellationToken,
}

impl CountingServer {
    pub async fn start() -> CountingServer {
        let state = Arc::new(ServerState {
            hits: Mutex::new(HashMap::new()),
            hit_events: watch::channel(0).0,
            responses: Mutex::new(HashMap::new()),
            released: watch::channel(false).0,
        });
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the counting server");
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await;
        });
        CountingServer {
            addr,
            state,
            shutdown,
        }
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Requests seen for `path` (without query).
    pub fn hits(&self, path: &str) -> u64 {
        self.state
            .hits
            .lock()
            .unwrap()
            .get(path)
            .copied()
            .unwrap_or(0)
    }

    /// Requests seen on any path.
    pub fn total_hits(&self) -> u64 {
        self.state.hits.lock().unwrap().values().sum()
    }

    /// Waits until `path` has at least `count` hits; panics after 10 s.
    pub async fn wait_for_hits(&self, path: &str, count: u64) {
        let mut events = self.state.hit_events.subscribe();
        let waited = tokio::time::timeout(Duration::from_secs(10), async {
            while self.hits(path) < count {
                if events.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
        assert!(
            waited.is_ok(),
            "timed out waiting for {count} hit(s) on {path}; saw {}",
            self.hits(path)
        );
    }

    /// Serves `body` at `path` from now on.
    pub fn set_response(
        &self,
        path: &str,
        status: u16,
        content_type: &str,
        body: impl Into<Bytes>,
    ) {
        self.state.responses.lock().unwrap().insert(
            path.to_string(),
            Canned {
                status: StatusCode::from_u16(status).expect("a valid status"),
                content_type: content_type.to_string(),
                body: body.into(),
            },
        );
    }

    /// Lets every held `/hold/…` request answer, and later ones answer at once.
    pub fn release_held(&self) {
        self.state.released.send_replace(true);
    }
}

impl Drop for CountingServer {
    fn drop(&mut self) {
        self.release_held();
        self.shutdown.cancel();
    }
}

async fn handle(State(state): State<Arc<ServerState>>, request: Request) -> Response {
    let path = request.uri().path().to_string();
    *state.hits.lock().unwrap().entry(path.clone()).or_default() += 1;
    state.hit_events.send_modify(|n| *n += 1);

    let canned = state.responses.lock().unwrap().get(&path).cloned();
    if let Some(canned) = canned {
        return (
            canned.status,
            [(header::CONTENT_TYPE, canned.content_type)],
            canned.body,
        )
            .into_response();
    }
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match segments.as_slice() {
        ["html"] => (
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            ARTICLE_HTML,
        )
            .into_response(),
        ["json"] => ([(header::CONTENT_TYPE, "application/json")], SAMPLE_JSON).into_response(),
        ["binary"] => (
            [(header::CONTENT_TYPE, "image/png")],
            Bytes::from_static(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"),
        )
            .into_response(),
        ["large", bytes] => match bytes.parse::<usize>() {
            Ok(total) => large_body(total),
            Err(_) => StatusCode::BAD_REQUEST.into_response(),
        },
        ["redirect", n] => match n.parse::<u32>() {
            Ok(0) => (StatusCode::FOUND, [(header::LOCATION, "/json")]).into_response(),
            Ok(n) => (
                StatusCode::FOUND,
                [(header::LOCATION, format!("/redirect/{}", n - 1))],
            )
                .into_response(),
            Err(_) => StatusCode::BAD_REQUEST.into_response(),
        },
        ["hold", ..] => {
            let mut released = state.released.subscribe();
            // Dropped with the connection if the client goes away.
            let _ = released.wait_for(|released| *released).await;
            ([(header::CONTENT_TYPE, "text/plain")], "released").into_response()
        }
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

/// `total` bytes of text, streamed so a client that stops early never
/// receives it all.
fn large_body(total: usize) -> Response {
    const CHUNK: usize = 16 * 1024;
    let chunks = (0..total.div_ceil(CHUNK)).map(move |i| {
        let len = CHUNK.min(total - i * CHUNK);
        Ok::<_, std::convert::Infallible>(Bytes::from(vec![b'x'; len]))
    });
    let mut response = Response::new(Body::from_stream(futures::stream::iter(chunks)));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
