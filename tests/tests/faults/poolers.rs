//! Holdfast behind a real PgBouncer (Debian's package). In session mode it
//! works as on a direct connection: wake-ups by LISTEN, and a killed
//! worker's agents released from its dead session, not after the lease. In
//! transaction mode every server process refuses to start, naming the
//! problem and the fix, instead of running on connections whose prepared
//! statements, notifications and lease identity change under it.

use std::time::{Duration, Instant};

use holdfast_fakes::{FakeProvider, Reply};
use holdfast_tests::pgbouncer::{PgBouncer, PoolMode};
use holdfast_tests::process::HoldfastProcess;
use holdfast_tests::scenario::{agent_with_input, count_events, spawn_worker, wait_for_event};
use holdfast_tests::{wait_until, PrivateCluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_server_process_refuses_a_transaction_mode_pooler_and_names_the_fix() {
    let cluster = PrivateCluster::start().await;
    let bouncer = PgBouncer::start(&cluster.cluster, PoolMode::Transaction).await;
    let pooled = bouncer.config("postgres").to_connection_string();
    let fake = FakeProvider::start().await;
    let mut processes = vec![
        spawn_worker("pooled-worker", &bouncer.config("postgres"), &fake, &[]),
        HoldfastProcess::spawn(
            "pooled-api",
            &["server", "api"],
            &[
                ("HOLDFAST_DATABASE_URL", pooled.clone()),
                ("HOLDFAST_LISTEN", "127.0.0.1:0".into()),
            ],
        ),
        HoldfastProcess::spawn(
            "pooled-maintenance",
            &["server", "maintenance"],
            &[("HOLDFAST_DATABASE_URL", pooled.clone())],
        ),
        HoldfastProcess::spawn(
            "pooled-migrate",
            &["migrate"],
            &[("HOLDFAST_DATABASE_URL", pooled)],
        ),
    ];
    for process in &mut processes {
        let code = process.wait_exit(Duration::from_secs(30)).await;
        let log = process.log_text();
        assert_ne!(code, Some(0), "{} started: {log}", process.name);
        for part in [
            "HOLDFAST_DATABASE_URL",
            "shares Postgres sessions between its clients",
            "transaction or statement pooling",
            "pool_mode = session",
        ] {
            assert!(
                log.contains(part),
                "{}: {part:?} missing from {log}",
                process.name
            );
        }
        assert!(!log.contains("claim failed"), "{}: {log}", process.name);
    }
    assert_eq!(fake.request_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_session_mode_pooler_works_as_a_direct_connection_does() {
    let cluster = PrivateCluster::start().await;
    let bouncer = PgBouncer::start(&cluster.cluster, PoolMode::Session).await;
    let pooled = bouncer.config("postgres");
    let (client, connection) = cluster.config().connect().await.unwrap();
    tokio::spawn(connection);
    let fake = FakeProvider::start().await;
    fake.set_default(Reply::text("done"));
    // Polling once an hour: the agents below are woken by LISTEN alone.
    let env = [
        ("HOLDFAST_POLL_INTERVAL", "1h"),
        ("HOLDFAST_LEASE_TTL", "60s"),
    ];
    let mut first = spawn_worker("session-w1", &pooled, &fake, &env);
    let _maintenance = HoldfastProcess::spawn(
        "session-maintenance",
        &["server", "maintenance"],
        &[
            ("HOLDFAST_DATABASE_URL", pooled.to_connection_string()),
            ("HOLDFAST_MAINTENANCE_INTERVAL", "100ms".into()),
        ],
    );
    wait_until(Duration::from_secs(60), "the worker started", || async {
        first.log_text().contains("worker started")
    })
    .await;
    let woken = agent_with_input(&client, "first").await;
    wait_for_event(&client, woken, "turn.completed", Duration::from_secs(20)).await;

    // Killed in the middle of a model call: its backend stays in the
    // pooler's pool, yet the agent is released from the dead session.
    fake.push(Reply::text("never finished").hold_before_headers());
    let agent = agent_with_input(&client, "second").await;
    fake.wait_until_held(1).await;
    first.signal("KILL");
    first.wait_exit(Duration::from_secs(10)).await;
    let killed = Instant::now();
    let _second = spawn_worker("session-w2", &pooled, &fake, &env);
    wait_for_event(&client, agent, "turn.completed", Duration::from_secs(40)).await;
    let recovered_in = killed.elapsed();
    println!("through a session-mode pooler, SIGKILL to the turn finished by another worker: {recovered_in:?}");
    assert!(
        recovered_in < Duration::from_secs(30),
        "released from its dead session, not by the 60 s lease: {recovered_in:?}"
    );
    let postgres_log = std::fs::read_to_string(cluster.cluster.log_file()).unwrap();
    assert!(
        postgres_log.contains(&format!("released agent {agent} (session_gone)")),
        "{postgres_log}"
    );
    assert_eq!(count_events(&client, agent, "model.response").await, 1);
    holdfast_tests::invariants::assert_at_rest(&client, &[agent]).await;
}
