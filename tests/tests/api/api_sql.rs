//! The SQL behind the HTTP API (`sql/schema/api_keys.sql`, `sql/schema/agents.sql`), called directly: keys,
//! merge patches under the row lock, results and cancels around a lease.

use std::time::Duration;

use holdfast_db::store::{ConfigApply, NewInput};
use holdfast_db::{store, Error};
use holdfast_tests::api_server::waiting_custom_call;
use holdfast_tests::scenario::{agent_state, event_types};
use holdfast_tests::{default_config, project_and_agent, wait_for_lock_wait, TestDb};
use holdfast_wire::domain::{
    AgentState, CancelOutcome, InputMode, InputStatus, ModelStep, NewToolCall, ToolCallStatus,
    ToolKind,
};
use serde_json::json;
use uuid::Uuid;

const TTL: Duration = Duration::from_secs(60);

#[tokio::test]
async fn api_keys_are_stored_hashed_and_revoked_by_id_prefix_or_key() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let created = store::create_api_key(&client, "acme").await.unwrap();
    assert!(created.key.starts_with("hf_") && created.key.len() == 67);
    assert!(created.key.starts_with(&created.prefix));
    let clear: i64 = client
        .query_one(
            "SELECT count(*) FROM holdfast.api_keys k
              WHERE position(convert_to($1, 'UTF8') IN k.key_hash) > 0
                 OR k.prefix = $1 OR k.key_hash <> sha256(convert_to($1, 'UTF8'))",
            &[&created.key],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(clear, 0, "only the hash and the prefix are stored");
    let owner = store::authenticate_api_key(&client, &created.key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(owner.project_id, created.project_id);
    assert_eq!(owner.key_id, created.key_id);
    // A second key for the same project: the project is reused.
    let second = store::create_api_key(&client, "acme").await.unwrap();
    assert_eq!(second.project_id, created.project_id);
    let third = store::create_api_key(&client, "acme").await.unwrap();

    let by_prefix = store::revoke_api_key(&client, &created.prefix)
        .await
        .unwrap();
    assert_eq!(by_prefix.key_id, created.key_id);
    let by_id = store::revoke_api_key(&client, &second.key_id.to_string())
        .await
        .unwrap();
    assert_eq!(by_id.key_id, second.key_id);
    let by_key = store::revoke_api_key(&client, &third.key).await.unwrap();
    assert_eq!(by_key.key_id, third.key_id);
    for key in [&created.key, &second.key, &third.key] {
        assert_eq!(
            store::authenticate_api_key(&client, key).await.unwrap(),
            None
        );
    }
    let again = store::revoke_api_key(&client, &created.prefix)
        .await
        .unwrap();
    assert_eq!(again.revoked_at, by_prefix.revoked_at, "idempotent");
    let unknown = store::revoke_api_key(&client, "hf_nothing").await;
    assert!(matches!(unknown, Err(Error::NotFound(_))), "{unknown:?}");
    let bad_project = store::create_api_key(&client, "no spaces").await;
    assert!(
        matches!(&bad_project, Err(Error::Invalid { field: Some(f), .. }) if f == "project"),
        "{bad_project:?}"
    );
}

#[tokio::test]
async fn a_patch_waiting_on_the_row_lock_applies_to_the_config_it_finds() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (_, agent) = project_and_agent(&client).await;
    let mut first = db.connect().await;
    let tx = first.transaction().await.unwrap();
    store::patch_agent_config(&tx, agent, &json!({"system": "first"}), ConfigApply::Now)
        .await
        .unwrap();
    let second = db.connect().await;
    let waiting = tokio::spawn(async move {
        store::patch_agent_config(
            &second,
            agent,
            &json!({"metadata": {"by": "second"}}),
            ConfigApply::Now,
        )
        .await
    });
    wait_for_lock_wait(&client, &db.name).await;
    tx.commit().await.unwrap();
    let config = waiting.await.unwrap().unwrap();
    assert_eq!(config["system"], "first", "the first patch is kept");
    assert_eq!(config["metadata"], json!({"by": "second"}));
    assert_eq!(config["model"], default_config()["model"]);
    assert_eq!(
        event_types(&client, agent).await,
        vec!["config.updated", "config.updated"]
    );
}

#[tokio::test]
async fn a_result_while_a_worker_holds_the_agent_is_settled_by_its_release() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (_, agent) = project_and_agent(&client).await;
    store::create_input(&client, agent, &json!("go"), None)
        .await
        .unwrap();
    let claim = store::claim_agents(&client, "w", 1, TTL).await.unwrap()[0];
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
    let call = |name: &str, kind| NewToolCall {
        provider_id: format!("toolu_{name}"),
        name: name.into(),
        input: json!({}),
        kind,
    };
    let step = ModelStep {
        input_ids: inputs,
        message: vec![json!({"type": "text", "text": "two tools"})],
        tool_calls: vec![
            call("fetch", ToolKind::External),
            call("lookup", ToolKind::Custom),
        ],
        usage: json!({}),
        stop_reason: Some("tool_use".into()),
        config_version: None,
    };
    store::commit_model_step(&client, claim, &step)
        .await
        .unwrap();
    // The external call is runnable: a worker holds the agent for it.
    let claim = store::claim_agents(&client, "w", 1, TTL).await.unwrap()[0];
    let custom: Uuid = client
        .query_one(
            "SELECT id FROM holdfast.tool_calls WHERE agent_id = $1 AND kind = 'custom'",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    let done = store::submit_tool_result(&client, custom, &json!({"found": true}), false)
        .await
        .unwrap();
    assert_eq!(done.status, ToolCallStatus::Completed);
    assert_eq!(
        agent_state(&client, agent).await,
        "running",
        "the holder's lease is untouched"
    );
    let external: Uuid = client
        .query_one(
            "SELECT id FROM holdfast.tool_calls WHERE agent_id = $1 AND kind = 'external'",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    store::start_tool_call(&client, claim, external)
        .await
        .unwrap();
    store::commit_tool_result(&client, claim, external, &json!("page"), false)
        .await
        .unwrap();
    let state = store::release_agent(&client, claim, None).await.unwrap();
    assert_eq!(
        state,
        AgentState::Ready,
        "both results in: the model answers"
    );
}

#[tokio::test]
async fn cancelling_a_waiting_agent_retires_the_inputs_sent_before_the_cancel() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (_, agent) = project_and_agent(&client).await;
    let call = waiting_custom_call(&client, agent).await;
    // A steering message arrives while the agent waits.
    store::create_input(&client, agent, &json!("actually, stop"), None)
        .await
        .unwrap();
    let outcome = store::request_cancel(&client, agent).await.unwrap();
    assert_eq!(outcome, CancelOutcome::Cancelled);
    let status: String = client
        .query_one(
            "SELECT status FROM holdfast.tool_calls WHERE id = $1",
            &[&call],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(status, "cancelled");
    let types = event_types(&client, agent).await;
    assert_eq!(
        types.last().map(String::as_str),
        Some("turn.cancelled"),
        "the input sent before the cancel does not restart the turn"
    );
    assert_eq!(agent_state(&client, agent).await, "idle");
    let kept: i64 = client
        .query_one(
            "SELECT count(*) FROM holdfast.messages m JOIN holdfast.inputs i ON i.id = m.input_id \
              WHERE i.agent_id = $1 AND i.content = '\"actually, stop\"'",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(kept, 1, "the input is kept in history, not lost");
    let late = store::submit_tool_result(&client, call, &json!("late"), false).await;
    assert!(matches!(late, Err(Error::Conflict(_))), "{late:?}");
    let missing = store::submit_tool_result(&client, Uuid::new_v4(), &json!(1), false).await;
    assert!(matches!(missing, Err(Error::NotFound(_))), "{missing:?}");
}

#[tokio::test]
async fn a_tool_result_batch_checks_each_result_on_its_own_and_commits_the_rest_together() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, first) = project_and_agent(&client).await;
    let mut agents = vec![first];
    for _ in 0..3 {
        agents.push(
            store::create_agent(&client, project, &default_config())
                .await
                .unwrap(),
        );
    }
    let mut calls = Vec::new();
    for agent in &agents {
        calls.push(waiting_custom_call(&client, *agent).await);
    }
    // calls[3] already has its result.
    store::submit_tool_result(&client, calls[3], &json!("first"), false)
        .await
        .unwrap();
    let missing = Uuid::new_v4();
    // In one batch: a result; a second result for the same call; one for a
    // call that already has one; one for no call; an SQL NULL output; and
    // one more good result.
    let rows = client
        .query(
            "SELECT r.ord, r.outcome, r.field, (r.tool_call).status
               FROM holdfast.submit_tool_results(ARRAY[
                    ROW($1::uuid, '\"a\"'::jsonb, false), ROW($1::uuid, '\"again\"'::jsonb, false),
                    ROW($2::uuid, '\"late\"'::jsonb, false), ROW($3::uuid, '1'::jsonb, false),
                    ROW($4::uuid, NULL::jsonb, false), ROW($5::uuid, '{\"b\": 2}'::jsonb, true)
                    ]::holdfast.tool_result[]) r
              ORDER BY r.ord",
            &[&calls[0], &calls[3], &missing, &calls[2], &calls[1]],
        )
        .await
        .unwrap();
    let outcomes: Vec<(i32, String, Option<String>, Option<String>)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    let completed = Some("completed".to_owned());
    assert_eq!(
        outcomes,
        [
            (1, "completed".into(), None, completed.clone()),
            (2, "conflict".into(), None, None),
            (3, "conflict".into(), None, None),
            (4, "not_found".into(), None, None),
            (5, "invalid".into(), Some("output".into()), None),
            (6, "completed".into(), None, completed),
        ]
    );
    let call_state = |call: Uuid| {
        let client = &client;
        async move {
            let row = client
                .query_one(
                    "SELECT status, output FROM holdfast.tool_calls WHERE id = $1",
                    &[&call],
                )
                .await
                .unwrap();
            (
                row.get::<_, String>(0),
                row.get::<_, Option<serde_json::Value>>(1),
            )
        }
    };
    assert_eq!(
        call_state(calls[0]).await,
        ("completed".into(), Some(json!("a"))),
        "the first of two results for one call wins"
    );
    assert_eq!(call_state(calls[3]).await.1, Some(json!("first")));
    assert_eq!(
        call_state(calls[2]).await,
        ("waiting".into(), None),
        "a refused row writes nothing"
    );
    assert_eq!(agent_state(&client, agents[2]).await, "waiting");
    for agent in [agents[0], agents[1]] {
        assert_eq!(agent_state(&client, agent).await, "ready");
        assert_eq!(
            event_types(&client, agent).await.last().map(String::as_str),
            Some("tool_call.completed")
        );
    }
    let transactions: i64 = client
        .query_one(
            "SELECT count(DISTINCT xmin::text) FROM holdfast.tool_calls WHERE id = ANY ($1)",
            &[&vec![calls[0], calls[1]]],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(transactions, 1, "the accepted results share one commit");
}

#[tokio::test]
async fn an_input_batch_checks_each_input_on_its_own_and_commits_the_rest_together() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, first) = project_and_agent(&client).await;
    let mut agents = vec![first];
    for _ in 0..5 {
        agents.push(
            store::create_agent(&client, project, &default_config())
                .await
                .unwrap(),
        );
    }
    let (_, elsewhere) = project_and_agent(&client).await;
    store::archive_agent(&client, agents[1]).await.unwrap();
    let earlier = store::create_input(&client, agents[2], &json!("first"), Some("k"))
        .await
        .unwrap();
    let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
    let image = json!([{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}}]);
    let input = |agent: Uuid, content: serde_json::Value, key: Option<&str>, mode: InputMode| {
        NewInput::new(project, agent, content, key, None, mode)
    };
    // In one batch: an input; one for an archived agent; one for another
    // project's agent; a replay of an earlier input; an image whose files are
    // stored before its key is found reused (the refusal must take them
    // back); empty content; and one more good input.
    let batch = [
        input(agents[0], json!("hello"), None, InputMode::Steer),
        input(agents[1], json!("too late"), None, InputMode::Steer),
        input(elsewhere, json!("not yours"), None, InputMode::Steer),
        input(agents[2], json!("first"), Some("k"), InputMode::Steer),
        input(agents[3], image, Some("k"), InputMode::Steer),
        input(agents[4], json!(""), None, InputMode::Steer),
        input(agents[5], json!("later"), None, InputMode::Queue),
    ];
    let before: Vec<Vec<String>> = {
        let mut all = Vec::new();
        for agent in &agents {
            all.push(event_types(&client, *agent).await);
        }
        all
    };
    let outcomes = store::create_inputs(&client, &batch).await.unwrap();
    assert_eq!(outcomes.len(), batch.len());
    let posted = outcomes[0].as_ref().unwrap();
    assert_eq!(
        (
            posted.input.agent_id,
            &posted.input.content,
            posted.replayed
        ),
        (agents[0], &json!("hello"), false)
    );
    assert!(
        matches!(&outcomes[1], Err(Error::Conflict(m)) if m.contains("archived")),
        "{:?}",
        outcomes[1]
    );
    assert!(
        matches!(&outcomes[2], Err(Error::NotFound(_))),
        "{:?}",
        outcomes[2]
    );
    let replay = outcomes[3].as_ref().unwrap();
    assert_eq!((replay.input.id, replay.replayed), (earlier.input_id, true));
    assert!(
        matches!(&outcomes[4], Err(Error::Invalid { field: Some(f), message })
                 if f == "idempotency_key" && message.starts_with("idempotency_key_reused")),
        "{:?}",
        outcomes[4]
    );
    assert!(
        matches!(&outcomes[5], Err(Error::Invalid { field: Some(f), .. }) if f == "content"),
        "{:?}",
        outcomes[5]
    );
    let queued = outcomes[6].as_ref().unwrap();
    assert_eq!(
        (queued.input.mode, queued.input.status),
        (InputMode::Queue, InputStatus::Pending),
        "an idle agent's queued input opens its turn at once"
    );

    // A refused input wrote nothing: no input, no event, no stored file.
    for refused in [1, 3, 4] {
        assert_eq!(
            event_types(&client, agents[refused]).await,
            before[refused],
            "agent {refused}'s events"
        );
    }
    let written: i64 = client
        .query_one(
            "SELECT (SELECT count(*) FROM holdfast.inputs WHERE agent_id = ANY ($1))
                  + (SELECT count(*) FROM holdfast.attachments WHERE agent_id = ANY ($1))",
            &[&vec![agents[1], agents[3], agents[4], elsewhere]],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(written, 0, "the refused inputs left no row");
    for created in [0, 5] {
        assert_eq!(agent_state(&client, agents[created]).await, "ready");
        let events = event_types(&client, agents[created]).await;
        assert_eq!(
            events[before[created].len()..],
            ["input.received", "turn.started"],
            "agent {created}'s input opened its turn"
        );
    }
    let transactions: i64 = client
        .query_one(
            "SELECT count(DISTINCT xmin::text) FROM holdfast.inputs WHERE id = ANY ($1)",
            &[&vec![posted.input.id, queued.input.id]],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(transactions, 1, "the created inputs share one commit");
}
