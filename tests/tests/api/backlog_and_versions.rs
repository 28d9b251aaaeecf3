//! The backlog (`PATCH /v1/inputs/{id}`: a waiting input's mode and place)
//! and numbered agent config versions (`GET /v1/agents/{id}/versions`,
//! `"apply": "next_turn"`), over the API, real Postgres, and for versions a
//! real `holdfast worker` process and the fake model provider.

use std::time::Duration;

use holdfast_db::store::{self, ConfigApply};
use holdfast_fakes::{FakeProvider, Reply};
use holdfast_tests::api_server::{project_key, ApiServer};
use holdfast_tests::scenario::{answer_waiting_call, spawn_worker, wait_for_events};
use holdfast_tests::{new_agent, TestDb};
use holdfast_wire::domain::InputMode;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tokio_postgres::Client;
use uuid::Uuid;

const T: Duration = Duration::from_secs(30);

async fn send(client: &Client, agent: Uuid, text: &str, mode: InputMode) -> Uuid {
    store::create_traced_input(client, agent, &json!(text), None, None, mode)
        .await
        .unwrap()
        .input_id
}

async fn queued_ids(server: &ApiServer, key: &str, agent: Uuid) -> Vec<String> {
    let list: Value = server
        .request(Method::GET, &format!("/v1/agents/{agent}/inputs"), key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    list["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap().to_owned())
        .collect()
}

async fn patch_input(
    server: &ApiServer,
    key: &str,
    input: &str,
    body: Value,
) -> (StatusCode, Value) {
    let response = server
        .request(Method::PATCH, &format!("/v1/inputs/{input}"), key)
        .json(&body)
        .send()
        .await
        .unwrap();
    (response.status(), response.json().await.unwrap())
}

/// An agent in a turn (its first input opened one; no worker runs it) with
/// `n` queued inputs behind it.
async fn agent_with_backlog(client: &Client, project: Uuid, n: usize) -> (Uuid, Vec<Uuid>) {
    let agent = new_agent(client, project).await;
    send(client, agent, "first", InputMode::Steer).await;
    let mut queued = Vec::new();
    for i in 0..n {
        queued.push(send(client, agent, &format!("queued {i}"), InputMode::Queue).await);
    }
    (agent, queued)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_concurrent_moves_leave_a_permutation_of_the_same_inputs() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let (agent, queued) = agent_with_backlog(&client, project, 10).await;
    let server = ApiServer::start(&db).await;
    let before = queued_ids(&server, &key, agent).await;
    assert_eq!(before.len(), 10);

    let moves = (0..20).map(|i| {
        let input = before[(i * 7) % before.len()].clone();
        let position = (i * 3) % 12 + 1;
        let (server, key) = (&server, &key);
        async move { patch_input(server, key, &input, json!({"position": position})).await }
    });
    for (status, body) in futures::future::join_all(moves).await {
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["status"], "queued");
    }

    let after = queued_ids(&server, &key, agent).await;
    let (mut sorted_before, mut sorted_after) = (before.clone(), after.clone());
    sorted_before.sort();
    sorted_after.sort();
    assert_eq!(sorted_after, sorted_before, "the same inputs, each once");
    // The places are 1..n, one each.
    let positions: Vec<i32> = client
        .query(
            "SELECT queue_position FROM holdfast.inputs \
              WHERE agent_id = $1 AND admitted_at IS NULL ORDER BY queue_position",
            &[&agent],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(positions, (1..=10).collect::<Vec<i32>>());
    let updates: i64 = client
        .query_one(
            "SELECT count(*) FROM holdfast.events WHERE agent_id = $1 AND type = 'input.updated'",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(updates, 20);
    // The next turn takes the input now first.
    let first: Uuid = after[0].parse().unwrap();
    assert!(queued.contains(&first));
    let admitted: Option<Uuid> = client
        .query_one("SELECT holdfast.admit_queued_input($1)", &[&agent])
        .await
        .unwrap()
        .get(0);
    assert_eq!(admitted, Some(first));
}

#[tokio::test]
async fn an_input_moves_promotes_demotes_and_bad_changes_name_the_field() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let (agent, queued) = agent_with_backlog(&client, project, 3).await;
    let server = ApiServer::start(&db).await;
    let ids: Vec<String> = queued.iter().map(Uuid::to_string).collect();

    // Move the last to the front.
    let (status, body) = patch_input(&server, &key, &ids[2], json!({"position": 1})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        queued_ids(&server, &key, agent).await,
        [ids[2].clone(), ids[0].clone(), ids[1].clone()]
    );
    // Promote one: it joins the open turn; demote it again: back in the queue.
    let (status, body) = patch_input(&server, &key, &ids[0], json!({"mode": "steer"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        (body["mode"].as_str(), body["status"].as_str()),
        (Some("steer"), Some("pending"))
    );
    assert_eq!(queued_ids(&server, &key, agent).await.len(), 2);
    let (status, body) = patch_input(
        &server,
        &key,
        &ids[0],
        json!({"mode": "queue", "position": 3}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "queued");
    assert_eq!(
        queued_ids(&server, &key, agent).await,
        [ids[2].clone(), ids[1].clone(), ids[0].clone()]
    );
    let last: Value = client
        .query_one(
            "SELECT data FROM holdfast.events WHERE agent_id = $1 AND type = 'input.updated' \
              ORDER BY seq DESC LIMIT 1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        last,
        json!({"input_id": ids[0], "mode": "queue", "position": 3})
    );

    let events_before: i64 = client
        .query_one(
            "SELECT last_event_seq FROM holdfast.agents WHERE id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    for (body, status, field) in [
        (json!({"position": 0}), StatusCode::BAD_REQUEST, "position"),
        (
            json!({"mode": "interrupt"}),
            StatusCode::BAD_REQUEST,
            "mode",
        ),
        (json!({"mode": "sideways"}), StatusCode::BAD_REQUEST, "mode"),
        (json!({"colour": "red"}), StatusCode::BAD_REQUEST, "colour"),
    ] {
        let (got, error) = patch_input(&server, &key, &ids[1], body.clone()).await;
        assert_eq!(got, status, "{body}: {error}");
        assert_eq!(error["error"]["field"], field, "{body}: {error}");
    }
    // The input that opened the turn (alone, before any model call) cannot
    // go back to the queue; a removed one no longer waits.
    let opener: String = client
        .query_one(
            "SELECT id::text FROM holdfast.inputs WHERE agent_id = $1 AND admitted_at IS NOT NULL",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    let (got, _) = patch_input(&server, &key, &opener, json!({"mode": "queue"})).await;
    assert_eq!(got, StatusCode::CONFLICT);
    store::remove_input(&client, queued[1]).await.unwrap();
    let (got, _) = patch_input(&server, &key, &ids[1], json!({"position": 1})).await;
    assert_eq!(got, StatusCode::CONFLICT);
    let events_after: i64 = client
        .query_one(
            "SELECT last_event_seq FROM holdfast.agents WHERE id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        events_after,
        events_before + 1,
        "only input.removed was recorded"
    );
    // Another project's key does not see it.
    let (_, other_key) = project_key(&client).await;
    let (got, _) = patch_input(&server, &other_key, &ids[2], json!({"position": 1})).await;
    assert_eq!(got, StatusCode::NOT_FOUND);
}

/// The system prompt a request to the fake carried.
fn system_of(request: &Value) -> String {
    match &request["system"] {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks[0]["text"].as_str().unwrap_or_default().to_owned(),
        other => panic!("no system prompt: {other}"),
    }
}

async fn event_versions(client: &Client, agent: Uuid, kind: &str) -> Vec<i32> {
    client
        .query(
            "SELECT (data ->> 'config_version')::integer FROM holdfast.events \
              WHERE agent_id = $1 AND type = $2 ORDER BY seq",
            &[&agent, &kind],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_turn_keeps_its_config_version_after_a_next_turn_patch_and_the_next_turn_uses_the_new_one(
) {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let config = json!({"model": {"provider": "anthropic", "name": "claude-test"},
                        "system": "v1", "tools": [{"type": "custom", "name": "lookup"}]});
    let agent = store::create_agent(&client, project, &config)
        .await
        .unwrap();
    for system in ["v2", "v3"] {
        store::patch_agent_config(&client, agent, &json!({"system": system}), ConfigApply::Now)
            .await
            .unwrap();
    }
    let fake = FakeProvider::start().await;
    fake.push(Reply::tool_calls(vec![("lookup", json!({"order": "A-7"}))]));
    fake.push(Reply::text("Found it."));
    fake.push(Reply::text("Second turn."));
    let _worker = spawn_worker("w-versions", &db.config, &fake, &[]);
    let server = ApiServer::start(&db).await;
    send(&client, agent, "find A-7", InputMode::Steer).await;

    // The turn on version 3 waits for the tool's result; meanwhile a
    // next_turn change makes version 4.
    wait_for_events(&client, agent, "model.response", 1, T).await;
    let response = server
        .request(Method::PATCH, &format!("/v1/agents/{agent}"), &key)
        .json(&json!({"system": "v4", "apply": "next_turn"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let view: Value = response.json().await.unwrap();
    assert_eq!(view["config_version"], 3);
    assert_eq!(view["next_turn_config_version"], 4);
    assert_eq!(
        view["config"]["system"], "v3",
        "the config in force is still 3"
    );
    answer_waiting_call(&client, agent, json!("in stock")).await;
    wait_for_events(&client, agent, "turn.completed", 1, T).await;

    send(&client, agent, "again", InputMode::Steer).await;
    wait_for_events(&client, agent, "turn.completed", 2, T).await;

    assert_eq!(event_versions(&client, agent, "turn.started").await, [3, 4]);
    assert_eq!(
        event_versions(&client, agent, "model.response").await,
        [3, 3, 4]
    );
    let systems: Vec<String> = fake.requests().iter().map(|r| system_of(&r.body)).collect();
    assert_eq!(systems, ["v3", "v3", "v4"]);
    let updated: Value = client
        .query_one(
            "SELECT data FROM holdfast.events WHERE agent_id = $1 AND type = 'config.updated' \
              ORDER BY seq DESC LIMIT 1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(updated["version"], 4);
    assert_eq!(updated["apply"], "next_turn");
    assert_eq!(updated["diff"], json!({"system": "v4"}));

    // The versions, numbered and kept as they were.
    let versions: Value = server
        .request(Method::GET, &format!("/v1/agents/{agent}/versions"), &key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let listed: Vec<(i64, String)> = versions["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["version"].as_i64().unwrap(),
                v["config"]["system"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            (1, "v1".into()),
            (2, "v2".into()),
            (3, "v3".into()),
            (4, "v4".into())
        ]
    );
    let second: Value = server
        .request(Method::GET, &format!("/v1/agents/{agent}/versions/2"), &key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(second["config"]["system"], "v2");
    let missing = server
        .request(Method::GET, &format!("/v1/agents/{agent}/versions/9"), &key)
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    let bad = server
        .request(Method::PATCH, &format!("/v1/agents/{agent}"), &key)
        .json(&json!({"system": "v5", "apply": "later"}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    let error: Value = bad.json().await.unwrap();
    assert_eq!(error["error"]["field"], "apply");
    let agent_view: Value = server
        .request(Method::GET, &format!("/v1/agents/{agent}"), &key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(agent_view["config_version"], 4);
    assert_eq!(agent_view["next_turn_config_version"], Value::Null);
    let types = holdfast_tests::event_schemas::assert_saved_events_match(&client).await;
    assert!(types.contains("config.updated") && types.contains("turn.started"));
}

/// An `"apply": "now"` change that lands while a model call is in flight
/// does not rename that call: its `model.response` (and its step's model)
/// is the version the request was built from, and the next call uses the
/// new version.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_model_call_in_flight_during_an_apply_now_patch_reports_the_version_it_was_built_from() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let config = json!({"model": {"provider": "anthropic", "name": "claude-test"},
                        "system": "v1", "tools": [{"type": "custom", "name": "lookup"}]});
    let agent = store::create_agent(&client, project, &config)
        .await
        .unwrap();
    let fake = FakeProvider::start().await;
    fake.push(Reply::tool_calls(vec![("lookup", json!({"order": "A-7"}))]).hold_before_headers());
    fake.push(Reply::text("Found it."));
    let _worker = spawn_worker("w-apply-now", &db.config, &fake, &[]);
    let server = ApiServer::start(&db).await;
    send(&client, agent, "find A-7", InputMode::Steer).await;

    // The first call, built from version 1, is held at the provider while
    // version 2 (another system prompt and model) is applied now.
    fake.wait_until_held(1).await;
    let response = server
        .request(Method::PATCH, &format!("/v1/agents/{agent}"), &key)
        .json(&json!({"system": "v2", "apply": "now",
                      "model": {"provider": "anthropic", "name": "claude-test-2"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let view: Value = response.json().await.unwrap();
    assert_eq!(view["config_version"], 2);
    fake.release();

    answer_waiting_call(&client, agent, json!("in stock")).await;
    wait_for_events(&client, agent, "turn.completed", 1, T).await;

    let systems: Vec<String> = fake.requests().iter().map(|r| system_of(&r.body)).collect();
    assert_eq!(systems, ["v1", "v2"]);
    assert_eq!(event_versions(&client, agent, "turn.started").await, [1]);
    assert_eq!(
        event_versions(&client, agent, "model.response").await,
        [1, 2],
        "each model.response names the version its request was built from"
    );
    let models: Vec<String> = client
        .query(
            "SELECT model FROM holdfast.steps WHERE agent_id = $1 AND kind = 'model' \
              ORDER BY step_seq",
            &[&agent],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(models, ["claude-test", "claude-test-2"]);
    holdfast_tests::event_schemas::assert_saved_events_match(&client).await;
}
