//! The egress policy on the real code paths: `web_fetch`, the MCP client,
//! webhook delivery, machine wake URLs and an agent's own model base URL.
//! Each kind is sent at the same table of internal targets and must refuse
//! every one with an error naming the range, before connecting (a trap
//! listener on 127.0.0.1 counts connections; 10.x and 169.254.x are never
//! connected to, which the error text proves: it is produced before any
//! connection). A server on 127.0.0.2, the range the operator allows,
//! is reached, and a redirect from it to 127.0.0.1 is not followed there.
//! Proxy variables point at a capture listener for the whole binary: no
//! request may go through it.

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use holdfast_api::ApiConfig;
use holdfast_db::store;
use holdfast_providers::egress::EgressPolicy;
use holdfast_providers::{ModelRequest, ProviderSettings, Providers};
use holdfast_tests::api_server::{project_key, ApiServer};
use holdfast_tests::{new_agent, wait_until, TestDb};
use holdfast_wire::config::Provider;
use holdfast_worker::maintenance::{self, Settings};
use holdfast_worker::tools::mcp::{self, McpLimits, McpServerConfig};
use holdfast_worker::tools::web_fetch::{web_fetch, web_fetch_client, WebFetchLimits};
use holdfast_worker::webhooks::DispatcherSettings;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

/// The operator's setting in these tests: every kind may reach 127.0.0.2.
const ALLOW: &str = "*=127.0.0.2";

/// A listener that only counts the connections it accepts.
struct Counter {
    addr: SocketAddr,
    connections: Arc<AtomicU64>,
}

impl Counter {
    fn start(ip: &str) -> Counter {
        let listener = TcpListener::bind((ip, 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicU64::new(0));
        let counted = connections.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                counted.fetch_add(1, Ordering::SeqCst);
                drop(stream);
            }
        });
        Counter { addr, connections }
    }

    fn count(&self) -> u64 {
        self.connections.load(Ordering::SeqCst)
    }
}

/// The capture "proxy" every proxy variable points at (set once, before
/// any client of this binary is built) and the trap on 127.0.0.1.
struct Listeners {
    proxy: Counter,
    trap: Counter,
}

fn listeners() -> &'static Listeners {
    static LISTENERS: OnceLock<Listeners> = OnceLock::new();
    LISTENERS.get_or_init(|| {
        let proxy = Counter::start("127.0.0.1");
        let url = format!("http://{}", proxy.addr);
        for name in [
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "http_proxy",
            "https_proxy",
            "all_proxy",
        ] {
            std::env::set_var(name, &url);
        }
        std::env::remove_var("NO_PROXY");
        std::env::remove_var("no_proxy");
        Listeners {
            proxy,
            trap: Counter::start("127.0.0.1"),
        }
    })
}

/// The allowed server on 127.0.0.2: `/ok/…` answers 200, `/redirect/…`
/// sends a 307 to the trap; both count their requests (any path below them,
/// as the model client appends `/chat/completions`).
struct Allowed {
    addr: SocketAddr,
    ok: Arc<AtomicU64>,
    redirects: Arc<AtomicU64>,
}

async fn allowed_server(trap: SocketAddr) -> Allowed {
    let ok = Arc::new(AtomicU64::new(0));
    let redirects = Arc::new(AtomicU64::new(0));
    let (ok_hits, redirect_hits) = (ok.clone(), redirects.clone());
    let ok_route = axum::routing::any(move || {
        ok_hits.fetch_add(1, Ordering::SeqCst);
        async { (StatusCode::OK, "reached") }
    });
    let redirect_route = axum::routing::any(move || {
        redirect_hits.fetch_add(1, Ordering::SeqCst);
        let location = format!("http://{trap}/");
        async move {
            (
                StatusCode::TEMPORARY_REDIRECT,
                [(header::LOCATION, location)],
            )
                .into_response()
        }
    });
    let app = axum::Router::new()
        .route("/ok", ok_route.clone())
        .route("/ok/{*rest}", ok_route)
        .route("/redirect", redirect_route.clone())
        .route("/redirect/{*rest}", redirect_route);
    let listener = tokio::net::TcpListener::bind("127.0.0.2:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    Allowed {
        addr,
        ok,
        redirects,
    }
}

/// The internal targets, each with what its refusal must say.
fn refused_targets(trap: SocketAddr) -> Vec<(String, &'static str)> {
    let port = trap.port();
    vec![
        (
            format!("http://127.0.0.1:{port}/"),
            "127.0.0.1 is in loopback range 127.0.0.0/8",
        ),
        (
            format!("http://10.0.0.1:{port}/"),
            "10.0.0.1 is in private-use range 10.0.0.0/8",
        ),
        (
            "http://169.254.169.254/latest/meta-data/".to_owned(),
            "169.254.169.254 is in link-local range 169.254.0.0/16",
        ),
        (
            format!("http://[::1]:{port}/"),
            "::1 is in loopback range ::1/128",
        ),
        (
            format!("http://[::ffff:127.0.0.1]:{port}/"),
            "::ffff:127.0.0.1 is in loopback range 127.0.0.0/8",
        ),
        (
            format!("http://[2002:7f00:1::]:{port}/"),
            "2002:7f00:1:: is in loopback range 127.0.0.0/8",
        ),
        (
            format!("http://localhost:{port}/"),
            "localhost resolves to ",
        ),
    ]
}

fn policy() -> Arc<EgressPolicy> {
    Arc::new(EgressPolicy::parse(ALLOW).unwrap())
}

/// Runs `attempt` against every target and checks the outcomes.
async fn table<F, Fut>(kind: &str, redirect_followed_and_refused: bool, attempt: F)
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = String>,
{
    let listeners = listeners();
    let allowed = allowed_server(listeners.trap.addr).await;
    let (proxy_before, trap_before) = (listeners.proxy.count(), listeners.trap.count());
    for (url, expected) in refused_targets(listeners.trap.addr) {
        let outcome = attempt(url.clone()).await;
        assert!(
            outcome.contains("egress refused: ") && outcome.contains(expected),
            "{kind} {url}: {outcome}"
        );
    }
    let redirect = attempt(format!("http://{}/redirect", allowed.addr)).await;
    assert_eq!(
        allowed.redirects.load(Ordering::SeqCst),
        1,
        "{kind}: {redirect}"
    );
    if redirect_followed_and_refused {
        assert!(
            redirect.contains("egress refused: 127.0.0.1 is in loopback range"),
            "{kind} redirect: {redirect}"
        );
    }
    attempt(format!("http://{}/ok", allowed.addr)).await;
    assert_eq!(
        allowed.ok.load(Ordering::SeqCst),
        1,
        "{kind}: the operator-allowed 127.0.0.2 is reached, directly"
    );
    assert_eq!(
        listeners.trap.count(),
        trap_before,
        "{kind}: nothing connected to 127.0.0.1"
    );
    assert_eq!(
        listeners.proxy.count(),
        proxy_before,
        "{kind}: proxy variables were ignored"
    );
}

#[tokio::test]
async fn web_fetch_refuses_internal_targets_and_reaches_allowed_ones() {
    listeners();
    let limits = WebFetchLimits {
        egress: policy(),
        connect_timeout: Duration::from_secs(2),
        ..WebFetchLimits::default()
    };
    let client = web_fetch_client(&limits).unwrap();
    table("web_fetch", true, |url| {
        let (client, limits) = (&client, &limits);
        async move {
            let output = web_fetch(client, &json!({ "url": url }), limits).await;
            output.output.to_string()
        }
    })
    .await;
}

#[tokio::test]
async fn mcp_refuses_internal_servers_and_reaches_allowed_ones() {
    listeners();
    let limits = McpLimits {
        egress: policy(),
        list_timeout: Duration::from_secs(5),
        call_timeout: Duration::from_secs(5),
        ..McpLimits::default()
    };
    table("mcp", false, |url| {
        let limits = &limits;
        async move {
            let config = McpServerConfig {
                name: "t".into(),
                url,
                headers: Default::default(),
            };
            let output = mcp::call_tool(&config, "echo", &json!({}), limits).await;
            assert!(output.is_error);
            output.output.to_string()
        }
    })
    .await;
}

#[tokio::test]
async fn an_agent_model_base_url_goes_through_the_policy() {
    listeners();
    let providers = Providers::new(ProviderSettings {
        egress: policy(),
        connect_timeout: Duration::from_secs(2),
        idle_timeout: Duration::from_secs(5),
        ..ProviderSettings::default()
    })
    .unwrap();
    table("model", false, |url| {
        let providers = &providers;
        async move {
            let request = ModelRequest {
                model: holdfast_wire::config::ModelConfig {
                    base_url: Some(url.clone()),
                    ..holdfast_wire::config::ModelConfig::new(Provider::Openai, "m")
                },
                system: None,
                messages: vec![],
                tools: vec![],
                provider_tools: vec![],
            };
            // A project allowed custom URLs: the one path a tenant-chosen
            // model URL takes.
            let target = holdfast_providers::ModelTarget::CustomUrl {
                base_url: url,
                project_key: None,
            };
            match providers.complete(&request, &target, None).await {
                Ok(response) => format!("{response:?}"),
                Err(e) => e.to_string(),
            }
        }
    })
    .await;
}

#[tokio::test]
async fn machine_wake_urls_go_through_the_policy() {
    listeners();
    let db = TestDb::new().await;
    let client = db.connect().await;
    let server = ApiServer::start_with(&db, |c: &mut ApiConfig| c.egress = policy()).await;
    let (project, key) = project_key(&client).await;
    let counter = AtomicU64::new(0);
    // The harness's client would read the proxy variables this binary sets.
    let http = holdfast_outbound::client_builder()
        .no_proxy()
        .build()
        .unwrap();
    table("wake", false, |url| {
        let (client, server, key, counter, http) = (&client, &server, &key, &counter, &http);
        async move {
            // Registered through SQL, past the API's literal check, so the
            // check at call time is what is tested.
            let name = format!("m{}", counter.fetch_add(1, Ordering::SeqCst));
            let machine = store::register_machine(client, project, &name, Some(&url))
                .await
                .unwrap();
            let response = http
                .post(server.url(&format!("/v1/machines/{}/wake", machine.machine_id)))
                .bearer_auth(key)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200);
            let body: Value = response.json().await.unwrap();
            body["wake_url_error"].to_string()
        }
    })
    .await;

    let refused = http
        .post(server.url("/v1/machines"))
        .bearer_auth(&key)
        .json(&json!({"name": "literal", "wake_url": "http://169.254.169.254/"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 400);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["field"], "wake_url", "{body}");
}

#[tokio::test]
async fn webhook_deliveries_go_through_the_policy() {
    listeners();
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, _key) = project_key(&client).await;
    let agent = new_agent(&client, project).await;
    let trap = listeners().trap.addr;
    let allowed = allowed_server(trap).await;
    let (proxy_before, trap_before) = (listeners().proxy.count(), listeners().trap.count());
    let mut endpoints = Vec::new();
    let mut targets = refused_targets(trap);
    targets.push((format!("http://{}/redirect", allowed.addr), "HTTP 307"));
    targets.push((format!("http://{}/ok", allowed.addr), ""));
    for (url, expected) in targets {
        // Registered with the SQL switch on, so that delivery is what is tested.
        let endpoint = store::create_webhook_endpoint(
            &client,
            project,
            &url,
            &json!(["input.received"]),
            None,
            true,
        )
        .await
        .unwrap()
        .endpoint
        .id;
        endpoints.push((endpoint, url, expected));
    }
    let shutdown = CancellationToken::new();
    let settings = Settings {
        interval: Duration::from_millis(50),
        webhooks: DispatcherSettings {
            egress: policy(),
            request_timeout: Duration::from_secs(3),
            backoff_base: Duration::from_secs(60),
            backoff_max: Duration::from_secs(60),
            poll_interval: Duration::from_millis(50),
            ..DispatcherSettings::default()
        },
        ..Settings::default()
    };
    let running = tokio::spawn(maintenance::run(
        settings,
        db.config.clone(),
        shutdown.clone(),
    ));
    store::create_input(&client, agent, &json!("hello"), None)
        .await
        .unwrap();
    for (endpoint, url, expected) in &endpoints {
        let attempted = || async {
            client
                .query_opt(
                    "SELECT status, last_error FROM holdfast.webhook_deliveries \
                      WHERE endpoint_id = $1 \
                        AND (status = 'delivered' OR last_error IS NOT NULL)",
                    &[endpoint],
                )
                .await
                .unwrap()
                .map(|row| (row.get::<_, String>(0), row.get::<_, Option<String>>(1)))
        };
        wait_until(Duration::from_secs(20), "a recorded attempt", || async {
            attempted().await.is_some()
        })
        .await;
        let (status, error) = attempted().await.unwrap();
        let status = Some(status);
        match *expected {
            "" => assert_eq!(status.as_deref(), Some("delivered"), "{url}: {error:?}"),
            "HTTP 307" => assert!(
                error.as_deref().is_some_and(|e| e.contains("307")),
                "{url}: {error:?}"
            ),
            expected => {
                let error = error.unwrap_or_default();
                assert!(
                    error.contains("egress refused: ") && error.contains(expected),
                    "{url}: {error}"
                );
            }
        }
    }
    shutdown.cancel();
    running.await.unwrap().unwrap();
    assert_eq!(allowed.ok.load(Ordering::SeqCst), 1);
    assert_eq!(listeners().trap.count(), trap_before);
    assert_eq!(listeners().proxy.count(), proxy_before);
}

#[tokio::test]
async fn mcp_servers_and_content_urls_the_policy_refuses_are_a_422_naming_the_field() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let server = ApiServer::start_with(&db, |c: &mut ApiConfig| c.egress = policy()).await;
    let (_, key) = project_key(&client).await;
    let send = |method: reqwest::Method, path: String, body: Value| {
        let (server, key) = (&server, &key);
        async move { holdfast_tests::api_server::call(server, method, &path, key, Some(body)).await }
    };
    let mcp = |url: &str| json!({"type": "mcp", "name": "tools", "url": url});
    let config =
        |tools: Value| json!({"model": {"provider": "anthropic", "name": "m"}, "tools": tools});
    for (tools, field) in [
        (json!([mcp("http://169.254.169.254/mcp")]), "tools[0].url"),
        (json!([mcp("http://[::ffff:10.0.0.1]/mcp")]), "tools[0].url"),
        // A name is judged by what it resolves to.
        (json!([mcp("http://localhost:9/mcp")]), "tools[0].url"),
        // A subagent's servers too, at any depth.
        (
            json!([{"type": "spawn_subagent", "config": config(json!([mcp("http://10.1.2.3/mcp")]))}]),
            "tools[0].config.tools[0].url",
        ),
    ] {
        let (status, body) = send(reqwest::Method::POST, "/v1/agents".into(), config(tools)).await;
        assert_eq!(status, 422, "{body}");
        assert_eq!(body["error"]["type"], "egress_refused", "{body}");
        assert_eq!(body["error"]["field"], field, "{body}");
        assert!(
            body["error"]["message"].as_str().unwrap().contains("mcp="),
            "the message names the setting: {body}"
        );
    }
    let (status, agent) = send(
        reqwest::Method::POST,
        "/v1/agents".into(),
        config(json!([mcp("http://127.0.0.2:9/mcp")])),
    )
    .await;
    assert_eq!(status, 201, "the allowed range: {agent}");
    let id = agent["id"].as_str().unwrap().to_owned();
    let (status, body) = send(
        reqwest::Method::PATCH,
        format!("/v1/agents/{id}"),
        json!({"tools": [mcp("http://127.0.0.1:9/mcp")]}),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["field"], "tools[0].url");
    let stored: Value = client
        .query_one(
            "SELECT config FROM holdfast.agents WHERE id = $1::text::uuid",
            &[&id],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        stored["tools"][0]["url"], "http://127.0.0.2:9/mcp",
        "nothing changed"
    );

    // Image and document URLs (content_url): refused when they arrive.
    let image = |url: &str| json!({"type": "image", "source": {"type": "url", "url": url}});
    for url in [
        "http://169.254.169.254/latest/meta-data/iam",
        "http://10.0.0.7/scan.png",
        "http://localhost:8080/admin.png",
    ] {
        let (status, body) = send(
            reqwest::Method::POST,
            format!("/v1/agents/{id}/inputs"),
            json!({"content": [{"type": "text", "text": "look"}, image(url)]}),
        )
        .await;
        assert_eq!(status, 422, "{url}: {body}");
        assert_eq!(body["error"]["type"], "egress_refused", "{body}");
        assert_eq!(body["error"]["field"], "content[1].source.url", "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("content_url="),
            "{body}"
        );
    }
    let inputs: i64 = client
        .query_one(
            "SELECT count(*) FROM holdfast.inputs WHERE agent_id = $1::text::uuid",
            &[&id],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(inputs, 0, "a refused input is not saved");
}
