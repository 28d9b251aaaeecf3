//! Provider server tools kept whole: an Anthropic response with
//! `server_tool_use`, `web_search_tool_result` and cited text, streamed in
//! the API's SSE format, is saved in the model step as sent and sent back
//! unchanged in the next request.

use std::time::Duration;

use holdfast_engine::store;
use holdfast_fakes::{FakeProvider, Reply};
use holdfast_tests::scenario::{spawn_worker, start_turn, wait_for_events};
use holdfast_tests::TestDb;
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(30);

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
    let history = &requests[1].body["messages"];
    assert_eq!(history[1]["role"], "assistant");
    assert_eq!(
        history[1]["content"],
        Value::Array(server_search_blocks()),
        "sent back unchanged"
    );
}
