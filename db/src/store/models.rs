//! Model endpoints (operator), provider keys (project) and model routing
//! (worker) (sql/schema/endpoints.sql).

use tokio_postgres::Row;
use uuid::Uuid;

use super::prepared::Prepared;
use crate::error::Result;
use holdfast_wire::domain::{
    ModelDestination, ModelEndpoint, ModelRoute, NewModelEndpoint, ProviderKeyStatus, SealedKey,
};

/// Add an operator model endpoint; [`Error::Conflict`] when the name is taken.
pub async fn add_model_endpoint(client: &impl Prepared, endpoint: &NewModelEndpoint) -> Result<()> {
    client
        .execute(
            "SELECT FROM holdfast.add_model_endpoint($1, $2, $3, $4, $5, $6)",
            &[
                &endpoint.name,
                &endpoint.kind,
                &endpoint.base_url,
                &endpoint.credential_env,
                &endpoint.project,
                &endpoint.models,
            ],
        )
        .await?;
    Ok(())
}

/// Every operator model endpoint, by name.
pub async fn list_model_endpoints(client: &impl Prepared) -> Result<Vec<ModelEndpoint>> {
    let rows = client
        .query(
            "SELECT name, kind, base_url, credential_env, project_name, models, agents, created_at \
               FROM holdfast.list_model_endpoints()",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| ModelEndpoint {
            name: r.get("name"),
            kind: r.get("kind"),
            base_url: r.get("base_url"),
            credential_env: r.get("credential_env"),
            project: r.get("project_name"),
            models: r.get("models"),
            agents: r.get("agents"),
            created_at: r.get("created_at"),
        })
        .collect())
}

/// Remove an operator model endpoint; returns how many agents still name it.
pub async fn remove_model_endpoint(client: &impl Prepared, name: &str) -> Result<i64> {
    let row = client
        .query_one("SELECT holdfast.remove_model_endpoint($1)", &[&name])
        .await?;
    Ok(row.get::<_, Option<i64>>(0).unwrap_or(0))
}

/// Allow or forbid tenant-set `model.base_url` for the project named
/// `project` ([`Error::NotFound`] when there is none).
pub async fn set_project_custom_model_urls(
    client: &impl Prepared,
    project: &str,
    allowed: bool,
) -> Result<()> {
    client
        .execute(
            "SELECT holdfast.set_project_custom_model_urls($1, $2)",
            &[&project, &allowed],
        )
        .await?;
    Ok(())
}

/// Allow (or forbid) a project's agents Anthropic's server tools
/// (`holdfast.set_project_server_tools`).
pub async fn set_project_server_tools(
    client: &impl Prepared,
    project: &str,
    allowed: bool,
) -> Result<()> {
    client
        .execute(
            "SELECT holdfast.set_project_server_tools($1, $2)",
            &[&project, &allowed],
        )
        .await?;
    Ok(())
}

/// Store a project's own provider key, already sealed.
pub async fn set_project_provider_key(
    client: &impl Prepared,
    project: Uuid,
    provider: &str,
    key: &SealedKey,
) -> Result<ProviderKeyStatus> {
    let row = client
        .query_one(
            "SELECT provider, created_at, updated_at \
               FROM holdfast.set_project_provider_key($1, $2, $3, $4)",
            &[&project, &provider, &key.sealed, &key.key_fingerprint],
        )
        .await?;
    Ok(provider_key_status(&row))
}

/// The providers `project` has its own key for (never the keys).
pub async fn list_project_provider_keys(
    client: &impl Prepared,
    project: Uuid,
) -> Result<Vec<ProviderKeyStatus>> {
    let rows = client
        .query(
            "SELECT provider, created_at, updated_at FROM holdfast.list_project_provider_keys($1)",
            &[&project],
        )
        .await?;
    Ok(rows.iter().map(provider_key_status).collect())
}

fn provider_key_status(row: &Row) -> ProviderKeyStatus {
    ProviderKeyStatus {
        provider: row.get("provider"),
        created_at: row.get("created_at"),
        updated_at: row.get("updated_at"),
    }
}

/// Delete a project's own provider key ([`Error::NotFound`] when none is set).
pub async fn delete_project_provider_key(
    client: &impl Prepared,
    project: Uuid,
    provider: &str,
) -> Result<()> {
    client
        .execute(
            "SELECT holdfast.delete_project_provider_key($1, $2)",
            &[&project, &provider],
        )
        .await?;
    Ok(())
}

/// The [`ModelRoute`] in a row with `holdfast.resolve_model_endpoint`'s
/// columns (`load_step_context` returns them with the step's context).
pub(super) fn model_route_from_row(row: &Row) -> ModelRoute {
    let project_key = match (row.get("sealed_key"), row.get("key_fingerprint")) {
        (Some(sealed), Some(key_fingerprint)) => Some(SealedKey {
            sealed,
            key_fingerprint,
        }),
        _ => None,
    };
    let destination = match (
        row.get("refused_field"),
        row.get("refused_message"),
        row.get("custom_url"),
    ) {
        (Some(field), Some(message), _) => ModelDestination::Refused { field, message },
        (_, _, Some(base_url)) => ModelDestination::CustomUrl { base_url },
        _ => ModelDestination::Operator {
            endpoint: row.get("endpoint"),
            base_url: row.get("base_url"),
            credential_env: row.get("credential_env"),
        },
    };
    ModelRoute {
        project_id: row.get("project_id"),
        destination,
        project_key,
    }
}
