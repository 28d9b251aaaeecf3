//! Races between the reaper and the lease holder, made deterministic: one
//! side holds the agent's row lock in an open transaction, and the test
//! waits until pg_stat_activity shows the other side blocked on it.

use std::time::Duration;

use holdfast_db::store;
use holdfast_tests::{project_and_agent, wait_for_lock_wait, TestDb};
use holdfast_wire::domain::{AgentState, ModelStep, NewToolCall, ToolKind};
use serde_json::json;
use tokio_postgres::Client;
use uuid::Uuid;

const TTL: Duration = Duration::from_secs(60);

/// An agent claimed by `worker` on `client`, with one external tool call
/// marked running (the IO a crash would interrupt).
async fn agent_running_an_external_call(client: &Client, worker: &str) -> (Uuid, i64) {
    let (_, agent) = project_and_agent(client).await;
    store::create_input(client, agent, &json!("go"), None)
        .await
        .unwrap();
    let claim = store::claim_agents(client, worker, 1, TTL).await.unwrap()[0];
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
    let step = ModelStep {
        input_ids: inputs,
        message: vec![json!({"type": "tool_use", "id": "toolu_1", "name": "fetch", "input": {}})],
        tool_calls: vec![NewToolCall {
            provider_id: "toolu_1".into(),
            name: "fetch".into(),
            input: json!({}),
            kind: ToolKind::External,
        }],
        usage: json!({}),
        stop_reason: Some("tool_use".into()),
        config_version: None,
    };
    store::commit_model_step(client, claim, &step)
        .await
        .unwrap();
    let claim = store::claim_agents(client, worker, 1, TTL).await.unwrap()[0];
    let call: Uuid = client
        .query_one(
            "SELECT id FROM holdfast.tool_calls WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    store::start_tool_call(client, claim, call).await.unwrap();
    (agent, claim.epoch)
}

async fn interrupted_events(client: &Client, agent: Uuid) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM holdfast.events WHERE agent_id = $1 AND type = 'tool_call.interrupted'",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_blocked_behind_the_reaper_loses() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (agent, epoch) = agent_running_an_external_call(&client, "w").await;

    // The reaper (its clock past the lease) reaps inside an open transaction.
    let reaper = db.connect().await;
    reaper
        .batch_execute("SET holdfast.clock_offset = '2 minutes'; BEGIN")
        .await
        .unwrap();
    assert_eq!(store::maintenance_tick(&reaper).await.unwrap().expired, 1);

    // The holder's renewal queues behind the reaper's row lock.
    let holder = db.connect().await;
    let claim = holdfast_wire::domain::Claim {
        agent_id: agent,
        epoch,
    };
    let renewal = tokio::spawn(async move {
        store::renew_leases(&holder, "w", &[claim], Duration::from_secs(600)).await
    });
    wait_for_lock_wait(&client, &db.name).await;
    reaper.batch_execute("COMMIT").await.unwrap();

    let renewals = renewal.await.unwrap().unwrap();
    assert!(
        !renewals[0].renewed,
        "the reaper won; the renewal must report the lease lost"
    );
    let row = client
        .query_one(
            "SELECT state, lease_epoch FROM holdfast.agents WHERE id = $1",
            &[&agent],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "ready");
    assert_eq!(row.get::<_, i64>(1), epoch + 1);
    assert_eq!(interrupted_events(&client, agent).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reaper_never_waits_on_or_overrides_a_renewal_in_progress() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (agent, epoch) = agent_running_an_external_call(&client, "w").await;
    let claim = holdfast_wire::domain::Claim {
        agent_id: agent,
        epoch,
    };

    // The renewal holds the row lock, extending the lease far past the
    // reaper's shifted clock.
    let holder = db.connect().await;
    holder.batch_execute("BEGIN").await.unwrap();
    let renewed = store::renew_leases(&holder, "w", &[claim], Duration::from_secs(600))
        .await
        .unwrap();
    assert!(renewed[0].renewed);

    // The reaper skips the locked row instead of waiting for it...
    let reaper = db.connect().await;
    reaper
        .batch_execute("SET holdfast.clock_offset = '2 minutes'")
        .await
        .unwrap();
    assert_eq!(store::maintenance_tick(&reaper).await.unwrap().expired, 0);
    holder.batch_execute("COMMIT").await.unwrap();
    // ...and after the renewal commits, the lease is live: nothing to reap.
    assert_eq!(store::maintenance_tick(&reaper).await.unwrap().expired, 0);
    let row = client
        .query_one(
            "SELECT state, lease_epoch FROM holdfast.agents WHERE id = $1",
            &[&agent],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "running");
    assert_eq!(row.get::<_, i64>(1), epoch);
    assert_eq!(interrupted_events(&client, agent).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_reapers_apply_recovery_once() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (agent, epoch) = agent_running_an_external_call(&client, "w").await;

    let first = db.connect().await;
    let second = db.connect().await;
    for reaper in [&first, &second] {
        reaper
            .batch_execute("SET holdfast.clock_offset = '2 minutes'")
            .await
            .unwrap();
    }
    first.batch_execute("BEGIN").await.unwrap();
    assert_eq!(store::maintenance_tick(&first).await.unwrap().expired, 1);
    // The second reaper runs while the first has not committed: it skips the
    // row the first holds.
    assert_eq!(store::maintenance_tick(&second).await.unwrap().expired, 0);
    first.batch_execute("COMMIT").await.unwrap();
    // And after: nothing left to recover.
    assert_eq!(store::maintenance_tick(&second).await.unwrap().expired, 0);

    assert_eq!(interrupted_events(&client, agent).await, 1);
    let epoch_now: i64 = client
        .query_one(
            "SELECT lease_epoch FROM holdfast.agents WHERE id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(epoch_now, epoch + 1, "the epoch was bumped once");
}

#[tokio::test]
async fn a_drained_release_interrupts_an_in_flight_external_call() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (agent, epoch) = agent_running_an_external_call(&client, "w").await;
    let claim = holdfast_wire::domain::Claim {
        agent_id: agent,
        epoch,
    };
    let state = store::release_agent(&client, claim, None).await.unwrap();
    assert_eq!(
        state,
        AgentState::Ready,
        "the model must hear about the interruption"
    );
    assert_eq!(interrupted_events(&client, agent).await, 1);
    let pending: i64 = client
        .query_one(
            "SELECT count(*) FROM holdfast.tool_calls WHERE agent_id = $1 AND status IN ('pending', 'running')",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(pending, 0, "the call is never rerun");
}
