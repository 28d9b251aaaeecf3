//! Time partitions of events and per-project retention (sql/schema/retention.sql).

use std::time::Duration;

use super::prepared::Prepared;
use crate::error::Result;
use holdfast_wire::domain::RetentionReport;
use holdfast_wire::duration::to_interval;

/// Set how long a project keeps its finished agents' events, webhook
/// deliveries, tool outputs, input contents and attachments; `None` keeps
/// them forever.
pub async fn set_project_retention(
    client: &impl Prepared,
    project_name: &str,
    events: Option<Duration>,
) -> Result<()> {
    client
        .execute(
            "SELECT holdfast.set_project_retention($1, $2::text::interval)",
            &[&project_name, &events.map(to_interval)],
        )
        .await?;
    Ok(())
}

/// One retention pass: create upcoming partitions and drop expired ones
/// (committed first, so no lock on `events` is held while rows are
/// pruned), then prune at most `batch` rows of each kind.
pub async fn retention_tick(client: &impl Prepared, batch: i32) -> Result<RetentionReport> {
    let partitions = client
        .query_one(
            "SELECT partitions_created, partitions_dropped FROM holdfast.maintain_event_partitions()",
            &[],
        )
        .await?;
    let row = client
        .query_one(
            "SELECT events_deleted, deliveries_deleted, tool_outputs_pruned, inputs_pruned, \
                    attachments_deleted \
               FROM holdfast.prune_retention_rows($1)",
            &[&batch],
        )
        .await?;
    Ok(RetentionReport {
        partitions_created: partitions.get("partitions_created"),
        partitions_dropped: partitions.get("partitions_dropped"),
        events_deleted: row.get("events_deleted"),
        deliveries_deleted: row.get("deliveries_deleted"),
        tool_outputs_pruned: row.get("tool_outputs_pruned"),
        inputs_pruned: row.get("inputs_pruned"),
        attachments_deleted: row.get("attachments_deleted"),
    })
}
