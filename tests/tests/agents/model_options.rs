//! Model options end to end, through real worker processes and the fake
//! provider speaking the Anthropic Messages API: extended thinking (signed
//! thinking blocks kept and sent back unchanged, thinking streamed live as
//! its own delta kind) and prompt caching (breakpoints where the API
//! documents them, cache reads and writes saved in the usage).

use std::time::Duration;

use holdfast_db::store;
use holdfast_fakes::{FakeProvider, Reply};
use holdfast_tests::scenario::{
    agent_with_config, answer_waiting_call, spawn_worker, streamed_deltas, wait_for_events,
};
use holdfast_tests::TestDb;
use serde_json::{json, Value};
use uuid::Uuid;

const T: Duration = Duration::from_secs(30);

fn thinking_config(tools: Value) -> Value {
    json!({"model": {"provider": "anthropic", "name": "claude-test", "max_tokens": 8192,
                     "thinking": {"type": "enabled", "budget_tokens": 2048}},
           "tools": tools})
}

/// What a thinking model answers before calling a tool, in the Messages
/// API's block shapes: its thinking with the signature, a block of thinking
/// the safety systems encrypted, and the call.
fn thinking_then_call() -> Vec<Value> {
    vec![
        json!({"type": "thinking",
               "thinking": "The user wants the order status. I should look it up first.",
               "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds+fMqAnm2pKuPRIMqA3a9nrBdBa7u0bwGjAhzQdQFRtz/sExAWjbWkiH5Q=="}),
        json!({"type": "redacted_thinking",
               "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4mPnZ5sQ7vB5URj"}),
        json!({"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9",
               "name": "lookup", "input": {"order": "A-1042"}}),
    ]
}

async fn assistant_messages(client: &tokio_postgres::Client, agent: Uuid) -> Vec<Value> {
    client
        .query(
            "SELECT content FROM holdfast.messages WHERE agent_id = $1 AND role = 'assistant'
              ORDER BY seq",
            &[&agent],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tool_use_turn_with_thinking_sends_each_signed_block_back_unchanged() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    fake.push(Reply::anthropic_blocks(thinking_then_call()));
    fake.push(Reply::text("Order A-1042 shipped yesterday."));
    let _worker = spawn_worker("w-thinking", &db.config, &fake, &[]);
    let agent = agent_with_config(
        &client,
        &thinking_config(json!([{"type": "custom", "name": "lookup"}])),
    )
    .await;
    store::create_input(&client, agent, &json!("where is my order A-1042?"), None)
        .await
        .unwrap();

    answer_waiting_call(&client, agent, json!({"status": "shipped"})).await;
    wait_for_events(&client, agent, "turn.completed", 1, T).await;

    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(
            request.body["thinking"],
            json!({"type": "enabled", "budget_tokens": 2048})
        );
        assert_eq!(request.body["max_tokens"], 8192);
    }
    assert_eq!(
        assistant_messages(&client, agent).await[0],
        Value::Array(thinking_then_call()),
        "saved with their signatures, in order"
    );
    let history = &requests[1].body["messages"];
    assert_eq!(history[1]["role"], "assistant");
    assert_eq!(
        history[1]["content"],
        Value::Array(thinking_then_call()),
        "the thinking blocks go back unchanged before their tool_use"
    );
    assert_eq!(
        history[2]["content"][0]["tool_use_id"],
        "toolu_01A09q90qw90lq917835lq9"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thinking_streams_live_as_thinking_deltas_apart_from_the_answer_text() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    let thinking = "Two primes that sum to ten: three and seven, or five and five.";
    let answer = "3 + 7 and 5 + 5 both make ten.";
    fake.push(
        Reply::anthropic_blocks(vec![
            json!({"type": "thinking", "thinking": thinking, "signature": "EqQBCgIYAhIMsig"}),
            json!({"type": "text", "text": answer}),
        ])
        .trickle(Duration::from_millis(20)),
    );
    let mut session = holdfast_db::connect::listen(&db.config, &["holdfast_stream"])
        .await
        .unwrap();
    let _worker = spawn_worker("w-thinking-deltas", &db.config, &fake, &[]);
    let agent = agent_with_config(&client, &thinking_config(json!([]))).await;
    store::create_input(&client, agent, &json!("which primes sum to ten?"), None)
        .await
        .unwrap();
    wait_for_events(&client, agent, "model.response", 1, T).await;

    // The publisher sends every delta before the response is saved.
    let (streamed_thinking, streamed_text, kinds) = streamed_deltas(&mut session, agent).await;
    assert_eq!(streamed_thinking, thinking);
    assert_eq!(streamed_text, answer);
    assert_eq!(kinds, ["thinking", "text"], "in the order they streamed");
    let saved = assistant_messages(&client, agent).await;
    assert_eq!(
        saved[0][0]["thinking"], thinking,
        "the saved block is whole"
    );
    assert_eq!(saved[0][0]["signature"], "EqQBCgIYAhIMsig");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn prompt_caching_marks_the_tools_the_system_and_the_latest_message_and_saves_cache_usage() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    fake.push(
        Reply::tool_calls(vec![("lookup", json!({"order": "A-7"}))])
            .usage(3000, 20)
            .cache_tokens(0, 2500),
    );
    fake.push(
        Reply::text("It shipped.")
            .usage(3100, 10)
            .cache_tokens(2500, 550),
    );
    fake.push(Reply::text("Uncached."));
    let _worker = spawn_worker("w-cache", &db.config, &fake, &[]);
    let tools = json!([{"type": "custom", "name": "lookup"},
                       {"type": "custom", "name": "cancel"}]);
    let config = json!({"model": {"provider": "anthropic", "name": "claude-test"},
                        "system": "You answer order questions.", "tools": tools});
    let agent = agent_with_config(&client, &config).await;
    store::create_input(&client, agent, &json!("where is A-7?"), None)
        .await
        .unwrap();
    answer_waiting_call(&client, agent, json!("shipped")).await;
    wait_for_events(&client, agent, "turn.completed", 1, T).await;

    let ephemeral = json!({"type": "ephemeral"});
    let requests = fake.requests();
    for request in &requests {
        let body = &request.body;
        assert_eq!(body["tools"][0].get("cache_control"), None);
        assert_eq!(
            body["tools"][1]["cache_control"], ephemeral,
            "the last tool"
        );
        assert_eq!(
            body["system"],
            json!([{"type": "text", "text": "You answer order questions.",
                    "cache_control": ephemeral}])
        );
        let messages = body["messages"].as_array().unwrap();
        let marked: Vec<(usize, usize)> = messages
            .iter()
            .enumerate()
            .flat_map(|(m, message)| {
                let blocks = message["content"].as_array().unwrap();
                blocks
                    .iter()
                    .enumerate()
                    .filter(|(_, block)| block.get("cache_control").is_some())
                    .map(move |(b, _)| (m, b))
                    .collect::<Vec<_>>()
            })
            .collect();
        let last = messages.len() - 1;
        let last_block = messages[last]["content"].as_array().unwrap().len() - 1;
        assert_eq!(
            marked,
            [(last, last_block)],
            "only the latest message's last block"
        );
        assert_eq!(
            messages[last]["content"][last_block]["cache_control"],
            ephemeral
        );
    }
    assert_eq!(
        requests[1].body["messages"][2]["content"][0]["type"],
        "tool_result"
    );

    let usages: Vec<Value> = client
        .query(
            "SELECT data -> 'usage' FROM holdfast.events WHERE agent_id = $1
                AND type = 'model.response' ORDER BY seq",
            &[&agent],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(
        usages,
        [
            json!({"input_tokens": 3000, "output_tokens": 20, "cache_write_tokens": 2500}),
            json!({"input_tokens": 3100, "output_tokens": 10,
                   "cache_read_tokens": 2500, "cache_write_tokens": 550}),
        ],
        "what the provider reported, the whole prompt in input_tokens"
    );

    // Turned off: no breakpoint anywhere, the system prompt a string.
    let uncached = json!({"model": {"provider": "anthropic", "name": "claude-test", "cache": false},
                          "system": "You answer order questions.", "tools": tools});
    let agent = agent_with_config(&client, &uncached).await;
    store::create_input(&client, agent, &json!("hi"), None)
        .await
        .unwrap();
    wait_for_events(&client, agent, "turn.completed", 1, T).await;
    let body = &fake.requests()[2].body;
    assert!(!body.to_string().contains("cache_control"), "{body}");
    assert_eq!(body["system"], "You answer order questions.");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_forced_tool_choice_applies_to_the_first_call_of_a_turn_and_auto_afterwards() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    let _worker = spawn_worker("w-tool-choice", &db.config, &fake, &[]);
    let cases = [
        (
            json!({"provider": "anthropic", "name": "claude-test", "parallel_tool_calls": false,
                   "tool_choice": {"type": "tool", "name": "lookup"}}),
            json!({"type": "tool", "name": "lookup", "disable_parallel_tool_use": true}),
            json!({"type": "auto", "disable_parallel_tool_use": true}),
        ),
        (
            json!({"provider": "openai", "name": "gpt-test", "tool_choice": {"type": "any"}}),
            json!("required"),
            json!("auto"),
        ),
        (
            json!({"provider": "openai_responses", "name": "gpt-test",
                   "tool_choice": {"type": "tool", "name": "lookup"}}),
            json!({"type": "function", "name": "lookup"}),
            json!("auto"),
        ),
    ];
    for (model, forced, afterwards) in cases {
        let before = fake.request_count();
        fake.push(Reply::tool_calls(vec![("lookup", json!({"order": "A-7"}))]));
        fake.push(Reply::text("It shipped."));
        let config = json!({"model": model, "tools": [{"type": "custom", "name": "lookup"}]});
        let agent = agent_with_config(&client, &config).await;
        store::create_input(&client, agent, &json!("where is A-7?"), None)
            .await
            .unwrap();
        answer_waiting_call(&client, agent, json!("shipped")).await;
        wait_for_events(&client, agent, "turn.completed", 1, T).await;
        let requests = fake.requests();
        assert_eq!(requests.len(), before + 2, "{model}");
        assert_eq!(
            requests[before].body["tool_choice"], forced,
            "{model}: first call"
        );
        assert_eq!(
            requests[before + 1].body["tool_choice"],
            afterwards,
            "{model}: the next call of the turn may answer"
        );
    }
}
