//! The API's boundaries against a hostile client (docs/security.md): a
//! flood of bogus API keys or machine tokens costs no database work past a
//! few lookups per client address, counted by pg_stat_statements; each
//! machine's requests are rate limited on their own; every id route of the
//! OpenAPI document answers 404 for another project's object.

use std::num::NonZeroU32;
use std::time::Duration;

use holdfast_api::rate_limit::{RateLimit, FAILED_LOOKUPS};
use holdfast_db::store;
use holdfast_tests::api_server::{project_key, waiting_tool_call, ApiServer};
use holdfast_tests::{PrivateCluster, TestDb};
use holdfast_wire::domain::ToolKind;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tokio_postgres::Client;
use uuid::Uuid;

/// A migrated cluster with pg_stat_statements counting every statement.
async fn cluster_with_statement_stats() -> (PrivateCluster, Client) {
    let primary = PrivateCluster::start().await;
    let conf = primary.cluster.data_dir().join("postgresql.conf");
    let mut text = std::fs::read_to_string(&conf).unwrap();
    text.push_str("\nshared_preload_libraries = 'pg_stat_statements'\n");
    std::fs::write(&conf, text).unwrap();
    tokio::task::block_in_place(|| {
        primary.cluster.stop().unwrap();
        primary.cluster.restart().unwrap();
    });
    let (sql, connection) = primary.config().connect().await.unwrap();
    tokio::spawn(connection);
    sql.batch_execute("CREATE EXTENSION pg_stat_statements")
        .await
        .unwrap();
    (primary, sql)
}

/// How often statements naming `function` ran since the last reset.
async fn calls(sql: &Client, function: &str) -> i64 {
    sql.query_one(
        "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements WHERE query LIKE $1",
        &[&format!("%{function}%")],
    )
    .await
    .unwrap()
    .get(0)
}

async fn status_of(server: &ApiServer, method: Method, path: &str, key: &str) -> StatusCode {
    server
        .request(method, path, key)
        .send()
        .await
        .unwrap()
        .status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_bogus_keys_costs_no_database_work_after_the_first_few() {
    let (primary, sql) = cluster_with_statement_stats().await;
    let (_, key) = project_key(&sql).await;
    let burst = i64::from(FAILED_LOOKUPS.burst.get());

    // 200 different bogus keys from one address: a lookup each until the
    // address runs out of failed lookups, then 429 before any lookup.
    let server = ApiServer::start_on(&primary.config(), |_| {}).await;
    sql.batch_execute("SELECT pg_stat_statements_reset()")
        .await
        .unwrap();
    let mut statuses = Vec::new();
    for _ in 0..200 {
        let bogus = format!("hf_{}", Uuid::new_v4().simple());
        let response = server
            .request(Method::GET, "/v1/agents", &bogus)
            .send()
            .await
            .unwrap();
        let status = response.status();
        if status == StatusCode::TOO_MANY_REQUESTS {
            assert!(response.headers().contains_key("retry-after"));
            let body: Value = response.json().await.unwrap();
            assert_eq!(body["error"]["type"], "rate_limited");
        }
        statuses.push(status);
    }
    let unauthorized = statuses
        .iter()
        .filter(|s| **s == StatusCode::UNAUTHORIZED)
        .count();
    assert_eq!(unauthorized as i64, burst, "{statuses:?}");
    assert!(statuses[burst as usize..]
        .iter()
        .all(|s| *s == StatusCode::TOO_MANY_REQUESTS));
    // The lookup that found the address out of failed lookups is the last.
    assert_eq!(calls(&sql, "authenticate_api_key").await, burst + 1);
    // Bogus machine tokens from that address cost nothing either.
    for _ in 0..20 {
        let bogus = format!("hfm_{}", Uuid::new_v4().simple());
        let status = status_of(&server, Method::POST, "/v1/machine/heartbeat", &bogus).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    }
    assert_eq!(calls(&sql, "authenticate_machine").await, 0);

    // One bogus key sent 200 times: looked up once, answered 401 from
    // memory after that, and the address keeps its failed lookups, so a
    // good key from it still works.
    let server = ApiServer::start_on(&primary.config(), |_| {}).await;
    sql.batch_execute("SELECT pg_stat_statements_reset()")
        .await
        .unwrap();
    let bogus = format!("hf_{}", Uuid::new_v4().simple());
    for _ in 0..200 {
        let status = status_of(&server, Method::GET, "/v1/agents", &bogus).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    assert_eq!(calls(&sql, "authenticate_api_key").await, 1);
    assert_eq!(
        status_of(&server, Method::GET, "/v1/agents", &key).await,
        StatusCode::OK
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_machines_requests_are_rate_limited_on_their_own() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (_, key) = project_key(&client).await;
    let server = ApiServer::start_with(&db, |config| {
        config.rate_limit = Some(RateLimit {
            requests: NonZeroU32::new(1).unwrap(),
            per: Duration::from_secs(3600),
            burst: NonZeroU32::new(5).unwrap(),
        });
    })
    .await;
    let mut tokens = Vec::new();
    for name in ["flooding", "quiet"] {
        let response = server
            .request(Method::POST, "/v1/machines", &key)
            .json(&json!({"name": name}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
        let created: Value = response.json().await.unwrap();
        tokens.push(created["token"].as_str().unwrap().to_owned());
    }
    let heartbeat = |token: String| {
        let request = server
            .request(Method::POST, "/v1/machine/heartbeat", &token)
            .json(&json!({"session": Uuid::new_v4(), "started": true, "commands": []}));
        async move { request.send().await.unwrap() }
    };
    let mut statuses = Vec::new();
    for _ in 0..20 {
        let response = heartbeat(tokens[0].clone()).await;
        if response.status() == StatusCode::TOO_MANY_REQUESTS {
            assert!(response.headers().contains_key("retry-after"));
        }
        statuses.push(response.status());
    }
    assert_eq!(
        statuses,
        [
            vec![StatusCode::OK; 5],
            vec![StatusCode::TOO_MANY_REQUESTS; 15]
        ]
        .concat()
    );
    // Another machine of the same project is unaffected.
    assert_eq!(heartbeat(tokens[1].clone()).await.status(), StatusCode::OK);
}

/// One object of each kind an id route names, all in one project.
struct Objects {
    agent: Uuid,
    attachment: Uuid,
    input: Uuid,
    tool_call: Uuid,
    question: Uuid,
    approval: Uuid,
    webhook: Uuid,
    machine: Uuid,
    schedule: Uuid,
    replay: Uuid,
}

/// A 1×1 PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

async fn objects(server: &ApiServer, client: &Client, project: Uuid, key: &str) -> Objects {
    let post = |path: &str, body: Value| {
        let request = server.request(Method::POST, path, key).json(&body);
        async move {
            let response = request.send().await.unwrap();
            assert!(response.status().is_success(), "{}", response.status());
            response.json::<Value>().await.unwrap()
        }
    };
    let id = |value: &Value| value.as_str().unwrap().parse::<Uuid>().unwrap();
    // A waiting custom call, a waiting question and a pending approval,
    // each on an agent of its own (a step waits on one kind at a time).
    let config = json!({"model": {"provider": "anthropic", "name": "m"},
                        "tools": [{"type": "custom", "name": "lookup"}, {"type": "ask_user"},
                                  {"type": "custom", "name": "refund"}],
                        "approvals": {"require_for": ["refund"]}});
    let agent = store::create_agent(client, project, &config).await.unwrap();
    let tool_call = waiting_tool_call(client, agent, "lookup", json!({}), ToolKind::Custom).await;
    let asking = store::create_agent(client, project, &config).await.unwrap();
    let question = waiting_tool_call(
        client,
        asking,
        "ask_user",
        json!({"question": "which?"}),
        ToolKind::Question,
    )
    .await;
    let approving = store::create_agent(client, project, &config).await.unwrap();
    let refund = waiting_tool_call(
        client,
        approving,
        "refund",
        json!({"amount": 5}),
        ToolKind::Custom,
    )
    .await;
    let approval: Uuid = client
        .query_one(
            "SELECT id FROM holdfast.approvals WHERE tool_call_id = $1",
            &[&refund],
        )
        .await
        .unwrap()
        .get(0);
    let input = post(
        &format!("/v1/agents/{agent}/inputs"),
        json!({"content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}]}),
    )
    .await;
    let attachment = id(&input["content"][0]["source"]["attachment_id"]);
    let webhook = post(
        "/v1/webhooks",
        json!({"url": "https://hooks.example.com/h", "events": ["*"]}),
    )
    .await;
    let machine = post("/v1/machines", json!({"name": "box"})).await;
    let schedule = post(
        &format!("/v1/agents/{agent}/schedules"),
        json!({"every": "1h", "input": {"content": "hourly"}}),
    )
    .await;
    // A replay of the agent's recorded first turn (no worker runs it).
    let replay = store::create_replay(client, project, agent, None, None, None, None)
        .await
        .unwrap();
    Objects {
        agent,
        attachment,
        input: id(&input["id"]),
        tool_call,
        question,
        approval,
        webhook: id(&webhook["id"]),
        machine: id(&machine["id"]),
        schedule: id(&schedule["id"]),
        replay,
    }
}

/// Every route of the served OpenAPI document that names an object by id,
/// called with another project's key on this project's objects, answers
/// 404, as for an object that does not exist, and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_id_route_answers_404_for_another_projects_object() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let server = ApiServer::start_with(&db, |config| config.rate_limit = None).await;
    let (project, key) = project_key(&client).await;
    let (_, other_key) = project_key(&client).await;
    let objects = objects(&server, &client, project, &key).await;
    let document: Value = server
        .http
        .get(server.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let before: i64 = client
        .query_one("SELECT count(*) FROM holdfast.events", &[])
        .await
        .unwrap()
        .get(0);
    let mut checked = 0;
    for (template, item) in document["paths"].as_object().unwrap() {
        // Ids of the caller's own (its provider keys by name) and the
        // daemon's routes (a machine token's own commands) aside.
        if !template.contains("{id}") || template.starts_with("/v1/machine/") {
            continue;
        }
        let object = match template.as_str() {
            t if t.starts_with("/v1/agents/{id}") => objects.agent,
            t if t.starts_with("/v1/inputs/") => objects.input,
            t if t.starts_with("/v1/tool-calls/") => objects.tool_call,
            t if t.starts_with("/v1/questions/") => objects.question,
            t if t.starts_with("/v1/approvals/") => objects.approval,
            t if t.starts_with("/v1/webhooks/") => objects.webhook,
            t if t.starts_with("/v1/machines/") => objects.machine,
            t if t.starts_with("/v1/replays/") => objects.replay,
            other => panic!("no object for {other}: add one"),
        };
        let path = template
            .replace("{id}", &object.to_string())
            .replace("{attachment_id}", &objects.attachment.to_string())
            .replace("{schedule_id}", &objects.schedule.to_string())
            .replace("{version}", "1");
        for (method, operation) in item.as_object().unwrap() {
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let mut request = server.request(method.clone(), &path, &other_key);
            if !operation["requestBody"].is_null() {
                request = request.json(&valid_body(template));
            }
            let response = request.send().await.unwrap();
            let status = response.status();
            let body: Value = response.json().await.unwrap_or(Value::Null);
            assert_eq!(status, StatusCode::NOT_FOUND, "{method} {template}: {body}");
            assert_eq!(body["error"]["type"], "not_found", "{method} {template}");
            checked += 1;
        }
    }
    assert!(checked >= 20, "{checked} id routes");
    let after: i64 = client
        .query_one("SELECT count(*) FROM holdfast.events", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(before, after, "a refused request wrote an event");
}

/// A body the route would take from the object's own project, so that only
/// the project can make it a 404.
fn valid_body(template: &str) -> Value {
    match template {
        "/v1/agents/{id}" => json!({"system": "hijacked"}),
        "/v1/agents/{id}/inputs" => json!({"content": "hello"}),
        "/v1/tool-calls/{id}/result" => json!({"output": "done"}),
        "/v1/questions/{id}/answer" => json!({"answer": "this one", "by": "mallory"}),
        "/v1/approvals/{id}" => json!({"decision": "approve", "by": "mallory"}),
        "/v1/machines/{id}/wake" | "/v1/machines/{id}/token" => json!({}),
        "/v1/agents/{id}/schedules" => json!({"every": "1h", "input": {"content": "hello"}}),
        "/v1/agents/{id}/schedules/{schedule_id}" => json!({"paused": true}),
        "/v1/inputs/{id}" => json!({"mode": "steer"}),
        _ => json!({}),
    }
}
