//! A full disk under Postgres: its data directory and WAL on a small tmpfs
//! (`SmallDiskCluster`, which needs root) that the test fills while the API
//! takes an input and a worker saves a paid model response or a tool's
//! result, then frees.

use std::time::Duration;

use holdfast_fakes::{FakeProvider, Reply};
use holdfast_tests::api_server::{error_of, project_key, ApiServer};
use holdfast_tests::mcp_server::McpTestServer;
use holdfast_tests::process::HoldfastProcess;
use holdfast_tests::scenario::{
    count_events, saved_text, spawn_worker, start_turn, wait_for_event,
};
use holdfast_tests::small_disk::SmallDiskCluster;
use holdfast_tests::{new_agent, wait_until};
use reqwest::{Method, StatusCode};
use serde_json::json;
use tokio_postgres::Client;
use uuid::Uuid;

/// Text that compresses badly, so Postgres needs new pages for it.
fn incompressible_text(bytes: usize) -> String {
    use rand::Rng;
    rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .take(bytes)
        .map(char::from)
        .collect()
}

async fn input_count(client: &Client, agent: Uuid) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM holdfast.inputs WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0)
}

async fn lease(client: &Client, agent: Uuid) -> (Option<String>, i64) {
    let row = client
        .query_one(
            "SELECT lease_owner, lease_epoch FROM holdfast.agents WHERE id = $1",
            &[&agent],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_disk_refuses_inputs_with_503_keeps_the_paid_response_and_resumes_when_space_returns(
) {
    let disk = SmallDiskCluster::start(160).await;
    let config = disk.config();
    let (client, connection) = config.connect().await.unwrap();
    tokio::spawn(connection);
    let api = ApiServer::start_on(&config, |_| {}).await;
    let (project, key) = project_key(&client).await;
    let fake = FakeProvider::start().await;
    fake.set_default(Reply::text("ok"));
    // Past what a page holds: saving it needs new pages.
    let big_answer = incompressible_text(256 * 1024);
    fake.push(Reply::text(big_answer.clone()).hold_before_headers());
    let worker = spawn_worker(
        "on-a-full-disk",
        &config,
        &fake,
        &[
            ("HOLDFAST_LEASE_TTL", "10s"),
            ("HOLDFAST_LEASE_RENEW_INTERVAL", "2s"),
        ],
    );
    let mut maintenance = HoldfastProcess::spawn(
        "maintenance",
        &["server", "maintenance"],
        &[
            ("HOLDFAST_DATABASE_URL", config.to_connection_string()),
            ("HOLDFAST_MAINTENANCE_INTERVAL", "200ms".into()),
        ],
    );
    let answered = new_agent(&client, project).await;
    let refused = new_agent(&client, project).await;
    let sent = api
        .request(Method::POST, &format!("/v1/agents/{answered}/inputs"), &key)
        .json(&json!({"content": "go"}))
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status(), StatusCode::CREATED);
    fake.wait_until_held(1).await;
    let (_, epoch) = lease(&client, answered).await;

    disk.fill();

    // An input that needs new pages: 503 storage_unavailable with
    // Retry-After, in the API's error shape, and nothing of it saved.
    let big_input = incompressible_text(200 * 1024);
    let answer = api
        .request(Method::POST, &format!("/v1/agents/{refused}/inputs"), &key)
        .json(&json!({"content": big_input}))
        .send()
        .await
        .unwrap();
    let retry_after = answer
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    let (status, kind, message, _) = error_of(answer).await;
    assert_eq!(
        (status, kind.as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, "storage_unavailable"),
        "{message}"
    );
    assert!(message.contains("disk space"), "{message}");
    assert_eq!(retry_after.as_deref(), Some("30"));
    assert_eq!(input_count(&client, refused).await, 0);
    let metrics = api
        .http
        .get(api.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("holdfast_storage_full_total{process=\"api\"}"),
        "the refusal is counted for operators"
    );

    // The paid response cannot be saved: the worker keeps it, says why in
    // its log, and saves it again with a backoff while renewing its lease;
    // it neither calls the model again nor counts a step failure (whose
    // last one would fail the turn).
    fake.release();
    wait_until(
        Duration::from_secs(30),
        "the worker retries the save three times",
        || async {
            worker
                .log_text()
                .matches("Postgres is out of disk space")
                .count()
                >= 3
        },
    )
    .await;
    assert_eq!(fake.request_count(), 1, "the model was called again");
    assert_eq!(count_events(&client, answered, "model.response").await, 0);
    assert_eq!(count_events(&client, answered, "step.retry").await, 0);
    assert_eq!(
        lease(&client, answered).await,
        (Some("on-a-full-disk".to_owned()), epoch),
        "the worker kept its lease"
    );
    assert!(
        !maintenance.has_exited(),
        "maintenance keeps running: {}",
        maintenance.log_text()
    );

    // Space returns: the kept response is saved whole, once, and the turn
    // ends; the refused input, sent again, is taken and answered.
    disk.free();
    wait_for_event(&client, answered, "turn.completed", Duration::from_secs(60)).await;
    assert_eq!(count_events(&client, answered, "model.response").await, 1);
    assert!(saved_text(&client, answered).await.contains(&big_answer));
    let again = api
        .request(Method::POST, &format!("/v1/agents/{refused}/inputs"), &key)
        .json(&json!({"content": big_input}))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::CREATED);
    wait_for_event(&client, refused, "turn.completed", Duration::from_secs(30)).await;
    assert_eq!(input_count(&client, refused).await, 1);
    assert_eq!(fake.request_count(), 2, "one model call per turn");
    assert!(!worker.log_text().contains("panicked"));
    assert!(!maintenance.has_exited());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tool_result_refused_by_a_full_disk_mid_batch_is_kept_and_saved_once_space_returns() {
    let disk = SmallDiskCluster::start(160).await;
    let config = disk.config();
    let (client, connection) = config.connect().await.unwrap();
    tokio::spawn(connection);
    let fake = FakeProvider::start().await;
    let mcp = McpTestServer::start().await;
    mcp.hold_calls();
    // The tool echoes its input: a result past what a page holds, which
    // Postgres needs new pages to save.
    let big = incompressible_text(64 * 1024);
    fake.push(Reply::tool_calls(vec![(
        "big__echo",
        json!({"message": big}),
    )]));
    fake.set_default(Reply::text("echoed"));
    let worker = spawn_worker(
        "tools-on-a-full-disk",
        &config,
        &fake,
        &[
            ("HOLDFAST_EGRESS_ALLOW", "mcp=127.0.0.1"),
            ("HOLDFAST_LEASE_TTL", "10s"),
            ("HOLDFAST_LEASE_RENEW_INTERVAL", "2s"),
        ],
    );
    let agent = start_turn(
        &client,
        json!([{"type": "mcp", "name": "big", "url": mcp.url}]),
        "echo it",
    )
    .await;
    // The call is marked running (committed before its IO); the tool holds.
    wait_until(Duration::from_secs(30), "the echo call runs", || async {
        client
            .query_one(
                "SELECT count(*) FROM holdfast.tool_calls WHERE agent_id = $1 AND status = 'running'",
                &[&agent],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
            == 1
    })
    .await;

    disk.fill();
    mcp.release_calls();

    // The result cannot be saved: the worker keeps it and saves it again
    // with a backoff; the step does not fail (whose retry would find the
    // call interrupted and its result lost) and nothing is called again.
    wait_until(
        Duration::from_secs(30),
        "the worker retries the tool result's save three times",
        || async {
            worker
                .log_text()
                .matches("Postgres is out of disk space")
                .count()
                >= 3
        },
    )
    .await;
    assert_eq!(count_events(&client, agent, "tool_call.completed").await, 0);
    assert_eq!(count_events(&client, agent, "step.retry").await, 0);
    assert_eq!(fake.request_count(), 1);

    disk.free();
    wait_for_event(&client, agent, "turn.completed", Duration::from_secs(60)).await;
    assert_eq!(count_events(&client, agent, "step.retry").await, 0);
    assert_eq!(
        count_events(&client, agent, "tool_call.interrupted").await,
        0
    );
    assert_eq!(count_events(&client, agent, "tool_call.completed").await, 1);
    let output: serde_json::Value = client
        .query_one(
            "SELECT output FROM holdfast.tool_calls WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        output.to_string().contains(&big),
        "the tool's result is saved whole"
    );
    assert_eq!(fake.request_count(), 2, "one model call after the tool");
    assert!(!worker.log_text().contains("panicked"));
}
