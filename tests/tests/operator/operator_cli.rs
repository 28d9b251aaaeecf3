//! The client CLI against a real API server, a real worker process and the
//! fake model: every `--json` output parses and says what happened; errors
//! print the API's error body and exit 1; `tail` shows live deltas before
//! the answer is saved and resumes after the server restarts, each saved
//! event exactly once. Admin commands without a database URL use the
//! cluster of the nearest `.holdfast/` or say how to name one, never
//! creating one, and never migrate it; `--version` names the commit.

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use holdfast_api::{ApiConfig, ServeError};
use holdfast_db::cluster::{ClusterOptions, LocalCluster};
use holdfast_db::connect::ConnectConfig;
use holdfast_db::store;
use holdfast_fakes::{FakeProvider, Reply};
use holdfast_tests::api_server::{project_key, ApiServer};
use holdfast_tests::process::holdfast_bin;
use holdfast_tests::scenario::{spawn_worker, wait_for_events};
use holdfast_tests::{default_config, wait_until, ScratchDir, TestDb};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(30);

/// What one CLI run printed.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    /// The stdout as one JSON document.
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }

    fn ok_json(&self) -> Value {
        assert_eq!(
            self.code,
            Some(0),
            "stdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        self.json()
    }
}

/// The binary with a client environment (no database, no provider keys).
fn command(url: &str, key: &str, args: &[&str]) -> Command {
    let mut command = Command::new(holdfast_bin());
    command
        .args(args)
        .env_remove("HOLDFAST_DATABASE_URL")
        .env("HOLDFAST_URL", url)
        .env("HOLDFAST_API_KEY", key)
        .env("USER", "tester")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

async fn cli(url: &str, key: &str, args: &[&str]) -> Run {
    let output = tokio::time::timeout(WAIT, command(url, key, args).output())
        .await
        .unwrap_or_else(|_| panic!("holdfast {args:?} did not finish"))
        .expect("run holdfast");
    Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn base_url(addr: SocketAddr) -> String {
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_json_output_parses_and_errors_carry_the_api_error_body() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (_, key) = project_key(&client).await;
    let server = ApiServer::start(&db).await;
    let url = base_url(server.addr);
    let fake = FakeProvider::start().await;
    // The first model call asks for a refund (needs approval) and a question.
    fake.push(Reply::tool_calls(vec![
        ("refund", json!({"order": "1001"})),
        ("ask_user", json!({"question": "Which colour?"})),
    ]));
    let _worker = spawn_worker("cli-worker", &db.config, &fake, &[]);

    let created = cli(
        &url,
        &key,
        &[
            "agents",
            "create",
            "--model",
            "anthropic/claude-test",
            "--system",
            "Be brief.",
            "--tool",
            "custom:refund",
            "--tool",
            "ask_user",
            "--require-approval",
            "refund",
            "--json",
        ],
    )
    .await
    .ok_json();
    let agent = created["id"].as_str().unwrap().to_owned();
    assert_eq!(created["state"], "idle");
    assert_eq!(created["config"]["system"], "Be brief.");
    assert_eq!(
        created["config"]["approvals"]["require_for"],
        json!(["refund"])
    );

    let got = cli(&url, &key, &["agents", "get", &agent, "--json"])
        .await
        .ok_json();
    assert_eq!(got["id"], created["id"]);
    let listed = cli(&url, &key, &["agents", "list", "--json"])
        .await
        .ok_json();
    assert_eq!(listed["agents"][0]["id"], created["id"]);

    let sent = cli(
        &url,
        &key,
        &[
            "send",
            &agent,
            "refund my kettle",
            "--idempotency-key",
            "k-1",
            "--json",
        ],
    )
    .await
    .ok_json();
    assert_eq!(sent["replayed"], false);
    assert_eq!(sent["idempotency_key"], "k-1");
    let replayed = cli(
        &url,
        &key,
        &[
            "send",
            &agent,
            "refund my kettle",
            "--idempotency-key",
            "k-1",
            "--json",
        ],
    )
    .await
    .ok_json();
    assert_eq!(replayed["replayed"], true);
    assert_eq!(replayed["input"]["id"], sent["input"]["id"]);

    let agent_id: Uuid = agent.parse().unwrap();
    wait_for_events(&client, agent_id, "question.asked", 1, WAIT).await;
    let pending = cli(&url, &key, &["pending", &agent, "--json"])
        .await
        .ok_json();
    assert_eq!(
        pending["approvals"].as_array().unwrap().len(),
        1,
        "{pending}"
    );
    assert_eq!(pending["questions"][0]["question"], "Which colour?");
    assert_eq!(
        pending["tool_calls"],
        json!([]),
        "refund waits for approval first"
    );
    let approval = pending["approvals"][0]["id"].as_str().unwrap().to_owned();
    let question = pending["questions"][0]["id"].as_str().unwrap().to_owned();

    let approved = cli(&url, &key, &["approve", &approval, "--json"])
        .await
        .ok_json();
    assert_eq!(approved["status"], "approved");
    assert_eq!(approved["decided_by"], "tester");
    // A different decision afterwards: exit 1, the API's 409 body on stdout.
    let denied = cli(&url, &key, &["deny", &approval, "--json"]).await;
    assert_eq!(denied.code, Some(1));
    assert_eq!(denied.json()["error"]["type"], "conflict");
    assert_eq!(denied.json()["approval"]["status"], "approved");

    let pending = cli(&url, &key, &["pending", &agent, "--json"])
        .await
        .ok_json();
    let call = pending["tool_calls"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(pending["tool_calls"][0]["name"], "refund");
    let result = cli(
        &url,
        &key,
        &["result", &call, r#"{"refund_id": "R-1"}"#, "--json"],
    )
    .await
    .ok_json();
    assert_eq!(result["status"], "completed");
    assert_eq!(result["output"], json!({"refund_id": "R-1"}));
    // The same result again is what a retry after a lost answer looks
    // like: the 409 shows our output, so the command succeeds.
    let again = cli(
        &url,
        &key,
        &["result", &call, r#"{"refund_id": "R-1"}"#, "--json"],
    )
    .await
    .ok_json();
    assert_eq!(again["output"], json!({"refund_id": "R-1"}));
    let other = cli(
        &url,
        &key,
        &["result", &call, r#"{"refund_id": "R-2"}"#, "--json"],
    )
    .await;
    assert_eq!(other.code, Some(1));
    assert_eq!(other.json()["error"]["type"], "conflict");
    assert_eq!(
        other.json()["tool_call"]["output"],
        json!({"refund_id": "R-1"})
    );
    let not_json = cli(&url, &key, &["result", &call, "done"]).await;
    assert_eq!(not_json.code, Some(1));
    assert!(
        not_json.stderr.contains("OUTPUT must be JSON"),
        "{}",
        not_json.stderr
    );

    let answered = cli(&url, &key, &["answer", &question, "blue", "--json"])
        .await
        .ok_json();
    assert_eq!(answered["status"], "answered");
    assert_eq!(answered["answer"], "blue");
    // Both calls answered: the model is called again and the turn ends.
    wait_for_events(&client, agent_id, "turn.completed", 1, WAIT).await;

    let missing = cli(
        &url,
        &key,
        &["agents", "get", &Uuid::new_v4().to_string(), "--json"],
    )
    .await;
    assert_eq!(missing.code, Some(1));
    assert_eq!(missing.json()["error"]["type"], "not_found");
    let unauthorized = cli(&url, "hf_wrong", &["agents", "list", "--json"]).await;
    assert_eq!(unauthorized.code, Some(1));
    assert_eq!(unauthorized.json()["error"]["type"], "unauthorized");

    let status = Command::new(holdfast_bin())
        .args(["status", "--json"])
        .env("HOLDFAST_DATABASE_URL", db.url())
        .output()
        .await
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let status: Value = serde_json::from_slice(&status.stdout).expect("status --json parses");
    for state in ["idle", "ready", "running", "waiting", "archived"] {
        assert!(status["queue_depth"][state].is_i64(), "{status}");
    }
    assert_eq!(status["queue_depth"]["idle"], 1, "{status}");
    assert!(status["workers"].is_array() && status["stuck_agents"].is_array());
}

/// `holdfast tail AGENT --json …` as a child whose stdout lines are
/// collected as they come.
struct Tail {
    child: Child,
    lines: Arc<Mutex<Vec<Value>>>,
    stderr: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
}

impl Tail {
    fn start(url: &str, key: &str, agent: Uuid, until: &str) -> Tail {
        let mut child = command(
            url,
            key,
            &["tail", &agent.to_string(), "--json", "--until", until],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start holdfast tail");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let stdout = child.stdout.take().unwrap();
        let errors = child.stderr.take().unwrap();
        let readers = vec![
            tokio::spawn({
                let lines = lines.clone();
                async move {
                    let mut reader = BufReader::new(stdout).lines();
                    while let Ok(Some(line)) = reader.next_line().await {
                        let value: Value = serde_json::from_str(&line).unwrap_or_else(|e| {
                            panic!("tail printed a line that is not JSON ({e}): {line}")
                        });
                        lines.lock().unwrap().push(value);
                    }
                }
            }),
            tokio::spawn({
                let stderr = stderr.clone();
                async move {
                    let mut reader = BufReader::new(errors).lines();
                    while let Ok(Some(line)) = reader.next_line().await {
                        stderr.lock().unwrap().push_str(&format!("{line}\n"));
                    }
                }
            }),
        ];
        Tail {
            child,
            lines,
            stderr,
            readers,
        }
    }

    fn lines(&self) -> Vec<Value> {
        self.lines.lock().unwrap().clone()
    }

    fn saw(&self, event_type: &str) -> bool {
        self.lines().iter().any(|l| l["type"] == event_type)
    }

    async fn wait_for(&self, event_type: &str) {
        wait_until(WAIT, &format!("tail printed {event_type}"), || async {
            self.saw(event_type)
        })
        .await;
    }

    /// Wait for the exit; returns (exit code, lines, stderr).
    async fn finish(mut self) -> (Option<i32>, Vec<Value>, String) {
        let status = tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("tail exits after its --until event")
            .unwrap();
        for reader in self.readers {
            reader.await.unwrap();
        }
        let stderr = self.stderr.lock().unwrap().clone();
        let lines = self.lines.lock().unwrap().clone();
        (status.code(), lines, stderr)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_inputs_are_listed_and_taken_back_from_the_cli() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let server = ApiServer::start(&db).await;
    let url = base_url(server.addr);
    // No worker: the first input's turn stays open, so the second waits.
    let agent = holdfast_tests::new_agent(&client, project)
        .await
        .to_string();
    let first = cli(&url, &key, &["send", &agent, "look it up", "--json"])
        .await
        .ok_json();
    let queued = cli(
        &url,
        &key,
        &["send", &agent, "and then this", "--mode", "queue", "--json"],
    )
    .await
    .ok_json();
    let queued_id = queued["input"]["id"].as_str().unwrap().to_owned();

    let listed = cli(&url, &key, &["inputs", "list", &agent, "--json"])
        .await
        .ok_json();
    assert_eq!(listed["inputs"].as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed["inputs"][0]["id"], queued["input"]["id"]);
    assert_eq!(listed["inputs"][0]["status"], "queued");
    let pending = cli(
        &url,
        &key,
        &["inputs", "list", &agent, "--status", "pending", "--json"],
    )
    .await
    .ok_json();
    assert_eq!(pending["inputs"][0]["id"], first["input"]["id"]);
    let text = cli(&url, &key, &["inputs", "list", &agent]).await;
    assert!(
        text.stdout.contains(&queued_id) && text.stdout.contains("and then this"),
        "{}",
        text.stdout
    );

    let removed = cli(&url, &key, &["inputs", "remove", &queued_id, "--json"])
        .await
        .ok_json();
    assert_eq!(removed["status"], "removed");
    let listed = cli(&url, &key, &["inputs", "list", &agent, "--json"])
        .await
        .ok_json();
    assert_eq!(listed["inputs"], json!([]));
    // Again: exit 1, the API's 409 body on stdout.
    let again = cli(&url, &key, &["inputs", "remove", &queued_id, "--json"]).await;
    assert_eq!(again.code, Some(1));
    assert_eq!(again.json()["error"]["type"], "conflict");
    let bad = cli(&url, &key, &["inputs", "list", &agent, "--status", "done"]).await;
    assert_eq!(bad.code, Some(2), "a usage error: {}", bad.stderr);
}

/// The saved events among tail's lines (deltas have no seq).
fn saved_seqs(lines: &[Value]) -> Vec<i64> {
    lines.iter().filter_map(|l| l["seq"].as_i64()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_shows_live_deltas_before_the_answer_is_saved() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let agent = store::create_agent(&client, project, &default_config())
        .await
        .unwrap();
    store::create_input(&client, agent, &json!("hi"), None)
        .await
        .unwrap();
    let server = ApiServer::start(&db).await;
    let url = base_url(server.addr);

    // Caught up to the saved events, the tail is subscribed to live ones.
    let tail = Tail::start(&url, &key, agent, "turn.completed");
    tail.wait_for("turn.started").await;

    let fake = FakeProvider::start().await;
    fake.push(Reply::text("streaming words arrive live").hold_after_deltas(2));
    let _worker = spawn_worker("tail-worker", &db.config, &fake, &[]);
    tail.wait_for("delta").await;
    assert!(
        !tail.saw("model.response"),
        "the delta came while the answer was still streaming"
    );
    fake.release();

    let (code, lines, stderr) = tail.finish().await;
    assert_eq!(code, Some(0), "{stderr}");
    let deltas: String = lines
        .iter()
        .filter(|l| l["type"] == "delta")
        .map(|l| l["text"].as_str().unwrap())
        .collect();
    assert!(
        "streaming words arrive live".starts_with(&deltas) && !deltas.is_empty(),
        "deltas {deltas:?}"
    );
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "turn.completed");
    let seqs = saved_seqs(&lines);
    assert_eq!(seqs, (1..=seqs.len() as i64).collect::<Vec<_>>());
}

/// The API on a fixed address, so a restart keeps the URL.
async fn serve_on(
    db: &TestDb,
    addr: SocketAddr,
) -> (CancellationToken, JoinHandle<Result<(), ServeError>>) {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .expect("bind the API's address again");
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(holdfast_api::serve(
        ApiConfig::new(db.config.clone()),
        listener,
        shutdown.clone(),
    ));
    (shutdown, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_resumes_after_the_server_restarts_with_every_event_once() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let agent = store::create_agent(&client, project, &default_config())
        .await
        .unwrap();
    let addr = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let url = base_url(addr);
    let (stop_first, first) = serve_on(&db, addr).await;
    let fake = FakeProvider::start().await;
    let _worker = spawn_worker("resume-worker", &db.config, &fake, &[]);

    let tail = Tail::start(&url, &key, agent, "agent.archived");
    store::create_input(&client, agent, &json!("first"), None)
        .await
        .unwrap();
    tail.wait_for("turn.completed").await;

    // The server goes away; the agent goes on without it.
    stop_first.cancel();
    first.await.unwrap().unwrap();
    store::create_input(&client, agent, &json!("second"), None)
        .await
        .unwrap();
    wait_for_events(&client, agent, "turn.completed", 2, WAIT).await;
    store::archive_agent(&client, agent).await.unwrap();

    // Back on the same address: the tail reconnects with Last-Event-ID.
    let (stop_second, second) = serve_on(&db, addr).await;
    let (code, lines, stderr) = tail.finish().await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("reconnected"), "{stderr}");
    let last_seq: i64 = client
        .query_one(
            "SELECT last_event_seq FROM holdfast.agents WHERE id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        saved_seqs(&lines),
        (1..=last_seq).collect::<Vec<_>>(),
        "every saved event exactly once, in order"
    );
    stop_second.cancel();
    second.await.unwrap().unwrap();
}

/// `holdfast ARGS` in `dir`, with no database URL.
async fn admin(dir: &std::path::Path, args: &[&str]) -> Run {
    let output = Command::new(holdfast_bin())
        .args(args)
        .current_dir(dir)
        .env_remove("HOLDFAST_DATABASE_URL")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .expect("run holdfast");
    Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_commands_use_the_nearest_up_cluster_or_say_how_to_name_a_database_and_never_migrate()
{
    let project = ScratchDir::new("nearest");
    let deeper = project.join("src/deeper");
    std::fs::create_dir_all(&deeper).unwrap();

    // No cluster here or above: an error that says what to do, and nothing created.
    let lost = admin(&deeper, &["keys", "create", "--project", "p"]).await;
    assert_eq!(lost.code, Some(1), "{}", lost.stdout);
    assert!(
        lost.stderr.contains("HOLDFAST_DATABASE_URL"),
        "{}",
        lost.stderr
    );
    assert!(lost.stderr.contains("holdfast up"), "{}", lost.stderr);
    assert!(!deeper.join(".holdfast").exists());
    assert!(!project.join(".holdfast").exists());

    // `up`'s cluster at the top: found from two directories down.
    let place = project.join(".holdfast/pg");
    let cluster = tokio::task::spawn_blocking(move || {
        LocalCluster::start(
            &place,
            &ClusterOptions {
                fast_unsafe_fsync_off: true,
                max_connections: 20,
            },
        )
    })
    .await
    .unwrap()
    .unwrap();
    // Its database has no schema yet: the administration commands say to
    // migrate, and migrate nothing themselves.
    for args in [
        &["keys", "create", "--project", "nearest"][..],
        &["status"],
        &["projects", "max-running", "nearest", "2"],
    ] {
        let refused = admin(&deeper, args).await;
        assert_eq!(refused.code, Some(1), "{args:?}: {}", refused.stdout);
        assert!(
            refused.stderr.contains("run `holdfast migrate`"),
            "{args:?}: {}",
            refused.stderr
        );
    }
    let config = ConnectConfig::parse(&cluster.connection_string("holdfast")).unwrap();
    let (client, connection) = config.connect().await.unwrap();
    tokio::spawn(connection);
    let schema: Option<String> = client
        .query_one("SELECT to_regnamespace('holdfast')::text", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(schema, None, "an administration command changed the schema");
    let migrated = admin(&deeper, &["migrate"]).await;
    assert_eq!(migrated.code, Some(0), "{}", migrated.stderr);
    assert!(migrated.stdout.contains("applied"), "{}", migrated.stdout);

    let made = admin(&deeper, &["keys", "create", "--project", "nearest"]).await;
    assert_eq!(made.code, Some(0), "{}", made.stderr);
    let key = made.stdout.lines().last().unwrap().trim().to_owned();
    assert!(key.starts_with("hf_"), "{}", made.stdout);
    assert!(!deeper.join(".holdfast").exists());
    let projects: i64 = client
        .query_one(
            "SELECT count(*) FROM holdfast.projects WHERE name = 'nearest'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        projects, 1,
        "the key is in the cluster of the nearest .holdfast/"
    );
    // The cluster's owner (this process) lives: the command left it running.
    assert!(cluster.is_running());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_names_the_version_and_the_commit() {
    let run = admin(std::path::Path::new("/"), &["--version"]).await;
    assert_eq!(run.code, Some(0));
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let head = String::from_utf8(head.stdout).unwrap();
    assert_eq!(
        run.stdout.trim(),
        format!(
            "holdfast {} (commit {})",
            env!("CARGO_PKG_VERSION"),
            head.trim()
        )
    );
}
