//! Retention and time partitions (sql/schema/retention.sql):
//! the events of finished agents past their project's retention go,
//! with their delivered webhook deliveries and their tool outputs, by whole
//! partitions where every row may go and row by row elsewhere; an agent with
//! an open turn, a pending delivery, a compaction's summary, an archived
//! agent's row and every agent's messages stay. Old inputs' contents go,
//! and the attachments nothing kept references, never a file the agent's
//! next model call sends. Set from the CLI.
//!
//! History is made old the way the rest of the suite moves time: the
//! session's `holdfast.clock_offset`, which `holdfast.now()` (every
//! `created_at` default) adds.

use std::time::Duration;

use holdfast_db::store;
use holdfast_tests::process::holdfast_bin;
use holdfast_tests::scenario::pending_inputs;
use holdfast_tests::{new_agent, TestDb};
use holdfast_wire::domain::{ModelStep, NewToolCall, ToolKind};
use serde_json::{json, Value};
use tokio_postgres::Client;
use uuid::Uuid;

const LEASE: Duration = Duration::from_secs(60);

async fn new_project(client: &Client) -> (Uuid, String) {
    let name = format!("p{}", Uuid::new_v4().simple());
    let id: Uuid = client
        .query_one("SELECT holdfast.ensure_project($1)", &[&name])
        .await
        .unwrap()
        .get(0);
    (id, name)
}

async fn set_clock(client: &Client, offset: &str) {
    client
        .batch_execute(&format!("SET holdfast.clock_offset = '{offset}'"))
        .await
        .unwrap();
}

async fn claim(client: &Client, agent: Uuid) -> holdfast_wire::domain::Claim {
    let claims = store::claim_agents(client, "w-retention", 100, LEASE)
        .await
        .unwrap();
    let claim = claims.iter().find(|c| c.agent_id == agent).copied();
    for other in claims.iter().filter(|c| c.agent_id != agent) {
        store::release_agent(client, *other, None).await.unwrap();
    }
    claim.expect("the agent is claimable")
}

fn text_step(inputs: Vec<Uuid>, text: &str) -> ModelStep {
    ModelStep {
        input_ids: inputs,
        message: vec![json!({"type": "text", "text": text})],
        tool_calls: vec![],
        usage: json!({"input_tokens": 1, "output_tokens": 1}),
        stop_reason: Some("end_turn".into()),
        config_version: None,
    }
}

/// One whole turn: an input, a model step that calls a tool, the tool's
/// result, and a final answer. Returns the tool call's id.
async fn finished_turn_with_a_tool(client: &Client, agent: Uuid) -> Uuid {
    store::create_input(client, agent, &json!("fetch it"), None)
        .await
        .unwrap();
    let c = claim(client, agent).await;
    let step = ModelStep {
        input_ids: pending_inputs(client, agent).await,
        message: vec![json!({"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}})],
        tool_calls: vec![NewToolCall {
            provider_id: "toolu_1".into(),
            name: "lookup".into(),
            input: json!({}),
            kind: ToolKind::Internal,
        }],
        usage: json!({"input_tokens": 1, "output_tokens": 1}),
        stop_reason: Some("tool_use".into()),
        config_version: None,
    };
    store::commit_model_step(client, c, &step).await.unwrap();
    let call: Uuid = client
        .query_one(
            "SELECT id FROM holdfast.tool_calls WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    let c = claim(client, agent).await;
    store::commit_tool_result(client, c, call, &json!("a large tool output"), false)
        .await
        .unwrap();
    store::release_agent(client, c, None).await.unwrap();
    let c = claim(client, agent).await;
    store::commit_model_step(client, c, &text_step(vec![], "done"))
        .await
        .unwrap();
    assert_eq!(state(client, agent).await, ("idle".to_string(), false));
    call
}

/// A turn that opens and never ends: its input waits for a worker.
async fn open_turn(client: &Client, agent: Uuid) {
    store::create_input(client, agent, &json!("still working"), None)
        .await
        .unwrap();
    assert!(state(client, agent).await.1, "the turn is open");
}

async fn state(client: &Client, agent: Uuid) -> (String, bool) {
    let row = client
        .query_one(
            "SELECT state, turn_open FROM holdfast.agents WHERE id = $1",
            &[&agent],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

async fn count(client: &Client, sql: &str, agent: Uuid) -> i64 {
    client.query_one(sql, &[&agent]).await.unwrap().get(0)
}

async fn events(client: &Client, agent: Uuid) -> i64 {
    count(
        client,
        "SELECT count(*) FROM holdfast.events WHERE agent_id = $1",
        agent,
    )
    .await
}

async fn messages(client: &Client, agent: Uuid) -> i64 {
    count(
        client,
        "SELECT count(*) FROM holdfast.messages WHERE agent_id = $1",
        agent,
    )
    .await
}

/// An agent's event, message and delivery counts and its tool outputs.
async fn snapshot(client: &Client, agent: Uuid) -> (i64, i64, i64, Vec<Value>) {
    let outputs = client
        .query(
            "SELECT output FROM holdfast.tool_calls WHERE agent_id = $1 ORDER BY id",
            &[&agent],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    (
        events(client, agent).await,
        messages(client, agent).await,
        count(
            client,
            "SELECT count(*) FROM holdfast.webhook_deliveries WHERE agent_id = $1",
            agent,
        )
        .await,
        outputs,
    )
}

/// Run retention passes until one prunes nothing; returns the summed report.
async fn retention(client: &Client) -> (i32, i64, i64, i64) {
    let mut total = (0, 0, 0, 0);
    loop {
        let r = store::retention_tick(client, 3).await.unwrap();
        total.0 += r.partitions_dropped;
        total.1 += r.events_deleted;
        total.2 += r.deliveries_deleted;
        total.3 += r.tool_outputs_pruned;
        if r.partitions_dropped == 0
            && r.events_deleted == 0
            && r.deliveries_deleted == 0
            && r.tool_outputs_pruned == 0
            && r.inputs_pruned == 0
            && r.attachments_deleted == 0
        {
            return total;
        }
    }
}

async fn partitions(client: &Client) -> Vec<String> {
    client
        .query("SELECT name FROM holdfast.event_partitions()", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruning_spares_open_turns_pending_deliveries_summaries_and_agent_rows() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, name) = new_project(&client).await;
    let (kept_project, _) = new_project(&client).await;
    store::set_project_retention(&client, &name, Some(Duration::from_secs(30 * 86_400)))
        .await
        .unwrap();
    store::create_webhook_endpoint(
        &client,
        project,
        "http://127.0.0.1:9/hook",
        &json!(["turn.completed"]),
        None,
        true,
    )
    .await
    .unwrap();

    // Sixty days ago (no weekly partition covers it: the rows sit in
    // events_default, so they go row by row).
    set_clock(&client, "-60 days").await;
    let finished = new_agent(&client, project).await;
    let call = finished_turn_with_a_tool(&client, finished).await;
    let archived = new_agent(&client, project).await;
    finished_turn_with_a_tool(&client, archived).await;
    store::archive_agent(&client, archived).await.unwrap();
    let compacted = new_agent(&client, project).await;
    store::create_input(&client, compacted, &json!("long history"), None)
        .await
        .unwrap();
    let c = claim(&client, compacted).await;
    store::commit_model_step(
        &client,
        c,
        &text_step(pending_inputs(&client, compacted).await, "first"),
    )
    .await
    .unwrap();
    store::create_input(&client, compacted, &json!("more"), None)
        .await
        .unwrap();
    let c = claim(&client, compacted).await;
    store::commit_compaction(&client, c, "the summary so far", 2, &json!({}))
        .await
        .unwrap();
    let c = claim(&client, compacted).await;
    store::commit_model_step(
        &client,
        c,
        &text_step(pending_inputs(&client, compacted).await, "second"),
    )
    .await
    .unwrap();
    let busy = new_agent(&client, project).await;
    finished_turn_with_a_tool(&client, busy).await;
    open_turn(&client, busy).await;
    let elsewhere = new_agent(&client, kept_project).await;
    finished_turn_with_a_tool(&client, elsewhere).await;
    set_clock(&client, "0").await;
    // Recent history of the finished agent stays too.
    store::create_input(&client, finished, &json!("again"), None)
        .await
        .unwrap();
    let c = claim(&client, finished).await;
    store::commit_model_step(
        &client,
        c,
        &text_step(pending_inputs(&client, finished).await, "recent"),
    )
    .await
    .unwrap();
    // Every turn.completed is delivered but the archived agent's, which
    // stays pending (the outbox).
    let mut delivered = 0;
    loop {
        let claimed = store::claim_webhook_deliveries(&client, 100, LEASE, 100)
            .await
            .unwrap();
        let mut progressed = false;
        for delivery in &claimed {
            if delivery.event.agent_id == archived {
                store::release_webhook_deliveries(
                    &client,
                    &[(delivery.delivery_id, delivery.attempt)],
                )
                .await
                .unwrap();
                continue;
            }
            store::record_webhook_attempt(
                &client,
                delivery,
                Some(200),
                None,
                LEASE,
                Duration::from_secs(86_400),
            )
            .await
            .unwrap();
            delivered += 1;
            progressed = true;
        }
        if !progressed {
            break;
        }
    }
    assert_eq!(delivered, 5);

    let busy_before = snapshot(&client, busy).await;
    let elsewhere_before = snapshot(&client, elsewhere).await;
    let finished_messages = messages(&client, finished).await;
    let finished_recent: i64 = client
        .query_one(
            "SELECT count(*) FROM holdfast.events WHERE agent_id = $1 \
              AND created_at > holdfast.now() - interval '1 day'",
            &[&finished],
        )
        .await
        .unwrap()
        .get(0);

    let (dropped, events_deleted, deliveries_deleted, outputs) = retention(&client).await;
    assert_eq!(dropped, 0, "no weekly partition held these rows");
    assert!(events_deleted > 0 && outputs > 0, "something was pruned");
    // The finished agent's old one and the compacted agent's two; not the
    // archived agent's pending one, the busy agent's or today's.
    assert_eq!(deliveries_deleted, 3);

    // The finished agent: old events, its delivery and its tool output are
    // gone; its recent events, messages and tool call row remain.
    assert_eq!(events(&client, finished).await, finished_recent);
    assert_eq!(messages(&client, finished).await, finished_messages);
    let (output, pruned_at): (Value, Option<chrono::DateTime<chrono::Utc>>) = {
        let row = client
            .query_one(
                "SELECT output, output_pruned_at FROM holdfast.tool_calls WHERE id = $1",
                &[&call],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(output, Value::Null);
    assert!(pruned_at.is_some());
    // The archived agent: its row stays, and the one event its pending
    // delivery sends stays with it.
    assert_eq!(state(&client, archived).await.0, "archived");
    let left: Vec<String> = client
        .query(
            "SELECT type FROM holdfast.events WHERE agent_id = $1",
            &[&archived],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(left, vec!["turn.completed".to_string()]);
    let pending = count(
        &client,
        "SELECT count(*) FROM holdfast.webhook_deliveries WHERE agent_id = $1 AND status = 'pending'",
        archived,
    )
    .await;
    assert_eq!(pending, 1);
    // The compacted agent keeps its summary and its messages.
    let summary: Option<String> = client
        .query_one(
            "SELECT context_summary FROM holdfast.agents WHERE id = $1",
            &[&compacted],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(summary.as_deref(), Some("the summary so far"));
    assert_eq!(events(&client, compacted).await, 0);
    assert!(messages(&client, compacted).await > 0);
    // An open turn keeps everything; so does a project without retention.
    assert_eq!(snapshot(&client, busy).await, busy_before);
    assert_eq!(snapshot(&client, elsewhere).await, elsewhere_before);

    // The busy agent resumes: its turn runs on, its seqs continue.
    let last_seq = store::last_event_seq(&client, busy).await.unwrap().unwrap();
    let c = claim(&client, busy).await;
    store::commit_model_step(
        &client,
        c,
        &text_step(pending_inputs(&client, busy).await, "resumed"),
    )
    .await
    .unwrap();
    assert!(store::last_event_seq(&client, busy).await.unwrap().unwrap() > last_seq);
    // A pruned agent takes a new turn as before.
    store::create_input(&client, compacted, &json!("hello again"), None)
        .await
        .unwrap();
    let c = claim(&client, compacted).await;
    store::commit_model_step(
        &client,
        c,
        &text_step(pending_inputs(&client, compacted).await, "hi"),
    )
    .await
    .unwrap();
    assert_eq!(state(&client, compacted).await, ("idle".to_string(), false));
    assert!(events(&client, compacted).await > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_partition_is_dropped_whole_unless_a_row_in_it_must_stay() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, name) = new_project(&client).await;
    store::set_project_retention(&client, &name, Some(Duration::from_secs(20 * 86_400)))
        .await
        .unwrap();
    client
        .execute(
            "SELECT holdfast.ensure_event_partitions(holdfast.now() - interval '70 days', holdfast.now())",
            &[],
        )
        .await
        .unwrap();
    let week = |offset: &str| {
        let offset = offset.to_string();
        let client = &client;
        async move {
            client
                .query_one(
                    &format!(
                        "SELECT 'events_w' || to_char(date_trunc('week', \
                         (holdfast.now() + interval '{offset}') AT TIME ZONE 'UTC'), 'YYYYMMDD')"
                    ),
                    &[],
                )
                .await
                .unwrap()
                .get::<_, String>(0)
        }
    };
    let finished_week = week("-60 days").await;
    let busy_week = week("-45 days").await;

    set_clock(&client, "-60 days").await;
    let finished = new_agent(&client, project).await;
    finished_turn_with_a_tool(&client, finished).await;
    set_clock(&client, "-45 days").await;
    let busy = new_agent(&client, project).await;
    finished_turn_with_a_tool(&client, busy).await;
    open_turn(&client, busy).await;
    set_clock(&client, "0").await;
    let busy_events = events(&client, busy).await;
    let names = partitions(&client).await;
    assert!(names.contains(&finished_week) && names.contains(&busy_week));

    let (dropped, ..) = retention(&client).await;
    assert!(dropped >= 1);
    let names = partitions(&client).await;
    assert!(
        !names.contains(&finished_week),
        "{finished_week} dropped: {names:?}"
    );
    assert!(
        names.contains(&busy_week),
        "{busy_week} holds an open turn: {names:?}"
    );
    assert_eq!(events(&client, finished).await, 0);
    assert_eq!(events(&client, busy).await, busy_events);
    assert!(messages(&client, finished).await > 0);

    // The busy agent finishes; its week may go on the next pass.
    let c = claim(&client, busy).await;
    store::commit_model_step(
        &client,
        c,
        &text_step(pending_inputs(&client, busy).await, "done"),
    )
    .await
    .unwrap();
    retention(&client).await;
    assert!(!partitions(&client).await.contains(&busy_week));
    let recent: i64 = client
        .query_one(
            "SELECT count(*) FROM holdfast.events WHERE agent_id = $1",
            &[&busy],
        )
        .await
        .unwrap()
        .get(0);
    assert!(recent > 0, "today's events of the busy agent stay");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_is_set_from_the_cli_and_from_sql_and_bad_values_change_nothing() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (_, name) = new_project(&client).await;
    let url = db.url();
    let run = |args: Vec<&str>| {
        let output = std::process::Command::new(holdfast_bin())
            .args(&args)
            .env("HOLDFAST_DATABASE_URL", &url)
            .env("HOLDFAST_LOG", "warn")
            .output()
            .expect("run holdfast");
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let retention = || async {
        client
            .query_one(
                "SELECT extract(epoch FROM retention_events)::bigint FROM holdfast.projects WHERE name = $1",
                &[&name],
            )
            .await
            .unwrap()
            .get::<_, Option<i64>>(0)
    };
    let (code, stdout, stderr) = run(vec!["projects", "retention", &name, "--events", "30d"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("30d"), "{stdout}");
    assert_eq!(retention().await, Some(30 * 86_400));
    let (code, _, stderr) = run(vec!["projects", "retention", &name, "--events", "0d"]);
    assert_eq!(code, Some(2), "a usage error: {stderr}");
    assert_eq!(retention().await, Some(30 * 86_400), "unchanged");
    let (code, _, _) = run(vec!["projects", "retention", "no-such", "--events", "1d"]);
    assert_eq!(code, Some(1));
    let (code, stdout, _) = run(vec!["projects", "retention", &name, "--events", "forever"]);
    assert_eq!(code, Some(0));
    assert!(stdout.contains("forever"), "{stdout}");
    assert_eq!(retention().await, None);

    let err = client
        .execute(
            "SELECT holdfast.set_project_retention($1, interval '-1 day')",
            &[&name],
        )
        .await
        .unwrap_err();
    let db_err = err.as_db_error().unwrap();
    assert_eq!(db_err.code().code(), "HF422");
    assert_eq!(db_err.column(), Some("retention_events"));
    assert_eq!(retention().await, None, "unchanged");
    client
        .execute(
            "SELECT holdfast.set_project_retention($1, interval '12 hours')",
            &[&name],
        )
        .await
        .unwrap();
    assert_eq!(retention().await, Some(12 * 3600));
}

/// A PNG of `n` bytes (its signature, then filler `fill`), as base64.
fn png_base64(n: usize, fill: u8) -> String {
    use base64::Engine;
    let mut bytes = b"\x89PNG\r\n\x1a\n".to_vec();
    bytes.resize(n, fill);
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn image(data: &str) -> Value {
    json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}})
}

/// One whole turn: an input carrying `input_image`, a tool call whose
/// result carries `tool_image`, and a final answer.
async fn finished_turn_with_images(
    client: &Client,
    agent: Uuid,
    input_image: &str,
    tool_image: &str,
) {
    store::create_input(
        client,
        agent,
        &json!([{"type": "text", "text": "look"}, image(input_image)]),
        Some(&format!("key-{agent}")),
    )
    .await
    .unwrap();
    let c = claim(client, agent).await;
    let step = ModelStep {
        input_ids: pending_inputs(client, agent).await,
        message: vec![json!({"type": "tool_use", "id": "toolu_1", "name": "chart", "input": {}})],
        tool_calls: vec![NewToolCall {
            provider_id: "toolu_1".into(),
            name: "chart".into(),
            input: json!({}),
            kind: ToolKind::Internal,
        }],
        usage: json!({"input_tokens": 1, "output_tokens": 1}),
        stop_reason: Some("tool_use".into()),
        config_version: None,
    };
    store::commit_model_step(client, c, &step).await.unwrap();
    let call: Uuid = client
        .query_one(
            "SELECT id FROM holdfast.tool_calls WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    let c = claim(client, agent).await;
    store::commit_tool_result(client, c, call, &json!([image(tool_image)]), false)
        .await
        .unwrap();
    store::release_agent(client, c, None).await.unwrap();
    let c = claim(client, agent).await;
    store::commit_model_step(client, c, &text_step(vec![], "done"))
        .await
        .unwrap();
    assert_eq!(state(client, agent).await, ("idle".to_string(), false));
}

async fn project_bytes(client: &Client, project: Uuid) -> i64 {
    client
        .query_one(
            "SELECT bytes FROM holdfast.project_attachment_bytes WHERE project_id = $1",
            &[&project],
        )
        .await
        .unwrap()
        .get(0)
}

/// An agent's attachments (by size, which tells the test's files apart),
/// its stored-bytes total, and its inputs' contents.
async fn files_and_inputs(client: &Client, agent: Uuid) -> (Vec<i32>, i64, Vec<Value>) {
    let sizes = client
        .query(
            "SELECT size_bytes FROM holdfast.attachments WHERE agent_id = $1 ORDER BY size_bytes",
            &[&agent],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let total = client
        .query_one(
            "SELECT attachment_bytes FROM holdfast.agents WHERE id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    let inputs = client
        .query(
            "SELECT content FROM holdfast.inputs WHERE agent_id = $1 ORDER BY created_at",
            &[&agent],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    (sizes, total, inputs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_prunes_old_inputs_and_unreferenced_attachments_and_keeps_the_next_calls_files() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, name) = new_project(&client).await;
    let (kept_project, _) = new_project(&client).await;
    store::set_project_retention(&client, &name, Some(Duration::from_secs(30 * 86_400)))
        .await
        .unwrap();
    // Sizes tell the files apart: 100 and 200 bytes for the idle agent's
    // input and tool images, 300 and 400 for the archived agent's, 500 and
    // 600 for the agent that is still working, 700 and 800 elsewhere.
    set_clock(&client, "-60 days").await;
    let idle = new_agent(&client, project).await;
    finished_turn_with_images(&client, idle, &png_base64(100, 1), &png_base64(200, 2)).await;
    let archived = new_agent(&client, project).await;
    finished_turn_with_images(&client, archived, &png_base64(300, 3), &png_base64(400, 4)).await;
    store::archive_agent(&client, archived).await.unwrap();
    let busy = new_agent(&client, project).await;
    finished_turn_with_images(&client, busy, &png_base64(500, 5), &png_base64(600, 6)).await;
    open_turn(&client, busy).await;
    let elsewhere = new_agent(&client, kept_project).await;
    finished_turn_with_images(&client, elsewhere, &png_base64(700, 7), &png_base64(800, 8)).await;
    set_clock(&client, "0").await;
    let busy_before = files_and_inputs(&client, busy).await;
    let elsewhere_before = files_and_inputs(&client, elsewhere).await;
    assert_eq!(busy_before.0, vec![500, 600]);
    assert_eq!(project_bytes(&client, project).await, 2100);

    let report = {
        let mut inputs = 0;
        let mut attachments = 0;
        loop {
            let r = store::retention_tick(&client, 3).await.unwrap();
            inputs += r.inputs_pruned;
            attachments += r.attachments_deleted;
            if r.inputs_pruned == 0
                && r.attachments_deleted == 0
                && r.events_deleted == 0
                && r.tool_outputs_pruned == 0
                && r.deliveries_deleted == 0
            {
                break (inputs, attachments);
            }
        }
    };
    // The idle and archived agents' inputs; the idle agent's tool image and
    // both of the archived agent's files.
    assert_eq!(report, (2, 3));

    // The idle agent may run again: the image of its history (what its
    // next model call sends) stays; the tool image, whose output was
    // pruned, goes; its input's content is JSON null.
    let (files, total, inputs) = files_and_inputs(&client, idle).await;
    assert_eq!(files, vec![100]);
    assert_eq!(total, 100, "the agent's total follows the deletes");
    assert_eq!(inputs, vec![Value::Null]);
    let history_image: i64 = client
        .query_one(
            "SELECT count(*) FROM holdfast.messages m \
              WHERE m.agent_id = $1 AND m.content @? '$[*].source ? (@.type == \"attachment\")'",
            &[&idle],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        history_image, 1,
        "the message still references the kept file"
    );
    // The archived agent never runs again: every file goes.
    let (files, total, inputs) = files_and_inputs(&client, archived).await;
    assert_eq!((files, total, inputs), (vec![], 0, vec![Value::Null]));
    assert_eq!(project_bytes(&client, project).await, 100 + 500 + 600);
    // An open turn, and a project without retention, keep everything.
    assert_eq!(files_and_inputs(&client, busy).await, busy_before);
    assert_eq!(files_and_inputs(&client, elsewhere).await, elsewhere_before);

    // A replay of a pruned input's key is answered as the replay it is.
    let replay = store::create_input(
        &client,
        idle,
        &json!([{"type": "text", "text": "look"}, image(&png_base64(100, 1))]),
        Some(&format!("key-{idle}")),
    )
    .await
    .unwrap();
    assert!(replay.replayed);
    // The idle agent's next turn still sends its history's image.
    let files = client
        .query(
            "SELECT id FROM holdfast.attachments WHERE agent_id = $1",
            &[&idle],
        )
        .await
        .unwrap();
    let loaded = store::load_request_files(&client, idle, &[files[0].get(0)])
        .await
        .unwrap();
    assert_eq!(loaded.total_bytes(), 100);
}

/// A writer holds its project's attachment counter (as an input storing
/// files does until it commits) and then appends an event, while a pass
/// creates a partition and prunes that project's files: the pass must not
/// hold the partition's lock on `events` while it waits for the counter,
/// or each waits for the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retention_pass_never_waits_on_a_writer_while_holding_a_partitions_lock() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, name) = new_project(&client).await;
    let (elsewhere, _) = new_project(&client).await;
    store::set_project_retention(&client, &name, Some(Duration::from_secs(30 * 86_400)))
        .await
        .unwrap();
    set_clock(&client, "-60 days").await;
    let archived = new_agent(&client, project).await;
    finished_turn_with_images(&client, archived, &png_base64(300, 3), &png_base64(400, 4)).await;
    store::archive_agent(&client, archived).await.unwrap();
    set_clock(&client, "0").await;
    let other = new_agent(&client, elsewhere).await;
    // Next week's partition is missing, so the pass creates it.
    let next_week: String = client
        .query_one(
            "SELECT 'events_w' || to_char(date_trunc('week', (holdfast.now() + interval '7 days')
                                                           AT TIME ZONE 'UTC'), 'YYYYMMDD')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    if partitions(&client).await.contains(&next_week) {
        client
            .batch_execute(&format!(
                "ALTER TABLE holdfast.events DETACH PARTITION holdfast.{next_week};
                 DROP TABLE holdfast.{next_week}"
            ))
            .await
            .unwrap();
    }

    let writer = db.connect().await;
    writer.batch_execute("BEGIN").await.unwrap();
    writer
        .execute(
            "UPDATE holdfast.project_attachment_bytes SET bytes = bytes WHERE project_id = $1",
            &[&project],
        )
        .await
        .unwrap();
    let retention = db.connect().await;
    let pass = tokio::spawn(async move {
        let report = store::retention_tick(&retention, 100).await;
        (retention, report)
    });
    // The pass prunes the archived agent's files: it waits for the counter.
    holdfast_tests::wait_for_lock_wait(&client, &db.name).await;
    writer
        .execute(
            "SELECT holdfast.append_event($1, 'input.received', '{}')",
            &[&other],
        )
        .await
        .expect("the writer's event is not held up by the pass");
    writer.batch_execute("COMMIT").await.unwrap();
    let (_retention, report) = pass.await.unwrap();
    let report = report
        .map_err(|e| e.to_string())
        .expect("the pass ends well");
    assert_eq!(report.partitions_created, 1, "{report:?}");
    assert_eq!(report.attachments_deleted, 2, "{report:?}");
    assert!(partitions(&client).await.contains(&next_week));
}
