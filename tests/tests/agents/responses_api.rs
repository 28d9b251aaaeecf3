//! The OpenAI Responses API (`provider: "openai_responses"`) end to end,
//! through real worker processes and the fake provider speaking it: a
//! reasoning item kept whole and sent back unchanged after its tool call,
//! live deltas, usage with cached and reasoning tokens, retries, and a
//! failed response ending the turn as the other providers' failures do.

use std::time::Duration;

use holdfast_db::store;
use holdfast_fakes::{FakeProvider, Protocol, Reply};
use holdfast_tests::scenario::{
    agent_with_config, answer_waiting_call, event_types, last_event_data, spawn_worker,
    streamed_deltas, wait_for_event, wait_for_events,
};
use holdfast_tests::TestDb;
use serde_json::{json, Value};
use uuid::Uuid;

const T: Duration = Duration::from_secs(30);
const FAST_BACKOFF: [(&str, &str); 2] = [
    ("HOLDFAST_MODEL_BACKOFF_BASE", "10ms"),
    ("HOLDFAST_MODEL_BACKOFF_MAX", "50ms"),
];

fn responses_config(tools: Value) -> Value {
    json!({"model": {"provider": "openai_responses", "name": "gpt-5", "max_tokens": 2000,
                     "reasoning_effort": "low"},
           "system": "You answer order questions.",
           "tools": tools})
}

/// What a reasoning model answers before calling a tool, in the Responses
/// API's output item shapes: its reasoning (a summary, and the reasoning
/// itself encrypted, as `store: false` with `include` returns it), then the
/// call.
fn reasoning_item() -> Value {
    json!({"type": "reasoning", "id": "rs_68af3d9e6b5c8190a1b2c3d4e5f60718",
           "summary": [{"type": "summary_text",
                        "text": "The user wants an order status; look it up first."}],
           "encrypted_content": "gAAAAABor0Ge5Xo2Vm3yVQ1cmVhc29uaW5nLWlzLW9wYXF1ZS10by1ob2xkZmFzdA=="})
}

fn lookup_call() -> Value {
    json!({"type": "function_call", "id": "fc_68af3da0c1e48190b2c3d4e5f6071829",
           "call_id": "call_Qx7Vd2mB9kT4", "name": "lookup",
           "arguments": "{\"order\":\"A-1042\"}"})
}

async fn agent_asking(client: &tokio_postgres::Client, config: &Value, text: &str) -> Uuid {
    let agent = agent_with_config(client, config).await;
    store::create_input(client, agent, &json!(text), None)
        .await
        .unwrap();
    agent
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tool_use_turn_sends_its_reasoning_item_back_unchanged() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    fake.push(Reply::responses_items(vec![
        reasoning_item(),
        lookup_call(),
    ]));
    fake.push(Reply::text("Order A-1042 shipped yesterday."));
    let _worker = spawn_worker("w-responses-tools", &db.config, &fake, &[]);
    let config = responses_config(json!([{"type": "custom", "name": "lookup"}]));
    let agent = agent_asking(&client, &config, "where is my order A-1042?").await;

    answer_waiting_call(&client, agent, json!({"status": "shipped"})).await;
    wait_for_events(&client, agent, "turn.completed", 1, T).await;

    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(request.protocol, Protocol::OpenaiResponses);
        let body = &request.body;
        assert_eq!(body["model"], "gpt-5");
        assert_eq!(body["instructions"], "You answer order questions.");
        assert_eq!(body["stream"], true);
        assert_eq!(body["store"], false);
        assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
        assert_eq!(
            body["reasoning"],
            json!({"effort": "low", "summary": "auto"})
        );
        assert_eq!(body["max_output_tokens"], 2000);
        assert_eq!(body["tools"][0]["type"], "function");
        assert_eq!(body["tools"][0]["name"], "lookup");
        assert_eq!(body["tools"][0]["parameters"], json!({"type": "object"}));
    }
    assert_eq!(
        requests[0].body["input"],
        json!([{"type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "where is my order A-1042?"}]}])
    );
    let input = requests[1].body["input"].as_array().unwrap();
    assert_eq!(input.len(), 4, "{input:?}");
    assert_eq!(
        input[1],
        reasoning_item(),
        "the reasoning item goes back whole, encrypted content and all"
    );
    assert_eq!(
        input[2],
        json!({"type": "function_call", "call_id": "call_Qx7Vd2mB9kT4", "name": "lookup",
               "arguments": "{\"order\":\"A-1042\"}"}),
        "right after its reasoning"
    );
    assert_eq!(
        input[3],
        json!({"type": "function_call_output", "call_id": "call_Qx7Vd2mB9kT4",
               "output": "{\"status\":\"shipped\"}"})
    );
    let saved: Value = client
        .query_one(
            "SELECT content FROM holdfast.messages WHERE agent_id = $1 AND role = 'assistant'
              ORDER BY seq LIMIT 1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(saved[0], reasoning_item(), "saved whole");
    assert_eq!(saved[1]["type"], "tool_use");
    assert_eq!(saved[1]["id"], "call_Qx7Vd2mB9kT4");
    assert_eq!(saved[1]["input"], json!({"order": "A-1042"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reasoning_summaries_and_text_stream_live_as_their_own_delta_kinds() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    let summary = "Two primes that sum to ten: three and seven, or five and five.";
    let answer = "3 + 7 and 5 + 5 both make ten.";
    let mut reasoning = reasoning_item();
    reasoning["summary"][0]["text"] = json!(summary);
    fake.push(
        Reply::responses_items(vec![
            reasoning,
            json!({"type": "message", "id": "msg_68af3db2", "role": "assistant",
                   "content": [{"type": "output_text", "text": answer}]}),
        ])
        .trickle(Duration::from_millis(20)),
    );
    let mut session = holdfast_db::connect::listen(&db.config, &["holdfast_stream"])
        .await
        .unwrap();
    let _worker = spawn_worker("w-responses-deltas", &db.config, &fake, &[]);
    let agent = agent_asking(&client, &responses_config(json!([])), "which primes?").await;
    wait_for_events(&client, agent, "model.response", 1, T).await;

    // The publisher sends every delta before the response is saved.
    let (streamed_thinking, streamed_text, kinds) = streamed_deltas(&mut session, agent).await;
    assert_eq!(streamed_thinking, summary);
    assert_eq!(streamed_text, answer);
    assert_eq!(kinds, ["thinking", "text"], "in the order they streamed");
    let response = last_event_data(&client, agent, "model.response").await;
    assert_eq!(
        response["message"][1],
        json!({"type": "text", "text": answer})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn usage_is_saved_with_cached_and_reasoning_tokens() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    fake.push(
        Reply::text("Done.")
            .usage(5000, 700)
            .cache_tokens(4096, 0)
            .reasoning_tokens(512),
    );
    let _worker = spawn_worker("w-responses-usage", &db.config, &fake, &[]);
    let agent = agent_asking(&client, &responses_config(json!([])), "hi").await;
    wait_for_events(&client, agent, "turn.completed", 1, T).await;
    let response = last_event_data(&client, agent, "model.response").await;
    assert_eq!(
        response["usage"],
        json!({"input_tokens": 5000, "output_tokens": 700,
               "cache_read_tokens": 4096, "reasoning_tokens": 512})
    );
    assert_eq!(response["stop_reason"], "end_turn");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_429_is_retried_and_the_turn_ends_with_one_response() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    fake.push(Reply::status(429).retry_after_secs(0));
    fake.push(Reply::text("Recovered."));
    let _worker = spawn_worker("w-responses-429", &db.config, &fake, &FAST_BACKOFF);
    let agent = agent_asking(&client, &responses_config(json!([])), "hi").await;
    wait_for_event(&client, agent, "turn.completed", T).await;
    assert_eq!(
        event_types(&client, agent).await,
        [
            "input.received",
            "turn.started",
            "model.retry",
            "model.response",
            "turn.completed"
        ]
    );
    let retry = last_event_data(&client, agent, "model.retry").await;
    assert_eq!(retry["error"]["type"], "rate_limit_error", "{retry}");
    assert_eq!(fake.request_count(), 2);
    assert!(fake
        .requests()
        .iter()
        .all(|r| r.protocol == Protocol::OpenaiResponses));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_response_is_retried_or_ends_the_turn_by_its_code() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    let _worker = spawn_worker("w-responses-failed", &db.config, &fake, &FAST_BACKOFF);

    // A server error mid-response clears by trying again.
    fake.push(Reply::response_failed(
        "server_error",
        "The server had an error processing your request.",
    ));
    fake.push(Reply::text("Recovered."));
    let agent = agent_asking(&client, &responses_config(json!([])), "hi").await;
    wait_for_event(&client, agent, "turn.completed", T).await;
    assert_eq!(
        event_types(&client, agent).await,
        [
            "input.received",
            "turn.started",
            "model.retry",
            "model.response",
            "turn.completed"
        ]
    );

    // A prompt the model refuses does not: the turn fails at once, as an
    // invalid request does with every provider.
    let before = fake.request_count();
    fake.push(Reply::response_failed(
        "invalid_prompt",
        "Invalid prompt: your prompt was flagged as potentially violating our usage policy.",
    ));
    let agent = agent_asking(&client, &responses_config(json!([])), "hi").await;
    wait_for_event(&client, agent, "turn.failed", T).await;
    assert_eq!(
        event_types(&client, agent).await,
        ["input.received", "turn.started", "turn.failed"]
    );
    let failed = last_event_data(&client, agent, "turn.failed").await;
    assert_eq!(failed["error"]["type"], "invalid_request_error", "{failed}");
    assert!(
        failed["error"]["message"]
            .as_str()
            .unwrap()
            .contains("invalid_prompt"),
        "{failed}"
    );
    assert_eq!(fake.request_count(), before + 1, "no retry");
}
