//! The maintenance loop (`maintenance::run`) against real Postgres: it
//! releases expired leases and the leases of dead sessions, and it rides out
//! a Postgres restart (reconnects, LISTENs again, keeps delivering webhooks).

use holdfast_providers::egress::EgressPolicy;
use std::sync::Arc;
use std::time::Duration;

use holdfast_db::connect::ConnectConfig;
use holdfast_db::store;
use holdfast_tests::webhook_receiver::{count_status, hook, Behaviour, Receiver};
use holdfast_tests::{project_and_agent, wait_until, PrivateCluster, TestDb};
use holdfast_worker::maintenance::{self, Settings};
use holdfast_worker::webhooks::DispatcherSettings;
use serde_json::json;
use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

fn settings(interval: Duration) -> Settings {
    Settings {
        interval,
        webhooks: DispatcherSettings {
            backoff_base: Duration::from_millis(50),
            backoff_max: Duration::from_millis(500),
            egress: Arc::new(EgressPolicy::parse("webhook=127.0.0.0/8").unwrap()),
            ..DispatcherSettings::default()
        },
        ..Settings::default()
    }
}

async fn agent_state(client: &Client, agent: Uuid) -> (String, i64) {
    let row = client
        .query_one(
            "SELECT state, lease_epoch FROM holdfast.agents WHERE id = $1",
            &[&agent],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

async fn connect(config: &ConnectConfig) -> Client {
    let (client, connection) = config.connect().await.unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn maintenance_releases_expired_leases_and_the_leases_of_dead_sessions() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, expiring) = project_and_agent(&client).await;
    let orphaned = holdfast_tests::new_agent(&client, project).await;
    for agent in [expiring, orphaned] {
        store::create_input(&client, agent, &json!("go"), None)
            .await
            .unwrap();
    }
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(maintenance::run(
        settings(Duration::from_millis(100)),
        db.config.clone(),
        shutdown.clone(),
    ));

    // A worker whose lease runs out (it stopped renewing).
    let worker = db.connect().await;
    let claims = store::claim_agents(&worker, "stalled", 1, Duration::from_millis(300))
        .await
        .unwrap();
    assert_eq!(claims.len(), 1);
    let first = claims[0];
    wait_until(
        Duration::from_secs(10),
        "the expired lease is released",
        || async { agent_state(&client, first.agent_id).await.0 != "running" },
    )
    .await;
    let (state, epoch) = agent_state(&client, first.agent_id).await;
    assert_eq!(state, "ready", "the agent is claimable again");
    assert!(epoch > first.epoch, "the epoch moved past the old holder");

    // A worker whose session dies with a long lease: released at once.
    let crashed = db.connect().await;
    let claims = store::claim_agents(&crashed, "crashed", 1, Duration::from_secs(600))
        .await
        .unwrap();
    assert_eq!(claims.len(), 1);
    let second = claims[0];
    drop(crashed);
    wait_until(
        Duration::from_secs(10),
        "the dead session's lease is released",
        || async { agent_state(&client, second.agent_id).await.0 != "running" },
    )
    .await;
    assert!(agent_state(&client, second.agent_id).await.1 > second.epoch);

    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(5), running)
        .await
        .expect("stops promptly")
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn maintenance_rides_out_a_postgres_restart() {
    let cluster = PrivateCluster::start().await;
    let config = cluster.config();
    let client = connect(&config).await;
    let (project, agent) = project_and_agent(&client).await;
    let receiver = Receiver::start(Behaviour::Accept).await;
    let endpoint = hook(&client, project, &receiver, json!(["input.received"])).await;
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(maintenance::run(
        settings(Duration::from_millis(200)),
        config.clone(),
        shutdown.clone(),
    ));
    store::create_input(&client, agent, &json!("before"), None)
        .await
        .unwrap();
    wait_until(Duration::from_secs(20), "delivered before", || async {
        count_status(&client, endpoint, "delivered").await == 1
    })
    .await;

    // Postgres restarts: every session is cut. (A clean stop: the test
    // cluster runs with synchronous_commit = off, so a crash could lose the
    // last commits, which is not what this test is about.)
    let server = &cluster.cluster;
    tokio::task::block_in_place(|| server.stop()).unwrap();
    tokio::task::block_in_place(|| server.restart()).unwrap();
    let client = connect(&config).await;
    wait_until(Duration::from_secs(20), "LISTEN again", || async {
        client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN holdfast_webhooks'",
                &[],
            )
            .await
            .map(|r| r.get::<_, i64>(0) == 1)
            .unwrap_or(false)
    })
    .await;
    assert!(!running.is_finished(), "the loop survived the restart");

    // Webhooks flow again, and so do the ticks.
    store::create_input(&client, agent, &json!("after"), None)
        .await
        .unwrap();
    wait_until(Duration::from_secs(20), "delivered after", || async {
        count_status(&client, endpoint, "delivered").await == 2
    })
    .await;
    let worker = connect(&config).await;
    let claims = store::claim_agents(&worker, "stalled", 1, Duration::from_millis(200))
        .await
        .unwrap();
    assert_eq!(claims.len(), 1);
    wait_until(
        Duration::from_secs(20),
        "expired lease released",
        || async { agent_state(&client, agent).await.0 != "running" },
    )
    .await;

    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(5), running)
        .await
        .expect("stops promptly")
        .unwrap()
        .unwrap();
    assert_eq!(receiver.count(), 2);
    assert!(receiver.received().iter().all(|r| r.verified.is_ok()));
}
