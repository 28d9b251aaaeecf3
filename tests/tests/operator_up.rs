//! `holdfast up` as a person runs it: on the embedded Postgres, it prints
//! a URL and a key that work, runs a real agent turn (the fake model via
//! ANTHROPIC_BASE_URL), stops on SIGINT with exit 0 leaving no Postgres
//! behind, and a second `up` in the same directory finds the same data.

use std::path::{Path, PathBuf};
use std::time::Duration;

use std::process::Stdio;

use holdfast_fakes::{FakeProvider, Reply};
use holdfast_tests::process::holdfast_bin;
use holdfast_tests::wait_until;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::process::{Child, Command};
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(60);

/// A fresh directory under /tmp (Postgres runs as an unprivileged user
/// when the tests run as root, and must reach it), removed at the end.
struct Home(PathBuf);

impl Home {
    fn new() -> Home {
        let dir = PathBuf::from(format!("/tmp/holdfast-up-{}", Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        Home(dir)
    }

    fn data_dir(&self) -> PathBuf {
        self.0.join(".holdfast/pg/data")
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `holdfast up` started in `home` (stdout and stderr in a log file),
/// and the URL and key it printed. Killed if still running when dropped.
struct Up {
    child: Child,
    log: PathBuf,
    url: String,
    key: String,
}

impl Up {
    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

async fn start_up(home: &Home, fake: &FakeProvider) -> Up {
    let log = home.0.join(format!("up-{}.log", Uuid::new_v4().simple()));
    let log_file = std::fs::File::create(&log).unwrap();
    let child = Command::new(holdfast_bin())
        .args(["up", "--workers", "2"])
        .current_dir(&home.0)
        .env_remove("HOLDFAST_DATABASE_URL")
        .env("HOLDFAST_LISTEN", "127.0.0.1:0")
        .env("ANTHROPIC_BASE_URL", fake.base_url_anthropic())
        .env("ANTHROPIC_API_KEY", "test-key")
        .env("HOLDFAST_POLL_INTERVAL", "200ms")
        .env("HOLDFAST_MAINTENANCE_INTERVAL", "200ms")
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().unwrap())
        .stderr(log_file)
        .kill_on_drop(true)
        .spawn()
        .expect("start holdfast up");
    let read = |log: &Path| {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        (field(&text, "API      "), field(&text, "API key  "))
    };
    wait_until(WAIT, "up prints its URL and API key", || async {
        matches!(read(&log), (Some(_), Some(_)))
    })
    .await;
    let (url, key) = read(&log);
    Up {
        child,
        url: url.unwrap_or_default(),
        key: key.unwrap_or_default(),
        log,
    }
}

/// The first word after `label` at the start of an indented line.
fn field(log: &str, label: &str) -> Option<String> {
    log.lines()
        .find_map(|line| line.trim_start().strip_prefix(label))
        .and_then(|rest| rest.split_whitespace().next())
        .map(str::to_owned)
}

/// The postmaster's pid while it runs (first line of postmaster.pid).
fn postmaster_pid(data_dir: &Path) -> Option<u32> {
    std::fs::read_to_string(data_dir.join("postmaster.pid"))
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}

/// True while `pid` runs (a zombie waiting to be reaped has stopped).
fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X')),
        Err(_) => false,
    }
}

async fn stop_with_sigint(up: &mut Up, home: &Home) {
    let pid = postmaster_pid(&home.data_dir()).expect("Postgres runs while up does");
    let up_pid = up.child.id().expect("up still runs");
    let sent = std::process::Command::new("kill")
        .args(["-INT", &up_pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let status = tokio::time::timeout(WAIT, up.child.wait())
        .await
        .expect("up exits after SIGINT")
        .unwrap();
    assert_eq!(status.code(), Some(0), "log:\n{}", up.log_text());
    assert!(
        up.log_text().contains("Holdfast stopped"),
        "{}",
        up.log_text()
    );
    assert!(
        !home.data_dir().join("postmaster.pid").exists(),
        "Postgres left its pid file: it did not stop"
    );
    // pg_ctl stop waits for the pid file to go, which the postmaster
    // removes just before it exits; then its parent reaps it.
    wait_until(Duration::from_secs(10), "the postmaster exits", || async {
        !process_alive(pid)
    })
    .await;
}

async fn api(
    up: &Up,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut request = reqwest::Client::new()
        .request(method, format!("{}{path}", up.url))
        .bearer_auth(&up.key);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_runs_an_agent_then_stops_postgres_on_sigint_and_keeps_the_data() {
    let home = Home::new();
    let fake = FakeProvider::start().await;
    fake.push(Reply::text("Hello from the fake model"));
    let mut up = start_up(&home, &fake).await;
    assert!(up.key.starts_with("hf_"), "{}", up.key);
    assert!(up.log_text().contains("curl"), "a command to try");

    let (status, agent) = api(
        &up,
        reqwest::Method::POST,
        "/v1/agents",
        Some(json!({"model": {"provider": "anthropic", "name": "claude-test"}})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{agent}");
    let agent = agent["id"].as_str().unwrap().to_owned();
    let (status, _) = api(
        &up,
        reqwest::Method::POST,
        &format!("/v1/agents/{agent}/inputs"),
        Some(json!({"content": "hi"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let events_path = format!("/v1/agents/{agent}/events");
    let up_ref = &up;
    wait_until(WAIT, "the turn completes through up's workers", || async {
        let (_, events) = api(up_ref, reqwest::Method::GET, &events_path, None).await;
        events["events"]
            .as_array()
            .is_some_and(|e| e.iter().any(|e| e["type"] == "turn.completed"))
    })
    .await;
    let (_, events) = api(&up, reqwest::Method::GET, &events_path, None).await;
    let answer = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "model.response")
        .unwrap()["data"]["message"][0]["text"]
        .clone();
    assert_eq!(answer, "Hello from the fake model");
    assert_eq!(fake.request_count(), 1, "one model call for one turn");

    stop_with_sigint(&mut up, &home).await;

    // Again in the same directory: the same cluster, the same agent.
    let mut again = start_up(&home, &fake).await;
    assert_ne!(again.key, up.key, "each up prints a fresh key");
    let (status, agent_again) = api(
        &again,
        reqwest::Method::GET,
        &format!("/v1/agents/{agent}"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{agent_again}");
    assert_eq!(agent_again["state"], "idle");
    assert_eq!(
        agent_again["last_event_seq"],
        events["events"].as_array().unwrap().len()
    );
    stop_with_sigint(&mut again, &home).await;
}
