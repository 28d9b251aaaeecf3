//! Where a server is in the WAL: the primary's write position after a
//! commit, and how far a streaming standby has replayed (the API's read
//! replica, docs/scaling.md).

use tokio_postgres::types::PgLsn;

use super::prepared::Prepared;
use crate::error::Result;

/// The primary's WAL write position (`pg_current_wal_lsn()`). Read after a
/// commit, it is at or past that commit's record: a standby that has
/// replayed this far sees the commit.
pub async fn wal_position(client: &impl Prepared) -> Result<PgLsn> {
    let row = client.query_one("SELECT pg_current_wal_lsn()", &[]).await?;
    Ok(row.get(0))
}

/// How far this server has replayed the primary's WAL
/// (`pg_last_wal_replay_lsn()`); `None` when it is not a standby (a read URL
/// that names the primary itself sees every commit).
pub async fn wal_replayed(client: &impl Prepared) -> Result<Option<PgLsn>> {
    let row = client
        .query_one(
            "SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() END",
            &[],
        )
        .await?;
    Ok(row.get(0))
}
