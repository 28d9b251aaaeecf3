//! A full disk under Postgres: its data directory and WAL on a small tmpfs
//! (`SmallDiskCluster`, which needs root) that the test fills while the API
//! takes an input and a worker saves a paid model response or a tool's
//! result, then frees; and a full `pg_wal` (the WAL alone on the small
//! disk), which stops Postgres.

use std::time::Duration;

use holdfast_db::connect::ConnectConfig;
use holdfast_fakes::{FakeProvider, Reply};
use holdfast_tests::api_server::{error_of, project_key, ApiServer};
use holdfast_tests::mcp_server::McpTestServer;
use holdfast_tests::process::HoldfastProcess;
use holdfast_tests::scenario::{
    agent_state, count_events, pending_inputs, saved_text, spawn_worker, start_turn, wait_for_event,
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
    let freed = std::time::Instant::now();
    wait_for_event(&client, answered, "turn.completed", Duration::from_secs(60)).await;
    println!(
        "full disk: space freed to the kept response saved and its turn finished: {:?}",
        freed.elapsed()
    );
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
    holdfast_tests::invariants::assert_at_rest(&client, &[answered, refused]).await;
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
    holdfast_tests::invariants::assert_at_rest(&client, &[agent]).await;
}

/// A client on `config`, once Postgres answers (its connection driven in the
/// background).
async fn connect_when_up(config: &ConnectConfig) -> Client {
    let mut last_error = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while tokio::time::Instant::now() < deadline {
        match config.connect().await {
            Ok((client, connection)) => {
                tokio::spawn(connection);
                if client.simple_query("SELECT 1").await.is_ok() {
                    return client;
                }
            }
            Err(e) => last_error = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("Postgres did not come back: {last_error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_pg_wal_stops_postgres_the_api_answers_503_and_after_a_restart_nothing_is_lost() {
    let disk = SmallDiskCluster::start_with_only_wal_on_it(192).await;
    let config = disk.config();
    let client = connect_when_up(&config).await;
    let api = ApiServer::start_on(&config, |_| {}).await;
    let (project, key) = project_key(&client).await;
    let fake = FakeProvider::start().await;
    fake.set_default(Reply::text("ok"));
    fake.push(Reply::text("paid before the crash").hold_before_headers());
    let worker = spawn_worker(
        "on-a-full-pg-wal",
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
    let paid = new_agent(&client, project).await;
    let busy = new_agent(&client, project).await;
    let sent = api
        .request(Method::POST, &format!("/v1/agents/{paid}/inputs"), &key)
        .json(&json!({"content": "go"}))
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status(), StatusCode::CREATED);
    fake.wait_until_held(1).await;

    // The small disk fills; then a write that needs a new WAL segment
    // cannot make one, and Postgres PANICs.
    disk.fill();
    client
        .batch_execute("CREATE TABLE public.wal_filler (t text)")
        .await
        .unwrap();
    let panicked = loop {
        let written = client
            .batch_execute(
                "INSERT INTO public.wal_filler SELECT md5(random()::text) || repeat('x', 200) \
                 FROM generate_series(1, 5000)",
            )
            .await;
        if let Err(e) = written {
            break e;
        }
    };
    let log = std::fs::read_to_string(disk.cluster.log_file()).unwrap_or_default();
    assert!(
        log.contains("PANIC") && log.contains("No space left on device"),
        "Postgres PANICs for want of WAL space ({panicked}): {log}"
    );

    // Meanwhile the API answers 503, never 500, and saves nothing it did
    // not answer 201; the worker holding a paid response (released now)
    // makes no further model call.
    fake.release();
    let mut answers = Vec::new();
    for i in 0..10 {
        let idempotency_key = format!("during-the-outage-{i}");
        let content = format!("input {i}");
        let answer = api
            .request(Method::POST, &format!("/v1/agents/{busy}/inputs"), &key)
            .header("Idempotency-Key", &idempotency_key)
            .json(&json!({"content": content}))
            .send()
            .await
            .unwrap();
        let status = answer.status();
        if status != StatusCode::CREATED {
            let (status, kind, message, _) = error_of(answer).await;
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{kind}: {message}");
            assert!(
                ["storage_unavailable", "unavailable"].contains(&kind.as_str()),
                "{kind}: {message}"
            );
        }
        answers.push((idempotency_key, content, status));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(
        answers
            .iter()
            .any(|(_, _, status)| *status == StatusCode::SERVICE_UNAVAILABLE),
        "{answers:?}"
    );
    assert_eq!(
        fake.request_count(),
        1,
        "no model call while Postgres is down"
    );
    // Its crash recovery finds no room for WAL either: Postgres stops, and
    // stays down.
    wait_until(Duration::from_secs(60), "Postgres stopped", || async {
        !disk.cluster.is_running()
    })
    .await;

    // Space returns and Postgres is started again: everything goes on.
    disk.free();
    disk.cluster.restart().expect("start Postgres again");
    let client = connect_when_up(&config).await;
    for (idempotency_key, content, _) in &answers {
        let again = api
            .request(Method::POST, &format!("/v1/agents/{busy}/inputs"), &key)
            .header("Idempotency-Key", idempotency_key)
            .json(&json!({"content": content}))
            .send()
            .await
            .unwrap();
        assert!(
            again.status().is_success(),
            "{idempotency_key}: {}",
            again.status()
        );
    }
    wait_for_event(&client, paid, "turn.completed", Duration::from_secs(90)).await;
    wait_until(
        Duration::from_secs(90),
        "every input of the busy agent is answered",
        || async {
            pending_inputs(&client, busy).await.is_empty()
                && agent_state(&client, busy).await == "idle"
        },
    )
    .await;

    // Nothing lost, nothing twice: one input per key; one model response
    // per finished turn, each whole.
    assert_eq!(input_count(&client, busy).await, answers.len() as i64);
    for agent in [paid, busy] {
        assert_eq!(
            count_events(&client, agent, "model.response").await,
            count_events(&client, agent, "turn.completed").await,
        );
    }
    let answer = saved_text(&client, paid).await;
    assert!(
        answer.contains("paid before the crash") || answer.contains("ok"),
        "{answer}"
    );
    assert!(!worker.log_text().contains("panicked"));
    assert!(!maintenance.has_exited(), "{}", maintenance.log_text());
    holdfast_tests::invariants::assert_at_rest(&client, &[paid, busy]).await;
}
