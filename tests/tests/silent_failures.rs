//! Failures a user must know about reach the timeline or the answer, not
//! only a log line: a tool server the worker cannot use is a
//! `tool.unavailable` event and a line of the model's system prompt, and a
//! database error's text carries what Postgres said.

use std::time::Duration;

use holdfast_engine::store;
use holdfast_fakes::{FakeProvider, Reply};
use holdfast_tests::mcp_server::McpTestServer;
use holdfast_tests::scenario::{agent_with_config, spawn_worker, wait_for_event};
use holdfast_tests::TestDb;
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
    let text = holdfast_engine::Error::from(error).to_string();
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
