//! A client for the hot path: statements prepared once per connection.

use std::future::Future;

use postgres_types::ToSql;
use tokio_postgres::{GenericClient, Row, Statement};

use crate::connect::Session;
use crate::error::Result;

/// A client for the hot path (claims, context loads, commits): it runs a
/// statement prepared once per connection where it can keep one, so repeated
/// calls skip the parse round trip and the planning of the top-level query.
/// A pooled connection wrapped in [`Pooled`] and the worker's claim
/// [`Session`] keep their statements; any other client (a bare
/// `tokio_postgres` client or transaction) prepares on each call, as an
/// unnamed statement would (same round trips), so tests and tools pass
/// whatever they hold.
pub trait Prepared {
    type Client: GenericClient;
    /// The connection to run the statement on.
    fn client(&self) -> &Self::Client;
    /// `sql`, prepared on this connection (from its cache when it has one).
    fn statement(
        &self,
        sql: &'static str,
    ) -> impl Future<Output = std::result::Result<Statement, tokio_postgres::Error>> + Send;
}

impl<C: GenericClient> Prepared for C {
    type Client = C;
    fn client(&self) -> &C {
        self
    }
    fn statement(
        &self,
        sql: &'static str,
    ) -> impl Future<Output = std::result::Result<Statement, tokio_postgres::Error>> + Send {
        GenericClient::prepare(self, sql)
    }
}

/// A pooled connection whose statements stay prepared for its lifetime
/// (deadpool's per-connection statement cache).
pub struct Pooled<'a>(pub &'a deadpool_postgres::ClientWrapper);

impl Prepared for Pooled<'_> {
    type Client = tokio_postgres::Client;
    fn client(&self) -> &tokio_postgres::Client {
        self.0
    }
    fn statement(
        &self,
        sql: &'static str,
    ) -> impl Future<Output = std::result::Result<Statement, tokio_postgres::Error>> + Send {
        self.0.prepare_cached(sql)
    }
}

impl Prepared for Session {
    type Client = tokio_postgres::Client;
    fn client(&self) -> &tokio_postgres::Client {
        &self.client
    }
    fn statement(
        &self,
        sql: &'static str,
    ) -> impl Future<Output = std::result::Result<Statement, tokio_postgres::Error>> + Send {
        self.prepared(sql)
    }
}

/// `sql` with `params` as a statement prepared on `client` ([`Prepared`]):
/// the rows.
pub(super) async fn query_prepared(
    client: &impl Prepared,
    sql: &'static str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>> {
    let statement = client.statement(sql).await?;
    Ok(client.client().query(&statement, params).await?)
}

/// As [`query_prepared`], for exactly one row.
pub(super) async fn query_one_prepared(
    client: &impl Prepared,
    sql: &'static str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Row> {
    let statement = client.statement(sql).await?;
    Ok(client.client().query_one(&statement, params).await?)
}

/// As [`query_prepared`], for the count of rows affected.
pub(super) async fn execute_prepared(
    client: &impl Prepared,
    sql: &'static str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<u64> {
    let statement = client.statement(sql).await?;
    Ok(client.client().execute(&statement, params).await?)
}

/// Run `write` (statements of `client` that may ready agents) with its
/// `holdfast_ready` hint sent after its commit, by a statement of its own
/// (`holdfast.send_pending_wake`), instead of from inside the committing
/// transaction: there the hint holds Postgres's notify queue lock through
/// the commit's WAL flush, and concurrent writers that hint commit one at a
/// time. Inside a transaction of the caller's, the hint goes at that
/// transaction's commit as before. The hint is advisory, so a failure to
/// send it after the write is logged, not returned: the write stands, and
/// workers also claim every poll interval.
pub(super) async fn with_wake_after_commit<T>(
    client: &impl Prepared,
    write: impl Future<Output = Result<T>>,
) -> Result<T> {
    execute_prepared(
        client,
        "SELECT set_config('holdfast.wake_after_commit', 'on', false)",
        &[],
    )
    .await?;
    let written = write.await;
    if let Err(error) = execute_prepared(client, "SELECT holdfast.send_pending_wake()", &[]).await {
        tracing::warn!(%error, "the ready hint after a commit was not sent");
    }
    written
}
