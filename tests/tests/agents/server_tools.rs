//! Provider server tools kept whole: an Anthropic response with
//! `server_tool_use`, `web_search_tool_result` and cited text, streamed in
//! the API's SSE format, is saved in the model step as sent and sent back
//! unchanged in the next request.

use std::time::Duration;

use holdfast_db::store;
use holdfast_fakes::{FakeProvider, Reply};
use holdfast_tests::scenario::{
    event_types, last_event_data, spawn_worker, start_turn, wait_for_events,
};
use holdfast_tests::TestDb;
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(30);

/// An agent of a new project the operator allowed server tools.
async fn allowed_agent(client: &tokio_postgres::Client, config: &Value) -> uuid::Uuid {
    let name = format!("p{}", uuid::Uuid::new_v4().simple());
    let project: uuid::Uuid = client
        .query_one("SELECT holdfast.ensure_project($1)", &[&name])
        .await
        .unwrap()
        .get(0);
    store::set_project_server_tools(client, &name, true)
        .await
        .unwrap();
    store::create_agent(client, project, config).await.unwrap()
}

/// A web search the model ran on Anthropic's side, in the Messages API's
/// content block shapes.
fn server_search_blocks() -> Vec<Value> {
    vec![
        json!({"type": "text", "text": "I'll search for that."}),
        json!({"type": "server_tool_use", "id": "srvtoolu_01WYG3ziw53XMcoyKL4XcZmE",
               "name": "web_search", "input": {"query": "holdfast durable agents"}}),
        json!({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01WYG3ziw53XMcoyKL4XcZmE",
               "content": [{"type": "web_search_result", "title": "Durable agents on PostgreSQL",
                            "url": "https://docs.example/durable-agents",
                            "encrypted_content": "EqgfCioIARgBIiQ3YTAwMjY1Mi1mZjM5LTQ1NGUtODgxNC1kNjNjNTk1ZWI3Y2Y",
                            "page_age": "November 20, 2026"}]}),
        json!({"type": "text", "text": "Every step is saved as it happens.",
               "citations": [{"type": "web_search_result_location",
                              "url": "https://docs.example/durable-agents",
                              "title": "Durable agents on PostgreSQL",
                              "encrypted_index": "Eo8BCioIAhgBIiQyYjQ0OWJmZi1lNm",
                              "cited_text": "Every step is saved to PostgreSQL as it happens."}]}),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn server_tool_blocks_and_citations_are_saved_and_sent_back_unchanged() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    fake.push(Reply::anthropic_blocks(server_search_blocks()));
    fake.push(Reply::text("Anything else?"));
    let _worker = spawn_worker("w-server-tools", &db.config, &fake, &[]);
    let agent = start_turn(&client, json!([]), "what is holdfast?").await;
    wait_for_events(&client, agent, "turn.completed", 1, T).await;

    let saved: Value = client
        .query_one(
            "SELECT content FROM holdfast.messages WHERE agent_id = $1 AND role = 'assistant'
              ORDER BY seq LIMIT 1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(saved, Value::Array(server_search_blocks()), "saved as sent");
    let shown: Value = client
        .query_one(
            "SELECT data -> 'message' FROM holdfast.events WHERE agent_id = $1
                AND type = 'model.response' ORDER BY seq LIMIT 1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        shown,
        Value::Array(server_search_blocks()),
        "the timeline shows the search and its results"
    );
    let usage: Value = client
        .query_one(
            "SELECT data -> 'usage' FROM holdfast.events WHERE agent_id = $1
                AND type = 'model.response' ORDER BY seq LIMIT 1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(usage["server_tool_requests"], 1, "{usage}");

    store::create_input(&client, agent, &json!("tell me more"), None)
        .await
        .unwrap();
    wait_for_events(&client, agent, "turn.completed", 2, T).await;
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[0].header("anthropic-beta"),
        None,
        "no beta without web fetch"
    );
    let history = &requests[1].body["messages"];
    assert_eq!(history[1]["role"], "assistant");
    assert_eq!(
        history[1]["content"],
        Value::Array(server_search_blocks()),
        "sent back unchanged"
    );
}

/// The config's Anthropic server tools as `tools` entries of the request,
/// in Anthropic's documented shapes.
fn server_tool_config() -> Value {
    json!([
        {"type": "custom", "name": "lookup"},
        {"type": "anthropic_web_search", "max_uses": 2, "allowed_domains": ["docs.example"],
         "user_location": {"type": "approximate", "city": "Bern", "country": "CH", "timezone": "Europe/Zurich"}},
        {"type": "anthropic_web_fetch", "citations": {"enabled": true}, "max_content_tokens": 5000}
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn anthropic_server_tools_from_the_config_are_sent_as_documented_and_a_paused_turn_goes_on() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    fake.push(Reply::anthropic_blocks(server_search_blocks()).stop_reason("pause_turn"));
    fake.push(Reply::text("Done searching."));
    let _worker = spawn_worker("w-server-tool-config", &db.config, &fake, &[]);
    // Without prompt caching, so the wire body is exactly the saved history.
    let config = json!({"model": {"provider": "anthropic", "name": "claude-test", "cache": false},
                        "tools": server_tool_config()});
    let agent = allowed_agent(&client, &config).await;
    store::create_input(&client, agent, &json!("find the docs"), None)
        .await
        .unwrap();
    wait_for_events(&client, agent, "turn.completed", 1, T).await;

    let requests = fake.requests();
    assert_eq!(requests.len(), 2, "the paused turn took one more call");
    for request in &requests {
        assert_eq!(
            request.body["tools"],
            json!([
                {"name": "lookup", "description": "", "input_schema": {"type": "object"}},
                {"type": "web_search_20250305", "name": "web_search", "max_uses": 2,
                 "allowed_domains": ["docs.example"],
                 "user_location": {"type": "approximate", "city": "Bern", "country": "CH",
                                   "timezone": "Europe/Zurich"}},
                {"type": "web_fetch_20250910", "name": "web_fetch",
                 "citations": {"enabled": true}, "max_content_tokens": 5000}
            ])
        );
        assert_eq!(
            request.header("anthropic-beta"),
            Some("web-fetch-2025-09-10")
        );
    }
    // Anthropic continues a paused turn from the response sent back as the
    // last message, unchanged.
    let history = requests[1].body["messages"].as_array().unwrap().clone();
    assert_eq!(history.len(), 2, "{history:?}");
    assert_eq!(history[1]["role"], "assistant");
    assert_eq!(history[1]["content"], Value::Array(server_search_blocks()));

    assert_eq!(
        event_types(&client, agent).await,
        [
            "input.received",
            "turn.started",
            "model.response",
            "model.response",
            "turn.completed"
        ],
        "one turn, two responses, completed once"
    );
    let tool_calls: i64 = client
        .query_one(
            "SELECT count(*) FROM holdfast.tool_calls WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        tool_calls, 0,
        "Anthropic ran the server tools; nothing ran here"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_turn_paused_again_and_again_stops_at_the_step_limit() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    fake.set_default(Reply::anthropic_blocks(server_search_blocks()).stop_reason("pause_turn"));
    let _worker = spawn_worker("w-pause-limit", &db.config, &fake, &[]);
    let config = json!({"model": {"provider": "anthropic", "name": "claude-test"},
                        "tools": [{"type": "anthropic_web_search"}],
                        "limits": {"max_model_steps_per_turn": 2}});
    let agent = allowed_agent(&client, &config).await;
    store::create_input(&client, agent, &json!("search forever"), None)
        .await
        .unwrap();
    wait_for_events(&client, agent, "turn.failed", 1, T).await;
    assert_eq!(fake.request_count(), 2, "no call past the limit");
    let error = &last_event_data(&client, agent, "turn.failed").await["error"];
    assert_eq!(error["type"], "limit_exceeded", "{error}");
    assert_eq!(error["limit"], "max_model_steps_per_turn", "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn server_tools_are_off_until_the_operator_allows_them_per_project_and_their_searches_are_billed(
) {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let api = holdfast_tests::api_server::ApiServer::start(&db).await;
    let created = store::create_api_key(&client, &format!("p{}", uuid::Uuid::new_v4().simple()))
        .await
        .unwrap();
    let project_name: String = client
        .query_one(
            "SELECT name FROM holdfast.projects WHERE id = $1",
            &[&created.project_id],
        )
        .await
        .unwrap()
        .get(0);
    let config = json!({"model": {"provider": "anthropic", "name": "claude-test"},
                        "tools": [{"type": "custom", "name": "lookup"},
                                  {"type": "anthropic_web_search", "max_uses": 2}]});
    let post = || {
        holdfast_tests::api_server::call(
            &api,
            reqwest::Method::POST,
            "/v1/agents",
            &created.key,
            Some(config.clone()),
        )
    };
    let (status, body) = post().await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["type"], "server_tools_not_allowed", "{body}");
    assert_eq!(body["error"]["field"], "tools[1]", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("holdfast projects allow-server-tools"),
        "{body}"
    );

    let holdfast = |verb: &str| {
        let output = std::process::Command::new(holdfast_tests::process::holdfast_bin())
            .args(["projects", verb, &project_name])
            .env("HOLDFAST_DATABASE_URL", db.url())
            .env("HOLDFAST_LOG", "warn")
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
    };
    holdfast("allow-server-tools");
    let (status, agent) = post().await;
    assert_eq!(status, 201, "{agent}");
    let agent: uuid::Uuid = agent["id"].as_str().unwrap().parse().unwrap();

    // One search, on a model with no token price: the step costs the search.
    let fake = FakeProvider::start().await;
    fake.push(Reply::anthropic_blocks(server_search_blocks()));
    let _worker = spawn_worker("w-server-tool-billing", &db.config, &fake, &[]);
    store::create_input(&client, agent, &json!("search"), None)
        .await
        .unwrap();
    wait_for_events(&client, agent, "turn.completed", 1, T).await;
    let usage = &last_event_data(&client, agent, "model.response").await["usage"];
    assert_eq!(usage["web_search_requests"], 1, "{usage}");
    let cost: String = client
        .query_one(
            "SELECT (usage).cost_usd::text FROM holdfast.agents WHERE id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        cost.parse::<f64>().unwrap(),
        0.01,
        "one search at $10 per 1,000"
    );

    // Withdrawn: the agent's next model call fails its turn, naming why.
    holdfast("deny-server-tools");
    store::create_input(&client, agent, &json!("search again"), None)
        .await
        .unwrap();
    wait_for_events(&client, agent, "turn.failed", 1, T).await;
    let error = &last_event_data(&client, agent, "turn.failed").await["error"];
    assert!(
        error["message"]
            .as_str()
            .unwrap_or_default()
            .contains("server_tools_not_allowed"),
        "{error}"
    );
    assert_eq!(fake.request_count(), 1, "no call after the withdrawal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn server_tool_requests_are_counted_in_every_usage_view() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let api = holdfast_tests::api_server::ApiServer::start(&db).await;
    let created = store::create_api_key(&client, &format!("p{}", uuid::Uuid::new_v4().simple()))
        .await
        .unwrap();
    store::set_project_server_tools(
        &client,
        &client
            .query_one(
                "SELECT name FROM holdfast.projects WHERE id = $1",
                &[&created.project_id],
            )
            .await
            .unwrap()
            .get::<_, String>(0),
        true,
    )
    .await
    .unwrap();
    let config = json!({"model": {"provider": "anthropic", "name": "claude-test"},
                        "tools": [{"type": "anthropic_web_search"}, {"type": "anthropic_web_fetch"}]});
    let agent = store::create_agent(&client, created.project_id, &config)
        .await
        .unwrap();

    // Two searches and a fetch in the first call, one search in the second.
    let fetch = [
        json!({"type": "server_tool_use", "id": "srvtoolu_01Fetch", "name": "web_fetch",
               "input": {"url": "https://docs.example/durable-agents"}}),
        json!({"type": "web_fetch_tool_result", "tool_use_id": "srvtoolu_01Fetch",
               "content": {"type": "web_fetch_result", "url": "https://docs.example/durable-agents",
                           "content": {"type": "document",
                                       "source": {"type": "text", "media_type": "text/plain",
                                                  "data": "Every step is saved."}}}}),
    ];
    let mut first = server_search_blocks();
    first.extend(
        server_search_blocks()
            .into_iter()
            .skip(1)
            .take(2)
            .map(|mut b| {
                for key in ["id", "tool_use_id"] {
                    if b.get(key).is_some() {
                        b[key] = json!("srvtoolu_02Second");
                    }
                }
                b
            }),
    );
    first.extend(fetch);
    let fake = FakeProvider::start().await;
    fake.push(Reply::anthropic_blocks(first).stop_reason("pause_turn"));
    fake.push(Reply::anthropic_blocks(server_search_blocks()));
    let _worker = spawn_worker("w-server-tool-counts", &db.config, &fake, &[]);
    store::create_input(&client, agent, &json!("search and read"), None)
        .await
        .unwrap();
    wait_for_events(&client, agent, "turn.completed", 1, T).await;

    let counts = |usage: &Value| {
        (
            usage["server_tool_requests"].as_i64(),
            usage["web_search_requests"].as_i64(),
        )
    };
    let expected = (Some(4), Some(3));
    let get = |path: String| {
        let (api, key) = (&api, &created.key);
        async move {
            let (status, body) =
                holdfast_tests::api_server::call(api, reqwest::Method::GET, &path, key, None).await;
            assert_eq!(status, 200, "{path}: {body}");
            body
        }
    };
    let agent_usage = get(format!("/v1/agents/{agent}/usage")).await;
    assert_eq!(counts(&agent_usage["usage"]), expected, "{agent_usage}");
    assert_eq!(
        counts(&agent_usage["turns"][0]["usage"]),
        expected,
        "{agent_usage}"
    );
    let view = get(format!("/v1/agents/{agent}")).await;
    assert_eq!(counts(&view["last_turn"]["usage"]), expected, "{view}");
    let project = get("/v1/usage".to_owned()).await;
    assert_eq!(counts(&project["usage"]), expected, "{project}");
    assert_eq!(counts(&project["days"][0]["usage"]), expected, "{project}");
    let completed = last_event_data(&client, agent, "turn.completed").await;
    assert_eq!(counts(&completed["usage"]), expected, "{completed}");
    assert_eq!(
        agent_usage["usage"]["cost_usd"].as_f64(),
        Some(0.03),
        "three searches at $10 per 1,000; fetches cost only tokens"
    );
}
