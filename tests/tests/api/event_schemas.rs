//! The OpenAPI document's event union (`EventView`: one variant per event
//! type, discriminated by `type`) against what the server really writes:
//! every type `holdfast.event_types()` lists has its variant, and the events
//! a real agent's turns write (a real worker and the API, the model scripted)
//! validate against their variant's schema and carry no field it does not
//! declare.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use holdfast_api::ApiConfig;
use holdfast_fakes::{FakeProvider, Reply};
use holdfast_providers::egress::EgressPolicy;
use holdfast_tests::api_server::{project_key, ApiServer};
use holdfast_tests::event_schemas::{assert_events_match, event_validator, resolve, schema_at};
use holdfast_tests::scenario::{last_event_data, spawn_worker, wait_for_event, wait_for_events};
use holdfast_tests::{wait_until, TestDb};
use reqwest::Method;
use serde_json::{json, Value};
use uuid::Uuid;

const T: Duration = Duration::from_secs(60);

/// A 1×1 PNG, and another one of the same size with other pixels.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

fn image(data: &str) -> Value {
    json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}})
}

/// The served document.
async fn document(server: &ApiServer) -> Value {
    server
        .http
        .get(server.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test]
async fn every_event_type_the_server_emits_has_a_variant_in_the_document() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let server = ApiServer::start(&db).await;
    let document = document(&server).await;
    let emitted: Vec<String> = client
        .query_one("SELECT holdfast.event_types()", &[])
        .await
        .unwrap()
        .get(0);

    let union = &document["components"]["schemas"]["EventView"];
    assert_eq!(union["discriminator"]["propertyName"], "type");
    let mapping = union["discriminator"]["mapping"]
        .as_object()
        .expect("the discriminator maps each type");
    let mapped: BTreeSet<&str> = mapping.keys().map(String::as_str).collect();
    let listed: BTreeSet<&str> = emitted.iter().map(String::as_str).collect();
    assert_eq!(
        mapped, listed,
        "the document's event types are holdfast.event_types()"
    );
    assert_eq!(
        union["oneOf"].as_array().unwrap().len(),
        emitted.len(),
        "one variant per type"
    );
    for (event_type, reference) in mapping {
        let variant = schema_at(&document, reference.as_str().unwrap());
        assert!(
            union["oneOf"]
                .as_array()
                .unwrap()
                .contains(&json!({"$ref": reference})),
            "{event_type}'s variant is in the union"
        );
        assert_eq!(
            variant["properties"]["type"]["enum"],
            json!([event_type]),
            "{event_type}'s variant fixes its type"
        );
        let data = resolve(&document, &variant["properties"]["data"]);
        assert_eq!(
            data["type"], "object",
            "{event_type}'s data has a schema of its own"
        );
    }
}

/// Every event of `agent` as the API lists it, all pages.
async fn events(server: &ApiServer, key: &str, agent: Uuid) -> Vec<Value> {
    let mut events = Vec::new();
    let mut after = 0;
    loop {
        let page: Value = server
            .request(
                Method::GET,
                &format!("/v1/agents/{agent}/events?after={after}"),
                key,
            )
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let batch = page["events"].as_array().unwrap().clone();
        if let Some(last) = batch.last() {
            after = last["seq"].as_i64().unwrap();
        }
        events.extend(batch);
        if page["has_more"] != json!(true) {
            return events;
        }
    }
}

/// The scripted model: the first request fails once (overloaded, so the
/// call is retried); "start" asks for a custom tool needing approval, a
/// question and a subagent; the subagent's "child task" is answered; "second"
/// asks for the custom tool again; tool results are answered "done".
fn script(fake: &FakeProvider) {
    let requests = AtomicUsize::new(0);
    fake.set_responder(move |body| {
        if requests.fetch_add(1, Ordering::SeqCst) == 0 {
            return Reply::status(529);
        }
        let last = &body["messages"].as_array().unwrap().last().unwrap()["content"];
        let text = match last {
            Value::String(text) => Some(text.as_str()),
            Value::Array(blocks) => blocks
                .iter()
                .find(|b| b["type"] == "text")
                .and_then(|b| b["text"].as_str()),
            _ => None,
        };
        match text {
            Some("start") => Reply::text_and_tool_calls(
                "Let me check.",
                vec![
                    ("lookup", json!({"order": "A-1"})),
                    ("ask_user", json!({"question": "Which colour?"})),
                    ("spawn_subagent", json!({"prompt": "child task"})),
                ],
            ),
            Some("child task") => Reply::text("child answer"),
            Some("second") => Reply::tool_calls(vec![("lookup", json!({"order": "A-2"}))]),
            _ => Reply::text("done"),
        }
    });
}

/// The id of the agent's one tool call named `name` whose status is `status`, once it is.
async fn call_in_status(
    db: &tokio_postgres::Client,
    agent: Uuid,
    name: &str,
    status: &str,
) -> Uuid {
    let query =
        "SELECT id FROM holdfast.tool_calls WHERE agent_id = $1 AND name = $2 AND status = $3";
    wait_until(T, &format!("{name} is {status}"), || async {
        db.query_opt(query, &[&agent, &name, &status])
            .await
            .unwrap()
            .is_some()
    })
    .await;
    db.query_one(query, &[&agent, &name, &status])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_events_of_real_turns_match_their_schemas() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (_, key) = project_key(&client).await;
    let fake = FakeProvider::start().await;
    script(&fake);
    let _worker = spawn_worker("w-events", &db.config, &fake, &[]);
    // The API lets the agent name a loopback MCP server; the worker's
    // default egress policy refuses it, so every model call goes without
    // its tools (tool.unavailable).
    let server = ApiServer::start_with(&db, |c: &mut ApiConfig| {
        c.egress = Arc::new(EgressPolicy::parse("mcp=127.0.0.1").unwrap())
    })
    .await;
    let document = document(&server).await;
    let call = |method: Method, path: String, body: Value| {
        let request = server.request(method, &path, &key).json(&body);
        async move {
            let response = request.send().await.unwrap();
            let status = response.status();
            let body: Value = response.json().await.unwrap_or(Value::Null);
            assert!(status.is_success(), "{path}: {status} {body}");
            body
        }
    };

    let created = call(
        Method::POST,
        "/v1/agents".into(),
        json!({
            "model": {"provider": "anthropic", "name": "claude-test"},
            "tools": [
                {"type": "custom", "name": "lookup"},
                {"type": "ask_user"},
                {"type": "spawn_subagent"},
                {"type": "mcp", "name": "docs", "url": "http://127.0.0.1:9/mcp"},
            ],
            "approvals": {"require_for": ["lookup"]},
        }),
    )
    .await;
    let agent: Uuid = created["id"].as_str().unwrap().parse().unwrap();
    call(
        Method::PATCH,
        format!("/v1/agents/{agent}"),
        json!({"system": "Be brief."}),
    )
    .await;

    // A turn: an image input, a retried model call, a tool call approved and
    // answered with an image, a question answered, a subagent.
    call(
        Method::POST,
        format!("/v1/agents/{agent}/inputs"),
        json!({"content": [{"type": "text", "text": "start"}, image(PNG)]}),
    )
    .await;
    wait_for_event(&client, agent, "approval.requested", T).await;
    let approval = last_event_data(&client, agent, "approval.requested").await;
    call(
        Method::POST,
        format!(
            "/v1/approvals/{}",
            approval["approval_id"].as_str().unwrap()
        ),
        json!({"decision": "approve", "by": "ops"}),
    )
    .await;
    wait_for_event(&client, agent, "question.asked", T).await;
    let question = last_event_data(&client, agent, "question.asked").await;
    call(
        Method::POST,
        format!(
            "/v1/questions/{}/answer",
            question["question_id"].as_str().unwrap()
        ),
        json!({"answer": "Blue.", "by": "ops"}),
    )
    .await;
    let lookup = call_in_status(&client, agent, "lookup", "waiting").await;
    call(
        Method::POST,
        format!("/v1/tool-calls/{lookup}/result"),
        json!({"output": [{"type": "text", "text": "shipped"}, image(PNG)], "is_error": false}),
    )
    .await;
    wait_for_event(&client, agent, "turn.completed", T).await;

    // A second turn: a queued input taken back, then the turn cancelled
    // while its tool call waits; then the agent archived.
    call(
        Method::POST,
        format!("/v1/agents/{agent}/inputs"),
        json!({"content": "second"}),
    )
    .await;
    call_in_status(&client, agent, "lookup", "awaiting_approval").await;
    let queued = call(
        Method::POST,
        format!("/v1/agents/{agent}/inputs"),
        json!({"content": "later", "mode": "queue"}),
    )
    .await;
    call(
        Method::DELETE,
        format!("/v1/inputs/{}", queued["id"].as_str().unwrap()),
        Value::Null,
    )
    .await;
    call(
        Method::POST,
        format!("/v1/agents/{agent}/cancel"),
        json!({}),
    )
    .await;
    wait_for_event(&client, agent, "turn.cancelled", T).await;
    call(
        Method::POST,
        format!("/v1/agents/{agent}/archive"),
        json!({}),
    )
    .await;
    wait_for_events(&client, agent, "agent.archived", 1, T).await;

    let timeline = events(&server, &key, agent).await;
    let child: Uuid = last_event_data(&client, agent, "subagent.started").await["child_agent_id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let mut seen = assert_events_match(&document, &timeline);
    seen.extend(assert_events_match(
        &document,
        &events(&server, &key, child).await,
    ));
    let expected = [
        "config.updated",
        "input.received",
        "input.removed",
        "turn.started",
        "model.retry",
        "model.response",
        "tool.unavailable",
        "tool_call.created",
        "approval.requested",
        "approval.answered",
        "question.asked",
        "question.answered",
        "subagent.started",
        "subagent.finished",
        "tool_call.completed",
        "turn.completed",
        "turn.cancelled",
        "agent.archived",
    ];
    for event_type in expected {
        assert!(
            seen.contains(event_type),
            "the scenario wrote {event_type} (it wrote {seen:?})"
        );
    }
}

#[tokio::test]
async fn an_event_whose_data_is_not_its_types_shape_fails_validation() {
    let db = TestDb::new().await;
    let server = ApiServer::start(&db).await;
    let document = document(&server).await;
    let event = |event_type: &str, data: Value| {
        json!({"seq": 1, "id": Uuid::now_v7(), "agent_id": Uuid::now_v7(), "type": event_type,
               "data": data, "created_at": "2026-01-01T00:00:00Z"})
    };
    let validator = event_validator(&document);
    let completed =
        json!({"tool_call_id": Uuid::now_v7(), "name": "lookup", "output": {}, "is_error": false});
    assert!(validator.is_valid(&event("tool_call.completed", completed.clone())));
    // A misspelled type, a missing field, a field of the wrong type.
    assert!(!validator.is_valid(&event("tool_call.complete", completed)));
    assert!(!validator.is_valid(&event(
        "tool_call.completed",
        json!({"tool_call_id": Uuid::now_v7(), "name": "lookup", "output": {}})
    )));
    assert!(!validator.is_valid(&event(
        "turn.failed",
        json!({"error": {"type": 5, "message": "m"}})
    )));
}
