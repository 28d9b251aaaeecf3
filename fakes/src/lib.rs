//! A fake model provider for tests, the fault suite, benchmarks and the
//! demo: one HTTP server on `127.0.0.1:0` that speaks the Anthropic
//! Messages API (`POST /v1/messages`), OpenAI Chat Completions
//! (`POST /v1/chat/completions`) and the OpenAI Responses API
//! (`POST /v1/responses`), streaming, byte for byte in their documented
//! formats.
//!
//! Tests script it: [`FakeProvider::push`] queues [`Reply`]s (text, tool
//! calls, error statuses with `Retry-After`, hangs, cut or reset streams,
//! slow trickles, context-too-long errors), answered in order in whichever
//! protocol each request uses; an empty queue answers with the default
//! reply (an instant "ok"). Every request body is logged, and tests await
//! conditions ([`FakeProvider::wait_for_requests`],
//! [`FakeProvider::wait_until_held`], [`FakeProvider::wait_for_aborted`])
//! instead of sleeping.

mod render;
mod reply;

/// The largest request body the fake reads.
const FAKE_BODY_LIMIT: usize = 64 * 1024 * 1024;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

pub use render::Protocol;
use render::{
    block_frames, context_too_long_body, error_body, failed_frames, message_frames,
    responses_frames, stream_error_frame, Context,
};
pub use reply::Reply;
use reply::{End, Hold, ReplyBody};

/// How long the `wait_*` methods wait before failing the test.
const WAIT_LIMIT: Duration = Duration::from_secs(30);

/// A request the fake received.
#[derive(Clone, Debug)]
pub struct ReceivedRequest {
    pub protocol: Protocol,
    /// Header names lowercased.
    pub headers: Vec<(String, String)>,
    /// The JSON body (a JSON string holding the raw text if it was not JSON).
    pub body: Value,
}

impl ReceivedRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Computes a reply from a request's JSON body (scripts that depend on the
/// conversation so far, e.g. one multi-turn script per agent).
pub type Responder = Arc<dyn Fn(&serde_json::Value) -> Reply + Send + Sync>;

struct Shared {
    queue: Mutex<VecDeque<Reply>>,
    default_reply: Mutex<Reply>,
    responder: Mutex<Option<Responder>>,
    requests: Mutex<Vec<ReceivedRequest>>,
    serial: AtomicU64,
    /// Requests received.
    arrived: watch::Sender<usize>,
    /// Replies currently stopped at their hold point.
    held: watch::Sender<usize>,
    /// Bumped by `release`; a held reply continues once it changes.
    release: watch::Sender<u64>,
    /// Replies whose client went away before the reply was fully sent.
    aborted: watch::Sender<usize>,
}

/// The running fake. Dropping it stops accepting connections.
pub struct FakeProvider {
    /// `scheme://host:port`, what the base URLs start with.
    origin: String,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
}

impl Drop for FakeProvider {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl FakeProvider {
    /// Start on an ephemeral port of 127.0.0.1 (panics if it cannot bind:
    /// for tests).
    pub async fn start() -> FakeProvider {
        FakeProvider::try_start()
            .await
            .expect("bind the fake provider on 127.0.0.1")
    }

    /// Start on an ephemeral port of 127.0.0.1, or say why it could not.
    pub async fn try_start() -> std::io::Result<FakeProvider> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let origin = format!("http://{}", listener.local_addr()?);
        Ok(FakeProvider::serve(listener, origin))
    }

    /// Serve on `listener` (a TLS one, say), reached at `origin`
    /// (`https://localhost:PORT`).
    pub fn serve<L>(listener: L, origin: String) -> FakeProvider
    where
        L: axum::serve::Listener,
        L::Addr: std::fmt::Debug,
    {
        let shared = Arc::new(Shared {
            queue: Mutex::new(VecDeque::new()),
            default_reply: Mutex::new(Reply::text("ok")),
            responder: Mutex::new(None),
            requests: Mutex::new(Vec::new()),
            serial: AtomicU64::new(0),
            arrived: watch::Sender::new(0),
            held: watch::Sender::new(0),
            release: watch::Sender::new(0),
            aborted: watch::Sender::new(0),
        });
        let app = Router::new()
            .route("/v1/messages", post(anthropic))
            .route("/v1/chat/completions", post(openai))
            .route("/v1/responses", post(openai_responses))
            // The providers take requests of tens of megabytes (Anthropic
            // 32 MB, OpenAI 50 MB of files), not axum's default 2 MB.
            .layer(DefaultBodyLimit::max(FAKE_BODY_LIMIT))
            .with_state(shared.clone());
        let server = tokio::spawn(async move {
            // Only ends when aborted (on drop); an accept error is the test's end anyway.
            let _ = axum::serve(listener, app).await;
        });
        FakeProvider {
            origin,
            shared,
            server,
        }
    }

    /// `http://127.0.0.1:PORT` (or the origin given to
    /// [`FakeProvider::serve`]): serves every protocol.
    pub fn base_url(&self) -> String {
        self.origin.clone()
    }

    /// The Anthropic base URL (`ANTHROPIC_BASE_URL`; `/v1/messages` is appended).
    pub fn base_url_anthropic(&self) -> String {
        self.base_url()
    }

    /// The OpenAI base URL (`OPENAI_BASE_URL`, with its `/v1`), for both
    /// OpenAI APIs.
    pub fn base_url_openai(&self) -> String {
        format!("{}/v1", self.base_url())
    }

    /// Queue a reply; replies answer requests in order.
    pub fn push(&self, reply: Reply) {
        lock(&self.shared.queue).push_back(reply);
    }

    /// The reply for requests that find the queue empty (default: an
    /// instant "ok" text).
    pub fn set_default(&self, reply: Reply) {
        *lock(&self.shared.default_reply) = reply;
    }

    /// Answer requests that find the queue empty with `responder(body)`
    /// instead of the default reply.
    pub fn set_responder(
        &self,
        responder: impl Fn(&serde_json::Value) -> Reply + Send + Sync + 'static,
    ) {
        *lock(&self.shared.responder) = Some(Arc::new(responder));
    }

    /// Replies queued and not yet used.
    pub fn queued(&self) -> usize {
        lock(&self.shared.queue).len()
    }

    pub fn request_count(&self) -> usize {
        *self.shared.arrived.borrow()
    }

    /// Every request received so far, oldest first.
    pub fn requests(&self) -> Vec<ReceivedRequest> {
        lock(&self.shared.requests).clone()
    }

    /// The latest request received.
    pub fn last_request(&self) -> Option<ReceivedRequest> {
        lock(&self.shared.requests).last().cloned()
    }

    /// Replies whose client disconnected before they were fully sent.
    pub fn aborted_count(&self) -> usize {
        *self.shared.aborted.borrow()
    }

    /// Let every reply currently held (hang, `hold_*`) continue. Replies
    /// reaching their hold point later wait for the next release, so await
    /// [`FakeProvider::wait_until_held`] first.
    pub fn release(&self) {
        self.shared
            .release
            .send_modify(|generation| *generation += 1);
    }

    /// The number of replies stopped at their hold point, to await without
    /// a time limit (the demo waits on it alongside other things).
    pub fn held_watch(&self) -> watch::Receiver<usize> {
        self.shared.held.subscribe()
    }

    /// Wait until at least `n` requests have arrived (panics after 30 s).
    pub async fn wait_for_requests(&self, n: usize) {
        wait_at_least(&self.shared.arrived, n, "requests to arrive").await;
    }

    /// Wait until at least `n` replies are stopped at their hold point.
    pub async fn wait_until_held(&self, n: usize) {
        wait_at_least(&self.shared.held, n, "replies to be held").await;
    }

    /// Wait until at least `n` replies have lost their client mid-way.
    pub async fn wait_for_aborted(&self, n: usize) {
        wait_at_least(&self.shared.aborted, n, "clients to disconnect").await;
    }
}

async fn wait_at_least(counter: &watch::Sender<usize>, n: usize, what: &str) {
    let mut rx = counter.subscribe();
    let waited = tokio::time::timeout(WAIT_LIMIT, rx.wait_for(|seen| *seen >= n)).await;
    if waited.is_err() {
        panic!(
            "fake provider: waited {WAIT_LIMIT:?} for {n} {what}, saw {}",
            *counter.borrow()
        );
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A test that panicked while holding the lock has failed already.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

async fn anthropic(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    serve(shared, Protocol::Anthropic, headers, body).await
}

async fn openai(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    serve(shared, Protocol::Openai, headers, body).await
}

async fn openai_responses(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    serve(shared, Protocol::OpenaiResponses, headers, body).await
}

/// Counts a reply as aborted if dropped before `done()`: the client went
/// away (hyper drops the handler or the body when the connection closes).
struct AbortWatch {
    shared: Arc<Shared>,
    done: bool,
}

impl AbortWatch {
    fn done(mut self) {
        self.done = true;
    }
}

impl Drop for AbortWatch {
    fn drop(&mut self) {
        if !self.done {
            self.shared.aborted.send_modify(|n| *n += 1);
        }
    }
}

/// Wait for the next `release`, counted as held meanwhile.
async fn hold(shared: &Shared) {
    let mut release = shared.release.subscribe();
    release.mark_unchanged();
    shared.held.send_modify(|n| *n += 1);
    struct Unhold<'a>(&'a Shared);
    impl Drop for Unhold<'_> {
        fn drop(&mut self) {
            self.0.held.send_modify(|n| *n -= 1);
        }
    }
    let _unhold = Unhold(shared);
    // Err only if the sender is gone, which `shared` prevents.
    let _ = release.changed().await;
}

async fn serve(
    shared: Arc<Shared>,
    protocol: Protocol,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let serial = shared.serial.fetch_add(1, Ordering::Relaxed) + 1;
    let json: Value = serde_json::from_slice(&body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
    let mut cx = Context {
        serial,
        model: json
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or("fake-model")
            .to_owned(),
        input_tokens: (body.len() as u64).div_ceil(4),
        include_usage: json.pointer("/stream_options/include_usage") == Some(&Value::Bool(true)),
        created: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        cache_tokens: (0, 0),
        reasoning_tokens: 0,
    };
    let responder = lock(&shared.responder).clone();
    let scripted = responder.map(|respond| respond(&json));
    lock(&shared.requests).push(ReceivedRequest {
        protocol,
        headers: headers
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: json,
    });
    shared.arrived.send_modify(|n| *n += 1);
    let queued = lock(&shared.queue).pop_front();
    let reply = queued
        .or(scripted)
        .unwrap_or_else(|| lock(&shared.default_reply).clone());
    cx.cache_tokens = reply.cache_tokens;
    cx.reasoning_tokens = reply.reasoning_tokens;
    if let Some(model) = &reply.answered_by {
        cx.model.clone_from(model);
    }

    if reply.hold == Some(Hold::BeforeHeaders) {
        let watch = AbortWatch {
            shared: shared.clone(),
            done: false,
        };
        hold(&shared).await;
        watch.done();
    }

    let request_id_header = match protocol {
        Protocol::Anthropic => "request-id",
        Protocol::Openai | Protocol::OpenaiResponses => "x-request-id",
    };
    let mut response = match &reply.body {
        ReplyBody::Status {
            status,
            retry_after,
            body,
        } => {
            let body = body
                .clone()
                .unwrap_or_else(|| error_body(protocol, *status, serial));
            let mut response = json_response(*status, body);
            if let Some(value) = retry_after {
                set_header(&mut response, "retry-after", value);
            }
            response
        }
        ReplyBody::ContextTooLong => json_response(400, context_too_long_body(protocol, serial)),
        ReplyBody::Message { .. }
        | ReplyBody::Blocks { .. }
        | ReplyBody::Items { .. }
        | ReplyBody::Failed { .. } => {
            let frames = match &reply.body {
                ReplyBody::Message {
                    text,
                    tool_calls,
                    stop_reason,
                } => message_frames(
                    protocol,
                    &cx,
                    text,
                    tool_calls,
                    stop_reason.as_deref(),
                    reply.usage,
                ),
                ReplyBody::Items { items, stop_reason } => {
                    if protocol == Protocol::OpenaiResponses {
                        responses_frames(&cx, items, stop_reason.as_deref(), reply.usage)
                    } else {
                        let text: String = items
                            .iter()
                            .filter_map(|item| item.get("content").and_then(Value::as_array))
                            .flatten()
                            .filter_map(|part| part.get("text").and_then(Value::as_str))
                            .collect();
                        message_frames(
                            protocol,
                            &cx,
                            &text,
                            &[],
                            stop_reason.as_deref(),
                            reply.usage,
                        )
                    }
                }
                ReplyBody::Failed { code, message } => failed_frames(protocol, &cx, code, message),
                _ => block_frames(protocol, &cx, &reply.body, reply.usage),
            };
            let mut response = Response::new(stream_body(shared.clone(), protocol, frames, &reply));
            set_header(
                &mut response,
                "content-type",
                "text/event-stream; charset=utf-8",
            );
            set_header(&mut response, "cache-control", "no-cache");
            response
        }
    };
    set_header(
        &mut response,
        request_id_header,
        &format!("req_fake{serial:020}"),
    );
    for (name, value) in &reply.headers {
        set_header(&mut response, name, value);
    }
    response
}

fn json_response(status: u16, body: String) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    set_header(&mut response, "content-type", "application/json");
    response
}

fn set_header(response: &mut Response, name: &str, value: &str) {
    if let (Ok(name), Ok(value)) = (
        HeaderName::from_bytes(name.as_bytes()),
        HeaderValue::from_str(value),
    ) {
        response.headers_mut().insert(name, value);
    }
}

/// The streamed body: all at once when nothing is scripted to happen
/// mid-stream (fast, for benchmarks), else frame by frame from a task that
/// holds, trickles, cuts, resets or fails where scripted.
fn stream_body(
    shared: Arc<Shared>,
    protocol: Protocol,
    frames: Vec<render::Frame>,
    reply: &Reply,
) -> Body {
    let plain = reply.end == End::Complete
        && reply.trickle.is_none()
        && !matches!(reply.hold, Some(Hold::AfterDeltas(_)));
    if plain {
        let mut all = Vec::new();
        for frame in &frames {
            all.extend_from_slice(&frame.bytes);
        }
        return Body::from(all);
    }
    let hold_after = match reply.hold {
        Some(Hold::AfterDeltas(n)) => Some(n),
        _ => None,
    };
    let (stop_after, end) = match reply.end {
        End::Complete => (None, End::Complete),
        End::CutAfter(n) | End::ResetAfter(n) | End::ErrorAfter(n) => (Some(n), reply.end),
    };
    let trickle = reply.trickle;
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    tokio::spawn(async move {
        let watch = AbortWatch {
            shared: shared.clone(),
            done: false,
        };
        let mut deltas = 0;
        let mut sent = 0;
        let mut held = false;
        let mut frames = frames.into_iter().peekable();
        loop {
            // "After n deltas" means right after the nth delta frame went
            // out, or for n = 0 right before the first one.
            let at_point = |n: usize, deltas: usize, next_is_delta: Option<bool>| {
                n == deltas && (deltas > 0 || next_is_delta != Some(false))
            };
            let next_is_delta = frames.peek().map(|f| f.delta);
            if hold_after.is_some_and(|n| !held && at_point(n, deltas, next_is_delta)) {
                held = true;
                tokio::select! {
                    _ = hold(&shared) => {}
                    _ = tx.closed() => return, // aborted: `watch` counts it
                }
            }
            if stop_after.is_some_and(|n| at_point(n, deltas, next_is_delta)) {
                break;
            }
            let Some(frame) = frames.next() else { break };
            if let Some(delay) = trickle {
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = tx.closed() => return,
                }
            }
            if tx.send(Ok(frame.bytes)).await.is_err() {
                return;
            }
            sent += 1;
            if frame.delta {
                deltas += 1;
            }
        }
        let _ = match end {
            End::ErrorAfter(_) => tx.send(Ok(stream_error_frame(protocol, sent))).await,
            End::ResetAfter(_) => {
                tx.send(Err(std::io::Error::other("connection reset by the fake")))
                    .await
            }
            End::Complete | End::CutAfter(_) => Ok(()),
        };
        watch.done();
    });
    Body::from_stream(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    }))
}
