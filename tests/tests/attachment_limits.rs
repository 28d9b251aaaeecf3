//! Bounds on stored files (docs/api.md "Content blocks"):
//! an input whose new files would take its agent or its project past the
//! operator's attachment quota is a 422 naming the quota and writes
//! nothing, a file already stored costs nothing again; an input whose files
//! would take the agent's next model request past its provider's
//! documented size is a 422 and writes nothing; a custom tool's result
//! past a quota is refused the same way and an MCP server's has its files
//! left out saying why; an API process writes its quota settings at start;
//! and a model call sends
//! every reference to a stored file with its bytes.

use std::time::Duration;

use base64::Engine;
use holdfast_engine::domain::AttachmentQuotas;
use holdfast_engine::store;
use holdfast_fakes::{FakeProvider, Protocol, Reply};
use holdfast_tests::api_server::{error_of, project_key, ApiServer};
use holdfast_tests::process::HoldfastProcess;
use holdfast_tests::scenario::{agent_with_config, spawn_worker, wait_for_events};
use holdfast_tests::{wait_until, TestDb};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tokio_postgres::Client;
use uuid::Uuid;

const T: Duration = Duration::from_secs(30);

/// A PNG of `n` bytes (its signature, then filler `fill`), as base64.
fn png_base64(n: usize, fill: u8) -> String {
    let mut bytes = b"\x89PNG\r\n\x1a\n".to_vec();
    bytes.resize(n, fill);
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn image(data: &str) -> Value {
    json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}})
}

fn config(provider: &str) -> Value {
    json!({"model": {"provider": provider, "name": "test-model"}})
}

async fn post_input(
    server: &ApiServer,
    key: &str,
    agent: Uuid,
    content: Value,
) -> reqwest::Response {
    server
        .request(Method::POST, &format!("/v1/agents/{agent}/inputs"), key)
        .json(&json!({"content": content}))
        .send()
        .await
        .unwrap()
}

/// What a refusal must leave as it was: the agent's inputs, events and
/// attachments, and the stored-bytes totals of the agent and its project.
async fn written(client: &Client, agent: Uuid) -> (i64, i64, i64, i64, Option<i64>) {
    let row = client
        .query_one(
            "SELECT (SELECT count(*) FROM holdfast.inputs WHERE agent_id = a.id), \
                    (SELECT count(*) FROM holdfast.events WHERE agent_id = a.id), \
                    (SELECT count(*) FROM holdfast.attachments WHERE agent_id = a.id), \
                    a.attachment_bytes, \
                    (SELECT bytes FROM holdfast.project_attachment_bytes WHERE project_id = a.project_id) \
               FROM holdfast.agents a WHERE a.id = $1",
            &[&agent],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn files_past_an_attachment_quota_are_422_naming_it_and_write_nothing() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let server = ApiServer::start(&db).await;
    let (project, key) = project_key(&client).await;
    let first = store::create_agent(&client, project, &config("anthropic"))
        .await
        .unwrap();
    let second = store::create_agent(&client, project, &config("anthropic"))
        .await
        .unwrap();
    store::set_attachment_quotas(
        &client,
        &AttachmentQuotas {
            bytes_per_agent: 1000,
            bytes_per_project: 1500,
        },
    )
    .await
    .unwrap();
    let big = png_base64(800, 1);
    let response = post_input(&server, &key, first, json!([image(&big)])).await;
    assert!(response.status().is_success(), "{}", response.status());
    assert_eq!(written(&client, first).await.3, 800);

    // 800 stored + 300 new > 1000 for the agent.
    let before = written(&client, first).await;
    let response = post_input(
        &server,
        &key,
        first,
        json!([{"type": "text", "text": "and this"}, image(&png_base64(300, 2))]),
    )
    .await;
    let (status, kind, message, field) = error_of(response).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{message}");
    assert_eq!(kind, "attachment_quota_exceeded");
    assert_eq!(field.as_deref(), Some("content"));
    assert!(
        message.contains("max_attachment_bytes_per_agent is 1000"),
        "{message}"
    );
    assert_eq!(written(&client, first).await, before, "nothing written");

    // A file the agent has stored already costs nothing: sent again, it is
    // taken at the quota.
    let response = post_input(&server, &key, first, json!([image(&big)])).await;
    assert!(response.status().is_success(), "{}", response.status());
    assert_eq!(written(&client, first).await.3, 800);

    // 800 of the project's + 800 new > 1500 for the project, though the
    // second agent has nothing stored.
    let before = written(&client, second).await;
    let response = post_input(&server, &key, second, json!([image(&png_base64(800, 3))])).await;
    let (status, kind, message, field) = error_of(response).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{message}");
    assert_eq!(kind, "attachment_quota_exceeded");
    assert_eq!(field.as_deref(), Some("content"));
    assert!(
        message.contains("max_attachment_bytes_per_project is 1500"),
        "{message}"
    );
    assert_eq!(written(&client, second).await, before, "nothing written");

    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tool_results_past_a_quota_are_refused_or_left_out_saying_why() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let server = ApiServer::start(&db).await;
    let (project, key) = project_key(&client).await;
    let agent = store::create_agent(&client, project, &config("anthropic"))
        .await
        .unwrap();
    store::set_attachment_quotas(
        &client,
        &AttachmentQuotas {
            bytes_per_agent: 1000,
            bytes_per_project: 10_000,
        },
    )
    .await
    .unwrap();
    let output = json!([{"type": "text", "text": "chart"}, image(&png_base64(1200, 4))]);

    // A custom tool's result: 422 naming `output`, the call still waiting.
    let call = holdfast_tests::api_server::waiting_custom_call(&client, agent).await;
    let before = written(&client, agent).await;
    let response = server
        .request(Method::POST, &format!("/v1/tool-calls/{call}/result"), &key)
        .json(&json!({"output": output}))
        .send()
        .await
        .unwrap();
    let (status, kind, message, field) = error_of(response).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{message}");
    assert_eq!(kind, "attachment_quota_exceeded");
    assert_eq!(field.as_deref(), Some("output"));
    let status: String = client
        .query_one(
            "SELECT status FROM holdfast.tool_calls WHERE id = $1",
            &[&call],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(status, "waiting");
    assert_eq!(written(&client, agent).await, before, "nothing written");

    // An MCP server's result, already in hand: kept, its file left out with
    // the reason, nothing stored.
    let kept: Value = client
        .query_one(
            "SELECT holdfast.keep_tool_output(a, $2) FROM holdfast.agents a WHERE a.id = $1",
            &[&agent, &output],
        )
        .await
        .unwrap()
        .get(0);
    let text = kept.as_str().unwrap_or_default();
    assert!(
        text.starts_with("chart\n[image left out: attachment_quota_exceeded:")
            && text.contains("max_attachment_bytes_per_agent is 1000"),
        "{kept}"
    );
    assert_eq!(written(&client, agent).await, before, "nothing stored");
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn files_past_the_providers_request_size_are_422_and_write_nothing() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let server = ApiServer::start(&db).await;
    let (project, key) = project_key(&client).await;
    // Just under the 5 MiB an image may be: 6.85 MB of base64, of which
    // Anthropic's 32 MB request takes four; OpenAI counts the 5.1 MB of
    // bytes against its 50 MB.
    let photo = png_base64(5 * 1024 * 1024 - 4096, 9);
    let anthropic = store::create_agent(&client, project, &config("anthropic"))
        .await
        .unwrap();
    for _ in 0..4 {
        let response = post_input(&server, &key, anthropic, json!([image(&photo)])).await;
        assert!(response.status().is_success(), "{}", response.status());
    }
    let before = written(&client, anthropic).await;
    let response = post_input(&server, &key, anthropic, json!([image(&photo)])).await;
    let (status, kind, message, field) = error_of(response).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{message}");
    assert_eq!(kind, "request_too_large");
    assert_eq!(field.as_deref(), Some("content"));
    assert!(
        message.contains("anthropic") && message.contains("32000000"),
        "{message}"
    );
    assert_eq!(written(&client, anthropic).await, before, "nothing written");

    let openai = store::create_agent(&client, project, &config("openai"))
        .await
        .unwrap();
    for _ in 0..5 {
        let response = post_input(&server, &key, openai, json!([image(&photo)])).await;
        assert!(response.status().is_success(), "{}", response.status());
    }
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_reference_to_a_stored_file_reaches_the_model_with_its_bytes() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    fake.set_default(Reply::text("Seen."));
    let _worker = spawn_worker("w-attachment-refs", &db.config, &fake, &[]);
    let agent = agent_with_config(&client, &config("anthropic")).await;
    let (a, b) = (png_base64(64, 1), png_base64(96, 2));
    store::create_input(&client, agent, &json!([image(&a), image(&b)]), None)
        .await
        .unwrap();
    wait_for_events(&client, agent, "turn.completed", 1, T).await;
    store::create_input(
        &client,
        agent,
        &json!([{"type": "text", "text": "the first again"}, image(&a)]),
        None,
    )
    .await
    .unwrap();
    wait_for_events(&client, agent, "turn.completed", 2, T).await;

    let requests: Vec<Value> = fake
        .requests()
        .into_iter()
        .filter(|r| r.protocol == Protocol::Anthropic)
        .map(|r| r.body)
        .collect();
    assert_eq!(requests.len(), 2);
    let sources = |message: &Value| -> Vec<Value> {
        message["content"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|block| block["type"] == "image")
            .map(|block| block["source"].clone())
            .collect()
    };
    let source = |data: &str| json!({"type": "base64", "media_type": "image/png", "data": data});
    let second = &requests[1]["messages"];
    assert_eq!(sources(&second[0]), vec![source(&a), source(&b)]);
    assert_eq!(sources(&second[2]), vec![source(&a)]);
    // Stored once each, however often sent.
    let stored: i64 = client
        .query_one(
            "SELECT count(*) FROM holdfast.attachments WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_api_process_writes_its_quota_settings_at_start() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let quotas = || async {
        let row = client
            .query_one(
                "SELECT max_agent_bytes, max_project_bytes FROM holdfast.attachment_quotas",
                &[],
            )
            .await
            .unwrap();
        (row.get::<_, i64>(0), row.get::<_, i64>(1))
    };
    let defaults = AttachmentQuotas::default();
    assert_eq!(
        quotas().await,
        (defaults.bytes_per_agent, defaults.bytes_per_project)
    );
    let mut api = HoldfastProcess::spawn(
        "api-quotas",
        &["api", "--listen", "127.0.0.1:0"],
        &[
            ("HOLDFAST_DATABASE_URL", db.config.to_connection_string()),
            ("HOLDFAST_MAX_ATTACHMENT_BYTES_PER_AGENT", "12345".into()),
            ("HOLDFAST_MAX_ATTACHMENT_BYTES_PER_PROJECT", "67890".into()),
        ],
    );
    wait_until(T, "the API's quotas in the database", || async {
        quotas().await == (12345, 67890)
    })
    .await;
    api.signal("TERM");
    api.wait_exit(T).await;

    // A quota that is not a positive number stops the process, naming it.
    let mut refused = HoldfastProcess::spawn(
        "api-bad-quota",
        &["api", "--listen", "127.0.0.1:0"],
        &[
            ("HOLDFAST_DATABASE_URL", db.config.to_connection_string()),
            ("HOLDFAST_MAX_ATTACHMENT_BYTES_PER_AGENT", "0".into()),
        ],
    );
    assert_ne!(refused.wait_exit(T).await, Some(0));
    assert!(
        refused
            .log_text()
            .contains("max-attachment-bytes-per-agent"),
        "{}",
        refused.log_text()
    );
    assert_eq!(quotas().await, (12345, 67890), "nothing changed");
}
