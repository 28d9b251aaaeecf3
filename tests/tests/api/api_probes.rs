//! Health, readiness, metrics and the OpenAPI document. One test per
//! concern that reads process-wide metrics lives here alone, so no other
//! test in this binary moves the numbers it checks.

use std::time::Duration;

use holdfast_api::ApiConfig;
use holdfast_db::store;
use holdfast_tests::api_server::{project_key, ApiServer};
use holdfast_tests::api_sse::SseReader;
use holdfast_tests::{default_config, wait_until, TestDb};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(10);

/// Every route this API serves, as (method, OpenAPI path).
const ROUTES: &[(&str, &str)] = &[
    ("get", "/v1/project"),
    ("get", "/v1/inbox"),
    ("get", "/v1/usage"),
    ("get", "/v1/operations"),
    ("post", "/v1/agents"),
    ("get", "/v1/agents"),
    ("get", "/v1/agents/{id}"),
    ("patch", "/v1/agents/{id}"),
    ("post", "/v1/agents/{id}/inputs"),
    ("get", "/v1/agents/{id}/inputs"),
    ("delete", "/v1/inputs/{id}"),
    ("patch", "/v1/inputs/{id}"),
    ("post", "/v1/agents/{id}/cancel"),
    ("post", "/v1/agents/{id}/archive"),
    ("get", "/v1/agents/{id}/versions"),
    ("get", "/v1/agents/{id}/versions/{version}"),
    ("post", "/v1/agents/{id}/schedules"),
    ("get", "/v1/agents/{id}/schedules"),
    ("get", "/v1/agents/{id}/schedules/{schedule_id}"),
    ("patch", "/v1/agents/{id}/schedules/{schedule_id}"),
    ("delete", "/v1/agents/{id}/schedules/{schedule_id}"),
    ("post", "/v1/agents/{id}/fork"),
    ("post", "/v1/agents/{id}/replays"),
    ("get", "/v1/agents/{id}/replays"),
    ("get", "/v1/replays/{id}"),
    ("get", "/v1/agents/{id}/usage"),
    ("get", "/v1/agents/{id}/attachments/{attachment_id}"),
    ("get", "/v1/agents/{id}/events"),
    ("get", "/v1/agents/{id}/stream"),
    ("get", "/v1/agents/{id}/tool-calls"),
    ("post", "/v1/tool-calls/{id}/result"),
    ("post", "/v1/webhooks"),
    ("get", "/v1/webhooks"),
    ("delete", "/v1/webhooks/{id}"),
    ("get", "/v1/webhooks/{id}/deliveries"),
    ("post", "/v1/machines"),
    ("get", "/v1/machines"),
    ("post", "/v1/machines/{id}/wake"),
    ("delete", "/v1/machines/{id}"),
    ("post", "/v1/machines/{id}/token"),
    ("get", "/v1/provider-keys"),
    ("put", "/v1/provider-keys/{provider}"),
    ("delete", "/v1/provider-keys/{provider}"),
    ("post", "/v1/machine/heartbeat"),
    ("post", "/v1/machine/commands/claim"),
    ("post", "/v1/machine/commands/{id}/output"),
    ("post", "/v1/machine/commands/{id}/result"),
    ("get", "/v1/agents/{id}/approvals"),
    ("post", "/v1/approvals/{id}"),
    ("get", "/v1/agents/{id}/questions"),
    ("post", "/v1/questions/{id}/answer"),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
    ("get", "/openapi.json"),
];

#[tokio::test]
async fn the_openapi_document_is_3_1_and_lists_every_route() {
    let db = TestDb::new().await;
    let server = ApiServer::start(&db).await;
    let response = server
        .http
        .get(server.url("/openapi.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let document: Value = response.json().await.expect("the document parses as JSON");
    let version = document["openapi"].as_str().unwrap();
    assert!(version.starts_with("3.1."), "openapi {version}");
    let paths = document["paths"].as_object().unwrap();
    let mut listed: Vec<(String, String)> = paths
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .unwrap()
                .keys()
                .filter(|k| ["get", "post", "patch", "put", "delete"].contains(&k.as_str()))
                .map(move |method| (method.clone(), path.clone()))
        })
        .collect();
    listed.sort();
    let mut expected: Vec<(String, String)> = ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    expected.sort();
    assert_eq!(listed, expected);
    // The error shape and the bearer scheme are documented.
    assert!(document["components"]["schemas"]["ErrorBody"].is_object());
    assert_eq!(
        document["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    // Every route documented is served (a document route that is not
    // served would be a 404 here, not a 401/400/200).
    let key = "hf_unknown";
    for (method, path) in ROUTES {
        let path = path.replace("{id}", "00000000-0000-0000-0000-000000000000");
        let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let status = server
            .request(method.clone(), &path, key)
            .send()
            .await
            .unwrap()
            .status();
        assert_ne!(status, StatusCode::NOT_FOUND, "{method} {path} is served");
        assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
    }
}

/// The committed `sdk/openapi.json`, which the SDKs' types are generated
/// from, is exactly what a running server serves (pretty-printed, in the
/// server's order). After an API change, regenerate it, and the SDKs' types
/// from it, with `sdk/regenerate`; that runs this test with
/// `HOLDFAST_WRITE_OPENAPI=1`, which writes the file instead of failing.
#[tokio::test]
async fn the_committed_openapi_document_is_the_one_served() {
    let db = TestDb::new().await;
    let server = ApiServer::start(&db).await;
    let served: Value = server
        .http
        .get(server.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let served = serde_json::to_string_pretty(&served).unwrap() + "\n";
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../sdk/openapi.json");
    if std::env::var_os("HOLDFAST_WRITE_OPENAPI").is_some() {
        std::fs::write(&path, &served).expect("write sdk/openapi.json");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == served,
        "sdk/openapi.json is not the served document; regenerate it with sdk/regenerate"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_and_metrics_report_the_process_and_the_database() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    for _ in 0..3 {
        store::create_agent(&client, project, &default_config())
            .await
            .unwrap();
    }
    let busy = store::create_agent(&client, project, &default_config())
        .await
        .unwrap();
    store::create_input(&client, busy, &json!("go"), None)
        .await
        .unwrap();
    let server = ApiServer::start(&db).await;

    let health: Value = server
        .http
        .get(server.url("/healthz"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health, json!({"status": "ok"}));
    wait_until(WAIT, "ready with the LISTEN connection up", || async {
        let response = server.http.get(server.url("/readyz")).send().await.unwrap();
        response.status() == StatusCode::OK
            && response.json::<Value>().await.unwrap()
                == json!({"status": "ready", "listener": "connected"})
    })
    .await;

    let agent_path = format!("/v1/agents/{busy}");
    server
        .request(Method::GET, &agent_path, &key)
        .send()
        .await
        .unwrap();
    let _stream = SseReader::new(
        server
            .request(Method::GET, &format!("{agent_path}/stream"), &key)
            .send()
            .await
            .unwrap(),
    );
    let metrics = server
        .http
        .get(server.url("/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(metrics.status(), StatusCode::OK);
    assert!(metrics.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
    let text = metrics.text().await.unwrap();
    let value = |name: &str, labels: &[&str]| -> f64 {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .find(|l| {
                l.split(['{', ' ']).next() == Some(name)
                    && labels.iter().all(|label| l.contains(label))
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} {labels:?} in:\n{text}"))
    };
    assert_eq!(value("holdfast_agents", &["state=\"idle\""]), 3.0);
    assert_eq!(value("holdfast_agents", &["state=\"ready\""]), 1.0);
    assert_eq!(value("holdfast_events_written_total", &[]), 2.0);
    assert!(
        value(
            "holdfast_api_requests_total",
            &[
                "method=\"GET\"",
                "route=\"/v1/agents/{id}\"",
                "status=\"200\""
            ]
        ) >= 1.0
    );
    assert!(
        value(
            "holdfast_api_request_duration_seconds_count",
            &["route=\"/v1/agents/{id}\""]
        ) >= 1.0
    );
    assert_eq!(value("holdfast_api_stream_clients", &[]), 1.0);
}

#[tokio::test]
async fn readiness_fails_when_postgres_is_unreachable() {
    // A port with nothing listening: the pool and the LISTEN loop keep
    // trying; liveness holds, readiness says 503 in the error shape.
    let unused = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = unused.local_addr().unwrap().port();
    drop(unused);
    let mut database =
        holdfast_db::connect::ConnectConfig::parse("host=127.0.0.1 sslmode=disable").unwrap();
    database
        .postgres
        .port(port)
        .user("nobody")
        .dbname("nothing")
        .connect_timeout(Duration::from_millis(500));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let served = tokio::spawn(holdfast_api::serve(
        ApiConfig::new(database),
        listener,
        shutdown.clone(),
    ));
    let http = holdfast_outbound::client_builder().build().unwrap();
    let health = http
        .get(format!("http://{addr}/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), StatusCode::OK);
    let ready = http
        .get(format!("http://{addr}/readyz"))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: Value = ready.json().await.unwrap();
    assert_eq!(body["error"]["type"], "unavailable");
    let request = http
        .get(format!("http://{addr}/v1/agents"))
        .bearer_auth("hf_x")
        .send()
        .await
        .unwrap();
    assert_eq!(request.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: Value = request.json().await.unwrap();
    assert_eq!(body["error"]["type"], "unavailable");
    shutdown.cancel();
    tokio::time::timeout(WAIT, served)
        .await
        .expect("serve stops")
        .unwrap()
        .unwrap();
}

/// GET /metrics with `authorization` as its Authorization header: (status, body).
async fn scrape(server: &ApiServer, authorization: Option<&str>) -> (StatusCode, String) {
    let mut request = server.http.get(server.url("/metrics"));
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    let response = request.send().await.unwrap();
    (response.status(), response.text().await.unwrap())
}

#[tokio::test]
async fn with_a_metrics_token_set_metrics_need_exactly_that_bearer_token() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (_, key) = project_key(&client).await;
    let server = ApiServer::start_with(&db, |config| {
        config.metrics_token = Some("scrape-7c1e".into());
    })
    .await;

    let api_key = format!("Bearer {key}");
    for authorization in [
        None,
        Some("Bearer scrape-7c1"),
        Some("Bearer scrape-7c1ee"),
        Some("Basic scrape-7c1e"),
        Some(api_key.as_str()),
    ] {
        let (status, body) = scrape(&server, authorization).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{authorization:?}");
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["error"]["type"], "unauthorized", "{body}");
        assert!(!body.to_string().contains("holdfast_agents"));
    }
    let (status, body) = scrape(&server, Some("Bearer scrape-7c1e")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("holdfast_agents{state=\"idle\"}"), "{body}");
}

#[tokio::test]
async fn metrics_read_the_database_at_most_once_per_cache_period() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, _) = project_key(&client).await;
    let server = ApiServer::start_with(&db, |config| {
        config.metrics_cache = Duration::from_secs(3600);
    })
    .await;
    let idle = |text: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix("holdfast_agents{state=\"idle\"} "))
            .map(str::to_owned)
    };
    let (_, first) = scrape(&server, None).await;
    assert_eq!(idle(&first).as_deref(), Some("0"), "{first}");
    store::create_agent(&client, project, &default_config())
        .await
        .unwrap();
    // Within the cache period the scrape does not scan the agents again.
    let (_, second) = scrape(&server, None).await;
    assert_eq!(idle(&second).as_deref(), Some("0"), "{second}");

    // A server without the cache sees the new agent at once.
    let uncached = ApiServer::start_with(&db, |config| {
        config.metrics_cache = Duration::ZERO;
    })
    .await;
    let (_, fresh) = scrape(&uncached, None).await;
    assert_eq!(idle(&fresh).as_deref(), Some("1"), "{fresh}");
}

/// Neither a method a client makes up nor a model name a tenant chooses can
/// grow `/metrics`: 100 extension methods (up to 20,000 characters, sent
/// without a key) are refused with 405 in the error shape and counted under
/// the one label `OTHER`; a model name past 256 characters is refused when
/// the agent is created, naming the field.
#[tokio::test]
async fn neither_extension_methods_nor_long_model_names_grow_the_metrics() {
    use rand::Rng;
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (_, key) = project_key(&client).await;
    let server = ApiServer::start(&db).await;
    let (_, before) = scrape(&server, None).await;

    let mut rng = rand::rng();
    for _ in 0..100 {
        let length = rng.random_range(1..=20_000);
        let method: String = (0..length)
            .map(|_| char::from(rng.random_range(b'A'..=b'Z')))
            .collect();
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        let response = server
            .http
            .request(method.clone(), server.url("/v1/agents"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["type"], "method_not_allowed");
    }
    let long_name = "m".repeat(20_000);
    let refused = server
        .request(Method::POST, "/v1/agents", &key)
        .json(&json!({"model": {"provider": "anthropic", "name": long_name}}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["field"], "model.name", "{body}");

    let (_, after) = scrape(&server, None).await;
    let methods: std::collections::BTreeSet<&str> = after
        .lines()
        .filter_map(|line| line.split_once("method=\"")?.1.split_once('"'))
        .map(|(method, _)| method)
        .collect();
    let labels = [
        "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT", "OTHER",
    ];
    assert!(
        methods.iter().all(|method| labels.contains(method)),
        "method labels {:?}",
        methods
            .iter()
            .map(|m| m.chars().take(20).collect::<String>())
            .collect::<Vec<_>>()
    );
    assert!(
        after.contains("method=\"OTHER\",route=\"/v1/agents\",status=\"405\""),
        "the refusals are counted"
    );
    assert!(
        !after.contains(&"m".repeat(257)),
        "a refused model name is no label"
    );
    // One counter and one histogram more, not one per method: the other
    // tests of this binary add a few series meanwhile, nowhere near 64 KiB.
    assert!(
        after.len() < before.len() + 64 * 1024,
        "/metrics grew from {} to {} bytes",
        before.len(),
        after.len()
    );
}
