//! Images and documents (docs/api.md, "Content blocks"): an image input
//! reaches each provider in its own format, a document reaches Anthropic,
//! the bytes are stored once however often they are sent, malformed blocks
//! are refused naming the field and write nothing, a block the agent's
//! provider cannot take is a 422 `unsupported_content` and bytes that are
//! not of their declared media type a 422 `media_type_mismatch`, an
//! attachment is served back as a download a browser neither sniffs nor
//! lets act, a custom tool's
//! image result reaches each provider, an MCP server's image reaches the
//! model, and the raised body limit of the
//! content routes ends in a 413.

use std::time::Duration;

use base64::Engine;
use holdfast_db::store;
use holdfast_fakes::{FakeProvider, Protocol, Reply};
use holdfast_tests::api_server::{error_of, project_key, raw_http, ApiServer};
use holdfast_tests::mcp_server::{McpTestServer, CHART_PNG};
use holdfast_tests::scenario::{
    agent_with_config, answer_waiting_call, spawn_worker, wait_for_events,
};
use holdfast_tests::TestDb;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tokio_postgres::Client;
use uuid::Uuid;

const T: Duration = Duration::from_secs(30);

/// A 1×1 PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
/// A minimal PDF.
const PDF: &str =
    "JVBERi0xLjQKMSAwIG9iajw8L1R5cGUvQ2F0YWxvZz4+ZW5kb2JqCnRyYWlsZXI8PC9Sb290IDEgMCBSPj4KJSVFT0YK";
const IMAGE_URL: &str = "https://images.example.com/cat.jpg";

fn config(provider: &str) -> Value {
    json!({"model": {"provider": provider, "name": "test-model"}})
}

fn png_block() -> Value {
    json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}})
}

fn image_input() -> Value {
    json!([
        {"type": "text", "text": "What is in these pictures?"},
        png_block(),
        {"type": "image", "source": {"type": "url", "url": IMAGE_URL}},
    ])
}

fn png_data_url() -> String {
    format!("data:image/png;base64,{PNG}")
}

async fn count(client: &Client, sql: &str, agent: Uuid) -> i64 {
    client.query_one(sql, &[&agent]).await.unwrap().get(0)
}

async fn attachments(client: &Client, agent: Uuid) -> i64 {
    count(
        client,
        "SELECT count(*) FROM holdfast.attachments WHERE agent_id = $1",
        agent,
    )
    .await
}

/// The first request of `protocol` the fake received.
fn request_of(fake: &FakeProvider, protocol: Protocol) -> Value {
    fake.requests()
        .into_iter()
        .find(|r| r.protocol == protocol)
        .unwrap_or_else(|| panic!("no {protocol:?} request"))
        .body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_image_input_reaches_each_provider_in_its_format() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    fake.set_default(Reply::text("A cat."));
    let _worker = spawn_worker("w-content-images", &db.config, &fake, &[]);
    let mut agents = Vec::new();
    for provider in ["anthropic", "openai", "openai_responses"] {
        let agent = agent_with_config(&client, &config(provider)).await;
        store::create_input(&client, agent, &image_input(), None)
            .await
            .unwrap();
        agents.push(agent);
    }
    for agent in &agents {
        wait_for_events(&client, *agent, "turn.completed", 1, T).await;
    }

    assert_eq!(
        request_of(&fake, Protocol::Anthropic)["messages"][0]["content"],
        json!([
            {"type": "text", "text": "What is in these pictures?"},
            png_block(),
            // The latest block carries the prompt-cache breakpoint.
            {"type": "image", "source": {"type": "url", "url": IMAGE_URL},
             "cache_control": {"type": "ephemeral"}},
        ])
    );
    assert_eq!(
        request_of(&fake, Protocol::Openai)["messages"],
        json!([{"role": "user", "content": [
            {"type": "text", "text": "What is in these pictures?"},
            {"type": "image_url", "image_url": {"url": png_data_url()}},
            {"type": "image_url", "image_url": {"url": IMAGE_URL}},
        ]}])
    );
    assert_eq!(
        request_of(&fake, Protocol::OpenaiResponses)["input"],
        json!([{"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "What is in these pictures?"},
            {"type": "input_image", "image_url": png_data_url(), "detail": "auto"},
            {"type": "input_image", "image_url": IMAGE_URL, "detail": "auto"},
        ]}])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_document_reaches_anthropic_and_the_openai_apis_as_their_file_parts() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    fake.set_default(Reply::text("A catalog."));
    let _worker = spawn_worker("w-content-documents", &db.config, &fake, &[]);
    let pdf = json!({"type": "document",
                     "source": {"type": "base64", "media_type": "application/pdf", "data": PDF}});
    let pdf_url = json!({"type": "document",
                         "source": {"type": "url", "url": "https://docs.example.com/a.pdf"}});
    let mut agents = Vec::new();
    for (provider, content) in [
        (
            "anthropic",
            json!([pdf, pdf_url, {"type": "text", "text": "Summarise."}]),
        ),
        (
            "openai",
            json!([pdf, {"type": "text", "text": "Summarise."}]),
        ),
        ("openai_responses", json!([pdf, pdf_url])),
    ] {
        let agent = agent_with_config(&client, &config(provider)).await;
        store::create_input(&client, agent, &content, None)
            .await
            .unwrap();
        agents.push(agent);
    }
    for agent in &agents {
        wait_for_events(&client, *agent, "turn.completed", 1, T).await;
    }

    assert_eq!(
        request_of(&fake, Protocol::Anthropic)["messages"][0]["content"],
        json!([pdf, pdf_url,
               {"type": "text", "text": "Summarise.", "cache_control": {"type": "ephemeral"}}])
    );
    let pdf_data_url = format!("data:application/pdf;base64,{PDF}");
    assert_eq!(
        request_of(&fake, Protocol::Openai)["messages"][0]["content"],
        json!([
            {"type": "file", "file": {"filename": "document.pdf", "file_data": pdf_data_url}},
            {"type": "text", "text": "Summarise."},
        ])
    );
    assert_eq!(
        request_of(&fake, Protocol::OpenaiResponses)["input"][0]["content"],
        json!([
            {"type": "input_file", "filename": "document.pdf", "file_data": pdf_data_url},
            {"type": "input_file", "file_url": "https://docs.example.com/a.pdf"},
        ])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_bytes_are_stored_once_though_sent_in_two_steps() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    fake.push(Reply::tool_calls(vec![("lookup", json!({"q": "cat"}))]));
    fake.push(Reply::text("Still a cat."));
    let _worker = spawn_worker("w-content-once", &db.config, &fake, &[]);
    let config = json!({"model": {"provider": "anthropic", "name": "test-model"},
                        "tools": [{"type": "custom", "name": "lookup"}]});
    let agent = agent_with_config(&client, &config).await;
    let key = "same-image-twice";
    let first = store::create_input(&client, agent, &image_input(), Some(key))
        .await
        .unwrap();
    let replay = store::create_input(&client, agent, &image_input(), Some(key))
        .await
        .unwrap();
    assert_eq!(first.input_id, replay.input_id);
    assert!(
        replay.replayed,
        "the same body with the same key is a replay"
    );

    answer_waiting_call(&client, agent, json!("a tabby")).await;
    wait_for_events(&client, agent, "turn.completed", 1, T).await;

    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(
            request.body["messages"][0]["content"][1],
            png_block(),
            "each step sends the image's bytes"
        );
    }
    assert_eq!(attachments(&client, agent).await, 1, "one row for the file");
    let (size, sha256): (i32, Vec<u8>) = {
        let row = client
            .query_one(
                "SELECT size_bytes, sha256 FROM holdfast.attachments WHERE agent_id = $1",
                &[&agent],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(PNG)
        .unwrap();
    assert_eq!(size as usize, bytes.len());
    assert_eq!(hex::encode(sha256), {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(&bytes))
    });
    // Neither the input, its message nor its event carries the base64.
    let rows_with_data = count(
        &client,
        "SELECT (SELECT count(*) FROM holdfast.inputs WHERE agent_id = $1 AND content::text LIKE '%iVBOR%')
              + (SELECT count(*) FROM holdfast.messages WHERE agent_id = $1 AND content::text LIKE '%iVBOR%')
              + (SELECT count(*) FROM holdfast.events WHERE agent_id = $1 AND data::text LIKE '%iVBOR%')",
        agent,
    )
    .await;
    assert_eq!(rows_with_data, 0);
    let saved: Value = client
        .query_one(
            "SELECT content FROM holdfast.inputs WHERE id = $1",
            &[&first.input_id],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(saved[1]["source"]["type"], "attachment");
    assert_eq!(saved[1]["source"]["media_type"], "image/png");
    assert_eq!(saved[1]["source"]["size_bytes"], bytes.len());
}

/// An API server, a project key and an agent of `provider` in the project.
async fn api_agent(db: &TestDb, provider: &str) -> (ApiServer, String, Uuid) {
    let server = ApiServer::start(db).await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let agent = store::create_agent(&client, project, &config(provider))
        .await
        .unwrap();
    (server, key, agent)
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

/// What the refusals must leave untouched.
async fn written(client: &Client, agent: Uuid) -> (i64, i64, i64) {
    (
        count(
            client,
            "SELECT count(*) FROM holdfast.inputs WHERE agent_id = $1",
            agent,
        )
        .await,
        attachments(client, agent).await,
        count(
            client,
            "SELECT count(*) FROM holdfast.events WHERE agent_id = $1",
            agent,
        )
        .await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn malformed_blocks_are_refused_naming_the_field_and_write_nothing() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (server, key, agent) = api_agent(&db, "anthropic").await;
    let oversize = base64::engine::general_purpose::STANDARD.encode(vec![0u8; 5 * 1024 * 1024 + 1]);
    let cases = [
        (
            json!([{"type": "text", "text": "look"},
                   {"type": "image", "source": {"type": "base64", "media_type": "image/bmp", "data": PNG}}]),
            "content[1].source.media_type",
        ),
        (
            json!([{"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                "data": "not base64!"}}]),
            "content[0].source.data",
        ),
        (
            json!([{"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                "data": oversize}}]),
            "content[0].source.data",
        ),
        (
            json!([{"type": "document", "source": {"type": "base64", "media_type": "image/png",
                                                   "data": PNG}}]),
            "content[0].source.media_type",
        ),
        (
            json!([{"type": "image", "source": {"type": "url", "url": "file:///etc/passwd"}}]),
            "content[0].source.url",
        ),
        (
            json!([{"type": "image", "source": {"type": "attachment", "attachment_id": Uuid::nil()}}]),
            "content[0].source.type",
        ),
        (
            json!([{"type": "image", "source": "x"}]),
            "content[0].source",
        ),
        (
            json!([{"type": "image", "source": {"type": "url", "url": IMAGE_URL}, "detail": "high"}]),
            "content[0].detail",
        ),
    ];
    for (content, field) in cases {
        let response = post_input(&server, &key, agent, content).await;
        let (status, kind, message, got) = error_of(response).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{field}: {message}");
        assert_eq!(kind, "invalid_request");
        assert_eq!(got.as_deref(), Some(field), "{message}");
        assert_eq!(
            written(&client, agent).await,
            (0, 0, 0),
            "{field}: nothing written"
        );
    }
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_block_the_agents_provider_cannot_take_is_422_unsupported_content() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (server, key, agent) = api_agent(&db, "openai").await;
    let response = post_input(
        &server,
        &key,
        agent,
        json!([{"type": "text", "text": "read this"},
               {"type": "document", "source": {"type": "url", "url": "https://docs.example.com/a.pdf"}}]),
    )
    .await;
    let (status, kind, message, field) = error_of(response).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{message}");
    assert_eq!(kind, "unsupported_content");
    assert_eq!(field.as_deref(), Some("content[1].source"));
    assert_eq!(written(&client, agent).await, (0, 0, 0));

    // The same document as base64 is taken.
    let pdf = json!([{"type": "document",
                      "source": {"type": "base64", "media_type": "application/pdf", "data": PDF}}]);
    let response = post_input(&server, &key, agent, pdf).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let view: Value = response.json().await.unwrap();
    assert_eq!(view["content"][0]["source"]["type"], "attachment");
    assert_eq!(attachments(&client, agent).await, 1);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_attachment_is_read_back_by_its_id_in_its_agents_project_only() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (server, key, agent) = api_agent(&db, "anthropic").await;
    let response = post_input(&server, &key, agent, json!([png_block()])).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let view: Value = response.json().await.unwrap();
    let id = view["content"][0]["source"]["attachment_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = format!("/v1/agents/{agent}/attachments/{id}");

    let response = server
        .request(Method::GET, &path, &key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], "image/png");
    // Served as a download a browser neither sniffs nor lets act.
    assert_eq!(response.headers()["x-content-type-options"], "nosniff");
    assert_eq!(response.headers()["content-disposition"], "attachment");
    assert_eq!(
        response.headers()["content-security-policy"],
        "default-src 'none'; sandbox"
    );
    let bytes = response.bytes().await.unwrap();
    assert_eq!(
        bytes.as_ref(),
        base64::engine::general_purpose::STANDARD
            .decode(PNG)
            .unwrap()
    );

    let (_, other_key) = project_key(&client).await;
    let response = server
        .request(Method::GET, &path, &other_key)
        .send()
        .await
        .unwrap();
    assert_eq!(error_of(response).await.0, StatusCode::NOT_FOUND);
    let unknown = format!("/v1/agents/{agent}/attachments/{}", Uuid::new_v4());
    let response = server
        .request(Method::GET, &unknown, &key)
        .send()
        .await
        .unwrap();
    assert_eq!(error_of(response).await.0, StatusCode::NOT_FOUND);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_custom_tool_result_image_reaches_each_provider_in_its_format() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    let server = ApiServer::start(&db).await;
    let (project, key) = project_key(&client).await;
    let _worker = spawn_worker("w-content-tool-results", &db.config, &fake, &[]);
    let output = json!([{"type": "text", "text": "the chart"}, png_block()]);
    let mut results = Vec::new();
    for provider in ["anthropic", "openai", "openai_responses"] {
        fake.push(Reply::tool_calls(vec![("chart", json!({}))]));
        fake.push(Reply::text("Sales rose."));
        let config = json!({"model": {"provider": provider, "name": "test-model"},
                            "tools": [{"type": "custom", "name": "chart"}]});
        let agent = store::create_agent(&client, project, &config)
            .await
            .unwrap();
        store::create_input(&client, agent, &json!("draw the chart"), None)
            .await
            .unwrap();
        let waiting =
            "SELECT id FROM holdfast.tool_calls WHERE agent_id = $1 AND status = 'waiting'";
        holdfast_tests::wait_until(T, "the call waits", || async {
            client
                .query_opt(waiting, &[&agent])
                .await
                .unwrap()
                .is_some()
        })
        .await;
        let call: Uuid = client.query_one(waiting, &[&agent]).await.unwrap().get(0);
        let response = server
            .request(Method::POST, &format!("/v1/tool-calls/{call}/result"), &key)
            .json(&json!({"output": output}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let view: Value = response.json().await.unwrap();
        assert_eq!(view["output"][1]["source"]["type"], "attachment");
        wait_for_events(&client, agent, "turn.completed", 1, T).await;
        let request = fake.last_request().unwrap().body;
        let provider_id: String = client
            .query_one(
                "SELECT provider_id FROM holdfast.tool_calls WHERE id = $1",
                &[&call],
            )
            .await
            .unwrap()
            .get(0);
        results.push((provider, provider_id, request));
        assert_eq!(attachments(&client, agent).await, 1);
    }

    let (_, id, anthropic) = &results[0];
    assert_eq!(
        anthropic["messages"][2]["content"][0],
        json!({"type": "tool_result", "tool_use_id": id,
               "content": [{"type": "text", "text": "the chart"}, png_block()],
               "cache_control": {"type": "ephemeral"}})
    );
    let (_, id, chat) = &results[1];
    let messages = chat["messages"].as_array().unwrap();
    assert_eq!(
        messages[2],
        json!({"role": "tool", "tool_call_id": id,
               "content": "the chart\n[image]\n(The images and documents of this result follow in the next user message.)"})
    );
    assert_eq!(
        messages[3],
        json!({"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": png_data_url()}},
        ]})
    );
    let (_, id, responses) = &results[2];
    assert_eq!(
        responses["input"][2],
        json!({"type": "function_call_output", "call_id": id, "output": [
            {"type": "input_text", "text": "the chart"},
            {"type": "input_image", "image_url": png_data_url(), "detail": "auto"},
        ]})
    );
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tool_result_with_a_bad_image_is_refused_and_the_call_still_waits() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (server, key, agent) = api_agent(&db, "anthropic").await;
    let call = holdfast_tests::api_server::waiting_custom_call(&client, agent).await;
    let output = json!([{"type": "text", "text": "chart"},
                        {"type": "image", "source": {"type": "base64", "media_type": "image/tiff", "data": PNG}}]);
    let response = server
        .request(Method::POST, &format!("/v1/tool-calls/{call}/result"), &key)
        .json(&json!({"output": output}))
        .send()
        .await
        .unwrap();
    let (status, _, message, field) = error_of(response).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{message}");
    assert_eq!(field.as_deref(), Some("output[1].source.media_type"));
    let status: String = client
        .query_one(
            "SELECT status FROM holdfast.tool_calls WHERE id = $1",
            &[&call],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(status, "waiting");
    assert_eq!(attachments(&client, agent).await, 0);
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_content_routes_take_a_large_pdf_and_answer_413_past_their_limit() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (server, key, agent) = api_agent(&db, "anthropic").await;
    // 20 MiB of PDF: far past the 1 MiB of the other routes.
    let mut pdf = b"%PDF-1.4\n".to_vec();
    pdf.resize(20 * 1024 * 1024, b' ');
    let data = base64::engine::general_purpose::STANDARD.encode(&pdf);
    let document = json!([{"type": "document",
                           "source": {"type": "base64", "media_type": "application/pdf", "data": data}}]);
    let response = post_input(&server, &key, agent, document).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let size: i32 = client
        .query_one(
            "SELECT size_bytes FROM holdfast.attachments WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(size as usize, pdf.len());

    // Past the 48 MiB content limit: 413, and nothing more written. Sent
    // as a careful client does, the head first and the body only once the
    // server reads it: writing 48 MiB on after its 413 would race its close.
    let before = written(&client, agent).await;
    let head = format!(
        "POST /v1/agents/{agent}/inputs HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        48 * 1024 * 1024 + 1
    );
    let (status, body) = raw_http(server.addr, head.into_bytes()).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["type"], "payload_too_large", "{body}");
    assert_eq!(written(&client, agent).await, before);

    // The other routes keep their 1 MiB.
    let head = format!(
        "PATCH /v1/agents/{agent} HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        2 * 1024 * 1024
    );
    let (status, body) = raw_http(server.addr, head.into_bytes()).await;
    assert_eq!(status, 413, "{body}");
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_mcp_tool_result_image_reaches_the_model_and_one_it_cannot_take_is_left_out() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    let mcp = McpTestServer::start().await;
    fake.push(Reply::tool_calls(vec![("charts__chart", json!({}))]));
    fake.push(Reply::text("Sales rose."));
    let allow = ("HOLDFAST_EGRESS_ALLOW", "mcp=127.0.0.1");
    let _worker = spawn_worker("w-content-mcp", &db.config, &fake, &[allow]);
    let config = json!({"model": {"provider": "anthropic", "name": "test-model"},
                        "tools": [{"type": "mcp", "name": "charts", "url": mcp.url}]});
    let agent = agent_with_config(&client, &config).await;
    store::create_input(&client, agent, &json!("draw the chart"), None)
        .await
        .unwrap();
    wait_for_events(&client, agent, "turn.completed", 1, T).await;

    let request = fake.last_request().unwrap().body;
    let result = &request["messages"][2]["content"][0];
    assert_eq!(result["type"], "tool_result");
    assert_eq!(
        result["content"],
        json!([
            {"type": "text", "text": "the chart"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": CHART_PNG}},
            {"type": "text", "text": "[image left out: media_type of an image must be one of image/jpeg, image/png, image/gif, image/webp]"},
        ])
    );
    assert_eq!(attachments(&client, agent).await, 1);
    let completed =
        holdfast_tests::scenario::last_event_data(&client, agent, "tool_call.completed").await;
    assert_eq!(completed["output"][1]["source"]["type"], "attachment");
}

/// Stored bytes are what their media type says, by the format's signature:
/// an HTML page declared `image/gif` (which a browser would render if served
/// back and sniffed) or a PNG declared `image/jpeg` is a 422
/// `media_type_mismatch` naming the data, in an input and in a custom tool
/// result alike, and writes nothing; a file of each of the five types
/// passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bytes_not_of_their_declared_media_type_are_refused() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (server, key, agent) = api_agent(&db, "anthropic").await;
    let encode = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let block = |kind: &str, media_type: &str, data: String| json!({"type": kind, "source": {"type": "base64", "media_type": media_type, "data": data}});
    let html = encode(b"<html><script>alert(document.cookie)</script></html>");
    for wrong in [
        block("image", "image/gif", html.clone()),
        block("image", "image/jpeg", PNG.to_owned()),
        block("image", "image/webp", encode(b"RIFF\0\0\0\0WAVEfmt ")),
        block("document", "application/pdf", html.clone()),
        // Shorter than any signature.
        block("image", "image/png", encode(b"\x89P")),
    ] {
        let response = post_input(&server, &key, agent, json!([wrong])).await;
        let (status, kind, message, field) = error_of(response).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{message}");
        assert_eq!(kind, "media_type_mismatch", "{message}");
        assert_eq!(field.as_deref(), Some("content[0].source.data"));
    }
    assert_eq!(written(&client, agent).await, (0, 0, 0));

    for right in [
        block("image", "image/png", PNG.to_owned()),
        block(
            "image",
            "image/jpeg",
            encode(b"\xff\xd8\xff\xe0\0\x10JFIF\0"),
        ),
        block("image", "image/gif", encode(b"GIF89a\x01\0\x01\0\0\0\0;")),
        block("image", "image/webp", encode(b"RIFF\x1a\0\0\0WEBPVP8L")),
        block("document", "application/pdf", PDF.to_owned()),
    ] {
        let response = post_input(&server, &key, agent, json!([right.clone()])).await;
        assert_eq!(response.status(), StatusCode::CREATED, "{right}");
    }
    assert_eq!(attachments(&client, agent).await, 5);

    // A custom tool result is checked the same way.
    let call = holdfast_tests::api_server::waiting_custom_call(&client, agent).await;
    let response = server
        .request(Method::POST, &format!("/v1/tool-calls/{call}/result"), &key)
        .json(&json!({"output": [{"type": "text", "text": "the chart"},
                                 block("image", "image/gif", html)]}))
        .send()
        .await
        .unwrap();
    let (status, kind, message, field) = error_of(response).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{message}");
    assert_eq!(kind, "media_type_mismatch");
    assert_eq!(field.as_deref(), Some("output[1].source.data"));
    assert_eq!(attachments(&client, agent).await, 5);
    server.stop().await.unwrap();
}
