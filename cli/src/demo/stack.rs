//! Start-up and shut-down: the private Postgres and the demo's database,
//! the scripted model server, the API and maintenance in this process, two
//! `holdfast server worker` processes and the `holdfast machine run`
//! daemon; and the SIGKILL of the worker holding the agent.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use holdfast_api::ApiConfig;
use holdfast_client::Client as ApiClient;
use holdfast_db::cluster::{ClusterOptions, LocalCluster};
use holdfast_db::connect::ConnectConfig;
use holdfast_db::{migrate, store};
use holdfast_fakes::FakeProvider;
use holdfast_wire::api::machines::RegisterMachineRequest;
use holdfast_wire::domain::NewModelEndpoint;
use holdfast_worker::maintenance;
use tokio::process::{Child, Command};
use tokio::task::JoinSet;
use tokio_postgres::types::ToSql;
use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::script;
use super::timeline::Timeline;

const DATABASE: &str = "holdfast_demo";
const WORKERS: [&str; 2] = ["demo-worker-1", "demo-worker-2"];
pub(super) const DAEMON: &str = "demo-machine-daemon";

/// A `holdfast server worker` or `holdfast machine run` child process.
pub(super) struct ChildProcess {
    pub(super) name: &'static str,
    pub(super) pid: u32,
    child: Child,
    log: PathBuf,
    killed: bool,
}

/// Everything the demo started.
pub(super) struct Stack {
    cluster: Option<LocalCluster>,
    /// The demo database, for the audit views and the lease holder.
    pub(super) client: Client,
    pub(super) fake: FakeProvider,
    pub(super) api: ApiClient,
    pub(super) shutdown: CancellationToken,
    services: JoinSet<(&'static str, Result<()>)>,
    workers: Vec<ChildProcess>,
    /// The machine daemon for this host, and the machine's name.
    pub(super) daemon: Option<ChildProcess>,
    pub(super) machine: String,
}

impl Stack {
    pub(super) async fn start(dir: &Path, out: &mut Timeline) -> Result<Stack> {
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
        let api = ApiClient::new(
            &api_url,
            &key.key,
            concat!("holdfast-demo/", env!("CARGO_PKG_VERSION")),
        )?;
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
            machine: crate::local_machine::host_machine_name(),
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
    /// `holdfast machine run`, with a fresh journal and working directory.
    async fn start_machine(&mut self, api_url: &str, dir: &Path, out: &mut Timeline) -> Result<()> {
        let registered = self
            .api
            .register_machine(&RegisterMachineRequest {
                name: self.machine.clone(),
                wake_url: None,
            })
            .await?;
        let (id, token) = (registered.id, registered.token.as_str());
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

    /// SIGKILL the worker named `holder`; its name and pid.
    pub(super) async fn kill_worker(&mut self, holder: &str) -> Result<(&'static str, u32)> {
        let worker = self
            .workers
            .iter_mut()
            .find(|w| w.name == holder)
            .with_context(|| format!("the agent is held by {holder}, not a demo worker"))?;
        worker.child.start_kill()?;
        worker.child.wait().await?;
        worker.killed = true;
        Ok((worker.name, worker.pid))
    }

    /// The worker holding the agent: (name, lease epoch, backend pid).
    pub(super) async fn lease_holder(
        &self,
        agent: Uuid,
    ) -> Result<Option<(String, i64, Option<i32>)>> {
        let row = self
            .client
            .query_opt(
                "SELECT lease_owner, lease_epoch, lease_pid FROM holdfast.agent_overview \
                  WHERE agent_id = $1 AND state = 'running'",
                &[&agent],
            )
            .await?;
        Ok(row.map(|r| {
            (
                r.get("lease_owner"),
                r.get("lease_epoch"),
                r.get("lease_pid"),
            )
        }))
    }

    pub(super) fn log_paths(&self) -> String {
        self.workers
            .iter()
            .map(|w| w.log.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Stop everything: workers drain (SIGTERM), the API and maintenance
    /// stop, Postgres stops.
    pub(super) async fn stop(&mut self, out: &mut Timeline) -> Result<()> {
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

/// Start `holdfast server worker` as a child process: this very binary, with a
/// clean environment (no API keys: the model server is local), its log in
/// the demo's directory.
fn spawn_worker(name: &'static str, connection_string: &str, dir: &Path) -> Result<ChildProcess> {
    let log = dir.join(format!("{name}.log"));
    let log_file =
        std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    let child = Command::new(std::env::current_exe()?)
        .args([
            "server",
            "worker",
            "--name",
            name,
            "--poll-interval",
            "200ms",
        ])
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

/// Start `holdfast machine run` as a child process: its journal in
/// `home/state`, commands running in `home/work`, the token in its
/// environment (not on its command line), a heartbeat every second, and
/// short claims so that it stops quickly. Its log is in `dir`.
fn spawn_daemon(api_url: &str, token: &str, home: &Path, dir: &Path) -> Result<ChildProcess> {
    let log = dir.join(format!("{DAEMON}.log"));
    let log_file =
        std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    let mut command = Command::new(std::env::current_exe()?);
    command
        .args(["machine", "run", "--url", api_url])
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
