//! The schema stays distributable by `agent_id` (docs/scaling.md, "Beyond
//! one Postgres"): a real workload — the API, a worker process on a fake
//! provider, the maintenance process delivering webhooks; several agents
//! each calling a custom tool — runs on a cluster with pg_stat_statements
//! tracking every statement, those inside SQL functions included. Then every
//! statement that touches an agent-keyed table must name `agent_id` (or, on
//! `agents`, its key), or be one of the few cross-agent statements that
//! docs/scaling.md lists with why each is fine on Citus.

use std::collections::BTreeSet;
use std::time::Duration;

use holdfast_fakes::{FakeProvider, Reply};
use holdfast_tests::api_server::{project_key, ApiServer};
use holdfast_tests::scenario::spawn_worker;
use holdfast_tests::webhook_receiver::{hook, spawn_maintenance, Behaviour, Receiver};
use holdfast_tests::{wait_until, PrivateCluster};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(30);
const AGENTS: usize = 4;
const TURNS: usize = 2;

/// Tables whose rows belong to one agent: distributed by `agent_id`.
const AGENT_TABLES: &[&str] = &[
    "agents",
    "inputs",
    "steps",
    "messages",
    "events",
    "tool_calls",
    "approvals",
    "questions",
    "commands",
    "webhook_deliveries",
    "stream_watches",
    "subagent_cancels",
];

/// The cross-agent statements, each by a fragment of its text and the
/// function it runs in; docs/scaling.md ("What does not distribute") names
/// each function and why it is fine on Citus.
const CROSS_AGENT: &[(&str, &str)] = &[
    // Sweeps by state or liveness, not by agent: run per shard.
    ("DELETE FROM holdfast.stream_watches w", "maintenance_tick"),
    ("FROM holdfast.subagent_cancels c", "maintenance_tick"),
    ("AND run_after > state_changed_at", "maintenance_tick"),
    // The dispatchers' per-endpoint cap counts claims across agents.
    (
        "HAVING count(*) >= p_max_per_endpoint",
        "claim_webhook_deliveries",
    ),
    (
        "c.endpoint_id = v_row.endpoint_id",
        "claim_webhook_deliveries",
    ),
    // A step keeps its agent's lease only while no other agent waits to be
    // claimed: fairness across agents, as the claim's.
    (
        "greatest(o.run_after, o.state_changed_at) <= v_now",
        "settle_agent",
    ),
    // A gauge over the whole queue.
    ("min(next_attempt_at)", "webhook_queue_stats"),
];

/// A migrated cluster with pg_stat_statements loaded, tracking nested
/// statements.
async fn cluster_with_statement_stats() -> PrivateCluster {
    let primary = PrivateCluster::start().await;
    let conf = primary.cluster.data_dir().join("postgresql.conf");
    let mut text = std::fs::read_to_string(&conf).unwrap();
    text.push_str(
        "\nshared_preload_libraries = 'pg_stat_statements'\n\
         pg_stat_statements.track = all\n\
         pg_stat_statements.max = 10000\n",
    );
    std::fs::write(&conf, text).unwrap();
    tokio::task::block_in_place(|| {
        primary.cluster.stop().unwrap();
        primary.cluster.restart().unwrap();
    });
    primary
}

async fn call(
    server: &ApiServer,
    key: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> Value {
    let mut request = server.request(method, path, key);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    assert!(status.is_success(), "{path}: {status} {body}");
    body
}

async fn completed_turns(server: &ApiServer, key: &str, agent: &str) -> usize {
    let listing = call(
        server,
        key,
        Method::GET,
        &format!("/v1/agents/{agent}/events?limit=1000"),
        None,
    )
    .await;
    listing["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["type"] == "turn.completed")
        .count()
}

/// Answer the agent's waiting custom call, once there is one.
async fn answer_call(server: &ApiServer, key: &str, agent: &str) {
    let path = format!("/v1/agents/{agent}/tool-calls?status=waiting&kind=custom");
    let deadline = tokio::time::Instant::now() + WAIT;
    let id = loop {
        let calls = call(server, key, Method::GET, &path, None).await;
        if let Some(id) = calls["tool_calls"][0]["id"].as_str() {
            break id.to_owned();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no custom call waits on {agent}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    call(
        server,
        key,
        Method::POST,
        &format!("/v1/tool-calls/{id}/result"),
        Some(json!({"output": {"found": 1}})),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_hot_statement_of_a_workload_filters_by_agent_id() {
    let primary = cluster_with_statement_stats().await;
    let config = primary.config();
    let (sql, connection) = config.connect().await.unwrap();
    tokio::spawn(connection);
    sql.batch_execute("CREATE EXTENSION pg_stat_statements")
        .await
        .unwrap();

    let (project, key) = project_key(&sql).await;
    let receiver = Receiver::start(Behaviour::Accept).await;
    hook(&sql, project, &receiver, json!(["*"])).await;
    // A turn calls the custom tool once, then answers.
    let fake = FakeProvider::start().await;
    fake.set_responder(|body| {
        let last = &body["messages"].as_array().unwrap().last().unwrap()["content"];
        let answered = last
            .as_array()
            .is_some_and(|blocks| blocks.iter().any(|b| b["type"] == "tool_result"));
        if answered {
            Reply::text("done")
        } else {
            Reply::tool_calls(vec![("lookup", json!({"q": 1}))])
        }
    });
    let server = ApiServer::start_on(&config, |_| {}).await;
    let _worker = spawn_worker("w-distributable", &config, &fake, &[]);
    let _maintenance = spawn_maintenance(
        &config.to_connection_string(),
        &[("HOLDFAST_MAINTENANCE_INTERVAL", "100ms")],
    );
    sql.batch_execute("SELECT pg_stat_statements_reset()")
        .await
        .unwrap();

    let agent_config = json!({
        "model": {"provider": "anthropic", "name": "claude-test"},
        "tools": [{"type": "custom", "name": "lookup"}],
    });
    let mut agents = Vec::new();
    for _ in 0..AGENTS {
        let agent = call(
            &server,
            &key,
            Method::POST,
            "/v1/agents",
            Some(agent_config.clone()),
        )
        .await;
        agents.push(agent["id"].as_str().unwrap().to_owned());
    }
    let stream = server
        .request(
            Method::GET,
            &format!("/v1/agents/{}/stream", agents[0]),
            &key,
        )
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), StatusCode::OK);
    for turn in 1..=TURNS {
        for agent in &agents {
            call(
                &server,
                &key,
                Method::POST,
                &format!("/v1/agents/{agent}/inputs"),
                Some(json!({"content": format!("turn {turn}")})),
            )
            .await;
        }
        for agent in &agents {
            answer_call(&server, &key, agent).await;
        }
        for agent in &agents {
            wait_until(WAIT, "the turn completes", || async {
                completed_turns(&server, &key, agent).await == turn
            })
            .await;
        }
    }
    wait_until(WAIT, "webhooks delivered", || async {
        receiver.count() > AGENTS * TURNS * 4
    })
    .await;

    let statements: Vec<String> = sql
        .query(
            "SELECT query FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid \
              WHERE d.datname = current_database()",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    let hot: Vec<(&String, BTreeSet<&str>)> = statements
        .iter()
        .map(|q| (q, agent_tables_of(q)))
        .filter(|(_, tables)| !tables.is_empty())
        .collect();
    assert!(hot.len() > 20, "the workload ran: {statements:#?}");
    let cross: BTreeSet<&String> = hot
        .iter()
        .filter(|(q, tables)| !filters_by_agent(q, tables))
        .map(|(q, _)| *q)
        .filter(|q| !CROSS_AGENT.iter().any(|(fragment, _)| q.contains(fragment)))
        .collect();
    assert!(
        cross.is_empty(),
        "statements on agent-keyed tables without agent_id:\n{}",
        cross
            .iter()
            .map(|q| format!("---\n{q}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    drop(stream);
    let scaling = include_str!("../../../docs/scaling.md");
    for (_, function) in CROSS_AGENT {
        assert!(
            scaling.contains(&format!("`{function}`")),
            "docs/scaling.md says why {function} may cross agents"
        );
    }
}

/// A statement's words, lowercased (`holdfast.events` is two).
fn words(statement: &str) -> Vec<String> {
    statement
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase)
        .collect()
}

/// The agent-keyed tables a statement reads or writes (after FROM, JOIN,
/// UPDATE or INTO, schema-qualified or not).
fn agent_tables_of(statement: &str) -> BTreeSet<&'static str> {
    let words = words(statement);
    let mut tables = BTreeSet::new();
    for (i, word) in words.iter().enumerate() {
        if !["from", "join", "update", "into"].contains(&word.as_str()) {
            continue;
        }
        let mut next = words.get(i + 1);
        if next.is_some_and(|w| w == "holdfast") {
            next = words.get(i + 2);
        }
        if let Some(table) = next.and_then(|w| AGENT_TABLES.iter().find(|t| **t == w)) {
            tables.insert(*table);
        }
    }
    tables
}

/// Whether a statement names the distribution key: `agent_id`, or on
/// `agents` alone its `id`.
fn filters_by_agent(statement: &str, tables: &BTreeSet<&str>) -> bool {
    let words = words(statement);
    words.iter().any(|w| w == "agent_id")
        || (tables.len() == 1 && tables.contains("agents") && words.iter().any(|w| w == "id"))
}
