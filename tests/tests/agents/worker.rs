//! The worker process end to end: real `holdfast worker` processes, real
//! signals, the fake model provider over real sockets, real Postgres.

use std::time::{Duration, Instant};

use holdfast_db::connect::ConnectConfig;
use holdfast_fakes::{FakeProvider, Reply};
use holdfast_tests::process::HoldfastProcess;
use holdfast_tests::scenario::{
    agent_with_input, count_events, event_types, saved_text, spawn_worker, wait_for_event,
};
use holdfast_tests::{wait_until, MaintenanceLoop, PrivateCluster, TestDb};
use serde_json::{json, Value};
use tokio_postgres::Client;
use uuid::Uuid;

fn worker(
    name: &str,
    db: &ConnectConfig,
    fake: &FakeProvider,
    extra: &[(&str, &str)],
) -> HoldfastProcess {
    spawn_worker(name, db, fake, extra)
}

async fn lease_owner(client: &Client, agent: Uuid) -> Option<String> {
    client
        .query_one(
            "SELECT lease_owner FROM holdfast.agents WHERE id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0)
}

async fn history_text(client: &Client, agent: Uuid) -> String {
    saved_text(client, agent).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_runs_a_turn_to_completion() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    fake.push(Reply::text("Hello from the model."));
    let _w = worker("w-basic", &db.config, &fake, &[]);
    let agent = agent_with_input(&client, "hi").await;
    wait_for_event(&client, agent, "turn.completed", Duration::from_secs(30)).await;
    let types = event_types(&client, agent).await;
    assert_eq!(
        types,
        [
            "input.received",
            "turn.started",
            "model.response",
            "turn.completed"
        ]
    );
    let message: Value = client
        .query_one(
            "SELECT data -> 'message' FROM holdfast.events WHERE agent_id = $1 AND type = 'model.response'",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        message,
        json!([{"type": "text", "text": "Hello from the model."}])
    );
    let request = fake.last_request().unwrap();
    assert_eq!(
        request.body["messages"][0]["content"][0]["text"],
        json!("hi")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_during_a_model_call_another_worker_finishes_the_turn_once() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    fake.push(Reply::text("PARTIAL-TEXT that must never be saved").hold_after_deltas(2));
    fake.push(Reply::text("The real answer."));
    let _maintenance = MaintenanceLoop::start(&db.config);
    let w1 = worker("w1", &db.config, &fake, &[]);
    let agent = agent_with_input(&client, "hi").await;
    fake.wait_until_held(1).await;
    assert_eq!(lease_owner(&client, agent).await.as_deref(), Some("w1"));

    let _w2 = worker("w2", &db.config, &fake, &[]);
    w1.signal("KILL");
    let killed = Instant::now();
    wait_for_event(&client, agent, "turn.completed", Duration::from_secs(30)).await;
    let recovery = killed.elapsed();
    eprintln!("recovered in {recovery:?}");

    assert_eq!(count_events(&client, agent, "model.response").await, 1);
    let history = history_text(&client, agent).await;
    assert!(history.contains("The real answer."));
    assert!(
        !history.contains("PARTIAL"),
        "the cut attempt left nothing: {history}"
    );
    assert_eq!(fake.request_count(), 2);
    assert!(
        recovery < Duration::from_secs(20),
        "recovered by session loss, not lease expiry (60 s)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stopped_zombie_worker_is_fenced_out_after_its_lease_expires() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    fake.push(Reply::text("ZOMBIE answer").hold_after_deltas(1));
    fake.push(Reply::text("Live answer."));
    let _maintenance = MaintenanceLoop::start(&db.config);
    let short_lease = [
        ("HOLDFAST_LEASE_TTL", "2s"),
        ("HOLDFAST_LEASE_RENEW_INTERVAL", "500ms"),
    ];
    let zombie = worker("zombie", &db.config, &fake, &short_lease);
    let agent = agent_with_input(&client, "hi").await;
    fake.wait_until_held(1).await;
    zombie.signal("STOP");

    // The lease expires (the session lives on, so only expiry frees it).
    let _live = worker("live", &db.config, &fake, &short_lease);
    wait_for_event(&client, agent, "turn.completed", Duration::from_secs(30)).await;
    // Wake the zombie and let its model call finish: whatever it tries to
    // save is refused.
    zombie.signal("CONT");
    fake.release();
    wait_until(
        Duration::from_secs(15),
        "the zombie to notice its lost lease",
        || async {
            let log = zombie.log_text();
            log.contains("lease lost") || log.contains("could not be renewed in time")
        },
    )
    .await;

    assert_eq!(count_events(&client, agent, "model.response").await, 1);
    let history = history_text(&client, agent).await;
    assert!(history.contains("Live answer."));
    assert!(!history.contains("ZOMBIE"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_lets_a_slow_step_finish_within_the_drain_timeout() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    fake.push(Reply::text("one two three four five six").trickle(Duration::from_millis(150)));
    let mut w = worker(
        "w-drain",
        &db.config,
        &fake,
        &[("HOLDFAST_WORKER_DRAIN_TIMEOUT", "20s")],
    );
    let agent = agent_with_input(&client, "hi").await;
    fake.wait_for_requests(1).await;
    w.signal("TERM");
    assert_eq!(w.wait_exit(Duration::from_secs(20)).await, Some(0));
    assert_eq!(count_events(&client, agent, "turn.completed").await, 1);
    assert_eq!(
        fake.request_count(),
        1,
        "the step finished; nothing was retried"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_step_longer_than_the_drain_timeout_is_released_not_waited_out() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    fake.push(Reply::hang());
    fake.push(Reply::text("Continued elsewhere."));
    let mut w1 = worker(
        "w-old",
        &db.config,
        &fake,
        &[("HOLDFAST_WORKER_DRAIN_TIMEOUT", "300ms")],
    );
    let agent = agent_with_input(&client, "hi").await;
    fake.wait_for_requests(1).await;
    w1.signal("TERM");
    assert_eq!(w1.wait_exit(Duration::from_secs(10)).await, Some(0));
    let state: String = client
        .query_one("SELECT state FROM holdfast.agents WHERE id = $1", &[&agent])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        state, "ready",
        "released explicitly, with its 60 s lease unexpired"
    );

    let _w2 = worker("w-new", &db.config, &fake, &[]);
    wait_for_event(&client, agent, "turn.completed", Duration::from_secs(30)).await;
    // Claimed by w-old (epoch 1), released, claimed by w-new (epoch 2): a
    // reap would have bumped the epoch once more.
    let epoch: i64 = client
        .query_one(
            "SELECT lease_epoch FROM holdfast.agents WHERE id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(epoch, 2);
    assert_eq!(count_events(&client, agent, "model.response").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workers_survive_a_postgres_crash_restart_and_every_agent_finishes() {
    let cluster = PrivateCluster::start().await;
    let config = cluster.config();
    let (client, connection) = config.connect().await.unwrap();
    tokio::spawn(connection);
    let fake = FakeProvider::start().await;
    fake.set_default(Reply::text("done with this one").trickle(Duration::from_millis(40)));
    let _maintenance = MaintenanceLoop::start(&config);
    let _w1 = worker("w1", &config, &fake, &[]);
    let _w2 = worker("w2", &config, &fake, &[]);
    let mut agents = Vec::new();
    for i in 0..20 {
        agents.push(agent_with_input(&client, &format!("task {i}")).await);
    }
    fake.wait_for_requests(4).await;
    drop(client);

    cluster.cluster.crash().unwrap();
    cluster.cluster.restart().unwrap();

    let (client, connection) = config.connect().await.unwrap();
    tokio::spawn(connection);
    for agent in &agents {
        wait_for_event(&client, *agent, "turn.completed", Duration::from_secs(60)).await;
    }
    for agent in &agents {
        assert_eq!(
            count_events(&client, *agent, "model.response").await,
            1,
            "agent {agent}"
        );
        assert_eq!(
            count_events(&client, *agent, "turn.completed").await,
            1,
            "agent {agent}"
        );
    }
    let held: i64 = client
        .query_one(
            "SELECT count(*) FROM holdfast.agents WHERE state = 'running'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(held, 0, "no lease left held");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancel_stops_a_hanging_model_call_within_a_second() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    fake.push(Reply::hang());
    fake.push(Reply::text("Next turn works."));
    let _w = worker("w-cancel", &db.config, &fake, &[]);
    let agent = agent_with_input(&client, "hi").await;
    fake.wait_for_requests(1).await;

    let requested = Instant::now();
    let outcome = holdfast_db::store::request_cancel(&client, agent)
        .await
        .unwrap();
    assert_eq!(outcome, holdfast_wire::domain::CancelOutcome::Requested);
    fake.wait_for_aborted(1).await;
    let stopped = requested.elapsed();
    wait_for_event(&client, agent, "turn.cancelled", Duration::from_secs(10)).await;
    assert!(
        stopped < Duration::from_secs(1),
        "the model call stopped after {stopped:?}"
    );
    let types = event_types(&client, agent).await;
    assert_eq!(types.last().map(String::as_str), Some("turn.cancelled"));
    assert_eq!(count_events(&client, agent, "model.response").await, 0);
    let state: String = client
        .query_one("SELECT state FROM holdfast.agents WHERE id = $1", &[&agent])
        .await
        .unwrap()
        .get(0);
    assert_eq!(state, "idle");

    // The next input starts a normal turn.
    holdfast_db::store::create_input(&client, agent, &json!("again"), None)
        .await
        .unwrap();
    wait_for_event(&client, agent, "turn.completed", Duration::from_secs(30)).await;
    assert!(saved_text(&client, agent)
        .await
        .contains("Next turn works."));
}

/// How many transactions saved the model steps of `agents` (distinct xmin
/// of their step rows).
async fn step_transactions(client: &Client, agents: &[Uuid]) -> i64 {
    client
        .query_one(
            "SELECT count(DISTINCT xmin::text) FROM holdfast.steps \
              WHERE agent_id = ANY ($1) AND kind = 'model'",
            &[&agents],
        )
        .await
        .unwrap()
        .get(0)
}

/// Six agents ready at once, run by one worker with `extra` settings, to
/// completion; returns them.
async fn six_turns_through_one_worker(db: &TestDb, extra: &[(&str, &str)]) -> Vec<Uuid> {
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    let mut agents = Vec::new();
    for i in 0..6 {
        agents.push(agent_with_input(&client, &format!("task {i}")).await);
    }
    let _w = worker("w-group", &db.config, &fake, extra);
    for agent in &agents {
        wait_for_event(&client, *agent, "turn.completed", Duration::from_secs(30)).await;
        assert_eq!(count_events(&client, *agent, "model.response").await, 1);
    }
    agents
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn model_steps_finishing_together_share_one_commit() {
    let db = TestDb::new().await;
    // A window long enough for all six, and a batch of six: the sixth
    // step fills the batch and commits it at once.
    let agents = six_turns_through_one_worker(
        &db,
        &[
            ("HOLDFAST_COMMIT_WINDOW", "5s"),
            ("HOLDFAST_COMMIT_BATCH", "6"),
        ],
    )
    .await;
    assert_eq!(step_transactions(&db.connect().await, &agents).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_commit_batch_of_one_saves_each_model_step_alone() {
    let db = TestDb::new().await;
    let agents = six_turns_through_one_worker(
        &db,
        &[
            ("HOLDFAST_COMMIT_WINDOW", "5s"),
            ("HOLDFAST_COMMIT_BATCH", "1"),
        ],
    )
    .await;
    assert_eq!(step_transactions(&db.connect().await, &agents).await, 6);
}
