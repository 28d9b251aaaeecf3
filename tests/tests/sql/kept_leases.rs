//! A step whose end leaves its agent ready keeps the lease for the agent's
//! next step (settle_agent's p_lease_ttl): no release and re-claim,
//! the same holder at the next epoch, and the step before fenced out.

use std::time::Duration;

use holdfast_db::{store, Error};
use holdfast_tests::{new_agent, project_and_agent, TestDb};
use holdfast_wire::domain::{AgentState, Claim, ModelStep, NewToolCall, ToolKind};
use serde_json::json;
use tokio_postgres::Client;
use uuid::Uuid;

const TTL: Duration = Duration::from_secs(60);

fn step_calling(kind: ToolKind, input_ids: Vec<Uuid>) -> ModelStep {
    ModelStep {
        input_ids,
        message: vec![json!({"type": "text", "text": "calling a tool"})],
        tool_calls: vec![NewToolCall {
            provider_id: "toolu_1".into(),
            name: "lookup".into(),
            input: json!({}),
            kind,
        }],
        usage: json!({"input_tokens": 3, "output_tokens": 2}),
        stop_reason: Some("tool_use".into()),
        config_version: None,
    }
}

fn text_step() -> ModelStep {
    ModelStep {
        input_ids: vec![],
        message: vec![json!({"type": "text", "text": "done"})],
        tool_calls: vec![],
        usage: json!({"input_tokens": 3, "output_tokens": 2}),
        stop_reason: Some("end_turn".into()),
        config_version: None,
    }
}

/// The agent's state, lease owner, epoch and claiming session's pid.
async fn lease(client: &Client, agent: Uuid) -> (String, Option<String>, i64, Option<i32>) {
    let row = client
        .query_one(
            "SELECT state, lease_owner, lease_epoch, lease_pid FROM holdfast.agents WHERE id = $1",
            &[&agent],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2), row.get(3))
}

/// A new agent of a new project, given an input and claimed by `w`.
async fn claimed_agent(client: &Client) -> (Uuid, Claim) {
    let (project, agent) = project_and_agent(client).await;
    store::create_input(client, agent, &json!("go"), None)
        .await
        .unwrap();
    let claim = store::claim_agents(client, "w", 1, TTL).await.unwrap()[0];
    assert_eq!(claim.agent_id, agent, "the one ready agent is claimed");
    (project, claim)
}

async fn commit_keeping(client: &Client, claim: Claim, step: &ModelStep) -> store::SavedModelStep {
    let mut saved =
        store::commit_model_step_batch_keeping_leases(client, &[(claim, step)], Some(TTL))
            .await
            .unwrap();
    saved.remove(0).1.unwrap()
}

async fn pending_call(client: &Client, agent: Uuid) -> Uuid {
    client
        .query_one(
            "SELECT id FROM holdfast.tool_calls WHERE agent_id = $1 AND status = 'pending'",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn a_busy_agent_stays_leased_to_its_holder_and_the_step_before_is_fenced_out() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (_, agent) = project_and_agent(&client).await;
    let input = store::create_input(&client, agent, &json!("go"), None)
        .await
        .unwrap()
        .input_id;
    let first = store::claim_agents(&client, "w", 1, TTL).await.unwrap()[0];
    let (_, _, _, claimed_by) = lease(&client, agent).await;

    // A model step whose call the worker runs: the agent stays ready, so
    // its holder keeps it, one epoch on, on the same session.
    let saved = commit_keeping(
        &client,
        first,
        &step_calling(ToolKind::External, vec![input]),
    )
    .await;
    assert!(saved.lease_kept, "the agent stays ready: the lease is kept");
    // The commit read the agent's context for that next step: the call it
    // saved is pending in it.
    let next = saved
        .next_context
        .expect("a kept lease carries the next context");
    assert_eq!(
        *next,
        store::load_step_context(&client, agent).await.unwrap()
    );
    assert_eq!(next.tool_calls.len(), 1);
    assert_eq!(next.tool_calls[0].status, "pending");
    assert_eq!(
        lease(&client, agent).await,
        (
            "running".into(),
            Some("w".into()),
            first.epoch + 1,
            claimed_by
        ),
        "the same holder and session, at the next epoch"
    );
    let second = Claim {
        epoch: first.epoch + 1,
        ..first
    };

    // The step before is fenced out: its writes and its renewal are refused.
    let call = pending_call(&client, agent).await;
    let stale = store::commit_tool_result(&client, first, call, &json!({"ok": true}), false).await;
    assert!(matches!(stale, Err(Error::LeaseLost(_))), "{stale:?}");
    let stale = store::release_agent(&client, first, None).await;
    assert!(matches!(stale, Err(Error::LeaseLost(_))), "{stale:?}");
    for (claim, renews) in [(first, false), (second, true)] {
        let renewal = store::renew_leases(&client, "w", &[claim], TTL)
            .await
            .unwrap();
        assert_eq!(renewal[0].renewed, renews, "epoch {}", claim.epoch);
    }

    // The tool batch's end keeps it again; then a model step that ends the
    // turn releases it.
    store::commit_tool_result(&client, second, call, &json!({"ok": true}), false)
        .await
        .unwrap();
    let state = store::release_or_keep_agent(&client, second, TTL)
        .await
        .unwrap();
    assert_eq!(state, AgentState::Running);
    let third = Claim {
        epoch: second.epoch + 1,
        ..second
    };
    assert_eq!(lease(&client, agent).await.2, third.epoch);
    let stale = store::commit_model_step_batch_keeping_leases(
        &client,
        &[(second, &text_step())],
        Some(TTL),
    )
    .await
    .unwrap()
    .remove(0)
    .1;
    assert!(matches!(stale, Err(Error::LeaseLost(_))), "{stale:?}");
    let saved = commit_keeping(&client, third, &text_step()).await;
    assert!(!saved.lease_kept, "the turn ended: the agent is released");
    assert!(saved.next_context.is_none(), "no next step here");
    let (state, owner, epoch, _) = lease(&client, agent).await;
    assert_eq!((state.as_str(), owner, epoch), ("idle", None, third.epoch));

    // Each model step has its own epoch, and no claim happened between the
    // steps: the agent never turned ready after its first claim.
    let epochs: Vec<i64> = client
        .query(
            "SELECT epoch FROM holdfast.steps WHERE agent_id = $1 AND kind = 'model' ORDER BY step_seq",
            &[&agent],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(epochs, [first.epoch, third.epoch]);
    let seqs: Vec<i64> = client
        .query(
            "SELECT seq FROM holdfast.events WHERE agent_id = $1 ORDER BY seq",
            &[&agent],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as i64).collect::<Vec<_>>(),
        "gap-free event seqs"
    );
}

/// Shift this session's database clock (`holdfast.now()`) by `offset`.
async fn clock_later(client: &Client, offset: &str) {
    client
        .execute(
            "SELECT set_config('holdfast.clock_offset', $1, false)",
            &[&offset],
        )
        .await
        .unwrap();
}

/// A claimed agent, and another agent of its project made ready after
/// the claim.
async fn claimed_beside_a_ready_agent(client: &Client) -> (Claim, Uuid) {
    let (project, claim) = claimed_agent(client).await;
    let other = new_agent(client, project).await;
    store::create_input(client, other, &json!("me too"), None)
        .await
        .unwrap();
    (claim, other)
}

#[tokio::test]
async fn a_lease_is_released_when_another_agent_waits_to_be_claimed() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (claim, _) = claimed_beside_a_ready_agent(&client).await;
    let agent = claim.agent_id;

    // A second later the other agent has waited longer than the grace.
    clock_later(&client, "1 second").await;
    let saved = commit_keeping(&client, claim, &step_calling(ToolKind::External, vec![])).await;
    assert!(!saved.lease_kept, "another agent waits: claims stay fair");
    let (state, owner, epoch, _) = lease(&client, agent).await;
    assert_eq!((state.as_str(), owner, epoch), ("ready", None, claim.epoch));
}

/// An agent that has been ready for less than `kept_lease_grace()` does
/// not make a step's end give up its lease (it is about to be claimed);
/// once it has waited longer, the next step's end does. The grace is
/// widened to an hour in this test's database, so that the time between
/// two statements cannot decide the outcome, and the wait past it is
/// written into the other agent's row.
#[tokio::test]
async fn a_lease_is_kept_while_another_agent_is_ready_within_the_grace() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    client
        .batch_execute(
            "CREATE OR REPLACE FUNCTION holdfast.kept_lease_grace()
             RETURNS interval LANGUAGE sql IMMUTABLE AS $$ SELECT interval '1 hour' $$",
        )
        .await
        .unwrap();
    let (claim, other) = claimed_beside_a_ready_agent(&client).await;
    let agent = claim.agent_id;

    let saved = commit_keeping(&client, claim, &step_calling(ToolKind::External, vec![])).await;
    assert!(
        saved.lease_kept,
        "the other agent is ready within the grace"
    );
    let kept = Claim {
        agent_id: agent,
        epoch: claim.epoch + 1,
    };
    assert_eq!(lease(&client, agent).await.0, "running");

    // The other agent turned ready two hours ago.
    client
        .execute(
            "UPDATE holdfast.agents SET state_changed_at = state_changed_at - interval '2 hours',
                                        run_after = run_after - interval '2 hours'
              WHERE id = $1",
            &[&other],
        )
        .await
        .unwrap();
    let call = pending_call(&client, agent).await;
    store::start_tool_call(&client, kept, call).await.unwrap();
    let end = store::end_tool_batch(&client, kept, call, &json!("done"), false, TTL)
        .await
        .unwrap();
    assert_eq!(
        end.state,
        AgentState::Ready,
        "the other agent has waited past the grace: the lease is released"
    );
    assert_eq!(lease(&client, other).await.0, "ready");
}

#[tokio::test]
async fn a_lease_is_released_when_the_agent_waits_or_its_next_step_is_not_due() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (_, claim) = claimed_agent(&client).await;
    let agent = claim.agent_id;
    let saved = commit_keeping(&client, claim, &step_calling(ToolKind::Custom, vec![])).await;
    assert!(!saved.lease_kept, "the agent waits on its custom tool");
    assert_eq!(lease(&client, agent).await.0, "waiting");

    // Ready again, with its next step in the future (a durable backoff).
    let (_, claim) = claimed_agent(&client).await;
    let state: String = client
        .query_one(
            "SELECT holdfast.release_agent($1, $2, holdfast.now() + interval '1 hour', interval '1 minute')",
            &[&claim.agent_id, &claim.epoch],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(state, "ready", "a backoff releases the agent");
}

#[tokio::test]
async fn a_batchs_last_result_and_its_end_are_one_write_that_keeps_the_lease() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (_, first) = claimed_agent(&client).await;
    let agent = first.agent_id;
    let saved = commit_keeping(&client, first, &step_calling(ToolKind::External, vec![])).await;
    assert!(saved.lease_kept);
    let second = Claim {
        epoch: first.epoch + 1,
        ..first
    };
    let call = pending_call(&client, agent).await;

    // The step before is refused, and nothing of its result is saved.
    let stale = store::end_tool_batch(&client, first, call, &json!({"ok": 1}), false, TTL).await;
    assert!(matches!(stale, Err(Error::LeaseLost(_))), "{stale:?}");
    assert_eq!(pending_call(&client, agent).await, call);

    let end = store::end_tool_batch(&client, second, call, &json!({"ok": 2}), false, TTL)
        .await
        .unwrap();
    assert_eq!(
        end.state,
        AgentState::Running,
        "the turn goes on: the lease is kept"
    );
    // The batch's end read the agent's context for the model step next:
    // the call's result is in it.
    let next = end
        .next_context
        .expect("a kept lease carries the next context");
    assert_eq!(
        *next,
        store::load_step_context(&client, agent).await.unwrap()
    );
    assert_eq!(next.tool_calls[0].output, Some(json!({"ok": 2})));
    let row = client
        .query_one(
            "SELECT status, output FROM holdfast.tool_calls WHERE id = $1",
            &[&call],
        )
        .await
        .unwrap();
    let (status, output): (String, serde_json::Value) = (row.get(0), row.get(1));
    assert_eq!((status.as_str(), output), ("completed", json!({"ok": 2})));
    assert_eq!(
        lease(&client, agent).await.2,
        second.epoch + 1,
        "held at the next epoch"
    );
}

/// A batch's end saves its last result and settles the agent with one
/// write of the agent row: the settle reserves the tool step's and its
/// event's seqs, so the step, the call's result and its event are the
/// agent's latest, tied by the step's id.
#[tokio::test]
async fn a_batchs_end_writes_the_agent_row_once() {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    let (_, first) = claimed_agent(&client).await;
    let agent = first.agent_id;
    let saved = commit_keeping(&client, first, &step_calling(ToolKind::External, vec![])).await;
    assert!(saved.lease_kept);
    let kept = Claim {
        epoch: first.epoch + 1,
        ..first
    };
    let call = pending_call(&client, agent).await;
    store::start_tool_call(&client, kept, call).await.unwrap();

    // The session's counts not yet sent to the statistics are in the view
    // too: the end's own updates are the difference across it.
    let agent_updates = "SELECT n_tup_upd FROM pg_stat_xact_user_tables
                          WHERE relid = 'holdfast.agents'::regclass";
    let tx = client.transaction().await.unwrap();
    let before: i64 = tx.query_one(agent_updates, &[]).await.unwrap().get(0);
    let state: String = tx
        .query_one(
            "SELECT e.state FROM holdfast.end_tool_batch($1, $2, $3, '\"done\"', false, '1 minute') e",
            &[&agent, &kept.epoch, &call],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(state, "running", "the turn goes on: the lease is kept");
    let after: i64 = tx.query_one(agent_updates, &[]).await.unwrap().get(0);
    assert_eq!(
        after - before,
        1,
        "one UPDATE of the agent row, the settle's"
    );
    tx.commit().await.unwrap();

    let row = client
        .query_one(
            "SELECT s.kind, s.step_seq = a.last_step_seq, e.seq = a.last_event_seq, e.data
               FROM holdfast.tool_calls t
               JOIN holdfast.steps s ON s.agent_id = t.agent_id AND s.id = t.result_step_id
               JOIN holdfast.agents a ON a.id = t.agent_id
               JOIN holdfast.events e ON e.agent_id = t.agent_id AND e.type = 'tool_call.completed'
              WHERE t.id = $1",
            &[&call],
        )
        .await
        .unwrap();
    let (kind, latest_step, latest_event): (String, bool, bool) =
        (row.get(0), row.get(1), row.get(2));
    assert_eq!(
        (kind.as_str(), latest_step, latest_event),
        ("tool", true, true),
        "the tool step and its event are the agent's latest"
    );
    let data: serde_json::Value = row.get(3);
    assert_eq!(data["output"], json!("done"), "{data}");
}
