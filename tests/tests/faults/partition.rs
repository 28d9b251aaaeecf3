//! Processes cut off by a partition that drops packets (a proxy that stops
//! forwarding without closing). A worker cut off from Postgres notices
//! within a bounded time and stops its step, its agent moves to another
//! worker after the lease, and after the partition heals nothing it held is
//! written twice. An API cut off from Postgres answers 503 within its
//! bounds and serves again after the heal. A machine daemon cut off from the
//! API runs its command once, and its result and new work go through after
//! the heal.

use std::time::{Duration, Instant};

use holdfast_db::store;
use holdfast_fakes::{FakeProvider, Reply};
use holdfast_tests::api_server::{error_of, project_key, ApiServer};
use holdfast_tests::partition_proxy::PartitionProxy;
use holdfast_tests::process::HoldfastProcess;
use holdfast_tests::scenario::{
    agent_with_input, count_events, free_port, last_event_data, spawn_api_on, spawn_worker,
    wait_for_event,
};
use holdfast_tests::{new_agent, wait_until, MaintenanceLoop, PrivateCluster, ScratchDir, TestDb};
use holdfast_wire::api::machines::RegisterMachineRequest;
use reqwest::StatusCode;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

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
    println!("partitioned worker stopped its step after {noticed_in:?}");
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
    let refused = holdfast_db::store::release_agent(
        &client,
        holdfast_wire::domain::Claim {
            agent_id: agent,
            epoch,
        },
        None,
    )
    .await;
    assert!(
        matches!(refused, Err(holdfast_db::Error::LeaseLost(_))),
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
    holdfast_tests::invariants::assert_at_rest(&client, &[agent]).await;
}

/// `request`, sent now: its status, error type and how long the answer took.
async fn timed_error(request: reqwest::RequestBuilder) -> (StatusCode, String, Duration) {
    let sent = Instant::now();
    let response = request
        .send()
        .await
        .expect("an answer, not a dropped connection");
    let (status, kind, _, _) = error_of(response).await;
    (status, kind, sent.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_partitioned_api_answers_503_in_bounded_time_and_an_input_retried_after_the_heal_is_saved_once(
) {
    let cluster = PrivateCluster::start().await;
    let proxy = PartitionProxy::start(&cluster.cluster).await;
    let (client, connection) = cluster.config().connect().await.unwrap();
    tokio::spawn(connection);
    let (project, key) = project_key(&client).await;
    let agent = new_agent(&client, project).await;
    // A real `server api` process with its request timeout set.
    let request_timeout = Duration::from_secs(3);
    let port = free_port();
    let _api = spawn_api_on(
        "partitioned-api",
        &proxy.config("postgres"),
        port,
        &[("HOLDFAST_API_REQUEST_TIMEOUT", "3s")],
    )
    .await;
    let http = holdfast_outbound::client_builder().build().unwrap();
    let url = |path: &str| format!("http://127.0.0.1:{port}{path}");
    let agent_url = url(&format!("/v1/agents/{agent}"));
    let input_url = url(&format!("/v1/agents/{agent}/inputs"));
    let read = || http.get(&agent_url).bearer_auth(&key);
    let write = || {
        http.post(&input_url)
            .bearer_auth(&key)
            .header("Idempotency-Key", "sent-into-the-partition")
            .json(&json!({"content": "hello"}))
    };
    assert_eq!(read().send().await.unwrap().status(), StatusCode::OK);

    // Cut off, every route that needs Postgres answers 503 in the error
    // shape within its bound (readiness 2 s, the rest the request timeout)
    // instead of hanging.
    proxy.cut();
    let (ready, got, sent) = tokio::join!(
        timed_error(http.get(url("/readyz"))),
        timed_error(read()),
        timed_error(write()),
    );
    let margin = Duration::from_secs(2);
    println!(
        "partitioned API: readyz 503 after {:?}, a read after {:?}, an input after {:?}",
        ready.2, got.2, sent.2
    );
    assert_eq!(
        (ready.0, ready.1.as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
    );
    assert!(
        ready.2 < Duration::from_secs(2) + margin,
        "readyz took {:?}",
        ready.2
    );
    for (status, kind, took) in [got, sent] {
        assert_eq!(
            (status, kind.as_str()),
            (StatusCode::SERVICE_UNAVAILABLE, "timeout")
        );
        assert!(took < request_timeout + margin, "answered after {took:?}");
    }
    assert_eq!(
        http.get(url("/healthz")).send().await.unwrap().status(),
        StatusCode::OK,
        "the process itself stays alive"
    );

    // Healed: the API serves again by itself, and the input the client
    // sends again with the same key exists once (its first try may have
    // reached Postgres when the held bytes went through).
    proxy.heal();
    wait_until(
        Duration::from_secs(30),
        "the API serves reads again",
        || async {
            read()
                .send()
                .await
                .is_ok_and(|r| r.status() == StatusCode::OK)
        },
    )
    .await;
    let again = write().send().await.unwrap();
    assert_eq!(again.status(), StatusCode::CREATED);
    let inputs: i64 = client
        .query_one(
            "SELECT count(*) FROM holdfast.inputs WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(inputs, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_partitioned_machine_daemon_runs_its_command_once_and_its_result_and_new_work_go_through_after_the_heal(
) {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let api = ApiServer::start(&db).await;
    let proxy = PartitionProxy::start_tcp(api.addr).await;
    let fake = FakeProvider::start().await;
    let dir = ScratchDir::new("partitioned-daemon");
    let _worker = spawn_worker("w", &db.config, &fake, &[]);
    let _maintenance = HoldfastProcess::spawn(
        "maintenance",
        &["server", "maintenance"],
        &[
            ("HOLDFAST_DATABASE_URL", db.config.to_connection_string()),
            ("HOLDFAST_MAINTENANCE_INTERVAL", "100ms".into()),
            ("HOLDFAST_MACHINE_OFFLINE_AFTER", "2s".into()),
        ],
    );
    let machine = api
        .client(&key)
        .register_machine(&RegisterMachineRequest {
            name: "behind-a-partition".into(),
            wake_url: None,
        })
        .await
        .unwrap();
    let mut daemon = HoldfastProcess::spawn(
        "daemon",
        &["machine", "run"],
        &[
            ("HOLDFAST_URL", proxy.http_url()),
            ("HOLDFAST_MACHINE_TOKEN", machine.token.clone()),
            (
                "HOLDFAST_MACHINE_STATE_DIR",
                dir.join("state").display().to_string(),
            ),
            ("HOLDFAST_MACHINE_WORK_DIR", dir.display().to_string()),
            ("HOLDFAST_MACHINE_HEARTBEAT_INTERVAL", "200ms".into()),
            ("HOLDFAST_MACHINE_CLAIM_WAIT", "2s".into()),
        ],
    );
    // Each command appends a line to `marker`; the first waits for `go`.
    let marker = dir.join("marker");
    let marker_lines = || {
        std::fs::read_to_string(&marker)
            .map(|text| text.lines().count())
            .unwrap_or(0)
    };
    let run_command = |command: &str| {
        fake.push(Reply::tool_calls(vec![(
            "run_command",
            json!({"command": command}),
        )]));
        fake.push(Reply::text("done"));
        let config = json!({
            "model": {"provider": "anthropic", "name": "claude-test"},
            "tools": [{"type": "run_command", "machine": machine.id}],
        });
        let client = &client;
        async move {
            let agent = store::create_agent(client, project, &config).await.unwrap();
            store::create_input(client, agent, &json!("run it"), None)
                .await
                .unwrap();
            agent
        }
    };
    let first = run_command(
        "echo ran >> marker; i=0; while [ ! -e go ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; echo first-output",
    )
    .await;
    wait_until(WAIT, "the command started", || async {
        marker_lines() == 1
    })
    .await;

    // Cut off while its command runs: the machine goes offline, the agent
    // is told the machine is unreachable and its turn goes on; the command
    // finishes behind the partition.
    proxy.cut();
    wait_for_event(&client, first, "machine.unreachable", WAIT).await;
    wait_for_event(&client, first, "turn.completed", WAIT).await;
    std::fs::write(dir.join("go"), b"").unwrap();

    // Healed: the daemon's held calls go through, its result is recorded
    // (late), nothing ran twice, and it takes new work.
    proxy.heal();
    wait_for_event(&client, first, "command.finished", WAIT).await;
    let late = last_event_data(&client, first, "command.finished").await;
    assert_eq!(late["late"], true, "{late}");
    assert_eq!(late["stdout"], "first-output\n");
    let second = run_command("echo ran >> marker; echo second-output").await;
    wait_for_event(&client, second, "turn.completed", WAIT).await;
    let output: serde_json::Value = client
        .query_one(
            "SELECT output FROM holdfast.tool_calls WHERE agent_id = $1",
            &[&second],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(output["stdout"], "second-output\n", "{output}");
    assert_eq!(marker_lines(), 2, "each command ran once");
    for agent in [first, second] {
        assert_eq!(count_events(&client, agent, "command.accepted").await, 1);
    }
    assert!(!daemon.has_exited(), "{}", daemon.log_text());
    assert!(!daemon.log_text().contains("panicked"));
    holdfast_tests::invariants::assert_at_rest(&client, &[first, second]).await;
}
