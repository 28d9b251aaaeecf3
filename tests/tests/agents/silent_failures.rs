//! Failures a user must know about reach the timeline or the answer, not
//! only a log line: a tool server the worker cannot use is a
//! `tool.unavailable` event and a line of the model's system prompt (so is
//! each tool of a server that the model cannot be offered), an MCP header
//! outside the safe set is refused with the field named, an image URL the
//! egress policy refuses at use is a `content.left_out` event, and a
//! database error's text carries what Postgres said.

use std::time::Duration;

use holdfast_db::store;
use holdfast_fakes::{FakeProvider, Reply};
use holdfast_tests::api_server::{call, project_key, ApiServer};
use holdfast_tests::mcp_server::McpTestServer;
use holdfast_tests::scenario::{agent_with_config, spawn_worker, wait_for_event};
use holdfast_tests::TestDb;
use reqwest::Method;
use serde_json::json;

const T: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_mcp_server_that_cannot_be_used_is_on_the_timeline_and_in_the_system_prompt() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    let mcp = McpTestServer::start().await;
    fake.push(Reply::text("I have no metadata tools right now."));
    // The loopback test server is allowed; the metadata address never is.
    let _worker = spawn_worker(
        "w-unavailable",
        &db.config,
        &fake,
        &[("HOLDFAST_EGRESS_ALLOW", "mcp=127.0.0.1")],
    );
    let config = json!({"model": {"provider": "anthropic", "name": "claude-test"},
        "system": "Be brief.",
        "tools": [{"type": "mcp", "name": "calc", "url": mcp.url},
                  {"type": "mcp", "name": "meta", "url": "http://169.254.169.254/mcp"}]});
    // Through SQL, past the API's check: what the worker does is tested.
    let agent = agent_with_config(&client, &config).await;
    store::create_input(&client, agent, &json!("what can you do?"), None)
        .await
        .unwrap();
    wait_for_event(&client, agent, "turn.completed", T).await;

    let rows = client
        .query(
            "SELECT data FROM holdfast.events WHERE agent_id = $1 AND type = 'tool.unavailable'",
            &[&agent],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 1, "one event for the one refused server");
    let data: serde_json::Value = rows[0].get(0);
    assert_eq!(data["server"], "meta", "{data}");
    let reason = data["reason"].as_str().unwrap();
    assert!(
        reason.contains("egress refused") && reason.contains("169.254.169.254"),
        "{reason}"
    );

    let request = &fake.requests()[0].body;
    let system = request["system"].to_string();
    assert!(system.contains("Be brief."), "{system}");
    assert!(
        system.contains("meta__*") && system.contains("egress refused"),
        "the model is told which tools it lacks and why: {system}"
    );
    let offered: Vec<String> = request["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        offered.iter().any(|n| n.starts_with("calc__")),
        "{offered:?}"
    );
    assert!(
        !offered.iter().any(|n| n.starts_with("meta__")),
        "{offered:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mcp_tools_the_worker_cannot_offer_are_on_the_timeline_and_in_the_system_prompt() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    let mcp = McpTestServer::start().await;
    // Valid for MCP, not for a model provider's tool names.
    mcp.offer_tool("weather.today");
    fake.push(Reply::text("Some tools are missing."));
    let _worker = spawn_worker(
        "w-left-out",
        &db.config,
        &fake,
        &[("HOLDFAST_EGRESS_ALLOW", "mcp=127.0.0.1")],
    );
    // Through SQL, past the API's header check: a header outside the safe
    // set makes its server unusable rather than silently dropped.
    let config = json!({"model": {"provider": "anthropic", "name": "claude-test"},
        "tools": [{"type": "mcp", "name": "calc", "url": mcp.url},
                  {"type": "mcp", "name": "meta", "url": mcp.url,
                   "headers": {"Authorization": "Bearer t", "Metadata-Flavor": "Google"}}]});
    let agent = agent_with_config(&client, &config).await;
    store::create_input(&client, agent, &json!("what can you do?"), None)
        .await
        .unwrap();
    wait_for_event(&client, agent, "turn.completed", T).await;

    let events: Vec<serde_json::Value> = client
        .query(
            "SELECT data FROM holdfast.events WHERE agent_id = $1 AND type = 'tool.unavailable'
              ORDER BY seq",
            &[&agent],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(
        (&events[0]["server"], &events[0]["tool"]),
        (&json!("calc"), &json!("weather.today")),
        "{events:?}"
    );
    let reason = events[0]["reason"].as_str().unwrap();
    assert!(reason.contains("not a valid tool name"), "{reason}");
    assert_eq!(events[1]["server"], "meta", "{events:?}");
    assert!(
        events[1].get("tool").is_none(),
        "the whole server: {events:?}"
    );
    let reason = events[1]["reason"].as_str().unwrap();
    assert!(reason.contains("Metadata-Flavor"), "{reason}");
    assert_eq!(
        mcp.header_values("metadata-flavor"),
        Vec::<String>::new(),
        "nothing sent with the refused header"
    );

    let request = &fake.requests()[0].body;
    let system = request["system"].to_string();
    assert!(
        system.contains("weather.today") && system.contains("not a valid tool name"),
        "{system}"
    );
    assert!(
        system.contains("meta__*") && system.contains("Metadata-Flavor"),
        "{system}"
    );
    let offered: Vec<&str> = request["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(offered.contains(&"calc__increment"), "{offered:?}");
    assert!(
        !offered
            .iter()
            .any(|n| n.starts_with("meta__") || n.contains('.')),
        "{offered:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mcp_headers_outside_the_safe_set_are_a_422_naming_the_header() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let api = ApiServer::start(&db).await;
    let (_, key) = project_key(&client).await;
    let mcp = |headers: serde_json::Value| json!({"type": "mcp", "name": "calc", "url": "https://tools.example/mcp", "headers": headers});
    let config = |tools: serde_json::Value| json!({"model": {"provider": "anthropic", "name": "claude-test"}, "tools": tools});
    let (status, body) = call(
        &api,
        Method::POST,
        "/v1/agents",
        &key,
        Some(config(json!([mcp(json!({"Authorization": "Bearer t"}))]))),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let agent = body["id"].as_str().unwrap().to_owned();
    let before = body["config"].clone();

    for (header, tools, field) in [
        (
            "Metadata-Flavor",
            json!([mcp(json!({"Metadata-Flavor": "Google"}))]),
            "tools[0].headers.Metadata-Flavor",
        ),
        (
            "Host",
            json!([{"type": "web_fetch"}, mcp(json!({"Host": "internal"}))]),
            "tools[1].headers.Host",
        ),
        (
            "X-Forwarded-For",
            json!([{"type": "spawn_subagent", "config": config(json!([
                mcp(json!({"X-Forwarded-For": "10.0.0.1"}))]))}]),
            "tools[0].config.tools[0].headers.X-Forwarded-For",
        ),
    ] {
        let (status, body) = call(
            &api,
            Method::POST,
            "/v1/agents",
            &key,
            Some(config(tools.clone())),
        )
        .await;
        assert_eq!(status, 422, "create with {header}: {body}");
        assert_eq!(body["error"]["type"], "egress_refused", "{body}");
        assert_eq!(body["error"]["field"], field, "{body}");
        let (status, body) = call(
            &api,
            Method::PATCH,
            &format!("/v1/agents/{agent}"),
            &key,
            Some(json!({"tools": tools})),
        )
        .await;
        assert_eq!(status, 422, "PATCH with {header}: {body}");
        assert_eq!(body["error"]["field"], field, "{body}");
    }
    let (_, after) = call(
        &api,
        Method::GET,
        &format!("/v1/agents/{agent}"),
        &key,
        None,
    )
    .await;
    assert_eq!(after["config"], before, "a refused PATCH changes nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_image_url_refused_at_use_is_on_the_timeline_and_left_out_saying_why() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    fake.push(Reply::text("I cannot see that image."));
    let _worker = spawn_worker("w-content-left-out", &db.config, &fake, &[]);
    let config = json!({"model": {"provider": "anthropic", "name": "claude-test"}});
    let agent = agent_with_config(&client, &config).await;
    // Through SQL, past the API's check at input time: the check at use is
    // what is tested (a name may resolve elsewhere by then).
    let url = "http://localhost:9/cat.png";
    store::create_input(
        &client,
        agent,
        &json!([{"type": "text", "text": "what is this?"},
                {"type": "image", "source": {"type": "url", "url": url}}]),
        None,
    )
    .await
    .unwrap();
    wait_for_event(&client, agent, "turn.completed", T).await;

    let events: Vec<serde_json::Value> = client
        .query(
            "SELECT data FROM holdfast.events WHERE agent_id = $1 AND type = 'content.left_out'",
            &[&agent],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["url"], url, "{events:?}");
    let reason = events[0]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("egress refused: localhost resolves to "),
        "{reason}"
    );
    let sent = fake.requests()[0].body["messages"][0]["content"].clone();
    assert_eq!(sent[1]["type"], "text", "{sent}");
    assert!(
        sent[1]["text"]
            .as_str()
            .unwrap()
            .starts_with("[image left out: egress refused"),
        "{sent}"
    );
    holdfast_tests::event_schemas::assert_saved_events_match(&client).await;
}

#[tokio::test]
async fn a_database_error_says_what_postgres_said() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let error = client
        .batch_execute(
            "DO $$ BEGIN RAISE EXCEPTION 'the claim was refused' \
               USING ERRCODE = '55P03', DETAIL = 'lock held by pid 42', \
                     HINT = 'retry after the holder commits'; END $$",
        )
        .await
        .unwrap_err();
    let text = holdfast_db::Error::from(error).to_string();
    for part in [
        "database: ",
        "ERROR 55P03: the claim was refused",
        "detail: lock held by pid 42",
        "hint: retry after the holder commits",
    ] {
        assert!(text.contains(part), "{part:?} missing from {text:?}");
    }
    assert_ne!(text, "database: db error");
}
