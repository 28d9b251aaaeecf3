//! Schedules against real Postgres, real `holdfast server maintenance`
//! processes and real time: each slot fires exactly once with two
//! maintenance processes and a SIGKILL of one; a cron schedule in a time
//! zone with daylight saving fires at the wall-clock instants; after
//! maintenance downtime `missed: once` fires once and `skip` skips; bad
//! requests name the field and write nothing.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use holdfast_db::store;
use holdfast_tests::api_server::{project_key, ApiServer};
use holdfast_tests::process::HoldfastProcess;
use holdfast_tests::{new_agent, wait_until, TestDb};
use holdfast_wire::domain::{InputMode, NewSchedule};
use holdfast_wire::schedule::{self, MissedPolicy, Recurrence, Timing};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tokio_postgres::Client;
use uuid::Uuid;

/// A maintenance process over `db`, ticking every 100 ms, with `env` on top.
/// Tests build the binary first ([`build_binary`]): a build during the test
/// would make the slots late.
fn maintenance(name: &str, db: &TestDb, env: &[(&str, &str)]) -> HoldfastProcess {
    let mut envs = vec![
        ("HOLDFAST_DATABASE_URL", db.url()),
        ("HOLDFAST_MAINTENANCE_INTERVAL", "100ms".to_owned()),
    ];
    envs.extend(env.iter().map(|(k, v)| (*k, (*v).to_owned())));
    HoldfastProcess::spawn(name, &["server", "maintenance"], &envs)
}

async fn build_binary() {
    tokio::task::spawn_blocking(holdfast_tests::process::holdfast_bin)
        .await
        .unwrap();
}

async fn create_schedule(server: &ApiServer, key: &str, agent: Uuid, body: Value) -> Value {
    let response = server
        .request(Method::POST, &format!("/v1/agents/{agent}/schedules"), key)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED, "create {body}");
    response.json().await.unwrap()
}

async fn pause(server: &ApiServer, key: &str, agent: Uuid, schedule: &str) {
    let response = server
        .request(
            Method::PATCH,
            &format!("/v1/agents/{agent}/schedules/{schedule}"),
            key,
        )
        .json(&json!({"paused": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let view: Value = response.json().await.unwrap();
    assert_eq!(view["state"], "paused");
}

async fn fire_count(client: &Client, schedule: &str) -> i64 {
    client
        .query_one(
            "SELECT fire_count FROM holdfast.schedules WHERE id = $1::text::uuid",
            &[&schedule],
        )
        .await
        .unwrap()
        .get(0)
}

/// The `schedule.fired` events of a schedule: (slot, input id, late), by slot.
async fn fired(client: &Client, schedule: &str) -> Vec<(DateTime<Utc>, String, bool)> {
    client
        .query(
            "SELECT (data ->> 'slot')::timestamptz, data ->> 'input_id', (data ->> 'late')::boolean \
               FROM holdfast.events \
              WHERE type = 'schedule.fired' AND data ->> 'schedule_id' = $1 \
              ORDER BY 1",
            &[&schedule],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

/// The `schedule.skipped` events of a schedule: (reason, from, until).
async fn skipped(client: &Client, schedule: &str) -> Vec<(String, DateTime<Utc>, DateTime<Utc>)> {
    client
        .query(
            "SELECT data ->> 'reason', (data ->> 'from')::timestamptz, (data ->> 'until')::timestamptz \
               FROM holdfast.events \
              WHERE type = 'schedule.skipped' AND data ->> 'schedule_id' = $1 \
              ORDER BY 2",
            &[&schedule],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

/// The inputs a schedule created (by its idempotency keys), by key.
async fn scheduled_inputs(client: &Client, schedule: &str) -> Vec<(String, String)> {
    client
        .query(
            "SELECT id::text, idempotency_key FROM holdfast.inputs \
              WHERE idempotency_key LIKE 'schedule:' || $1 || ':%' ORDER BY idempotency_key",
            &[&schedule],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

fn at(value: &Value) -> DateTime<Utc> {
    value.as_str().unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_every_2s_schedule_fires_once_per_slot_with_two_maintenance_processes_and_a_sigkill() {
    build_binary().await;
    let db = TestDb::new().await;
    let mut first = maintenance("schedules-a", &db, &[]);
    let _second = maintenance("schedules-b", &db, &[]);
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let agent = new_agent(&client, project).await;
    let server = ApiServer::start(&db).await;
    let created = create_schedule(
        &server,
        &key,
        agent,
        json!({"every": "2s", "input": {"content": "tick", "mode": "queue"}}),
    )
    .await;
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(created["every"], "2s");
    assert_eq!(created["state"], "active");
    let start = at(&created["start_at"]);
    assert_eq!(at(&created["next_fire_at"]), start);
    wait_until(Duration::from_secs(30), "3 fires", || async {
        fire_count(&client, &id).await >= 3
    })
    .await;
    first.signal("KILL");
    assert_eq!(first.wait_exit(Duration::from_secs(10)).await, None);
    wait_until(Duration::from_secs(30), "3 more fires", || async {
        fire_count(&client, &id).await >= 6
    })
    .await;
    let _restarted = maintenance("schedules-a2", &db, &[]);
    wait_until(Duration::from_secs(30), "2 more fires", || async {
        fire_count(&client, &id).await >= 8
    })
    .await;
    pause(&server, &key, agent, &id).await;

    let fires = fired(&client, &id).await;
    let count = fire_count(&client, &id).await;
    assert_eq!(fires.len() as i64, count, "one event per fire");
    // Every slot from the first on, each once: start, start + 2s, ...
    let expected: Vec<DateTime<Utc>> = (0..count)
        .map(|k| start + TimeDelta::seconds(2 * k))
        .collect();
    let slots: Vec<DateTime<Utc>> = fires.iter().map(|f| f.0).collect();
    assert_eq!(slots, expected);
    assert!(fires.iter().all(|f| !f.2), "no fire was late");
    assert!(
        skipped(&client, &id).await.is_empty(),
        "no slot was skipped"
    );
    // One input per slot, each the one its event names.
    let inputs = scheduled_inputs(&client, &id).await;
    assert_eq!(inputs.len(), fires.len());
    let mut named: Vec<&str> = fires.iter().map(|f| f.1.as_str()).collect();
    let mut saved: Vec<&str> = inputs.iter().map(|i| i.0.as_str()).collect();
    named.sort_unstable();
    saved.sort_unstable();
    assert_eq!(named, saved);
    let types = holdfast_tests::event_schemas::assert_saved_events_match(&client).await;
    assert!(types.contains("schedule.fired"));
}

/// `30 2 * * *` in Europe/Berlin: 02:30 local time, which is 01:30Z in
/// winter and 00:30Z in summer; the spring-forward night (29 March 2026,
/// 02:00 -> 03:00) has no 02:30 and fires at 03:00 local (01:00Z), and the
/// fall-back night (25 October 2026) has two and fires at the first.
fn berlin_0230() -> Timing {
    Timing {
        recurrence: Recurrence::Cron {
            cron: Box::new(schedule::parse_cron("30 2 * * *").unwrap()),
            zone: schedule::parse_zone("Europe/Berlin").unwrap(),
        },
        start_at: None,
        created_at: "2026-03-01T00:00:00Z".parse().unwrap(),
        end_at: None,
    }
}

fn slots_from(timing: &Timing, from: &str, n: usize) -> Vec<String> {
    let mut at: DateTime<Utc> = from.parse().unwrap();
    let mut slots = Vec::new();
    for _ in 0..n {
        at = timing.next_after(at).unwrap();
        slots.push(at.to_rfc3339());
    }
    slots
}

#[tokio::test]
async fn a_cron_schedule_in_berlin_fires_at_the_local_instants_across_both_dst_changes() {
    let timing = berlin_0230();
    assert_eq!(
        slots_from(&timing, "2026-03-27T12:00:00Z", 4),
        [
            "2026-03-28T01:30:00+00:00",
            "2026-03-29T01:00:00+00:00",
            "2026-03-30T00:30:00+00:00",
            "2026-03-31T00:30:00+00:00",
        ]
    );
    assert_eq!(
        slots_from(&timing, "2026-10-23T12:00:00Z", 4),
        [
            "2026-10-24T00:30:00+00:00",
            "2026-10-25T00:30:00+00:00",
            "2026-10-26T01:30:00+00:00",
            "2026-10-27T01:30:00+00:00",
        ]
    );
    // Weekdays at 08:00 in New York (DST starts 8 March 2026): 13:00Z, then 12:00Z.
    let weekdays = Timing {
        recurrence: Recurrence::Cron {
            cron: Box::new(schedule::parse_cron("0 8 * * 1-5").unwrap()),
            zone: schedule::parse_zone("America/New_York").unwrap(),
        },
        ..berlin_0230()
    };
    assert_eq!(
        slots_from(&weekdays, "2026-03-05T12:00:00Z", 3),
        [
            "2026-03-05T13:00:00+00:00",
            "2026-03-06T13:00:00+00:00",
            "2026-03-09T12:00:00+00:00",
        ]
    );
}

/// The same instants from a real maintenance process: the database clock
/// (`holdfast.clock_offset`, read by every new session) is set to a few
/// seconds before the spring-forward gap, and the process fires the slot
/// at 01:00Z and plans the next at 00:30Z the day after.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn maintenance_fires_the_slot_after_the_spring_forward_gap_and_plans_the_summer_one() {
    build_binary().await;
    let db = TestDb::new().await;
    let setup = db.connect().await;
    let gap: DateTime<Utc> = "2026-03-29T01:00:00Z".parse().unwrap();
    let offset = (gap - TimeDelta::seconds(3)) - Utc::now();
    setup
        .batch_execute(&format!(
            "ALTER DATABASE {} SET holdfast.clock_offset = '{} milliseconds'",
            db.name,
            offset.num_milliseconds()
        ))
        .await
        .unwrap();
    let client = db.connect().await;
    let project = store::ensure_project(&client, &format!("p{}", Uuid::new_v4().simple()))
        .await
        .unwrap();
    let agent = new_agent(&client, project).await;
    let now: DateTime<Utc> = client
        .query_one("SELECT holdfast.now()", &[])
        .await
        .unwrap()
        .get(0);
    assert!(
        now < gap && now > gap - TimeDelta::seconds(10),
        "clock at {now}"
    );
    let timing = berlin_0230();
    let created = store::create_schedule(
        &client,
        project,
        &NewSchedule {
            agent_id: agent,
            cron: Some("30 2 * * *".into()),
            timezone: "Europe/Berlin".into(),
            every: None,
            content: json!("night run"),
            mode: InputMode::Queue,
            start_at: None,
            end_at: None,
            missed: MissedPolicy::Skip,
            next_fire_at: timing.first_at_or_after(now),
        },
    )
    .await
    .unwrap();
    assert_eq!(created.next_fire_at, Some(gap));
    let id = created.id.to_string();
    let _maintenance = maintenance("schedules-dst", &db, &[]);
    wait_until(Duration::from_secs(30), "the gap's fire", || async {
        fire_count(&client, &id).await == 1
    })
    .await;
    let fires = fired(&client, &id).await;
    assert_eq!(fires.len(), 1);
    assert_eq!(fires[0].0, gap);
    assert!(!fires[0].2, "on time");
    let stored = store::list_schedules(&client, project, agent)
        .await
        .unwrap();
    assert_eq!(
        stored[0].next_fire_at,
        Some("2026-03-30T00:30:00Z".parse().unwrap())
    );
}

/// How long maintenance is down: 30 s, many times the test's
/// `HOLDFAST_SCHEDULE_LATE_AFTER` of 2 s, and thirty slots of the
/// every-second schedule.
const DOWNTIME: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn after_maintenance_downtime_once_fires_once_and_skip_skips() {
    build_binary().await;
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let agent = new_agent(&client, project).await;
    let server = ApiServer::start(&db).await;
    let late_after = [("HOLDFAST_SCHEDULE_LATE_AFTER", "2s")];
    let mut running = maintenance("schedules-before", &db, &late_after);
    let fast = create_schedule(
        &server,
        &key,
        agent,
        json!({"every": "1s", "input": {"content": "fast"}, "missed": "once"}),
    )
    .await;
    let fast = fast["id"].as_str().unwrap().to_owned();
    wait_until(
        Duration::from_secs(30),
        "the fast schedule fires",
        || async { fire_count(&client, &fast).await >= 2 },
    )
    .await;
    running.signal("KILL");
    running.wait_exit(Duration::from_secs(10)).await;
    let killed = Utc::now();
    // Hourly schedules whose first slot comes during the downtime.
    let start = (killed + TimeDelta::seconds(2)).to_rfc3339();
    let mut hourly = Vec::new();
    for missed in ["once", "skip"] {
        let created = create_schedule(
            &server,
            &key,
            agent,
            json!({"every": "1h", "start_at": start, "missed": missed,
                   "input": {"content": format!("hourly {missed}")}}),
        )
        .await;
        hourly.push((
            created["id"].as_str().unwrap().to_owned(),
            at(&created["start_at"]),
        ));
    }
    let fires_before = fired(&client, &fast).await;
    tokio::time::sleep(DOWNTIME).await;
    let restarted_at = Utc::now();
    let _running = maintenance("schedules-after", &db, &late_after);
    let ((once, once_start), (skip, _)) = (&hourly[0], &hourly[1]);
    wait_until(
        Duration::from_secs(30),
        "maintenance catches up",
        || async {
            fire_count(&client, once).await == 1
                && !skipped(&client, skip).await.is_empty()
                && fired(&client, &fast).await.len() > fires_before.len()
        },
    )
    .await;
    for id in [&fast, once, skip] {
        pause(&server, &key, agent, id).await;
    }

    // once: the missed hourly slot fires once, late, with its one input.
    let once_fires = fired(&client, once).await;
    assert_eq!(once_fires.len(), 1);
    assert_eq!(once_fires[0].0, *once_start);
    assert!(once_fires[0].2, "fired late");
    assert_eq!(scheduled_inputs(&client, once).await.len(), 1);
    // skip: nothing fired, the slot recorded as skipped.
    assert!(fired(&client, skip).await.is_empty());
    assert!(scheduled_inputs(&client, skip).await.is_empty());
    let skips = skipped(&client, skip).await;
    assert_eq!(skips.len(), 1);
    assert_eq!(skips[0].0, "missed");
    // The every-second schedule: the ~30 slots of the downtime gave one
    // fire, not one per slot, and one skipped record covering the rest.
    let fast_fires = fired(&client, &fast).await;
    let last_before = fires_before.last().unwrap().0;
    let after: Vec<_> = fast_fires.iter().filter(|f| f.0 > last_before).collect();
    let first_after = after.first().unwrap().0;
    assert!(
        first_after > last_before + TimeDelta::seconds(DOWNTIME.as_secs() as i64 - 2),
        "the first fire after the restart ({first_after}) comes after the downtime (last before {last_before})"
    );
    assert!(first_after <= restarted_at + TimeDelta::seconds(5));
    let fast_skips = skipped(&client, &fast).await;
    assert_eq!(fast_skips.len(), 1, "{fast_skips:?}");
    assert_eq!(fast_skips[0].0, "missed");
    assert_eq!(fast_skips[0].1, last_before + TimeDelta::seconds(1));
    assert_eq!(fast_skips[0].2, first_after);
    let types = holdfast_tests::event_schemas::assert_saved_events_match(&client).await;
    assert!(types.contains("schedule.fired"));
}

#[tokio::test]
async fn bad_schedules_are_refused_naming_the_field_and_write_nothing() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let agent = new_agent(&client, project).await;
    let server = ApiServer::start(&db).await;
    let cases = [
        (
            json!({"cron": "61 * * * *", "input": {"content": "x"}}),
            "cron",
        ),
        (
            json!({"cron": "0 8 * * *", "timezone": "Mars/Olympus", "input": {"content": "x"}}),
            "timezone",
        ),
        (
            json!({"every": "500ms", "input": {"content": "x"}}),
            "every",
        ),
        (
            json!({"every": "1s", "cron": "* * * * *", "input": {"content": "x"}}),
            "cron",
        ),
        (json!({"input": {"content": "x"}}), "cron"),
        (
            json!({"every": "1m", "start_at": "2030-01-02T00:00:00Z", "end_at": "2030-01-01T00:00:00Z",
                   "input": {"content": "x"}}),
            "end_at",
        ),
        (
            json!({"every": "1m", "input": {"content": ""}}),
            "input.content",
        ),
        (
            json!({"every": "1m", "input": {"content": "x", "mode": "interrupt"}}),
            "input.mode",
        ),
        (
            json!({"every": "1m", "missed": "twice", "input": {"content": "x"}}),
            "missed",
        ),
    ];
    for (body, field) in cases {
        let response = server
            .request(Method::POST, &format!("/v1/agents/{agent}/schedules"), &key)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status();
        let error: Value = response.json().await.unwrap();
        assert!(status.is_client_error(), "{body}: {status}");
        assert_eq!(error["error"]["field"], field, "{body}: {error}");
    }
    let count: i64 = client
        .query_one("SELECT count(*) FROM holdfast.schedules", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(count, 0, "nothing was written");
    // Another project's agent, and a missing schedule, are 404.
    let (_, other_key) = project_key(&client).await;
    let response = server
        .request(
            Method::POST,
            &format!("/v1/agents/{agent}/schedules"),
            &other_key,
        )
        .json(&json!({"every": "1m", "input": {"content": "x"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let missing = Uuid::new_v4();
    for method in [Method::GET, Method::DELETE] {
        let response = server
            .request(
                method,
                &format!("/v1/agents/{agent}/schedules/{missing}"),
                &key,
            )
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
    }
}

#[tokio::test]
async fn a_schedule_is_listed_paused_resumed_and_deleted() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let agent = new_agent(&client, project).await;
    let server = ApiServer::start(&db).await;
    let created = create_schedule(
        &server,
        &key,
        agent,
        json!({"cron": "0 8 * * 1-5", "timezone": "Europe/Berlin",
               "input": {"content": "summarise the overnight tickets"}}),
    )
    .await;
    let id = created["id"].as_str().unwrap();
    assert_eq!(created["input"]["mode"], "queue");
    assert_eq!(created["missed"], "skip");
    let next = at(&created["next_fire_at"]);
    assert!(next > Utc::now());
    let list: Value = server
        .request(Method::GET, &format!("/v1/agents/{agent}/schedules"), &key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list["schedules"][0]["id"], id);
    pause(&server, &key, agent, id).await;
    let resumed: Value = server
        .request(
            Method::PATCH,
            &format!("/v1/agents/{agent}/schedules/{id}"),
            &key,
        )
        .json(&json!({"paused": false}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(resumed["state"], "active");
    assert_eq!(at(&resumed["next_fire_at"]), next);
    let deleted = server
        .request(
            Method::DELETE,
            &format!("/v1/agents/{agent}/schedules/{id}"),
            &key,
        )
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    let gone = server
        .request(
            Method::GET,
            &format!("/v1/agents/{agent}/schedules/{id}"),
            &key,
        )
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), StatusCode::NOT_FOUND);
}
