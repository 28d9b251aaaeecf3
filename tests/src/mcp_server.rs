//! A real MCP server over Streamable HTTP (rmcp's server side) for tests.
//!
//! Tools:
//! - `increment {"by"?: integer}`: adds to a shared counter and answers
//!   `counter is now N`. While [`McpTestServer::hold_calls`] is armed, the
//!   call counts first and then waits for [`McpTestServer::release_calls`]
//!   (the counter shows the tool ran; the caller has no answer yet).
//! - `fail`: answers with `isError: true`.
//! - `echo`: answers its arguments as text and as `structuredContent`;
//!   while [`McpTestServer::hold_calls`] is armed, it waits too.
//! - `binary`: answers text holding U+0000, as a tool that reads a binary
//!   file would (Postgres text can't store it).
//! - `chart`: answers text, a PNG and an SVG image.
//! - whatever names [`McpTestServer::offer_tool`] added, any string as MCP
//!   allows (a model provider may not); calling one is an error.
//!
//! The test sees how often the counter moved, how many `tools/list` requests
//! arrived, and the values of request headers the server received.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{json, Map, Value};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

#[derive(Default)]
struct Observed {
    counter: AtomicU64,
    increment_calls: AtomicU64,
    tools_list_requests: AtomicU64,
    /// Values of every request header, by lowercased name.
    headers: Mutex<HashMap<String, Vec<String>>>,
}

struct Shared {
    observed: Observed,
    /// Bumped when an `increment` call has counted, for waiters.
    increment_events: watch::Sender<u64>,
    /// `true` while `increment` calls wait to be released.
    holding: watch::Sender<bool>,
    /// Names listed after the built-in tools.
    offered: Mutex<Vec<String>>,
}

#[derive(Clone)]
struct TestTools {
    shared: Arc<Shared>,
}

fn object_schema(properties: Value) -> Arc<Map<String, Value>> {
    let mut schema = Map::new();
    schema.insert("type".into(), "object".into());
    schema.insert("properties".into(), properties);
    Arc::new(schema)
}

impl ServerHandler for TestTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.shared
            .observed
            .tools_list_requests
            .fetch_add(1, Ordering::SeqCst);
        let offered = self
            .shared
            .offered
            .lock()
            .unwrap()
            .iter()
            .map(|name| Tool::new(name.clone(), "An offered tool.", object_schema(json!({}))))
            .collect::<Vec<_>>();
        let mut tools = vec![
            Tool::new(
                "increment",
                "Add to the shared counter.",
                object_schema(json!({"by": {"type": "integer"}})),
            ),
            Tool::new("fail", "Always fails.", object_schema(json!({}))),
            Tool::new(
                "echo",
                "Echo the arguments.",
                object_schema(json!({"message": {"type": "string"}})),
            ),
            Tool::new(
                "binary",
                "Answer text holding U+0000.",
                object_schema(json!({})),
            ),
            Tool::new(
                "chart",
                "Answer text, a PNG and an SVG image.",
                object_schema(json!({})),
            ),
        ];
        tools.extend(offered);
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = request.arguments.unwrap_or_default();
        match request.name.as_ref() {
            "increment" => {
                let by = arguments.get("by").and_then(Value::as_u64).unwrap_or(1);
                let observed = &self.shared.observed;
                let value = observed.counter.fetch_add(by, Ordering::SeqCst) + by;
                observed.increment_calls.fetch_add(1, Ordering::SeqCst);
                self.shared.increment_events.send_modify(|n| *n += 1);
                let mut holding = self.shared.holding.subscribe();
                let _ = holding.wait_for(|holding| !*holding).await;
                Ok(CallToolResult::success(vec![ContentBlock::text(format!(
                    "counter is now {value}"
                ))])
                .into())
            }
            "fail" => Ok(CallToolResult::error(vec![ContentBlock::text(
                "the fail tool failed, as it always does",
            )])
            .into()),
            "echo" => {
                let mut holding = self.shared.holding.subscribe();
                let _ = holding.wait_for(|holding| !*holding).await;
                let mut result = CallToolResult::success(vec![ContentBlock::text(
                    Value::Object(arguments.clone()).to_string(),
                )]);
                result.structured_content = Some(Value::Object(arguments));
                Ok(result.into())
            }
            "chart" => Ok(CallToolResult::success(vec![
                ContentBlock::text("the chart"),
                ContentBlock::image(CHART_PNG, "image/png"),
                ContentBlock::image("PHN2Zy8+", "image/svg+xml"),
            ])
            .into()),
            "binary" => {
                Ok(CallToolResult::success(vec![ContentBlock::text("header\u{0}payload")]).into())
            }
            other => Err(ErrorData::invalid_params(
                format!("unknown tool {other:?}"),
                None,
            )),
        }
    }
}

/// The PNG the `chart` tool answers with (1×1), base64.
pub const CHART_PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

/// A running MCP server on 127.0.0.1; stops when dropped.
pub struct McpTestServer {
    /// The Streamable HTTP endpoint, `http://127.0.0.1:PORT/mcp`.
    pub url: String,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
}

impl McpTestServer {
    pub async fn start() -> McpTestServer {
        let shared = Arc::new(Shared {
            observed: Observed::default(),
            increment_events: watch::channel(0).0,
            holding: watch::channel(false).0,
            offered: Mutex::default(),
        });
        let shutdown = CancellationToken::new();
        let tools = TestTools {
            shared: shared.clone(),
        };
        let service: StreamableHttpService<TestTools, LocalSessionManager> =
            StreamableHttpService::new(
                move || Ok(tools.clone()),
                Default::default(),
                StreamableHttpServerConfig::default()
                    .with_sse_keep_alive(None)
                    .with_cancellation_token(shutdown.child_token()),
            );
        let app = axum::Router::new().nest_service("/mcp", service).layer(
            middleware::from_fn_with_state(shared.clone(), record_headers),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the MCP test server");
        let addr = listener.local_addr().unwrap();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await;
        });
        McpTestServer {
            url: format!("http://{addr}/mcp"),
            shared,
            shutdown,
        }
    }

    /// The shared counter's value.
    /// Lists a tool named `name` from the next `tools/list` on.
    pub fn offer_tool(&self, name: &str) {
        self.shared.offered.lock().unwrap().push(name.to_owned());
    }

    pub fn counter(&self) -> u64 {
        self.shared.observed.counter.load(Ordering::SeqCst)
    }

    /// `increment` calls that reached the tool.
    pub fn increment_calls(&self) -> u64 {
        self.shared.observed.increment_calls.load(Ordering::SeqCst)
    }

    /// `tools/list` requests received.
    pub fn tools_list_requests(&self) -> u64 {
        self.shared
            .observed
            .tools_list_requests
            .load(Ordering::SeqCst)
    }

    /// Every value received for request header `name` (any case).
    pub fn header_values(&self, name: &str) -> Vec<String> {
        self.shared
            .observed
            .headers
            .lock()
            .unwrap()
            .get(&name.to_ascii_lowercase())
            .cloned()
            .unwrap_or_default()
    }

    /// From now on, `increment` calls count and then wait for [`Self::release_calls`].
    pub fn hold_calls(&self) {
        self.shared.holding.send_replace(true);
    }

    /// Lets held `increment` calls answer; later calls answer at once.
    pub fn release_calls(&self) {
        self.shared.holding.send_replace(false);
    }

    /// Waits until `count` `increment` calls have counted; panics after 10 s.
    pub async fn wait_for_increment_calls(&self, count: u64) {
        let mut events = self.shared.increment_events.subscribe();
        let waited = tokio::time::timeout(Duration::from_secs(10), async {
            while self.increment_calls() < count {
                if events.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
        assert!(
            waited.is_ok(),
            "timed out waiting for {count} increment call(s); saw {}",
            self.increment_calls()
        );
    }
}

impl Drop for McpTestServer {
    fn drop(&mut self) {
        self.release_calls();
        self.shutdown.cancel();
    }
}

async fn record_headers(
    State(shared): State<Arc<Shared>>,
    request: Request,
    next: Next,
) -> Response {
    {
        let mut headers = shared.observed.headers.lock().unwrap();
        for (name, value) in request.headers() {
            if let Ok(value) = value.to_str() {
                headers
                    .entry(name.as_str().to_string())
                    .or_default()
                    .push(value.to_string());
            }
        }
    }
    next.run(request).await
}
