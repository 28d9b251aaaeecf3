//! Starting the holdfast processes of one scenario against its database,
//! each waited for until it is ready to work.

use std::time::Duration;

use anyhow::{bail, Result};
use holdfast_fakes::FakeProvider;
use tokio_postgres::Client;

use crate::processes::{wait_for_session, Proc};
use crate::Bench;

const STARTUP_LIMIT: Duration = Duration::from_secs(60);

/// The processes of one scenario: its database, and the fake provider its
/// workers talk to (both protocols).
pub struct Fleet<'a> {
    bench: &'a Bench,
    dbname: String,
    provider_url: Option<String>,
}

impl<'a> Fleet<'a> {
    pub fn new(bench: &'a Bench, dbname: &str, fake: Option<&FakeProvider>) -> Fleet<'a> {
        Fleet {
            bench,
            dbname: dbname.to_owned(),
            provider_url: fake.map(FakeProvider::base_url),
        }
    }

    /// `holdfast server worker` named `name` (its lease owner and its sessions'
    /// application_name), at `concurrency`, with `extra` env (then
    /// `--worker-env`, which wins); returns once
    /// it has run its first claim (its LISTEN is up by then).
    pub async fn worker(
        &self,
        admin: &Client,
        name: &str,
        concurrency: usize,
        extra: &[(&str, String)],
    ) -> Result<Proc> {
        let Some(provider) = &self.provider_url else {
            bail!("workers need a fake provider");
        };
        let mut envs = vec![
            (
                "HOLDFAST_DATABASE_URL",
                self.bench.cluster.url(&self.dbname, name),
            ),
            ("HOLDFAST_WORKER_NAME", name.to_owned()),
            ("HOLDFAST_WORKER_CONCURRENCY", concurrency.to_string()),
            ("ANTHROPIC_BASE_URL", provider.clone()),
            ("ANTHROPIC_API_KEY", "bench-key".to_owned()),
            ("OPENAI_BASE_URL", format!("{provider}/v1")),
            ("OPENAI_API_KEY", "bench-key".to_owned()),
        ];
        envs.extend(extra.iter().cloned());
        envs.extend(
            self.bench
                .opts
                .worker_env
                .iter()
                .map(|(k, v)| (k.as_str(), v.clone())),
        );
        let process = self
            .bench
            .holdfast
            .spawn(name, &["server", "worker"], &envs)?;
        wait_for_session(admin, name, "claim_agents", STARTUP_LIMIT).await?;
        Ok(process)
    }

    /// `holdfast server maintenance`; returns after its first tick.
    pub async fn maintenance(&self, admin: &Client, name: &str) -> Result<Proc> {
        let envs = [(
            "HOLDFAST_DATABASE_URL",
            self.bench.cluster.url(&self.dbname, name),
        )];
        let process = self
            .bench
            .holdfast
            .spawn(name, &["server", "maintenance"], &envs)?;
        wait_for_session(admin, name, "maintenance_tick", STARTUP_LIMIT).await?;
        Ok(process)
    }

    /// `holdfast server api` on a free loopback port; returns the process and its
    /// base URL once `/readyz` answers 200.
    pub async fn api(&self, name: &str) -> Result<(Proc, String)> {
        let port = free_port()?;
        let listen = format!("127.0.0.1:{port}");
        let envs = [
            (
                "HOLDFAST_DATABASE_URL",
                self.bench.cluster.url(&self.dbname, name),
            ),
            ("HOLDFAST_LISTEN", listen.clone()),
            // The load driver is one key at full speed: the per-key limit
            // would measure itself, not the API.
            ("HOLDFAST_API_RATE_LIMIT", "off".to_owned()),
        ];
        let process = self.bench.holdfast.spawn(name, &["server", "api"], &envs)?;
        let base = format!("http://{listen}");
        let client = holdfast_outbound::client_builder().build()?;
        let deadline = std::time::Instant::now() + STARTUP_LIMIT;
        loop {
            let ready = client
                .get(format!("{base}/readyz"))
                .send()
                .await
                .map(|r| r.status().is_success())
                .unwrap_or(false);
            if ready {
                return Ok((process, base));
            }
            if std::time::Instant::now() > deadline {
                bail!(
                    "{name} was not ready within {STARTUP_LIMIT:?}; log: {}",
                    process.log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A loopback port free right now (bound, then released for the API).
fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}
