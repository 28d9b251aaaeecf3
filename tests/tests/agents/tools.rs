//! Tools through real worker processes: external IO never rerun after a
//! crash, waits that hold no worker, subagents created once, bad tool input.

use std::time::Duration;

use holdfast_db::store;
use holdfast_fakes::{FakeProvider, Reply};
use holdfast_tests::counting_http::CountingServer;
use holdfast_tests::mcp_server::McpTestServer;
use holdfast_tests::scenario::{
    agent_state, agent_with_config, answer_waiting_call, count_events, last_event_data, saved_text,
    spawn_worker, start_turn, wait_for_event, wait_for_events,
};
use holdfast_tests::{wait_for_lock_wait, wait_until, MaintenanceLoop, TestDb};
use holdfast_wire::domain::{ModelStep, NewToolCall, ToolKind};
use serde_json::{json, Value};
use tokio_postgres::Client;
use uuid::Uuid;

const T: Duration = Duration::from_secs(30);
/// The site and MCP servers of these tests listen on loopback, which the
/// egress policy refuses unless the operator allows it.
const ALLOW_LOOPBACK: (&str, &str) = ("HOLDFAST_EGRESS_ALLOW", "web_fetch=127.0.0.1,mcp=127.0.0.1");

async fn tool_call(client: &Client, agent: Uuid, name: &str) -> (Uuid, String, Option<Value>) {
    let row = client
        .query_one(
            "SELECT id, status, output FROM holdfast.tool_calls WHERE agent_id = $1 AND name = $2",
            &[&agent, &name],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_killed_mid_web_fetch_never_fetches_again_and_the_model_is_told() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    let site = CountingServer::start().await;
    fake.push(Reply::tool_calls(vec![(
        "web_fetch",
        json!({"url": site.url("/hold/page")}),
    )]));
    fake.push(Reply::text("I could not tell whether that worked."));
    let _maintenance = MaintenanceLoop::start(&db.config);
    let w1 = spawn_worker("w-fetch-1", &db.config, &fake, &[ALLOW_LOOPBACK]);
    let agent = start_turn(&client, json!([{"type": "web_fetch"}]), "fetch it").await;
    site.wait_for_hits("/hold/page", 1).await;
    let (_, status, _) = tool_call(&client, agent, "web_fetch").await;
    assert_eq!(status, "running", "marked running before the IO");
    w1.signal("KILL");

    let _w2 = spawn_worker("w-fetch-2", &db.config, &fake, &[ALLOW_LOOPBACK]);
    wait_for_event(&client, agent, "turn.completed", T).await;
    site.release_held();
    assert_eq!(
        site.hits("/hold/page"),
        1,
        "the fetch happened once, never again"
    );
    assert_eq!(
        count_events(&client, agent, "tool_call.interrupted").await,
        1
    );
    let retried = fake.last_request().unwrap().body.to_string();
    assert!(
        retried.contains("Tool call was interrupted; its external outcome is unknown."),
        "{retried}"
    );
    // What these turns wrote matches the OpenAPI document's event schemas.
    holdfast_tests::event_schemas::assert_saved_events_match(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_killed_mid_mcp_call_never_calls_again_and_the_model_is_told() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    let mcp = McpTestServer::start().await;
    mcp.hold_calls();
    fake.push(Reply::tool_calls(vec![(
        "counter__increment",
        json!({"by": 1}),
    )]));
    fake.push(Reply::text("Done, maybe."));
    let _maintenance = MaintenanceLoop::start(&db.config);
    let w1 = spawn_worker("w-mcp-1", &db.config, &fake, &[ALLOW_LOOPBACK]);
    let agent = start_turn(
        &client,
        json!([{"type": "mcp", "name": "counter", "url": mcp.url}]),
        "count",
    )
    .await;
    mcp.wait_for_increment_calls(1).await;
    w1.signal("KILL");

    let _w2 = spawn_worker("w-mcp-2", &db.config, &fake, &[ALLOW_LOOPBACK]);
    wait_for_event(&client, agent, "turn.completed", T).await;
    mcp.release_calls();
    assert_eq!(
        mcp.increment_calls(),
        1,
        "the MCP tool was called once, never again"
    );
    assert_eq!(
        count_events(&client, agent, "tool_call.interrupted").await,
        1
    );
    // The model saw the server's tools under the prefix, and the interruption.
    let first = fake.requests()[0].body.to_string();
    assert!(first.contains("counter__increment"), "{first}");
    let retried = fake.last_request().unwrap().body.to_string();
    assert!(retried.contains("Tool call was interrupted"), "{retried}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waits_survive_a_worker_kill_hold_no_worker_and_answers_resume_the_agent() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    fake.push(Reply::tool_calls(vec![
        ("lookup", json!({"id": 7})),
        ("ask_user", json!({"question": "Which region?"})),
        ("deploy", json!({})),
    ]));
    fake.push(Reply::text("All three answered."));
    let tools = json!([
        {"type": "custom", "name": "lookup", "input_schema": {"type": "object", "properties": {"id": {"type": "integer"}}}},
        {"type": "ask_user"},
        {"type": "custom", "name": "deploy"}
    ]);
    let agent = agent_with_config(
        &client,
        &json!({"model": {"provider": "anthropic", "name": "claude-test"}, "tools": tools,
                "approvals": {"require_for": ["deploy"]}}),
    )
    .await;
    let _maintenance = MaintenanceLoop::start(&db.config);
    let w1 = spawn_worker("w-wait-1", &db.config, &fake, &[ALLOW_LOOPBACK]);
    store::create_input(&client, agent, &json!("go"), None)
        .await
        .unwrap();
    wait_for_event(&client, agent, "approval.requested", T).await;
    assert_eq!(agent_state(&client, agent).await, "waiting");
    let held: i64 = client
        .query_one(
            "SELECT count(*) FROM holdfast.agents WHERE state = 'running'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(held, 0, "no worker is busy while the agent waits");
    w1.signal("KILL");
    let events_before = count_events(&client, agent, "model.response").await;

    // Answers arrive later, with a new worker.
    let _w2 = spawn_worker("w-wait-2", &db.config, &fake, &[ALLOW_LOOPBACK]);
    let (lookup, _, _) = tool_call(&client, agent, "lookup").await;
    store::submit_tool_result(&client, lookup, &json!({"name": "seven"}), false)
        .await
        .unwrap();
    let question: Uuid = client
        .query_one(
            "SELECT id FROM holdfast.questions WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    store::answer_question(&client, question, "eu-west", "ann")
        .await
        .unwrap();
    assert_eq!(
        agent_state(&client, agent).await,
        "waiting",
        "the approval still waits"
    );
    let approval: Uuid = client
        .query_one(
            "SELECT id FROM holdfast.approvals WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    store::answer_approval(&client, approval, "approve", "ann", None)
        .await
        .unwrap();
    let (deploy, _, _) = tool_call(&client, agent, "deploy").await;
    store::submit_tool_result(&client, deploy, &json!("deployed"), false)
        .await
        .unwrap();

    wait_for_event(&client, agent, "turn.completed", T).await;
    assert_eq!(
        count_events(&client, agent, "model.response").await,
        events_before + 1
    );
    let last = fake.last_request().unwrap().body.to_string();
    for expected in ["seven", "eu-west", "deployed"] {
        assert!(last.contains(expected), "{expected} missing from {last}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_spawn_cut_by_a_crash_creates_exactly_one_child_whose_answer_arrives_once() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    fake.push(Reply::tool_calls(vec![(
        "spawn_subagent",
        json!({"prompt": "count to three"}),
    )]));
    // Every later call (the child's, the parent's last) answers with the
    // same text; which call a crash cut short does not matter.
    fake.set_default(Reply::text("CHILD-ANSWER"));
    let _maintenance = MaintenanceLoop::start(&db.config);
    let parent = start_turn(&client, json!([{"type": "spawn_subagent"}]), "delegate").await;

    // Hold the parent's row so the worker blocks on it (in the spawn
    // transaction, or in the release right after it), then kill the worker
    // while it is blocked: whichever it was, its transaction never commits.
    let w1 = spawn_worker("w-spawn-1", &db.config, &fake, &[ALLOW_LOOPBACK]);
    wait_until(T, "the spawn call to be committed", || async {
        count_events(&client, parent, "tool_call.created").await == 1
    })
    .await;
    // The worker claims the parent again to run the call; a row locked
    // before that claim would only be skipped (SKIP LOCKED), never waited on.
    wait_until(T, "the worker to claim the parent for the call", || async {
        agent_state(&client, parent).await != "ready"
    })
    .await;
    let blocker = db.connect().await;
    blocker.batch_execute("BEGIN").await.unwrap();
    blocker
        .execute(
            "SELECT 1 FROM holdfast.agents WHERE id = $1 FOR UPDATE",
            &[&parent],
        )
        .await
        .unwrap();
    wait_for_lock_wait(&client, &db.name).await;
    w1.signal("KILL");
    blocker.batch_execute("COMMIT").await.unwrap();

    let _w2 = spawn_worker("w-spawn-2", &db.config, &fake, &[ALLOW_LOOPBACK]);
    wait_for_event(&client, parent, "turn.completed", T).await;
    let children: i64 = client
        .query_one(
            "SELECT count(*) FROM holdfast.agents a JOIN holdfast.tool_calls t ON t.id = a.parent_tool_call_id
              WHERE t.agent_id = $1",
            &[&parent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(children, 1, "exactly one child");
    assert_eq!(count_events(&client, parent, "subagent.finished").await, 1);
    let (_, status, output) = tool_call(&client, parent, "spawn_subagent").await;
    assert_eq!(status, "completed");
    assert_eq!(output, Some(json!("CHILD-ANSWER")));
    // The parent's final model call saw the child's answer once, as the
    // spawn call's result.
    let parent_final = fake
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.body.to_string().contains("delegate"))
        .unwrap()
        .body
        .to_string();
    assert_eq!(
        parent_final.matches("CHILD-ANSWER").count(),
        1,
        "{parent_final}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn invalid_tool_input_from_the_model_is_a_tool_error_and_the_turn_goes_on() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    fake.push(Reply::tool_calls(vec![("lookup", json!({"id": "seven"}))]));
    fake.push(Reply::tool_calls(vec![("no_such_tool", json!({}))]));
    fake.push(Reply::text("Sorry, I will fix my call."));
    let _w = spawn_worker("w-invalid", &db.config, &fake, &[ALLOW_LOOPBACK]);
    let tools = json!([{"type": "custom", "name": "lookup",
        "input_schema": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}}]);
    let agent = start_turn(&client, tools, "look it up").await;
    wait_for_event(&client, agent, "turn.completed", T).await;

    let (_, status, output) = tool_call(&client, agent, "lookup").await;
    assert_eq!(
        status, "completed",
        "never handed to the client with invalid input"
    );
    let output = output.unwrap().to_string();
    assert!(
        output.contains("/id"),
        "the error names the failing path: {output}"
    );
    let (_, _, unknown) = tool_call(&client, agent, "no_such_tool").await;
    assert!(unknown.unwrap().to_string().contains("Unknown tool"));
    let waited: i64 = client
        .query_one(
            "SELECT count(*) FROM holdfast.events WHERE agent_id = $1 AND type = 'tool_call.completed'
                AND (data ->> 'is_error')::boolean",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(waited, 2);
    assert!(saved_text(&client, agent)
        .await
        .contains("Sorry, I will fix my call."));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_mcp_result_holding_u0000_reaches_the_model_storable() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    let mcp = McpTestServer::start().await;
    fake.push(Reply::tool_calls(vec![("files__binary", json!({}))]));
    fake.push(Reply::text("Read it."));
    let _worker = spawn_worker("w-mcp-nul", &db.config, &fake, &[ALLOW_LOOPBACK]);
    let agent = start_turn(
        &client,
        json!([{"type": "mcp", "name": "files", "url": mcp.url}]),
        "read the file",
    )
    .await;
    wait_for_event(&client, agent, "turn.completed", T).await;
    // The result was in hand: completed, not reported as interrupted.
    assert_eq!(count_events(&client, agent, "tool_call.completed").await, 1);
    assert_eq!(
        count_events(&client, agent, "tool_call.interrupted").await,
        0
    );
    let next = fake.last_request().unwrap().body.to_string();
    assert!(
        next.contains("header\u{FFFD}payload"),
        "the model got the result with U+FFFD: {next}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_call_runs_as_the_kind_it_was_committed_with_not_as_a_later_config_says() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    let site = CountingServer::start().await;
    fake.push(Reply::text("understood"));
    // The model calls web_fetch, which this agent does not have: the call is
    // committed as internal (answered with an error by the next batch).
    let agent = start_turn(&client, json!([{"type": "ask_user"}]), "fetch it").await;
    let inputs: Vec<Uuid> = client
        .query(
            "SELECT id FROM holdfast.inputs WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let claim = store::claim_agents(&client, "w-test", 1, T).await.unwrap()[0];
    let step = ModelStep {
        input_ids: inputs,
        message: vec![
            json!({"type": "tool_use", "id": "toolu_1", "name": "web_fetch",
                             "input": {"url": site.url("/html")}}),
        ],
        tool_calls: vec![NewToolCall {
            provider_id: "toolu_1".into(),
            name: "web_fetch".into(),
            input: json!({"url": site.url("/html")}),
            kind: ToolKind::Internal,
        }],
        usage: json!({"input_tokens": 1, "output_tokens": 1}),
        stop_reason: Some("tool_use".into()),
        config_version: None,
    };
    store::commit_model_step(&client, claim, &step)
        .await
        .unwrap();
    // Before the batch runs, the config gains web_fetch.
    store::update_agent_config(
        &client,
        agent,
        &json!({"model": {"provider": "anthropic", "name": "claude-test"},
                "tools": [{"type": "web_fetch"}]}),
        store::ConfigApply::Now,
    )
    .await
    .unwrap();

    let _worker = spawn_worker("w-kind", &db.config, &fake, &[ALLOW_LOOPBACK]);
    wait_for_event(&client, agent, "turn.completed", T).await;
    let (_, status, output) = tool_call(&client, agent, "web_fetch").await;
    assert_eq!(status, "completed");
    let output = output.unwrap().to_string();
    assert!(output.contains("call it again"), "{output}");
    assert_eq!(
        site.total_hits(),
        0,
        "a call committed as internal made external IO"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_large_tool_output_stays_out_of_its_event_and_reaches_the_model_whole() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    fake.push(Reply::tool_calls(vec![("lookup", json!({"order": "A-7"}))]));
    fake.push(Reply::text("Read it all."));
    let _worker = spawn_worker("w-large-output", &db.config, &fake, &[]);
    let config = json!({"model": {"provider": "anthropic", "name": "claude-test"},
                        "tools": [{"type": "custom", "name": "lookup"}]});
    let agent = agent_with_config(&client, &config).await;
    store::create_input(&client, agent, &json!("where is A-7?"), None)
        .await
        .unwrap();
    // 100 KiB of log lines, the last one marked.
    let mut log = "shipped from the warehouse at 09:14\n".repeat(2900);
    log.push_str("LAST-LINE");
    answer_waiting_call(&client, agent, json!(log)).await;
    wait_for_events(&client, agent, "turn.completed", 1, T).await;

    let event = last_event_data(&client, agent, "tool_call.completed").await;
    assert!(
        event.get("output").is_none(),
        "the output is not copied: {event}"
    );
    assert_eq!(event["output_omitted"], true);
    let json_bytes = json!(log).to_string().len();
    assert_eq!(event["output_bytes"], json!(json_bytes));
    assert_eq!(event["output_preview"], json!(log[..1024]));
    let row_bytes: i32 = client
        .query_one(
            "SELECT pg_column_size(data) FROM holdfast.events
              WHERE agent_id = $1 AND type = 'tool_call.completed'",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert!(row_bytes < 4096, "a small timeline row: {row_bytes} bytes");
    // The tool call keeps it whole, and the model was given all of it.
    let saved: Value = client
        .query_one(
            "SELECT output FROM holdfast.tool_calls WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(saved, json!(log));
    let sent = fake.last_request().unwrap().body.to_string();
    assert!(sent.contains("LAST-LINE"), "the model got the whole output");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fetched_pages_in_legacy_encodings_reach_the_model_as_their_text() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let site = CountingServer::start().await;
    // Declared by the header, by a <meta> only, and by the header again.
    site.set_response(
        "/cp1252",
        200,
        "text/plain; charset=windows-1252",
        &b"Price: \x80 5, \x93quoted\x94"[..],
    );
    site.set_response(
        "/sjis",
        200,
        "text/html",
        &b"<html><head><meta charset=\"Shift_JIS\"></head><body><p>\x82\xb1\x82\xf1\x82\xc9\x82\xbf\x82\xcd</p></body></html>"[..],
    );
    site.set_response(
        "/gbk",
        200,
        "text/plain; charset=GBK",
        &b"\xc4\xe3\xba\xc3"[..],
    );
    let fake = FakeProvider::start().await;
    fake.push(Reply::tool_calls(
        ["/cp1252", "/sjis", "/gbk"]
            .iter()
            .map(|path| ("web_fetch", json!({"url": site.url(path)})))
            .collect(),
    ));
    fake.push(Reply::text("read"));
    let _worker = spawn_worker("w-encodings", &db.config, &fake, &[ALLOW_LOOPBACK]);
    let agent = start_turn(&client, json!([{"type": "web_fetch"}]), "read them").await;
    wait_for_event(&client, agent, "turn.completed", T).await;
    let sent = fake.last_request().unwrap().body.to_string();
    for text in ["Price: € 5, “quoted”", "こんにちは", "你好"] {
        assert!(sent.contains(text), "{text} not in {sent}");
    }
}
