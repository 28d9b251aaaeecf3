//! Approvals and questions over HTTP: listed per agent, first answer wins,
//! the same answer again by the same person is accepted, anything else is
//! 409 with the object as it stands, and another project's are 404.

use std::time::Duration;

use holdfast_db::store;
use holdfast_tests::api_server::{call, project_key, ApiServer};
use holdfast_tests::TestDb;
use holdfast_wire::domain::{Claim, ModelStep, NewToolCall, ToolKind};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tokio_postgres::Client;
use uuid::Uuid;

/// An agent with a custom `refund` tool that needs approval, and `ask_user`.
fn approval_config() -> Value {
    json!({
        "model": {"provider": "anthropic", "name": "claude-test"},
        "tools": [
            {"type": "custom", "name": "refund", "input_schema": {"type": "object"}},
            {"type": "ask_user"}
        ],
        "approvals": {"require_for": ["refund"]}
    })
}

/// Give `agent` a turn whose model step asks for `calls` (name, input,
/// kind), committed as a worker would; returns the calls' ids in order.
async fn model_step_with_calls(
    client: &Client,
    agent: Uuid,
    calls: &[(&str, Value, ToolKind)],
) -> Vec<Uuid> {
    store::create_input(client, agent, &json!("go"), None)
        .await
        .unwrap();
    let claim: Claim = store::claim_agents(client, "test-worker", 1, Duration::from_secs(60))
        .await
        .unwrap()
        .into_iter()
        .find(|c| c.agent_id == agent)
        .expect("the agent is claimable");
    let inputs: Vec<Uuid> = client
        .query(
            "SELECT id FROM holdfast.inputs WHERE agent_id = $1 AND consumed_at IS NULL",
            &[&agent],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let tool_calls: Vec<NewToolCall> = calls
        .iter()
        .enumerate()
        .map(|(i, (name, input, kind))| NewToolCall {
            provider_id: format!("toolu_{i}"),
            name: (*name).into(),
            input: input.clone(),
            kind: *kind,
        })
        .collect();
    let message = tool_calls
        .iter()
        .map(|c| json!({"type": "tool_use", "id": c.provider_id, "name": c.name, "input": c.input}))
        .collect();
    let step = ModelStep {
        input_ids: inputs,
        message,
        tool_calls,
        usage: json!({}),
        stop_reason: Some("tool_use".into()),
        config_version: None,
    };
    let step_id = store::commit_model_step(client, claim, &step)
        .await
        .unwrap();
    client
        .query(
            "SELECT id FROM holdfast.tool_calls WHERE step_id = $1 ORDER BY position",
            &[&step_id],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

async fn count_events(client: &Client, agent: Uuid, kind: &str) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM holdfast.events WHERE agent_id = $1 AND type = $2",
            &[&agent, &kind],
        )
        .await
        .unwrap()
        .get(0)
}

struct Setup {
    _db: TestDb,
    client: Client,
    server: ApiServer,
    key: String,
    agent: Uuid,
}

async fn setup() -> Setup {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let agent = store::create_agent(&client, project, &approval_config())
        .await
        .unwrap();
    let server = ApiServer::start(&db).await;
    Setup {
        _db: db,
        client,
        server,
        key,
        agent,
    }
}

/// The agent's only pending approval, as the API lists it.
async fn pending_approval(s: &Setup) -> Value {
    let (status, body) = call(
        &s.server,
        Method::GET,
        &format!("/v1/agents/{}/approvals?status=pending", s.agent),
        &s.key,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let approvals = body["approvals"].as_array().unwrap();
    assert_eq!(approvals.len(), 1, "{body}");
    approvals[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_decision_wins_and_the_same_decision_again_is_accepted() {
    let s = setup().await;
    let calls = model_step_with_calls(
        &s.client,
        s.agent,
        &[("refund", json!({"order": "1001"}), ToolKind::Custom)],
    )
    .await;
    let approval = pending_approval(&s).await;
    assert_eq!(approval["tool_call_id"], json!(calls[0]));
    assert_eq!(approval["tool_name"], "refund");
    assert_eq!(approval["tool_input"], json!({"order": "1001"}));
    assert_eq!(approval["status"], "pending");
    let path = format!("/v1/approvals/{}", approval["id"].as_str().unwrap());

    let decision = json!({"decision": "approve", "by": "alice"});
    let (status, approved) = call(
        &s.server,
        Method::POST,
        &path,
        &s.key,
        Some(decision.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{approved}");
    assert_eq!(approved["status"], "approved");
    assert_eq!(approved["decided_by"], "alice");

    // A retry of the same request is harmless.
    let (status, again) = call(&s.server, Method::POST, &path, &s.key, Some(decision)).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["decided_at"], approved["decided_at"]);

    // Anything else conflicts and shows the decision that won.
    for other in [
        json!({"decision": "deny", "by": "alice"}),
        json!({"decision": "approve", "by": "bob"}),
    ] {
        let (status, body) = call(&s.server, Method::POST, &path, &s.key, Some(other)).await;
        assert_eq!(status, StatusCode::CONFLICT, "{body}");
        assert_eq!(body["error"]["type"], "conflict");
        assert_eq!(body["approval"]["status"], "approved");
        assert_eq!(body["approval"]["decided_by"], "alice");
    }
    assert_eq!(
        count_events(&s.client, s.agent, "approval.answered").await,
        1
    );
    // Approved, the custom call now waits for the client's result.
    let (_, calls_now) = call(
        &s.server,
        Method::GET,
        &format!("/v1/agents/{}/tool-calls?status=waiting", s.agent),
        &s.key,
        None,
    )
    .await;
    assert_eq!(calls_now["tool_calls"][0]["id"], json!(calls[0]));
    let (_, none_pending) = call(
        &s.server,
        Method::GET,
        &format!("/v1/agents/{}/approvals?status=pending", s.agent),
        &s.key,
        None,
    )
    .await;
    assert_eq!(none_pending["approvals"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denial_completes_the_call_with_an_error_the_model_sees() {
    let s = setup().await;
    let calls = model_step_with_calls(
        &s.client,
        s.agent,
        &[("refund", json!({"order": "7"}), ToolKind::Custom)],
    )
    .await;
    let approval = pending_approval(&s).await;
    let (status, denied) = call(
        &s.server,
        Method::POST,
        &format!("/v1/approvals/{}", approval["id"].as_str().unwrap()),
        &s.key,
        Some(json!({"decision": "deny", "by": "alice", "reason": "over the limit"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{denied}");
    assert_eq!(denied["status"], "denied");
    assert_eq!(denied["reason"], "over the limit");
    let row = s
        .client
        .query_one(
            "SELECT status, is_error, output #>> '{}' FROM holdfast.tool_calls WHERE id = $1",
            &[&calls[0]],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "completed");
    assert!(row.get::<_, bool>(1));
    assert!(row.get::<_, String>(2).contains("over the limit"));
    // The turn goes on: the model is called with the denial.
    let state: String = s
        .client
        .query_one(
            "SELECT state FROM holdfast.agents WHERE id = $1",
            &[&s.agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(state, "ready");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_answer_to_a_question_wins() {
    let s = setup().await;
    let calls = model_step_with_calls(
        &s.client,
        s.agent,
        &[(
            "ask_user",
            json!({"question": "Which colour?"}),
            ToolKind::Question,
        )],
    )
    .await;
    let (status, listed) = call(
        &s.server,
        Method::GET,
        &format!("/v1/agents/{}/questions?status=pending", s.agent),
        &s.key,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    let question = &listed["questions"][0];
    assert_eq!(question["question"], "Which colour?");
    assert_eq!(question["tool_call_id"], json!(calls[0]));
    let path = format!("/v1/questions/{}/answer", question["id"].as_str().unwrap());

    let answer = json!({"answer": "blue", "by": "alice"});
    let (status, answered) =
        call(&s.server, Method::POST, &path, &s.key, Some(answer.clone())).await;
    assert_eq!(status, StatusCode::OK, "{answered}");
    assert_eq!(answered["status"], "answered");
    assert_eq!(answered["answer"], "blue");
    let (status, _) = call(&s.server, Method::POST, &path, &s.key, Some(answer)).await;
    assert_eq!(status, StatusCode::OK);

    let (status, body) = call(
        &s.server,
        Method::POST,
        &path,
        &s.key,
        Some(json!({"answer": "red", "by": "alice"})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["question"]["answer"], "blue");
    let output: Value = s
        .client
        .query_one(
            "SELECT output FROM holdfast.tool_calls WHERE id = $1",
            &[&calls[0]],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(output, json!("blue"));
    assert_eq!(
        count_events(&s.client, s.agent, "question.answered").await,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_projects_approvals_and_questions_are_not_found() {
    let s = setup().await;
    model_step_with_calls(
        &s.client,
        s.agent,
        &[
            ("refund", json!({}), ToolKind::Custom),
            ("ask_user", json!({"question": "ok?"}), ToolKind::Question),
        ],
    )
    .await;
    let approval = pending_approval(&s).await;
    let question: Uuid = s
        .client
        .query_one(
            "SELECT id FROM holdfast.questions WHERE agent_id = $1",
            &[&s.agent],
        )
        .await
        .unwrap()
        .get(0);
    let (_, other_key) = project_key(&s.client).await;
    let approval_id = approval["id"].as_str().unwrap();
    let unknown = Uuid::new_v4();
    for (key, method, path, body) in [
        (
            &other_key,
            Method::GET,
            format!("/v1/agents/{}/approvals", s.agent),
            None,
        ),
        (
            &other_key,
            Method::GET,
            format!("/v1/agents/{}/questions", s.agent),
            None,
        ),
        (
            &other_key,
            Method::POST,
            format!("/v1/approvals/{approval_id}"),
            Some(json!({"decision": "approve", "by": "mallory"})),
        ),
        (
            &other_key,
            Method::POST,
            format!("/v1/questions/{question}/answer"),
            Some(json!({"answer": "yes", "by": "mallory"})),
        ),
        (
            &s.key,
            Method::POST,
            format!("/v1/approvals/{unknown}"),
            Some(json!({"decision": "approve", "by": "alice"})),
        ),
        (
            &s.key,
            Method::POST,
            format!("/v1/questions/{unknown}/answer"),
            Some(json!({"answer": "yes", "by": "alice"})),
        ),
    ] {
        let (status, body) = call(&s.server, method, &path, key, body).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
        assert_eq!(body["error"]["type"], "not_found");
    }
    // Nothing was decided by the other project.
    assert_eq!(pending_approval(&s).await["status"], "pending");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_decisions_are_400_naming_the_field() {
    let s = setup().await;
    model_step_with_calls(
        &s.client,
        s.agent,
        &[("refund", json!({}), ToolKind::Custom)],
    )
    .await;
    let approval = pending_approval(&s).await;
    let path = format!("/v1/approvals/{}", approval["id"].as_str().unwrap());
    for (body, field) in [
        (
            json!({"decision": "maybe", "by": "alice"}),
            Some("decision"),
        ),
        (json!({"decision": "approve", "by": " "}), Some("by")),
        (json!({"decision": "approve"}), None),
    ] {
        let (status, answer) = call(&s.server, Method::POST, &path, &s.key, Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert_eq!(answer["error"]["type"], "invalid_request", "{answer}");
        if let Some(field) = field {
            assert_eq!(answer["error"]["field"], field, "{answer}");
        }
    }
    assert_eq!(pending_approval(&s).await["status"], "pending");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_of_a_cancelled_turn_is_409_cancelled() {
    let s = setup().await;
    model_step_with_calls(
        &s.client,
        s.agent,
        &[("refund", json!({}), ToolKind::Custom)],
    )
    .await;
    let approval = pending_approval(&s).await;
    let (status, cancelled) = call(
        &s.server,
        Method::POST,
        &format!("/v1/agents/{}/cancel", s.agent),
        &s.key,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{cancelled}");
    let (status, body) = call(
        &s.server,
        Method::POST,
        &format!("/v1/approvals/{}", approval["id"].as_str().unwrap()),
        &s.key,
        Some(json!({"decision": "approve", "by": "alice"})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["approval"]["status"], "cancelled");
}
