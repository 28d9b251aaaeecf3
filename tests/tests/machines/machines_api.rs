//! The machine routes over real sockets: registration and listing with an
//! API key, the daemon's routes with a machine token, credentials that do
//! not cross, long-poll claims, idempotent results, wake attempts.

use holdfast_providers::egress::EgressPolicy;
use std::sync::Arc;
use std::time::{Duration, Instant};

use holdfast_db::store;
use holdfast_tests::api_server::{project_key, ApiServer};
use holdfast_tests::counting_http::CountingServer;
use holdfast_tests::{wait_until, TestDb};
use holdfast_wire::domain::{ModelStep, NewToolCall, ToolKind};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tokio_postgres::Client;
use uuid::Uuid;

/// Register a machine over HTTP: (id, token).
async fn register(server: &ApiServer, key: &str, body: Value) -> (Uuid, String) {
    let response = server
        .request(Method::POST, "/v1/machines", key)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let created: Value = response.json().await.unwrap();
    (
        created["id"].as_str().unwrap().parse().unwrap(),
        created["token"].as_str().unwrap().to_owned(),
    )
}

/// A `started` heartbeat for a new daemon session; returns the session.
async fn start_session(server: &ApiServer, token: &str) -> Uuid {
    let session = Uuid::new_v4();
    let response = server
        .request(Method::POST, "/v1/machine/heartbeat", token)
        .json(&json!({"session": session, "started": true, "commands": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    session
}

async fn claim(server: &ApiServer, token: &str, session: Uuid, wait: u64) -> (StatusCode, Value) {
    let response = server
        .request(
            Method::POST,
            &format!("/v1/machine/commands/claim?session={session}&wait={wait}"),
            token,
        )
        .send()
        .await
        .unwrap();
    (response.status(), response.json().await.unwrap())
}

/// An agent of `project` whose model step asked run_command on `machine`;
/// returns (agent, tool call).
async fn agent_waiting_on_command(client: &Client, project: Uuid, machine: Uuid) -> (Uuid, Uuid) {
    let config = json!({
        "model": {"provider": "anthropic", "name": "m"},
        "tools": [{"type": "run_command", "machine": machine}],
    });
    let agent = store::create_agent(client, project, &config).await.unwrap();
    let input = store::create_input(client, agent, &json!("go"), None)
        .await
        .unwrap();
    let claim = store::claim_agents(client, "w", 10, Duration::from_secs(60))
        .await
        .unwrap()
        .into_iter()
        .find(|c| c.agent_id == agent)
        .unwrap();
    let call_input = json!({"command": "echo hi"});
    let step = ModelStep {
        input_ids: vec![input.input_id],
        message: vec![
            json!({"type": "tool_use", "id": "toolu_1", "name": "run_command", "input": call_input}),
        ],
        tool_calls: vec![NewToolCall {
            provider_id: "toolu_1".into(),
            name: "run_command".into(),
            input: call_input,
            kind: ToolKind::Command,
        }],
        usage: json!({}),
        stop_reason: Some("tool_use".into()),
        config_version: None,
    };
    let step_id = store::commit_model_step(client, claim, &step)
        .await
        .unwrap();
    let call = client
        .query_one(
            "SELECT id FROM holdfast.tool_calls WHERE step_id = $1",
            &[&step_id],
        )
        .await
        .unwrap()
        .get(0);
    (agent, call)
}

#[tokio::test]
async fn machines_are_registered_listed_and_come_online_with_a_heartbeat() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (_, key) = project_key(&client).await;
    let server = ApiServer::start(&db).await;

    let (id, token) = register(&server, &key, json!({"name": "laptop"})).await;
    assert!(token.starts_with("hfm_"));
    let list = |server: &ApiServer| server.request(Method::GET, "/v1/machines", &key).send();
    let listed: Value = list(&server).await.unwrap().json().await.unwrap();
    let machine = &listed["machines"][0];
    assert_eq!(machine["id"], json!(id));
    assert_eq!(machine["online"], false);
    assert_eq!(machine["last_heartbeat_at"], Value::Null);
    assert!(
        machine.get("token").is_none(),
        "the token is shown only once"
    );

    start_session(&server, &token).await;
    let listed: Value = list(&server).await.unwrap().json().await.unwrap();
    assert_eq!(listed["machines"][0]["online"], true);
    assert_eq!(listed["machines"][0]["running_commands"], json!([]));

    for (body, status, field) in [
        (json!({"name": "laptop"}), StatusCode::CONFLICT, None),
        (
            json!({"name": "has space"}),
            StatusCode::BAD_REQUEST,
            Some("name"),
        ),
        (
            json!({"name": "x", "wake_url": "gopher://x"}),
            StatusCode::BAD_REQUEST,
            Some("wake_url"),
        ),
        (
            json!({"name": "x", "owner": "me"}),
            StatusCode::BAD_REQUEST,
            None,
        ),
    ] {
        let response = server
            .request(Method::POST, "/v1/machines", &key)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), status, "{body}");
        let error: Value = response.json().await.unwrap();
        if let Some(field) = field {
            assert_eq!(error["error"]["field"], field, "{error}");
        }
    }
    // Another project sees none of them.
    let (_, stranger) = project_key(&client).await;
    let theirs: Value = server
        .request(Method::GET, "/v1/machines", &stranger)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(theirs["machines"], json!([]));
}

#[tokio::test]
async fn api_keys_and_machine_tokens_do_not_open_each_others_routes() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (_, key) = project_key(&client).await;
    let server = ApiServer::start(&db).await;
    let (_, token) = register(&server, &key, json!({"name": "m"})).await;
    let command = Uuid::new_v4();

    let machine_routes = [
        (
            Method::POST,
            "/v1/machine/heartbeat".to_owned(),
            json!({"session": Uuid::new_v4()}),
        ),
        (
            Method::POST,
            format!("/v1/machine/commands/claim?session={}", Uuid::new_v4()),
            Value::Null,
        ),
        (
            Method::POST,
            format!("/v1/machine/commands/{command}/result"),
            json!({"state": "finished", "exit_code": 0}),
        ),
    ];
    for (method, path, body) in &machine_routes {
        let response = server
            .request(method.clone(), path, &key)
            .json(body)
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            StatusCode::UNAUTHORIZED,
            "API key on {path}"
        );
        let error: Value = response.json().await.unwrap();
        assert!(
            error["error"]["message"]
                .as_str()
                .unwrap()
                .contains("machine's token"),
            "{error}"
        );
        let anonymous = server
            .http
            .request(method.clone(), server.url(path))
            .json(body)
            .send()
            .await
            .unwrap();
        assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    }
    for (method, path) in [
        (Method::GET, "/v1/machines"),
        (Method::GET, "/v1/agents"),
        (Method::POST, "/v1/machines"),
    ] {
        let response = server
            .request(method, path, &token)
            .json(&json!({"name": "sneaky"}))
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            StatusCode::UNAUTHORIZED,
            "machine token on {path}"
        );
    }
}

#[tokio::test]
async fn a_claimed_commands_result_is_its_machines_alone_and_idempotent() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let server = ApiServer::start(&db).await;
    let (machine, token) = register(&server, &key, json!({"name": "a"})).await;
    let (_, other_token) = register(&server, &key, json!({"name": "b"})).await;
    let session = start_session(&server, &token).await;
    let (agent, call) = agent_waiting_on_command(&client, project, machine).await;

    let (status, claimed) = claim(&server, &token, session, 0).await;
    assert_eq!(status, StatusCode::OK);
    let commands = claimed["commands"].as_array().unwrap();
    assert_eq!(commands.len(), 1);
    assert_eq!(commands[0]["command"], "echo hi");
    assert_eq!(commands[0]["tool_call_id"], json!(call));
    let command = commands[0]["id"].as_str().unwrap().to_owned();
    let (_, again) = claim(&server, &token, session, 0).await;
    assert_eq!(again["commands"], json!([]), "a command is handed out once");

    let path = format!("/v1/machine/commands/{command}/result");
    let result = json!({"state": "finished", "exit_code": 0, "stdout": "hi\n", "stderr": ""});
    let post =
        |token: &str, body: &Value| server.request(Method::POST, &path, token).json(body).send();
    let response = post(&other_token, &result).await.unwrap();
    assert_eq!(
        response.status(),
        StatusCode::NOT_FOUND,
        "another machine's command"
    );

    let response = post(&token, &result).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["outcome"], "delivered");
    let response = post(&token, &result).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.json::<Value>().await.unwrap()["outcome"],
        "duplicate"
    );
    let different = json!({"state": "finished", "exit_code": 1});
    assert_eq!(
        post(&token, &different).await.unwrap().status(),
        StatusCode::CONFLICT
    );
    for bad in [
        json!({"state": "exploded"}),
        json!({"state": "finished", "extra": 1}),
    ] {
        assert_eq!(
            post(&token, &bad).await.unwrap().status(),
            StatusCode::BAD_REQUEST,
            "{bad}"
        );
    }

    let output: Value = client
        .query_one(
            "SELECT output FROM holdfast.tool_calls WHERE id = $1",
            &[&call],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(output["stdout"], "hi\n");
    let state: String = client
        .query_one("SELECT state FROM holdfast.agents WHERE id = $1", &[&agent])
        .await
        .unwrap()
        .get(0);
    assert_eq!(state, "ready");

    // Output with NUL bytes (Postgres text cannot hold them) is kept, marked.
    let (_, call) = agent_waiting_on_command(&client, project, machine).await;
    let (_, claimed) = claim(&server, &token, session, 0).await;
    let command = claimed["commands"][0]["id"].as_str().unwrap().to_owned();
    let response = server
        .request(
            Method::POST,
            &format!("/v1/machine/commands/{command}/result"),
            &token,
        )
        .json(&json!({"state": "finished", "exit_code": 0, "stdout": "a\u{0}b"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let output: Value = client
        .query_one(
            "SELECT output FROM holdfast.tool_calls WHERE id = $1",
            &[&call],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(output["stdout"], "a\u{FFFD}b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_long_polls_for_commands_within_its_bounds() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let server = ApiServer::start(&db).await;
    let (machine, token) = register(&server, &key, json!({"name": "m"})).await;
    let session = start_session(&server, &token).await;

    // Nothing to claim: the answer comes when the wait is over, empty.
    let started = Instant::now();
    let (status, empty) = claim(&server, &token, session, 1).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(empty["commands"], json!([]));
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );

    // A command queued while a claim waits is returned by that claim.
    let waiting = tokio::spawn({
        let url = server.url(&format!(
            "/v1/machine/commands/claim?session={session}&wait=15"
        ));
        let http = server.http.clone();
        let token = token.clone();
        async move {
            let started = Instant::now();
            let body: Value = http
                .post(url)
                .bearer_auth(token)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            (body, started.elapsed())
        }
    });
    let (_, call) = agent_waiting_on_command(&client, project, machine).await;
    let (body, elapsed) = waiting.await.unwrap();
    assert_eq!(body["commands"][0]["tool_call_id"], json!(call));
    assert!(
        elapsed < Duration::from_secs(15),
        "returned at once: {elapsed:?}"
    );

    // Out of bounds, or without the daemon's current session.
    let (status, _) = claim(&server, &token, session, 21).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let missing_session = server
        .request(Method::POST, "/v1/machine/commands/claim", &token)
        .send()
        .await
        .unwrap();
    assert_eq!(missing_session.status(), StatusCode::BAD_REQUEST);
    let (status, _) = claim(&server, &token, Uuid::new_v4(), 0).await;
    assert_eq!(status, StatusCode::CONFLICT);
}

#[tokio::test]
async fn a_wake_attempt_is_recorded_and_calls_the_wake_url_tolerating_failure() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (_, key) = project_key(&client).await;
    // The wake endpoints listen on loopback, which the operator allows.
    let server = ApiServer::start_with(&db, |c| {
        c.egress = Arc::new(EgressPolicy::parse("wake=127.0.0.0/8").unwrap())
    })
    .await;
    let waker = CountingServer::start().await;
    waker.set_response("/wake", 202, "text/plain", "waking");
    let closed_port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let (woken, _) = register(
        &server,
        &key,
        json!({"name": "w", "wake_url": waker.url("/wake")}),
    )
    .await;
    let (broken, _) = register(
        &server,
        &key,
        json!({"name": "b", "wake_url": format!("http://127.0.0.1:{closed_port}/wake")}),
    )
    .await;
    let (plain, _) = register(&server, &key, json!({"name": "p"})).await;
    let wake = |id: Uuid, body: Option<Value>| {
        let request = server.request(Method::POST, &format!("/v1/machines/{id}/wake"), &key);
        let request = match body {
            Some(body) => request.json(&body),
            None => request,
        };
        request.send()
    };

    let response = wake(woken, Some(json!({"window_secs": 600})))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["wake_url_called"], true);
    assert_eq!(body["wake_url_status"], 202);
    assert_eq!(body["wake_url_error"], Value::Null);
    assert_eq!(waker.hits("/wake"), 1);

    let body: Value = wake(broken, None).await.unwrap().json().await.unwrap();
    assert_eq!(body["wake_url_called"], true);
    assert!(body["wake_url_error"].is_string(), "{body}");

    let body: Value = wake(plain, None).await.unwrap().json().await.unwrap();
    assert_eq!(body["wake_url_called"], false);

    let listed: Value = server
        .request(Method::GET, "/v1/machines", &key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for machine in listed["machines"].as_array().unwrap() {
        assert!(machine["wake_until"].is_string(), "{machine}");
    }

    assert_eq!(
        wake(Uuid::new_v4(), None).await.unwrap().status(),
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        wake(plain, Some(json!({"window_secs": 0})))
            .await
            .unwrap()
            .status(),
        StatusCode::BAD_REQUEST
    );
    let (_, stranger) = project_key(&client).await;
    let response = server
        .request(
            Method::POST,
            &format!("/v1/machines/{woken}/wake"),
            &stranger,
        )
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        StatusCode::NOT_FOUND,
        "another project's machine"
    );
}

/// A claim long-poll started in the background: (status, body, time taken).
fn claim_in_background(
    server: &ApiServer,
    token: &str,
    session: Uuid,
    wait: u64,
) -> tokio::task::JoinHandle<(StatusCode, Value, Duration)> {
    let url = server.url(&format!(
        "/v1/machine/commands/claim?session={session}&wait={wait}"
    ));
    let http = server.http.clone();
    let token = token.to_owned();
    tokio::spawn(async move {
        let started = Instant::now();
        let response = http.post(url).bearer_auth(token).send().await.unwrap();
        let status = response.status();
        (status, response.json().await.unwrap(), started.elapsed())
    })
}

/// The sessions of this database other than `observer`'s own and the API's
/// LISTEN session: the API's pooled connections.
const POOL_SESSIONS: &str = "FROM pg_stat_activity \
     WHERE datname = current_database() AND backend_type = 'client backend' \
       AND pid <> pg_backend_pid() AND application_name <> 'holdfast-api-listen'";

/// Wait until a pooled connection has run a claim and gone idle: a
/// long-poll is between claims.
async fn wait_for_idle_claim(observer: &Client) {
    wait_until(Duration::from_secs(10), "a claim ran and went idle", || async {
        observer
            .query_one(
                &format!(
                    "SELECT count(*) {POOL_SESSIONS} AND state = 'idle' AND query LIKE '%claim_commands%'"
                ),
                &[],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
            > 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_long_poll_queries_nothing_while_idle_and_wakes_when_a_command_is_queued() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let server = ApiServer::start(&db).await;
    let (machine, token) = register(&server, &key, json!({"name": "m"})).await;
    let session = start_session(&server, &token).await;

    let waiting = claim_in_background(&server, &token, session, 20);
    wait_for_idle_claim(&client).await;
    let idle_since: chrono::DateTime<chrono::Utc> = client
        .query_one("SELECT clock_timestamp()", &[])
        .await
        .unwrap()
        .get(0);
    // An idle window (a measurement, not a synchronisation): the waiting
    // claim runs no query in it. Polling every 250 ms would run eight.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let busy: i64 = client
        .query_one(
            &format!("SELECT count(*) {POOL_SESSIONS} AND state_change > $1"),
            &[&idle_since],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(busy, 0, "the idle long-poll queried the database");
    assert!(!waiting.is_finished());

    // A command queued now reaches the waiting claim at once, well before
    // its fallback poll (5 s after the claim began) would have found it.
    let (_, call) = agent_waiting_on_command(&client, project, machine).await;
    let queued_at = Instant::now();
    let (status, body, _) = waiting.await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["commands"][0]["tool_call_id"], json!(call));
    assert!(
        queued_at.elapsed() < Duration::from_secs(1),
        "woke {:?} after the command was queued",
        queued_at.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_token_is_refused_at_once_even_by_a_waiting_claim_and_the_new_one_works() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (_, key) = project_key(&client).await;
    let (_, other_key) = project_key(&client).await;
    let server = ApiServer::start(&db).await;
    let (machine, old_token) = register(&server, &key, json!({"name": "m"})).await;
    let session = start_session(&server, &old_token).await;

    let rotate = |key: &str| {
        server
            .request(Method::POST, &format!("/v1/machines/{machine}/token"), key)
            .send()
    };
    let response = rotate(&other_key).await.unwrap();
    assert_eq!(
        response.status(),
        StatusCode::NOT_FOUND,
        "another project's machine"
    );

    let waiting = claim_in_background(&server, &old_token, session, 20);
    wait_for_idle_claim(&client).await;
    let response = rotate(&key).await.unwrap();
    let rotated_at = Instant::now();
    assert_eq!(response.status(), StatusCode::OK);
    let rotated: Value = response.json().await.unwrap();
    let new_token = rotated["token"].as_str().unwrap().to_owned();
    assert!(new_token.starts_with("hfm_") && new_token != old_token);
    assert_eq!(rotated["id"], json!(machine));
    assert_eq!(rotated["token_prefix"], json!(&new_token[..12]));

    // The claim that was waiting with the old token ends with 401 at once.
    let (status, body, _) = waiting.await.unwrap();
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(
        rotated_at.elapsed() < Duration::from_secs(2),
        "{:?}",
        rotated_at.elapsed()
    );
    let response = server
        .request(Method::POST, "/v1/machine/heartbeat", &old_token)
        .json(&json!({"session": session}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);

    // The new token serves the machine.
    let session = start_session(&server, &new_token).await;
    let (status, body) = claim(&server, &new_token, session, 0).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn a_deleted_machines_commands_end_cleanly_its_token_is_refused_and_its_name_is_free() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let (_, other_key) = project_key(&client).await;
    let server = ApiServer::start(&db).await;
    let (machine, token) = register(&server, &key, json!({"name": "m"})).await;
    let session = start_session(&server, &token).await;
    let (accepted_agent, accepted_call) = agent_waiting_on_command(&client, project, machine).await;
    let (status, claimed) = claim(&server, &token, session, 0).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(claimed["commands"][0]["tool_call_id"], json!(accepted_call));
    let (queued_agent, queued_call) = agent_waiting_on_command(&client, project, machine).await;

    let delete = |key: &str| {
        server
            .request(Method::DELETE, &format!("/v1/machines/{machine}"), key)
            .send()
    };
    let response = delete(&other_key).await.unwrap();
    assert_eq!(
        response.status(),
        StatusCode::NOT_FOUND,
        "another project's machine"
    );
    let response = delete(&key).await.unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);

    let call = |id: Uuid| {
        let client = &client;
        async move {
            let row = client
                .query_one(
                    "SELECT t.status, t.output, t.is_error, c.state, a.state \
                       FROM holdfast.tool_calls t \
                       JOIN holdfast.commands c ON c.tool_call_id = t.id \
                       JOIN holdfast.agents a ON a.id = t.agent_id WHERE t.id = $1",
                    &[&id],
                )
                .await
                .unwrap();
            (
                row.get::<_, String>(0),
                row.get::<_, Value>(1),
                row.get::<_, bool>(2),
                row.get::<_, String>(3),
                row.get::<_, String>(4),
            )
        }
    };
    // Accepted: it may have run; the agent is told so, and goes on.
    let (status, output, is_error, command, agent) = call(accepted_call).await;
    assert_eq!((status.as_str(), is_error), ("completed", true));
    assert_eq!(output["state"], "unknown", "{output}");
    assert_eq!(output["reason"], "machine_deleted");
    assert_eq!(command, "unknown");
    assert_eq!(agent, "ready", "the turn goes on");
    // Queued: it never ran.
    let (status, output, is_error, command, agent) = call(queued_call).await;
    assert_eq!((status.as_str(), is_error), ("completed", true));
    assert_eq!(output["state"], "failed", "{output}");
    assert_eq!(output["reason"], "machine_deleted");
    assert_eq!(command, "failed");
    assert_eq!(agent, "ready", "the turn goes on");
    for (agent, event) in [
        (accepted_agent, "command.unknown"),
        (queued_agent, "command.failed"),
    ] {
        let count: i64 = client
            .query_one(
                "SELECT count(*) FROM holdfast.events WHERE agent_id = $1 AND type = $2 \
                   AND data ->> 'reason' = 'machine_deleted'",
                &[&agent, &event],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(count, 1, "{event}");
    }

    // Its token opens nothing; it is gone from the list; its name is free.
    let response = server
        .request(Method::POST, "/v1/machine/heartbeat", &token)
        .json(&json!({"session": session}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let listed: Value = server
        .request(Method::GET, "/v1/machines", &key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["machines"], json!([]));
    let response = delete(&key).await.unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND, "deleted once");
    let (again, _) = register(&server, &key, json!({"name": "m"})).await;
    assert_ne!(again, machine);
    // What these turns wrote matches the OpenAPI document's event schemas.
    holdfast_tests::event_schemas::assert_saved_events_match(&client).await;
}

/// POST a command's live output with `token`: (status, body).
async fn relay_output(
    server: &ApiServer,
    token: &str,
    command: &str,
    body: Value,
) -> (StatusCode, Value) {
    let response = server
        .request(
            Method::POST,
            &format!("/v1/machine/commands/{command}/output"),
            token,
        )
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    (status, response.json().await.unwrap())
}

/// The next live `command_output` message on `stream` (saved events are
/// skipped).
async fn next_output(stream: &mut holdfast_tests::api_sse::SseReader) -> Value {
    loop {
        let event = stream
            .next_event(Duration::from_secs(10))
            .await
            .expect("a command_output message");
        if event.event.as_deref() == Some("command_output") {
            assert!(event.id.is_none(), "never saved: {event:?}");
            return event.json();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_commands_output_reaches_the_agents_stream_bounded_per_call_rate_and_command() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let server = ApiServer::start(&db).await;
    let (project, key) = project_key(&client).await;
    let (machine, token) = register(&server, &key, json!({"name": "box"})).await;
    let (_, other_token) = register(&server, &key, json!({"name": "other"})).await;
    let (agent, call) = agent_waiting_on_command(&client, project, machine).await;
    let session = start_session(&server, &token).await;
    let (status, claimed) = claim(&server, &token, session, 0).await;
    assert_eq!(status, StatusCode::OK, "{claimed}");
    let command = claimed["commands"][0]["id"].as_str().unwrap().to_owned();
    let mut stream = holdfast_tests::api_sse::SseReader::new(
        server
            .request(Method::GET, &format!("/v1/agents/{agent}/stream"), &key)
            .send()
            .await
            .unwrap(),
    );

    let (status, body) = relay_output(
        &server,
        &token,
        &command,
        json!({"stdout": "building\n", "stderr": "\u{1b}[31mwarn\u{1b}[0m\n"}),
    )
    .await;
    assert_eq!(
        (status, &body["outcome"]),
        (StatusCode::OK, &json!("relayed")),
        "{body}"
    );
    let stdout = next_output(&mut stream).await;
    assert_eq!(
        stdout,
        json!({"command_id": command, "tool_call_id": call, "stream": "stdout",
               "text": "building\n", "limit_reached": false})
    );
    let stderr = next_output(&mut stream).await;
    assert_eq!(stderr["stream"], "stderr");
    assert_eq!(
        stderr["text"], "\u{1b}[31mwarn\u{1b}[0m\n",
        "the program's bytes, as text"
    );
    // Within 200 ms of the last call: nothing relayed.
    let (status, body) = relay_output(&server, &token, &command, json!({"stdout": "x"})).await;
    assert_eq!(
        (status, &body["outcome"]),
        (StatusCode::OK, &json!("too_soon")),
        "{body}"
    );
    // Over 16 KiB in one call: a 400 naming the field, nothing relayed.
    let (status, body) = relay_output(
        &server,
        &token,
        &command,
        json!({"stdout": "y".repeat(16 * 1024 + 1)}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["field"], "stdout");
    // Another machine's token does not reach this command.
    let (status, body) =
        relay_output(&server, &other_token, &command, json!({"stdout": "z"})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    // Near its 256 KiB, a call past them relays nothing and tells the
    // listeners once; nothing more is relayed.
    client
        .execute(
            "UPDATE holdfast.commands SET live_output_bytes = 262144 - 10, live_output_at = NULL WHERE id = $1",
            &[&command.parse::<Uuid>().unwrap()],
        )
        .await
        .unwrap();
    let (status, body) = relay_output(
        &server,
        &token,
        &command,
        json!({"stdout": "0123456789abc"}),
    )
    .await;
    assert_eq!(
        (status, &body["outcome"]),
        (StatusCode::OK, &json!("limit")),
        "{body}"
    );
    let limit = next_output(&mut stream).await;
    assert_eq!(
        (&limit["limit_reached"], &limit["text"]),
        (&json!(true), &json!("")),
        "{limit}"
    );
    let (_, body) = relay_output(&server, &token, &command, json!({"stdout": "more"})).await;
    assert_eq!(body["outcome"], "limit");
    // Once its result is in, the command is not running: nothing is relayed.
    let response = server
        .request(
            Method::POST,
            &format!("/v1/machine/commands/{command}/result"),
            &token,
        )
        .json(&json!({"state": "finished", "exit_code": 0, "stdout": "building\ndone\n"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    client
        .execute(
            "UPDATE holdfast.commands SET live_output_at = NULL WHERE id = $1",
            &[&command.parse::<Uuid>().unwrap()],
        )
        .await
        .unwrap();
    let (_, body) = relay_output(&server, &token, &command, json!({"stdout": "late"})).await;
    assert_eq!(body["outcome"], "not_running");
    // Nothing relayed was saved: the live stderr, which the result does
    // not hold, is in no event.
    let saved: i64 = client
        .query_one(
            "SELECT count(*) FROM holdfast.events WHERE agent_id = $1 AND data::text LIKE '%warn%'",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(saved, 0);
}
