//! Forks and replays (docs/guides/time-travel.md), end to end: a real
//! worker process and the scripted model, the API served on a real socket,
//! Postgres checked afterwards. The machine of the run_command recordings
//! is played through the same SQL functions the daemon's routes call
//! (claim_commands, submit_command_result), so the test can count every
//! command a machine was ever handed.

use std::time::Duration;

use holdfast_db::store;
use holdfast_fakes::{FakeProvider, Reply};
use holdfast_tests::api_server::{call, error_of, project_key, ApiServer};
use holdfast_tests::scenario::{
    answer_waiting_call, count_events, event_types, last_event_data, spawn_worker, wait_for_events,
};
use holdfast_tests::{wait_until, MaintenanceLoop, TestDb};
use holdfast_wire::api::replays::{ReplayReport, ReplayStatus};
use holdfast_wire::domain::{CommandResult, CommandResultState};
use reqwest::Method;
use serde_json::{json, Value};
use tokio_postgres::Client;
use uuid::Uuid;

const T: Duration = Duration::from_secs(30);

/// A 1×1 PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

/// An agent of `project` with `config`, created through the API.
async fn create_agent(server: &ApiServer, key: &str, config: Value) -> Uuid {
    let (status, agent) = call(server, Method::POST, "/v1/agents", key, Some(config)).await;
    assert_eq!(status, 201, "{agent}");
    agent["id"].as_str().unwrap().parse().unwrap()
}

async fn send(client: &Client, agent: Uuid, text: &str) {
    store::create_input(client, agent, &json!(text), None)
        .await
        .unwrap();
}

/// The messages of a request the model was sent, as (role, text) pairs:
/// text blocks, tool uses as `tool_use NAME INPUT`, tool results as
/// `tool_result CONTENT`.
fn transcript(body: &Value) -> Vec<(String, String)> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let role = m["role"].as_str().unwrap().to_owned();
            let text = match &m["content"] {
                Value::String(s) => s.clone(),
                Value::Array(blocks) => blocks
                    .iter()
                    .map(|b| match b["type"].as_str() {
                        Some("text") => b["text"].as_str().unwrap_or_default().to_owned(),
                        Some("tool_use") => format!("tool_use {} {}", b["name"], b["input"]),
                        Some("tool_result") => format!("tool_result {}", b["content"]),
                        _ => b.to_string(),
                    })
                    .collect::<Vec<_>>()
                    .join(" | "),
                other => other.to_string(),
            };
            (role, text)
        })
        .collect()
}

/// An agent whose first turn, answered `answer`, was sent `text` and an
/// image (stored once, under the agent), after that turn has completed.
async fn agent_with_an_image_turn(
    client: &Client,
    server: &ApiServer,
    key: &str,
    fake: &FakeProvider,
    text: &str,
    answer: &str,
) -> Uuid {
    let agent = create_agent(
        server,
        key,
        json!({"model": {"provider": "anthropic", "name": "claude-test"}}),
    )
    .await;
    fake.push(Reply::text(answer));
    store::create_input(
        client,
        agent,
        &json!([{"type": "text", "text": text},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}]),
        None,
    )
    .await
    .unwrap();
    wait_for_events(client, agent, "turn.completed", 1, T).await;
    agent
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fork_at_a_mid_conversation_step_sends_the_model_exactly_the_history_up_to_that_step() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let server = ApiServer::start(&db).await;
    let (_, key) = project_key(&client).await;
    let fake = FakeProvider::start().await;
    let _worker = spawn_worker("w-fork", &db.config, &fake, &[]);
    let source = agent_with_an_image_turn(&client, &server, &key, &fake, "first", "one").await;
    let turn_one_end: i64 = client
        .query_one(
            "SELECT seq FROM holdfast.events WHERE agent_id = $1 AND type = 'turn.completed'",
            &[&source],
        )
        .await
        .unwrap()
        .get(0);
    fake.push(Reply::text("two"));
    send(&client, source, "second").await;
    wait_for_events(&client, source, "turn.completed", 2, T).await;
    let source_turn_two = transcript(&fake.requests()[1].body);

    let (status, fork) = call(
        &server,
        Method::POST,
        &format!("/v1/agents/{source}/fork"),
        &key,
        Some(json!({"at": {"seq": turn_one_end}, "config": {"system": "be brief"}})),
    )
    .await;
    assert_eq!(status, 201, "{fork}");
    assert_eq!(
        fork["forked_from"],
        json!({"agent_id": source, "seq": turn_one_end})
    );
    assert_eq!(fork["state"], "idle");
    assert_eq!(fork["config"]["system"], "be brief");
    let fork: Uuid = fork["id"].as_str().unwrap().parse().unwrap();
    assert_eq!(event_types(&client, fork).await, vec!["agent.forked"]);
    let forked = last_event_data(&client, fork, "agent.forked").await;
    assert_eq!(forked["forked_from"]["seq"], json!(turn_one_end));
    assert_eq!(forked["turn"], json!(1));

    fake.push(Reply::text("branched"));
    send(&client, fork, "branch").await;
    wait_for_events(&client, fork, "turn.completed", 1, T).await;
    let request = fake.last_request().unwrap();
    assert_eq!(
        request.body["system"][0]["text"], "be brief",
        "the patch applies"
    );
    let sent = transcript(&request.body);
    assert_eq!(
        sent,
        vec![
            source_turn_two[0].clone(),
            source_turn_two[1].clone(),
            ("user".to_owned(), "branch".to_owned()),
        ],
        "the fork's request is turn one's history and the new input, nothing of turn two"
    );
    assert!(
        sent[0].1.contains(PNG),
        "the source's image is sent: {:?}",
        sent[0]
    );
    let stored = |agent: Uuid| {
        let client = &client;
        async move {
            client
                .query_one(
                    "SELECT count(*) FROM holdfast.attachments WHERE agent_id = $1",
                    &[&agent],
                )
                .await
                .unwrap()
                .get::<_, i64>(0)
        }
    };
    assert_eq!(
        (stored(source).await, stored(fork).await),
        (1, 0),
        "shared, not copied"
    );
    // The source is untouched.
    assert_eq!(count_events(&client, source, "agent.forked").await, 0);
    let source_view: Value = call(
        &server,
        Method::GET,
        &format!("/v1/agents/{source}"),
        &key,
        None,
    )
    .await
    .1;
    assert!(source_view.get("forked_from").is_none(), "{source_view}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fork_at_a_step_with_an_open_tool_call_closes_it_as_interrupted_for_the_fork_only() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let server = ApiServer::start(&db).await;
    let (_, key) = project_key(&client).await;
    let fake = FakeProvider::start().await;
    let _worker = spawn_worker("w-fork-open", &db.config, &fake, &[]);
    let source = create_agent(
        &server,
        &key,
        json!({"model": {"provider": "anthropic", "name": "claude-test"},
               "tools": [{"type": "custom", "name": "lookup"}]}),
    )
    .await;
    fake.push(Reply::tool_calls(vec![("lookup", json!({"order": "A-7"}))]));
    send(&client, source, "where is A-7?").await;
    wait_for_events(&client, source, "tool_call.created", 1, T).await;

    // Default point: the source's last saved step, where the call waits.
    let (status, fork) = call(
        &server,
        Method::POST,
        &format!("/v1/agents/{source}/fork"),
        &key,
        Some(json!({})),
    )
    .await;
    assert_eq!(status, 201, "{fork}");
    let fork: Uuid = fork["id"].as_str().unwrap().parse().unwrap();
    assert_eq!(
        event_types(&client, fork).await,
        vec!["agent.forked", "tool_call.interrupted"]
    );
    let status: String = client
        .query_one(
            "SELECT status FROM holdfast.tool_calls WHERE agent_id = $1",
            &[&source],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(status, "waiting", "the source's call still waits");

    fake.push(Reply::text("I could not look it up."));
    send(&client, fork, "try again later").await;
    wait_for_events(&client, fork, "turn.completed", 1, T).await;
    let sent = transcript(&fake.last_request().unwrap().body);
    assert!(
        sent.iter()
            .any(|(_, text)| text.contains("Tool call was interrupted")),
        "{sent:?}"
    );
    // The source goes on with its own call.
    fake.push(Reply::text("It shipped."));
    answer_waiting_call(&client, source, json!("shipped")).await;
    wait_for_events(&client, source, "turn.completed", 1, T).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fork_refuses_bad_input_naming_the_field_and_writes_nothing() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let server = ApiServer::start(&db).await;
    let (_, key) = project_key(&client).await;
    let (_, other_key) = project_key(&client).await;
    let source = create_agent(
        &server,
        &key,
        json!({"model": {"provider": "anthropic", "name": "claude-test"}}),
    )
    .await;
    send(&client, source, "hello").await;
    let path = format!("/v1/agents/{source}/fork");
    let agents = || async {
        client
            .query_one("SELECT count(*) FROM holdfast.agents", &[])
            .await
            .unwrap()
            .get::<_, i64>(0)
    };
    let before = agents().await;
    for (body, status, field) in [
        (json!({"at": {"seq": 99}}), 400, Some("at.seq")),
        (json!({"at": {"seq": 0}}), 400, Some("at.seq")),
        (json!({"at": {"seq": 1, "turn": 1}}), 400, Some("at")),
        (json!({"at": {"turn": 1}}), 400, Some("at.turn")),
        (json!({"at": {"step": 1}}), 400, None),
        (
            json!({"config": {"model": {"provider": "nope"}}}),
            400,
            Some("model.provider"),
        ),
        (json!({"config": [1]}), 400, Some("config")),
    ] {
        let response = server
            .request(Method::POST, &path, &key)
            .json(&body)
            .send()
            .await
            .unwrap();
        let (got, _, message, got_field) = error_of(response).await;
        assert_eq!(got, status, "{body}: {message}");
        if let Some(field) = field {
            assert_eq!(got_field.as_deref(), Some(field), "{body}: {message}");
        }
    }
    let response = server
        .request(Method::POST, &path, &other_key)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(error_of(response).await.0, 404, "another project's agent");
    assert_eq!(agents().await, before, "a refused fork wrote nothing");
}

/// A machine of `project` for run_command; returns its id.
async fn machine(client: &Client, project: Uuid) -> Uuid {
    store::register_machine(client, project, "box", None)
        .await
        .unwrap()
        .machine_id
}

/// Act as `machine`'s daemon for one command: claim it and report it
/// finished with `stdout`.
async fn run_one_command(client: &Client, machine: Uuid, stdout: &str) {
    wait_until(T, "a command is queued for the machine", || async {
        client
            .query_one(
                "SELECT count(*) FROM holdfast.commands WHERE machine_id = $1 AND state = 'queued'",
                &[&machine],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
            > 0
    })
    .await;
    let claimed = store::claim_commands(client, machine, 1, None)
        .await
        .unwrap();
    let result = CommandResult {
        exit_code: Some(0),
        stdout: stdout.to_owned(),
        ..CommandResult::unknown()
    };
    let result = CommandResult {
        state: CommandResultState::Finished,
        ..result
    };
    store::submit_command_result(client, machine, claimed[0].id, &result)
        .await
        .unwrap();
}

async fn commands(client: &Client) -> i64 {
    client
        .query_one("SELECT count(*) FROM holdfast.commands", &[])
        .await
        .unwrap()
        .get(0)
}

/// A three-turn source: a custom tool call, a run_command call, a plain
/// answer; returns (project, machine, source).
async fn recorded_three_turns(
    client: &Client,
    server: &ApiServer,
    key: &str,
    project: Uuid,
    fake: &FakeProvider,
) -> (Uuid, Uuid) {
    let machine = machine(client, project).await;
    let source = create_agent(
        server,
        key,
        json!({"model": {"provider": "anthropic", "name": "claude-test"},
               "tools": [{"type": "custom", "name": "lookup"},
                         {"type": "run_command", "machine": machine}]}),
    )
    .await;
    fake.push(Reply::tool_calls(vec![("lookup", json!({"order": "A-7"}))]).usage(100, 10));
    fake.push(Reply::text("A-7 shipped.").usage(120, 5));
    send(client, source, "where is A-7?").await;
    answer_waiting_call(client, source, json!({"status": "shipped"})).await;
    wait_for_events(client, source, "turn.completed", 1, T).await;

    fake.push(Reply::tool_calls(vec![("run_command", json!({"command": "df -h"}))]).usage(200, 10));
    fake.push(Reply::text("The disk is half full.").usage(220, 5));
    send(client, source, "how full is the disk?").await;
    run_one_command(client, machine, "/dev/sda1 50%").await;
    wait_for_events(client, source, "turn.completed", 2, T).await;

    fake.push(Reply::text("Goodbye.").usage(300, 3));
    send(client, source, "thanks").await;
    wait_for_events(client, source, "turn.completed", 3, T).await;
    (machine, source)
}

async fn start_replay(server: &ApiServer, key: &str, source: Uuid, body: Value) -> ReplayReport {
    let (status, report) = call(
        server,
        Method::POST,
        &format!("/v1/agents/{source}/replays"),
        key,
        Some(body),
    )
    .await;
    assert_eq!(status, 201, "{report}");
    serde_json::from_value(report).unwrap()
}

async fn finished_report(
    client: &Client,
    server: &ApiServer,
    key: &str,
    replay: Uuid,
) -> ReplayReport {
    wait_until(T, "the replay ends", || async {
        client
            .query_one(
                "SELECT status FROM holdfast.replays WHERE id = $1",
                &[&replay],
            )
            .await
            .unwrap()
            .get::<_, String>(0)
            != "running"
    })
    .await;
    let (status, body) = call(
        server,
        Method::GET,
        &format!("/v1/replays/{replay}"),
        key,
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_value(body).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replay_of_a_custom_tool_and_a_command_runs_neither_and_reports_the_recorded_results() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let server = ApiServer::start(&db).await;
    let (project, key) = project_key(&client).await;
    let fake = FakeProvider::start().await;
    let _worker = spawn_worker("w-replay", &db.config, &fake, &[]);
    let (_machine, source) = recorded_three_turns(&client, &server, &key, project, &fake).await;
    let commands_before = commands(&client).await;
    let source_requests = fake.request_count();

    // The new model makes the same calls and answers a little differently.
    fake.push(Reply::tool_calls(vec![("lookup", json!({"order": "A-7"}))]).usage(90, 9));
    fake.push(Reply::text("A-7 has shipped.").usage(95, 4));
    fake.push(Reply::tool_calls(vec![("run_command", json!({"command": "df -h"}))]).usage(90, 9));
    fake.push(Reply::text("The disk is half full.").usage(95, 4));
    fake.push(Reply::text("Goodbye.").usage(99, 2));
    let started = start_replay(
        &server,
        &key,
        source,
        json!({"config": {"model": {"name": "claude-next"}}}),
    )
    .await;
    assert_eq!(started.status, ReplayStatus::Running);
    assert_eq!(started.turns_total, 3);
    let report = finished_report(&client, &server, &key, started.id).await;
    assert_eq!(report.status, ReplayStatus::Completed, "{report:?}");
    assert_eq!(report.turns.len(), 3);
    assert!(report.turns.iter().all(|t| !t.diverged), "{report:?}");

    // Nothing left Holdfast: no command for any machine, no call waiting
    // on a client, and the hidden agent never waited.
    assert_eq!(commands(&client).await, commands_before);
    let child = report.agent_id;
    let waits: i64 = client
        .query_one(
            "SELECT count(*) FROM holdfast.tool_calls WHERE agent_id = $1 AND status <> 'completed'",
            &[&child],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(waits, 0);
    for kind in ["command.queued", "approval.requested", "question.asked"] {
        assert_eq!(count_events(&client, child, kind).await, 0, "{kind}");
    }
    // The recorded results, served back.
    let lookup = &report.turns[0].replay.tool_calls[0];
    assert_eq!(lookup.output, Some(json!({"status": "shipped"})));
    assert_eq!(report.turns[0].source.tool_calls[0].output, lookup.output);
    let command = &report.turns[1].replay.tool_calls[0];
    assert_eq!(command.output, report.turns[1].source.tool_calls[0].output);
    assert!(
        command
            .output
            .as_ref()
            .unwrap()
            .to_string()
            .contains("/dev/sda1 50%"),
        "{command:?}"
    );
    let replay_requests = &fake.requests()[source_requests..];
    assert_eq!(replay_requests.len(), 5);
    assert_eq!(replay_requests[0].body["model"], "claude-next");
    assert!(
        transcript(&replay_requests[3].body)
            .iter()
            .any(|(_, t)| t.contains("/dev/sda1 50%")),
        "the model was sent the recorded command output"
    );
    // The report, turn by turn.
    assert_eq!(
        report.turns[0].source.answer.as_deref(),
        Some("A-7 shipped.")
    );
    assert_eq!(
        report.turns[0].replay.answer.as_deref(),
        Some("A-7 has shipped.")
    );
    assert!(!report.turns[0].answer_equal);
    assert!(report.turns[2].answer_equal);
    assert_eq!(report.totals.turns_equal, 2);
    assert_eq!(report.totals.turns_diverged, 0);
    assert_eq!(
        report.totals.source.input_tokens,
        100 + 120 + 200 + 220 + 300
    );
    assert_eq!(report.totals.replay.input_tokens, 90 + 95 + 90 + 95 + 99);
    assert_eq!(
        last_event_data(&client, child, "replay.completed").await["status"],
        "completed"
    );
    // Listed under its source; hidden from the agent list.
    let (_, list) = call(
        &server,
        Method::GET,
        &format!("/v1/agents/{source}/replays"),
        &key,
        None,
    )
    .await;
    assert_eq!(list["replays"][0]["id"], json!(started.id));
    let (_, agents) = call(&server, Method::GET, "/v1/agents", &key, None).await;
    let listed: Vec<&str> = agents["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, vec![source.to_string().as_str()]);
    holdfast_tests::event_schemas::assert_saved_events_match(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replay_whose_model_calls_another_tool_reports_the_divergence_at_that_turn() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let server = ApiServer::start(&db).await;
    let (project, key) = project_key(&client).await;
    let fake = FakeProvider::start().await;
    let _worker = spawn_worker("w-diverge", &db.config, &fake, &[]);
    let (_machine, source) = recorded_three_turns(&client, &server, &key, project, &fake).await;
    let commands_before = commands(&client).await;

    fake.push(Reply::tool_calls(vec![("lookup", json!({"order": "A-7"}))]));
    fake.push(Reply::text("A-7 shipped."));
    // Turn two: the new prompt makes the model look the order up again.
    fake.push(Reply::tool_calls(vec![(
        "lookup",
        json!({"order": "disk"}),
    )]));
    fake.push(Reply::text("I cannot tell."));
    fake.push(Reply::text("Goodbye."));
    let started = start_replay(
        &server,
        &key,
        source,
        json!({"config": {"system": "Never run commands."}}),
    )
    .await;
    let report = finished_report(&client, &server, &key, started.id).await;
    assert_eq!(report.status, ReplayStatus::Completed, "{report:?}");
    assert!(!report.turns[0].diverged);
    let turn = &report.turns[1];
    assert!(turn.diverged);
    let divergence = turn.first_divergence.as_ref().unwrap();
    assert_eq!(divergence.position, 0);
    assert_eq!(divergence.source.as_ref().unwrap().name, "run_command");
    assert_eq!(divergence.replay.as_ref().unwrap().name, "lookup");
    assert_eq!(
        divergence.replay.as_ref().unwrap().input,
        json!({"order": "disk"})
    );
    let answered = &turn.replay.tool_calls[0];
    assert_eq!(answered.is_error, Some(true));
    assert!(
        answered
            .output
            .as_ref()
            .unwrap()
            .to_string()
            .contains("not in the recording"),
        "{answered:?}"
    );
    assert!(!report.turns[2].diverged);
    assert_eq!(report.totals.turns_diverged, 1);
    let diverged = last_event_data(&client, report.agent_id, "replay.diverged").await;
    assert_eq!(diverged["turn"], json!(2));
    assert_eq!(diverged["recorded"]["name"], "run_command");
    assert_eq!(commands(&client).await, commands_before);
}

/// A replay's report with what differs between two runs of the same
/// script taken out (ids, times).
fn comparable(report: &ReplayReport) -> Value {
    let mut value = serde_json::to_value(&report.turns).unwrap();
    for turn in value.as_array_mut().unwrap() {
        for side in ["source", "replay"] {
            for call in turn[side]["tool_calls"].as_array_mut().unwrap() {
                call.as_object_mut().unwrap().remove("tool_call_id");
            }
        }
    }
    json!({"turns": value, "totals": report.totals, "status": report.status})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killing_the_worker_during_a_replay_changes_nothing_in_its_report() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let server = ApiServer::start(&db).await;
    let (project, key) = project_key(&client).await;
    let fake = FakeProvider::start().await;
    let _maintenance = MaintenanceLoop::start(&db.config);
    let mut worker = spawn_worker("w-kill-1", &db.config, &fake, &[]);
    let (_machine, source) = recorded_three_turns(&client, &server, &key, project, &fake).await;
    let first_turn = |fake: &FakeProvider| {
        fake.push(Reply::tool_calls(vec![("lookup", json!({"order": "A-7"}))]).usage(90, 9));
        fake.push(Reply::text("A-7 has shipped.").usage(95, 4));
    };
    let command =
        || Reply::tool_calls(vec![("run_command", json!({"command": "df -h"}))]).usage(90, 9);
    let last_turns = |fake: &FakeProvider| {
        fake.push(Reply::text("The disk is half full.").usage(95, 4));
        fake.push(Reply::text("Goodbye.").usage(99, 2));
    };

    // Undisturbed, for reference.
    first_turn(&fake);
    fake.push(command());
    last_turns(&fake);
    let body = json!({"config": {"model": {"name": "claude-next"}}});
    let reference = start_replay(&server, &key, source, body.clone()).await;
    let reference = finished_report(&client, &server, &key, reference.id).await;
    assert_eq!(reference.status, ReplayStatus::Completed, "{reference:?}");

    // The same replay, its worker killed while turn two's model call is in
    // flight; a new worker takes the agent over once maintenance sees the
    // dead worker's session gone.
    first_turn(&fake);
    fake.push(command().hold_before_headers());
    let killed = start_replay(&server, &key, source, body).await;
    fake.wait_until_held(1).await;
    worker.signal("KILL");
    worker.wait_exit(T).await;
    fake.push(command());
    last_turns(&fake);
    let _worker = spawn_worker("w-kill-2", &db.config, &fake, &[]);
    let killed = finished_report(&client, &server, &key, killed.id).await;
    assert_eq!(comparable(&killed), comparable(&reference));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replays_usage_counts_to_its_project_and_its_budget_applies() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let server = ApiServer::start(&db).await;
    let (project, key) = project_key(&client).await;
    let fake = FakeProvider::start().await;
    let _worker = spawn_worker("w-replay-budget", &db.config, &fake, &[]);
    let (_machine, source) = recorded_three_turns(&client, &server, &key, project, &fake).await;
    let project_tokens = || async {
        client
            .query_one(
                "SELECT coalesce(sum((a.usage).input_tokens + (a.usage).output_tokens), 0)::bigint \
                   FROM holdfast.agents a WHERE a.project_id = $1",
                &[&project],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
    };
    let before = project_tokens().await;

    // The budget is spent by the first turn's two calls: the second turn's
    // first model call is never made.
    fake.push(Reply::tool_calls(vec![("lookup", json!({"order": "A-7"}))]).usage(90, 10));
    fake.push(Reply::text("A-7 has shipped.").usage(95, 5));
    let requests_before = fake.request_count();
    let started = start_replay(
        &server,
        &key,
        source,
        json!({"config": {"budget": {"max_tokens_per_agent": 200}}}),
    )
    .await;
    let report = finished_report(&client, &server, &key, started.id).await;
    assert_eq!(report.status, ReplayStatus::Failed, "{report:?}");
    assert_eq!(report.error.as_ref().unwrap()["type"], "budget_exceeded");
    assert_eq!(report.turns_replayed, 2);
    assert_eq!(fake.request_count() - requests_before, 2);
    assert_eq!(
        report.totals.replay.input_tokens + report.totals.replay.output_tokens,
        200
    );
    assert_eq!(
        project_tokens().await,
        before + 200,
        "counted to the project"
    );
    let (_, usage) = call(
        &server,
        Method::GET,
        &format!("/v1/agents/{}/usage", report.agent_id),
        &key,
        None,
    )
    .await;
    assert_eq!(usage["usage"]["input_tokens"], json!(185));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn holdfast_replay_replays_every_agent_of_a_file_and_prints_the_summary() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let server = ApiServer::start(&db).await;
    let (_, key) = project_key(&client).await;
    let fake = FakeProvider::start().await;
    let _worker = spawn_worker("w-replay-cli", &db.config, &fake, &[]);
    let mut agents = Vec::new();
    for answer in ["red", "blue"] {
        let agent = create_agent(
            &server,
            &key,
            json!({"model": {"provider": "anthropic", "name": "claude-test"}}),
        )
        .await;
        fake.push(Reply::text(answer).usage(10, 2));
        send(&client, agent, "a colour?").await;
        wait_for_events(&client, agent, "turn.completed", 1, T).await;
        agents.push(agent);
    }
    // Every replay gets the same answer: the first agent's turn is equal,
    // the second's is not.
    fake.set_default(Reply::text("red").usage(7, 1));
    let dir = holdfast_tests::ScratchDir::new("replay-cli");
    let file = dir.join("agents.txt");
    std::fs::write(
        &file,
        format!("# to replay\n{}\n\n{}\n", agents[0], agents[1]),
    )
    .unwrap();
    let output = tokio::process::Command::new(holdfast_tests::process::holdfast_bin())
        .args(["replay", "--agents-file"])
        .arg(&file)
        .args(["--set", "model.name=claude-next", "--concurrency", "1"])
        .args(["--url", &server.url(""), "--api-key", &key])
        .env("HOLDFAST_LOG", "warn")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    assert!(
        lines[0].starts_with("agent") && lines[0].contains("tokens before"),
        "{stdout}"
    );
    let row = |agent: Uuid| {
        lines
            .iter()
            .find(|l| l.starts_with(&agent.to_string()))
            .unwrap_or_else(|| panic!("no row for {agent}: {stdout}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    // agent, status, turns, equal, diverged, tokens before, tokens after, ...
    assert_eq!(
        &row(agents[0])[1..7],
        ["completed", "1/1", "1", "0", "12", "8"]
    );
    assert_eq!(
        &row(agents[1])[1..7],
        ["completed", "1/1", "0", "0", "12", "8"]
    );
    assert_eq!(
        &lines[3].split_whitespace().collect::<Vec<_>>()[..6],
        ["total", "2", "1", "0", "24", "16"]
    );
    let models: Vec<Value> = fake.requests()[2..]
        .iter()
        .map(|r| r.body["model"].clone())
        .collect();
    assert_eq!(models, [json!("claude-next"), json!("claude-next")]);
}

/// Run retention passes on `client`'s session until one deletes no file;
/// returns the files deleted.
async fn prune_files(client: &Client) -> i64 {
    let mut deleted = 0;
    loop {
        let report = store::retention_tick(client, 100).await.unwrap();
        if report.attachments_deleted == 0 {
            return deleted;
        }
        deleted += report.attachments_deleted;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sources_retention_keeps_the_files_a_fork_still_sends_until_the_fork_is_archived() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let server = ApiServer::start(&db).await;
    let (project, key) = project_key(&client).await;
    let fake = FakeProvider::start().await;
    let _worker = spawn_worker("w-fork-files", &db.config, &fake, &[]);
    let source = agent_with_an_image_turn(&client, &server, &key, &fake, "look", "seen").await;
    let (status, fork) = call(
        &server,
        Method::POST,
        &format!("/v1/agents/{source}/fork"),
        &key,
        Some(json!({})),
    )
    .await;
    assert_eq!(status, 201, "{fork}");
    let fork: Uuid = fork["id"].as_str().unwrap().parse().unwrap();

    // The source is archived (its own history no longer keeps the file) and
    // its project keeps a day; this session's clock is two days on.
    store::archive_agent(&client, source).await.unwrap();
    let project_name: String = client
        .query_one(
            "SELECT name FROM holdfast.projects WHERE id = $1",
            &[&project],
        )
        .await
        .unwrap()
        .get(0);
    store::set_project_retention(&client, &project_name, Some(Duration::from_secs(86_400)))
        .await
        .unwrap();
    client
        .batch_execute("SET holdfast.clock_offset = '2 days'")
        .await
        .unwrap();
    let stored = || async {
        client
            .query_one(
                "SELECT count(*) FROM holdfast.attachments WHERE agent_id = $1",
                &[&source],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
    };
    assert_eq!(
        prune_files(&client).await,
        0,
        "the fork's history still sends the file"
    );
    assert_eq!(stored().await, 1);

    // Once the fork never runs again, nothing keeps the file.
    store::archive_agent(&client, fork).await.unwrap();
    assert_eq!(prune_files(&client).await, 1);
    assert_eq!(stored().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fork_and_a_replay_start_from_a_named_config_version_and_an_unknown_one_is_refused() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let server = ApiServer::start(&db).await;
    let (_, key) = project_key(&client).await;
    let fake = FakeProvider::start().await;
    let _worker = spawn_worker("w-fork-version", &db.config, &fake, &[]);
    let source = create_agent(
        &server,
        &key,
        json!({"model": {"provider": "anthropic", "name": "claude-test"}, "system": "one"}),
    )
    .await;
    fake.push(Reply::text("done"));
    send(&client, source, "hello").await;
    wait_for_events(&client, source, "turn.completed", 1, T).await;
    let (status, patched) = call(
        &server,
        Method::PATCH,
        &format!("/v1/agents/{source}"),
        &key,
        Some(json!({"system": "two"})),
    )
    .await;
    assert_eq!(status, 200, "{patched}");
    assert_eq!(patched["config_version"], 2);

    // A fork from version 1, patched: version 1's system prompt, the patch's model.
    let (status, fork) = call(
        &server,
        Method::POST,
        &format!("/v1/agents/{source}/fork"),
        &key,
        Some(json!({"version": 1, "config": {"model": {"name": "claude-next"}}})),
    )
    .await;
    assert_eq!(status, 201, "{fork}");
    assert_eq!(fork["config"]["system"], "one");
    assert_eq!(fork["config"]["model"]["name"], "claude-next");

    // A replay with version 1: its model requests carry version 1's prompt.
    fake.push(Reply::text("done again"));
    let requests_before = fake.request_count();
    let (status, replay) = call(
        &server,
        Method::POST,
        &format!("/v1/agents/{source}/replays"),
        &key,
        Some(json!({"version": 1})),
    )
    .await;
    assert_eq!(status, 201, "{replay}");
    let replay_id: Uuid = replay["id"].as_str().unwrap().parse().unwrap();
    wait_until(T, "the replay ends", || async {
        let (_, report) = call(
            &server,
            Method::GET,
            &format!("/v1/replays/{replay_id}"),
            &key,
            None,
        )
        .await;
        report["status"] != "running"
    })
    .await;
    let replayed = &fake.requests()[requests_before];
    assert_eq!(replayed.body["system"][0]["text"], "one");

    // A version the source does not have: 400 naming `version`, no agent made.
    let agents_before: i64 = client
        .query_one("SELECT count(*) FROM holdfast.agents", &[])
        .await
        .unwrap()
        .get(0);
    for route in ["fork", "replays"] {
        let (status, error) = call(
            &server,
            Method::POST,
            &format!("/v1/agents/{source}/{route}"),
            &key,
            Some(json!({"version": 9})),
        )
        .await;
        assert_eq!(status, 400, "{route}: {error}");
        assert_eq!(error["error"]["field"], "version", "{route}: {error}");
    }
    // SQL refuses it too, for a DBA's call.
    let refused = client
        .query_one(
            "SELECT holdfast.fork_agent(project_id, id, NULL, NULL, NULL, 9) FROM holdfast.agents WHERE id = $1",
            &[&source],
        )
        .await
        .unwrap_err();
    let message = refused.as_db_error().map(|e| e.message().to_owned());
    assert!(
        message
            .as_deref()
            .is_some_and(|m| m.contains("no config version 9")),
        "{refused:?}"
    );
    let agents_after: i64 = client
        .query_one("SELECT count(*) FROM holdfast.agents", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(agents_after, agents_before, "nothing was created");
}
