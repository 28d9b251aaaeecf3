//! The chaos soak: many agents run a multi-turn script (model calls, an
//! external web_fetch, a custom tool, a command on a machine, a question,
//! webhooks) while a chaos loop SIGKILLs workers, crash-restarts Postgres
//! and kills the machine daemon. Then an invariant checker reads the
//! database and the counters: nothing lost, nothing run twice.
//!
//! `chaos_retention` runs the same soak (smaller) while the maintenance
//! process drops old event partitions of another project every 300 ms:
//! nothing of the soak's agents is lost while partitions are detached and
//! dropped under its load.
//!
//! `chaos_short` runs in the default suite; the full soak is
//! `cargo test --release -p holdfast-tests --test chaos -- --ignored soak`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use holdfast_db::connect::ConnectConfig;
use holdfast_db::store;
use holdfast_fakes::{FakeProvider, Reply};
use holdfast_tests::api_sse::SseReader;
use holdfast_tests::counting_http::CountingServer;
use holdfast_tests::failover::FailoverPair;
use holdfast_tests::process::HoldfastProcess;
use holdfast_tests::scenario::{spawn_api, spawn_worker};
use holdfast_tests::webhook_receiver::{assert_every_event_received, hook, Behaviour, Receiver};
use holdfast_tests::{PrivateCluster, ScratchDir};
use rand::Rng;
use serde_json::{json, Value};
use tokio_postgres::Client;
use uuid::Uuid;

/// How hard to push.
#[derive(Clone, Copy, Debug)]
struct Plan {
    agents: usize,
    turns: usize,
    workers: usize,
    /// Worker kills the run must have survived (the chaos loop kills every
    /// 1–3 s until the work is done; Postgres restarts are spread over them).
    min_kills: usize,
    /// Delay between streamed chunks of every model reply, so the work
    /// outlasts the chaos.
    trickle: Duration,
    postgres_restarts: usize,
    /// Failovers instead of restarts: Postgres runs as a primary and a
    /// synchronous standby, and at each of these points the primary is
    /// SIGKILLed and the standby promoted (a new standby is then built
    /// where the primary was, for the next one).
    failovers: usize,
    deadline: Duration,
    /// Seed old weeks of another project's history during the run, for the
    /// maintenance process's retention pass to drop.
    retention: bool,
}

const TOOLS_PER_TURN: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chaos_short() {
    run(Plan {
        agents: 8,
        turns: 2,
        workers: 2,
        min_kills: 2,
        postgres_restarts: 1,
        failovers: 0,
        trickle: Duration::from_millis(120),
        deadline: Duration::from_secs(240),
        retention: false,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chaos_retention() {
    run(Plan {
        agents: 6,
        turns: 2,
        workers: 2,
        min_kills: 2,
        postgres_restarts: 1,
        failovers: 0,
        trickle: Duration::from_millis(120),
        deadline: Duration::from_secs(240),
        retention: true,
    })
    .await;
}

/// The short soak on a primary and a synchronous standby: the primary is
/// SIGKILLed mid-run and the standby promoted; every process reconnects to
/// it by the multi-host URL alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chaos_failover() {
    run(Plan {
        agents: 4,
        turns: 2,
        workers: 2,
        min_kills: 2,
        postgres_restarts: 0,
        failovers: 1,
        trickle: Duration::from_millis(120),
        deadline: Duration::from_secs(240),
        retention: false,
    })
    .await;
}

/// The failover soak: `HOLDFAST_SOAK_FAILOVERS` failovers (10 by default)
/// under `HOLDFAST_SOAK_AGENTS` agents (50), with the time from each kill
/// to the first step committed on the new primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "the failover soak: cargo test --release -p holdfast-tests --test chaos -- --ignored failover_soak"]
async fn failover_soak() {
    let env = |name: &str, default: usize| {
        std::env::var(name)
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(default)
    };
    let failovers = env("HOLDFAST_SOAK_FAILOVERS", 10);
    run(Plan {
        agents: env("HOLDFAST_SOAK_AGENTS", 50),
        turns: 5,
        workers: 3,
        min_kills: 2 * failovers + 2,
        postgres_restarts: 0,
        failovers,
        trickle: Duration::from_millis(250),
        deadline: Duration::from_secs(1800),
        retention: false,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "the full soak: cargo test --release -p holdfast-tests --test chaos -- --ignored soak"]
async fn soak() {
    let agents = std::env::var("HOLDFAST_SOAK_AGENTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200);
    run(Plan {
        agents,
        turns: 5,
        workers: 3,
        min_kills: 30,
        postgres_restarts: 2,
        failovers: 0,
        trickle: Duration::from_millis(250),
        deadline: Duration::from_secs(1800),
        retention: false,
    })
    .await;
}

/// The model's script, computed from each request: a turn is web_fetch,
/// then the custom tool `confirm`, then `run_command` (which appends the
/// turn's marker to the `markers` file in the daemon's work directory),
/// then `ask_user`, then a final text.
fn script(site: String, trickle: Duration) -> impl Fn(&Value) -> Reply + Send + Sync + 'static {
    move |body: &Value| reply_for(&site, body).trickle(trickle)
}

fn reply_for(site: &str, body: &Value) -> Reply {
    {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let blocks = |m: &Value| m["content"].as_array().cloned().unwrap_or_default();
        let results = messages
            .iter()
            .flat_map(blocks)
            .filter(|b| b["type"] == "tool_result")
            .count();
        let marker = messages
            .iter()
            .flat_map(blocks)
            .filter_map(|b| b["text"].as_str().map(str::to_owned))
            .rfind(|t| t.starts_with("agent="))
            .unwrap_or_default();
        let last_is_input = messages
            .last()
            .map(|m| blocks(m).iter().any(|b| b["type"] == "text"))
            .unwrap_or(false);
        let path = marker.replace(['=', ' '], "-");
        if last_is_input {
            return Reply::tool_calls(vec![(
                "web_fetch",
                json!({"url": format!("{site}/page/{path}")}),
            )]);
        }
        match results % TOOLS_PER_TURN {
            1 => Reply::tool_calls(vec![("confirm", json!({"marker": marker}))]),
            2 => Reply::tool_calls(vec![(
                "run_command",
                json!({"command": format!("echo {path} >> markers; sleep 0.2; echo ran {path}")}),
            )]),
            3 => Reply::tool_calls(vec![(
                "ask_user",
                json!({"question": format!("continue {marker}?")}),
            )]),
            _ => Reply::text(format!("done {marker}")),
        }
    }
}

/// A client that survives Postgres restarts: reconnects on each use after
/// an error.
struct Db {
    config: ConnectConfig,
    client: tokio::sync::Mutex<Option<Client>>,
}

impl Db {
    async fn with<T, F, Fut>(&self, f: F) -> Option<T>
    where
        F: FnOnce(Client) -> Fut,
        Fut: std::future::Future<Output = (Client, Result<T, holdfast_db::Error>)>,
    {
        let mut slot = self.client.lock().await;
        let client = match slot.take() {
            Some(c) if !c.is_closed() => c,
            _ => {
                let (client, connection) = self.config.connect().await.ok()?;
                tokio::spawn(connection);
                client
            }
        };
        let (client, result) = f(client).await;
        *slot = Some(client);
        result.ok()
    }
}

/// Where the soak's Postgres runs: one cluster (crash-restarted), or a
/// primary with a synchronous standby (failed over).
enum Postgres {
    Single(PrivateCluster),
    Pair(tokio::sync::Mutex<FailoverPair>),
}

impl Postgres {
    async fn config(&self) -> ConnectConfig {
        match self {
            Postgres::Single(cluster) => cluster.config(),
            Postgres::Pair(pair) => pair.lock().await.config(),
        }
    }
}

/// SIGKILL the primary and promote the standby; returns the time from the
/// kill to the first step committed on the new primary (None when none
/// came within a minute: the soak's work had ended; the driver's deadline
/// and the invariants catch work that stopped). Then a new synchronous
/// standby is built for the next failover.
async fn fail_over(pair: &mut FailoverPair) -> Option<Duration> {
    pair.kill_primary();
    let killed_at = Instant::now();
    // Synchronous replication: every step the primary acknowledged is in
    // the standby's WAL; once replayed, its count is the baseline.
    let baseline = pair.replayed_count("holdfast.steps").await;
    pair.promote_standby().await;
    let took = pair
        .wait_for_more_rows("holdfast.steps", baseline, Duration::from_secs(60))
        .await
        .map(|_| killed_at.elapsed());
    pair.build_standby().await;
    took
}

#[derive(Default)]
struct Chaos {
    kills: AtomicUsize,
    restarts: AtomicUsize,
    /// Per failover: from the primary's SIGKILL to the first step committed
    /// on the new primary (None: no step came after it).
    failovers: Mutex<Vec<Option<Duration>>>,
    daemon_kills: AtomicUsize,
    recoveries: Mutex<Vec<Duration>>,
}

async fn run(plan: Plan) {
    let started = Instant::now();
    let postgres = Arc::new(if plan.failovers > 0 {
        Postgres::Pair(tokio::sync::Mutex::new(FailoverPair::start().await))
    } else {
        Postgres::Single(PrivateCluster::start().await)
    });
    let config = postgres.config().await;
    let url = config.to_connection_string();
    let fake = FakeProvider::start().await;
    let site = CountingServer::start().await;
    fake.set_responder(script(site.url(""), plan.trickle));
    let receiver = Receiver::start(Behaviour::Accept).await;

    let (setup, connection) = config.connect().await.unwrap();
    tokio::spawn(connection);
    let project = store::ensure_project(&setup, "chaos").await.unwrap();
    let endpoint = hook(&setup, project, &receiver, json!(["*"])).await;
    let machine = store::register_machine(&setup, project, "chaos-box", None)
        .await
        .unwrap();
    let agent_config = json!({
        "model": {"provider": "anthropic", "name": "claude-test"},
        "tools": [
            {"type": "web_fetch"},
            {"type": "custom", "name": "confirm", "input_schema": {"type": "object"}},
            {"type": "run_command", "machine": machine.machine_id},
            {"type": "ask_user"}
        ]
    });
    let mut agents = Vec::new();
    for k in 0..plan.agents {
        let agent = store::create_agent(&setup, project, &agent_config)
            .await
            .unwrap();
        agents.push((k, agent));
    }

    // The project whose old history retention drops during the run.
    let archive = store::ensure_project(&setup, "chaos-archive")
        .await
        .unwrap();
    store::set_project_retention(&setup, "chaos-archive", Some(Duration::from_secs(86_400)))
        .await
        .unwrap();
    let maintenance_env = [
        ("HOLDFAST_MAINTENANCE_INTERVAL", "200ms"),
        ("HOLDFAST_EGRESS_ALLOW", "webhook=127.0.0.1"),
        ("HOLDFAST_WEBHOOK_BACKOFF_BASE", "100ms"),
        ("HOLDFAST_WEBHOOK_BACKOFF_MAX", "1s"),
        (
            "HOLDFAST_RETENTION_INTERVAL",
            if plan.retention { "300ms" } else { "1h" },
        ),
    ];
    let _maintenance = holdfast_tests::webhook_receiver::spawn_maintenance(&url, &maintenance_env);
    // The machine daemon reaches Holdfast over HTTP, as on a real host.
    let (_api, api_url) = spawn_api("chaos-api", &config).await;
    let machine_dir = MachineDir::new();
    let spawn_daemon = |n: usize| {
        HoldfastProcess::spawn(
            &format!("chaos-daemon{n}"),
            &["machine", "run"],
            &[
                ("HOLDFAST_URL", api_url.clone()),
                ("HOLDFAST_MACHINE_TOKEN", machine.token.clone()),
                ("HOLDFAST_MACHINE_STATE_DIR", machine_dir.state()),
                ("HOLDFAST_MACHINE_WORK_DIR", machine_dir.work()),
                ("HOLDFAST_MACHINE_HEARTBEAT_INTERVAL", "500ms".into()),
                ("HOLDFAST_MACHINE_CLAIM_WAIT", "2s".into()),
                ("HOLDFAST_MACHINE_CONCURRENCY", "64".into()),
            ],
        )
    };
    let daemon = Arc::new(Mutex::new(spawn_daemon(0)));
    let done = Arc::new(AtomicBool::new(false));
    // Across failovers, one agent's stream is followed over the API,
    // resumed with Last-Event-ID after every break.
    let follower = if plan.failovers > 0 {
        let key = store::create_api_key(&setup, "chaos").await.unwrap().key;
        let followed = agents[0].1;
        Some((
            followed,
            tokio::spawn(follow_stream(api_url.clone(), key, followed, done.clone())),
        ))
    } else {
        None
    };
    let worker_env = [
        ("HOLDFAST_EGRESS_ALLOW", "web_fetch=127.0.0.1"),
        ("HOLDFAST_WORKER_CONCURRENCY", "32"),
        ("HOLDFAST_MODEL_BACKOFF_BASE", "50ms"),
        ("HOLDFAST_MODEL_BACKOFF_MAX", "500ms"),
    ];
    let next_worker = AtomicUsize::new(0);
    let spawn = || {
        let n = next_worker.fetch_add(1, Ordering::SeqCst);
        spawn_worker(&format!("chaos-w{n}"), &config, &fake, &worker_env)
    };
    let workers: Arc<Mutex<Vec<HoldfastProcess>>> =
        Arc::new(Mutex::new((0..plan.workers).map(|_| spawn()).collect()));

    // Turn 1 for everyone; the driver sends later turns and answers tools.
    for (k, agent) in &agents {
        store::create_input(
            &setup,
            *agent,
            &json!(format!("agent={k} turn=1")),
            Some(&format!("a{k}-t1")),
        )
        .await
        .unwrap();
    }
    drop(setup);

    let db = Arc::new(Db {
        config: config.clone(),
        client: tokio::sync::Mutex::new(None),
    });
    let chaos = Arc::new(Chaos::default());

    // The chaos loop: SIGKILL a random worker every 1–3 s (and start a
    // replacement), crash-restart Postgres at spread-out kills, and SIGKILL
    // the machine daemon once (restarted on its journal).
    let chaos_task = {
        let (workers, chaos, done, postgres, db, daemon) = (
            workers.clone(),
            chaos.clone(),
            done.clone(),
            postgres.clone(),
            db.clone(),
            daemon.clone(),
        );
        let outages = plan.postgres_restarts + plan.failovers;
        let restart_at: Vec<usize> = (1..=outages)
            .map(|i| i * plan.min_kills / (outages + 1))
            .collect();
        let daemon_kill_at = (plan.min_kills * 3 / 4).max(1);
        let spawn_daemon = &spawn_daemon;
        let next_worker = &next_worker;
        let (config, fake) = (config.clone(), &fake);
        async move {
            loop {
                let pause = rand::rng().random_range(1000..3000);
                tokio::time::sleep(Duration::from_millis(pause)).await;
                let kills = chaos.kills.load(Ordering::SeqCst);
                if done.load(Ordering::SeqCst) {
                    break;
                }
                let victim = {
                    let mut list = workers.lock().unwrap();
                    let i = rand::rng().random_range(0..list.len());
                    list.remove(i)
                };
                let held: Vec<Uuid> = db
                    .with(|c| async {
                        let r = c
                            .query(
                                "SELECT id FROM holdfast.agents WHERE lease_owner = $1",
                                &[&victim.name],
                            )
                            .await
                            .map(|rows| rows.iter().map(|r| r.get(0)).collect())
                            .map_err(holdfast_db::Error::from);
                        (c, r)
                    })
                    .await
                    .unwrap_or_default();
                victim.signal("KILL");
                let killed_at = Instant::now();
                chaos.kills.fetch_add(1, Ordering::SeqCst);
                let n = next_worker.fetch_add(1, Ordering::SeqCst);
                workers.lock().unwrap().push(spawn_worker(
                    &format!("chaos-w{n}"),
                    &config,
                    fake,
                    &worker_env,
                ));
                let name = victim.name.clone();
                drop(victim);
                if !held.is_empty() {
                    let (db, chaos) = (db.clone(), chaos.clone());
                    tokio::spawn(async move {
                        loop {
                            let still: Option<i64> = db
                                .with(|c| async {
                                    let r = c
                                        .query_one(
                                            "SELECT count(*) FROM holdfast.agents WHERE lease_owner = $1",
                                            &[&name],
                                        )
                                        .await
                                        .map(|r| r.get(0))
                                        .map_err(holdfast_db::Error::from);
                                    (c, r)
                                })
                                .await;
                            if still == Some(0) {
                                chaos.recoveries.lock().unwrap().push(killed_at.elapsed());
                                return;
                            }
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    });
                }
                if kills + 1 == daemon_kill_at {
                    let mut daemon = daemon.lock().unwrap();
                    daemon.signal("KILL");
                    *daemon = spawn_daemon(1);
                    chaos.daemon_kills.fetch_add(1, Ordering::SeqCst);
                }
                if restart_at.contains(&(kills + 1)) {
                    match &*postgres {
                        Postgres::Single(cluster) => {
                            tokio::task::block_in_place(|| {
                                cluster.cluster.crash().expect("crash postgres");
                                cluster.cluster.restart().expect("restart postgres");
                            });
                            chaos.restarts.fetch_add(1, Ordering::SeqCst);
                        }
                        Postgres::Pair(pair) => {
                            let mut pair = pair.lock().await;
                            let took = fail_over(&mut pair).await;
                            chaos.failovers.lock().unwrap().push(took);
                        }
                    }
                }
            }
        }
    };

    // The driver: answers custom tools and questions, sends the next turn.
    // The work is fixed and the chaos paced by the clock, so a run whose
    // work ends early would leave kills and outages of the plan undone (a
    // 10-failover soak once ended after 8): each agent's last turn is held
    // back until the chaos has done them all, and then runs after the last
    // outage.
    let driver_task = {
        let (db, done, agents, chaos) = (db.clone(), done.clone(), agents.clone(), chaos.clone());
        async move {
            let deadline = Instant::now() + plan.deadline;
            let outages = plan.postgres_restarts + plan.failovers;
            loop {
                if Instant::now() > deadline {
                    panic!("the soak did not finish within {:?}", plan.deadline);
                }
                let chaos_done = chaos.kills.load(Ordering::SeqCst) >= plan.min_kills
                    && chaos.restarts.load(Ordering::SeqCst)
                        + chaos.failovers.lock().unwrap().len()
                        >= outages;
                let turns_now = if plan.turns > 1 && !chaos_done {
                    plan.turns - 1
                } else {
                    plan.turns
                };
                drive_once(&db, &agents, turns_now).await;
                let finished: Option<i64> = db
                    .with(|c| async {
                        let r = c
                            .query_one(
                                "SELECT count(*) FROM holdfast.events WHERE type = 'turn.completed'",
                                &[],
                            )
                            .await
                            .map(|r| r.get(0))
                            .map_err(holdfast_db::Error::from);
                        (c, r)
                    })
                    .await;
                if finished == Some((agents.len() * plan.turns) as i64) {
                    done.store(true, Ordering::SeqCst);
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    // Old weeks of the archive project, one every 700 ms, each a partition
    // of its own with a finished agent's 200 events. Counts the weeks that
    // were gone (dropped by the maintenance process) before the run ended.
    let seeding_task = {
        let (done, seeder) = (
            done.clone(),
            Db {
                config: config.clone(),
                client: tokio::sync::Mutex::new(None),
            },
        );
        async move {
            let mut dropped_during_run = 0;
            let mut seeded: Vec<String> = Vec::new();
            let mut weeks_back = 3;
            while plan.retention && !done.load(Ordering::SeqCst) {
                let seed = seed_old_week(archive, weeks_back);
                let name = seeder
                    .with(|c| async {
                        let r = c
                            .query_one(&seed, &[])
                            .await
                            .map(|r| r.get::<_, String>(0))
                            .map_err(holdfast_db::Error::from);
                        (c, r)
                    })
                    .await;
                seeded.extend(name);
                weeks_back += 1;
                tokio::time::sleep(Duration::from_millis(700)).await;
            }
            for name in &seeded {
                let gone = seeder
                    .with(|c| async {
                        let r = c
                            .query_one("SELECT to_regclass('holdfast.' || $1) IS NULL", &[name])
                            .await
                            .map(|r| r.get::<_, bool>(0))
                            .map_err(holdfast_db::Error::from);
                        (c, r)
                    })
                    .await;
                if gone == Some(true) {
                    dropped_during_run += 1;
                }
            }
            (seeded.len(), dropped_during_run)
        }
    };
    let ((), (), (weeks_seeded, weeks_dropped)) =
        tokio::join!(chaos_task, driver_task, seeding_task);
    let elapsed = started.elapsed();

    // Let maintenance deliver the webhooks of the last events and settle.
    let (client, connection) = config.connect().await.unwrap();
    tokio::spawn(connection);
    holdfast_tests::wait_until(
        Duration::from_secs(120),
        "every webhook delivered",
        || async {
            client
                .query_one(
                    "SELECT count(*) FROM holdfast.webhook_deliveries WHERE status <> 'delivered'",
                    &[],
                )
                .await
                .map(|r| r.get::<_, i64>(0) == 0)
                .unwrap_or(false)
        },
    )
    .await;

    let mut violations = check_invariants(&client, &site, &machine_dir, &agents, plan.turns).await;
    if let Some((followed, follower)) = follower {
        let (streamed, reconnects) = follower.await.unwrap();
        let saved: Vec<i64> = client
            .query(
                "SELECT seq FROM holdfast.events WHERE agent_id = $1 ORDER BY seq",
                &[&followed],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        println!("  stream reconnects   {reconnects}");
        if streamed != saved {
            violations.push(format!(
                "the stream of {followed} over {reconnects} reconnects gave {} events, not the {} saved, once each in order",
                streamed.len(),
                saved.len()
            ));
        }
    }
    if plan.retention {
        println!("  old weeks seeded    {weeks_seeded}");
        println!("  dropped during run  {weeks_dropped}");
        assert!(
            weeks_dropped >= 1,
            "retention dropped a partition while the soak ran ({weeks_seeded} seeded)"
        );
    }
    assert_every_event_received(&client, endpoint, &receiver).await;

    let steps: i64 = client
        .query_one("SELECT count(*) FROM holdfast.steps", &[])
        .await
        .unwrap()
        .get(0);
    let recoveries = chaos.recoveries.lock().unwrap().clone();
    let max_recovery = recoveries.iter().max().copied().unwrap_or_default();
    println!();
    println!("chaos summary");
    println!("  agents              {}", agents.len());
    println!("  turns per agent     {}", plan.turns);
    println!("  steps committed     {steps}");
    println!(
        "  worker kills        {}",
        chaos.kills.load(Ordering::SeqCst)
    );
    println!(
        "  postgres restarts   {}",
        chaos.restarts.load(Ordering::SeqCst)
    );
    println!(
        "  daemon kills        {}",
        chaos.daemon_kills.load(Ordering::SeqCst)
    );
    println!("  commands run        {}", machine_dir.markers().len());
    println!("  recoveries measured {}", recoveries.len());
    println!("  max recovery        {max_recovery:?}");
    println!("  webhook deliveries  {}", receiver.count());
    let failovers = chaos.failovers.lock().unwrap().clone();
    if failovers.iter().any(Option::is_some) {
        let mut sorted: Vec<Duration> = failovers.iter().flatten().copied().collect();
        sorted.sort();
        let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
        println!(
            "  failovers           {} ({} followed by a step)",
            failovers.len(),
            sorted.len()
        );
        println!(
            "  kill to first step  p50 {:?}, p99 {:?}, max {:?}",
            at(0.5),
            at(0.99),
            sorted[sorted.len() - 1]
        );
    }
    println!("  wall time           {elapsed:?}");
    println!("  violations          {}", violations.len());
    for v in &violations {
        println!("    - {v}");
    }
    assert!(
        violations.is_empty(),
        "{} invariant violations",
        violations.len()
    );
    assert!(
        chaos.kills.load(Ordering::SeqCst) >= plan.min_kills,
        "the work outlasted at least {} worker kills",
        plan.min_kills
    );
    assert_eq!(
        chaos.restarts.load(Ordering::SeqCst),
        plan.postgres_restarts
    );
    assert_eq!(failovers.len(), plan.failovers);
    assert!(
        plan.failovers == 0 || failovers.iter().any(Option::is_some),
        "a step was committed on a new primary"
    );
    assert_eq!(chaos.daemon_kills.load(Ordering::SeqCst), 1);
}

/// Follow `agent`'s event stream through the API until `done` and the
/// stream is quiet, reconnecting with `Last-Event-ID` after every end or
/// refusal (the API's database fails over under it). Returns the seqs of
/// the saved events received, in order, and the number of reconnects.
async fn follow_stream(
    api_url: String,
    key: String,
    agent: Uuid,
    done: Arc<AtomicBool>,
) -> (Vec<i64>, usize) {
    let http = holdfast_outbound::client_builder().build().unwrap();
    let mut seqs: Vec<i64> = Vec::new();
    let mut reconnects = 0;
    loop {
        let finished = done.load(Ordering::SeqCst);
        let mut request = http
            .get(format!("{api_url}/v1/agents/{agent}/stream"))
            .bearer_auth(&key);
        if let Some(last) = seqs.last() {
            request = request.header("Last-Event-ID", last.to_string());
        }
        match request.send().await {
            Ok(response) if response.status() == 200 => {
                let mut reader = SseReader::new(response);
                // Once the work is done, a quiet second ends the catch-up.
                let quiet = if finished {
                    Duration::from_secs(1)
                } else {
                    Duration::from_secs(3)
                };
                while let Ok(Some(event)) =
                    tokio::time::timeout(quiet, reader.next_event(Duration::from_secs(3600))).await
                {
                    seqs.extend(event.seq());
                }
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
        if finished {
            return (seqs, reconnects);
        }
        reconnects += 1;
    }
}

/// SQL that writes one week of a finished agent's history, `weeks_back`
/// weeks ago, into a partition of its own (created for it, as maintenance
/// creates upcoming ones); returns the partition's name. One statement, so
/// a Postgres restart mid-way leaves nothing half-written. The events go
/// through append_event (the one appending path); the agent never ran, so
/// it is idle with no open turn: all of it may go.
fn seed_old_week(project: Uuid, weeks_back: i64) -> String {
    format!(
        "WITH clock AS (
             SELECT set_config('holdfast.clock_offset', '-{days} days', true)
         ), part AS (
             SELECT holdfast.ensure_event_partitions(holdfast.now(), holdfast.now() + interval '1 hour')
               FROM clock
         ), agent AS (
             SELECT holdfast.create_agent('{project}', '{config}'::jsonb) AS id FROM part
         ), appended AS (
             SELECT count(holdfast.append_event(agent.id, 'input.received', '{{}}'))
               FROM agent, generate_series(1, 200)
         )
         SELECT 'events_w' || to_char(date_trunc('week', holdfast.now() AT TIME ZONE 'UTC'), 'YYYYMMDD')
           FROM appended",
        days = weeks_back * 7,
        config = holdfast_tests::default_config(),
    )
}

/// The machine daemon's directories: its journal (`state`) and where its
/// commands run (`work`, holding the `markers` file they append to).
struct MachineDir {
    root: ScratchDir,
}

impl MachineDir {
    fn new() -> MachineDir {
        let root = ScratchDir::new("chaos");
        std::fs::create_dir_all(root.join("work")).unwrap();
        MachineDir { root }
    }

    fn state(&self) -> String {
        self.root.join("state").display().to_string()
    }

    fn work(&self) -> String {
        self.root.join("work").display().to_string()
    }

    /// One line per command that ran, in order.
    fn markers(&self) -> Vec<String> {
        std::fs::read_to_string(self.root.join("work").join("markers"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// One pass of the driver; errors (Postgres restarting) are retried on the
/// next pass.
async fn drive_once(db: &Db, agents: &[(usize, Uuid)], turns: usize) {
    db.with(|c| async {
        let r = async {
            let waiting = c
                .query(
                    "SELECT id FROM holdfast.tool_calls WHERE status = 'waiting' AND kind = 'custom'",
                    &[],
                )
                .await?;
            for row in waiting {
                let call: Uuid = row.get(0);
                // First result wins: a repeat after a lost reply is 409, fine.
                let _ = store::submit_tool_result(&c, call, &json!("confirmed"), false).await;
            }
            let questions = c
                .query("SELECT id FROM holdfast.questions WHERE status = 'pending'", &[])
                .await?;
            for row in questions {
                let question: Uuid = row.get(0);
                let _ = store::answer_question(&c, question, "yes", "driver").await;
            }
            let idle = c
                .query(
                    "SELECT a.id, (SELECT count(*) FROM holdfast.inputs i WHERE i.agent_id = a.id)
                       FROM holdfast.agents a WHERE a.state = 'idle'",
                    &[],
                )
                .await?;
            let index: HashMap<Uuid, usize> = agents.iter().map(|(k, a)| (*a, *k)).collect();
            for row in idle {
                let agent: Uuid = row.get(0);
                let inputs: i64 = row.get(1);
                let (Some(k), true) = (index.get(&agent), (inputs as usize) < turns) else {
                    continue;
                };
                let turn = inputs + 1;
                // The idempotency key makes a resend after a lost reply safe.
                store::create_input(
                    &c,
                    agent,
                    &json!(format!("agent={k} turn={turn}")),
                    Some(&format!("a{k}-t{turn}")),
                )
                .await?;
            }
            Ok::<(), holdfast_db::Error>(())
        }
        .await;
        (c, r)
    })
    .await;
}

/// Every invariant of "nothing lost, nothing run twice", read from the
/// database and the counters. Returns the violations.
async fn check_invariants(
    client: &Client,
    site: &CountingServer,
    machine_dir: &MachineDir,
    agents: &[(usize, Uuid)],
    turns: usize,
) -> Vec<String> {
    // Every agent in the database, not only the driven ones: no lease left
    // held and none stuck anywhere.
    let every_agent: Vec<Uuid> = client
        .query("SELECT id FROM holdfast.agents", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    let mut violations = holdfast_tests::invariants::violations_at_rest(client, &every_agent).await;
    let markers = machine_dir.markers();
    for (k, agent) in agents {
        // What the database recorded, counted by the audit view the demo's
        // verdict reads too (sql/schema/operations.sql).
        let audit = client
            .query_one(
                "SELECT turns_completed, turns_failed, turns_cancelled, inputs, inputs_in_history,
                        model_responses,
                        tool_calls_completed + tool_calls_interrupted AS tool_call_ends
                   FROM holdfast.agent_audit WHERE agent_id = $1",
                &[agent],
            )
            .await
            .unwrap();
        let count = |column: &str| audit.get::<_, i64>(column) as usize;
        if count("turns_completed") != turns {
            violations.push(format!(
                "agent {k}: {} turns completed, want {turns}",
                count("turns_completed")
            ));
        }
        if count("turns_failed") + count("turns_cancelled") != 0 {
            violations.push(format!("agent {k}: a turn failed or was cancelled"));
        }
        // Inputs: each delivered once (consumed once into history).
        let (inputs, consumed) = (count("inputs"), count("inputs_in_history"));
        if inputs != turns || consumed != inputs {
            violations.push(format!(
                "agent {k}: {inputs} inputs, {consumed} in history, want {turns}"
            ));
        }
        let responses = count("model_responses");
        if responses != turns * (TOOLS_PER_TURN + 1) {
            violations.push(format!(
                "agent {k}: {responses} model responses, want {}",
                turns * (TOOLS_PER_TURN + 1)
            ));
        }
        // Each tool call ends exactly once.
        let ends = count("tool_call_ends");
        if ends != turns * TOOLS_PER_TURN {
            violations.push(format!(
                "agent {k}: {ends} tool call results, want {}",
                turns * TOOLS_PER_TURN
            ));
        }
        // External side effects: at most once each; exactly once when no
        // crash interrupted the call.
        let fetches = client
            .query(
                "SELECT input ->> 'url', output = to_jsonb('Tool call was interrupted; its external outcome is unknown.'::text)
                   FROM holdfast.tool_calls WHERE agent_id = $1 AND name = 'web_fetch'",
                &[agent],
            )
            .await
            .unwrap();
        for row in fetches {
            let url: String = row.get(0);
            let interrupted: bool = row.get(1);
            let path = url
                .splitn(4, '/')
                .nth(3)
                .map(|p| format!("/{p}"))
                .unwrap_or_default();
            let hits = site.hits(&path);
            if hits > 1 || (!interrupted && hits != 1) {
                violations.push(format!(
                    "agent {k}: {path} fetched {hits} times (interrupted: {interrupted})"
                ));
            }
        }
        // Commands: each ran at most once; exactly once when its result
        // was seen (a daemon killed while it ran reports it as unknown).
        let commands = client
            .query(
                "SELECT command, state FROM holdfast.commands WHERE agent_id = $1",
                &[agent],
            )
            .await
            .unwrap();
        if commands.len() != turns {
            violations.push(format!(
                "agent {k}: {} commands, want {turns}",
                commands.len()
            ));
        }
        for row in commands {
            let command: String = row.get(0);
            let state: String = row.get(1);
            let marker = command
                .strip_prefix("echo ")
                .and_then(|c| c.split(' ').next())
                .unwrap_or_default();
            let runs = markers.iter().filter(|m| *m == marker).count();
            let consistent = match state.as_str() {
                "finished" => runs == 1,
                "unknown" => runs <= 1,
                _ => false,
            };
            if !consistent {
                violations.push(format!(
                    "agent {k}: command {marker} ran {runs} times, state {state}"
                ));
            }
        }
    }
    violations
}
