//! `/v1/agents/{id}/schedules`: create, list, read, pause or resume, and
//! delete an agent's schedules. The cron expression, time zone and interval
//! are checked here and the first slot computed (wire/src/schedule.rs);
//! SQL checks the rest and stores it (sql/schema/schedules.sql), and the
//! maintenance process fires it.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use chrono::{TimeDelta, Utc};
use holdfast_db::store;
use holdfast_wire::api::error::ErrorBody;
use holdfast_wire::api::schedules::{
    CreateScheduleRequest, ScheduleList, ScheduleView, UpdateScheduleRequest,
};
use holdfast_wire::domain::NewSchedule;
use holdfast_wire::schedule::{self, Recurrence, Timing};
use uuid::Uuid;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath};
use crate::observe::record_agent;
use crate::state::AppState;

/// Create a schedule: the agent is sent `input` at each slot.
#[utoipa::path(
    post,
    path = "/v1/agents/{id}/schedules",
    tag = "schedules",
    params(("id" = Uuid, Path, description = "agent id")),
    request_body = CreateScheduleRequest,
    responses(
        (status = 201, body = ScheduleView),
        (status = 400, description = "a bad cron expression, unknown time zone, `every` under 1s, `end_at` not after `start_at`, or bad input; `field` names it", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "the agent is archived", body = ErrorBody),
    )
)]
pub async fn create_schedule(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiJson(request): ApiJson<CreateScheduleRequest>,
) -> Result<(StatusCode, Json<ScheduleView>), ApiError> {
    record_agent(id);
    let timezone = request.timezone.unwrap_or_else(|| "UTC".into());
    let now = Utc::now();
    let (recurrence, every) = match (&request.cron, &request.every) {
        (Some(cron), None) => {
            let cron = schedule::parse_cron(cron).map_err(|e| ApiError::invalid("cron", e))?;
            let zone =
                schedule::parse_zone(&timezone).map_err(|e| ApiError::invalid("timezone", e))?;
            let cron = Box::new(cron);
            (Recurrence::Cron { cron, zone }, None)
        }
        (None, Some(every)) => {
            let every = schedule::parse_every(every).map_err(|e| ApiError::invalid("every", e))?;
            (Recurrence::Every(every), Some(every))
        }
        _ => return Err(ApiError::invalid("cron", "give either cron or every")),
    };
    if let (Some(start), Some(end)) = (request.start_at, request.end_at) {
        if end <= start {
            return Err(ApiError::invalid("end_at", "end_at must be after start_at"));
        }
    }
    // An interval's slots need an anchor: without start_at, one interval
    // from now, kept as start_at so the slots stay on one grid.
    let start_at = match (request.start_at, every) {
        (None, Some(every)) => {
            let every = TimeDelta::from_std(every)
                .map_err(|_| ApiError::invalid("every", "every is too long"))?;
            Some(now + every)
        }
        (start, _) => start,
    };
    let timing = Timing {
        recurrence,
        start_at,
        created_at: now,
        end_at: request.end_at,
    };
    let new = NewSchedule {
        agent_id: id,
        cron: request.cron,
        timezone,
        every,
        content: request.input.content,
        mode: request.input.mode,
        start_at,
        end_at: request.end_at,
        missed: request.missed,
        next_fire_at: timing.first_at_or_after(now),
    };
    let db = state.db().await?;
    let created = store::create_schedule(&db, caller.project_id, &new).await?;
    Ok((StatusCode::CREATED, Json(created.into())))
}

/// The agent's schedules, oldest first.
#[utoipa::path(
    get,
    path = "/v1/agents/{id}/schedules",
    tag = "schedules",
    params(("id" = Uuid, Path, description = "agent id")),
    responses((status = 200, body = ScheduleList), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody))
)]
pub async fn list_schedules(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<ScheduleList>, ApiError> {
    record_agent(id);
    let db = state.db().await?;
    if !store::agent_in_project(&db, caller.project_id, id).await? {
        return Err(ApiError::agent_not_found(id));
    }
    let schedules = store::list_schedules(&db, caller.project_id, id).await?;
    Ok(Json(ScheduleList {
        schedules: schedules.into_iter().map(ScheduleView::from).collect(),
    }))
}

fn schedule_not_found(id: Uuid) -> ApiError {
    ApiError::not_found(format!("schedule {id} not found"))
}

/// One schedule.
#[utoipa::path(
    get,
    path = "/v1/agents/{id}/schedules/{schedule_id}",
    tag = "schedules",
    params(("id" = Uuid, Path, description = "agent id"), ("schedule_id" = Uuid, Path, description = "schedule id")),
    responses((status = 200, body = ScheduleView), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody))
)]
pub async fn get_schedule(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((id, schedule_id)): ApiPath<(Uuid, Uuid)>,
) -> Result<Json<ScheduleView>, ApiError> {
    record_agent(id);
    let db = state.db().await?;
    let found = store::get_schedule(&db, caller.project_id, id, schedule_id).await?;
    Ok(Json(
        found.ok_or_else(|| schedule_not_found(schedule_id))?.into(),
    ))
}

/// Pause or resume a schedule. Resuming fires from the next slot on.
#[utoipa::path(
    patch,
    path = "/v1/agents/{id}/schedules/{schedule_id}",
    tag = "schedules",
    params(("id" = Uuid, Path, description = "agent id"), ("schedule_id" = Uuid, Path, description = "schedule id")),
    request_body = UpdateScheduleRequest,
    responses((status = 200, body = ScheduleView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody))
)]
pub async fn update_schedule(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((id, schedule_id)): ApiPath<(Uuid, Uuid)>,
    ApiJson(request): ApiJson<UpdateScheduleRequest>,
) -> Result<Json<ScheduleView>, ApiError> {
    record_agent(id);
    let db = state.db().await?;
    let found = store::get_schedule(&db, caller.project_id, id, schedule_id)
        .await?
        .ok_or_else(|| schedule_not_found(schedule_id))?;
    let next_fire_at = if request.paused {
        None
    } else {
        let recurrence = schedule::recurrence(found.cron.as_deref(), &found.timezone, found.every)
            .map_err(|e| ApiError::invalid("cron", e))?;
        Timing {
            recurrence,
            start_at: found.start_at,
            created_at: found.created_at,
            end_at: found.end_at,
        }
        .next_after(Utc::now())
    };
    let updated = store::set_schedule_paused(
        &db,
        caller.project_id,
        schedule_id,
        request.paused,
        next_fire_at,
    )
    .await?;
    Ok(Json(updated.into()))
}

/// Delete a schedule (the inputs it sent stay).
#[utoipa::path(
    delete,
    path = "/v1/agents/{id}/schedules/{schedule_id}",
    tag = "schedules",
    params(("id" = Uuid, Path, description = "agent id"), ("schedule_id" = Uuid, Path, description = "schedule id")),
    responses((status = 204), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody))
)]
pub async fn delete_schedule(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((id, schedule_id)): ApiPath<(Uuid, Uuid)>,
) -> Result<StatusCode, ApiError> {
    record_agent(id);
    let db = state.db().await?;
    if store::get_schedule(&db, caller.project_id, id, schedule_id)
        .await?
        .is_none()
    {
        return Err(schedule_not_found(schedule_id));
    }
    store::delete_schedule(&db, caller.project_id, schedule_id).await?;
    Ok(StatusCode::NO_CONTENT)
}
