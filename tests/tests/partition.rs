//! A worker cut off from Postgres by a partition that drops packets (a
//! proxy that stops forwarding without closing): it notices within a
//! bounded time and stops its step, its agent moves to another worker after
//! the lease, and after the partition heals nothing it held is written
//! twice.

use std::time::{Duration, Instant};

use holdfast_fakes::{FakeProvider, Reply};
use holdfast_tests::partition_proxy::PartitionProxy;
use holdfast_tests::scenario::{agent_with_input, count_events, spawn_worker, wait_for_event};
use holdfast_tests::{wait_until, MaintenanceLoop, PrivateCluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_partitioned_worker_notices_stops_and_its_agent_moves_after_the_lease() {
    let cluster = PrivateCluster::start().await;
    let proxy = PartitionProxy::start(&cluster.cluster).await;
    let direct = cluster.config();
    let (client, connection) = direct.connect().await.unwrap();
    tokio::spawn(connection);
    let fake = FakeProvider::start().await;
    fake.set_default(Reply::text("answered by the healthy worker"));
    fake.push(Reply::text("answered by the cut-off worker").hold_before_headers());
    let env = [
        ("HOLDFAST_LEASE_TTL", "4s"),
        ("HOLDFAST_LEASE_RENEW_INTERVAL", "1s"),
    ];
    let cut_off = spawn_worker("cut-off", &proxy.config("postgres"), &fake, &env);
    let _maintenance = MaintenanceLoop::start(&direct);
    let agent = agent_with_input(&client, "go").await;
    fake.wait_until_held(1).await;
    let epoch: i64 = client
        .query_one(
            "SELECT lease_epoch FROM holdfast.agents WHERE id = $1 AND lease_owner = 'cut-off'",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);

    proxy.cut();
    let cut_at = Instant::now();
    // Its renewal gets no answer: the worker stops the step when the lease
    // may have run out by its own clock, and keeps trying to reconnect
    // (each attempt abandoned after a bounded wait) instead of hanging.
    wait_until(
        Duration::from_secs(20),
        "the cut-off worker stops its step",
        || async { cut_off.log_text().contains("stopping the step") },
    )
    .await;
    let noticed_in = cut_at.elapsed();
    assert!(
        noticed_in < Duration::from_secs(8),
        "noticed within the lease: {noticed_in:?}"
    );
    wait_until(
        Duration::from_secs(30),
        "the cut-off worker gives up a session open that gets no answer",
        || async {
            cut_off
                .log_text()
                .contains("cannot open a LISTEN session; retrying")
        },
    )
    .await;

    // Maintenance releases the agent once the lease expires (the worker's
    // Postgres session is alive behind the proxy), and another worker ends
    // the turn.
    let _healthy = spawn_worker("healthy", &direct, &fake, &env);
    wait_for_event(&client, agent, "turn.completed", Duration::from_secs(40)).await;

    // Healed: the held reply is let go (the cut-off worker's step was
    // stopped already), and a write with its epoch is refused.
    proxy.heal();
    fake.release();
    let refused = holdfast_engine::store::release_agent(
        &client,
        holdfast_engine::domain::Claim {
            agent_id: agent,
            epoch,
        },
        None,
    )
    .await;
    assert!(
        matches!(refused, Err(holdfast_engine::Error::LeaseLost(_))),
        "a write with the cut-off worker's epoch is refused: {refused:?}"
    );
    assert_eq!(count_events(&client, agent, "model.response").await, 1);
    let text = holdfast_tests::scenario::saved_text(&client, agent).await;
    assert!(text.contains("healthy worker"), "{text}");
    assert!(
        !cut_off.log_text().contains("panicked"),
        "{}",
        cut_off.log_text()
    );
}
