//! Connections: a pool for short calls, and dedicated sessions for LISTEN
//! and for the worker's claims (a pooled connection would drop notifications
//! and would not give the worker one stable backend pid).

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Mutex;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, Client, Config, NoTls, Notification, Statement};

use crate::error::{Error, Result};

/// Parse a database URL (`postgres://…`) or libpq key/value string.
pub fn parse_config(url: &str) -> Result<Config> {
    Config::from_str(url).map_err(|e| Error::Invalid {
        field: Some("HOLDFAST_DATABASE_URL".into()),
        message: e.to_string(),
    })
}

/// A connection pool of at most `max_size` connections.
pub fn pool(config: Config, max_size: usize) -> Result<Pool> {
    let manager = Manager::from_config(
        config,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(max_size)
        .build()
        .map_err(|e| Error::Pool(e.to_string()))
}

/// A dedicated session: the client, and a channel of the notifications it
/// receives. The channel closes when the connection ends, which is how the
/// owner learns it must reconnect (and LISTEN again).
pub struct Session {
    pub client: Client,
    pub notifications: mpsc::UnboundedReceiver<Notification>,
    /// Statements prepared on this session (the worker's claim and renewal
    /// run every few milliseconds under load: parse them once).
    statements: Mutex<HashMap<&'static str, Statement>>,
}

impl Session {
    /// `sql` prepared on this session, once: later calls reuse it.
    pub async fn prepared(
        &self,
        sql: &'static str,
    ) -> std::result::Result<Statement, tokio_postgres::Error> {
        if let Some(statement) = self.cached(sql) {
            return Ok(statement);
        }
        let statement = self.client.prepare(sql).await?;
        self.statements
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(sql, statement.clone());
        Ok(statement)
    }

    fn cached(&self, sql: &str) -> Option<Statement> {
        self.statements
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(sql)
            .cloned()
    }
}

/// Open a dedicated session and LISTEN on `channels`.
pub async fn listen(config: &Config, channels: &[&str]) -> Result<Session> {
    let (client, mut connection) = config.connect(NoTls).await?;
    let (tx, notifications) = mpsc::unbounded_channel();
    let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
    tokio::spawn(async move {
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(n)) => {
                    if tx.send(n).is_err() {
                        break;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "listen connection ended");
                    break;
                }
            }
        }
    });
    for channel in channels {
        // Channel names are ours (constants), never user input.
        client.batch_execute(&format!("LISTEN {channel}")).await?;
    }
    Ok(Session {
        client,
        notifications,
        statements: Mutex::new(HashMap::new()),
    })
}
