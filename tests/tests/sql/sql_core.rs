//! The SQL durability core against real Postgres: claims, fencing, leases,
//! atomic commits, idempotent inputs, the reaper, the claim plan, migrations.

use std::collections::HashSet;
use std::time::Duration;

use futures::future::join_all;
use holdfast_db::{migrate, store, Error};
use holdfast_tests::scenario::{agent_state, event_types, pending_inputs};
use holdfast_tests::{new_agent, project_and_agent, wait_for_lock_wait_in, wait_until, TestDb};
use holdfast_wire::domain::{
    AgentState, Claim, InputMode, ModelStep, NewToolCall, StepContext, ToolKind,
};
use serde_json::{json, Value};
use tokio_postgres::{AsyncMessage, Client, GenericClient};
use uuid::Uuid;

const TTL: Duration = Duration::from_secs(60);

fn sqlstate(e: &tokio_postgres::Error) -> String {
    e.code().map(|c| c.code().to_owned()).unwrap_or_default()
}

/// `n` new agents in `project`, each made ready by an input, in one statement.
async fn create_ready_agents(client: &Client, project: Uuid, n: i32) {
    client
        .execute(
            "SELECT holdfast.create_input(holdfast.create_agent($1, $2), '\"go\"')
               FROM generate_series(1, $3)",
            &[&project, &holdfast_tests::default_config(), &n],
        )
        .await
        .unwrap();
}

/// Make `agent` ready by giving it an input.
async fn ready(client: &Client, agent: Uuid) {
    store::create_input(client, agent, &json!("hello"), None)
        .await
        .unwrap();
}

async fn count(client: &Client, sql: &str, agent: Uuid) -> i64 {
    client.query_one(sql, &[&agent]).await.unwrap().get(0)
}

fn text_step(input_ids: Vec<Uuid>) -> ModelStep {
    ModelStep {
        input_ids,
        message: vec![json!({"type": "text", "text": "hi there"})],
        tool_calls: vec![],
        usage: json!({"input_tokens": 3, "output_tokens": 2}),
        stop_reason: Some("end_turn".into()),
        config_version: None,
    }
}

fn tool_step(input_ids: Vec<Uuid>, kinds: &[ToolKind]) -> ModelStep {
    ModelStep {
        input_ids,
        message: vec![json!({"type": "text", "text": "calling tools"})],
        tool_calls: kinds
            .iter()
            .enumerate()
            .map(|(i, kind)| NewToolCall {
                provider_id: format!("toolu_{i}"),
                name: format!("tool_{i}"),
                input: json!({"i": i}),
                kind: *kind,
            })
            .collect(),
        usage: json!({}),
        stop_reason: Some("tool_use".into()),
        config_version: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_concurrent_claimers_never_share_an_agent_and_claim_all() {
    let db = TestDb::new().await;
    let setup = db.connect().await;
    let (project, _) = project_and_agent(&setup).await;
    create_ready_agents(&setup, project, 1000).await;

    let claimers = (0..8).map(|w| {
        let db = &db;
        async move {
            let client = db.connect().await;
            let mut mine = Vec::new();
            loop {
                let batch = store::claim_agents(&client, &format!("w{w}"), 7, TTL)
                    .await
                    .unwrap();
                if batch.is_empty() {
                    break;
                }
                mine.extend(batch.into_iter().map(|c| c.agent_id));
            }
            mine
        }
    });
    let results = join_all(claimers).await;
    let mut seen = HashSet::new();
    for id in results.iter().flatten() {
        assert!(seen.insert(*id), "agent {id} claimed twice");
    }
    assert_eq!(seen.len(), 1000, "every ready agent is claimed");
    assert!(
        results.iter().filter(|r| !r.is_empty()).count() > 1,
        "claims were spread"
    );
    let held: i64 = setup
        .query_one(
            "SELECT count(*) FROM holdfast.agents WHERE state = 'running' AND lease_owner IS NOT NULL",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(held, 1000);
}

#[tokio::test]
async fn writes_with_a_superseded_epoch_fail_hf001_and_leave_nothing() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (_, agent) = project_and_agent(&client).await;
    ready(&client, agent).await;
    let old = store::claim_agents(&client, "w-old", 1, TTL).await.unwrap()[0];
    let inputs = pending_inputs(&client, agent).await;

    // The old lease expires (the clock moves past it) and maintenance
    // releases it; a new worker claims with a bumped epoch.
    let reaper = db.connect().await;
    reaper
        .batch_execute("SET holdfast.clock_offset = '2 minutes'")
        .await
        .unwrap();
    let report = store::maintenance_tick(&reaper).await.unwrap();
    assert_eq!(report.expired, 1);
    let new = store::claim_agents(&reaper, "w-new", 1, TTL).await.unwrap()[0];
    assert_eq!(
        new.epoch,
        old.epoch + 2,
        "reap and re-claim both bump the epoch"
    );

    let events_before = count(
        &client,
        "SELECT count(*) FROM holdfast.events WHERE agent_id = $1",
        agent,
    )
    .await;
    // Every fenced write with the old epoch is refused.
    let commit = store::commit_model_step(&client, old, &text_step(inputs.clone())).await;
    assert!(
        matches!(commit, Err(Error::LeaseLost(_))),
        "commit: {commit:?}"
    );
    let release = store::release_agent(&client, old, None).await;
    assert!(
        matches!(release, Err(Error::LeaseLost(_))),
        "release: {release:?}"
    );
    let renew = store::renew_leases(&client, "w-old", &[old], TTL)
        .await
        .unwrap();
    assert!(
        !renew[0].renewed,
        "renewal of a superseded lease reports it lost"
    );
    let raw = client
        .query(
            "SELECT holdfast.release_agent($1, $2)",
            &[&agent, &old.epoch],
        )
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&raw), "HF001");

    // Nothing the old holder tried is visible; the new holder is intact.
    assert_eq!(
        count(
            &client,
            "SELECT count(*) FROM holdfast.events WHERE agent_id = $1",
            agent
        )
        .await,
        events_before
    );
    assert_eq!(
        count(
            &client,
            "SELECT count(*) FROM holdfast.messages WHERE agent_id = $1",
            agent
        )
        .await,
        0
    );
    assert_eq!(
        count(
            &client,
            "SELECT count(*) FROM holdfast.steps WHERE agent_id = $1",
            agent
        )
        .await,
        0
    );
    let row = client
        .query_one(
            "SELECT state, lease_owner, lease_epoch FROM holdfast.agents WHERE id = $1",
            &[&agent],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "running");
    assert_eq!(row.get::<_, String>(1), "w-new");
    assert_eq!(row.get::<_, i64>(2), new.epoch);
    // The new holder's commit goes through.
    store::commit_model_step(&reaper, new, &text_step(inputs))
        .await
        .unwrap();
}

#[tokio::test]
async fn renew_leases_extends_live_leases_and_reports_lost_ones() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, a) = project_and_agent(&client).await;
    let b = new_agent(&client, project).await;
    ready(&client, a).await;
    ready(&client, b).await;
    let claims = store::claim_agents(&client, "w1", 2, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(claims.len(), 2);
    let (live, lost) = (claims[0], claims[1]);
    // Lose one lease: it is released by its holder's other task... here, by a
    // release with the right epoch (as a drain would).
    store::release_agent(&client, lost, None).await.unwrap();

    let before: chrono::DateTime<chrono::Utc> = client
        .query_one(
            "SELECT lease_expires_at FROM holdfast.agents WHERE id = $1",
            &[&live.agent_id],
        )
        .await
        .unwrap()
        .get(0);
    let renewals = store::renew_leases(&client, "w1", &[live, lost], TTL)
        .await
        .unwrap();
    let by_id = |id: Uuid| renewals.iter().find(|r| r.agent_id == id).unwrap();
    assert!(by_id(live.agent_id).renewed);
    assert!(!by_id(lost.agent_id).renewed);
    let after: chrono::DateTime<chrono::Utc> = client
        .query_one(
            "SELECT lease_expires_at FROM holdfast.agents WHERE id = $1",
            &[&live.agent_id],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        after > before + chrono::Duration::seconds(30),
        "expiry moved by the new ttl"
    );
    // Another worker's name never renews a lease it does not hold.
    let foreign = store::renew_leases(&client, "w2", &[live], TTL)
        .await
        .unwrap();
    assert!(!foreign[0].renewed);
}

#[tokio::test]
async fn a_model_step_commit_killed_mid_transaction_leaves_nothing() {
    let db = TestDb::new().await;
    let setup = db.connect().await;
    let (_, agent) = project_and_agent(&setup).await;
    ready(&setup, agent).await;
    let worker = db.connect().await;
    let claim = store::claim_agents(&worker, "w", 1, TTL).await.unwrap()[0];
    let inputs = pending_inputs(&setup, agent).await;
    let events_before = count(
        &setup,
        "SELECT count(*) FROM holdfast.events WHERE agent_id = $1",
        agent,
    )
    .await;

    let pid: i32 = worker
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    worker.batch_execute("BEGIN").await.unwrap();
    store::commit_model_step(
        &worker,
        claim,
        &tool_step(inputs, &[ToolKind::External, ToolKind::Custom]),
    )
    .await
    .unwrap();
    // The session dies before COMMIT.
    setup
        .execute("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap();
    assert!(worker.batch_execute("COMMIT").await.is_err());

    for (table, sql) in [
        (
            "messages",
            "SELECT count(*) FROM holdfast.messages WHERE agent_id = $1",
        ),
        (
            "tool_calls",
            "SELECT count(*) FROM holdfast.tool_calls WHERE agent_id = $1",
        ),
        (
            "steps",
            "SELECT count(*) FROM holdfast.steps WHERE agent_id = $1",
        ),
    ] {
        assert_eq!(count(&setup, sql, agent).await, 0, "{table} is empty");
    }
    assert_eq!(
        count(
            &setup,
            "SELECT count(*) FROM holdfast.events WHERE agent_id = $1",
            agent
        )
        .await,
        events_before
    );
    assert_eq!(
        count(
            &setup,
            "SELECT count(*) FROM holdfast.inputs WHERE agent_id = $1 AND consumed_at IS NULL",
            agent
        )
        .await,
        1,
        "the input is still pending"
    );
}

/// Claim `n` fresh ready agents of one project for worker "w", in agent id
/// order (the order a group commit locks and writes them in).
async fn claimed_agents(client: &Client, n: usize) -> Vec<Claim> {
    let (project, first) = project_and_agent(client).await;
    ready(client, first).await;
    for _ in 1..n {
        let agent = new_agent(client, project).await;
        ready(client, agent).await;
    }
    let mut claims = store::claim_agents(client, "w", n as i32, TTL)
        .await
        .unwrap();
    assert_eq!(claims.len(), n);
    claims.sort_by_key(|c| c.agent_id);
    claims
}

/// What a commit leaves on an agent: (steps, messages, events, pending inputs).
async fn written(client: &Client, agent: Uuid) -> (i64, i64, i64, i64) {
    (
        count(
            client,
            "SELECT count(*) FROM holdfast.steps WHERE agent_id = $1",
            agent,
        )
        .await,
        count(
            client,
            "SELECT count(*) FROM holdfast.messages WHERE agent_id = $1",
            agent,
        )
        .await,
        count(
            client,
            "SELECT count(*) FROM holdfast.events WHERE agent_id = $1",
            agent,
        )
        .await,
        count(
            client,
            "SELECT count(*) FROM holdfast.inputs WHERE agent_id = $1 AND consumed_at IS NULL",
            agent,
        )
        .await,
    )
}

/// (state, lease_owner, lease_epoch) of an agent.
async fn lease(client: &Client, agent: Uuid) -> (String, Option<String>, i64) {
    let row = client
        .query_one(
            "SELECT state, lease_owner, lease_epoch FROM holdfast.agents WHERE id = $1",
            &[&agent],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

#[tokio::test]
async fn a_group_commit_with_one_lost_lease_commits_the_others_and_refuses_that_one() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let claims = claimed_agents(&client, 3).await;
    // The middle agent's lease is lost: released (as a drain would) and
    // claimed by another worker at a new epoch.
    let lost = claims[1];
    store::release_agent(&client, lost, None).await.unwrap();
    let taken = store::claim_agents(&client, "w-other", 1, TTL)
        .await
        .unwrap();
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].agent_id, lost.agent_id);
    let before = written(&client, lost.agent_id).await;

    let mut steps = Vec::new();
    for claim in &claims {
        steps.push(text_step(pending_inputs(&client, claim.agent_id).await));
    }
    let batch: Vec<(Claim, &ModelStep)> = claims.iter().copied().zip(&steps).collect();
    let outcomes = store::commit_model_step_batch(&client, &batch)
        .await
        .unwrap();

    assert_eq!(outcomes.len(), 3, "one outcome per step: {outcomes:?}");
    for (agent, outcome) in &outcomes {
        if *agent == lost.agent_id {
            assert!(
                matches!(outcome, Err(Error::LeaseLost(_))),
                "the lost lease is refused: {outcome:?}"
            );
        } else {
            assert!(outcome.is_ok(), "{agent} commits: {outcome:?}");
            assert_eq!(
                written(&client, *agent).await,
                (1, 2, 4, 0),
                "one step; the input and the answer; input.received, turn.started, \
                 model.response, turn.completed; the input consumed"
            );
            assert_eq!(agent_state(&client, *agent).await, "idle");
        }
    }
    // Nothing was written for the lost agent; its new holder is untouched.
    assert_eq!(written(&client, lost.agent_id).await, before);
    assert_eq!(
        lease(&client, lost.agent_id).await,
        ("running".into(), Some("w-other".into()), taken[0].epoch)
    );
    // The committed steps share one transaction.
    let transactions = client
        .query_one(
            "SELECT count(DISTINCT xmin::text) FROM holdfast.steps WHERE agent_id = ANY ($1)",
            &[&vec![claims[0].agent_id, claims[2].agent_id]],
        )
        .await
        .unwrap()
        .get::<_, i64>(0);
    assert_eq!(transactions, 1);
}

#[tokio::test]
async fn a_group_commit_refuses_an_invalid_row_only_for_its_agent() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let claims = claimed_agents(&client, 3).await;
    let mut before = Vec::new();
    for claim in &claims {
        before.push(written(&client, claim.agent_id).await);
    }
    // Row 0: a message that is no array of blocks; row 1: well formed;
    // row 2: a tool call of an unknown kind.
    let messages = [
        json!({"type": "text"}),
        json!([{"type": "text", "text": "ok"}]),
        json!([]),
    ];
    let tool_calls = [
        json!([]),
        json!([]),
        json!([{"provider_id": "toolu_1", "name": "t", "kind": "teleport"}]),
    ];
    // The three rows in one batch, each with the inputs its agent has.
    let outcomes = client
        .query(
            "SELECT r.agent_id, r.outcome, r.field FROM holdfast.commit_model_step_batch(ARRAY(
                 SELECT ROW(c.agent, c.epoch,
                            ARRAY(SELECT i.id FROM holdfast.inputs i
                                   WHERE i.agent_id = c.agent AND i.consumed_at IS NULL),
                            c.message, c.tool_calls, '{}', 'end_turn', NULL)::holdfast.model_step
                   FROM unnest($1::uuid[], $2::bigint[], $3::jsonb[], $4::jsonb[])
                        AS c (agent, epoch, message, tool_calls))) r",
            &[
                &claims.iter().map(|c| c.agent_id).collect::<Vec<_>>(),
                &claims.iter().map(|c| c.epoch).collect::<Vec<_>>(),
                &messages.to_vec(),
                &tool_calls.to_vec(),
            ],
        )
        .await
        .unwrap();
    let outcomes: Vec<(Uuid, String, Option<String>)> = outcomes
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        outcomes,
        [
            (claims[0].agent_id, "invalid".into(), Some("message".into())),
            (claims[1].agent_id, "committed".into(), None),
            (
                claims[2].agent_id,
                "invalid".into(),
                Some("tool_calls[0].kind".into())
            ),
        ]
    );
    // The refused agents have nothing new and keep their leases (the worker
    // decides what to do, as after a single commit's HF422).
    for i in [0, 2] {
        let agent = claims[i].agent_id;
        assert_eq!(written(&client, agent).await, before[i], "row {i}");
        assert_eq!(
            lease(&client, agent).await,
            ("running".into(), Some("w".into()), claims[i].epoch)
        );
    }
    assert_eq!(written(&client, claims[1].agent_id).await.0, 1);
    assert_eq!(agent_state(&client, claims[1].agent_id).await, "idle");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_commit_killed_mid_transaction_leaves_nothing() {
    let db = TestDb::new().await;
    let setup = db.connect().await;
    let claims = claimed_agents(&setup, 2).await;
    let mut steps = Vec::new();
    let mut before = Vec::new();
    for claim in &claims {
        steps.push(tool_step(
            pending_inputs(&setup, claim.agent_id).await,
            &[ToolKind::External, ToolKind::Custom],
        ));
        before.push(written(&setup, claim.agent_id).await);
    }
    // Hold the second agent's input: the batch writes the first agent's
    // step, then waits to consume that input, mid-transaction.
    let blocker = db.connect().await;
    blocker.batch_execute("BEGIN").await.unwrap();
    blocker
        .execute(
            "SELECT 1 FROM holdfast.inputs WHERE agent_id = $1 FOR UPDATE",
            &[&claims[1].agent_id],
        )
        .await
        .unwrap();

    let worker = db.connect().await;
    let pid: i32 = worker
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let batch_claims = claims.clone();
    let commit = tokio::spawn(async move {
        let batch: Vec<(Claim, &ModelStep)> = batch_claims.iter().copied().zip(&steps).collect();
        store::commit_model_step_batch(&worker, &batch)
            .await
            .map(|_| ())
    });
    wait_for_lock_wait_in(&setup, &db.name, "%commit_model_step_batch%").await;
    let wrote_a_step: bool = setup
        .query_one(
            "SELECT count(*) > 0 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
              WHERE l.pid = $1 AND c.relname = 'tool_calls' AND l.mode = 'RowExclusiveLock'",
            &[&pid],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        wrote_a_step,
        "the batch has written the first agent's tool calls"
    );
    // The session dies before COMMIT.
    setup
        .execute("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap();
    assert!(
        commit.await.unwrap().is_err(),
        "the batch failed as a whole"
    );
    blocker.batch_execute("ROLLBACK").await.unwrap();

    for (i, claim) in claims.iter().enumerate() {
        assert_eq!(
            written(&setup, claim.agent_id).await,
            before[i],
            "agent {i}"
        );
        assert_eq!(
            count(
                &setup,
                "SELECT count(*) FROM holdfast.tool_calls WHERE agent_id = $1",
                claim.agent_id
            )
            .await,
            0
        );
        assert_eq!(
            lease(&setup, claim.agent_id).await,
            ("running".into(), Some("w".into()), claim.epoch),
            "agent {i} is still leased, its step unsaved"
        );
    }
}

#[tokio::test]
async fn a_model_step_commit_saves_history_tool_calls_and_events_together() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (_, agent) = project_and_agent(&client).await;
    ready(&client, agent).await;
    let claim = store::claim_agents(&client, "w", 1, TTL).await.unwrap()[0];
    let inputs = pending_inputs(&client, agent).await;
    store::commit_model_step(
        &client,
        claim,
        &tool_step(inputs, &[ToolKind::External, ToolKind::Custom]),
    )
    .await
    .unwrap();

    let roles: Vec<String> = client
        .query(
            "SELECT role FROM holdfast.messages WHERE agent_id = $1 ORDER BY seq",
            &[&agent],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(roles, ["user", "assistant"]);
    let statuses: Vec<String> = client
        .query(
            "SELECT status FROM holdfast.tool_calls WHERE agent_id = $1 ORDER BY position",
            &[&agent],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(statuses, ["pending", "waiting"]);
    let types = event_types(&client, agent).await;
    assert_eq!(
        types,
        [
            "input.received",
            "turn.started",
            "model.response",
            "tool_call.created",
            "tool_call.created"
        ]
    );
    // A runnable external call makes the agent ready for a tool batch.
    assert_eq!(agent_state(&client, agent).await, "ready");
}

/// `agent`'s claim among those of every ready agent.
async fn claim_of(client: &Client, agent: Uuid) -> Claim {
    let claims = store::claim_agents(client, "w", 100, TTL).await.unwrap();
    *claims
        .iter()
        .find(|c| c.agent_id == agent)
        .expect("the agent is ready")
}

/// A claim of `agent` after one failed step (released at once, counted).
async fn claim_after_a_failure(client: &Client, agent: Uuid) -> Claim {
    let claim = claim_of(client, agent).await;
    let retrying = store::fail_step(client, claim, "boom", Duration::ZERO, 5)
        .await
        .unwrap();
    assert!(retrying);
    assert_eq!(step_failures(client, agent).await, 1);
    claim_of(client, agent).await
}

async fn step_failures(client: &Client, agent: Uuid) -> i32 {
    client
        .query_one(
            "SELECT step_failures FROM holdfast.agents WHERE id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0)
}

/// A step that ends well (not by fail_step) ends the run of failed steps,
/// whichever way it ends: every model step commit (an answer, a runnable
/// call, a call waiting on a client, a question that opens a wait; single
/// and grouped), tool results and the release after them, a model retry,
/// an interrupt, a compaction, a failed turn and a cancelled one.
#[tokio::test]
async fn every_way_a_step_ends_resets_the_failure_count() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, _) = project_and_agent(&client).await;
    let steps: [fn(Vec<Uuid>) -> ModelStep; 4] = [
        text_step,
        |inputs| tool_step(inputs, &[ToolKind::External]),
        |inputs| tool_step(inputs, &[ToolKind::Custom]),
        |inputs| tool_step(inputs, &[ToolKind::Question]),
    ];
    for (n, step) in steps.iter().enumerate() {
        for grouped in [false, true] {
            let agent = new_agent(&client, project).await;
            ready(&client, agent).await;
            let claim = claim_after_a_failure(&client, agent).await;
            let step = step(pending_inputs(&client, agent).await);
            if grouped {
                let outcomes = store::commit_model_step_batch(&client, &[(claim, &step)])
                    .await
                    .unwrap();
                assert!(outcomes[0].1.is_ok(), "{:?}", outcomes[0].1);
            } else {
                store::commit_model_step(&client, claim, &step)
                    .await
                    .unwrap();
            }
            assert_eq!(
                step_failures(&client, agent).await,
                0,
                "model step {n}, grouped: {grouped}"
            );
        }
    }

    // Tool results, then the release that ends the tool step.
    let agent = new_agent(&client, project).await;
    ready(&client, agent).await;
    let claim = claim_of(&client, agent).await;
    let inputs = pending_inputs(&client, agent).await;
    store::commit_model_step(&client, claim, &tool_step(inputs, &[ToolKind::External]))
        .await
        .unwrap();
    let claim = claim_after_a_failure(&client, agent).await;
    let call: Uuid = client
        .query_one(
            "SELECT id FROM holdfast.tool_calls WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    store::start_tool_call(&client, claim, call).await.unwrap();
    store::commit_tool_result(&client, claim, call, &json!("42"), false)
        .await
        .unwrap();
    store::release_agent(&client, claim, None).await.unwrap();
    assert_eq!(step_failures(&client, agent).await, 0, "tool results");

    let agent = new_agent(&client, project).await;
    ready(&client, agent).await;
    let claim = claim_after_a_failure(&client, agent).await;
    let inputs = pending_inputs(&client, agent).await;
    let retrying = store::commit_model_retry(
        &client,
        claim,
        &json!({"type": "overloaded_error", "message": "busy"}),
        Duration::ZERO,
        5,
        &inputs,
    )
    .await
    .unwrap();
    assert!(retrying);
    assert_eq!(step_failures(&client, agent).await, 0, "model retry");

    let agent = new_agent(&client, project).await;
    ready(&client, agent).await;
    let claim = claim_after_a_failure(&client, agent).await;
    store::commit_model_interrupt(&client, claim, &[])
        .await
        .unwrap();
    assert_eq!(step_failures(&client, agent).await, 0, "interrupt");

    let agent = new_agent(&client, project).await;
    ready(&client, agent).await;
    let claim = claim_after_a_failure(&client, agent).await;
    store::commit_compaction(&client, claim, "the story so far", 1, &json!({}))
        .await
        .unwrap();
    assert_eq!(step_failures(&client, agent).await, 0, "compaction");

    let agent = new_agent(&client, project).await;
    ready(&client, agent).await;
    let claim = claim_after_a_failure(&client, agent).await;
    let inputs = pending_inputs(&client, agent).await;
    store::fail_turn(&client, claim, "authentication_error", "bad key", &inputs)
        .await
        .unwrap();
    assert_eq!(step_failures(&client, agent).await, 0, "failed turn");

    let agent = new_agent(&client, project).await;
    ready(&client, agent).await;
    let claim = claim_after_a_failure(&client, agent).await;
    store::request_cancel(&client, agent).await.unwrap();
    store::complete_cancel(&client, claim).await.unwrap();
    assert_eq!(step_failures(&client, agent).await, 0, "cancelled turn");
}

/// The state decision names a real state, and says apart whether a turn
/// opens: an idle agent with an unconsumed input is `ready` and opens a
/// turn; once the turn is open it is `ready` without opening another; an
/// input the caller is about to consume opens nothing.
#[tokio::test]
async fn decide_next_state_returns_a_state_and_whether_a_turn_opens() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (_, agent) = project_and_agent(&client).await;
    let decide = |turn_open: bool, consumed: Vec<Uuid>| {
        let client = &client;
        async move {
            let row = client
                .query_one(
                    "SELECT state, opens_turn
                       FROM holdfast.decide_next_state($1, $2, false, false, $3)",
                    &[&agent, &turn_open, &consumed],
                )
                .await
                .unwrap();
            (
                row.get::<_, String>("state"),
                row.get::<_, bool>("opens_turn"),
            )
        }
    };
    assert_eq!(decide(false, vec![]).await, ("idle".to_owned(), false));
    let input = store::create_input(&client, agent, &json!("hello"), None)
        .await
        .unwrap()
        .input_id;
    assert_eq!(decide(false, vec![]).await, ("ready".to_owned(), true));
    assert_eq!(decide(true, vec![]).await, ("ready".to_owned(), false));
    assert_eq!(decide(false, vec![input]).await, ("idle".to_owned(), false));

    // The settle with only the agent's id (every other argument at its
    // default) opened that turn when the input came.
    let settled: String = client
        .query_one("SELECT state FROM holdfast.settle_agent($1)", &[&agent])
        .await
        .unwrap()
        .get("state");
    assert_eq!(settled, "ready");
    let turns: i64 = client
        .query_one(
            "SELECT count(*) FROM holdfast.events WHERE agent_id = $1 AND type = 'turn.started'",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(turns, 1, "a settle of an open turn opens no other");
}

/// The agent row of a committed model step is written once: the step's
/// counters, its usage, the state, the release and the last turn all in
/// the settle's one UPDATE (no trigger writes the row again per turn
/// event). Counted as row versions the step leaves: one per commit that
/// ends a turn and opens the next, and its last_turn is the new turn's.
#[tokio::test]
async fn a_model_step_that_ends_a_turn_and_opens_the_next_updates_the_agent_row_once() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (_, agent) = project_and_agent(&client).await;
    ready(&client, agent).await;
    let claim = claim_of(&client, agent).await;
    let inputs = pending_inputs(&client, agent).await;
    // An input that arrives during the call opens the next turn at the commit.
    store::create_input(&client, agent, &json!("and then?"), None)
        .await
        .unwrap();
    let updates = "SELECT n_tup_upd FROM pg_stat_xact_user_tables
                    WHERE schemaname = 'holdfast' AND relname = 'agents'";
    client.batch_execute("BEGIN").await.unwrap();
    let before: i64 = client.query_one(updates, &[]).await.unwrap().get(0);
    store::commit_model_step(&client, claim, &text_step(inputs))
        .await
        .unwrap();
    let after: i64 = client.query_one(updates, &[]).await.unwrap().get(0);
    client.batch_execute("COMMIT").await.unwrap();
    assert_eq!(after - before, 1, "agent row updates by one model step");
    let events = event_types(&client, agent).await;
    assert!(
        events.ends_with(&["model.response", "turn.completed", "turn.started"].map(String::from)),
        "{events:?}"
    );
    let row = client
        .query_one(
            "SELECT turn_seq, last_turn_started_at IS NOT NULL, last_turn_ended_at IS NULL,
                    last_turn_outcome IS NULL
               FROM holdfast.agents WHERE id = $1",
            &[&agent],
        )
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, i64>(0), row.get(1), row.get(2), row.get(3)),
        (2, true, true, true),
        "the last turn is the new one, running"
    );
}

#[tokio::test]
async fn a_turn_runs_from_input_through_tools_to_completion() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (_, agent) = project_and_agent(&client).await;
    ready(&client, agent).await;

    let claim = store::claim_agents(&client, "w", 1, TTL).await.unwrap()[0];
    let inputs = pending_inputs(&client, agent).await;
    store::commit_model_step(&client, claim, &tool_step(inputs, &[ToolKind::External]))
        .await
        .unwrap();

    let claim = store::claim_agents(&client, "w", 1, TTL).await.unwrap()[0];
    let call: Uuid = client
        .query_one(
            "SELECT id FROM holdfast.tool_calls WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    store::start_tool_call(&client, claim, call).await.unwrap();
    store::commit_tool_result(&client, claim, call, &json!("42"), false)
        .await
        .unwrap();
    // A second result for the same call is refused.
    let again = store::commit_tool_result(&client, claim, call, &json!("43"), false).await;
    assert!(matches!(again, Err(Error::Conflict(_))), "{again:?}");
    let state = store::release_agent(&client, claim, None).await.unwrap();
    assert_eq!(
        state,
        AgentState::Ready,
        "all results in: the model must answer"
    );

    let claim = store::claim_agents(&client, "w", 1, TTL).await.unwrap()[0];
    store::commit_model_step(&client, claim, &text_step(vec![]))
        .await
        .unwrap();
    assert_eq!(agent_state(&client, agent).await, "idle");
    let last: String = client
        .query_one(
            "SELECT type FROM holdfast.events WHERE agent_id = $1 ORDER BY seq DESC LIMIT 1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(last, "turn.completed");
    // Gap-free sequence 1..n.
    let gaps: i64 = client
        .query_one(
            "SELECT count(*) FROM (SELECT seq, row_number() OVER (ORDER BY seq) AS n
               FROM holdfast.events WHERE agent_id = $1) s WHERE seq <> n",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(gaps, 0);
}

#[tokio::test]
async fn an_input_during_a_step_is_kept_for_the_next_model_call() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (_, agent) = project_and_agent(&client).await;
    ready(&client, agent).await;
    let claim = store::claim_agents(&client, "w", 1, TTL).await.unwrap()[0];
    let seen = pending_inputs(&client, agent).await;
    // A steering message arrives while the model call runs.
    store::create_input(&client, agent, &json!("also this"), None)
        .await
        .unwrap();
    store::commit_model_step(&client, claim, &text_step(seen))
        .await
        .unwrap();
    assert_eq!(
        pending_inputs(&client, agent).await.len(),
        1,
        "the late input is not consumed"
    );
    assert_eq!(
        agent_state(&client, agent).await,
        "ready",
        "a new turn starts for it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn create_input_is_idempotent_per_key_even_from_twenty_connections() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (_, agent) = project_and_agent(&client).await;

    let first = store::create_input(&client, agent, &json!("hi"), Some("k1"))
        .await
        .unwrap();
    let replay = store::create_input(&client, agent, &json!("hi"), Some("k1"))
        .await
        .unwrap();
    assert!(!first.replayed);
    assert!(replay.replayed);
    assert_eq!(first.input_id, replay.input_id);
    let reused = store::create_input(&client, agent, &json!("other"), Some("k1")).await;
    match reused {
        Err(Error::Invalid { field, message }) => {
            assert_eq!(field.as_deref(), Some("idempotency_key"));
            assert!(message.contains("idempotency_key_reused"), "{message}");
        }
        other => panic!("expected HF422, got {other:?}"),
    }

    let racers = (0..20).map(|_| {
        let db = &db;
        async move {
            let c = db.connect().await;
            store::create_input(&c, agent, &json!("race"), Some("race"))
                .await
                .unwrap()
        }
    });
    let results = join_all(racers).await;
    let ids: HashSet<Uuid> = results.iter().map(|r| r.input_id).collect();
    assert_eq!(ids.len(), 1, "one input for one key");
    assert_eq!(results.iter().filter(|r| !r.replayed).count(), 1);
    let rows: i64 = client
        .query_one(
            "SELECT count(*) FROM holdfast.inputs WHERE idempotency_key = 'race'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 1);
}

#[tokio::test]
async fn bad_input_is_rejected_with_the_field_named_and_nothing_written() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, agent) = project_and_agent(&client).await;
    let agents_before: i64 = client
        .query_one("SELECT count(*) FROM holdfast.agents", &[])
        .await
        .unwrap()
        .get(0);

    let cases: Vec<(Value, &str)> = vec![
        (json!("not an object"), "config"),
        (json!({}), "model"),
        (
            json!({"model": {"provider": "acme", "name": "m"}}),
            "model.provider",
        ),
        (json!({"model": {"provider": "openai"}}), "model.name"),
        (
            json!({"model": {"provider": "openai", "name": ""}}),
            "model.name",
        ),
        (
            json!({"model": {"provider": "openai", "name": "m", "max_tokens": -1}}),
            "model.max_tokens",
        ),
        (
            json!({"model": {"provider": "openai", "name": "m", "base_url": "ftp://x"}}),
            "model.base_url",
        ),
        (
            json!({"model": {"provider": "openai", "name": "m"}, "tools": {}}),
            "tools",
        ),
        (
            json!({"model": {"provider": "openai", "name": "m"},
                   "tools": [{"type": "custom", "name": "a"}, {"type": "custom", "name": "a"}]}),
            "tools[1].name",
        ),
        (
            json!({"model": {"provider": "openai", "name": "m"}, "system": 5}),
            "system",
        ),
    ];
    for (config, field) in cases {
        match store::create_agent(&client, project, &config).await {
            Err(Error::Invalid { field: f, .. }) => {
                assert_eq!(f.as_deref(), Some(field), "{config}")
            }
            other => panic!("{config}: expected HF422 naming {field}, got {other:?}"),
        }
    }
    let agents_after: i64 = client
        .query_one("SELECT count(*) FROM holdfast.agents", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(agents_before, agents_after);

    let unknown = Uuid::now_v7();
    assert!(matches!(
        store::create_input(&client, unknown, &json!("hi"), None).await,
        Err(Error::NotFound(_))
    ));
    assert!(matches!(
        store::create_agent(&client, unknown, &holdfast_tests::default_config()).await,
        Err(Error::NotFound(_))
    ));
    for content in [json!(""), json!([]), json!(7), json!([1])] {
        match store::create_input(&client, agent, &content, None).await {
            Err(Error::Invalid { field, .. }) => assert_eq!(field.as_deref(), Some("content")),
            other => panic!("{content}: {other:?}"),
        }
    }
    let too_long = "k".repeat(256);
    assert!(matches!(
        store::create_input(&client, agent, &json!("hi"), Some(&too_long)).await,
        Err(Error::Invalid { .. })
    ));
    assert_eq!(
        count(
            &client,
            "SELECT count(*) FROM holdfast.inputs WHERE agent_id = $1",
            agent
        )
        .await,
        0
    );
    assert_eq!(
        count(
            &client,
            "SELECT count(*) FROM holdfast.events WHERE agent_id = $1",
            agent
        )
        .await,
        0
    );
}

/// The next notification `session` receives, within five seconds.
async fn next_notification(
    session: &mut holdfast_db::connect::Session,
) -> tokio_postgres::Notification {
    tokio::time::timeout(Duration::from_secs(5), session.notifications.recv())
        .await
        .expect("a notification within 5 s")
        .expect("the listening session is open")
}

#[tokio::test]
async fn an_agent_becoming_ready_notifies_workers_once_per_transaction() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, agent) = project_and_agent(&client).await;
    let other = new_agent(&client, project).await;
    let mut session = holdfast_db::connect::listen(&db.config, &["holdfast_ready"])
        .await
        .unwrap();

    client.batch_execute("BEGIN").await.unwrap();
    ready(&client, agent).await;
    ready(&client, other).await;
    client.batch_execute("COMMIT").await.unwrap();
    let first = next_notification(&mut session).await;
    assert_eq!(first.channel(), "holdfast_ready");
    // Both agents became ready in one transaction: one hint, not two. A
    // marker notification sent afterwards arrives next, proving nothing else
    // was queued in between.
    client
        .batch_execute("NOTIFY holdfast_ready, 'marker'")
        .await
        .unwrap();
    assert_eq!(next_notification(&mut session).await.payload(), "marker");
}

#[tokio::test]
async fn a_wake_hint_deferred_past_the_commit_is_sent_by_send_pending_wake_and_dropped_with_a_rollback(
) {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, agent) = project_and_agent(&client).await;
    let other = new_agent(&client, project).await;
    let mut session = holdfast_db::connect::listen(&db.config, &["holdfast_ready"])
        .await
        .unwrap();
    let defer = "SELECT set_config('holdfast.wake_after_commit', 'on', false)";
    let send = "SELECT holdfast.send_pending_wake()";

    // Deferred: the commit sends nothing (the marker after it is the first
    // notification), send_pending_wake sends the hint.
    client.execute(defer, &[]).await.unwrap();
    ready(&client, agent).await;
    client
        .batch_execute("NOTIFY holdfast_ready, 'marker 1'")
        .await
        .unwrap();
    assert_eq!(next_notification(&mut session).await.payload(), "marker 1");
    let sent: bool = client.query_one(send, &[]).await.unwrap().get(0);
    assert!(sent);
    assert_eq!(next_notification(&mut session).await.payload(), "");

    // A rolled-back write leaves no hint to send.
    client.execute(defer, &[]).await.unwrap();
    client.batch_execute("BEGIN").await.unwrap();
    ready(&client, other).await;
    client.batch_execute("ROLLBACK").await.unwrap();
    let sent: bool = client.query_one(send, &[]).await.unwrap().get(0);
    assert!(!sent);

    // send_pending_wake turned the deferral off: the next write hints at
    // its own commit again.
    ready(&client, other).await;
    assert_eq!(next_notification(&mut session).await.payload(), "");

    // The store's batch writes defer theirs and send it after the commit:
    // the hint arrives, and the session is left not deferring.
    let third = new_agent(&client, project).await;
    let batch = [store::NewInput::new(
        project,
        third,
        json!("hello"),
        None,
        None,
        holdfast_wire::domain::InputMode::Steer,
    )];
    let outcomes = store::create_inputs(&client, &batch).await.unwrap();
    assert!(outcomes[0].is_ok(), "{:?}", outcomes[0]);
    assert_eq!(next_notification(&mut session).await.payload(), "");
    let deferring: String = client
        .query_one("SELECT current_setting('holdfast.wake_after_commit')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(deferring, "off");
}

#[tokio::test]
async fn maintenance_releases_a_dead_sessions_claims_at_once() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (_, agent) = project_and_agent(&client).await;
    ready(&client, agent).await;
    let worker = db.connect().await;
    let claim = store::claim_agents(&worker, "w", 1, TTL).await.unwrap()[0];
    let pid: i32 = worker
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);

    // While the session lives, nothing is released (the lease has 60 s left).
    assert_eq!(
        store::maintenance_tick(&client).await.unwrap().session_gone,
        0
    );
    client
        .execute("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap();
    wait_until(
        Duration::from_secs(5),
        "the worker session to be gone",
        || async {
            client
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE pid = $1",
                    &[&pid],
                )
                .await
                .map(|r| r.get::<_, i64>(0) == 0)
                .unwrap_or(false)
        },
    )
    .await;
    let report = store::maintenance_tick(&client).await.unwrap();
    assert_eq!(report.session_gone, 1);
    assert_eq!(agent_state(&client, agent).await, "ready");
    assert_eq!(
        worker_lost_events(&client, agent).await,
        vec![json!({"reason": "session_gone", "worker": "w", "epoch": claim.epoch})],
        "the timeline says the worker was lost"
    );
    let epoch: i64 = client
        .query_one(
            "SELECT lease_epoch FROM holdfast.agents WHERE id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(epoch, claim.epoch + 1);
}

/// The data of the agent's `worker.lost` events, oldest first.
async fn worker_lost_events(client: &Client, agent: Uuid) -> Vec<Value> {
    client
        .query(
            "SELECT data FROM holdfast.events WHERE agent_id = $1 AND type = 'worker.lost' ORDER BY seq",
            &[&agent],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

#[tokio::test]
async fn a_reaped_external_call_is_interrupted_never_rerun() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (_, agent) = project_and_agent(&client).await;
    ready(&client, agent).await;
    let claim = store::claim_agents(&client, "w", 1, TTL).await.unwrap()[0];
    let inputs = pending_inputs(&client, agent).await;
    store::commit_model_step(
        &client,
        claim,
        &tool_step(inputs, &[ToolKind::External, ToolKind::External]),
    )
    .await
    .unwrap();
    let claim = store::claim_agents(&client, "w", 1, TTL).await.unwrap()[0];
    let calls: Vec<Uuid> = client
        .query(
            "SELECT id FROM holdfast.tool_calls WHERE agent_id = $1 ORDER BY position",
            &[&agent],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    // The first call finished; the second was in flight when the worker died.
    store::start_tool_call(&client, claim, calls[0])
        .await
        .unwrap();
    store::commit_tool_result(&client, claim, calls[0], &json!("ok"), false)
        .await
        .unwrap();
    store::start_tool_call(&client, claim, calls[1])
        .await
        .unwrap();

    client
        .batch_execute("SET holdfast.clock_offset = '2 minutes'")
        .await
        .unwrap();
    assert_eq!(store::maintenance_tick(&client).await.unwrap().expired, 1);
    let rows = client
        .query("SELECT status, output, is_error FROM holdfast.tool_calls WHERE agent_id = $1 ORDER BY position", &[&agent])
        .await
        .unwrap();
    assert_eq!(
        rows[0].get::<_, Value>(1),
        json!("ok"),
        "the finished call keeps its result"
    );
    assert_eq!(rows[1].get::<_, String>(0), "completed");
    assert_eq!(
        rows[1].get::<_, Value>(1),
        json!("Tool call was interrupted; its external outcome is unknown.")
    );
    assert!(rows[1].get::<_, bool>(2));
    assert_eq!(
        count(&client, "SELECT count(*) FROM holdfast.events WHERE agent_id = $1 AND type = 'tool_call.interrupted'", agent).await,
        1
    );
    assert_eq!(
        worker_lost_events(&client, agent).await,
        vec![json!({"reason": "lease_expired", "worker": "w", "epoch": claim.epoch})],
        "the timeline says the worker was lost"
    );
    holdfast_tests::event_schemas::assert_saved_events_match(&client).await;
    // Nothing is left to run: the next step is the model's.
    assert_eq!(agent_state(&client, agent).await, "ready");
    assert_eq!(
        count(&client, "SELECT count(*) FROM holdfast.tool_calls WHERE agent_id = $1 AND status IN ('pending', 'running')", agent).await,
        0
    );
}

/// The tables a step reads and writes by agent or by key: a sequential
/// scan of any of them costs a step the whole table.
const STEP_TABLES: [&str; 8] = [
    "agents",
    "inputs",
    "steps",
    "messages",
    "tool_calls",
    "events",
    "approvals",
    "questions",
];

/// Every statement of a step's cycle (an input, the claim, the context
/// load, the group commit of a model step and the settle in it, a client's
/// tool result and its settle, the release) is an index probe under the
/// plan a session keeps from its first call on a new install: a forced
/// generic plan made on empty, never analyzed tables. The plans are
/// auto_explain's, nested statements included.
#[tokio::test]
async fn every_statement_of_a_steps_cycle_is_an_index_probe_under_a_generic_plan_on_empty_tables() {
    let db = TestDb::new().await;
    let (plan_client, mut connection) = db.config.connect().await.unwrap();
    let (tx, mut notices) = tokio::sync::mpsc::unbounded_channel();
    let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
    tokio::spawn(async move {
        use futures::StreamExt;
        while let Some(Ok(message)) = messages.next().await {
            if let AsyncMessage::Notice(n) = message {
                let _ = tx.send(n.message().to_owned());
            }
        }
    });
    let (project, agent) = project_and_agent(&plan_client).await;
    plan_client
        .batch_execute(
            "SET plan_cache_mode = force_generic_plan;
             LOAD 'auto_explain';
             SET auto_explain.log_min_duration = 0;
             SET auto_explain.log_nested_statements = on;
             SET client_min_messages = log;",
        )
        .await
        .unwrap();
    hot_path_cycle(&plan_client, project, agent).await;
    drop(plan_client);
    let mut plans = Vec::new();
    while let Some(n) = notices.recv().await {
        plans.push(n);
    }
    assert!(
        plans.iter().any(|p| p.contains("UPDATE holdfast.agents")),
        "no plan of the settle's UPDATE among {} plans",
        plans.len()
    );
    let scanning: Vec<&String> = plans
        .iter()
        .filter(|plan| {
            STEP_TABLES.iter().any(|table| {
                plan.contains(&format!("Seq Scan on {table} "))
                    || plan.contains(&format!("Seq Scan on {table}_"))
            })
        })
        .collect();
    assert!(
        scanning.is_empty(),
        "statements of a step's cycle that scan a table:\n{}",
        scanning
            .iter()
            .map(|p| p.as_str())
            .collect::<Vec<_>>()
            .join("\n---\n")
    );
}

#[tokio::test]
async fn the_claim_uses_the_ready_index_with_100k_idle_agents() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, agent) = project_and_agent(&client).await;
    client
        .execute(
            "INSERT INTO holdfast.agents (project_id, config)
             SELECT $1, $2 FROM generate_series(1, 100000)",
            &[&project, &holdfast_tests::default_config()],
        )
        .await
        .unwrap();
    client
        .batch_execute("ANALYZE holdfast.agents")
        .await
        .unwrap();
    ready(&client, agent).await;

    // auto_explain logs the plan of the statement inside claim_agents; with
    // client_min_messages = log it arrives on this connection as a notice.
    let (plan_client, mut connection) = db.config.connect().await.unwrap();
    let (tx, mut notices) = tokio::sync::mpsc::unbounded_channel();
    let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
    tokio::spawn(async move {
        use futures::StreamExt;
        while let Some(Ok(message)) = messages.next().await {
            if let AsyncMessage::Notice(n) = message {
                let _ = tx.send(n.message().to_owned());
            }
        }
    });
    plan_client
        .batch_execute(
            "LOAD 'auto_explain';
             SET auto_explain.log_min_duration = 0;
             SET auto_explain.log_nested_statements = on;
             SET client_min_messages = log;",
        )
        .await
        .unwrap();
    let claimed = store::claim_agents(&plan_client, "w", 10, TTL)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    drop(plan_client);
    let mut plans = String::new();
    while let Some(n) = notices.recv().await {
        plans.push_str(&n);
        plans.push('\n');
    }
    let plan_of = |query: &str| {
        plans
            .split("duration:")
            .find(|p| p.contains(query))
            .unwrap_or_else(|| panic!("no plan for the claim's {query:?} in:\n{plans}"))
    };
    let candidate_plan = plan_of("WITH quotas");
    assert!(
        candidate_plan.contains("agents_ready_project_idx"),
        "claim must find its candidates in the partial per-project ready index:\n{candidate_plan}"
    );
    let lock_plan = plan_of("SKIP LOCKED");
    assert!(
        lock_plan.contains("agents_pkey"),
        "claim must lock each candidate by its key:\n{lock_plan}"
    );
    assert!(
        !plans.contains("Seq Scan on agents"),
        "no statement of the claim may scan all agents:\n{plans}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_apply_once_even_with_two_concurrent_runners() {
    let db = TestDb::new().await;
    let admin = db.connect().await;
    let fresh = format!("{}_fresh", db.name);
    admin
        .batch_execute(&format!("CREATE DATABASE {fresh}"))
        .await
        .unwrap();
    let mut config = db.config.clone();
    config.postgres.dbname(&fresh);

    let run = || {
        let config = config.clone();
        async move {
            let (mut client, connection) = config.connect().await.unwrap();
            tokio::spawn(connection);
            migrate::migrate(&mut client).await.unwrap()
        }
    };
    let (a, b) = tokio::join!(run(), run());
    assert_eq!(
        a.len() + b.len(),
        migrate::SCHEMA_FILES.len(),
        "the schema installed by exactly one runner: {a:?} {b:?}"
    );
    assert!(run().await.is_empty(), "a third run is a no-op");
    admin
        .batch_execute(&format!("DROP DATABASE {fresh} WITH (FORCE)"))
        .await
        .unwrap();
}

#[tokio::test]
async fn the_dba_views_show_who_holds_what() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, a) = project_and_agent(&client).await;
    let b = new_agent(&client, project).await;
    ready(&client, a).await;
    ready(&client, b).await;
    let claim: Claim = store::claim_agents(&client, "w-view", 1, TTL)
        .await
        .unwrap()[0];

    let depth: std::collections::HashMap<String, i64> = store::queue_depth(&client)
        .await
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(depth["running"], 1);
    assert_eq!(depth["ready"], 1);
    let leases = client
        .query_one(
            "SELECT worker, agents_held FROM holdfast.worker_leases",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(leases.get::<_, String>(0), "w-view");
    assert_eq!(leases.get::<_, i64>(1), 1);
    let overview = client
        .query_one(
            "SELECT state, lease_owner, pending_inputs FROM holdfast.agent_overview WHERE agent_id = $1",
            &[&claim.agent_id],
        )
        .await
        .unwrap();
    assert_eq!(overview.get::<_, String>(0), "running");
    assert_eq!(overview.get::<_, i64>(2), 1);
    // A lease past expiry shows up as stuck.
    client
        .batch_execute("SET holdfast.clock_offset = '2 minutes'")
        .await
        .unwrap();
    let stuck: Vec<Uuid> = client
        .query("SELECT agent_id FROM holdfast.stuck_agents", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(stuck.contains(&claim.agent_id));
}

/// One agent's way through the hot path on `client`, as a worker's and the
/// API's pooled sessions run it (statements prepared once per connection):
/// an input (`create_inputs`), a claim, the step's context, a model step
/// calling a custom tool, its result (`submit_tool_results`); the claim
/// that follows, a model step calling a worker-run tool, the tool's batch
/// (`start_tool_call`, `commit_tool_result`, `release_agent`), and a
/// closing model step.
async fn hot_path_cycle(client: &impl store::Prepared, project: Uuid, agent: Uuid) {
    let input = store::create_inputs(
        client,
        &[store::NewInput::new(
            project,
            agent,
            json!("hello"),
            None,
            None,
            InputMode::Steer,
        )],
    )
    .await
    .unwrap()
    .remove(0)
    .unwrap();
    let (claim, _) = claim_with_context(client).await;
    assert_eq!(claim.agent_id, agent, "the cycle's agent is the one ready");
    let step = tool_step(vec![input.input.id], &[ToolKind::Custom]);
    let committed = store::commit_model_step_batch(client, &[(claim, &step)])
        .await
        .unwrap();
    assert!(committed[0].1.is_ok(), "{committed:?}");
    let call: Uuid = client
        .client()
        .query_one(
            "SELECT id FROM holdfast.tool_calls WHERE agent_id = $1 AND status = 'waiting'",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    let results = store::submit_tool_results(
        client,
        &[store::ToolResult {
            tool_call_id: call,
            output: json!({"answer": 42}),
            is_error: false,
        }],
    )
    .await
    .unwrap();
    assert!(results[0].is_ok(), "{results:?}");
    let claim = store::claim_agents(client, "w", 1, TTL).await.unwrap()[0];
    store::renew_leases(client, "w", &[claim], TTL)
        .await
        .unwrap();
    store::load_step_context(client, agent).await.unwrap();
    let step = tool_step(vec![], &[ToolKind::External]);
    let committed = store::commit_model_step_batch(client, &[(claim, &step)])
        .await
        .unwrap();
    assert!(committed[0].1.is_ok(), "{committed:?}");
    let (claim, context) = claim_with_context(client).await;
    let call = context
        .tool_calls
        .iter()
        .find(|c| c.status == "pending")
        .expect("the worker-run call is pending")
        .id;
    store::start_tool_call(client, claim, call).await.unwrap();
    store::commit_tool_result(client, claim, call, &json!({"ok": true}), false)
        .await
        .unwrap();
    store::release_agent(client, claim, None).await.unwrap();
    let (claim, _) = claim_with_context(client).await;
    let step = text_step(vec![]);
    let committed = store::commit_model_step_batch(client, &[(claim, &step)])
        .await
        .unwrap();
    assert!(committed[0].1.is_ok(), "{committed:?}");
}

/// The worker's claim of one agent, with the context the claim read.
async fn claim_with_context(client: &impl store::Prepared) -> (Claim, StepContext) {
    let mut claimed = store::claim_agents_with_context(client, "w", 1, TTL)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1, "one agent claimed");
    let claimed = claimed.remove(0);
    (
        claimed.claim,
        *claimed.context.expect("the claim read the context"),
    )
}

/// Each claimed agent's context, read in the claim's transaction, is the
/// one its own read returns after the claim (the pending inputs, the lost
/// attempt a reap recorded), for every agent of a batch; a claim that finds
/// nothing returns nothing.
#[tokio::test]
async fn a_claim_with_context_returns_each_claimed_agents_context() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, _) = project_and_agent(&client).await;
    assert!(store::claim_agents_with_context(&client, "w", 4, TTL)
        .await
        .unwrap()
        .is_empty());
    create_ready_agents(&client, project, 3).await;
    // One of them was claimed before, and its lease reaped: the context
    // carries the lost attempt.
    let lost = store::claim_agents(&client, "w-lost", 1, TTL)
        .await
        .unwrap()[0];
    client
        .execute(
            "UPDATE holdfast.agents SET lease_expires_at = now() - interval '1 second' WHERE id = $1",
            &[&lost.agent_id],
        )
        .await
        .unwrap();
    store::maintenance_tick(&client).await.unwrap();

    let claimed = store::claim_agents_with_context(&client, "w", 4, TTL)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 3, "every ready agent claimed once");
    for step in claimed {
        let (state, owner, epoch) = lease(&client, step.claim.agent_id).await;
        assert_eq!((state.as_str(), owner.as_deref()), ("running", Some("w")));
        assert_eq!(epoch, step.claim.epoch, "the claim's epoch is the lease's");
        let context = *step.context.expect("the claim read the context");
        assert_eq!(
            context,
            store::load_step_context(&client, step.claim.agent_id)
                .await
                .unwrap()
        );
        let model = context.model.expect("a claimed agent's model step");
        assert_eq!(model.pending_inputs.len(), 1, "the agent's input");
        if step.claim.agent_id == lost.agent_id {
            assert!(
                context.trace.lost.is_some(),
                "the reaped attempt is in the context"
            );
        }
    }
}

/// `agent`'s tool calls, oldest first.
async fn tool_call_ids(client: &Client, agent: Uuid) -> Vec<Uuid> {
    client
        .query(
            "SELECT id FROM holdfast.tool_calls WHERE agent_id = $1 ORDER BY created_at, position",
            &[&agent],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// The tool calls and the message seqs `agent`'s step context carries, as
/// its own read returns them (no seqs when it left out the model's input).
async fn context_calls_and_messages(client: &Client, agent: Uuid) -> (Vec<Uuid>, Option<Vec<i64>>) {
    let context = store::load_step_context(client, agent).await.unwrap();
    (
        context.tool_calls.iter().map(|c| c.id).collect(),
        context
            .model
            .map(|model| model.messages.iter().map(|m| m.seq).collect()),
    )
}

/// One model step of `agent` calling one worker-run tool, and the call's
/// result saved: the agent is ready again. Returns the call's id.
async fn answered_call(client: &Client, agent: Uuid, inputs: Vec<Uuid>) -> Uuid {
    let claim = claim_of(client, agent).await;
    store::commit_model_step(client, claim, &tool_step(inputs, &[ToolKind::External]))
        .await
        .unwrap();
    let call = *tool_call_ids(client, agent).await.last().unwrap();
    let claim = claim_of(client, agent).await;
    store::start_tool_call(client, claim, call).await.unwrap();
    store::commit_tool_result(client, claim, call, &json!("42"), false)
        .await
        .unwrap();
    store::release_agent(client, claim, None).await.unwrap();
    call
}

/// A new agent of a new project whose first model step called one
/// worker-run tool, answered: its project, its id and the call's.
async fn agent_with_an_answered_call(client: &Client) -> (Uuid, Uuid, Uuid) {
    let (project, _) = project_and_agent(client).await;
    let agent = new_agent(client, project).await;
    ready(client, agent).await;
    let inputs = pending_inputs(client, agent).await;
    let call = answered_call(client, agent, inputs).await;
    (project, agent, call)
}

/// A compacted agent's step context carries the tool calls of the messages
/// it kept and every open call, not the calls it compacted away: its read
/// does not grow with the history it summarised.
#[tokio::test]
async fn a_compacted_context_carries_the_calls_of_its_kept_messages_and_the_open_ones() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    // seq 1 the input, seq 2 the call A, seq 3 the call B, both answered.
    let (_, agent, first) = agent_with_an_answered_call(&client).await;
    let second = answered_call(&client, agent, vec![]).await;
    assert_eq!(
        context_calls_and_messages(&client, agent).await,
        (vec![first, second], Some(vec![1, 2, 3])),
        "before a compaction the context has every call"
    );

    let claim = claim_of(&client, agent).await;
    store::commit_compaction(&client, claim, "the story so far", 3, &json!({}))
        .await
        .unwrap();
    assert_eq!(
        context_calls_and_messages(&client, agent).await,
        (vec![second], Some(vec![3])),
        "the answered call of a compacted message is left out"
    );

    // seq 4 the call C, a custom tool's: open, waiting for its result.
    let claim = claim_of(&client, agent).await;
    store::commit_model_step(&client, claim, &tool_step(vec![], &[ToolKind::Custom]))
        .await
        .unwrap();
    let third = tool_call_ids(&client, agent).await[2];
    assert_eq!(
        context_calls_and_messages(&client, agent).await,
        (vec![second, third], Some(vec![3, 4])),
        "an open call is in the context"
    );
}

/// A pending call means the step runs tools, which read no history: the
/// context leaves out what only a model call reads (the messages, pending
/// inputs, summary, budget and model route) and carries the open calls
/// only; once the calls are answered, the next context has all of it again.
#[tokio::test]
async fn a_context_with_a_pending_call_leaves_out_the_models_input() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, agent, first) = agent_with_an_answered_call(&client).await;
    // A steering input, then a step calling two worker-run tools.
    store::create_input(&client, agent, &json!("and then?"), None)
        .await
        .unwrap();
    let claim = claim_of(&client, agent).await;
    store::commit_model_step(
        &client,
        claim,
        &tool_step(vec![], &[ToolKind::External, ToolKind::External]),
    )
    .await
    .unwrap();
    let calls = tool_call_ids(&client, agent).await;
    assert_eq!(calls.len(), 3);

    let context = store::load_step_context(&client, agent).await.unwrap();
    assert_eq!(context.model, None, "no model input for a tool step");
    assert_eq!(
        context.tool_calls.iter().map(|c| c.id).collect::<Vec<_>>(),
        calls[1..],
        "the open calls, without the answered one"
    );
    let row = client
        .query_one(
            "SELECT c.messages IS NULL, c.pending_inputs IS NULL, c.over_budget IS NULL,
                    c.endpoint IS NULL, c.project_id
               FROM holdfast.load_step_context($1) c",
            &[&agent],
        )
        .await
        .unwrap();
    assert_eq!(
        (row.get(0), row.get(1), row.get(2), row.get(3)),
        (true, true, true, true),
        "messages, pending inputs, budget and route are not read"
    );
    assert_eq!(row.get::<_, Uuid>(4), project, "the project is kept");

    // Both calls answered: the model is next, with everything.
    let claim = claim_of(&client, agent).await;
    for call in &calls[1..] {
        store::start_tool_call(&client, claim, *call).await.unwrap();
        store::commit_tool_result(&client, claim, *call, &json!("ok"), false)
            .await
            .unwrap();
    }
    store::release_agent(&client, claim, None).await.unwrap();
    let context = store::load_step_context(&client, agent).await.unwrap();
    let model = context.model.expect("the model's input for a model step");
    assert_eq!(
        context.tool_calls.iter().map(|c| c.id).collect::<Vec<_>>(),
        [first, calls[1], calls[2]]
    );
    assert_eq!(
        model.messages.len(),
        3,
        "the input and two assistant messages"
    );
    assert_eq!(model.pending_inputs.len(), 1, "the steering input");
    assert!(!model.over_budget);
}

/// Six hot-path cycles on `pooled`, each with a new agent of `project`,
/// so that the session's plans are cached while the tables are nearly empty
/// and have no statistics: a statement prepared on the connection runs on
/// a generic plan from its sixth execution, as the functions' statements
/// do from their first.
async fn cache_hot_path_plans(pooled: &deadpool_postgres::Object, project: Uuid) {
    for _ in 0..6 {
        let agent = new_agent(pooled, project).await;
        hot_path_cycle(pooled, project, agent).await;
    }
}

/// A session keeps the hot functions' generic plans (`force_generic_plan`)
/// from their first call, made on whatever statistics the tables had then:
/// none on a new install, until autovacuum's first ANALYZE. A plan that
/// reads a growing table sequentially would make each later call of that
/// session cost the whole table. So after the session's first cycles on
/// empty tables, and a thousand projects and a thousand agents' worth of
/// rows written by another session, the same session's next cycle must
/// read no table of four pages or more sequentially (sized by its file,
/// not by the shared statistics, which a session sends at most once a
/// second).
#[tokio::test]
async fn a_sessions_cached_hot_path_plans_stay_index_lookups_as_the_tables_grow() {
    let db = TestDb::new().await;
    let pool = db.pool(1);
    let pooled = pool.get().await.unwrap();
    let (project, _) = project_and_agent(&pooled).await;
    cache_hot_path_plans(&pooled, project).await;

    // A thousand projects, and a thousand agents through the same
    // functions, from another session.
    let grower = db.connect().await;
    grower
        .execute(
            "SELECT holdfast.ensure_project('grown-' || g) FROM generate_series(1, 1000) g",
            &[],
        )
        .await
        .unwrap();
    create_ready_agents(&grower, project, 1000).await;
    let claims = store::claim_agents(&grower, "w-grow", 1000, TTL)
        .await
        .unwrap();
    assert_eq!(claims.len(), 1000);
    let mut inputs: std::collections::HashMap<Uuid, Vec<Uuid>> = grower
        .query(
            "SELECT agent_id, array_agg(id) FROM holdfast.inputs
              WHERE consumed_at IS NULL GROUP BY agent_id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let steps: Vec<ModelStep> = claims
        .iter()
        .map(|c| tool_step(inputs.remove(&c.agent_id).unwrap(), &[ToolKind::Custom]))
        .collect();
    let batch: Vec<(Claim, &ModelStep)> = claims.iter().copied().zip(&steps).collect();
    store::commit_model_step_batch(&grower, &batch)
        .await
        .unwrap();
    grower
        .execute(
            "SELECT holdfast.submit_tool_results(ARRAY(
                 SELECT ROW(id, '{\"answer\": 1}', false)::holdfast.tool_result
                   FROM holdfast.tool_calls WHERE status = 'waiting'))",
            &[],
        )
        .await
        .unwrap();
    // Their turns end, so the second cycle's agent is the only one ready.
    let claims = store::claim_agents(&grower, "w-grow", 1000, TTL)
        .await
        .unwrap();
    assert_eq!(claims.len(), 1000);
    let step = text_step(vec![]);
    let batch: Vec<(Claim, &ModelStep)> = claims.iter().map(|c| (*c, &step)).collect();
    store::commit_model_step_batch(&grower, &batch)
        .await
        .unwrap();

    let next = new_agent(&pooled, project).await;
    // One transaction, so that its own table reads can be read back before
    // they reach the shared statistics.
    pooled.batch_execute("BEGIN").await.unwrap();
    hot_path_cycle(&pooled, project, next).await;
    let scans: Vec<(String, i64, i64)> = pooled
        .query(
            "SELECT x.relname::text, x.seq_scan, x.seq_tup_read
               FROM pg_stat_xact_user_tables x
              WHERE x.schemaname = 'holdfast' AND x.seq_scan > 0
                AND pg_relation_size(x.relid) >= 4 * current_setting('block_size')::bigint",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    pooled.batch_execute("COMMIT").await.unwrap();
    assert!(
        scans.is_empty(),
        "the hot path read these tables sequentially (table, scans, rows read): {scans:?}"
    );
}

/// The claim's generic plan is made at a session's first claim, on a new
/// install's empty statistics, and kept (see the test above). Whatever that
/// plan is, a claim of one agent reads a few rows, not one (or, as a join
/// of the candidates with the agents once did, a scan) per ready agent:
/// with 300 agents ready, one claim reads fewer agent rows (by index or by
/// scan) than there are ready agents.
#[tokio::test]
async fn a_sessions_cached_claim_plan_reads_a_few_entries_however_many_agents_are_ready() {
    let db = TestDb::new().await;
    let pool = db.pool(1);
    let pooled = pool.get().await.unwrap();
    let (project, _) = project_and_agent(&pooled).await;
    cache_hot_path_plans(&pooled, project).await;

    const READY: i64 = 300;
    let grower = db.connect().await;
    create_ready_agents(&grower, project, READY as i32).await;

    // The session's counts of agent rows read, before and after the claim,
    // in one transaction (no flush of the counts to the shared statistics
    // can come between them).
    let rows_read = "SELECT idx_tup_fetch + seq_tup_read FROM pg_stat_xact_user_tables
                      WHERE schemaname = 'holdfast' AND relname = 'agents'";
    pooled.batch_execute("BEGIN").await.unwrap();
    let before: i64 = pooled.query_one(rows_read, &[]).await.unwrap().get(0);
    let claims = store::claim_agents(&pooled, "w", 1, TTL).await.unwrap();
    assert_eq!(claims.len(), 1);
    let read = pooled
        .query_one(rows_read, &[])
        .await
        .unwrap()
        .get::<_, i64>(0)
        - before;
    pooled.batch_execute("COMMIT").await.unwrap();
    assert!(
        read < READY,
        "one claim read {read} agent rows with {READY} agents ready"
    );
}
