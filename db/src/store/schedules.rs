//! Schedules (sql/schema/schedules.sql): create, list, pause and resume,
//! delete, and maintenance's claim and advance of the due ones. Reads are
//! scoped by project.

use std::time::Duration;

use chrono::{DateTime, Utc};

use uuid::Uuid;

use super::parse_text;
use super::prepared::Prepared;
use crate::error::Result;
use holdfast_wire::domain::{DueSchedule, NewSchedule, Schedule};
use holdfast_wire::duration::to_interval;
use holdfast_wire::schedule::FirePlan;

/// The columns [`schedule_from_row`] reads, by these names, of
/// `holdfast.schedules s`.
const SCHEDULE_COLUMNS: &str = "s.id, s.agent_id, s.cron, s.timezone, \
     (extract(epoch FROM s.every) * 1000)::bigint AS every_ms, s.content, s.mode, s.start_at, \
     s.end_at, s.missed, s.paused_at, s.next_fire_at, s.ended_at, s.last_fired_at, s.fire_count, \
     s.created_at, s.updated_at";

fn millis(value: Option<i64>) -> Option<Duration> {
    value.map(|ms| Duration::from_millis(ms.unsigned_abs()))
}

fn schedule_from_row(row: &tokio_postgres::Row) -> Result<Schedule> {
    Ok(Schedule {
        id: row.get("id"),
        agent_id: row.get("agent_id"),
        cron: row.get("cron"),
        timezone: row.get("timezone"),
        every: millis(row.get("every_ms")),
        content: row.get("content"),
        mode: parse_text(row.get("mode"), "mode")?,
        start_at: row.get("start_at"),
        end_at: row.get("end_at"),
        missed: parse_text(row.get("missed"), "missed")?,
        paused_at: row.get("paused_at"),
        next_fire_at: row.get("next_fire_at"),
        ended_at: row.get("ended_at"),
        last_fired_at: row.get("last_fired_at"),
        fire_count: row.get("fire_count"),
        created_at: row.get("created_at"),
        updated_at: row.get("updated_at"),
    })
}

/// Create a schedule for an agent of `project` (`holdfast.create_schedule`):
/// [`crate::Error::NotFound`], [`crate::Error::Conflict`] (archived) or
/// [`crate::Error::Invalid`] naming the field.
pub async fn create_schedule(
    client: &impl Prepared,
    project: Uuid,
    schedule: &NewSchedule,
) -> Result<Schedule> {
    let every = schedule.every.map(to_interval);
    let mode: &str = schedule.mode.into();
    let missed: &str = schedule.missed.into();
    let row = client
        .query_one(
            &format!(
                "SELECT {SCHEDULE_COLUMNS} FROM holdfast.create_schedule(\
                   $1, $2, $3, $4, $5::text::interval, $6, $7, $8, $9, $10, $11) s"
            ),
            &[
                &project,
                &schedule.agent_id,
                &schedule.cron,
                &schedule.timezone,
                &every,
                &schedule.content,
                &mode,
                &schedule.start_at,
                &schedule.end_at,
                &missed,
                &schedule.next_fire_at,
            ],
        )
        .await?;
    schedule_from_row(&row)
}

/// The schedules of an agent of `project`, oldest first.
pub async fn list_schedules(
    client: &impl Prepared,
    project: Uuid,
    agent: Uuid,
) -> Result<Vec<Schedule>> {
    let rows = client
        .query(
            &format!(
                "SELECT {SCHEDULE_COLUMNS} FROM holdfast.schedules s \
                  WHERE s.agent_id = $1 AND s.project_id = $2 ORDER BY s.id"
            ),
            &[&agent, &project],
        )
        .await?;
    rows.iter().map(schedule_from_row).collect()
}

/// One schedule of an agent of `project`.
pub async fn get_schedule(
    client: &impl Prepared,
    project: Uuid,
    agent: Uuid,
    schedule: Uuid,
) -> Result<Option<Schedule>> {
    let row = client
        .query_opt(
            &format!(
                "SELECT {SCHEDULE_COLUMNS} FROM holdfast.schedules s \
                  WHERE s.id = $1 AND s.agent_id = $2 AND s.project_id = $3"
            ),
            &[&schedule, &agent, &project],
        )
        .await?;
    row.as_ref().map(schedule_from_row).transpose()
}

/// Pause, or resume from `next_fire_at` (`holdfast.set_schedule_paused`).
pub async fn set_schedule_paused(
    client: &impl Prepared,
    project: Uuid,
    schedule: Uuid,
    paused: bool,
    next_fire_at: Option<DateTime<Utc>>,
) -> Result<Schedule> {
    let row = client
        .query_one(
            &format!(
                "SELECT {SCHEDULE_COLUMNS} FROM holdfast.set_schedule_paused($1, $2, $3, $4) s"
            ),
            &[&project, &schedule, &paused, &next_fire_at],
        )
        .await?;
    schedule_from_row(&row)
}

/// Delete a schedule of `project` (`holdfast.delete_schedule`).
pub async fn delete_schedule(client: &impl Prepared, project: Uuid, schedule: Uuid) -> Result<()> {
    client
        .execute(
            "SELECT holdfast.delete_schedule($1, $2)",
            &[&project, &schedule],
        )
        .await?;
    Ok(())
}

/// Claim up to `batch` due schedules, locked until `client`'s transaction
/// ends (`holdfast.claim_due_schedules`, SKIP LOCKED).
pub async fn claim_due_schedules(client: &impl Prepared, batch: i32) -> Result<Vec<DueSchedule>> {
    let rows = client
        .query(
            "SELECT id, cron, timezone, every_ms, start_at, end_at, missed, next_fire_at, \
                    created_at, now \
               FROM holdfast.claim_due_schedules($1)",
            &[&batch],
        )
        .await?;
    rows.iter()
        .map(|row| {
            Ok(DueSchedule {
                id: row.get("id"),
                cron: row.get("cron"),
                timezone: row.get("timezone"),
                every: millis(row.get("every_ms")),
                start_at: row.get("start_at"),
                end_at: row.get("end_at"),
                missed: parse_text(row.get("missed"), "missed")?,
                due: row.get("next_fire_at"),
                created_at: row.get("created_at"),
                now: row.get("now"),
            })
        })
        .collect()
}

/// Carry out `plan` for a schedule claimed at slot `due`
/// (`holdfast.advance_schedule`); returns its outcome: `fired`,
/// `replayed`, `skipped`, `refused` or `stale`.
pub async fn advance_schedule(
    client: &impl Prepared,
    schedule: Uuid,
    due: DateTime<Utc>,
    plan: &FirePlan,
) -> Result<String> {
    let (missed_from, missed_until) = plan.missed.unzip();
    let (fire_slot, late) = plan.fire.unzip();
    let row = client
        .query_one(
            "SELECT holdfast.advance_schedule($1, $2, $3, $4, $5, $6, $7)",
            &[
                &schedule,
                &due,
                &missed_from,
                &missed_until,
                &fire_slot,
                &late,
                &plan.next_fire_at,
            ],
        )
        .await?;
    Ok(row.get(0))
}
