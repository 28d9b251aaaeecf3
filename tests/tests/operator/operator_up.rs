//! `holdfast up` as a person runs it: on the embedded Postgres, it prints
//! a URL and a key that work, runs a real agent turn (the fake model via
//! ANTHROPIC_BASE_URL), stops on SIGINT with exit 0 leaving no Postgres
//! behind, and a second `up` in the same directory finds the same data.
//! The banner's commands run as printed; a Postgres that a killed `up` left
//! running is stopped by the next one.
//! With `--local-machine` it runs a machine daemon for this host: an
//! agent's run_command runs here and its output reaches the model, and the
//! next `up` serves the same machine.

use std::path::{Path, PathBuf};
use std::time::Duration;

use std::process::Stdio;

use holdfast_fakes::{FakeProvider, Reply};
use holdfast_tests::api_server::call_at;
use holdfast_tests::process::{holdfast_bin, processes_working_in};
use holdfast_tests::{wait_until, ScratchDir};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::process::{Child, Command};
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(60);

/// A fresh directory under /tmp (Postgres runs as an unprivileged user
/// when the tests run as root, and must reach it), removed at the end.
struct Home(ScratchDir);

impl Home {
    fn new() -> Home {
        Home(ScratchDir::new("up"))
    }

    fn data_dir(&self) -> PathBuf {
        self.0.join(".holdfast/pg/data")
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

async fn start_up(home: &Home, fake: &FakeProvider, extra_args: &[&str]) -> Up {
    start_up_with(home, fake, extra_args, &[]).await
}

/// [`start_up`] with `envs` added to (or replacing) its environment.
async fn start_up_with(
    home: &Home,
    fake: &FakeProvider,
    extra_args: &[&str],
    envs: &[(&str, &str)],
) -> Up {
    let (child, log) = spawn_up(home, fake, extra_args, envs);
    let read = |log: &Path| {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        (field(&text, "API      "), field(&text, "API key  "))
    };
    // The banner's last line: waiting for it (not just the URL and key) means
    // every line above it, the machine's included, has been written.
    wait_until(WAIT, "up prints its whole banner", || async {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("Ctrl-C drains the workers")
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

/// `holdfast up --workers 2 ARGS` in `home` on the embedded Postgres, with
/// the fake model, its output in the returned log file.
fn spawn_up(
    home: &Home,
    fake: &FakeProvider,
    extra_args: &[&str],
    envs: &[(&str, &str)],
) -> (Child, PathBuf) {
    let log = home.0.join(format!("up-{}.log", Uuid::new_v4().simple()));
    let log_file = std::fs::File::create(&log).unwrap();
    let child = Command::new(holdfast_bin())
        .args(["up", "--workers", "2"])
        .args(extra_args)
        .current_dir(&home.0)
        .env_remove("HOLDFAST_DATABASE_URL")
        .env("HOLDFAST_LISTEN", "127.0.0.1:0")
        .env("ANTHROPIC_BASE_URL", fake.base_url_anthropic())
        .env("ANTHROPIC_API_KEY", "test-key")
        .env("HOLDFAST_POLL_INTERVAL", "200ms")
        .env("HOLDFAST_MAINTENANCE_INTERVAL", "200ms")
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().unwrap())
        .stderr(log_file)
        .kill_on_drop(true)
        .spawn()
        .expect("start holdfast up");
    (child, log)
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
    call_at(
        &holdfast_outbound::client_builder().build().unwrap(),
        &up.url,
        method,
        path,
        &up.key,
        body,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_runs_an_agent_then_stops_postgres_on_sigint_and_keeps_the_data() {
    let home = Home::new();
    let fake = FakeProvider::start().await;
    fake.push(Reply::text("Hello from the fake model"));
    let mut up = start_up(&home, &fake, &[]).await;
    assert!(up.key.starts_with("hf_"), "{}", up.key);
    assert!(up.log_text().contains("agents create"), "a command to try");

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
    let mut again = start_up(&home, &fake, &[]).await;
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

/// The shell lines under the banner's "Try it" heading.
fn printed_commands(log: &str) -> String {
    log.lines()
        .skip_while(|line| !line.starts_with("Try it from another terminal"))
        .skip(1)
        .take_while(|line| !line.trim().is_empty())
        .map(str::trim)
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_banner_commands_run_as_printed_and_the_next_up_stops_a_killed_ups_postgres() {
    let home = Home::new();
    let fake = FakeProvider::start().await;
    fake.push(Reply::text("Hello from the printed commands"));
    let mut up = start_up(&home, &fake, &[]).await;
    let log = up.log_text();
    assert!(
        log.contains("ANTHROPIC_API_KEY is set, so the agent below uses anthropic/"),
        "{log}"
    );
    let commands = printed_commands(&log);
    assert!(commands.contains("agents create"), "{log}");
    let ran = tokio::time::timeout(
        WAIT,
        Command::new("sh")
            .args(["-ec", &commands])
            .current_dir(&*home.0)
            .env_remove("HOLDFAST_URL")
            .env_remove("HOLDFAST_API_KEY")
            .output(),
    )
    .await
    .expect("the printed commands finish")
    .unwrap();
    let printed = String::from_utf8_lossy(&ran.stdout);
    assert!(
        ran.status.success(),
        "{commands}\n{printed}\n{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    assert!(
        printed.contains("Hello from the printed commands"),
        "{printed}"
    );

    // Killed: its Postgres runs on, with no one to stop it.
    let postmaster = postmaster_pid(&home.data_dir()).unwrap();
    up.child.start_kill().unwrap();
    up.child.wait().await.unwrap();
    assert!(process_alive(postmaster));
    // The next `up` takes it over, and stops it.
    let mut again = start_up(&home, &fake, &[]).await;
    assert_eq!(postmaster_pid(&home.data_dir()), Some(postmaster));
    stop_with_sigint(&mut again, &home).await;
    assert!(
        again.log_text().contains("embedded Postgres stopped"),
        "{}",
        again.log_text()
    );
}

/// The agent's events (its whole timeline: these turns are short).
async fn events(up: &Up, agent: &str) -> Vec<Value> {
    let (_, events) = api(
        up,
        reqwest::Method::GET,
        &format!("/v1/agents/{agent}/events"),
        None,
    )
    .await;
    events["events"].as_array().cloned().unwrap_or_default()
}

async fn send_input(up: &Up, agent: &str, text: &str) {
    let (status, _) = api(
        up,
        reqwest::Method::POST,
        &format!("/v1/agents/{agent}/inputs"),
        Some(json!({ "content": text })),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
}

/// Wait until `agent` has completed `turns` turns.
async fn wait_for_turns(up: &Up, agent: &str, turns: usize) {
    wait_until(WAIT, "the turn with the command completes", || async {
        let events = events(up, agent).await;
        events
            .iter()
            .filter(|e| e["type"] == "turn.completed")
            .count()
            == turns
    })
    .await;
}

/// The events of `kind` in `timeline`.
fn of_type<'a>(timeline: &'a [Value], kind: &str) -> Vec<&'a Value> {
    timeline.iter().filter(|e| e["type"] == kind).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_local_machine_runs_a_command_end_to_end_and_the_next_up_reuses_the_machine() {
    let home = Home::new();
    let fake = FakeProvider::start().await;
    fake.push(Reply::tool_calls(vec![(
        "run_command",
        json!({"command": "echo \"hello from $(uname -s)\" && pwd"}),
    )]));
    fake.push(Reply::text("The command said hello."));
    let mut up = start_up(&home, &fake, &["--local-machine"]).await;
    let machine = field(&up.log_text(), "Machine  ").expect("the banner names the machine");
    assert!(
        up.log_text().contains(&format!(
            r#"--tool '{{"type": "run_command", "machine": "{machine}"}}'"#
        )),
        "an example agent with run_command on the machine:\n{}",
        up.log_text()
    );
    let local = home.0.join(".holdfast/local-machine");
    let mode = |path: &std::path::Path| {
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(path).unwrap().permissions())
            & 0o777
    };
    assert_eq!(
        mode(&local),
        0o700,
        "the machine's directory is its owner's"
    );
    let record = local.join("machine.json");
    assert_eq!(mode(&record), 0o600, "the record is its owner's");
    let record: Value = serde_json::from_str(&std::fs::read_to_string(&record).unwrap()).unwrap();
    assert_eq!(record["name"], json!(machine));
    assert!(
        record.get("token").is_none() && !local.join("credential.json").exists(),
        "the token is kept in no file under the commands' working directory: {record}"
    );

    let (status, agent) = api(
        &up,
        reqwest::Method::POST,
        "/v1/agents",
        Some(json!({
            "model": {"provider": "anthropic", "name": "claude-test"},
            "tools": [{"type": "run_command", "machine": machine}],
        })),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{agent}");
    let agent = agent["id"].as_str().unwrap().to_owned();
    send_input(&up, &agent, "say hello from this machine").await;
    wait_for_turns(&up, &agent, 1).await;

    // The command ran once, here, in the directory `up` started in.
    let timeline = events(&up, &agent).await;
    assert_eq!(
        of_type(&timeline, "command.accepted").len(),
        1,
        "{timeline:#?}"
    );
    let finished = of_type(&timeline, "command.finished");
    assert_eq!(finished.len(), 1, "{timeline:#?}");
    let here = home.0.canonicalize().unwrap();
    assert_eq!(finished[0]["data"]["exit_code"], 0);
    assert_eq!(
        finished[0]["data"]["stdout"],
        format!("hello from Linux\n{}\n", here.display())
    );
    // Its output is in the tool result the model was given.
    assert_eq!(
        fake.request_count(),
        2,
        "one call for the tool, one after it"
    );
    let second = fake.requests()[1].body.to_string();
    assert!(second.contains("hello from Linux"), "{second}");

    stop_with_sigint(&mut up, &home).await;
    assert_eq!(processes_working_in(&home.0), Vec::<String>::new());

    // The next `up` serves the same machine under a new token (no second
    // registration); Ctrl-C while its command runs lets the
    // command finish and report before the API stops.
    fake.push(Reply::tool_calls(vec![(
        "run_command",
        json!({"command": "touch started && sleep 2 && echo again"}),
    )]));
    fake.push(Reply::text("It said again."));
    let mut again = start_up(&home, &fake, &["--local-machine"]).await;
    assert_eq!(
        field(&again.log_text(), "Machine  ").as_deref(),
        Some(machine.as_str())
    );
    let (_, machines) = api(&again, reqwest::Method::GET, "/v1/machines", None).await;
    let names: Vec<&Value> = machines["machines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["name"])
        .collect();
    assert_eq!(names, [&json!(machine)], "one machine, registered once");
    send_input(&again, &agent, "once more").await;
    let started = home.0.join("started");
    wait_until(WAIT, "the second command runs", || {
        let started = started.clone();
        async move { started.exists() }
    })
    .await;
    stop_with_sigint(&mut again, &home).await;
    assert_eq!(processes_working_in(&home.0), Vec::<String>::new());
    assert_eq!(
        journaled_commands(&home),
        0,
        "the daemon's result was acknowledged before up stopped"
    );

    // The third `up` finds that result recorded, and the turn goes on.
    let mut third = start_up(&home, &fake, &["--local-machine"]).await;
    wait_for_turns(&third, &agent, 2).await;
    let timeline = events(&third, &agent).await;
    assert_eq!(
        of_type(&timeline, "command.accepted").len(),
        2,
        "{timeline:#?}"
    );
    let finished = of_type(&timeline, "command.finished");
    assert_eq!(finished.len(), 2, "{timeline:#?}");
    assert_eq!(finished[1]["data"]["stdout"], "again\n");
    assert_eq!(finished[1]["data"]["late"], false);
    stop_with_sigint(&mut third, &home).await;
    assert_eq!(processes_working_in(&home.0), Vec::<String>::new());
}

/// Commands in the local machine's journals: accepted and not yet
/// acknowledged by the server.
fn journaled_commands(home: &Home) -> usize {
    let dir = home.0.join(".holdfast/local-machine");
    std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter_map(|entry| std::fs::read_to_string(entry.path().join("journal.json")).ok())
        .map(|text| {
            let journal: Value = serde_json::from_str(&text).unwrap();
            journal["commands"].as_object().map_or(0, |c| c.len())
        })
        .sum()
}

/// What a command of `up --local-machine` must never print.
const UP_SECRETS: [(&str, &str); 3] = [
    ("ANTHROPIC_API_KEY", "sk-ant-sandbox-probe-7d41c9"),
    ("OPENAI_API_KEY", "sk-openai-sandbox-probe-2be8f0"),
    (
        "HOLDFAST_SECRET_KEY",
        "q2b3eE1kJ0h9W5f7x4Zc8VnR6tY1uI0oPa3sD5fG7hk=",
    ),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_local_machine_commands_print_none_of_the_provider_keys_the_secret_key_or_the_database()
{
    let home = Home::new();
    let fake = FakeProvider::start().await;
    // What the command reads: its environment, every process it can see,
    // `up`'s and the test's /proc files, every file under its work
    // directory (where `.holdfast/` is), and the embedded Postgres'
    // socket directory, which it also queries.
    let mut up = start_up_with(&home, &fake, &["--local-machine"], &UP_SECRETS).await;
    let data = home.data_dir();
    let pid_file = std::fs::read_to_string(data.join("postmaster.pid")).unwrap();
    let lines: Vec<&str> = pid_file.lines().collect();
    let (port, socket_dir) = (lines[3].trim(), lines[4].trim());
    let up_pid = up.child.id().unwrap();
    let probe = format!(
        "{{ echo probe-start; env; \
         for p in /proc/[0-9]*; do cat $p/environ $p/cmdline; echo; done; \
         for pid in {up_pid} {test_pid}; do cat /proc/$pid/environ /proc/$pid/cmdline /proc/$pid/mem; done; \
         ls -laR .holdfast; find . -type f -exec cat {{}} +; ls -la '{socket_dir}'; \
         psql -h '{socket_dir}' -p {port} -U holdfast -d postgres -Atc 'select 40 + 2'; \
         echo probe-end; }} 2>&1",
        test_pid = std::process::id(),
    );
    fake.push(Reply::tool_calls(vec![(
        "run_command",
        json!({ "command": probe }),
    )]));
    fake.push(Reply::text("probed"));
    let machine = field(&up.log_text(), "Machine  ").expect("the banner names the machine");
    let (status, agent) = api(
        &up,
        reqwest::Method::POST,
        "/v1/agents",
        Some(json!({
            "model": {"provider": "anthropic", "name": "claude-test"},
            "tools": [{"type": "run_command", "machine": machine}],
        })),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{agent}");
    let agent = agent["id"].as_str().unwrap().to_owned();
    send_input(&up, &agent, "look around").await;
    wait_for_turns(&up, &agent, 1).await;

    let timeline = events(&up, &agent).await;
    let finished = of_type(&timeline, "command.finished");
    assert_eq!(finished.len(), 1, "{timeline:#?}");
    let data = &finished[0]["data"];
    assert_eq!(
        data["stdout_truncated"], false,
        "the whole output is checked"
    );
    let output = data["stdout"].as_str().unwrap();
    assert!(
        output.starts_with("probe-start") && output.ends_with("probe-end\n"),
        "{output}"
    );
    for (name, value) in UP_SECRETS {
        assert!(
            !output.contains(value),
            "{name} reached the command:\n{output}"
        );
    }
    assert!(
        !output.contains("hfm_"),
        "the machine token reached the command"
    );
    for pid in [up_pid, std::process::id()] {
        assert!(
            output.contains(&format!("/proc/{pid}/environ: No such file or directory")),
            "{output}"
        );
    }
    assert!(
        output.contains(&format!(
            "ls: cannot access '{socket_dir}': No such file or directory"
        )),
        "the Postgres socket directory is visible:\n{output}"
    );
    // `.holdfast/` shows empty: not the machine's record, not Postgres'
    // configuration.
    for inside in ["\"project_id\"", "max_connections", "machine.json"] {
        assert!(
            !output.contains(inside),
            "{inside} of .holdfast/ reached the command:\n{output}"
        );
    }
    assert!(
        !output.lines().any(|line| line == "42"),
        "the command queried the embedded Postgres:\n{output}"
    );
    stop_with_sigint(&mut up, &home).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_local_machine_as_root_without_a_working_sandbox_or_with_sandbox_none_is_refused() {
    assert!(
        std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap()) == 0,
        "this test checks what `up` refuses to root"
    );
    let home = Home::new();
    let fake = FakeProvider::start().await;
    let (mut child, log) = spawn_up(&home, &fake, &["--local-machine", "--sandbox", "none"], &[]);
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .unwrap()
        .unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!status.success(), "{text}");
    assert!(
        text.contains("--local-machine --sandbox none as root"),
        "{text}"
    );

    // A PATH with every system program but bwrap: the sandbox cannot be
    // made, and `up` stops, naming what is missing.
    let bin = home.0.join("bin-without-bwrap");
    std::fs::create_dir(&bin).unwrap();
    for dir in ["/usr/bin", "/usr/sbin"] {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            if entry.file_name() != "bwrap" {
                let _ = std::os::unix::fs::symlink(entry.path(), bin.join(entry.file_name()));
            }
        }
    }
    let path = bin.display().to_string();
    let (mut child, log) = spawn_up(&home, &fake, &["--local-machine"], &[("PATH", &path)]);
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .unwrap()
        .unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!status.success(), "{text}");
    assert!(
        text.contains("bubblewrap (`bwrap`) is not installed") && text.contains("--sandbox none"),
        "{text}"
    );
}
