//! A real HTTP API server for tests: `holdfast_api::serve` on 127.0.0.1 at an
//! ephemeral port, over the test's own database, stopped when dropped.

use std::net::SocketAddr;

use holdfast_api::{ApiConfig, ServeError};
use holdfast_db::connect::ConnectConfig;
use holdfast_db::store;
use holdfast_wire::api::operations::Health;
use holdfast_wire::domain::{Claim, ModelStep, NewToolCall, ToolKind};
use reqwest::{Method, RequestBuilder};
use serde_json::json;
use tokio::task::JoinHandle;
use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::TestDb;

pub struct ApiServer {
    pub addr: SocketAddr,
    pub http: reqwest::Client,
    pub shutdown: CancellationToken,
    task: Option<JoinHandle<Result<(), ServeError>>>,
}

impl ApiServer {
    /// A server with the default configuration.
    pub async fn start(db: &TestDb) -> ApiServer {
        ApiServer::start_with(db, |_| {}).await
    }

    /// A server whose configuration `tune` adjusts first.
    pub async fn start_with(db: &TestDb, tune: impl FnOnce(&mut ApiConfig)) -> ApiServer {
        ApiServer::start_on(&db.config, tune).await
    }

    /// A server over `database` (a cluster of the test's own), its
    /// configuration adjusted by `tune`.
    pub async fn start_on(
        database: &ConnectConfig,
        tune: impl FnOnce(&mut ApiConfig),
    ) -> ApiServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind an ephemeral port");
        ApiServer::serve_on(database, listener, tune).await
    }

    /// Stop this server (every open stream is cut, new connections are
    /// refused), run `while_down`, then serve again on the same address
    /// (default configuration): a restart as its clients see it.
    pub async fn restart_after<T>(
        &mut self,
        db: &TestDb,
        while_down: impl std::future::Future<Output = T>,
    ) -> T {
        self.shutdown.cancel();
        if let Some(task) = self.task.take() {
            let stopped = task.await.expect("serve task panicked");
            stopped.expect("the server stops cleanly");
        }
        let outcome = while_down.await;
        // tokio binds with SO_REUSEADDR: the old connections' TIME_WAIT does
        // not keep the port.
        let listener = tokio::net::TcpListener::bind(self.addr)
            .await
            .expect("bind the same address again");
        *self = ApiServer::serve_on(&db.config, listener, |_| {}).await;
        outcome
    }

    async fn serve_on(
        database: &ConnectConfig,
        listener: tokio::net::TcpListener,
        tune: impl FnOnce(&mut ApiConfig),
    ) -> ApiServer {
        let mut config = ApiConfig::new(database.clone());
        tune(&mut config);
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(holdfast_api::serve(config, listener, shutdown.clone()));
        let server = ApiServer {
            addr,
            // Never through a proxy: egress tests set proxy variables in
            // this process to prove the server ignores them.
            http: holdfast_outbound::client_builder()
                .no_proxy()
                .build()
                .expect("an HTTP client"),
            shutdown,
            task: Some(task),
        };
        server.wait_listening().await;
        server
    }

    /// Wait until the server reports its LISTEN session connected
    /// (`/readyz`). Live deltas are never saved, so one sent before the
    /// server listens is gone by design; and the connect wakes every waiting
    /// claim once, which a test measuring an idle long-poll must not race.
    async fn wait_listening(&self) {
        crate::wait_until(
            std::time::Duration::from_secs(10),
            "the API's LISTEN session",
            || async {
                let Ok(response) = self.http.get(self.url("/readyz")).send().await else {
                    return false;
                };
                // Not ready yet is a 503 with an error body, not a Health.
                response
                    .json::<Health>()
                    .await
                    .is_ok_and(|health| health.listener.as_deref() == Some("connected"))
            },
        )
        .await;
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// The typed API client, as the holder of `key` (an API key or a machine
    /// token), on this server's connection pool.
    pub fn client(&self, key: &str) -> holdfast_client::Client {
        holdfast_client::Client::with_http(self.http.clone(), &self.url(""), key)
    }

    /// A request with `key` as its bearer token.
    pub fn request(&self, method: Method, path: &str, key: &str) -> RequestBuilder {
        self.http.request(method, self.url(path)).bearer_auth(key)
    }

    /// Cancel the shutdown token and wait for `serve` to return.
    pub async fn stop(mut self) -> Result<(), ServeError> {
        self.shutdown.cancel();
        match self.task.take() {
            Some(task) => task.await.expect("serve task panicked"),
            None => Ok(()),
        }
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// A new project with an API key: (project id, key).
pub async fn project_key(client: &Client) -> (Uuid, String) {
    let created = store::create_api_key(client, &format!("p{}", Uuid::new_v4().simple()))
        .await
        .expect("create an API key");
    (created.project_id, created.key)
}

/// Give `agent` a turn whose model step asks for one custom tool call, so
/// the agent waits for the client's result; returns the call's id.
pub async fn waiting_custom_call(client: &Client, agent: Uuid) -> Uuid {
    waiting_tool_call(client, agent, "lookup", json!({"q": 1}), ToolKind::Custom).await
}

/// Give `agent` (the only ready agent) a turn whose model step asks for one
/// call of tool `name` of `kind` with `input`, committed as a worker would
/// (a `run_command` call queues its command); returns the call's id.
pub async fn waiting_tool_call(
    client: &Client,
    agent: Uuid,
    name: &str,
    input: serde_json::Value,
    kind: ToolKind,
) -> Uuid {
    store::create_input(client, agent, &json!("use the tool"), None)
        .await
        .unwrap();
    let claim: Claim =
        store::claim_agents(client, "test-worker", 1, std::time::Duration::from_secs(60))
            .await
            .unwrap()
            .into_iter()
            .find(|c| c.agent_id == agent)
            .expect("the agent is claimable");
    let inputs: Vec<Uuid> = client
        .query(
            "SELECT id FROM holdfast.inputs WHERE agent_id = $1 AND consumed_at IS NULL",
            &[&agent],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let step = ModelStep {
        input_ids: inputs,
        message: vec![json!({"type": "tool_use", "id": "toolu_1", "name": name, "input": input})],
        tool_calls: vec![NewToolCall {
            provider_id: "toolu_1".into(),
            name: name.into(),
            input,
            kind,
        }],
        usage: json!({}),
        stop_reason: Some("tool_use".into()),
        config_version: None,
    };
    let step_id = store::commit_model_step(client, claim, &step)
        .await
        .unwrap();
    client
        .query_one(
            "SELECT id FROM holdfast.tool_calls WHERE step_id = $1",
            &[&step_id],
        )
        .await
        .unwrap()
        .get(0)
}

/// An error answer's status, and its body's `type`, `message` and
/// `field`, checking the API's error shape on the way (JSON, with
/// `error.type` and `error.message` strings).
pub async fn error_of(
    response: reqwest::Response,
) -> (reqwest::StatusCode, String, String, Option<String>) {
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body: serde_json::Value = response.json().await.expect("an error body is JSON");
    assert!(
        content_type.starts_with("application/json"),
        "{status}: content-type {content_type}"
    );
    let error = body
        .get("error")
        .unwrap_or_else(|| panic!("{status}: no error in {body}"));
    let kind = error["type"].as_str().expect("error.type").to_owned();
    let message = error["message"].as_str().expect("error.message").to_owned();
    (
        status,
        kind,
        message,
        error
            .get("field")
            .and_then(|f| f.as_str())
            .map(str::to_owned),
    )
}

/// `method path` to the API at `base_url` as the holder of `key`, with
/// `body` as JSON: the status, and the answer as JSON (null when it is
/// not JSON). For tests of statuses and bodies as sent; a test that only
/// needs the API to do something uses [`ApiServer::client`].
pub async fn call_at(
    http: &reqwest::Client,
    base_url: &str,
    method: Method,
    path: &str,
    key: &str,
    body: Option<serde_json::Value>,
) -> (reqwest::StatusCode, serde_json::Value) {
    let mut request = http
        .request(method, format!("{base_url}{path}"))
        .bearer_auth(key);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
    )
}

/// [`call_at`] `server`.
pub async fn call(
    server: &ApiServer,
    method: Method,
    path: &str,
    key: &str,
    body: Option<serde_json::Value>,
) -> (reqwest::StatusCode, serde_json::Value) {
    call_at(&server.http, &server.url(""), method, path, key, body).await
}

/// Send raw bytes to `addr`, read the whole response (the server answers
/// and closes within 10 s): (status, JSON body). For what a well-behaved
/// HTTP client cannot send, such as only the head of an oversized body.
pub async fn raw_http(addr: SocketAddr, request: Vec<u8>) -> (u16, serde_json::Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    socket.write_all(&request).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        socket.read_to_end(&mut raw),
    )
    .await
    .expect("the server answers and closes")
    .unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("a response head");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    assert!(
        head.to_lowercase()
            .contains("content-type: application/json"),
        "{head}"
    );
    (status, serde_json::from_str(body).expect("a JSON body"))
}
