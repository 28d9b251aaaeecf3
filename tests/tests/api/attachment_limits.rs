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
use holdfast_db::store;
use holdfast_fakes::{FakeProvider, Protocol, Reply};
use holdfast_tests::api_server::{error_of, project_key, ApiServer};
use holdfast_tests::process::HoldfastProcess;
use holdfast_tests::scenario::{agent_with_config, spawn_worker, wait_for_events};
use holdfast_tests::{wait_until, TestDb};
use holdfast_wire::domain::AttachmentQuotas;
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

/// A PDF of `n` bytes (its signature, then filler), as base64.
fn pdf_base64(n: usize, fill: u8) -> String {
    let mut bytes = b"%PDF-1.7\n".to_vec();
    bytes.resize(n, fill);
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pdfs_past_openais_pdf_limit_are_422_within_its_file_limit() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let server = ApiServer::start(&db).await;
    let (project, key) = project_key(&client).await;
    let openai = store::create_agent(&client, project, &config("openai"))
        .await
        .unwrap();
    let document = |fill| {
        json!({"type": "document",
               "source": {"type": "base64", "media_type": "application/pdf",
                          "data": pdf_base64(10_000_000, fill)}})
    };
    // 30 MB of PDFs fit OpenAI's 32 MB of PDFs a request.
    for fill in 1..=3 {
        let response = post_input(&server, &key, openai, json!([document(fill)])).await;
        assert!(response.status().is_success(), "{}", response.status());
    }
    let before = written(&client, openai).await;
    let response = post_input(&server, &key, openai, json!([document(4)])).await;
    let (status, kind, message, field) = error_of(response).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{message}");
    assert_eq!(kind, "request_too_large");
    assert_eq!(field.as_deref(), Some("content"));
    assert!(
        message.contains("PDFs") && message.contains("40000000") && message.contains("32000000"),
        "{message}"
    );
    assert_eq!(written(&client, openai).await, before, "nothing written");
    // Images count only towards the 50 MB of files: 35 MB in all is taken.
    let photo = png_base64(5_000_000, 9);
    let response = post_input(&server, &key, openai, json!([image(&photo)])).await;
    assert!(response.status().is_success(), "{}", response.status());
    server.stop().await.unwrap();
}

/// One input ($1 the agent, $2 its content) in the caller's transaction,
/// which a test may hold open.
const CREATE_INPUT: &str = "SELECT holdfast.create_input($1, $2)";

#[tokio::test]
async fn a_concurrent_writer_past_the_project_quota_is_refused_by_the_trigger() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (first_writer, second_writer) = (db.connect().await, db.connect().await);
    let (project, first) = holdfast_tests::project_and_agent(&client).await;
    let second = holdfast_tests::new_agent(&client, project).await;
    store::set_attachment_quotas(
        &client,
        &AttachmentQuotas {
            bytes_per_agent: 10_000,
            bytes_per_project: 1000,
        },
    )
    .await
    .unwrap();
    let before = written(&client, second).await;

    // The first writer stores 600 bytes and holds its transaction open.
    first_writer.batch_execute("BEGIN").await.unwrap();
    first_writer
        .execute(
            CREATE_INPUT,
            &[&first, &json!([image(&png_base64(600, 1))])],
        )
        .await
        .unwrap();
    // The second passes the check (nothing of the first is committed) and
    // waits on the project's counter in the trigger.
    let second_input = json!([image(&png_base64(600, 2))]);
    let writing = tokio::spawn(async move {
        let result = second_writer
            .execute(CREATE_INPUT, &[&second, &second_input])
            .await;
        (second_writer, result)
    });
    holdfast_tests::wait_for_lock_wait_in(&client, &db.name, "%create_input%").await;
    first_writer.batch_execute("COMMIT").await.unwrap();
    let (_second_writer, result) = writing.await.unwrap();
    let error = holdfast_db::Error::from(result.unwrap_err()).to_string();
    assert!(
        error.contains("attachment_quota_exceeded")
            && error.contains("max_attachment_bytes_per_project is 1000"),
        "{error}"
    );
    assert_eq!(written(&client, second).await.0, before.0, "no input");
    assert_eq!(written(&client, second).await.2, 0, "no file");
    assert_eq!(
        written(&client, first).await.4,
        Some(600),
        "the project counts the first writer's file only"
    );
}

#[tokio::test]
async fn input_batches_storing_files_for_two_projects_never_deadlock() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (first_batch, second_batch) = (db.connect().await, db.connect().await);
    let blocker = db.connect().await;
    let (p, _) = holdfast_tests::project_and_agent(&client).await;
    let (q, _) = holdfast_tests::project_and_agent(&client).await;
    let mut in_p = Vec::new();
    let mut in_q = Vec::new();
    for _ in 0..4 {
        in_p.push(holdfast_tests::new_agent(&client, p).await);
        in_q.push(holdfast_tests::new_agent(&client, q).await);
    }
    // Batches handle inputs in agent order: the first batch stores P's file
    // then Q's (a1 < b1), the second Q's then P's (a2 < b2).
    let pair = |lower: &[Uuid], higher: &[Uuid], not: &[Uuid]| {
        lower
            .iter()
            .filter(|a| !not.contains(a))
            .find_map(|a| {
                higher
                    .iter()
                    .filter(|b| !not.contains(b))
                    .find(|b| *a < **b)
                    .map(|b| (*a, *b))
            })
            .expect("agents in both orders")
    };
    let (a1, b1) = pair(&in_p, &in_q, &[]);
    let (a2, b2) = pair(&in_q, &in_p, &[a1, b1]);
    let batch = "SELECT outcome FROM holdfast.create_inputs(ARRAY[
                     ROW($1, $2, $3, NULL, NULL, NULL, 'steer')::holdfast.new_input,
                     ROW($4, $5, $6, NULL, NULL, NULL, 'steer')::holdfast.new_input])";
    let b1_file = png_base64(64, 7);

    // A third session holds b1's file (stored without its triggers, so it
    // locks no counter): the first batch stores a1's file, locking P's
    // counter as it did, then waits for b1's file.
    blocker
        .batch_execute("BEGIN; SET LOCAL session_replication_role = replica")
        .await
        .unwrap();
    let data = base64::engine::general_purpose::STANDARD
        .decode(&b1_file)
        .unwrap();
    blocker
        .execute(
            "INSERT INTO holdfast.attachments (agent_id, media_type, sha256, size_bytes, data)
             VALUES ($1, 'image/png', sha256($2), octet_length($2), $2)",
            &[&b1, &data],
        )
        .await
        .unwrap();
    let first_inputs = (
        p,
        a1,
        json!([image(&png_base64(64, 1))]),
        q,
        b1,
        json!([image(&b1_file)]),
    );
    let first = tokio::spawn(async move {
        let (p, a1, c1, q, b1, c2) = &first_inputs;
        let result = first_batch
            .query(batch, &[p, a1, c1, q, b1, c2])
            .await
            .map(|rows| rows.len());
        (first_batch, result)
    });
    holdfast_tests::wait_for_lock_wait_in(&client, &db.name, "%create_inputs%").await;
    // The second batch stores a2's file (Q's counter), then b2's (P's).
    let second_inputs = (
        q,
        a2,
        json!([image(&png_base64(64, 2))]),
        p,
        b2,
        json!([image(&png_base64(64, 3))]),
    );
    let second = tokio::spawn(async move {
        let (q, a2, c1, p, b2, c2) = &second_inputs;
        let result = second_batch
            .query(batch, &[q, a2, c1, p, b2, c2])
            .await
            .map(|rows| rows.len());
        (second_batch, result)
    });
    wait_until(
        Duration::from_secs(10),
        "both batches waiting on a lock",
        || async {
            client
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity
                      WHERE datname = $1 AND wait_event_type = 'Lock' AND query LIKE '%create_inputs%'",
                    &[&db.name],
                )
                .await
                .unwrap()
                .get::<_, i64>(0)
                == 2
        },
    )
    .await;
    // b1's file is free again: each batch goes on with the counters it needs.
    blocker.batch_execute("ROLLBACK").await.unwrap();
    let (_first_batch, first) = first.await.unwrap();
    let (_second_batch, second) = second.await.unwrap();
    let describe = |r: Result<usize, tokio_postgres::Error>| {
        r.map_err(|e| holdfast_db::Error::from(e).to_string())
    };
    assert_eq!(describe(first), Ok(2), "the first batch");
    assert_eq!(describe(second), Ok(2), "the second batch");
    let stored: i64 = client
        .query_one("SELECT count(*) FROM holdfast.attachments", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, 4, "every file of both batches");
}
