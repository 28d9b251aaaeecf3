//! Commands end to end, with real processes: `holdfast machine run`
//! daemons, `holdfast server worker`s and `holdfast server maintenance` against a real API server
//! and the fake model provider. Processes are killed, stopped and restarted;
//! what ran is read from a marker file each command appends to, and what
//! the agent saw from the database.
//!
//! A running command waits for a `go` file in its working directory (a
//! bounded loop), so a test can act while it runs and then let it finish.

use std::path::{Path, PathBuf};
use std::time::Duration;

use holdfast_fakes::{FakeProvider, Reply};
use holdfast_telemetry::TraceHeaders;
use holdfast_tests::api_server::{project_key, ApiServer};
use holdfast_tests::otlp_receiver::OtlpReceiver;
use holdfast_tests::process::HoldfastProcess;
use holdfast_tests::scenario::{count_events, last_event_data, spawn_worker, wait_for_event};
use holdfast_tests::{wait_until, ScratchDir, TestDb};
use holdfast_wire::api::machines::{HeartbeatRequest, RegisterMachineRequest, WakeRequest};
use holdfast_wire::domain::InputMode;
use serde_json::{json, Value};
use tokio_postgres::Client;
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(60);

/// Everything a scenario runs against.
struct Rig {
    db: TestDb,
    client: Client,
    server: ApiServer,
    fake: FakeProvider,
    project: Uuid,
    key: String,
    dir: Scratch,
}

impl Rig {
    async fn start() -> Rig {
        let db = TestDb::new().await;
        let client = db.connect().await;
        let (project, key) = project_key(&client).await;
        let server = ApiServer::start(&db).await;
        let fake = FakeProvider::start().await;
        Rig {
            db,
            client,
            server,
            fake,
            project,
            key,
            dir: Scratch::new(),
        }
    }

    /// `holdfast server maintenance`, ticking every 100 ms with these timeouts.
    fn maintenance(&self, accept_timeout: &str, offline_after: &str) -> HoldfastProcess {
        HoldfastProcess::spawn(
            "maintenance",
            &["server", "maintenance"],
            &[
                (
                    "HOLDFAST_DATABASE_URL",
                    self.db.config.to_connection_string(),
                ),
                ("HOLDFAST_MAINTENANCE_INTERVAL", "100ms".into()),
                ("HOLDFAST_COMMAND_ACCEPT_TIMEOUT", accept_timeout.into()),
                ("HOLDFAST_MACHINE_OFFLINE_AFTER", offline_after.into()),
            ],
        )
    }

    fn worker(&self, name: &str) -> HoldfastProcess {
        spawn_worker(name, &self.db.config, &self.fake, &[])
    }

    /// Register a machine over HTTP: (id, token).
    async fn register(&self, name: &str) -> (Uuid, String) {
        let created = self
            .server
            .client(&self.key)
            .register_machine(&RegisterMachineRequest {
                name: name.into(),
                wake_url: None,
            })
            .await
            .unwrap();
        (created.id, created.token)
    }

    /// `holdfast machine run` for `token`, keeping its journal in `state`, running
    /// commands in the scratch directory, heartbeating every 200 ms.
    fn daemon(&self, name: &str, token: &str, state: &Path) -> HoldfastProcess {
        self.daemon_with(
            name,
            state,
            &[],
            &[("HOLDFAST_MACHINE_TOKEN", token.to_owned())],
        )
    }

    /// `holdfast machine run ARGS` as [`Rig::daemon`] runs it, with `envs` (the
    /// token among them, or in ARGS).
    fn daemon_with(
        &self,
        name: &str,
        state: &Path,
        args: &[&str],
        envs: &[(&str, String)],
    ) -> HoldfastProcess {
        self.daemon_through(&[], name, &self.dir.path, state, args, envs)
    }

    /// [`Rig::daemon_with`] started through `launcher` (e.g. `setpriv` to
    /// run it as another user), running commands in `work_dir`.
    fn daemon_through(
        &self,
        launcher: &[&str],
        name: &str,
        work_dir: &Path,
        state: &Path,
        args: &[&str],
        envs: &[(&str, String)],
    ) -> HoldfastProcess {
        let mut all_args = vec!["machine", "run"];
        all_args.extend_from_slice(args);
        let mut all_envs = vec![
            ("HOLDFAST_URL", self.server.url("")),
            ("HOLDFAST_MACHINE_STATE_DIR", state.display().to_string()),
            ("HOLDFAST_MACHINE_WORK_DIR", work_dir.display().to_string()),
            ("HOLDFAST_MACHINE_HEARTBEAT_INTERVAL", "200ms".into()),
            ("HOLDFAST_MACHINE_CLAIM_WAIT", "2s".into()),
        ];
        all_envs.extend_from_slice(envs);
        HoldfastProcess::spawn_through(name, launcher, &all_args, &all_envs)
    }

    /// `holdfast machines ARGS` (the client CLI) with the rig's API key,
    /// run to its end: (exit code, output).
    async fn client_cli(&self, args: &[&str]) -> (Option<i32>, String) {
        let mut all_args = vec!["machines"];
        all_args.extend_from_slice(args);
        let mut process = HoldfastProcess::spawn(
            "client",
            &all_args,
            &[
                ("HOLDFAST_URL", self.server.url("")),
                ("HOLDFAST_API_KEY", self.key.clone()),
            ],
        );
        let code = process.wait_exit(WAIT).await;
        (code, process.log_text())
    }

    /// An agent on `machine` whose model calls run_command with `command`
    /// once, then answers "done".
    async fn agent_running(&self, machine: Uuid, command: &str) -> Uuid {
        self.agent_calling(machine, json!({"command": command}))
            .await
    }

    /// An agent on `machine` whose model calls run_command with `input`
    /// once, then answers "done".
    async fn agent_calling(&self, machine: Uuid, input: Value) -> Uuid {
        self.agent_with_tool(json!({"type": "run_command", "machine": machine}), input)
            .await
    }

    /// An agent with the run_command tool entry `tool` whose model calls
    /// it with `input` once, then answers "done".
    async fn agent_with_tool(&self, tool: Value, input: Value) -> Uuid {
        self.fake
            .push(Reply::tool_calls(vec![("run_command", input)]));
        self.fake.set_default(Reply::text("done"));
        let config = json!({
            "model": {"provider": "anthropic", "name": "claude-test"},
            "tools": [tool],
        });
        let agent = holdfast_db::store::create_agent(&self.client, self.project, &config)
            .await
            .unwrap();
        holdfast_db::store::create_input(&self.client, agent, &json!("run it"), None)
            .await
            .unwrap();
        agent
    }

    /// The output of the agent's run_command call (once completed).
    async fn command_output(&self, agent: Uuid) -> Value {
        self.client
            .query_one(
                "SELECT output FROM holdfast.tool_calls WHERE agent_id = $1 AND name = 'run_command'",
                &[&agent],
            )
            .await
            .unwrap()
            .get(0)
    }

    async fn command_state(&self, agent: Uuid) -> String {
        self.client
            .query_one(
                "SELECT state FROM holdfast.commands WHERE agent_id = $1",
                &[&agent],
            )
            .await
            .unwrap()
            .get(0)
    }

    /// Wait until the command's process has started (its first line is in
    /// the marker file).
    async fn wait_for_marker(&self) {
        let marker = self.dir.marker();
        wait_until(WAIT, "the command started", || {
            let marker = marker.clone();
            async move { marker.exists() }
        })
        .await;
    }
}

/// A scratch directory: the commands' working directory, the daemons'
/// state directories, the marker. Dropping it releases any command still
/// waiting (the `go` file) and removes it.
struct Scratch {
    path: ScratchDir,
}

impl Scratch {
    fn new() -> Scratch {
        Scratch {
            path: ScratchDir::new("machines"),
        }
    }

    fn marker(&self) -> PathBuf {
        self.path.join("marker")
    }

    fn state(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    fn marker_lines(&self) -> usize {
        std::fs::read_to_string(self.marker())
            .map(|text| text.lines().count())
            .unwrap_or(0)
    }

    fn release(&self) {
        std::fs::write(self.path.join("go"), b"").unwrap();
    }
}

impl Drop for Scratch {
    // Before the directory itself goes (ScratchDir's own drop).
    fn drop(&mut self) {
        let _ = std::fs::write(self.path.join("go"), b"");
    }
}

/// A command that appends one line to the marker, waits (at most a minute)
/// for the go file, then prints `tag`.
fn marked_command(tag: &str) -> String {
    format!(
        "echo ran >> marker; i=0; while [ ! -e go ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; echo {tag}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_command_outlives_a_killed_worker_runs_once_and_the_agent_continues_with_its_output() {
    let rig = Rig::start().await;
    let _maintenance = rig.maintenance("5m", "30s");
    let (machine, token) = rig.register("box").await;
    let _daemon = rig.daemon("daemon", &token, &rig.dir.state("state"));
    let mut first = rig.worker("w1");
    let agent = rig
        .agent_running(machine, &marked_command("output-7f3a"))
        .await;
    rig.wait_for_marker().await;

    first.signal("KILL");
    first.wait_exit(WAIT).await;
    rig.dir.release();
    let _second = rig.worker("w2");
    wait_for_event(&rig.client, agent, "turn.completed", WAIT).await;

    assert_eq!(rig.dir.marker_lines(), 1, "the command ran exactly once");
    let output = rig.command_output(agent).await;
    assert_eq!(output["state"], "finished", "{output}");
    assert_eq!(output["exit_code"], 0);
    assert_eq!(output["stdout"], "output-7f3a\n");
    // The model's next call was built with the command's output.
    let request = rig.fake.last_request().unwrap();
    assert!(
        request.body.to_string().contains("output-7f3a"),
        "{}",
        request.body
    );
    assert_eq!(
        count_events(&rig.client, agent, "command.accepted").await,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_daemon_killed_mid_command_and_restarted_runs_nothing_twice_and_the_turn_ends() {
    let rig = Rig::start().await;
    let _maintenance = rig.maintenance("5m", "30s");
    let (machine, token) = rig.register("box").await;
    let state = rig.dir.state("state");
    let mut first = rig.daemon("daemon-1", &token, &state);
    let _worker = rig.worker("w");
    let agent = rig
        .agent_running(machine, &marked_command("output-91c2"))
        .await;
    rig.wait_for_marker().await;

    first.signal("KILL");
    first.wait_exit(WAIT).await;
    let _second = rig.daemon("daemon-2", &token, &state);
    rig.dir.release();
    wait_for_event(&rig.client, agent, "turn.completed", WAIT).await;

    assert_eq!(rig.dir.marker_lines(), 1, "the side effect happened once");
    let output = rig.command_output(agent).await;
    match output["state"].as_str() {
        // The process lost its reader with the first daemon: its exit status is gone.
        Some("unknown") => assert_eq!(output["exit_code"], Value::Null),
        Some("finished") => assert_eq!(output["stdout"], "output-91c2\n"),
        other => panic!("unexpected result {other:?}: {output}"),
    }
    assert_eq!(
        count_events(&rig.client, agent, "command.accepted").await,
        1
    );
}

/// The host pids of the processes whose command line holds `needle` (read
/// from /proc; a zombie's command line is empty, so a process that exited
/// and was not yet reaped does not count).
fn processes_with(needle: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            cmdline.contains(needle).then_some(pid)
        })
        .collect()
}

/// Bounds the time from a cancel to the command's processes being gone: a
/// heartbeat (200 ms in these tests), then SIGTERM and, past the stop grace
/// (5 s), SIGKILL, with room for a loaded machine.
const STOPPED_WITHIN: Duration = Duration::from_secs(20);

/// A command that marks that it ran, then sleeps for `secs` (a number
/// no other process here sleeps for, so /proc finds its processes).
fn sleeping_command(secs: u32) -> String {
    format!("echo ran >> marker; sleep {secs}")
}

/// Cancel the agent's turn through the API and wait for `turn.cancelled`.
async fn cancel_turn(rig: &Rig, agent: Uuid) {
    rig.server
        .client(&rig.key)
        .cancel_agent(agent)
        .await
        .unwrap();
    wait_for_event(&rig.client, agent, "turn.cancelled", WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancelling_an_accepted_command_stops_its_process_and_no_daemon_runs_it_again() {
    let rig = Rig::start().await;
    let _maintenance = rig.maintenance("5m", "30s");
    let (machine, token) = rig.register("box").await;
    let state = rig.dir.state("state");
    let mut first = rig.daemon("daemon-1", &token, &state);
    let _worker = rig.worker("w");
    let needle = "sleep 7301";
    let agent = rig.agent_running(machine, &sleeping_command(7301)).await;
    rig.wait_for_marker().await;
    wait_until(WAIT, "the command's sleep runs", || async {
        !processes_with(needle).is_empty()
    })
    .await;

    cancel_turn(&rig, agent).await;
    let cancelled_at = std::time::Instant::now();
    wait_until(
        STOPPED_WITHIN,
        "the command's processes are gone",
        || async { processes_with(needle).is_empty() },
    )
    .await;
    let took = cancelled_at.elapsed();

    // The outcome is on the timeline: the turn was cancelled, and the
    // machine's report of the stopped command is recorded as cancelled.
    wait_for_event(&rig.client, agent, "command.finished", WAIT).await;
    assert_eq!(count_events(&rig.client, agent, "turn.cancelled").await, 1);
    let finished = last_event_data(&rig.client, agent, "command.finished").await;
    assert_eq!(finished["late"], true, "{finished}");
    assert_eq!(finished["reason"], "cancelled", "{finished}");
    assert_eq!(
        finished["exit_code"],
        Value::Null,
        "killed by a signal: {finished}"
    );
    assert!(finished["signal"].is_number(), "{finished}");
    assert_eq!(rig.command_state(agent).await, "cancelled");
    assert!(took < STOPPED_WITHIN, "stopped in {took:?}");

    // A restarted daemon (same journal) runs nothing again, and no claim
    // hands the command out again.
    let first_session = daemon_session(&rig.client, machine).await;
    first.signal("KILL");
    first.wait_exit(WAIT).await;
    let _second = rig.daemon("daemon-2", &token, &state);
    wait_until(WAIT, "the second daemon serves the machine", || async {
        daemon_session(&rig.client, machine).await != first_session
    })
    .await;
    wait_for_heartbeats(&rig.client, machine, 5).await;
    assert_eq!(rig.dir.marker_lines(), 1, "the command ran once");
    assert!(processes_with(needle).is_empty());
    assert_eq!(
        count_events(&rig.client, agent, "command.accepted").await,
        1
    );
    assert_eq!(rig.command_state(agent).await, "cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_command_cancelled_while_its_daemon_is_down_is_stopped_by_the_restarted_daemon() {
    let rig = Rig::start().await;
    let _maintenance = rig.maintenance("5m", "30s");
    let (machine, token) = rig.register("box").await;
    let state = rig.dir.state("state");
    let mut first = rig.daemon("daemon-1", &token, &state);
    let _worker = rig.worker("w");
    let needle = "sleep 7302";
    let agent = rig.agent_running(machine, &sleeping_command(7302)).await;
    rig.wait_for_marker().await;
    wait_until(WAIT, "the command's sleep runs", || async {
        !processes_with(needle).is_empty()
    })
    .await;

    // The daemon dies; its command runs on in its own process group, and
    // the turn is cancelled while no daemon can be told.
    first.signal("KILL");
    first.wait_exit(WAIT).await;
    cancel_turn(&rig, agent).await;
    assert!(!processes_with(needle).is_empty(), "the command still runs");

    // The restarted daemon finds the process in its journal, learns from
    // its first heartbeat's answer that the call was cancelled, and stops it.
    let _second = rig.daemon("daemon-2", &token, &state);
    let restarted_at = std::time::Instant::now();
    wait_until(
        STOPPED_WITHIN,
        "the command's processes are gone",
        || async { processes_with(needle).is_empty() },
    )
    .await;
    let took = restarted_at.elapsed();
    // Its exit status went with the first daemon: the result is unknown,
    // recorded as cancelled.
    wait_for_event(&rig.client, agent, "command.unknown", WAIT).await;
    let unknown = last_event_data(&rig.client, agent, "command.unknown").await;
    assert_eq!(unknown["late"], true, "{unknown}");
    assert_eq!(unknown["reason"], "cancelled", "{unknown}");
    assert_eq!(rig.command_state(agent).await, "cancelled");
    assert_eq!(rig.dir.marker_lines(), 1, "the command ran once");
    assert_eq!(
        count_events(&rig.client, agent, "command.accepted").await,
        1
    );
    assert!(took < STOPPED_WITHIN, "stopped in {took:?}");
}

/// Wait until the machine has recorded `n` more heartbeats.
async fn wait_for_heartbeats(client: &Client, machine: Uuid, n: usize) {
    for _ in 0..n {
        let before = last_heartbeat(client, machine).await;
        wait_until(WAIT, "a heartbeat", || async {
            last_heartbeat(client, machine).await != before
        })
        .await;
    }
}

async fn last_heartbeat(client: &Client, machine: Uuid) -> Option<chrono::DateTime<chrono::Utc>> {
    client
        .query_one(
            "SELECT last_heartbeat_at FROM holdfast.machines WHERE id = $1",
            &[&machine],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_daemon_restarted_with_a_wiped_state_dir_runs_nothing_twice_and_accepts_new_work() {
    let rig = Rig::start().await;
    let _maintenance = rig.maintenance("5m", "30s");
    let (machine, token) = rig.register("box").await;
    let state = rig.dir.state("state");
    let mut first = rig.daemon("daemon-1", &token, &state);
    let _worker = rig.worker("w");
    let agent = rig
        .agent_running(machine, &marked_command("output-wiped"))
        .await;
    rig.wait_for_marker().await;

    first.signal("KILL");
    first.wait_exit(WAIT).await;
    std::fs::remove_dir_all(&state).unwrap();
    let _second = rig.daemon("daemon-2", &token, &state);
    // The new daemon has no record of the command: it is resolved as
    // unknown, never handed out again, and the turn goes on.
    wait_for_event(&rig.client, agent, "turn.completed", WAIT).await;
    let output = rig.command_output(agent).await;
    assert_eq!(output["state"], "unknown", "{output}");
    assert_eq!(output["reason"], "daemon_lost_record");
    rig.dir.release();

    // The second daemon is up and claiming, and still nothing ran twice.
    wait_until(WAIT, "the second daemon heartbeats", || async {
        let listed = rig.server.client(&rig.key).machines().await.unwrap();
        listed
            .machines
            .first()
            .is_some_and(|machine| machine.online)
    })
    .await;
    assert_eq!(rig.dir.marker_lines(), 1);
    assert_eq!(
        count_events(&rig.client, agent, "command.accepted").await,
        1
    );
    assert_eq!(rig.command_state(agent).await, "unknown");

    // It accepts new work: a new command runs through it, once.
    let next = rig
        .agent_running(machine, "echo ran >> marker; echo after-the-wipe")
        .await;
    wait_for_event(&rig.client, next, "turn.completed", WAIT).await;
    let output = rig.command_output(next).await;
    assert_eq!(output["state"], "finished", "{output}");
    assert_eq!(output["stdout"], "after-the-wipe\n");
    assert_eq!(rig.dir.marker_lines(), 2);
    assert_eq!(rig.command_state(agent).await, "unknown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn commands_accepted_together_recover_in_order_after_a_daemon_restart_and_none_runs_twice() {
    let rig = Rig::start().await;
    let _maintenance = rig.maintenance("5m", "30s");
    let (machine, token) = rig.register("box").await;
    let state = rig.dir.state("state");
    let mut first = rig.daemon("daemon-1", &token, &state);
    let _worker = rig.worker("w");
    let tags = ["first-of-three", "second-of-three", "third-of-three"];
    rig.fake.push(Reply::tool_calls(
        tags.iter()
            .map(|tag| ("run_command", json!({"command": marked_command(tag)})))
            .collect(),
    ));
    rig.fake.set_default(Reply::text("done"));
    let config = json!({
        "model": {"provider": "anthropic", "name": "claude-test"},
        "tools": [{"type": "run_command", "machine": machine}],
    });
    let agent = holdfast_db::store::create_agent(&rig.client, rig.project, &config)
        .await
        .unwrap();
    holdfast_db::store::create_input(&rig.client, agent, &json!("run them"), None)
        .await
        .unwrap();
    wait_until(WAIT, "the three commands run at once", || async {
        rig.dir.marker_lines() == 3
    })
    .await;

    first.signal("KILL");
    first.wait_exit(WAIT).await;
    let _second = rig.daemon("daemon-2", &token, &state);
    rig.dir.release();
    wait_for_event(&rig.client, agent, "turn.completed", WAIT).await;

    assert_eq!(rig.dir.marker_lines(), 3, "each command ran once");
    assert_eq!(
        count_events(&rig.client, agent, "command.accepted").await,
        3
    );
    // The next model call got the three results in the order of the calls,
    // each resolved once (finished, or unknown: the process lost its
    // reader with the first daemon).
    let messages = rig.fake.last_request().unwrap().body["messages"].clone();
    let blocks = |role: &str, kind: &str, id_field: &str| -> Vec<String> {
        messages
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == role)
            .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
            .filter(|b| b["type"] == kind)
            .map(|b| b[id_field].as_str().unwrap().to_owned())
            .collect()
    };
    let calls = blocks("assistant", "tool_use", "id");
    assert_eq!(calls.len(), 3, "{messages}");
    assert_eq!(blocks("user", "tool_result", "tool_use_id"), calls);
    let outputs = rig
        .client
        .query(
            "SELECT output FROM holdfast.tool_calls WHERE agent_id = $1 ORDER BY \"position\"",
            &[&agent],
        )
        .await
        .unwrap();
    assert_eq!(outputs.len(), 3);
    for (row, tag) in outputs.iter().zip(tags) {
        let output: Value = row.get(0);
        match output["state"].as_str() {
            Some("unknown") => assert_eq!(output["exit_code"], Value::Null),
            Some("finished") => assert_eq!(output["stdout"], format!("{tag}\n")),
            other => panic!("unexpected result {other:?}: {output}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_machine_that_never_comes_up_fails_the_command_after_the_accept_timeout() {
    let rig = Rig::start().await;
    let _maintenance = rig.maintenance("1s", "30s");
    let (machine, token) = rig.register("absent").await;
    let _worker = rig.worker("w");
    let agent = rig.agent_running(machine, &marked_command("never")).await;

    wait_for_event(&rig.client, agent, "turn.completed", WAIT).await;
    let output = rig.command_output(agent).await;
    assert_eq!(output["state"], "failed", "{output}");
    assert_eq!(output["reason"], "accept_timeout");
    assert_eq!(rig.command_state(agent).await, "failed");

    // The machine shows up late: nothing is handed to it, nothing runs.
    let session = Uuid::new_v4();
    let late = rig.server.client(&token);
    late.heartbeat(&HeartbeatRequest {
        session,
        started: true,
        commands: Vec::new(),
        sandboxed: Some(true),
        single_session: false,
    })
    .await
    .unwrap();
    let claimed = late
        .claim_commands(session, Duration::from_secs(1), 10)
        .await
        .unwrap();
    assert!(claimed.commands.is_empty(), "{claimed:?}");
    assert!(!rig.dir.marker().exists(), "the command never ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_silent_daemon_gives_the_agent_machine_unreachable_and_its_late_result_is_only_recorded()
{
    let rig = Rig::start().await;
    let _maintenance = rig.maintenance("5m", "2s");
    let (machine, token) = rig.register("box").await;
    let daemon = rig.daemon("daemon", &token, &rig.dir.state("state"));
    let _worker = rig.worker("w");
    let agent = rig
        .agent_running(machine, &marked_command("output-late"))
        .await;
    rig.wait_for_marker().await;
    wait_until(WAIT, "the daemon reports the command running", || async {
        let reported: Value = rig
            .client
            .query_one(
                "SELECT reported_commands FROM holdfast.machines WHERE id = $1",
                &[&machine],
            )
            .await
            .unwrap()
            .get(0);
        reported[0]["state"] == json!("running")
    })
    .await;

    daemon.signal("STOP");
    wait_for_event(&rig.client, agent, "machine.unreachable", WAIT).await;
    let output = rig.command_output(agent).await;
    assert_eq!(output["error"], "machine_unreachable", "{output}");
    assert_eq!(output["retryable"], true);
    assert_eq!(output["last_known_state"]["state"], "running");
    assert!(output["last_known_state"]["pid"].is_number(), "{output}");
    wait_for_event(&rig.client, agent, "turn.completed", WAIT).await;

    // The command finishes and the daemon wakes: its result is recorded as
    // a late event, and what the agent was given stays.
    rig.dir.release();
    daemon.signal("CONT");
    wait_for_event(&rig.client, agent, "command.finished", WAIT).await;
    let late = last_event_data(&rig.client, agent, "command.finished").await;
    assert_eq!(late["late"], true);
    assert_eq!(late["stdout"], "output-late\n");
    assert_eq!(rig.command_output(agent).await, output);
    assert_eq!(rig.command_state(agent).await, "finished");
    assert_eq!(rig.dir.marker_lines(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wake_attempt_keeps_queued_commands_alive_past_the_offline_window() {
    let rig = Rig::start().await;
    let _maintenance = rig.maintenance("5m", "1s");
    let (asleep, token) = rig.register("asleep").await;
    let (witness, _) = rig.register("witness").await;
    rig.server
        .client(&rig.key)
        .wake_machine(
            asleep,
            &WakeRequest {
                window_secs: Some(600),
            },
        )
        .await
        .unwrap();
    let _worker = rig.worker("w");
    let waiting = rig.agent_running(asleep, "echo woke-up").await;
    wait_for_event(&rig.client, waiting, "command.queued", WAIT).await;

    // A machine registered later, with no wake attempt, has its command
    // failed as offline: the sweep that did it saw the first one past its
    // offline window too, and left it queued.
    let failed = rig.agent_running(witness, "echo witness").await;
    wait_for_event(&rig.client, failed, "command.failed", WAIT).await;
    assert_eq!(
        last_event_data(&rig.client, failed, "command.failed").await["reason"],
        "machine_offline"
    );
    assert_eq!(rig.command_state(waiting).await, "queued");

    // The machine comes up and runs it.
    let _daemon = rig.daemon("daemon", &token, &rig.dir.state("state"));
    wait_for_event(&rig.client, waiting, "turn.completed", WAIT).await;
    let output = rig.command_output(waiting).await;
    assert_eq!(output["state"], "finished", "{output}");
    assert_eq!(output["stdout"], "woke-up\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_command_past_its_timeout_is_killed_with_everything_it_started_and_its_output_is_bounded()
{
    let rig = Rig::start().await;
    let _maintenance = rig.maintenance("5m", "30s");
    let (machine, token) = rig.register("box").await;
    let _daemon = rig.daemon("daemon", &token, &rig.dir.state("state"));
    let _worker = rig.worker("w");
    // A background process, 300 000 bytes of output, then a long sleep.
    let command = "sleep 299.5 & \
                   head -c 300000 /dev/zero | tr '\\0' x; sleep 300";
    let agent = rig
        .agent_calling(machine, json!({"command": command, "timeout_secs": 1}))
        .await;
    wait_for_event(&rig.client, agent, "turn.completed", WAIT).await;

    let output = rig.command_output(agent).await;
    assert_eq!(output["timed_out"], true, "{output}");
    assert_eq!(output["signal"], 9);
    assert_eq!(output["exit_code"], Value::Null);
    assert_eq!(output["stdout_truncated"], true);
    let stdout = output["stdout"].as_str().unwrap();
    assert!(stdout.len() < 110 * 1024, "kept {} bytes", stdout.len());
    assert!(stdout.starts_with("xxxx") && stdout.ends_with("xxxx"));
    assert!(stdout.contains("bytes omitted"));
    let is_error: bool = rig
        .client
        .query_one(
            "SELECT is_error FROM holdfast.tool_calls WHERE agent_id = $1 AND name = 'run_command'",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert!(is_error, "a timed-out command is an error for the model");

    // The background process went with the command (its pid inside the
    // sandbox's PID namespace means nothing here: it is found by its
    // arguments among the host's processes).
    let left = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| std::fs::read(entry.ok()?.path().join("cmdline")).ok())
        .any(|cmdline| cmdline == b"sleep\x00299.5\x00");
    let gone = !left;
    assert!(gone, "the background sleep outlived the timeout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_terminated_daemon_finishes_and_reports_its_running_command_before_exiting() {
    let rig = Rig::start().await;
    let _maintenance = rig.maintenance("5m", "30s");
    let (machine, token) = rig.register("box").await;
    let mut daemon = rig.daemon("daemon", &token, &rig.dir.state("state"));
    let _worker = rig.worker("w");
    let agent = rig
        .agent_running(machine, &marked_command("output-drain"))
        .await;
    rig.wait_for_marker().await;

    daemon.signal("TERM");
    rig.dir.release();
    assert_eq!(
        daemon.wait_exit(WAIT).await,
        Some(0),
        "{}",
        daemon.log_text()
    );
    // It exited only once the result was acknowledged.
    let output = rig.command_output(agent).await;
    assert_eq!(output["stdout"], "output-drain\n", "{output}");
    wait_for_event(&rig.client, agent, "turn.completed", WAIT).await;
}

/// Mode bits of a path.
fn mode(path: &Path) -> u32 {
    std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(path).unwrap().permissions()) & 0o777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn commands_get_a_clean_environment_without_the_token_provider_keys_or_database_url() {
    let rig = Rig::start().await;
    let _maintenance = rig.maintenance("5m", "30s");
    let _worker = rig.worker("w");
    // What a daemon inside `holdfast up` would have in its environment.
    let secrets = |token: &str| {
        vec![
            ("ANTHROPIC_API_KEY", "sk-ant-leak-1".to_owned()),
            ("OPENAI_API_KEY", "sk-leak-2".to_owned()),
            ("HOLDFAST_DATABASE_URL", rig.db.url()),
            ("HOLDFAST_API_KEY", format!("{}-api-key", token.len())),
            ("PASSED_ON", "passed-value".to_owned()),
            ("KEPT_BACK", "kept-value".to_owned()),
        ]
    };

    // The token by environment, and by a token file.
    let (by_env, env_token) = rig.register("by-env").await;
    let mut envs = secrets(&env_token);
    envs.push(("HOLDFAST_MACHINE_TOKEN", env_token.clone()));
    let env_state = rig.dir.state("env-state");
    let _by_env = rig.daemon_with("by-env", &env_state, &["--pass-env", "PASSED_ON"], &envs);
    let (by_file, file_token) = rig.register("by-file").await;
    let token_file = rig.dir.path.join("token");
    std::fs::write(&token_file, format!("{file_token}\n")).unwrap();
    std::fs::set_permissions(
        &token_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let file_state = rig.dir.state("file-state");
    let token_arg = token_file.display().to_string();
    let _by_file = rig.daemon_with(
        "by-file",
        &file_state,
        &["--token-file", &token_arg, "--pass-env", "PASSED_ON"],
        &secrets(&file_token),
    );

    for (machine, token) in [(by_env, &env_token), (by_file, &file_token)] {
        let agent = rig.agent_running(machine, "env").await;
        wait_for_event(&rig.client, agent, "turn.completed", WAIT).await;
        let output = rig.command_output(agent).await;
        assert_eq!(output["exit_code"], 0, "{output}");
        let env = output["stdout"].as_str().unwrap();
        assert!(
            env.contains("PASSED_ON=passed-value"),
            "--pass-env passes it:\n{env}"
        );
        assert!(env.contains("PATH="), "{env}");
        for leak in [
            token.as_str(),
            "hfm_",
            "HOLDFAST_MACHINE_TOKEN",
            "sk-ant-leak-1",
            "sk-leak-2",
            "HOLDFAST_DATABASE_URL",
            "HOLDFAST_API_KEY",
            "KEPT_BACK",
        ] {
            assert!(!env.contains(leak), "{leak} reached the command:\n{env}");
        }
    }

    // The daemon's files are its user's alone.
    for state in [&env_state, &file_state] {
        assert_eq!(mode(state), 0o700, "{}", state.display());
        assert_eq!(mode(&state.join("journal.json")), 0o600);
    }
    // A token file other users may read is refused.
    std::fs::set_permissions(
        &token_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let mut refused = rig.daemon_with(
        "loose-file",
        &rig.dir.state("loose-state"),
        &["--token-file", &token_arg],
        &[],
    );
    assert_ne!(refused.wait_exit(WAIT).await, Some(0));
    assert!(
        refused.log_text().contains("chmod 600"),
        "{}",
        refused.log_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rotated_token_stops_its_daemon_and_the_new_token_serves_the_machine() {
    let rig = Rig::start().await;
    let _maintenance = rig.maintenance("5m", "30s");
    let _worker = rig.worker("w");
    let (machine, old_token) = rig.register("box").await;
    let state = rig.dir.state("state");
    let mut old = rig.daemon("old", &old_token, &state);
    wait_until(WAIT, "the daemon's first heartbeat", || async {
        let count: i64 = rig
            .client
            .query_one(
                "SELECT count(*) FROM holdfast.machines WHERE id = $1 AND daemon_session IS NOT NULL",
                &[&machine],
            )
            .await
            .unwrap()
            .get(0);
        count == 1
    })
    .await;

    let (code, output) = rig.client_cli(&["token", &machine.to_string()]).await;
    assert_eq!(code, Some(0), "{output}");
    let new_token = output
        .lines()
        .find(|l| l.starts_with("hfm_"))
        .unwrap_or_else(|| panic!("no token in:\n{output}"))
        .to_owned();
    assert_ne!(new_token, old_token);

    // The old daemon's session ends: it stops, not zero, and says why.
    let code = old.wait_exit(WAIT).await;
    assert!(matches!(code, Some(c) if c != 0), "exit {code:?}");
    assert!(old.log_text().contains("rotated"), "{}", old.log_text());

    let _new = rig.daemon("new", &new_token, &state);
    let agent = rig.agent_running(machine, "echo served-by-new").await;
    wait_for_event(&rig.client, agent, "turn.completed", WAIT).await;
    assert_eq!(rig.command_output(agent).await["stdout"], "served-by-new\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_a_machine_ends_its_running_command_stops_its_daemon_and_the_turn_goes_on() {
    let rig = Rig::start().await;
    let _maintenance = rig.maintenance("5m", "30s");
    let _worker = rig.worker("w");
    let (machine, token) = rig.register("box").await;
    let mut daemon = rig.daemon("daemon", &token, &rig.dir.state("state"));
    let agent = rig
        .agent_running(machine, &marked_command("output-deleted"))
        .await;
    rig.wait_for_marker().await;

    let (code, output) = rig.client_cli(&["delete", &machine.to_string()]).await;
    assert_eq!(code, Some(0), "{output}");
    wait_for_event(&rig.client, agent, "turn.completed", WAIT).await;
    let output = rig.command_output(agent).await;
    assert_eq!(output["state"], "unknown", "{output}");
    assert_eq!(output["reason"], "machine_deleted");
    assert_eq!(rig.command_state(agent).await, "unknown");
    // The model's next call was told.
    let request = rig.fake.last_request().unwrap();
    assert!(
        request.body.to_string().contains("was deleted"),
        "{}",
        request.body
    );

    // Its daemon's token is refused: it stops, not zero.
    rig.dir.release();
    let code = daemon.wait_exit(WAIT).await;
    assert!(matches!(code, Some(c) if c != 0), "exit {code:?}");
    assert_eq!(rig.dir.marker_lines(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_command_run_is_a_span_of_the_turn_that_queued_it() {
    const TRACE_ID: &str = "0af7651916cd43dd8448eb211c80319c";
    const PARENT_ID: &str = "b7ad6b7169203331";
    let rig = Rig::start().await;
    let otlp = OtlpReceiver::start().await;
    let _maintenance = rig.maintenance("5m", "30s");
    let (machine, token) = rig.register("traced-box").await;
    let mut daemon = rig.daemon_with(
        "daemon",
        &rig.dir.state("state"),
        &[],
        &[
            ("HOLDFAST_MACHINE_TOKEN", token),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.endpoint.clone()),
            ("OTEL_SERVICE_NAME", "holdfast-machine".into()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100".into()),
        ],
    );
    let _worker = rig.worker("w-traced");
    rig.fake.push(Reply::tool_calls(vec![(
        "run_command",
        json!({"command": "exit 3"}),
    )]));
    rig.fake.set_default(Reply::text("done"));
    let config = json!({
        "model": {"provider": "anthropic", "name": "claude-test"},
        "tools": [{"type": "run_command", "machine": machine}],
    });
    let agent = holdfast_db::store::create_agent(&rig.client, rig.project, &config)
        .await
        .unwrap();
    let trace = TraceHeaders {
        traceparent: format!("00-{TRACE_ID}-{PARENT_ID}-01"),
        tracestate: None,
    };
    holdfast_db::store::create_traced_input(
        &rig.client,
        agent,
        &json!("run it"),
        None,
        Some(&trace),
        InputMode::Steer,
    )
    .await
    .unwrap();
    wait_for_event(&rig.client, agent, "turn.completed", WAIT).await;
    // SIGTERM: the daemon's exporter flushes before it exits.
    daemon.signal("TERM");
    assert_eq!(daemon.wait_exit(WAIT).await, Some(0));

    let spans = otlp.spans();
    let runs: Vec<_> = spans
        .iter()
        .filter(|s| s.span.name == "run_command")
        .collect();
    assert_eq!(runs.len(), 1, "one run, one span: {spans:#?}");
    let run = runs[0];
    assert_eq!(run.service, "holdfast-machine");
    assert_eq!(run.trace_id(), TRACE_ID, "the queuing turn's trace");
    assert_eq!(
        run.parent_span_id(),
        PARENT_ID,
        "a child of the input's span"
    );
    assert_eq!(run.attribute("process.exit.code").as_deref(), Some("3"));
    assert_eq!(run.attribute("error.type").as_deref(), Some("exit_code"));
    assert_eq!(run.attribute("holdfast.agent.id"), Some(agent.to_string()));
}

// The command sandbox (docs/sandbox.md): each test tries an escape from a
// real sandbox made by a real daemon, and fails if the layer that stops it
// is gone.

/// The test cluster's socket directory, port, user and database: the
/// Postgres a command must not reach.
fn postgres_socket(rig: &Rig) -> (String, u16, String, String) {
    let config = &rig.db.config.postgres;
    let dir = config
        .get_hosts()
        .iter()
        .find_map(|host| match host {
            tokio_postgres::config::Host::Unix(dir) => Some(dir.display().to_string()),
            _ => None,
        })
        .expect("the test cluster listens on a Unix socket");
    let port = config.get_ports().first().copied().unwrap_or(5432);
    (
        dir,
        port,
        config.get_user().unwrap_or("postgres").to_owned(),
        config.get_dbname().unwrap_or("postgres").to_owned(),
    )
}

/// A command that prints everything of the host it tries to read, stderr
/// included: its environment, the environ and cmdline of every process it
/// sees, the environ, cmdline and mem of `host_pids` (the daemon and the
/// test: its ancestors outside the sandbox), `files`, a listing of each of
/// `dirs`, and a query over Postgres' socket.
fn probe_command(host_pids: &[u32], files: &[&Path], dirs: &[&Path], rig: &Rig) -> String {
    let (socket_dir, port, user, dbname) = postgres_socket(rig);
    let mut script = String::from("{ echo probe-start; env; ");
    script.push_str(
        "for p in /proc/[0-9]*; do echo \"== $p\"; cat $p/environ $p/cmdline; echo; done; ",
    );
    for pid in host_pids {
        for file in ["environ", "cmdline", "mem"] {
            script.push_str(&format!("cat /proc/{pid}/{file}; "));
        }
    }
    for file in files {
        script.push_str(&format!("cat '{}'; ", file.display()));
    }
    for dir in dirs
        .iter()
        .map(|d| d.display().to_string())
        .chain([socket_dir.clone()])
    {
        script.push_str(&format!("ls -la '{dir}'; "));
    }
    script.push_str(&format!(
        "psql -h '{socket_dir}' -p {port} -U '{user}' -d '{dbname}' -Atc 'select 40 + 2'; "
    ));
    script.push_str("echo probe-end; } 2>&1");
    script
}

/// Run `command` on `machine` and return its output (stdout, which the
/// probe merges stderr into), once the turn has completed.
async fn run_probe(rig: &Rig, machine: Uuid, command: &str) -> String {
    let agent = rig.agent_running(machine, command).await;
    wait_for_event(&rig.client, agent, "turn.completed", WAIT).await;
    let output = rig.command_output(agent).await;
    let stdout = output["stdout"].as_str().unwrap_or_default().to_owned();
    assert!(
        stdout.contains("probe-start") && stdout.contains("probe-end"),
        "the probe ran to its end: {output}"
    );
    stdout
}

/// What every probe's output must show: the token nowhere, the host's
/// processes and the Postgres socket absent.
fn assert_probe_found_nothing(output: &str, token: &str, host_pids: &[u32], rig: &Rig) {
    assert!(
        !output.contains(token) && !output.contains("hfm_"),
        "the machine token reached the command:\n{output}"
    );
    for pid in host_pids {
        for file in ["environ", "cmdline", "mem"] {
            let absent = format!("/proc/{pid}/{file}: No such file or directory");
            assert!(output.contains(&absent), "{absent} expected in:\n{output}");
        }
    }
    let (socket_dir, ..) = postgres_socket(rig);
    assert!(
        output.contains(&format!(
            "ls: cannot access '{socket_dir}': No such file or directory"
        )),
        "the Postgres socket directory is visible:\n{output}"
    );
    assert!(
        !output.lines().any(|line| line == "42"),
        "the command queried Postgres:\n{output}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sandboxed_command_reads_no_token_no_daemon_process_file_no_journal_and_no_postgres() {
    let rig = Rig::start().await;
    let _maintenance = rig.maintenance("5m", "30s");
    let _worker = rig.worker("w");

    // The token by environment, by --token and by --token-file; each
    // daemon has a work directory of its own, holding its journal (and
    // its token file).
    // Each also holds a `.holdfast/` (where `up` keeps its Postgres).
    let work = |name: &str| {
        let dir = rig.dir.path.join(name);
        std::fs::create_dir_all(dir.join("secrets")).unwrap();
        std::fs::create_dir_all(dir.join(".holdfast")).unwrap();
        std::fs::write(dir.join(".holdfast/kept"), "kept-in-dot-holdfast\n").unwrap();
        dir
    };
    let (by_env, env_token) = rig.register("by-env").await;
    let (env_work, arg_work, file_work) = (work("env"), work("arg"), work("file"));
    let (env_state, arg_state, file_state) = (
        env_work.join("state"),
        arg_work.join("state"),
        file_work.join("state"),
    );
    let by_env_daemon = rig.daemon_through(
        &[],
        "by-env",
        &env_work,
        &env_state,
        &[],
        &[("HOLDFAST_MACHINE_TOKEN", env_token.clone())],
    );
    let (by_arg, arg_token) = rig.register("by-arg").await;
    let by_arg_daemon = rig.daemon_through(
        &[],
        "by-arg",
        &arg_work,
        &arg_state,
        &["--token", &arg_token],
        &[],
    );
    let (by_file, file_token) = rig.register("by-file").await;
    let token_file = file_work.join("secrets/token");
    std::fs::write(&token_file, format!("{file_token}\n")).unwrap();
    std::fs::set_permissions(
        &token_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let token_arg = token_file.display().to_string();
    let by_file_daemon = rig.daemon_through(
        &[],
        "by-file",
        &file_work,
        &file_state,
        &["--token-file", &token_arg],
        &[],
    );

    for (machine, token, daemon, state) in [
        (by_env, &env_token, &by_env_daemon, &env_state),
        (by_arg, &arg_token, &by_arg_daemon, &arg_state),
        (by_file, &file_token, &by_file_daemon, &file_state),
    ] {
        let host_pids = [daemon.pid(), std::process::id()];
        let journal = state.join("journal.json");
        let kept = state.parent().unwrap().join(".holdfast/kept");
        let command = probe_command(&host_pids, &[&token_file, &journal, &kept], &[state], &rig);
        let output = run_probe(&rig, machine, &command).await;
        assert_probe_found_nothing(&output, token, &host_pids, &rig);
        assert!(
            !output.contains("kept-in-dot-holdfast"),
            ".holdfast/ reached the command:\n{output}"
        );
        assert!(
            output.contains(&format!(
                "cat: {}: No such file or directory",
                journal.display()
            )),
            "the daemon's journal is visible:\n{output}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unprivileged_daemons_command_reads_no_token_and_no_daemon_process_file() {
    let rig = Rig::start().await;
    let _maintenance = rig.maintenance("5m", "30s");
    let _worker = rig.worker("w");
    // The daemon runs as nobody, in a work directory of its own, with its
    // token in a file and in its environment.
    let work = rig.dir.path.join("nobody");
    std::fs::create_dir(&work).unwrap();
    let token_file = work.join("token");
    let (machine, token) = rig.register("unprivileged").await;
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    std::fs::set_permissions(
        &token_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let chown = std::process::Command::new("chown")
        .args(["-R", "65534:65534"])
        .arg(&work)
        .status()
        .unwrap();
    assert!(chown.success());
    let state = work.join("state");
    let token_arg = token_file.display().to_string();
    let daemon = rig.daemon_through(
        &[
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ],
        "unprivileged",
        &work,
        &state,
        &["--token-file", &token_arg],
        // The token in its environment too (under another name: one
        // way of giving it is allowed at a time).
        &[("HOLDFAST_API_KEY", token.clone())],
    );
    let host_pids = [daemon.pid(), std::process::id()];
    let command = probe_command(&host_pids, &[&token_file], &[&state], &rig);
    let output = run_probe(&rig, machine, &command).await;
    assert_probe_found_nothing(&output, &token, &host_pids, &rig);
    // The daemon really ran as nobody.
    let status = std::fs::read_to_string(format!("/proc/{}/status", daemon.pid())).unwrap();
    assert!(
        status
            .lines()
            .any(|line| line.starts_with("Uid:") && line.contains("65534")),
        "{status}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_agent_workspaces_one_agents_command_cannot_read_another_agents_file() {
    let rig = Rig::start().await;
    let _maintenance = rig.maintenance("5m", "30s");
    let _worker = rig.worker("w");
    let (machine, token) = rig.register("box").await;
    let _daemon = rig.daemon("daemon", &token, &rig.dir.state("state"));
    let tool = json!({"type": "run_command", "machine": machine, "workspace": "agent"});

    let writer = rig
        .agent_with_tool(
            tool.clone(),
            json!({"command": "echo secret-of-a > notes.txt && pwd"}),
        )
        .await;
    wait_for_event(&rig.client, writer, "turn.completed", WAIT).await;
    let written = rig.command_output(writer).await;
    let writer_dir = rig
        .dir
        .path
        .join("agent-workspaces")
        .join(writer.to_string());
    assert_eq!(
        written["stdout"],
        format!("{}\n", writer_dir.display()),
        "{written}"
    );
    assert_eq!(
        std::fs::read_to_string(writer_dir.join("notes.txt")).unwrap(),
        "secret-of-a\n"
    );

    let file = writer_dir.join("notes.txt");
    let reader = rig
        .agent_with_tool(
            tool,
            json!({"command": format!(
                "{{ cat '{}'; ls -a ..; ls -a '{}'; echo reader-done; }} 2>&1",
                file.display(),
                rig.dir.path.display()
            )}),
        )
        .await;
    wait_for_event(&rig.client, reader, "turn.completed", WAIT).await;
    let read = rig.command_output(reader).await;
    let stdout = read["stdout"].as_str().unwrap();
    assert!(stdout.contains("reader-done"), "{read}");
    assert!(
        !stdout.contains("secret-of-a") && !stdout.lines().any(|line| line == writer.to_string()),
        "agent B saw agent A's workspace:\n{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "cat: {}: No such file or directory",
            file.display()
        )),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_command_network_none_a_command_cannot_reach_the_hosts_loopback_and_with_full_it_can()
{
    let rig = Rig::start().await;
    let _maintenance = rig.maintenance("5m", "30s");
    let _worker = rig.worker("w");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = format!(
        "bash -c 'echo hello > /dev/tcp/127.0.0.1/{port}' 2>&1 && echo connected || echo refused"
    );

    let (isolated, isolated_token) = rig.register("isolated").await;
    let _isolated = rig.daemon_with(
        "isolated",
        &rig.dir.state("isolated"),
        &["--command-network", "none"],
        &[("HOLDFAST_MACHINE_TOKEN", isolated_token)],
    );
    let agent = rig.agent_running(isolated, &connect).await;
    wait_for_event(&rig.client, agent, "turn.completed", WAIT).await;
    let output = rig.command_output(agent).await;
    assert!(
        output["stdout"].as_str().unwrap().ends_with("refused\n"),
        "{output}"
    );
    let accepted = tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
    assert!(
        accepted.is_err(),
        "a connection reached the host's loopback"
    );

    // The control: the default network reaches the same listener.
    let (open, open_token) = rig.register("open").await;
    let _open = rig.daemon("open", &open_token, &rig.dir.state("open"));
    let agent = rig.agent_running(open, &connect).await;
    let (mut stream, _) = tokio::time::timeout(WAIT, listener.accept())
        .await
        .expect("the command connects with --command-network full")
        .unwrap();
    let mut received = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut stream, &mut received)
        .await
        .unwrap();
    assert_eq!(received, "hello\n");
    wait_for_event(&rig.client, agent, "turn.completed", WAIT).await;
    assert_eq!(rig.command_output(agent).await["stdout"], "connected\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fork_bomb_and_a_4_gib_allocation_fail_naming_their_limit_and_the_machine_keeps_serving()
{
    let rig = Rig::start().await;
    let _maintenance = rig.maintenance("5m", "30s");
    let _worker = rig.worker("w");
    let (machine, token) = rig.register("box").await;
    let _daemon = rig.daemon_with(
        "limits",
        &rig.dir.state("state"),
        &["--command-processes", "64", "--command-memory-mib", "256"],
        &[("HOLDFAST_MACHINE_TOKEN", token)],
    );

    // A fork bomb that would stop at 2000 processes: the limit stops it
    // at 64.
    let bomb = "i=0; while [ $i -lt 2000 ]; do sleep 120 & i=$((i+1)); done; wait";
    // 4 GiB without a newline: tail must hold it all in memory.
    let allocation = "head -c 4G /dev/zero | tail -n 1 | wc -c";
    for (command, reason, flag) in [
        (bomb, "process_limit", "--command-processes"),
        (allocation, "memory_limit", "--command-memory-mib"),
    ] {
        let agent = rig.agent_running(machine, command).await;
        wait_for_event(&rig.client, agent, "command.failed", WAIT).await;
        let failed = last_event_data(&rig.client, agent, "command.failed").await;
        assert_eq!(failed["reason"], reason, "{failed}");
        assert!(
            failed["message"].as_str().unwrap().contains(flag),
            "{failed}"
        );
        wait_for_event(&rig.client, agent, "turn.completed", WAIT).await;
        let output = rig.command_output(agent).await;
        assert_eq!(output["reason"], reason, "the model is told: {output}");
    }
    // No process of the bomb is left (each of its sleeps would live two
    // minutes; the kernel ends a PID namespace's processes asynchronously
    // once its first process is killed), and the machine serves the next
    // command.
    let bomb_processes = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|entry| std::fs::read(entry.ok()?.path().join("cmdline")).ok())
            .filter(|cmdline| cmdline == b"sleep\x00120\x00")
            .count()
    };
    wait_until(
        Duration::from_secs(15),
        "no process of the fork bomb outlives it",
        || std::future::ready(bomb_processes() == 0),
    )
    .await;
    let agent = rig.agent_running(machine, "echo still-serving").await;
    wait_for_event(&rig.client, agent, "turn.completed", WAIT).await;
    assert_eq!(rig.command_output(agent).await["stdout"], "still-serving\n");
}

/// The session of the daemon serving `machine`, once one started.
async fn daemon_session(client: &Client, machine: Uuid) -> Option<Uuid> {
    client
        .query_one(
            "SELECT daemon_session FROM holdfast.machines WHERE id = $1",
            &[&machine],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_second_daemon_start_is_recorded_as_session_replaced_and_refused_under_single_session() {
    let rig = Rig::start().await;
    let _maintenance = rig.maintenance("5m", "30s");
    let (machine, token) = rig.register("box").await;
    let first = rig.daemon("first", &token, &rig.dir.state("first"));
    wait_until(WAIT, "the first daemon starts", || async {
        daemon_session(&rig.client, machine).await.is_some()
    })
    .await;
    let first_session = daemon_session(&rig.client, machine).await.unwrap();
    // An agent with a command waiting on the machine (no worker runs it
    // yet: it stays queued).
    let agent = rig.agent_running(machine, "echo after").await;
    let _worker = rig.worker("w");
    wait_until(WAIT, "the command is queued", || async {
        count_events(&rig.client, agent, "command.queued").await > 0
    })
    .await;
    first.signal("STOP");

    let _second = rig.daemon("second", &token, &rig.dir.state("second"));
    wait_for_event(&rig.client, agent, "machine.session_replaced", WAIT).await;
    let replaced = last_event_data(&rig.client, agent, "machine.session_replaced").await;
    let second_session = daemon_session(&rig.client, machine).await.unwrap();
    assert_ne!(second_session, first_session);
    assert_eq!(
        replaced["previous_session"],
        json!(first_session),
        "{replaced}"
    );
    assert_eq!(replaced["session"], json!(second_session), "{replaced}");
    assert_eq!(replaced["machine_id"], json!(machine), "{replaced}");
    assert!(
        replaced["peer"].as_str().unwrap().starts_with("127.0.0.1:"),
        "{replaced}"
    );
    first.signal("CONT");
    first.signal("KILL");
    wait_for_event(&rig.client, agent, "turn.completed", WAIT).await;

    // With --single-session, a live session is not taken over.
    let (guarded, guarded_token) = rig.register("guarded").await;
    let _holder = rig.daemon_with(
        "holder",
        &rig.dir.state("holder"),
        &["--single-session"],
        &[("HOLDFAST_MACHINE_TOKEN", guarded_token.clone())],
    );
    wait_until(WAIT, "the single-session daemon starts", || async {
        daemon_session(&rig.client, guarded).await.is_some()
    })
    .await;
    let holder_session = daemon_session(&rig.client, guarded).await;
    let intruder = rig.daemon("intruder", &guarded_token, &rig.dir.state("intruder"));
    wait_until(WAIT, "the intruder is refused", || async {
        intruder.log_text().contains("--single-session")
    })
    .await;
    assert_eq!(
        daemon_session(&rig.client, guarded).await,
        holder_session,
        "the session was taken over"
    );
    let agent = rig.agent_running(guarded, "echo held").await;
    wait_for_event(&rig.client, agent, "turn.completed", WAIT).await;
    assert_eq!(rig.command_output(agent).await["stdout"], "held\n");
    assert_eq!(
        count_events(&rig.client, agent, "machine.session_replaced").await,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_daemon_that_cannot_make_its_sandbox_refuses_to_start_and_sandbox_none_is_warned_about() {
    let rig = Rig::start().await;
    let (machine, token) = rig.register("box").await;
    // No bwrap on the daemon's PATH.
    let mut refused = rig.daemon_with(
        "no-bwrap",
        &rig.dir.state("no-bwrap"),
        &[],
        &[
            ("HOLDFAST_MACHINE_TOKEN", token.clone()),
            ("PATH", "/nonexistent".into()),
        ],
    );
    assert_ne!(refused.wait_exit(WAIT).await, Some(0));
    let log = refused.log_text();
    assert!(
        log.contains("bubblewrap (`bwrap`) is not installed") && log.contains("--sandbox none"),
        "{log}"
    );
    let online: Option<chrono::DateTime<chrono::Utc>> = rig
        .client
        .query_one(
            "SELECT last_heartbeat_at FROM holdfast.machines WHERE id = $1",
            &[&machine],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(online, None, "a daemon without its sandbox never came up");

    // --sandbox none: warned at start, and by `holdfast status`.
    let unsandboxed = rig.daemon_with(
        "unsandboxed",
        &rig.dir.state("unsandboxed"),
        &["--sandbox", "none"],
        &[("HOLDFAST_MACHINE_TOKEN", token)],
    );
    let sandboxed_flag = || async {
        rig.client
            .query_one(
                "SELECT daemon_sandboxed FROM holdfast.machines WHERE id = $1",
                &[&machine],
            )
            .await
            .unwrap()
            .get::<_, Option<bool>>(0)
    };
    wait_until(WAIT, "the unsandboxed daemon starts", || async {
        sandboxed_flag().await == Some(false)
    })
    .await;
    assert!(
        unsandboxed
            .log_text()
            .contains("--sandbox none: commands run unsandboxed"),
        "{}",
        unsandboxed.log_text()
    );
    let mut status = HoldfastProcess::spawn(
        "status",
        &["status"],
        &[("HOLDFAST_DATABASE_URL", rig.db.url())],
    );
    assert_eq!(
        status.wait_exit(WAIT).await,
        Some(0),
        "{}",
        status.log_text()
    );
    assert!(
        status
            .log_text()
            .contains("warning: machine \"box\" (project")
            && status.log_text().contains("runs its commands unsandboxed"),
        "{}",
        status.log_text()
    );
}
