//! `holdfast maintenance` as real processes: SIGKILL mid-batch loses no
//! delivery, two processes at once deliver each event once, SIGTERM stops a
//! process promptly.

use std::time::Duration;

use holdfast_db::store;
use holdfast_tests::webhook_receiver::{
    assert_every_event_received, count_status, deliveries, hook, spawn_maintenance, Behaviour,
    Receiver,
};
use holdfast_tests::{new_agent, project_and_agent, wait_until, TestDb};
use serde_json::json;
use tokio::process::Child;
use tokio_postgres::Client;
use uuid::Uuid;

const FAST: &[(&str, &str)] = &[
    ("HOLDFAST_MAINTENANCE_INTERVAL", "100ms"),
    ("HOLDFAST_WEBHOOK_BACKOFF_BASE", "100ms"),
    ("HOLDFAST_WEBHOOK_BACKOFF_MAX", "500ms"),
    ("HOLDFAST_WEBHOOK_RETRY_WINDOW", "2m"),
    // Claims of a killed process come back after 3 s + 1.5 s.
    ("HOLDFAST_WEBHOOK_TIMEOUT", "3s"),
];

async fn agents_with_inputs(client: &Client, project: Uuid, agents: usize, per_agent: usize) {
    let mut ids = Vec::new();
    for _ in 0..agents {
        ids.push(new_agent(client, project).await);
    }
    for _ in 0..per_agent {
        for agent in &ids {
            store::create_input(client, *agent, &json!("hello"), None)
                .await
                .unwrap();
        }
    }
}

async fn terminate(child: &mut Child) {
    let pid = child.id().expect("running").to_string();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = tokio::time::timeout(Duration::from_secs(5), child.wait())
        .await
        .expect("SIGTERM stops holdfast maintenance within 5 s")
        .unwrap();
    assert!(exit.success(), "clean exit after SIGTERM: {exit}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_mid_batch_loses_nothing_and_resends_under_the_same_id() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, _) = project_and_agent(&client).await;
    let receiver = Receiver::start(Behaviour::Hold).await;
    let endpoint = hook(&client, project, &receiver, json!(["input.received"])).await;
    agents_with_inputs(&client, project, 10, 3).await;

    let mut first = spawn_maintenance(&db.url(), FAST);
    // One request per agent is in flight (the others wait their turn).
    wait_until(
        Duration::from_secs(60),
        "a batch of requests held",
        || async { receiver.count() >= 10 },
    )
    .await;
    first.kill().await.unwrap();
    let _ = first.wait().await;
    let cut_off: Vec<String> = receiver.by_id().into_keys().collect();
    // The receiver answers the held requests only now: the sender is gone.
    receiver.release();
    assert_eq!(count_status(&client, endpoint, "delivered").await, 0);

    let mut second = spawn_maintenance(&db.url(), FAST);
    wait_until(
        Duration::from_secs(60),
        "every delivery delivered",
        || async { count_status(&client, endpoint, "pending").await == 0 },
    )
    .await;
    terminate(&mut second).await;

    assert_eq!(deliveries(&client, endpoint).await.len(), 30);
    assert_every_event_received(&client, endpoint, &receiver).await;
    assert!(cut_off.len() >= 10);
    let by_id = receiver.by_id();
    for id in cut_off {
        assert!(
            by_id[&id].len() >= 2,
            "{id}, cut off by the kill, was sent again under the same webhook-id"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_maintenance_processes_deliver_each_event_once() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, _) = project_and_agent(&client).await;
    let receiver = Receiver::start(Behaviour::Accept).await;
    let endpoint = hook(&client, project, &receiver, json!(["*"])).await;
    // A lease far longer than any answer here takes: only a claim that
    // outlives its lease may be sent twice.
    let env = [FAST, &[("HOLDFAST_WEBHOOK_TIMEOUT", "20s")]].concat();
    let mut one = spawn_maintenance(&db.url(), &env);
    let mut two = spawn_maintenance(&db.url(), &env);
    agents_with_inputs(&client, project, 20, 4).await;

    wait_until(
        Duration::from_secs(60),
        "every delivery delivered",
        || async { count_status(&client, endpoint, "pending").await == 0 },
    )
    .await;
    terminate(&mut one).await;
    terminate(&mut two).await;

    assert_every_event_received(&client, endpoint, &receiver).await;
    let expected = deliveries(&client, endpoint).await;
    assert_eq!(
        receiver.count(),
        expected.len(),
        "each event exactly once when the receiver answers promptly"
    );
    for (id, copies) in receiver.by_id() {
        assert_eq!(copies.len(), 1, "{id} sent {} times", copies.len());
    }
    assert!(expected.iter().all(|d| d.attempts == 1));
}
