//! The CLI grouped by noun, with real processes against a real API and
//! Postgres: the names the last release used still run what they named,
//! each printing one line on stderr that names the new command, and are
//! hidden from the help; the commands added with the grouping (`agents
//! cancel|archive`, `machines create|list|token`, `keys list`) do what they
//! say; `completions` prints a script for bash, zsh and fish.

use std::process::Stdio;
use std::time::Duration;

use holdfast_fakes::{FakeProvider, Reply};
use holdfast_tests::api_server::project_key;
use holdfast_tests::process::{holdfast_bin, HoldfastProcess};
use holdfast_tests::scenario::{free_port, spawn_api, start_turn, wait_for_event};
use holdfast_tests::{wait_until, ScratchDir, TestDb};
use serde_json::{json, Value};
use tokio::process::Command;

const WAIT: Duration = Duration::from_secs(60);

/// The line an old name prints on stderr before it runs.
fn note(old: &str, new: &str) -> String {
    format!(
        "warning: `holdfast {old}` is deprecated and will be removed in the next release; use `holdfast {new}`"
    )
}

/// What one run of the binary printed.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// `holdfast ARGS` with `envs` and no database URL, run to its end.
async fn holdfast(args: &[&str], envs: &[(&str, &str)]) -> Run {
    let mut command = Command::new(holdfast_bin());
    command
        .args(args)
        .env_remove("HOLDFAST_DATABASE_URL")
        .env("HOLDFAST_LOG", "warn")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    for (name, value) in envs {
        command.env(name, value);
    }
    let output = tokio::time::timeout(WAIT, command.output())
        .await
        .unwrap_or_else(|_| panic!("holdfast {args:?} did not finish"))
        .expect("run holdfast");
    Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// The first line a long-running process printed (its log holds stdout
/// and stderr), once it has printed `marker`.
async fn first_line_once(process: &HoldfastProcess, marker: &str) -> String {
    wait_until(
        WAIT,
        &format!("{} logs {marker:?}", process.name),
        || async { process.log_text().contains(marker) },
    )
    .await;
    process
        .log_text()
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_names_run_their_new_commands_after_a_one_line_note() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (_, key) = project_key(&client).await;
    let database = ("HOLDFAST_DATABASE_URL", db.url());

    // `api` serves the API.
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let listen = format!("127.0.0.1:{port}");
    let api = HoldfastProcess::spawn(
        "old-api",
        &["api", "--listen", &listen],
        std::slice::from_ref(&database),
    );
    let http = holdfast_outbound::client_builder().build().unwrap();
    wait_until(WAIT, "`holdfast api` answers /healthz", || async {
        http.get(format!("{url}/healthz"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
    })
    .await;
    assert_eq!(
        first_line_once(&api, "deprecated").await,
        note("api", "server api")
    );

    // `worker` runs a turn to its end.
    let fake = FakeProvider::start().await;
    fake.push(Reply::text("done"));
    let worker = HoldfastProcess::spawn(
        "old-worker",
        &["worker"],
        &[
            database.clone(),
            ("ANTHROPIC_BASE_URL", fake.base_url_anthropic()),
            ("ANTHROPIC_API_KEY", "test-key".into()),
            ("HOLDFAST_POLL_INTERVAL", "200ms".into()),
        ],
    );
    let agent = start_turn(&client, json!([]), "hello").await;
    wait_for_event(&client, agent, "turn.completed", WAIT).await;
    assert_eq!(
        first_line_once(&worker, "worker started").await,
        note("worker", "server worker")
    );

    // `maintenance` runs until SIGTERM, then stops cleanly.
    let mut maintenance = HoldfastProcess::spawn(
        "old-maintenance",
        &["maintenance"],
        &[database, ("HOLDFAST_MAINTENANCE_INTERVAL", "100ms".into())],
    );
    assert_eq!(
        first_line_once(&maintenance, "maintenance started").await,
        note("maintenance", "server maintenance")
    );
    maintenance.signal("TERM");
    assert_eq!(maintenance.wait_exit(WAIT).await, Some(0));

    // `machine FLAGS` (with `--api`, the old `--url`) runs the daemon: the
    // machine comes online.
    let client_env = [
        ("HOLDFAST_URL", url.as_str()),
        ("HOLDFAST_API_KEY", key.as_str()),
    ];
    let created = holdfast(&["machines", "create", "old-box"], &client_env).await;
    assert_eq!(created.code, Some(0), "{}", created.stderr);
    let token = created.stdout.lines().last().unwrap().to_owned();
    assert!(token.starts_with("hfm_"), "{}", created.stdout);
    let home = ScratchDir::new("old-machine");
    let state = home.join("state");
    let work = home.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let mut daemon = HoldfastProcess::spawn(
        "old-daemon",
        &["machine", "--api", &url],
        &[
            ("HOLDFAST_MACHINE_TOKEN", token.clone()),
            ("HOLDFAST_MACHINE_STATE_DIR", state.display().to_string()),
            ("HOLDFAST_MACHINE_WORK_DIR", work.display().to_string()),
            ("HOLDFAST_MACHINE_HEARTBEAT_INTERVAL", "200ms".into()),
            ("HOLDFAST_MACHINE_CLAIM_WAIT", "2s".into()),
        ],
    );
    let machine = wait_for_online(&client_env, "old-box").await;
    let log = daemon.log_text();
    let mut lines = log.lines();
    assert_eq!(
        lines.next(),
        Some(note("machine", "machine run").as_str()),
        "{log}"
    );
    assert_eq!(
        lines.next(),
        Some(note("machine run --api", "machine run --url").as_str()),
        "{log}"
    );

    // `machines rotate-token` gives a new token; the old daemon stops.
    let rotated = holdfast(&["machines", "rotate-token", &machine], &client_env).await;
    assert_eq!(rotated.code, Some(0), "{}", rotated.stderr);
    assert_eq!(
        rotated.stderr.lines().next(),
        Some(note("machines rotate-token", "machines token").as_str()),
        "{}",
        rotated.stderr
    );
    let new_token = rotated.stdout.lines().last().unwrap();
    assert!(
        new_token.starts_with("hfm_") && new_token != token,
        "{}",
        rotated.stdout
    );
    let code = daemon.wait_exit(WAIT).await;
    assert!(matches!(code, Some(c) if c != 0), "exit {code:?}");
}

/// The id of the machine `name`, once `holdfast machines list` shows it online.
async fn wait_for_online(client_env: &[(&str, &str)], name: &str) -> String {
    let online = || async {
        let listed = holdfast(&["machines", "list", "--json"], client_env).await;
        let listed: Value = serde_json::from_str(&listed.stdout).unwrap_or(Value::Null);
        listed["machines"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|m| m["name"] == name && m["online"] == true)
            .map(|m| m["id"].as_str().unwrap().to_owned())
    };
    wait_until(WAIT, &format!("machine {name} online"), || async {
        online().await.is_some()
    })
    .await;
    online().await.expect("online")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_help_shows_the_new_names_only() {
    let top = holdfast(&["--help"], &[]).await;
    assert_eq!(top.code, Some(0));
    let commands: Vec<&str> = top
        .stdout
        .lines()
        .take_while(|line| !line.starts_with("Options:"))
        .filter(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    for heading in ["Server roles:", "Administration", "Client"] {
        assert!(top.stdout.contains(heading), "{}", top.stdout);
    }
    for name in [
        "server",
        "machine",
        "up",
        "keys",
        "agents",
        "machines",
        "completions",
    ] {
        assert!(commands.contains(&name), "{name} missing from {commands:?}");
    }
    for old in ["api", "worker", "maintenance", "cli-reference"] {
        assert!(!commands.contains(&old), "{old} listed in {commands:?}");
    }
    let machines = holdfast(&["machines", "--help"], &[]).await;
    assert!(machines.stdout.contains("token"), "{}", machines.stdout);
    assert!(
        !machines.stdout.contains("rotate-token"),
        "{}",
        machines.stdout
    );
    // The old form's daemon flags are not `machine`'s; `run` has them, with
    // --url for the API as on every client command.
    let machine = holdfast(&["machine", "--help"], &[]).await;
    assert!(!machine.stdout.contains("--token"), "{}", machine.stdout);
    let run = holdfast(&["machine", "run", "--help"], &[]).await;
    assert!(run.stdout.contains("--url"), "{}", run.stdout);
    assert!(!run.stdout.contains("--api"), "{}", run.stdout);
    let send = holdfast(&["send", "--help"], &[]).await;
    for server_flag in ["--database-url", "--egress-allow"] {
        assert!(!send.stdout.contains(server_flag), "{}", send.stdout);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_are_printed_for_bash_zsh_and_fish() {
    for shell in ["bash", "zsh", "fish"] {
        let run = holdfast(&["completions", shell], &[]).await;
        assert_eq!(run.code, Some(0), "{shell}: {}", run.stderr);
        for word in [
            "holdfast",
            "server",
            "maintenance",
            "archive",
            "database-url",
        ] {
            assert!(
                run.stdout.contains(word),
                "{shell}: no {word:?} in the script"
            );
        }
    }
    let bad = holdfast(&["completions", "cmd.exe"], &[]).await;
    assert_eq!(bad.code, Some(2), "{}", bad.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_cancel_and_archive_and_keys_list_do_what_they_say() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (_, key) = project_key(&client).await;
    let (_api, url) = spawn_api("cli-api", &db.config).await;
    let env = [
        ("HOLDFAST_URL", url.as_str()),
        ("HOLDFAST_API_KEY", key.as_str()),
    ];

    // No worker runs: the sent message opens a turn nobody takes.
    let created = holdfast(
        &["agents", "create", "--model", "anthropic/claude-test", "-q"],
        &env,
    )
    .await;
    assert_eq!(created.code, Some(0), "{}", created.stderr);
    let agent = created.stdout.trim().to_owned();
    let sent = holdfast(&["send", &agent, "hello"], &env).await;
    assert_eq!(sent.code, Some(0), "{}", sent.stderr);

    // Archiving needs an idle agent: refused with the API's error body.
    let busy = holdfast(&["agents", "archive", &agent, "--json"], &env).await;
    assert_eq!(busy.code, Some(1), "{}", busy.stdout);
    let body: Value = serde_json::from_str(&busy.stdout).unwrap();
    assert_eq!(body["error"]["type"], "conflict", "{body}");

    let cancelled = holdfast(&["agents", "cancel", &agent, "--json"], &env).await;
    assert_eq!(cancelled.code, Some(0), "{}", cancelled.stderr);
    let cancelled: Value = serde_json::from_str(&cancelled.stdout).unwrap();
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    assert_eq!(cancelled["agent"]["turn_open"], false, "{cancelled}");

    let archived = holdfast(&["agents", "archive", &agent], &env).await;
    assert_eq!(archived.code, Some(0), "{}", archived.stderr);
    assert!(archived.stdout.contains("Archived"), "{}", archived.stdout);
    let got = holdfast(&["agents", "get", &agent, "--json"], &env).await;
    let got: Value = serde_json::from_str(&got.stdout).unwrap();
    assert_eq!(got["state"], "archived", "{got}");

    // `keys list` shows the key by its prefix (never the key), active.
    let database = db.url();
    let db_env = [("HOLDFAST_DATABASE_URL", database.as_str())];
    let listed = holdfast(&["keys", "list", "--json"], &db_env).await;
    assert_eq!(listed.code, Some(0), "{}", listed.stderr);
    assert!(!listed.stdout.contains(&key), "the key itself was listed");
    let keys: Value = serde_json::from_str(&listed.stdout).unwrap();
    let ours = keys
        .as_array()
        .unwrap()
        .iter()
        .find(|k| key.starts_with(k["prefix"].as_str().unwrap()))
        .unwrap_or_else(|| panic!("our key is not in {keys}"));
    assert_eq!(ours["revoked_at"], Value::Null);
    let prefix = ours["prefix"].as_str().unwrap().to_owned();
    let revoked = holdfast(&["keys", "revoke", &prefix], &db_env).await;
    assert_eq!(revoked.code, Some(0), "{}", revoked.stderr);
    let listed = holdfast(&["keys", "list"], &db_env).await;
    let line = listed
        .stdout
        .lines()
        .find(|line| line.starts_with(&prefix))
        .unwrap_or_else(|| panic!("{prefix} not in {}", listed.stdout));
    assert!(line.contains("revoked"), "{line}");
}
