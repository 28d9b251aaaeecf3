//! Deterministic fault scenarios with real processes: maintenance killed in
//! the middle of a reap, a worker killed between its step's commit and its
//! release, and a deploy that SIGTERMs every worker at once.

use std::time::Duration;

use holdfast_db::store;
use holdfast_fakes::{FakeProvider, Reply};
use holdfast_tests::counting_http::CountingServer;
use holdfast_tests::process::HoldfastProcess;
use holdfast_tests::scenario::{
    agent_with_input, count_events, spawn_worker, start_turn, wait_for_event,
};
use holdfast_tests::{
    wait_for_lock_wait, wait_for_lock_wait_in, wait_until, MaintenanceLoop, TestDb,
};
use holdfast_wire::domain::{ModelStep, NewToolCall, ToolKind};
use serde_json::json;
use uuid::Uuid;

fn maintenance(name: &str, db: &TestDb) -> HoldfastProcess {
    HoldfastProcess::spawn(
        name,
        &["server", "maintenance"],
        &[
            ("HOLDFAST_DATABASE_URL", db.config.to_connection_string()),
            ("HOLDFAST_MAINTENANCE_INTERVAL", "100ms".into()),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn maintenance_killed_mid_reap_recovers_the_agent_exactly_once() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    // An agent whose worker died with an external call running and whose
    // lease has expired.
    let agent = agent_with_input(&client, "go").await;
    let claim = store::claim_agents(&client, "dead-worker", 1, Duration::from_secs(1))
        .await
        .unwrap()[0];
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
        message: vec![
            json!({"type": "tool_use", "id": "toolu_1", "name": "web_fetch", "input": {}}),
        ],
        tool_calls: vec![NewToolCall {
            provider_id: "toolu_1".into(),
            name: "web_fetch".into(),
            input: json!({}),
            kind: ToolKind::External,
        }],
        usage: json!({}),
        stop_reason: Some("tool_use".into()),
        config_version: None,
    };
    store::commit_model_step(&client, claim, &step)
        .await
        .unwrap();
    let claim = store::claim_agents(&client, "dead-worker", 1, Duration::from_millis(200))
        .await
        .unwrap()[0];
    let call: Uuid = client
        .query_one(
            "SELECT id FROM holdfast.tool_calls WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    store::start_tool_call(&client, claim, call).await.unwrap();

    // Hold the running call's row: the reaper locks the agent, then blocks
    // on the call inside its transaction. Kill maintenance right there.
    let blocker = db.connect().await;
    blocker.batch_execute("BEGIN").await.unwrap();
    blocker
        .execute(
            "SELECT 1 FROM holdfast.tool_calls WHERE id = $1 FOR UPDATE",
            &[&call],
        )
        .await
        .unwrap();
    let first = maintenance("maint-1", &db);
    wait_for_lock_wait(&client, &db.name).await;
    first.signal("KILL");
    blocker.batch_execute("COMMIT").await.unwrap();

    // Another maintenance finishes the job (or finds it done): the agent is
    // recovered once.
    let _second = maintenance("maint-2", &db);
    wait_until(
        Duration::from_secs(20),
        "the agent to be released",
        || async {
            client
                .query_one("SELECT state FROM holdfast.agents WHERE id = $1", &[&agent])
                .await
                .map(|r| r.get::<_, String>(0) == "ready")
                .unwrap_or(false)
        },
    )
    .await;
    assert_eq!(
        count_events(&client, agent, "tool_call.interrupted").await,
        1
    );
    let epoch: i64 = client
        .query_one(
            "SELECT lease_epoch FROM holdfast.agents WHERE id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        epoch,
        claim.epoch + 1,
        "the epoch was bumped by exactly one reap"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deploy_that_sigterms_every_worker_loses_no_step_and_waits_out_no_lease() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    // Every call streams slowly: some finish within the drain timeout, the
    // rest are cut at it and released.
    fake.set_default(
        Reply::text("one two three four five six seven eight").trickle(Duration::from_millis(150)),
    );
    let drain = [("HOLDFAST_WORKER_DRAIN_TIMEOUT", "500ms")];
    let mut old = vec![
        spawn_worker("old-1", &db.config, &fake, &drain),
        spawn_worker("old-2", &db.config, &fake, &drain),
    ];
    let mut agents = Vec::new();
    for i in 0..10 {
        agents.push(agent_with_input(&client, &format!("task {i}")).await);
    }
    fake.wait_for_requests(10).await;

    // Both old workers are up (their SIGTERM handler is installed before
    // "worker started"): one that got no request yet may still be starting,
    // and the default action of a SIGTERM would kill it without a drain.
    for worker in &old {
        wait_until(
            Duration::from_secs(30),
            "the old workers started",
            || async { worker.log_text().contains("worker started") },
        )
        .await;
    }
    // The deploy: SIGTERM every old worker, then start the new ones.
    for worker in &old {
        worker.signal("TERM");
    }
    for worker in &mut old {
        assert_eq!(
            worker.wait_exit(Duration::from_secs(15)).await,
            Some(0),
            "{} drained",
            worker.name
        );
    }
    let running: i64 = client
        .query_one(
            "SELECT count(*) FROM holdfast.agents WHERE state = 'running'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        running, 0,
        "every lease was handed back explicitly, none left to expire"
    );
    let _new = [
        spawn_worker("new-1", &db.config, &fake, &[]),
        spawn_worker("new-2", &db.config, &fake, &[]),
    ];
    for agent in &agents {
        // Well inside the 60 s lease TTL: nothing waited for expiry.
        wait_for_event(&client, *agent, "turn.completed", Duration::from_secs(30)).await;
        assert_eq!(
            count_events(&client, *agent, "model.response").await,
            1,
            "{agent}"
        );
    }
    holdfast_tests::invariants::assert_at_rest(&client, &agents).await;
}

/// The worker's commit goes through but the worker never takes its next
/// step: the commit of its web_fetch result with the batch's end (which
/// keeps the lease for the next step) is held on the agent's row lock, the
/// worker is frozen (SIGSTOP) while blocked, the lock is let go so Postgres
/// finishes the commit on the worker's behalf, then the worker is
/// SIGKILLed still holding the lease. The saved result is final: another
/// worker recovers the agent from the dead session (not by waiting out the
/// lease), never fetches again, and the model sees the saved result.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_killed_between_commit_and_release_never_reruns_the_step() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    let site = CountingServer::start().await;
    fake.push(Reply::tool_calls(vec![(
        "web_fetch",
        json!({"url": site.url("/hold/page")}),
    )]));
    fake.push(Reply::text("The page says it was released."));
    let env = [
        ("HOLDFAST_LEASE_TTL", "60s"),
        ("HOLDFAST_EGRESS_ALLOW", "web_fetch=127.0.0.1"),
    ];
    let mut first = spawn_worker("w1", &db.config, &fake, &env);
    let agent = start_turn(&client, json!([{"type": "web_fetch"}]), "fetch it").await;
    site.wait_for_hits("/hold/page", 1).await;

    let mut locker = db.connect().await;
    let row_lock = locker.transaction().await.unwrap();
    row_lock
        .execute(
            "SELECT 1 FROM holdfast.agents WHERE id = $1 FOR UPDATE",
            &[&agent],
        )
        .await
        .unwrap();
    site.release_held();
    wait_for_lock_wait_in(&client, &db.name, "%end_tool_batch%").await;
    first.signal("STOP");
    row_lock.commit().await.unwrap();
    wait_for_event(
        &client,
        agent,
        "tool_call.completed",
        Duration::from_secs(30),
    )
    .await;
    first.signal("KILL");
    first.wait_exit(Duration::from_secs(30)).await;
    let owner: Option<String> = client
        .query_one(
            "SELECT lease_owner FROM holdfast.agents WHERE id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        owner.as_deref(),
        Some("w1"),
        "killed still holding the lease"
    );

    let _maintenance = MaintenanceLoop::start(&db.config);
    let _second = spawn_worker("w2", &db.config, &fake, &env);
    let recovered = std::time::Instant::now();
    wait_for_event(&client, agent, "turn.completed", Duration::from_secs(30)).await;

    assert!(
        recovered.elapsed() < Duration::from_secs(30),
        "recovered from the dead session, not by the 60 s lease"
    );
    assert_eq!(
        site.hits("/hold/page"),
        1,
        "the saved fetch never ran again"
    );
    assert_eq!(count_events(&client, agent, "tool_call.completed").await, 1);
    assert_eq!(
        count_events(&client, agent, "tool_call.interrupted").await,
        0
    );
    assert_eq!(count_events(&client, agent, "model.response").await, 2);
    assert_eq!(
        fake.request_count(),
        2,
        "one call before the crash, one after"
    );
    // The held page answers "released": the model saw the saved result.
    let last = fake.last_request().unwrap();
    assert!(last.body.to_string().contains("released"), "{}", last.body);
    holdfast_tests::invariants::assert_at_rest(&client, &[agent]).await;
}
