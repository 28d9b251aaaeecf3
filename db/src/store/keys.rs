//! API keys (sql/schema/api_keys.sql): hashes only.

use uuid::Uuid;

use super::prepared::Prepared;
use crate::error::Result;
use holdfast_wire::domain::{ApiKeyCreated, ApiKeyListed, ApiKeyOwner, ApiKeyRevoked};

/// Create an API key for `project_name` (the project is created if needed).
/// The clear key is in the result and nowhere else.
pub async fn create_api_key(client: &impl Prepared, project_name: &str) -> Result<ApiKeyCreated> {
    let row = client
        .query_one(
            "SELECT key_id, project_id, prefix, key FROM holdfast.create_api_key($1)",
            &[&project_name],
        )
        .await?;
    Ok(ApiKeyCreated {
        key_id: row.get("key_id"),
        project_id: row.get("project_id"),
        prefix: row.get("prefix"),
        key: row.get("key"),
    })
}

/// Who `key` speaks for; `None` when it is unknown or revoked.
pub async fn authenticate_api_key(
    client: &impl Prepared,
    key: &str,
) -> Result<Option<ApiKeyOwner>> {
    let row = client
        .query_opt(
            "SELECT key_id, project_id FROM holdfast.authenticate_api_key($1)",
            &[&key],
        )
        .await?;
    Ok(row.map(|r| ApiKeyOwner {
        key_id: r.get("key_id"),
        project_id: r.get("project_id"),
    }))
}

/// Whether the key `key_id` still authenticates (exists, not revoked).
pub async fn api_key_active(client: &impl Prepared, key_id: Uuid) -> Result<bool> {
    let row = client
        .query_one("SELECT holdfast.api_key_active($1)", &[&key_id])
        .await?;
    Ok(row.get(0))
}

/// Revoke the key named by its id, prefix or full text (idempotent).
pub async fn revoke_api_key(client: &impl Prepared, key_ref: &str) -> Result<ApiKeyRevoked> {
    let row = client
        .query_one(
            "SELECT key_id, project_id, prefix, revoked_at FROM holdfast.revoke_api_key($1)",
            &[&key_ref],
        )
        .await?;
    Ok(ApiKeyRevoked {
        key_id: row.get("key_id"),
        project_id: row.get("project_id"),
        prefix: row.get("prefix"),
        revoked_at: row.get("revoked_at"),
    })
}

/// The API keys, revoked ones included, oldest first; only `project`'s
/// when given.
pub async fn list_api_keys(
    client: &impl Prepared,
    project: Option<&str>,
) -> Result<Vec<ApiKeyListed>> {
    let rows = client
        .query(
            "SELECT k.id AS key_id, p.name AS project, k.prefix, k.created_at, k.revoked_at \
               FROM holdfast.api_keys k JOIN holdfast.projects p ON p.id = k.project_id \
              WHERE $1::text IS NULL OR p.name = $1 \
              ORDER BY k.created_at, k.id",
            &[&project],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| ApiKeyListed {
            key_id: r.get("key_id"),
            project: r.get("project"),
            prefix: r.get("prefix"),
            created_at: r.get("created_at"),
            revoked_at: r.get("revoked_at"),
        })
        .collect())
}
