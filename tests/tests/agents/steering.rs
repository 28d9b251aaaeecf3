//! Steering modes per input (`steer`, `queue`, `interrupt`): real `holdfast
//! worker` processes, the fake model provider over real sockets (hanging
//! and held replies), real Postgres, and the API's input routes over HTTP.

use std::time::Duration;

use chrono::{DateTime, Utc};
use holdfast_db::store;
use holdfast_fakes::{FakeProvider, Reply};
use holdfast_tests::api_server::{project_key, ApiServer};
use holdfast_tests::mcp_server::McpTestServer;
use holdfast_tests::process::HoldfastProcess;
use holdfast_tests::scenario::{
    agent_with_config, agent_with_input, count_events, event_types, last_event_data, spawn_worker,
    wait_for_event, wait_for_events,
};
use holdfast_tests::{new_agent, wait_until, MaintenanceLoop, TestDb};
use holdfast_wire::domain::{InputMode, InputStatus, WaitingInputs};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tokio_postgres::Client;
use uuid::Uuid;

const T: Duration = Duration::from_secs(30);
const ALLOW_LOOPBACK: (&str, &str) = ("HOLDFAST_EGRESS_ALLOW", "mcp=127.0.0.1");
/// Renewals every 200 ms, so a test can wait for two of them (the fallback
/// that reports interrupt inputs) without waiting long.
const FAST_RENEW: (&str, &str) = ("HOLDFAST_LEASE_RENEW_INTERVAL", "200ms");

async fn send(client: &Client, agent: Uuid, text: &str, mode: InputMode) -> Uuid {
    store::create_traced_input(client, agent, &json!(text), None, None, mode)
        .await
        .unwrap()
        .input_id
}

/// The agent's history: (role, text of its first block, input id) in order.
async fn history(client: &Client, agent: Uuid) -> Vec<(String, String, Option<Uuid>)> {
    client
        .query(
            "SELECT role, coalesce(content -> 0 ->> 'text', content -> 0 ->> 'type'), input_id \
               FROM holdfast.messages WHERE agent_id = $1 ORDER BY seq",
            &[&agent],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

/// The user texts of a request the fake received, in order.
fn user_texts(request: &Value) -> Vec<String> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .flat_map(|m| match &m["content"] {
            Value::String(text) => vec![text.clone()],
            Value::Array(blocks) => blocks
                .iter()
                .filter_map(|b| b["text"].as_str().map(str::to_owned))
                .collect(),
            _ => vec![],
        })
        .collect()
}

fn user_inputs(history: &[(String, String, Option<Uuid>)]) -> Vec<Uuid> {
    history.iter().filter_map(|(_, _, input)| *input).collect()
}

async fn lease_expiry(client: &Client, agent: Uuid) -> Option<DateTime<Utc>> {
    client
        .query_one(
            "SELECT lease_expires_at FROM holdfast.agents WHERE id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0)
}

/// Wait for two lease renewals of `agent`: the worker has then read the
/// first one's answer (which reports the newest interrupt input) before it
/// sent the second, whatever became of the notification.
async fn wait_for_two_renewals(client: &Client, agent: Uuid) {
    for _ in 0..2 {
        let before = lease_expiry(client, agent).await;
        wait_until(T, "a lease renewal", || async {
            lease_expiry(client, agent).await != before
        })
        .await;
    }
}

fn worker(name: &str, db: &TestDb, fake: &FakeProvider, extra: &[(&str, &str)]) -> HoldfastProcess {
    spawn_worker(name, &db.config, fake, extra)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_queued_input_is_not_in_the_turn_it_waits_on_and_opens_the_next() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    fake.push(Reply::text("First answer.").hold_after_deltas(1));
    fake.push(Reply::text("Second answer."));
    let _w = worker("w-queue", &db, &fake, &[]);
    let agent = agent_with_input(&client, "one").await;
    fake.wait_until_held(1).await;

    let queued = send(&client, agent, "two", InputMode::Queue).await;
    let steer = send(&client, agent, "steered", InputMode::Steer).await;
    let listed = store::list_inputs(&client, agent, WaitingInputs::Queued)
        .await
        .unwrap();
    assert_eq!(listed.iter().map(|i| i.id).collect::<Vec<_>>(), [queued]);
    fake.release();
    wait_for_events(&client, agent, "turn.completed", 2, T).await;

    // Turn 1 ran "one"; its commit saw "steered" arrive during the call and
    // opened turn 2 for it, admitting the queued "two" with it; nothing
    // else was waiting after that.
    let requests = fake.requests();
    assert_eq!(user_texts(&requests[0].body), ["one"]);
    assert_eq!(
        user_texts(&requests[1].body),
        ["one", "two", "steered"],
        "the queued input was not part of the turn it waited on"
    );
    let history = history(&client, agent).await;
    let inputs = user_inputs(&history);
    assert_eq!(inputs.len(), 3, "each input consumed once: {history:?}");
    assert_eq!(inputs[1..], [queued, steer]);
    assert_eq!(count_events(&client, agent, "turn.started").await, 2);
    assert!(store::list_inputs(&client, agent, WaitingInputs::Queued)
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_queued_input_is_a_turn_of_its_own_in_order() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    fake.push(Reply::text("A1").hold_after_deltas(1));
    fake.push(Reply::text("A2"));
    fake.push(Reply::text("A3"));
    let _w = worker("w-queue-order", &db, &fake, &[]);
    let agent = agent_with_input(&client, "one").await;
    fake.wait_until_held(1).await;
    let two = send(&client, agent, "two", InputMode::Queue).await;
    let three = send(&client, agent, "three", InputMode::Queue).await;
    fake.release();
    wait_for_events(&client, agent, "turn.completed", 3, T).await;

    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(user_texts(&requests[1].body), ["one", "two"]);
    assert_eq!(user_texts(&requests[2].body), ["one", "two", "three"]);
    assert_eq!(
        user_inputs(&history(&client, agent).await)[1..],
        [two, three]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn queued_inputs_are_listed_and_removable_over_http_and_a_consumed_one_is_409() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let api = ApiServer::start(&db).await;
    let (project, key) = project_key(&client).await;
    let agent = new_agent(&client, project).await;
    let post = |body: Value, idem: &str| {
        api.request(Method::POST, &format!("/v1/agents/{agent}/inputs"), &key)
            .header("Idempotency-Key", idem)
            .json(&body)
            .send()
    };

    // No worker runs: the first input opens a turn that stays open.
    let first = post(json!({"content": "first"}), "k1").await.unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    let first: Value = first.json().await.unwrap();
    assert_eq!(
        (first["mode"].as_str(), first["status"].as_str()),
        (Some("steer"), Some("pending"))
    );

    let queued = post(json!({"content": "later", "mode": "queue"}), "k2")
        .await
        .unwrap();
    assert_eq!(queued.status(), StatusCode::CREATED);
    let queued: Value = queued.json().await.unwrap();
    assert_eq!(queued["status"], "queued");
    // A replay answers the same input; the same key with another mode is refused.
    let replay = post(json!({"content": "later", "mode": "queue"}), "k2")
        .await
        .unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(replay.json::<Value>().await.unwrap()["id"], queued["id"]);
    let reused = post(json!({"content": "later", "mode": "steer"}), "k2")
        .await
        .unwrap();
    assert_eq!(reused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let bad = post(json!({"content": "x", "mode": "shout"}), "k3")
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    assert_eq!(bad.json::<Value>().await.unwrap()["error"]["field"], "mode");

    let list = |status: &'static str| {
        api.request(
            Method::GET,
            &format!("/v1/agents/{agent}/inputs?status={status}"),
            &key,
        )
        .send()
    };
    let listed: Value = list("queued").await.unwrap().json().await.unwrap();
    assert_eq!(listed["inputs"].as_array().unwrap().len(), 1);
    assert_eq!(listed["inputs"][0]["id"], queued["id"]);
    let pending: Value = list("pending").await.unwrap().json().await.unwrap();
    assert_eq!(pending["inputs"][0]["id"], first["id"]);
    assert_eq!(
        list("bogus").await.unwrap().status(),
        StatusCode::BAD_REQUEST
    );

    let delete = |id: &Value, key: &str| {
        api.request(
            Method::DELETE,
            &format!("/v1/inputs/{}", id.as_str().unwrap()),
            key,
        )
        .send()
    };
    let (_, other_key) = project_key(&client).await;
    assert_eq!(
        delete(&queued["id"], &other_key).await.unwrap().status(),
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        delete(&json!(Uuid::new_v4()), &key).await.unwrap().status(),
        StatusCode::NOT_FOUND
    );
    // The client crate's calls for the same two routes.
    let sdk = api.client(&key);
    let queued_id: Uuid = queued["id"].as_str().unwrap().parse().unwrap();
    let via_client = sdk.list_inputs(agent, WaitingInputs::Queued).await.unwrap();
    assert_eq!(
        via_client.inputs.iter().map(|i| i.id).collect::<Vec<_>>(),
        [queued_id]
    );
    let removed = sdk.remove_input(queued_id).await.unwrap();
    assert_eq!(removed.status, InputStatus::Removed);
    assert_eq!(
        last_event_data(&client, agent, "input.removed").await["input_id"],
        queued["id"]
    );
    assert_eq!(
        delete(&queued["id"], &key).await.unwrap().status(),
        StatusCode::CONFLICT
    );
    // The first input is the open turn's: not queued, not removable.
    let taken = delete(&first["id"], &key).await.unwrap();
    assert_eq!(taken.status(), StatusCode::CONFLICT);
    let listed: Value = list("queued").await.unwrap().json().await.unwrap();
    assert!(listed["inputs"].as_array().unwrap().is_empty());
    let waiting: i64 = client
        .query_one(
            "SELECT pending_inputs FROM holdfast.agent_overview WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(waiting, 1, "the removed input is not waiting work");

    // Cancelling the turn makes "first" history; the removed input never
    // opens a turn: the agent is idle, and the removed input is no message.
    let cancel = api
        .request(Method::POST, &format!("/v1/agents/{agent}/cancel"), &key)
        .send()
        .await
        .unwrap();
    assert!(cancel.status().is_success(), "{}", cancel.status());
    assert_eq!(
        delete(&first["id"], &key).await.unwrap().status(),
        StatusCode::CONFLICT
    );
    let state: String = client
        .query_one("SELECT state FROM holdfast.agents WHERE id = $1", &[&agent])
        .await
        .unwrap()
        .get(0);
    assert_eq!(state, "idle");
    let history = history(&client, agent).await;
    let first_id: Uuid = first["id"].as_str().unwrap().parse().unwrap();
    assert_eq!(user_inputs(&history), [first_id]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_interrupt_during_a_hanging_model_call_aborts_it_and_the_call_again_carries_the_input() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    fake.push(Reply::hang());
    fake.push(Reply::text("Answer with both."));
    let _w = worker("w-interrupt", &db, &fake, &[]);
    let agent = agent_with_input(&client, "one").await;
    fake.wait_until_held(1).await;

    let interrupt = send(&client, agent, "change of plan", InputMode::Interrupt).await;
    fake.wait_for_aborted(1).await;
    wait_for_event(&client, agent, "turn.completed", T).await;

    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(user_texts(&requests[0].body), ["one"]);
    assert_eq!(user_texts(&requests[1].body), ["one", "change of plan"]);
    assert_eq!(
        last_event_data(&client, agent, "model.interrupted").await,
        json!({"input_ids": [interrupt]})
    );
    assert_eq!(count_events(&client, agent, "model.response").await, 1);
    let history = history(&client, agent).await;
    assert_eq!(user_inputs(&history).len(), 2);
    assert_eq!(user_inputs(&history)[1], interrupt);
    assert_eq!(history.last().unwrap().1, "Answer with both.");
    // What these turns wrote matches the OpenAPI document's event schemas.
    holdfast_tests::event_schemas::assert_saved_events_match(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_interrupt_while_a_tool_runs_does_not_cancel_the_tool_and_steers_the_next_call() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    let mcp = McpTestServer::start().await;
    mcp.hold_calls();
    fake.push(Reply::tool_calls(vec![(
        "counter__increment",
        json!({"by": 1}),
    )]));
    fake.push(Reply::text("Counted, and heard you."));
    let _w = worker("w-tool", &db, &fake, &[ALLOW_LOOPBACK, FAST_RENEW]);
    let agent = agent_with_config(
        &client,
        &json!({"model": {"provider": "anthropic", "name": "claude-test"},
                "tools": [{"type": "mcp", "name": "counter", "url": mcp.url}]}),
    )
    .await;
    send(&client, agent, "count", InputMode::Steer).await;
    mcp.wait_for_increment_calls(1).await;

    let interrupt = send(&client, agent, "also this", InputMode::Interrupt).await;
    // The worker has heard of the interrupt (notified, and reported by a
    // renewal) while the tool still runs.
    wait_for_two_renewals(&client, agent).await;
    mcp.release_calls();
    wait_for_event(&client, agent, "turn.completed", T).await;

    assert_eq!(mcp.increment_calls(), 1);
    assert_eq!(
        count_events(&client, agent, "tool_call.interrupted").await,
        0
    );
    assert_eq!(count_events(&client, agent, "model.interrupted").await, 0);
    assert_eq!(
        last_event_data(&client, agent, "tool_call.completed").await["output"],
        json!("counter is now 1")
    );
    let last = fake.last_request().unwrap();
    assert_eq!(
        user_texts(&last.body).last().map(String::as_str),
        Some("also this")
    );
    assert_eq!(user_inputs(&history(&client, agent).await)[1], interrupt);
    // What these turns wrote matches the OpenAPI document's event schemas.
    holdfast_tests::event_schemas::assert_saved_events_match(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_mid_call_with_a_queued_input_consumes_every_input_once_in_order() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    fake.push(Reply::text("PARTIAL never saved").hold_after_deltas(1));
    fake.push(Reply::text("First answer."));
    fake.push(Reply::text("Second answer."));
    let _maintenance = MaintenanceLoop::start(&db.config);
    let w1 = worker("w-kill-q1", &db, &fake, &[]);
    let agent = agent_with_input(&client, "one").await;
    fake.wait_until_held(1).await;
    let queued = send(&client, agent, "two", InputMode::Queue).await;
    w1.signal("KILL");

    let _w2 = worker("w-kill-q2", &db, &fake, &[]);
    wait_for_events(&client, agent, "turn.completed", 2, T).await;

    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(
        user_texts(&requests[1].body),
        ["one"],
        "the retried call of turn 1"
    );
    assert_eq!(user_texts(&requests[2].body), ["one", "two"]);
    let history = history(&client, agent).await;
    let texts: Vec<&str> = history.iter().map(|(_, t, _)| t.as_str()).collect();
    assert_eq!(texts, ["one", "First answer.", "two", "Second answer."]);
    assert_eq!(user_inputs(&history)[1], queued);
    assert_eq!(
        event_types(&client, agent)
            .await
            .iter()
            .filter(|t| *t == "turn.started")
            .count(),
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_mid_call_after_an_interrupt_consumes_every_input_once_in_order() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    fake.push(Reply::hang());
    fake.push(Reply::text("PARTIAL never saved").hold_after_deltas(1));
    fake.push(Reply::text("The answer."));
    let _maintenance = MaintenanceLoop::start(&db.config);
    let w1 = worker("w-kill-i1", &db, &fake, &[]);
    let agent = agent_with_input(&client, "one").await;
    fake.wait_until_held(1).await;
    let interrupt = send(&client, agent, "two", InputMode::Interrupt).await;
    // The interrupted call is made again, with "two", and is held: kill
    // the worker in the middle of it.
    fake.wait_for_aborted(1).await;
    let held = fake.held_watch();
    wait_until(T, "the call made again and held", || async {
        fake.request_count() == 2 && *held.borrow() == 1
    })
    .await;
    w1.signal("KILL");

    let _w2 = worker("w-kill-i2", &db, &fake, &[]);
    wait_for_event(&client, agent, "turn.completed", T).await;

    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(user_texts(&requests[1].body), ["one", "two"]);
    assert_eq!(user_texts(&requests[2].body), ["one", "two"]);
    let history = history(&client, agent).await;
    let texts: Vec<&str> = history.iter().map(|(_, t, _)| t.as_str()).collect();
    assert_eq!(texts, ["one", "two", "The answer."]);
    assert_eq!(user_inputs(&history)[1], interrupt);
    assert_eq!(count_events(&client, agent, "model.interrupted").await, 1);
    assert_eq!(count_events(&client, agent, "model.response").await, 1);
}
