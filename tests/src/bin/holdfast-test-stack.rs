//! A real Holdfast for the SDKs' own test suites (`sdk/typescript`,
//! `sdk/python`), so each language drives real processes without its own
//! copy of the harness: a fresh database in the tests' shared Postgres
//! cluster, the fake model, and `holdfast server api`, `holdfast server
//! worker` (two) and `holdfast server maintenance` processes on them.
//!
//! It prints one JSON line, `{"url", "key"}` (the API and a project's key),
//! then takes one command per line on stdin and answers each with one JSON
//! line (`{"ok": true, ...}` or `{"ok": false, "error"}`):
//!
//! - `restart-api`: SIGKILL the API process and start a new one on the same
//!   port (the clients' URL stays valid).
//! - `kill-lease-holder AGENT`: SIGKILL the worker holding that agent's
//!   lease (none holding it: an error); `start-worker` adds a worker.
//!
//! End of stdin stops everything and drops the database, so a test runner
//! that dies leaves nothing behind.
//!
//! The fake model follows directives in the newest user text, so tests in
//! any language script it through the API alone: a JSON object
//! `{"say"?: TEXT, "call"?: [{"name", "input"}], "think"?: TEXT, "trickle_ms"?: N}`
//! answers with that text and those tool calls (each frame `trickle_ms`
//! apart), or with a thinking block of `think` and then the text; any
//! other text is answered `echo: TEXT`; a user turn holding only tool
//! results is answered `done: RESULT` (the results' text, joined by `; `).

use std::time::Duration;

use holdfast_fakes::{FakeProvider, Reply};
use holdfast_tests::api_server::project_key;
use holdfast_tests::process::HoldfastProcess;
use holdfast_tests::scenario::{free_port, spawn_api_on, spawn_worker};
use holdfast_tests::TestDb;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

/// Loopback receivers (the suites' webhook servers) are reachable.
const EGRESS: &str = "webhook=127.0.0.0/8";

#[tokio::main]
async fn main() {
    // The `holdfast` built with this binary, in the same directory: the
    // suites run after `cargo build`, and a build from here would wait on
    // cargo's lock behind whatever cargo command is running.
    let exe = std::env::current_exe().expect("the stack's own path");
    std::env::set_var("HOLDFAST_BIN", exe.with_file_name("holdfast"));
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (_, key) = project_key(&client).await;
    let fake = FakeProvider::start().await;
    fake.set_responder(answer);
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let mut api = start_api(&db, port).await;
    let mut spawned = 0;
    let mut workers = Vec::new();
    for _ in 0..2 {
        spawned += 1;
        workers.push(worker(&db, &fake, spawned));
    }
    let _maintenance = HoldfastProcess::spawn(
        "sdk-maintenance",
        &["server", "maintenance"],
        &[
            ("HOLDFAST_DATABASE_URL", db.url()),
            ("HOLDFAST_MAINTENANCE_INTERVAL", "100ms".into()),
            ("HOLDFAST_EGRESS_ALLOW", EGRESS.into()),
            ("HOLDFAST_WEBHOOK_BACKOFF_BASE", "100ms".into()),
            ("HOLDFAST_WEBHOOK_BACKOFF_MAX", "1s".into()),
        ],
    );
    println!("{}", json!({"url": url, "key": key}));

    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let mut words = line.split_whitespace();
        let reply = match (words.next(), words.next()) {
            (Some("restart-api"), None) => {
                // Gone before the new one binds its port.
                api.signal("KILL");
                api.wait_exit(Duration::from_secs(10)).await;
                api = start_api(&db, port).await;
                json!({"ok": true})
            }
            (Some("kill-lease-holder"), Some(agent)) => {
                let owner = lease_owner(&client, agent).await;
                match workers.iter().position(|w| Some(&w.name) == owner.as_ref()) {
                    Some(i) => {
                        let mut killed = workers.remove(i);
                        killed.signal("KILL");
                        killed.wait_exit(Duration::from_secs(10)).await;
                        json!({"ok": true, "killed": killed.name})
                    }
                    None => {
                        json!({"ok": false, "error": format!("no worker holds {agent} ({owner:?})")})
                    }
                }
            }
            (Some("start-worker"), None) => {
                spawned += 1;
                workers.push(worker(&db, &fake, spawned));
                json!({"ok": true})
            }
            _ => json!({"ok": false, "error": format!("unknown command: {line}")}),
        };
        println!("{reply}");
    }
}

/// `holdfast server api` on `port`, once `/healthz` answers.
async fn start_api(db: &TestDb, port: u16) -> HoldfastProcess {
    spawn_api_on(
        "sdk-api",
        &db.config,
        port,
        &[("HOLDFAST_EGRESS_ALLOW", EGRESS)],
    )
    .await
}

/// The worker name holding `agent`'s lease, if any.
async fn lease_owner(client: &tokio_postgres::Client, agent: &str) -> Option<String> {
    let agent: uuid::Uuid = agent.parse().ok()?;
    client
        .query_opt(
            "SELECT lease_owner FROM holdfast.agents WHERE id = $1",
            &[&agent],
        )
        .await
        .ok()
        .flatten()
        .and_then(|row| row.get(0))
}

fn worker(db: &TestDb, fake: &FakeProvider, n: usize) -> HoldfastProcess {
    spawn_worker(&format!("sdk-worker{n}"), &db.config, fake, &[])
}

/// The fake model's answer to one request (see the module docs).
fn answer(body: &Value) -> Reply {
    let last = body["messages"]
        .as_array()
        .and_then(|messages| messages.last())
        .cloned()
        .unwrap_or(Value::Null);
    let blocks = match &last["content"] {
        Value::String(text) => vec![json!({"type": "text", "text": text})],
        Value::Array(blocks) => blocks.clone(),
        _ => Vec::new(),
    };
    let text = blocks
        .iter()
        .rev()
        .find(|b| b["type"] == "text")
        .and_then(|b| b["text"].as_str());
    let Some(text) = text else {
        let results: Vec<String> = blocks
            .iter()
            .filter(|b| b["type"] == "tool_result")
            .map(|b| match &b["content"] {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            })
            .collect();
        return Reply::text(format!("done: {}", results.join("; ")));
    };
    let Ok(Value::Object(directive)) = serde_json::from_str::<Value>(text) else {
        return Reply::text(format!("echo: {text}"));
    };
    let say = directive.get("say").and_then(Value::as_str).unwrap_or("");
    let calls: Vec<(String, Value)> = directive
        .get("call")
        .and_then(Value::as_array)
        .map(|calls| {
            calls
                .iter()
                .map(|c| {
                    let name = c["name"].as_str().unwrap_or("missing_name").to_owned();
                    (name, c.get("input").cloned().unwrap_or(json!({})))
                })
                .collect()
        })
        .unwrap_or_default();
    let answer = if say.is_empty() { "ok" } else { say };
    let reply = if let Some(thinking) = directive.get("think").and_then(Value::as_str) {
        Reply::anthropic_blocks(vec![
            json!({"type": "thinking", "thinking": thinking, "signature": "sig"}),
            json!({"type": "text", "text": answer}),
        ])
    } else if calls.is_empty() {
        Reply::text(answer)
    } else {
        Reply::text_and_tool_calls(say, calls)
    };
    match directive.get("trickle_ms").and_then(Value::as_u64) {
        Some(ms) => reply.trickle(Duration::from_millis(ms)),
        None => reply,
    }
}
