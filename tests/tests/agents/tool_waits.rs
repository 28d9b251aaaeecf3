//! Tool calls that wait in Postgres: approvals, questions, subagents.

use std::collections::HashSet;
use std::time::Duration;

use futures::future::join_all;
use holdfast_db::{store, Error};
use holdfast_tests::scenario::event_types;
use holdfast_tests::TestDb;
use holdfast_wire::domain::{Claim, ModelStep, NewToolCall, ToolKind};
use serde_json::{json, Value};
use tokio_postgres::Client;
use uuid::Uuid;

const TTL: Duration = Duration::from_secs(60);

async fn claim_one(client: &Client) -> Claim {
    store::claim_agents(client, "w", 1, TTL).await.unwrap()[0]
}

/// An agent whose model asked for `calls` (name, kind); with `config`.
async fn agent_with_calls(
    client: &Client,
    config: Value,
    calls: &[(&str, ToolKind, Value)],
) -> Uuid {
    let project: Uuid = client
        .query_one(
            "SELECT holdfast.ensure_project($1)",
            &[&format!("p{}", Uuid::new_v4().simple())],
        )
        .await
        .unwrap()
        .get(0);
    let agent = store::create_agent(client, project, &config).await.unwrap();
    store::create_input(client, agent, &json!("go"), None)
        .await
        .unwrap();
    let claim = claim_one(client).await;
    let inputs: Vec<Uuid> = client
        .query(
            "SELECT id FROM holdfast.inputs WHERE agent_id = $1",
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
        .map(|(i, (name, kind, input))| NewToolCall {
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
    store::commit_model_step(
        client,
        claim,
        &ModelStep {
            input_ids: inputs,
            message,
            tool_calls,
            usage: json!({}),
            stop_reason: Some("tool_use".into()),
            config_version: None,
        },
    )
    .await
    .unwrap();
    agent
}

async fn state(client: &Client, agent: Uuid) -> String {
    client
        .query_one("SELECT state FROM holdfast.agents WHERE id = $1", &[&agent])
        .await
        .unwrap()
        .get(0)
}

fn config_with(tools: Value, require_for: &[&str]) -> Value {
    json!({
        "model": {"provider": "anthropic", "name": "m"},
        "tools": tools,
        "approvals": {"require_for": require_for},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_different_approval_decisions_race_one_wins_and_repeats_are_idempotent() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let config = config_with(json!([{"type": "custom", "name": "deploy"}]), &["deploy"]);
    let agent = agent_with_calls(&client, config, &[("deploy", ToolKind::Custom, json!({}))]).await;
    assert_eq!(state(&client, agent).await, "waiting");
    let types = event_types(&client, agent).await;
    assert_eq!(
        &types[types.len() - 2..],
        ["tool_call.created", "approval.requested"],
        "the approval follows its call in the timeline"
    );
    let approval: Uuid = client
        .query_one(
            "SELECT id FROM holdfast.approvals WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);

    let racers = [("approve", "ann"), ("deny", "bob")].map(|(decision, by)| {
        let db = &db;
        async move {
            let c = db.connect().await;
            store::answer_approval(&c, approval, decision, by, None).await
        }
    });
    let results = join_all(racers).await;
    let wins = results.iter().filter(|r| r.is_ok()).count();
    let conflicts = results
        .iter()
        .filter(|r| matches!(r, Err(Error::Conflict(_))))
        .count();
    assert_eq!((wins, conflicts), (1, 1), "{results:?}");

    let (status, by): (String, String) = {
        let r = client
            .query_one(
                "SELECT status, decided_by FROM holdfast.approvals WHERE id = $1",
                &[&approval],
            )
            .await
            .unwrap();
        (r.get(0), r.get(1))
    };
    // The same decision by the same person again: accepted, nothing changes.
    let decision = if status == "approved" {
        "approve"
    } else {
        "deny"
    };
    let events_before = event_types(&client, agent).await.len();
    assert_eq!(
        store::answer_approval(&client, approval, decision, &by, None)
            .await
            .unwrap(),
        status
    );
    assert_eq!(event_types(&client, agent).await.len(), events_before);
    // The same decision by someone else: 409.
    assert!(matches!(
        store::answer_approval(&client, approval, decision, "carol", None).await,
        Err(Error::Conflict(_))
    ));
    let answered: i64 = client
        .query_one(
            "SELECT count(*) FROM holdfast.events WHERE agent_id = $1 AND type = 'approval.answered'",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(answered, 1);
}

#[tokio::test]
async fn a_denied_call_completes_with_a_denial_and_readies_the_model() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let config = config_with(json!([{"type": "web_fetch"}]), &["web_fetch"]);
    let agent = agent_with_calls(
        &client,
        config,
        &[("web_fetch", ToolKind::External, json!({"url": "http://x"}))],
    )
    .await;
    let approval: Uuid = client
        .query_one(
            "SELECT id FROM holdfast.approvals WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    store::answer_approval(&client, approval, "deny", "ann", Some("not now"))
        .await
        .unwrap();
    let row = client
        .query_one(
            "SELECT status, output, is_error FROM holdfast.tool_calls WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "completed");
    assert_eq!(
        row.get::<_, Value>(1),
        json!("The user denied this tool call. Reason: not now")
    );
    assert!(row.get::<_, bool>(2));
    assert_eq!(state(&client, agent).await, "ready");
}

#[tokio::test]
async fn an_approved_external_call_becomes_runnable() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let config = config_with(json!([{"type": "web_fetch"}]), &["web_fetch"]);
    let agent = agent_with_calls(
        &client,
        config,
        &[("web_fetch", ToolKind::External, json!({}))],
    )
    .await;
    let approval: Uuid = client
        .query_one(
            "SELECT id FROM holdfast.approvals WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    store::answer_approval(&client, approval, "approve", "ann", None)
        .await
        .unwrap();
    let status: String = client
        .query_one(
            "SELECT status FROM holdfast.tool_calls WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(status, "pending");
    assert_eq!(state(&client, agent).await, "ready");
}

#[tokio::test]
async fn a_question_takes_the_first_answer_and_accepts_only_its_repeat() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let config = config_with(json!([{"type": "ask_user"}]), &[]);
    let agent = agent_with_calls(
        &client,
        config,
        &[(
            "ask_user",
            ToolKind::Question,
            json!({"question": "Which region?"}),
        )],
    )
    .await;
    assert_eq!(state(&client, agent).await, "waiting");
    let (question, text): (Uuid, String) = {
        let r = client
            .query_one(
                "SELECT id, question FROM holdfast.questions WHERE agent_id = $1",
                &[&agent],
            )
            .await
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(text, "Which region?");
    store::answer_question(&client, question, "eu-west", "ann")
        .await
        .unwrap();
    store::answer_question(&client, question, "eu-west", "ann")
        .await
        .unwrap();
    assert!(matches!(
        store::answer_question(&client, question, "us-east", "ann").await,
        Err(Error::Conflict(_))
    ));
    assert!(matches!(
        store::answer_question(&client, question, "eu-west", "bob").await,
        Err(Error::Conflict(_))
    ));
    let output: Value = client
        .query_one(
            "SELECT output FROM holdfast.tool_calls WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(output, json!("eu-west"));
    assert_eq!(state(&client, agent).await, "ready");
    assert!(matches!(
        store::answer_question(&client, Uuid::now_v7(), "x", "ann").await,
        Err(Error::NotFound(_))
    ));
}

#[tokio::test]
async fn a_subagent_is_created_once_and_its_answer_completes_the_parent_call() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let config = config_with(json!([{"type": "spawn_subagent"}]), &[]);
    let parent = agent_with_calls(
        &client,
        config.clone(),
        &[(
            "spawn_subagent",
            ToolKind::Internal,
            json!({"prompt": "count to 3"}),
        )],
    )
    .await;
    let claim = claim_one(&client).await;
    assert_eq!(claim.agent_id, parent);
    let call: Uuid = client
        .query_one(
            "SELECT id FROM holdfast.tool_calls WHERE agent_id = $1",
            &[&parent],
        )
        .await
        .unwrap()
        .get(0);
    let child = store::spawn_subagent(&client, claim, call, &config, "count to 3")
        .await
        .unwrap()
        .expect("within the limits: a child is created");
    // A replay of the same spawn cannot create a second child.
    assert!(matches!(
        store::spawn_subagent(&client, claim, call, &config, "count to 3").await,
        Err(Error::Conflict(_))
    ));
    store::release_agent(&client, claim, None).await.unwrap();
    assert_eq!(state(&client, parent).await, "waiting");
    let children: i64 = client
        .query_one(
            "SELECT count(*) FROM holdfast.agents WHERE parent_tool_call_id = $1",
            &[&call],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(children, 1);

    // The child answers.
    let child_claim = claim_one(&client).await;
    assert_eq!(child_claim.agent_id, child);
    let inputs: Vec<Uuid> = client
        .query(
            "SELECT id FROM holdfast.inputs WHERE agent_id = $1",
            &[&child],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    store::commit_model_step(
        &client,
        child_claim,
        &ModelStep {
            input_ids: inputs,
            message: vec![json!({"type": "text", "text": "1 2 3"})],
            tool_calls: vec![],
            usage: json!({}),
            stop_reason: Some("end_turn".into()),
            config_version: None,
        },
    )
    .await
    .unwrap();
    let row = client
        .query_one(
            "SELECT status, output FROM holdfast.tool_calls WHERE id = $1",
            &[&call],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "completed");
    assert_eq!(row.get::<_, Value>(1), json!("1 2 3"));
    let types = event_types(&client, parent).await;
    assert_eq!(
        types.iter().filter(|t| *t == "subagent.finished").count(),
        1
    );
    assert_eq!(types.iter().filter(|t| *t == "subagent.started").count(), 1);
    assert_eq!(state(&client, parent).await, "ready");
    let unique: HashSet<&String> = types.iter().collect();
    assert!(unique.contains(&"tool_call.completed".to_string()));
}

#[tokio::test]
async fn a_cancelled_turn_cancels_its_approvals_and_a_late_answer_is_409() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let config = config_with(
        json!([{"type": "custom", "name": "deploy"}, {"type": "ask_user"}]),
        &["deploy"],
    );
    let agent = agent_with_calls(
        &client,
        config,
        &[
            ("deploy", ToolKind::Custom, json!({})),
            ("ask_user", ToolKind::Question, json!({"question": "ok?"})),
        ],
    )
    .await;
    // Cancel through the worker path: a claim is not possible while
    // waiting, so cancel the open calls the way complete_cancel does.
    client
        .execute(
            "UPDATE holdfast.tool_calls SET status = 'cancelled' WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap();
    let approval: Uuid = client
        .query_one(
            "SELECT id FROM holdfast.approvals WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    let question: Uuid = client
        .query_one(
            "SELECT id FROM holdfast.questions WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert!(matches!(
        store::answer_approval(&client, approval, "approve", "ann", None).await,
        Err(Error::Conflict(_))
    ));
    assert!(matches!(
        store::answer_question(&client, question, "yes", "ann").await,
        Err(Error::Conflict(_))
    ));
}
