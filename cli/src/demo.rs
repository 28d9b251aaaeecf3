//! `holdfast demo`: one command, no API key, no network. It starts a whole
//! stack on this machine — a private Postgres (`.holdfast/demo`, fsync off),
//! a scripted model server speaking the Anthropic protocol on 127.0.0.1,
//! the HTTP API and maintenance in this process, two `holdfast worker`
//! child processes and a `holdfast machine` daemon for this host — and
//! plays one support conversation through the real HTTP API: the agent
//! streams text, calls a custom tool the demo answers, asks for an approval
//! the demo grants, runs a command on this machine, and in the middle of
//! its last answer the worker running it is SIGKILLed; the other worker
//! picks the agent up from its last saved step. The summary's counts come
//! from the database, and the demo fails (exit 1) if any tool ran other
//! than once.

mod script;

use std::collections::HashMap;
use std::fmt::Display;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use holdfast_api::ApiConfig;
use holdfast_engine::cluster::{ClusterOptions, LocalCluster};
use holdfast_engine::connect::ConnectConfig;
use holdfast_engine::domain::NewModelEndpoint;
use holdfast_engine::{migrate, store};
use holdfast_fakes::FakeProvider;
use holdfast_worker::maintenance;
use serde_json::json;
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_postgres::types::ToSql;
use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::client::follow::{follow, SavedEvent, StreamItem};
use crate::client::http::{ApiClient, CallError};

const DATABASE: &str = "holdfast_demo";
const WORKERS: [&str; 2] = ["demo-worker-1", "demo-worker-2"];
const DAEMON: &str = "demo-machine-daemon";
/// Who the demo approves as.
const OPERATOR: &str = "demo-operator";
/// The whole story must be over by then (it takes a few seconds).
const STORY_LIMIT: Duration = Duration::from_secs(120);

#[derive(clap::Args)]
pub struct DemoArgs {
    /// The demo's private Postgres cluster (kept between runs; the demo's
    /// database in it is created afresh each time).
    #[arg(long, default_value = ".holdfast/demo")]
    dir: PathBuf,
}

pub async fn run(args: DemoArgs) -> Result<()> {
    let mut out = Timeline::start();
    println!(
        "Holdfast demo: one agent, two worker processes, a machine daemon and a scripted model, all on this machine."
    );
    println!();
    let mut stack = Stack::start(&args.dir, &mut out).await?;
    let played = stack.play(&mut out).await;
    let stopped = stack.stop(&mut out).await;
    let summary = played?;
    stopped?;
    summary.print();
    summary.verdict()
}

/// Prints the timeline: elapsed time, a tag, what happened; live model
/// text inline as it streams.
struct Timeline {
    start: Instant,
    streaming: bool,
}

impl Timeline {
    fn start() -> Timeline {
        Timeline {
            start: Instant::now(),
            streaming: false,
        }
    }

    fn line(&mut self, tag: &str, text: impl Display) {
        self.end_stream();
        println!(
            "{:>6.1}s  {tag:<11} {text}",
            self.start.elapsed().as_secs_f64()
        );
    }

    fn delta(&mut self, text: &str) {
        let mut stdout = std::io::stdout().lock();
        if !self.streaming {
            let _ = write!(
                stdout,
                "{:>6.1}s  {:<11} ▸ ",
                self.start.elapsed().as_secs_f64(),
                "model"
            );
            self.streaming = true;
        }
        let _ = write!(stdout, "{text}");
        let _ = stdout.flush();
    }

    fn end_stream(&mut self) {
        if self.streaming {
            println!();
            self.streaming = false;
        }
    }
}

/// A `holdfast worker` or `holdfast machine` child process.
struct ChildProcess {
    name: &'static str,
    pid: u32,
    child: Child,
    log: PathBuf,
    killed: bool,
}

/// Everything the demo started.
struct Stack {
    cluster: Option<LocalCluster>,
    client: Client,
    fake: FakeProvider,
    api: ApiClient,
    shutdown: CancellationToken,
    services: JoinSet<(&'static str, Result<()>)>,
    workers: Vec<ChildProcess>,
    /// The machine daemon for this host, and the machine's name.
    daemon: Option<ChildProcess>,
    machine: String,
}

impl Stack {
    async fn start(dir: &Path, out: &mut Timeline) -> Result<Stack> {
        let dir = dir.to_path_buf();
        out.line(
            "postgres",
            format!(
                "starting a private cluster in {} (created on the first run)",
                dir.display()
            ),
        );
        let cluster = tokio::task::spawn_blocking({
            let dir = dir.clone();
            move || {
                LocalCluster::start(
                    &dir,
                    &ClusterOptions {
                        fast_unsafe_fsync_off: true,
                        max_connections: 100,
                    },
                )
            }
        })
        .await??;
        let database = fresh_database(&cluster).await?;
        out.line(
            "postgres",
            format!("up, with a fresh database {DATABASE} (fsync off: a demo, not production)"),
        );
        out.line(
            "postgres",
            format!("while the demo runs: {}", cluster.psql_command(DATABASE)),
        );
        let (client, connection) = database.connect().await?;
        tokio::spawn(connection);

        let fake = FakeProvider::try_start()
            .await
            .context("starting the scripted model server on 127.0.0.1")?;
        script::script_model(&fake);
        // The operator's endpoint for the scripted model (no credential): an
        // agent's own base_url would need custom URLs allowed for its project.
        store::add_model_endpoint(
            &client,
            &NewModelEndpoint {
                name: script::MODEL_ENDPOINT.into(),
                kind: "anthropic".into(),
                base_url: fake.base_url_anthropic(),
                ..NewModelEndpoint::default()
            },
        )
        .await?;
        out.line(
            "model",
            format!(
                "scripted model server on {} (Anthropic Messages protocol, streaming)",
                fake.base_url()
            ),
        );

        let shutdown = CancellationToken::new();
        let mut services = JoinSet::new();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let api_url = format!("http://{}", listener.local_addr()?);
        {
            let (config, shutdown) = (ApiConfig::new(database.clone()), shutdown.clone());
            services.spawn(async move {
                let served = holdfast_api::serve(config, listener, shutdown).await;
                ("the API", served.map_err(anyhow::Error::from))
            });
        }
        {
            let settings = maintenance::Settings {
                interval: Duration::from_millis(100),
                ..maintenance::Settings::default()
            };
            let (config, shutdown) = (database.clone(), shutdown.clone());
            services.spawn(async move {
                (
                    "maintenance",
                    maintenance::run(settings, config, shutdown).await,
                )
            });
        }
        let key = store::create_api_key(&client, "demo").await?;
        let api = ApiClient::new(&api_url, &key.key)?;
        out.line(
            "api",
            format!("{api_url}, with maintenance every 100ms (in this process)"),
        );

        let connection_string = cluster.connection_string(DATABASE);
        let mut stack = Stack {
            cluster: Some(cluster),
            client,
            fake,
            api,
            shutdown,
            services,
            workers: Vec::new(),
            daemon: None,
            machine: crate::machine::host_machine_name(),
        };
        for name in WORKERS {
            let worker = spawn_worker(name, &connection_string, &dir)?;
            stack.workers.push(worker);
        }
        for worker in &mut stack.workers {
            let name = worker.name;
            wait_until(
                &stack.client,
                worker,
                "start claiming",
                "SELECT count(*) > 0 FROM pg_stat_activity \
                  WHERE application_name = $1 AND query LIKE '%claim_agents%'",
                &name,
            )
            .await?;
        }
        let names: Vec<String> = stack
            .workers
            .iter()
            .map(|w| format!("{} (pid {})", w.name, w.pid))
            .collect();
        out.line(
            "workers",
            format!("{} are claiming work", names.join(" and ")),
        );
        stack.start_machine(&api_url, &dir, out).await?;
        Ok(stack)
    }

    /// Register this host as a machine over the API and start its daemon,
    /// `holdfast machine`, with a fresh journal and working directory.
    async fn start_machine(&mut self, api_url: &str, dir: &Path, out: &mut Timeline) -> Result<()> {
        let registered = self
            .api
            .post_once("/v1/machines", &json!({"name": self.machine}))
            .await?;
        let (Some(id), Some(token)) = (
            registered.body["id"]
                .as_str()
                .and_then(|id| id.parse::<Uuid>().ok()),
            registered.body["token"].as_str(),
        ) else {
            bail!("the API answered POST /v1/machines without an id and a token");
        };
        let home = dir.join("machine");
        match std::fs::remove_dir_all(&home) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(anyhow::Error::from(e).context(format!("clearing {}", home.display())))
            }
        }
        let work = home.join("work");
        std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
        let daemon = self
            .daemon
            .insert(spawn_daemon(api_url, token, &home, dir)?);
        wait_until(
            &self.client,
            daemon,
            "come online",
            "SELECT daemon_session IS NOT NULL FROM holdfast.machines WHERE id = $1",
            &id,
        )
        .await?;
        out.line(
            "machine",
            format!(
                "{} (this host) registered; its daemon {DAEMON} (pid {}) runs commands in {}",
                self.machine,
                daemon.pid,
                work.display()
            ),
        );
        Ok(())
    }

    /// The conversation, from creating the agent to its turn's end.
    async fn play(&mut self, out: &mut Timeline) -> Result<Summary> {
        let created = self
            .api
            .post_once("/v1/agents", &script::agent_config(&self.machine))
            .await?;
        let agent: Uuid = created.body["id"]
            .as_str()
            .and_then(|id| id.parse().ok())
            .context("the API answered POST /v1/agents without an id")?;
        out.line(
            "agent",
            format!(
                "{agent} created: custom tools lookup_order and issue_refund (issue_refund needs \
                 approval), and run_command on {}",
                self.machine
            ),
        );

        let (items_tx, mut items) = mpsc::channel(256);
        let stop_following = self.shutdown.child_token();
        let follower = tokio::spawn(follow(
            self.api.clone(),
            agent,
            0,
            items_tx,
            stop_following.clone(),
        ));

        self.api
            .post(
                &format!("/v1/agents/{agent}/inputs"),
                &json!({"content": script::INPUT}),
                Some("demo-input-1"),
            )
            .await?;

        let mut story = Story::new(agent);
        let mut held = self.fake.held_watch();
        let mut held_seen = false;
        let limit = tokio::time::sleep(STORY_LIMIT);
        tokio::pin!(limit);
        while !story.done {
            tokio::select! {
                item = items.recv() => match item {
                    Some(item) => self.on_item(&mut story, item, out).await?,
                    None => break,
                },
                _ = held.wait_for(|n| *n >= 1), if !held_seen => held_seen = true,
                _ = &mut limit => bail!(
                    "the story did not end within {STORY_LIMIT:?}; worker logs: {}",
                    self.log_paths()
                ),
            }
            // The crash point: the closing answer is streaming (its first
            // words are on screen) and the model server holds it there.
            if held_seen && story.crash.is_none() && story.streaming_epoch.is_some() {
                self.crash(&mut story, out).await?;
            }
        }
        stop_following.cancel();
        drop(items);
        if let Ok(Err(e)) = follower.await {
            return Err(e.into());
        }
        if !story.done {
            bail!("the event stream ended before the turn did");
        }
        Summary::read(&self.client, &story, &self.fake).await
    }

    async fn on_item(
        &mut self,
        story: &mut Story,
        item: StreamItem,
        out: &mut Timeline,
    ) -> Result<()> {
        match item {
            StreamItem::Delta { text, epoch } => {
                if story.crash.as_ref().is_some_and(|c| epoch <= c.epoch) {
                    // Late words of the killed call: not shown twice.
                    return Ok(());
                }
                self.note_recovery(story, Some(epoch), out).await?;
                story.streaming_epoch = Some(epoch);
                out.delta(&text);
            }
            StreamItem::Saved(event) => self.on_event(story, event, out).await?,
            StreamItem::Reconnected { after } => {
                out.line(
                    "stream",
                    format!("reconnected after event #{after}; re-reading what waits"),
                );
                self.approve_pending(story, out).await?;
                self.answer_waiting_calls(story, out).await?;
            }
        }
        Ok(())
    }

    async fn on_event(
        &mut self,
        story: &mut Story,
        event: SavedEvent,
        out: &mut Timeline,
    ) -> Result<()> {
        let d = &event.data;
        let name = d["name"].as_str().unwrap_or("?");
        match event.kind.as_str() {
            "input.received" => out.line(
                "input",
                format!("{:?} (Idempotency-Key demo-input-1)", script::INPUT),
            ),
            "turn.started" => out.line("turn", "started"),
            "model.response" => {
                self.note_recovery(story, None, out).await?;
                story.streaming_epoch = None;
                story.responses += 1;
                let calls = d["tool_calls"].as_array().map_or(0, Vec::len);
                let what = match calls {
                    0 => "the final answer".to_owned(),
                    1 => "the answer and its tool call, in one transaction".to_owned(),
                    n => format!("the answer and its {n} tool calls, in one transaction"),
                };
                out.line("saved", format!("model step {}: {what}", story.responses));
            }
            "tool_call.created" => {
                if d["kind"] == "command" {
                    let command = d["input"]["command"].as_str().unwrap_or("?");
                    out.line(
                        "tool call",
                        format!("{name} on {}: {command}", self.machine),
                    );
                } else if d["status"] == "awaiting_approval" {
                    out.line(
                        "tool call",
                        format!("{name} {} waits for approval", d["input"]),
                    );
                } else {
                    out.line(
                        "tool call",
                        format!("{name} {} waits for the client", d["input"]),
                    );
                    self.answer_waiting_calls(story, out).await?;
                }
            }
            "approval.requested" => self.approve_pending(story, out).await?,
            "approval.answered" => {
                let decision = match d["decision"].as_str() {
                    Some("approve") => "approved",
                    Some("deny") => "denied",
                    _ => "decided",
                };
                out.line(
                    "approval",
                    format!("{decision} by {}", d["by"].as_str().unwrap_or("?")),
                );
                self.answer_waiting_calls(story, out).await?;
            }
            "command.accepted" => {
                let pid = self.daemon.as_ref().map_or(0, |daemon| daemon.pid);
                out.line(
                    "machine",
                    format!("{DAEMON} (pid {pid}) accepted the command and runs it with sh -c"),
                );
            }
            "command.finished" => {
                let exit = d["exit_code"]
                    .as_i64()
                    .map_or_else(|| "no exit code".to_owned(), |code| format!("exit {code}"));
                out.line("machine", format!("the command finished: {exit}"));
                for line in d["stdout"].as_str().unwrap_or_default().lines() {
                    out.line("stdout", format!("│ {line}"));
                }
                for line in d["stderr"].as_str().unwrap_or_default().lines() {
                    out.line("stderr", format!("│ {line}"));
                }
            }
            "command.failed" | "command.unknown" | "machine.unreachable" => {
                out.line("machine", format!("{} {}", event.kind, d));
            }
            "tool_call.completed" if d["output"]["exit_code"].is_i64() => out.line(
                "tool result",
                format!(
                    "{name} ✓ exit {}, stdout {:?} → the model",
                    d["output"]["exit_code"],
                    d["output"]["stdout"]
                        .as_str()
                        .unwrap_or_default()
                        .trim_end()
                ),
            ),
            "tool_call.completed" => out.line("tool result", format!("{name} ✓ {}", d["output"])),
            "tool_call.interrupted" => out.line("interrupted", format!("{name}: {}", d["output"])),
            "model.retry" => out.line(
                "retry",
                format!("model call retried: {}", d["error"]["message"]),
            ),
            "turn.completed" => {
                out.line("turn", "completed");
                story.done = true;
            }
            "turn.failed" | "turn.cancelled" => {
                out.line("turn", format!("{} {}", event.kind, d));
                bail!("the turn ended with {}", event.kind);
            }
            _ => {}
        }
        Ok(())
    }

    /// The first sign of the agent moving again after the crash: the
    /// retried answer streaming under a new lease `epoch` (or, should no
    /// delta come through, its saved response).
    async fn note_recovery(
        &self,
        story: &mut Story,
        epoch: Option<i64>,
        out: &mut Timeline,
    ) -> Result<()> {
        let agent = story.agent;
        let Some(crash) = story.crash.as_mut().filter(|c| c.recovered_after.is_none()) else {
            return Ok(());
        };
        let after = crash.at.elapsed();
        crash.recovered_after = Some(after);
        let holder = self
            .lease_holder(agent)
            .await?
            .map_or_else(|| "another worker".to_owned(), |(name, _, _)| name);
        let epochs = match epoch {
            Some(epoch) => format!(" (lease epoch {} → {epoch})", crash.epoch),
            None => String::new(),
        };
        out.line(
            "recovered",
            format!(
                "{holder} took the agent over {:.1}s later{epochs} and retries the answer from saved step {}",
                after.as_secs_f64(),
                crash.last_saved_step
            ),
        );
        Ok(())
    }

    /// Approve every pending approval, over the HTTP API.
    async fn approve_pending(&mut self, story: &mut Story, out: &mut Timeline) -> Result<()> {
        let pending = self
            .api
            .get(&format!(
                "/v1/agents/{}/approvals?status=pending",
                story.agent
            ))
            .await?;
        for approval in pending.body["approvals"].as_array().into_iter().flatten() {
            let id = approval["id"].as_str().unwrap_or_default();
            out.line(
                "approval",
                format!(
                    "{} {} needs approval: the demo approves it (POST /v1/approvals/{id})",
                    approval["tool_name"].as_str().unwrap_or("?"),
                    approval["tool_input"]
                ),
            );
            self.api
                .post(
                    &format!("/v1/approvals/{id}"),
                    &json!({"decision": "approve", "by": OPERATOR}),
                    None,
                )
                .await?;
        }
        Ok(())
    }

    /// Run and answer every custom tool call that waits for a result and
    /// that this demo has not run yet: deduped by tool-call id, as a
    /// client's backend should.
    async fn answer_waiting_calls(&mut self, story: &mut Story, out: &mut Timeline) -> Result<()> {
        let waiting = self
            .api
            .get(&format!(
                "/v1/agents/{}/tool-calls?status=waiting&kind=custom",
                story.agent
            ))
            .await?;
        for call in waiting.body["tool_calls"].as_array().into_iter().flatten() {
            let Some(id) = call["id"].as_str().and_then(|id| id.parse::<Uuid>().ok()) else {
                continue;
            };
            if story.executions.contains_key(&id) {
                continue;
            }
            let name = call["name"].as_str().unwrap_or_default().to_owned();
            let (output, is_error) = script::run_tool(&name, &call["input"]);
            story.executions.insert(id, (name.clone(), 1));
            out.line(
                "client",
                format!("runs {name} and posts its result (POST /v1/tool-calls/{id}/result)"),
            );
            match self
                .api
                .post(
                    &format!("/v1/tool-calls/{id}/result"),
                    &json!({"output": output, "is_error": is_error}),
                    None,
                )
                .await
            {
                Ok(_) => {}
                // The call has a result already: ours, from a retry whose
                // first answer was lost. Nothing to do.
                Err(CallError::Api { status, body })
                    if status == reqwest::StatusCode::CONFLICT
                        && body["tool_call"]["output"] == output => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// SIGKILL the worker holding the agent, mid-stream.
    async fn crash(&mut self, story: &mut Story, out: &mut Timeline) -> Result<()> {
        let (holder, epoch, _) = self
            .lease_holder(story.agent)
            .await?
            .context("the agent is streaming but no worker holds it")?;
        let last_saved_step: i64 = self
            .client
            .query_one(
                "SELECT coalesce(max(step_seq), 0) FROM holdfast.steps WHERE agent_id = $1",
                &[&story.agent],
            )
            .await?
            .get(0);
        let worker = self
            .workers
            .iter_mut()
            .find(|w| w.name == holder)
            .with_context(|| format!("the agent is held by {holder}, not a demo worker"))?;
        worker.child.start_kill()?;
        worker.child.wait().await?;
        worker.killed = true;
        out.line(
            "crash",
            format!(
                "SIGKILL {} (pid {}) in the middle of the answer; nothing of it is saved",
                worker.name, worker.pid
            ),
        );
        story.crash = Some(Crash {
            epoch,
            at: Instant::now(),
            last_saved_step,
            recovered_after: None,
        });
        Ok(())
    }

    /// The worker holding the agent: (name, lease epoch, backend pid).
    async fn lease_holder(&self, agent: Uuid) -> Result<Option<(String, i64, Option<i32>)>> {
        let row = self
            .client
            .query_opt(
                "SELECT lease_owner, lease_epoch, lease_pid FROM holdfast.agent_overview \
                  WHERE agent_id = $1 AND state = 'running'",
                &[&agent],
            )
            .await?;
        Ok(row.map(|r| (r.get(0), r.get(1), r.get(2))))
    }

    fn log_paths(&self) -> String {
        self.workers
            .iter()
            .map(|w| w.log.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Stop everything: workers drain (SIGTERM), the API and maintenance
    /// stop, Postgres stops.
    async fn stop(&mut self, out: &mut Timeline) -> Result<()> {
        let processes = self.workers.iter_mut().chain(self.daemon.as_mut());
        for worker in processes.filter(|w| !w.killed) {
            let pid = nix::unistd::Pid::from_raw(i32::try_from(worker.pid)?);
            // Already gone is fine: the wait below reports how it ended.
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            match tokio::time::timeout(Duration::from_secs(30), worker.child.wait()).await {
                Ok(status) => {
                    status?;
                }
                Err(_) => {
                    worker.child.start_kill()?;
                    worker.child.wait().await?;
                }
            }
        }
        self.shutdown.cancel();
        let mut failure = None;
        while let Some(joined) = self.services.join_next().await {
            let (name, result) = joined?;
            if let Err(e) = result {
                failure.get_or_insert(e.context(format!("{name} failed")));
            }
        }
        if let Some(cluster) = self.cluster.take() {
            tokio::task::spawn_blocking(move || drop(cluster)).await?;
        }
        out.line(
            "stopped",
            "workers drained, machine daemon stopped, API and maintenance stopped, Postgres stopped",
        );
        failure.map_or(Ok(()), Err)
    }
}

/// A fresh, migrated demo database in `cluster`; returns its config.
async fn fresh_database(cluster: &LocalCluster) -> Result<ConnectConfig> {
    let admin = ConnectConfig::parse(&cluster.connection_string("postgres"))?;
    let (client, connection) = admin.connect().await?;
    let connection = tokio::spawn(connection);
    for statement in [
        format!("DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)"),
        format!("CREATE DATABASE {DATABASE}"),
    ] {
        client
            .batch_execute(&statement)
            .await
            .context("creating the demo database")?;
    }
    drop(client);
    let _ = connection.await;
    let database = ConnectConfig::parse(&cluster.connection_string(DATABASE))?;
    let (mut client, connection) = database.connect().await?;
    let connection = tokio::spawn(connection);
    migrate::migrate(&mut client).await?;
    drop(client);
    let _ = connection.await;
    Ok(database)
}

/// Start `holdfast worker` as a child process: this very binary, with a
/// clean environment (no API keys: the model server is local), its log in
/// the demo's directory.
fn spawn_worker(name: &'static str, connection_string: &str, dir: &Path) -> Result<ChildProcess> {
    let log = dir.join(format!("{name}.log"));
    let log_file =
        std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    let child = Command::new(std::env::current_exe()?)
        .args(["worker", "--name", name, "--poll-interval", "200ms"])
        .arg("--database-url")
        .arg(format!("{connection_string} application_name={name}"))
        .env_clear()
        .env("HOLDFAST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(log_file.try_clone()?)
        .stderr(log_file)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {name}"))?;
    let pid = child.id().context("the worker exited at once")?;
    Ok(ChildProcess {
        name,
        pid,
        child,
        log,
        killed: false,
    })
}

/// Start `holdfast machine` as a child process: its journal in
/// `home/state`, commands running in `home/work`, the token in its
/// environment (not on its command line), a heartbeat every second, and
/// short claims so that it stops quickly. Its log is in `dir`.
fn spawn_daemon(api_url: &str, token: &str, home: &Path, dir: &Path) -> Result<ChildProcess> {
    let log = dir.join(format!("{DAEMON}.log"));
    let log_file =
        std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    let mut command = Command::new(std::env::current_exe()?);
    command
        .args(["machine", "--api", api_url])
        .arg("--state-dir")
        .arg(home.join("state"))
        .arg("--work-dir")
        .arg(home.join("work"))
        .args(["--heartbeat-interval", "1s", "--claim-wait", "2s"])
        .env_clear()
        .env("HOLDFAST_LOG", "warn")
        .env("HOLDFAST_MACHINE_TOKEN", token);
    // The commands it runs get the usual search path and home.
    for name in ["PATH", "HOME"] {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    let child = command
        .stdin(Stdio::null())
        .stdout(log_file.try_clone()?)
        .stderr(log_file)
        .kill_on_drop(true)
        .spawn()
        .context("starting the machine daemon")?;
    let pid = child.id().context("the machine daemon exited at once")?;
    Ok(ChildProcess {
        name: DAEMON,
        pid,
        child,
        log,
        killed: false,
    })
}

/// Wait until `query` (one boolean, with `param` as $1) says `process`
/// is ready; fail if the process exits or a minute goes by.
async fn wait_until(
    client: &Client,
    process: &mut ChildProcess,
    what: &str,
    query: &str,
    param: &(dyn ToSql + Sync),
) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = process.child.try_wait()? {
            bail!(
                "{} exited at start ({status}); its log: {}",
                process.name,
                process.log.display()
            );
        }
        let ready: bool = client.query_one(query, &[param]).await?.get(0);
        if ready {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{} did not {what} within a minute; its log: {}",
                process.name,
                process.log.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What the demo saw and did.
struct Story {
    agent: Uuid,
    /// Per custom tool call the demo ran: (tool name, times run).
    executions: HashMap<Uuid, (String, u32)>,
    /// Model responses saved so far.
    responses: usize,
    /// The lease epoch of the model call streaming right now.
    streaming_epoch: Option<i64>,
    crash: Option<Crash>,
    done: bool,
}

impl Story {
    fn new(agent: Uuid) -> Story {
        Story {
            agent,
            executions: HashMap::new(),
            responses: 0,
            streaming_epoch: None,
            crash: None,
            done: false,
        }
    }
}

struct Crash {
    /// The killed worker's lease epoch.
    epoch: i64,
    at: Instant,
    last_saved_step: i64,
    /// From the kill to the next worker streaming the retried call.
    recovered_after: Option<Duration>,
}

/// The end of the demo, counted from the database.
struct Summary {
    model_steps: i64,
    model_requests: usize,
    cut_off: usize,
    recovered_after: Option<Duration>,
    events: i64,
    last_seq: i64,
    /// Per tool call: name, times it ran, results saved.
    tools: Vec<(String, i64, i64)>,
    /// Commands that did not finish on the machine (failed, unknown, ...).
    commands_unfinished: i64,
    interrupted: i64,
    approvals_answered: i64,
}

impl Summary {
    async fn read(client: &Client, story: &Story, fake: &FakeProvider) -> Result<Summary> {
        let agent = story.agent;
        let model_steps: i64 = client
            .query_one(
                "SELECT count(*) FROM holdfast.steps WHERE agent_id = $1 AND kind = 'model'",
                &[&agent],
            )
            .await?
            .get(0);
        let timeline = client
            .query_one(
                "SELECT count(*), coalesce(max(seq), 0), \
                        count(*) FILTER (WHERE type = 'tool_call.interrupted'), \
                        count(*) FILTER (WHERE type = 'approval.answered') \
                   FROM holdfast.events WHERE agent_id = $1",
                &[&agent],
            )
            .await?;
        // A custom tool ran as often as the demo ran it; a command as often
        // as a machine accepted it (a daemon runs what it accepts, once).
        let saved_results = client
            .query(
                "SELECT t.id, t.name, t.kind, \
                        (SELECT count(*) FROM holdfast.events e \
                          WHERE e.agent_id = t.agent_id AND e.type = 'tool_call.completed' \
                            AND e.data ->> 'tool_call_id' = t.id::text), \
                        (SELECT count(*) FROM holdfast.events e \
                          WHERE e.agent_id = t.agent_id AND e.type = 'command.accepted' \
                            AND e.data ->> 'tool_call_id' = t.id::text) \
                   FROM holdfast.tool_calls t WHERE t.agent_id = $1 ORDER BY t.created_at, t.position",
                &[&agent],
            )
            .await?;
        let tools = saved_results
            .iter()
            .map(|r| {
                let id: Uuid = r.get(0);
                let name: String = r.get(1);
                let kind: String = r.get(2);
                let ran = match kind.as_str() {
                    "command" => r.get::<_, i64>(4),
                    _ => story.executions.get(&id).map_or(0, |(_, n)| i64::from(*n)),
                };
                (name, ran, r.get::<_, i64>(3))
            })
            .collect();
        let commands_unfinished: i64 = client
            .query_one(
                "SELECT count(*) FROM holdfast.commands WHERE agent_id = $1 AND state <> 'finished'",
                &[&agent],
            )
            .await?
            .get(0);
        Ok(Summary {
            model_steps,
            model_requests: fake.request_count(),
            cut_off: fake.aborted_count(),
            recovered_after: story.crash.as_ref().and_then(|c| c.recovered_after),
            events: timeline.get(0),
            last_seq: timeline.get(1),
            interrupted: timeline.get(2),
            approvals_answered: timeline.get(3),
            tools,
            commands_unfinished,
        })
    }

    /// Every tool call ran once and has exactly one saved result, every
    /// command finished, nothing was interrupted, the one approval was
    /// answered once.
    fn each_tool_once(&self) -> bool {
        !self.tools.is_empty()
            && self
                .tools
                .iter()
                .all(|(_, ran, saved)| *ran == 1 && *saved == 1)
            && self.commands_unfinished == 0
            && self.interrupted == 0
            && self.approvals_answered == 1
    }

    fn print(&self) {
        println!();
        println!("Summary");
        println!(
            "  steps        {} model steps saved; the model was asked {} times ({} answer cut off by the crash, asked again)",
            self.model_steps, self.model_requests, self.cut_off
        );
        match self.recovered_after {
            Some(after) => println!(
                "  recovery     {:.1}s from SIGKILL to the other worker streaming the answer again",
                after.as_secs_f64()
            ),
            None => println!("  recovery     no crash happened"),
        }
        let tools: Vec<String> = self
            .tools
            .iter()
            .map(|(name, ran, _)| format!("{name} ×{ran}"))
            .collect();
        if self.each_tool_once() {
            println!(
                "  tools run    each once: {} (one approval, answered once)",
                tools.join(", ")
            );
        } else {
            let detail: Vec<String> = self
                .tools
                .iter()
                .map(|(name, ran, saved)| format!("{name}: ran {ran}, results saved {saved}"))
                .collect();
            println!(
                "  tools run    NOT each once: {}; commands not finished {}; interrupted {}; approvals answered {}",
                detail.join("; "),
                self.commands_unfinished,
                self.interrupted,
                self.approvals_answered
            );
        }
        let gaps = if self.events == self.last_seq {
            "without gaps"
        } else {
            "WITH GAPS"
        };
        println!(
            "  timeline     {} events, seq 1..{} {gaps}",
            self.events, self.last_seq
        );
    }

    fn verdict(&self) -> Result<()> {
        if !self.each_tool_once() {
            bail!("a tool ran other than once");
        }
        if self.events != self.last_seq {
            bail!("the timeline has gaps");
        }
        if self.recovered_after.is_none() {
            bail!("the worker was not killed, or no other worker took over");
        }
        Ok(())
    }
}
