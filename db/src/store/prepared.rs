//! The client every store function runs on, and statements prepared once
//! per connection for the hot path.

use std::future::Future;

use postgres_types::{ToSql, Type};
use tokio_postgres::{GenericClient, Row, Statement};

use crate::connect::Session;
use crate::error::Result;

type PgResult<T> = std::result::Result<T, tokio_postgres::Error>;

/// What a store function takes: `client: &impl Prepared`. The caller passes
/// a reference to whatever it holds, the same way for each: a pooled
/// connection (`&db`, a `deadpool_postgres::Object`), the worker's claim
/// [`Session`], a `tokio_postgres` client, or a transaction of either.
///
/// Hot-path functions (claims, context loads, commits) run `statement`s: a
/// pooled connection and a [`Session`] keep them prepared for their
/// lifetime, so repeated calls skip the parse round trip and the planning
/// of the top-level query; a bare client or transaction prepares on each
/// call, as an unnamed statement would (same round trips). The other
/// functions run `query`, `query_one`, `query_opt` and `execute`: one-off
/// statements, planned for their parameters on every call.
pub trait Prepared: Sync {
    type Client: GenericClient;
    /// The connection (or transaction) to run statements on.
    fn client(&self) -> &Self::Client;
    /// `sql`, prepared on this connection (from its cache when it has one).
    fn statement(&self, sql: &'static str) -> impl Future<Output = PgResult<Statement>> + Send;

    /// `sql` as a one-off statement: its rows.
    fn query<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn ToSql + Sync)],
    ) -> impl Future<Output = PgResult<Vec<Row>>> + Send + 'a {
        self.client().query(sql, params)
    }
    /// `sql` as a one-off statement: its one row (an error for none or more).
    fn query_one<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn ToSql + Sync)],
    ) -> impl Future<Output = PgResult<Row>> + Send + 'a {
        self.client().query_one(sql, params)
    }
    /// `sql` as a one-off statement: its row if any (an error for more).
    fn query_opt<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn ToSql + Sync)],
    ) -> impl Future<Output = PgResult<Option<Row>>> + Send + 'a {
        self.client().query_opt(sql, params)
    }
    /// As [`Prepared::query`], with each parameter's type given (so an
    /// untyped placeholder, as in `$1 IS NULL`, still binds).
    fn query_typed<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [(&'a (dyn ToSql + Sync), Type)],
    ) -> impl Future<Output = PgResult<Vec<Row>>> + Send + 'a {
        self.client().query_typed(sql, params)
    }
    /// `sql` as a one-off statement: the count of rows it affected.
    fn execute<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [&'a (dyn ToSql + Sync)],
    ) -> impl Future<Output = PgResult<u64>> + Send + 'a {
        self.client().execute(sql, params)
    }
}

impl Prepared for tokio_postgres::Client {
    type Client = tokio_postgres::Client;
    fn client(&self) -> &tokio_postgres::Client {
        self
    }
    fn statement(&self, sql: &'static str) -> impl Future<Output = PgResult<Statement>> + Send {
        tokio_postgres::Client::prepare(self, sql)
    }
}

impl<'a> Prepared for tokio_postgres::Transaction<'a> {
    type Client = tokio_postgres::Transaction<'a>;
    fn client(&self) -> &tokio_postgres::Transaction<'a> {
        self
    }
    fn statement(&self, sql: &'static str) -> impl Future<Output = PgResult<Statement>> + Send {
        tokio_postgres::Transaction::prepare(self, sql)
    }
}

/// A pooled connection: its statements stay prepared for its lifetime
/// (deadpool's per-connection statement cache).
impl Prepared for deadpool_postgres::Object {
    type Client = tokio_postgres::Client;
    fn client(&self) -> &tokio_postgres::Client {
        self
    }
    fn statement(&self, sql: &'static str) -> impl Future<Output = PgResult<Statement>> + Send {
        deadpool_postgres::ClientWrapper::prepare_cached(self, sql)
    }
}

/// A transaction on a pooled connection, sharing the connection's
/// statement cache.
impl<'a> Prepared for deadpool_postgres::Transaction<'a> {
    type Client = tokio_postgres::Transaction<'a>;
    fn client(&self) -> &tokio_postgres::Transaction<'a> {
        self
    }
    fn statement(&self, sql: &'static str) -> impl Future<Output = PgResult<Statement>> + Send {
        deadpool_postgres::Transaction::prepare_cached(self, sql)
    }
}

impl Prepared for Session {
    type Client = tokio_postgres::Client;
    fn client(&self) -> &tokio_postgres::Client {
        &self.client
    }
    fn statement(&self, sql: &'static str) -> impl Future<Output = PgResult<Statement>> + Send {
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
/// wake hint (`NOTIFY holdfast_ready`) sent after its commit, by a statement of its own
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
        tracing::warn!(%error, "the wake hint after a commit was not sent");
    }
    written
}
