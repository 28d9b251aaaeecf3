//! `recovery`: an agent's model call hangs at the fake provider; the worker
//! holding it is SIGKILLed, and the time until another worker's model
//! request for that agent arrives is one sample. Repeated on the same agent
//! (each round's new holder is the next round's victim; a replacement
//! worker is started between rounds, untimed).
//!
//! SIGKILL closes the worker's sessions: `holdfast maintenance` (default
//! 1 s interval) sees the claiming backend gone and releases the agent at
//! once. SIGSTOP keeps the sessions open (a partition, a stalled VM): the
//! lease must expire first, so that round runs with a short
//! `HOLDFAST_LEASE_TTL`, and the stopped worker is continued afterwards.
//! Each round first waits a random 0–1 s, so faults land at random points
//! of the maintenance cycle.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use holdfast_db::store;
use holdfast_fakes::{FakeProvider, Reply};
use rand::Rng;
use serde_json::json;
use tokio_postgres::Client;
use uuid::Uuid;

use super::{agent_config, target};
use crate::fleet::Fleet;
use crate::postgres::connect_to;
use crate::processes::Proc;
use crate::stats::Samples;
use crate::{Bench, Outcome};

const WAIT_LIMIT: Duration = Duration::from_secs(25);
const MAINTENANCE_INTERVAL_MS: u64 = 1000;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Fault {
    Kill,
    Stop,
}

pub async fn run(bench: &Bench) -> Result<Outcome> {
    let kills = bench.pick(bench.opts.kill_samples, 50, 3);
    let stops = bench.pick(bench.opts.stop_samples, 20, 2);
    let workers = bench.pick(bench.opts.workers, 2, 2).max(2);
    let ttl_ms = bench.pick(bench.opts.stop_lease_ttl_ms, 2000, 2000);
    let renew_ms = (ttl_ms / 4).max(1);

    let kill = rounds(
        bench,
        "bench_recovery_kill",
        Fault::Kill,
        kills,
        workers,
        &[],
    )
    .await?;
    let stop_env = [
        ("HOLDFAST_LEASE_TTL", format!("{ttl_ms}ms")),
        ("HOLDFAST_LEASE_RENEW_INTERVAL", format!("{renew_ms}ms")),
    ];
    let stop = rounds(
        bench,
        "bench_recovery_stop",
        Fault::Stop,
        stops,
        workers,
        &stop_env,
    )
    .await?;

    let mut metrics = json!({
        "sigkill": kill.summary(),
        "sigstop": stop.summary(),
    });
    metrics["target"] = target("SIGKILL recovery p99 < 3 s", kill.p99() < 3000.0);
    Ok(Outcome {
        params: json!({
            "kill_rounds": kills,
            "stop_rounds": stops,
            "workers": workers,
            "maintenance_interval_ms": MAINTENANCE_INTERVAL_MS,
            "kill_lease_ttl": "60s (default)",
            "stop_lease_ttl_ms": ttl_ms,
            "stop_lease_renew_interval_ms": renew_ms,
            "recovered": "another worker's model request for the agent arrives at the fake provider",
        }),
        metrics,
        baseline: json!({
            "sigkill_floor_ms": "0..maintenance interval (the next maintenance tick) + claim",
            "sigstop_floor_ms": format!(
                "{}..{} (lease TTL minus the time since the last renewal, plus up to one maintenance interval)",
                ttl_ms - renew_ms,
                ttl_ms + MAINTENANCE_INTERVAL_MS
            ),
        }),
    })
}

/// `n` rounds of `fault` in a fresh database `db`; the recovery samples.
async fn rounds(
    bench: &Bench,
    db: &str,
    fault: Fault,
    n: usize,
    workers: usize,
    worker_env: &[(&str, String)],
) -> Result<Samples> {
    let config = bench.fresh_database(db).await?;
    let admin = connect_to(&config).await?;
    let fake = FakeProvider::start().await;
    fake.set_default(Reply::hang());
    let fleet = Fleet::new(bench, db, Some(&fake));
    let maintenance = fleet.maintenance(&admin, &format!("{db}-maint")).await?;
    let mut spawned = 0;
    let mut procs: Vec<Proc> = Vec::new();
    for _ in 0..workers {
        let name = format!("{db}-w{spawned}");
        spawned += 1;
        procs.push(fleet.worker(&admin, &name, 4, worker_env).await?);
    }

    let project = store::ensure_project(&admin, "bench").await?;
    let agent = store::create_agent(&admin, project, &agent_config()).await?;
    store::create_input(&admin, agent, &json!("Hang, please."), None).await?;
    wait_requests(&fake, 1).await?;

    let mut samples = Samples::new();
    for round in 0..n {
        let holder = holder(&admin, agent).await?;
        let victim = procs
            .iter()
            .position(|p| p.name == holder)
            .ok_or_else(|| anyhow!("round {round}: holder {holder} is not one of ours"))?;
        // A random phase against the maintenance ticks (and renewals):
        // rounds would otherwise start at the same point of the cycle each
        // time (right after the tick that ended the previous round).
        let phase = rand::rng().random_range(0..MAINTENANCE_INTERVAL_MS);
        tokio::time::sleep(Duration::from_millis(phase)).await;
        let before = fake.request_count();
        let started = Instant::now();
        match fault {
            Fault::Kill => procs[victim].kill()?,
            Fault::Stop => procs[victim].signal("STOP").await?,
        }
        wait_requests(&fake, before + 1)
            .await
            .map_err(|e| anyhow!("round {round}: {e}"))?;
        samples.push(started.elapsed());
        match fault {
            Fault::Kill => {
                let mut dead = procs.remove(victim);
                dead.wait_exit(Duration::from_secs(10)).await?;
                let name = format!("{db}-w{spawned}");
                spawned += 1;
                procs.push(fleet.worker(&admin, &name, 4, worker_env).await?);
            }
            Fault::Stop => {
                procs[victim].signal("CONT").await?;
                wait_running(&procs[victim]).await?;
            }
        }
    }
    // SIGKILL, not SIGTERM: a hung step would hold the drain for its whole
    // timeout.
    for mut p in procs {
        p.kill()?;
        p.wait_exit(Duration::from_secs(10)).await?;
    }
    maintenance.stop(Duration::from_secs(10)).await?;
    Ok(samples)
}

async fn wait_requests(fake: &FakeProvider, n: usize) -> Result<()> {
    tokio::time::timeout(WAIT_LIMIT, fake.wait_for_requests(n))
        .await
        .map_err(|_| anyhow!("no model request #{n} within {WAIT_LIMIT:?}"))
}

/// The worker holding the agent's lease.
async fn holder(admin: &Client, agent: Uuid) -> Result<String> {
    let row = admin
        .query_one(
            "SELECT state, lease_owner FROM holdfast.agents WHERE id = $1",
            &[&agent],
        )
        .await?;
    let state: String = row.get(0);
    let owner: Option<String> = row.get(1);
    match (state.as_str(), owner) {
        ("running", Some(owner)) => Ok(owner),
        (state, _) => bail!("agent {agent} is {state}, not running on a worker"),
    }
}

/// After SIGCONT: the process is scheduled again (not in state T).
async fn wait_running(process: &Proc) -> Result<()> {
    let deadline = Instant::now() + WAIT_LIMIT;
    while process.state()? == 'T' {
        if Instant::now() > deadline {
            bail!("{} still stopped after SIGCONT", process.name);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}
