//! Postgres over TLS, against a real TLS-only server (`ssl = on`,
//! `hostssl` lines only, SCRAM passwords): real `holdfast` processes run a
//! turn over `sslmode=verify-full`, also across a failover from a primary
//! to its synchronous standby, and the ways a connection can fail say their
//! cause in one line.

use std::process::Command;
use std::time::Duration;

use holdfast_db::connect::ConnectConfig;
use holdfast_db::store;
use holdfast_fakes::{FakeProvider, Reply};
use holdfast_tests::api_server::project_key;
use holdfast_tests::failover::FailoverPair;
use holdfast_tests::process::holdfast_bin;
use holdfast_tests::scenario::{
    count_events, free_port, spawn_api, spawn_api_on, spawn_worker, wait_for_event, wait_for_events,
};
use holdfast_tests::tls_cluster::TlsCluster;
use holdfast_tests::wait_until;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio_postgres::Client;

/// `holdfast migrate` on `url`: (exit success, stdout, stderr).
fn migrate(url: &str) -> (bool, String, String) {
    let out = Command::new(holdfast_bin())
        .arg("migrate")
        .env("HOLDFAST_DATABASE_URL", url)
        .env_remove("PGSSLMODE")
        .env_remove("PGSSLROOTCERT")
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("run holdfast migrate");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `holdfast migrate` on `url` fails with exactly one line on stderr; returns it.
fn migrate_fails(url: &str) -> String {
    let (ok, stdout, stderr) = migrate(url);
    assert!(!ok, "migrate succeeded on {url}: {stdout}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line on stderr, got: {stderr}");
    lines[0].to_owned()
}

async fn connect(url: &str) -> holdfast_db::Result<Client> {
    let (client, connection) = ConnectConfig::parse(url)?.connect().await?;
    tokio::spawn(connection);
    Ok(client)
}

async fn uses_tls(client: &Client) -> bool {
    client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn migrate_api_and_worker_run_a_turn_over_verify_full() {
    let tls = TlsCluster::start().await;
    let url = tls.verify_full_url();
    let (ok, stdout, stderr) = migrate(&url);
    assert!(ok, "holdfast migrate over verify-full: {stdout}{stderr}");
    assert!(stdout.contains("applied"), "{stdout}");

    let config = ConnectConfig::parse(&url).unwrap();
    let client = connect(&url).await.unwrap();
    assert!(uses_tls(&client).await, "the test's own session is TLS");
    let key = store::create_api_key(&client, "tls").await.unwrap();
    let fake = FakeProvider::start().await;
    fake.push(Reply::text("Hello over TLS."));
    let _worker = spawn_worker("tls-worker", &config, &fake, &[]);
    let (_api, base) = spawn_api("tls-api", &config).await;

    let http = holdfast_outbound::client_builder().build().unwrap();
    let created = http
        .post(format!("{base}/v1/agents"))
        .bearer_auth(&key.key)
        .json(&json!({"model": {"provider": "anthropic", "name": "claude-test"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    let agent: Value = created.json().await.unwrap();
    let agent_id: uuid::Uuid = agent["id"].as_str().unwrap().parse().unwrap();
    let input = http
        .post(format!("{base}/v1/agents/{agent_id}/inputs"))
        .bearer_auth(&key.key)
        .header("Idempotency-Key", "tls-1")
        .json(&json!({"content": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(input.status(), StatusCode::CREATED);
    wait_for_event(&client, agent_id, "turn.completed", Duration::from_secs(60)).await;

    let text: Value = client
        .query_one(
            "SELECT data -> 'message' -> 0 -> 'text' FROM holdfast.events \
             WHERE agent_id = $1 AND type = 'model.response'",
            &[&agent_id],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(text, json!("Hello over TLS."));
    // Every session of the API and the worker (pools and LISTEN alike) is
    // TLS: the server has no other way in, and says so per session.
    let sessions: Vec<(String, bool)> = client
        .query(
            "SELECT a.application_name, s.ssl FROM pg_stat_activity a \
             JOIN pg_stat_ssl s USING (pid) \
             WHERE a.datname = 'tls_e2e' AND a.pid <> pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    assert!(sessions.len() >= 2, "API and worker sessions: {sessions:?}");
    assert!(sessions.iter().all(|(_, ssl)| *ssl), "{sessions:?}");
    holdfast_tests::invariants::assert_at_rest(&client, &[agent_id]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_failures_name_their_cause_in_one_line() {
    let tls = TlsCluster::start().await;
    let ca = tls.ca_file.display().to_string();
    let other_ca = tls.other_ca_file.display().to_string();

    let line = migrate_fails(&tls.url("localhost", "sslmode=disable"));
    assert!(
        line.contains("the server requires TLS") && line.contains("sslmode=disable"),
        "{line}"
    );

    let line = migrate_fails(&tls.url(
        "127.0.0.1",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    ));
    assert!(
        line.contains("certificate does not name the host \"127.0.0.1\""),
        "{line}"
    );

    let line = migrate_fails(&tls.url(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={other_ca}"),
    ));
    assert!(
        line.contains("certificate is not trusted") && line.contains(&other_ca),
        "{line}"
    );

    // As libpq: require with an sslrootcert checks the chain (verify-ca).
    let error = connect(&tls.url(
        "localhost",
        &format!("sslmode=require&sslrootcert={other_ca}"),
    ))
    .await
    .unwrap_err();
    assert!(error.to_string().contains("not trusted"), "{error}");

    let wrong_password = format!(
        "postgres://holdfast:wrong@localhost:{}/tls_e2e?sslmode=verify-full&sslrootcert={ca}",
        tls.port
    );
    let line = migrate_fails(&wrong_password);
    assert!(line.contains("authentication failed"), "{line}");

    let no_database = tls
        .verify_full_url()
        .replace("/tls_e2e?", "/no_such_database?");
    let line = migrate_fails(&no_database);
    assert!(line.contains("database does not exist"), "{line}");

    let closed_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let line = migrate_fails(&format!(
        "postgres://holdfast@127.0.0.1:{closed_port}/x?sslmode=disable"
    ));
    assert!(line.contains("the host is unreachable"), "{line}");

    // The modes that connect: verify-ca ignores the name, require and
    // prefer take any certificate, and all of them are TLS.
    for (host, params) in [
        ("127.0.0.1", format!("sslmode=verify-ca&sslrootcert={ca}")),
        ("127.0.0.1", "sslmode=require".to_owned()),
        ("localhost", "sslmode=prefer".to_owned()),
        ("localhost", "application_name=default-sslmode".to_owned()),
    ] {
        let client = connect(&tls.url(host, &params))
            .await
            .unwrap_or_else(|e| panic!("{host} {params}: {e}"));
        assert!(uses_tls(&client).await, "{host} {params}");
    }
}

/// The TCP sessions of other clients on the server `client` is on, as
/// (application_name, ssl).
async fn tcp_sessions(client: &Client) -> Vec<(String, bool)> {
    client
        .query(
            "SELECT a.application_name, s.ssl FROM pg_stat_activity a \
             JOIN pg_stat_ssl s USING (pid) \
             WHERE a.client_addr IS NOT NULL AND a.backend_type = 'client backend' \
               AND a.pid <> pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn processes_reconnect_over_verify_full_tls_to_a_promoted_standby_and_lose_nothing() {
    let mut pair = FailoverPair::start().await;
    pair.serve_tls().await;
    let config = pair.tls_config();
    // The harness's own sessions go through the sockets.
    let (client, connection) = pair.config().connect().await.unwrap();
    tokio::spawn(connection);
    let (project, key) = project_key(&client).await;
    let fake = FakeProvider::start().await;
    fake.set_default(Reply::text("answered"));
    let _worker = spawn_worker(
        "tls-failover-worker",
        &config,
        &fake,
        &[
            ("HOLDFAST_LEASE_TTL", "10s"),
            ("HOLDFAST_LEASE_RENEW_INTERVAL", "2s"),
        ],
    );
    let port = free_port();
    let _api = spawn_api_on("tls-failover-api", &config, port, &[]).await;
    let base = format!("http://127.0.0.1:{port}");
    let http = holdfast_outbound::client_builder().build().unwrap();
    // Sent until answered 201 (503 while the API reconnects), with one
    // Idempotency-Key: at most one input per key.
    let send = |agent: uuid::Uuid, text: String| {
        let http = http.clone();
        let url = format!("{base}/v1/agents/{agent}/inputs");
        let key = key.clone();
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            loop {
                let answer = http
                    .post(&url)
                    .bearer_auth(&key)
                    .header("Idempotency-Key", &text)
                    .json(&json!({"content": text}))
                    .send()
                    .await
                    .unwrap();
                match answer.status() {
                    StatusCode::CREATED | StatusCode::OK => return,
                    StatusCode::SERVICE_UNAVAILABLE if tokio::time::Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    other => panic!("{text}: {other}: {}", answer.text().await.unwrap()),
                }
            }
        }
    };
    let agents: Vec<uuid::Uuid> = {
        let mut agents = Vec::new();
        for _ in 0..3 {
            agents.push(holdfast_tests::new_agent(&client, project).await);
        }
        agents
    };
    for (i, agent) in agents.iter().enumerate() {
        send(*agent, format!("before-{i}")).await;
    }
    for agent in &agents {
        wait_for_event(&client, *agent, "turn.completed", Duration::from_secs(60)).await;
    }
    let before = tcp_sessions(&client).await;
    assert!(before.len() >= 2, "API and worker sessions: {before:?}");
    assert!(before.iter().all(|(_, ssl)| *ssl), "{before:?}");

    pair.kill_primary();
    let killed = std::time::Instant::now();
    pair.promote_standby().await;
    let (client, connection) = pair.config().connect().await.unwrap();
    tokio::spawn(connection);
    for (i, agent) in agents.iter().enumerate() {
        send(*agent, format!("after-{i}")).await;
    }
    for agent in &agents {
        wait_for_events(
            &client,
            *agent,
            "turn.completed",
            2,
            Duration::from_secs(90),
        )
        .await;
    }
    println!(
        "over TLS, primary SIGKILL to a second turn finished on the promoted standby for all {} agents: {:?}",
        agents.len(),
        killed.elapsed()
    );

    // The processes found the new primary by themselves, over verify-full
    // TLS: the API's LISTEN session among them.
    wait_until(
        Duration::from_secs(30),
        "the API's LISTEN session on the new primary",
        || async {
            tcp_sessions(&client)
                .await
                .iter()
                .any(|(name, _)| name == holdfast_api::fanout::LISTEN_APPLICATION_NAME)
        },
    )
    .await;
    let after = tcp_sessions(&client).await;
    assert!(after.len() >= 2, "API and worker sessions: {after:?}");
    assert!(after.iter().all(|(_, ssl)| *ssl), "{after:?}");
    // Nothing acknowledged was lost: every input answered 201, before the
    // kill and after, is there once, with its turn.
    for agent in &agents {
        let inputs: i64 = client
            .query_one(
                "SELECT count(*) FROM holdfast.inputs WHERE agent_id = $1",
                &[agent],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(inputs, 2);
        assert_eq!(count_events(&client, *agent, "turn.completed").await, 2);
        assert_eq!(count_events(&client, *agent, "model.response").await, 2);
    }
    holdfast_tests::invariants::assert_at_rest(&client, &agents).await;
}
