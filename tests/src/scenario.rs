//! Building blocks for end-to-end scenarios: workers pointed at a fake
//! provider, agents with inputs, and reads of the timeline.

use std::time::Duration;

use holdfast_db::connect::{ConnectConfig, Session};
use holdfast_db::store;
use holdfast_fakes::FakeProvider;
use serde_json::{json, Value};
use tokio_postgres::Client;
use uuid::Uuid;

use crate::process::HoldfastProcess;
use crate::wait_until;

/// A `holdfast server worker` process on `db`, talking to `fake` as its Anthropic
/// and OpenAI endpoint, with `extra` env on top.
pub fn spawn_worker(
    name: &str,
    db: &ConnectConfig,
    fake: &FakeProvider,
    extra: &[(&str, &str)],
) -> HoldfastProcess {
    let mut envs = vec![
        ("HOLDFAST_DATABASE_URL", db.to_connection_string()),
        ("ANTHROPIC_BASE_URL", fake.base_url_anthropic()),
        ("ANTHROPIC_API_KEY", "test-key".to_owned()),
        ("OPENAI_BASE_URL", fake.base_url_openai()),
        ("OPENAI_API_KEY", "test-key".to_owned()),
        ("HOLDFAST_WORKER_NAME", name.to_owned()),
        ("HOLDFAST_POLL_INTERVAL", "200ms".to_owned()),
    ];
    envs.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
    HoldfastProcess::spawn(name, &["server", "worker"], &envs)
}

/// A `holdfast server api` process on `db`, on a free loopback port; returns it
/// with its base URL once `/healthz` answers.
pub async fn spawn_api(name: &str, db: &ConnectConfig) -> (HoldfastProcess, String) {
    let port = free_port();
    let api = spawn_api_on(name, db, port, &[]).await;
    (api, format!("http://127.0.0.1:{port}"))
}

/// A port no one listens on now: bind port 0 to be handed one, then close
/// it for a process to take.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("find a free port")
        .port()
}

/// A `holdfast server api` process on `db` listening on `port`, with `extra` env
/// on top, once `/healthz` answers (a restart on the same port keeps the
/// clients' URL).
pub async fn spawn_api_on(
    name: &str,
    db: &ConnectConfig,
    port: u16,
    extra: &[(&str, &str)],
) -> HoldfastProcess {
    let mut envs = vec![
        ("HOLDFAST_DATABASE_URL", db.to_connection_string()),
        ("HOLDFAST_LISTEN", format!("127.0.0.1:{port}")),
    ];
    envs.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
    let api = HoldfastProcess::spawn(name, &["server", "api"], &envs);
    let http = holdfast_outbound::client_builder().build().unwrap();
    let health = format!("http://127.0.0.1:{port}/healthz");
    wait_until(
        Duration::from_secs(60),
        "the API answers /healthz",
        || async {
            http.get(&health)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
        },
    )
    .await;
    api
}

/// A new agent on the fake Anthropic model offering `tools`, with the input
/// `text` (so its first turn starts).
pub async fn start_turn(client: &Client, tools: Value, text: &str) -> Uuid {
    let config = json!({"model": {"provider": "anthropic", "name": "claude-test"}, "tools": tools});
    let agent = agent_with_config(client, &config).await;
    store::create_input(client, agent, &json!(text), None)
        .await
        .unwrap();
    agent
}

/// A new project with one agent of `config`.
pub async fn agent_with_config(client: &Client, config: &Value) -> Uuid {
    let project: Uuid = client
        .query_one(
            "SELECT holdfast.ensure_project($1)",
            &[&format!("p{}", Uuid::new_v4().simple())],
        )
        .await
        .unwrap()
        .get(0);
    store::create_agent(client, project, config).await.unwrap()
}

/// A new Anthropic agent with one input.
pub async fn agent_with_input(client: &Client, text: &str) -> Uuid {
    let config = json!({"model": {"provider": "anthropic", "name": "claude-test"}});
    let agent = agent_with_config(client, &config).await;
    store::create_input(client, agent, &json!(text), None)
        .await
        .unwrap();
    agent
}

pub async fn count_events(client: &Client, agent: Uuid, kind: &str) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM holdfast.events WHERE agent_id = $1 AND type = $2",
            &[&agent, &kind],
        )
        .await
        .unwrap()
        .get(0)
}

/// Wait until the agent's timeline has at least `n` events of `kind`.
pub async fn wait_for_events(client: &Client, agent: Uuid, kind: &str, n: i64, timeout: Duration) {
    wait_until(timeout, &format!("{n} × {kind} on {agent}"), || async {
        count_events(client, agent, kind).await >= n
    })
    .await;
}

pub async fn wait_for_event(client: &Client, agent: Uuid, kind: &str, timeout: Duration) {
    wait_for_events(client, agent, kind, 1, timeout).await;
}

pub async fn event_types(client: &Client, agent: Uuid) -> Vec<String> {
    client
        .query(
            "SELECT type FROM holdfast.events WHERE agent_id = $1 ORDER BY seq",
            &[&agent],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// The data of the agent's last event of `kind`.
pub async fn last_event_data(client: &Client, agent: Uuid, kind: &str) -> Value {
    client
        .query_one(
            "SELECT data FROM holdfast.events WHERE agent_id = $1 AND type = $2 ORDER BY seq DESC LIMIT 1",
            &[&agent, &kind],
        )
        .await
        .unwrap()
        .get(0)
}

/// Every saved message and event of the agent as one text, to search for
/// what must (not) have been saved.
pub async fn saved_text(client: &Client, agent: Uuid) -> String {
    client
        .query_one(
            "SELECT coalesce((SELECT string_agg(content::text, E'\\n' ORDER BY seq) FROM holdfast.messages WHERE agent_id = $1), '')
                 || coalesce((SELECT string_agg(data::text, E'\\n' ORDER BY seq) FROM holdfast.events WHERE agent_id = $1), '')",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0)
}

pub async fn agent_state(client: &Client, agent: Uuid) -> String {
    client
        .query_one("SELECT state FROM holdfast.agents WHERE id = $1", &[&agent])
        .await
        .unwrap()
        .get(0)
}

/// The ids of `agent`'s inputs not yet consumed into its history, oldest
/// first.
pub async fn pending_inputs(client: &Client, agent: Uuid) -> Vec<Uuid> {
    client
        .query(
            "SELECT id FROM holdfast.inputs WHERE agent_id = $1 AND consumed_at IS NULL ORDER BY created_at",
            &[&agent],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Wait until `agent` has a tool call waiting for its result (a custom
/// call), then submit `output` as that result.
pub async fn answer_waiting_call(client: &Client, agent: Uuid, output: Value) {
    let waiting = "SELECT id FROM holdfast.tool_calls WHERE agent_id = $1 AND status = 'waiting'";
    wait_until(
        Duration::from_secs(30),
        "a tool call waits for its result",
        || async {
            client
                .query_opt(waiting, &[&agent])
                .await
                .unwrap()
                .is_some()
        },
    )
    .await;
    let call: Uuid = client.query_one(waiting, &[&agent]).await.unwrap().get(0);
    store::submit_tool_result(client, call, &output, false)
        .await
        .unwrap();
}

/// The deltas `agent`'s responses streamed on `holdfast_stream`, read from
/// `session` until it has been quiet for half a second: the thinking text,
/// the answer text, and the kinds in the order they came (runs folded).
pub async fn streamed_deltas(session: &mut Session, agent: Uuid) -> (String, String, Vec<String>) {
    let (mut thinking, mut text) = (String::new(), String::new());
    let mut kinds: Vec<String> = Vec::new();
    while let Ok(Some(n)) =
        tokio::time::timeout(Duration::from_millis(500), session.notifications.recv()).await
    {
        let payload: Value = serde_json::from_str(n.payload()).unwrap();
        assert_eq!(payload["agent_id"], json!(agent.to_string()));
        let kind = payload["kind"].as_str().unwrap().to_owned();
        let delta = payload["text"].as_str().unwrap();
        match kind.as_str() {
            "thinking" => thinking.push_str(delta),
            "text" => text.push_str(delta),
            other => panic!("delta kind {other}"),
        }
        if kinds.last() != Some(&kind) {
            kinds.push(kind);
        }
    }
    (thinking, text, kinds)
}
