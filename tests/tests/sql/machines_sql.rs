//! Machines and commands at the SQL level (sql/schema/machines.sql): queueing
//! in the tool call's transaction, claims that hand a command out once,
//! idempotent results, and the maintenance sweeps — accept timeout, offline
//! machines and wake attempts, machine_unreachable, daemon restarts. Time
//! moves with `SET holdfast.clock_offset`, never by sleeping.

use std::collections::HashSet;
use std::time::Duration;

use holdfast_db::{store, Error};
use holdfast_tests::scenario::agent_state;
use holdfast_tests::TestDb;
use holdfast_wire::domain::{
    Claim, CommandResult, CommandResultOutcome, CommandResultState, DaemonCommandState, Heartbeat,
    ModelStep, NewToolCall, ReportedCommand, ToolKind,
};
use serde_json::{json, Value};
use tokio_postgres::Client;
use uuid::Uuid;

const ACCEPT: Duration = Duration::from_secs(300);
const OFFLINE: Duration = Duration::from_secs(30);

async fn new_project(client: &Client) -> Uuid {
    store::ensure_project(client, &format!("p{}", Uuid::new_v4().simple()))
        .await
        .unwrap()
}

/// A machine of `project` whose daemon (a new session) has announced itself.
async fn online_machine(client: &Client, project: Uuid, name: &str) -> (Uuid, Uuid) {
    let machine = store::register_machine(client, project, name, None)
        .await
        .unwrap()
        .machine_id;
    let session = Uuid::new_v4();
    heartbeat(client, machine, session, true, vec![])
        .await
        .unwrap();
    (machine, session)
}

async fn heartbeat(
    client: &Client,
    machine: Uuid,
    session: Uuid,
    started: bool,
    commands: Vec<ReportedCommand>,
) -> Result<(), Error> {
    let heartbeat = Heartbeat {
        session,
        started,
        commands,
        sandboxed: Some(true),
        single_session: false,
    };
    store::machine_heartbeat(client, machine, &heartbeat, None)
        .await
        .map(drop)
}

fn run_command_config(machine: Value) -> Value {
    let mut tool = json!({"type": "run_command"});
    if !machine.is_null() {
        tool["machine"] = machine;
    }
    json!({"model": {"provider": "anthropic", "name": "m"}, "tools": [tool]})
}

/// Commit a model step whose one tool call is run_command with `input`;
/// returns the step's claim (released by the commit) and the call's id.
async fn commit_run_command(
    client: &impl store::Prepared,
    agent: Uuid,
    input: Value,
) -> (Claim, Uuid) {
    store::create_input(client, agent, &json!("go"), None)
        .await
        .unwrap();
    let claim = store::claim_agents(client, "w", 10, Duration::from_secs(60))
        .await
        .unwrap()
        .into_iter()
        .find(|c| c.agent_id == agent)
        .expect("the agent is claimable");
    let inputs: Vec<Uuid> = client
        .query(
            "SELECT id FROM holdfast.inputs WHERE agent_id = $1 AND consumed_at IS NULL",
            &[&agent],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let step = ModelStep {
        input_ids: inputs,
        message: vec![
            json!({"type": "tool_use", "id": "toolu_1", "name": "run_command", "input": input}),
        ],
        tool_calls: vec![NewToolCall {
            provider_id: "toolu_1".into(),
            name: "run_command".into(),
            input,
            kind: ToolKind::Command,
        }],
        usage: json!({}),
        stop_reason: Some("tool_use".into()),
        config_version: None,
    };
    let step_id = store::commit_model_step(client, claim, &step)
        .await
        .unwrap();
    let call = client
        .query_one(
            "SELECT id FROM holdfast.tool_calls WHERE step_id = $1",
            &[&step_id],
        )
        .await
        .unwrap()
        .get(0);
    (claim, call)
}

/// An agent of `project` configured for `machine`, waiting on a queued
/// command `echo <tag>`; returns (agent, tool call, command).
async fn queued_command(
    client: &Client,
    project: Uuid,
    machine: Uuid,
    tag: &str,
) -> (Uuid, Uuid, Uuid) {
    let agent = store::create_agent(client, project, &run_command_config(json!(machine)))
        .await
        .unwrap();
    let (_, call) =
        commit_run_command(client, agent, json!({"command": format!("echo {tag}")})).await;
    let command = client
        .query_one(
            "SELECT id FROM holdfast.commands WHERE tool_call_id = $1",
            &[&call],
        )
        .await
        .unwrap()
        .get(0);
    (agent, call, command)
}

async fn command_state(client: &Client, command: Uuid) -> (String, Option<String>) {
    let row = client
        .query_one(
            "SELECT state, reason FROM holdfast.commands WHERE id = $1",
            &[&command],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

/// (status, output, is_error) of a tool call.
async fn call_outcome(client: &Client, call: Uuid) -> (String, Option<Value>, Option<bool>) {
    let row = client
        .query_one(
            "SELECT status, output, is_error FROM holdfast.tool_calls WHERE id = $1",
            &[&call],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

async fn events_of(client: &Client, agent: Uuid, kind: &str) -> Vec<Value> {
    client
        .query(
            "SELECT data FROM holdfast.events WHERE agent_id = $1 AND type = $2 ORDER BY seq",
            &[&agent, &kind],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

async fn commands_for_call(client: &Client, call: Uuid) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM holdfast.commands WHERE tool_call_id = $1",
            &[&call],
        )
        .await
        .unwrap()
        .get(0)
}

async fn shift_clock(client: &Client, offset: &str) {
    client
        .batch_execute(&format!("SET holdfast.clock_offset = '{offset}'"))
        .await
        .unwrap();
}

fn finished(stdout: &str) -> CommandResult {
    CommandResult {
        state: CommandResultState::Finished,
        exit_code: Some(0),
        stdout: stdout.into(),
        ..CommandResult::unknown()
    }
}

#[tokio::test]
async fn registering_a_machine_shows_its_token_once_and_keeps_only_its_hash() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let project = new_project(&client).await;
    let created =
        store::register_machine(&client, project, "build-box", Some("http://10.0.0.5/wake"))
            .await
            .unwrap();
    assert!(created.token.starts_with("hfm_") && created.token.len() == 68);
    assert!(created.token.starts_with(&created.token_prefix));

    let stored: String = client
        .query_one(
            "SELECT to_jsonb(m)::text FROM holdfast.machines m WHERE id = $1",
            &[&created.machine_id],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        !stored.contains(&created.token),
        "the token is stored in clear"
    );
    let hashed: bool = client
        .query_one(
            "SELECT token_hash = sha256(convert_to($2, 'UTF8')) FROM holdfast.machines WHERE id = $1",
            &[&created.machine_id, &created.token],
        )
        .await
        .unwrap()
        .get(0);
    assert!(hashed);

    let who = store::authenticate_machine(&client, &created.token)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (who.machine_id, who.project_id),
        (created.machine_id, project)
    );
    let key = store::create_api_key(&client, "keys").await.unwrap().key;
    assert!(store::authenticate_machine(&client, &key)
        .await
        .unwrap()
        .is_none());
    assert!(store::authenticate_api_key(&client, &created.token)
        .await
        .unwrap()
        .is_none());

    assert!(matches!(
        store::register_machine(&client, project, "build-box", None).await,
        Err(Error::Conflict(_))
    ));
    for (name, wake_url, field) in [
        ("bad name", None, "name"),
        ("", None, "name"),
        ("ok", Some("ftp://x/wake"), "wake_url"),
    ] {
        let error = store::register_machine(&client, project, name, wake_url)
            .await
            .unwrap_err();
        assert_eq!(error.field(), Some(field), "{name:?} {wake_url:?}: {error}");
    }
}

#[tokio::test]
async fn a_run_command_call_queues_its_command_in_the_same_transaction() {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    let project = new_project(&client).await;
    let (machine, _) = online_machine(&client, project, "m1").await;

    // Rolled back with the model step: no command, no event.
    let agent = store::create_agent(&client, project, &run_command_config(json!("m1")))
        .await
        .unwrap();
    {
        let tx = client.transaction().await.unwrap();
        commit_run_command(&tx, agent, json!({"command": "touch /tmp/x"})).await;
        assert_eq!(
            tx.query_one("SELECT count(*) FROM holdfast.commands", &[])
                .await
                .unwrap()
                .get::<_, i64>(0),
            1
        );
        tx.rollback().await.unwrap();
    }
    let count: i64 = client
        .query_one("SELECT count(*) FROM holdfast.commands", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(count, 0);

    // Committed: queued on the machine named in the config, with its event
    // right after the call's, and the agent waits holding no worker.
    let (_, call) = commit_run_command(
        &client,
        agent,
        json!({"command": "make test", "timeout_secs": 90}),
    )
    .await;
    let row = client
        .query_one(
            "SELECT machine_id, command, timeout_secs, state FROM holdfast.commands WHERE tool_call_id = $1",
            &[&call],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, Uuid>(0), machine);
    assert_eq!(row.get::<_, String>(1), "make test");
    assert_eq!(row.get::<_, i32>(2), 90);
    assert_eq!(row.get::<_, String>(3), "queued");
    assert_eq!(agent_state(&client, agent).await, "waiting");
    let types: Vec<String> = client
        .query(
            "SELECT type FROM holdfast.events WHERE agent_id = $1 ORDER BY seq DESC LIMIT 2",
            &[&agent],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(types, ["command.queued", "tool_call.created"]);
    let queued = &events_of(&client, agent, "command.queued").await[0];
    assert_eq!(queued["machine"], "m1");
    assert_eq!(queued["command"], "make test");
}

#[tokio::test]
async fn a_call_without_a_usable_machine_is_answered_with_an_error_at_once() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let project = new_project(&client).await;
    let other_project = new_project(&client).await;
    let (foreign, _) = online_machine(&client, other_project, "theirs").await;
    let cases = [
        (
            json!(null),
            json!({"command": "ls"}),
            "machine_not_configured",
        ),
        (
            json!("nowhere"),
            json!({"command": "ls"}),
            "unknown_machine",
        ),
        (json!(foreign), json!({"command": "ls"}), "unknown_machine"),
        (json!("theirs"), json!({"command": "ls"}), "unknown_machine"),
    ];
    for (machine, input, reason) in cases {
        let agent = store::create_agent(&client, project, &run_command_config(machine.clone()))
            .await
            .unwrap();
        let (_, call) = commit_run_command(&client, agent, input).await;
        let (status, output, is_error) = call_outcome(&client, call).await;
        assert_eq!(status, "completed", "{machine}");
        assert_eq!(is_error, Some(true));
        let output = output.unwrap();
        assert_eq!(output["state"], "failed");
        assert_eq!(output["reason"], reason, "{machine}: {output}");
        assert_eq!(events_of(&client, agent, "command.failed").await.len(), 1);
        assert_eq!(
            agent_state(&client, agent).await,
            "ready",
            "the turn goes on"
        );
    }
    let count: i64 = client
        .query_one("SELECT count(*) FROM holdfast.commands", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(count, 0);
    // What these turns wrote matches the OpenAPI document's event schemas.
    holdfast_tests::event_schemas::assert_saved_events_match(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_claims_hand_each_command_out_exactly_once() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let project = new_project(&client).await;
    let (machine, session) = online_machine(&client, project, "m").await;
    let mut agents = Vec::new();
    for i in 0..6 {
        agents.push(
            queued_command(&client, project, machine, &i.to_string())
                .await
                .0,
        );
    }

    let mut seen = Vec::new();
    for _ in 0..10 {
        let racers = (0..3).map(|_| {
            let db = &db;
            async move {
                let c = db.connect().await;
                store::claim_commands(&c, machine, 2, Some(session))
                    .await
                    .unwrap()
            }
        });
        for claimed in futures::future::join_all(racers).await {
            seen.extend(claimed.into_iter().map(|c| c.id));
        }
        if seen.len() >= 6 {
            break;
        }
    }
    let distinct: HashSet<Uuid> = seen.iter().copied().collect();
    assert_eq!(seen.len(), 6, "a command was handed out twice: {seen:?}");
    assert_eq!(distinct.len(), 6);
    assert!(store::claim_commands(&client, machine, 100, Some(session))
        .await
        .unwrap()
        .is_empty());
    for agent in agents {
        assert_eq!(events_of(&client, agent, "command.accepted").await.len(), 1);
    }
}

#[tokio::test]
async fn a_command_past_its_accept_deadline_is_never_claimed_and_fails() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let project = new_project(&client).await;
    let (machine, session) = online_machine(&client, project, "m").await;
    let (agent, call, command) = queued_command(&client, project, machine, "late").await;

    shift_clock(&client, "301 seconds").await;
    // Before maintenance has swept it, a claim already refuses it.
    assert!(store::claim_commands(&client, machine, 10, Some(session))
        .await
        .unwrap()
        .is_empty());
    // (The machine stays online in this test: its daemon heartbeats.)
    heartbeat(&client, machine, session, false, vec![])
        .await
        .unwrap();
    let report = store::machine_tick(&client, ACCEPT, OFFLINE).await.unwrap();
    assert_eq!(report.accept_timeout, 1);
    assert_eq!(
        command_state(&client, command).await,
        ("failed".into(), Some("accept_timeout".into()))
    );
    let (status, output, is_error) = call_outcome(&client, call).await;
    assert_eq!((status.as_str(), is_error), ("completed", Some(true)));
    let output = output.unwrap();
    assert_eq!(output["reason"], "accept_timeout");
    assert_eq!(output["retryable"], true);
    assert_eq!(events_of(&client, agent, "command.failed").await.len(), 1);
    assert_eq!(agent_state(&client, agent).await, "ready");
    assert!(store::claim_commands(&client, machine, 10, Some(session))
        .await
        .unwrap()
        .is_empty());
    // What these turns wrote matches the OpenAPI document's event schemas.
    holdfast_tests::event_schemas::assert_saved_events_match(&client).await;
}

#[tokio::test]
async fn a_result_completes_the_call_once_and_repeats_are_idempotent() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let project = new_project(&client).await;
    let (machine, session) = online_machine(&client, project, "m").await;
    let (other, _) = online_machine(&client, project, "other").await;
    let (agent, call, command) = queued_command(&client, project, machine, "hi").await;
    let claimed = store::claim_commands(&client, machine, 10, Some(session))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].command, "echo hi");

    let result = finished("hi\n");
    assert!(matches!(
        store::submit_command_result(&client, other, command, &result).await,
        Err(Error::NotFound(_))
    ));
    assert_eq!(
        store::submit_command_result(&client, machine, command, &result)
            .await
            .unwrap(),
        CommandResultOutcome::Delivered
    );
    let (status, output, is_error) = call_outcome(&client, call).await;
    assert_eq!((status.as_str(), is_error), ("completed", Some(false)));
    let output = output.unwrap();
    assert_eq!(output["state"], "finished");
    assert_eq!(output["exit_code"], 0);
    assert_eq!(output["stdout"], "hi\n");
    assert_eq!(agent_state(&client, agent).await, "ready");
    let events = events_of(&client, agent, "command.finished").await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["late"], false);

    let seq_before: i64 = client
        .query_one(
            "SELECT last_event_seq FROM holdfast.agents WHERE id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        store::submit_command_result(&client, machine, command, &result)
            .await
            .unwrap(),
        CommandResultOutcome::Duplicate
    );
    let seq_after: i64 = client
        .query_one(
            "SELECT last_event_seq FROM holdfast.agents WHERE id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(seq_before, seq_after, "a repeated result records nothing");
    assert!(matches!(
        store::submit_command_result(&client, machine, command, &finished("other")).await,
        Err(Error::Conflict(_))
    ));

    // A command that was never accepted takes no result.
    let (_, _, queued) = queued_command(&client, project, machine, "q").await;
    assert!(matches!(
        store::submit_command_result(&client, machine, queued, &result).await,
        Err(Error::Conflict(_))
    ));
    // What these turns wrote matches the OpenAPI document's event schemas.
    holdfast_tests::event_schemas::assert_saved_events_match(&client).await;
}

#[tokio::test]
async fn an_offline_machine_fails_its_queued_commands_unless_a_wake_attempt_is_in_progress() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let project = new_project(&client).await;
    let (waking, _) = online_machine(&client, project, "waking").await;
    let (asleep, _) = online_machine(&client, project, "asleep").await;
    let wake = store::start_machine_wake(&client, project, waking, Duration::from_secs(120))
        .await
        .unwrap();
    assert_eq!(wake.machine_id, waking);
    let (_, waking_call, waking_command) = queued_command(&client, project, waking, "a").await;
    let (_, asleep_call, asleep_command) = queued_command(&client, project, asleep, "b").await;

    // Inside the offline window nothing happens.
    shift_clock(&client, "29 seconds").await;
    store::machine_tick(&client, ACCEPT, OFFLINE).await.unwrap();
    assert_eq!(command_state(&client, asleep_command).await.0, "queued");

    shift_clock(&client, "31 seconds").await;
    let report = store::machine_tick(&client, ACCEPT, OFFLINE).await.unwrap();
    assert_eq!(report.machine_offline, 1);
    assert_eq!(
        command_state(&client, asleep_command).await,
        ("failed".into(), Some("machine_offline".into()))
    );
    assert_eq!(
        call_outcome(&client, asleep_call).await.1.unwrap()["reason"],
        "machine_offline"
    );
    assert_eq!(command_state(&client, waking_command).await.0, "queued");
    assert_eq!(call_outcome(&client, waking_call).await.0, "waiting");

    // Once the wake window is over with no heartbeat, the wait ends.
    shift_clock(&client, "121 seconds").await;
    store::machine_tick(&client, ACCEPT, OFFLINE).await.unwrap();
    assert_eq!(
        command_state(&client, waking_command).await,
        ("failed".into(), Some("machine_offline".into()))
    );
    // A wake for another project's machine is not found.
    let stranger = new_project(&client).await;
    assert!(matches!(
        store::start_machine_wake(&client, stranger, waking, Duration::from_secs(60)).await,
        Err(Error::NotFound(_))
    ));
}

#[tokio::test]
async fn a_silent_machine_gives_machine_unreachable_and_a_late_result_is_only_recorded() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let project = new_project(&client).await;
    let (machine, session) = online_machine(&client, project, "m").await;
    let (agent, call, command) = queued_command(&client, project, machine, "slow").await;
    store::claim_commands(&client, machine, 10, Some(session))
        .await
        .unwrap();
    let running = ReportedCommand {
        id: command,
        state: DaemonCommandState::Running,
        pid: Some(4242),
    };
    heartbeat(&client, machine, session, false, vec![running])
        .await
        .unwrap();

    shift_clock(&client, "29 seconds").await;
    assert_eq!(
        store::machine_tick(&client, ACCEPT, OFFLINE)
            .await
            .unwrap()
            .unreachable,
        0
    );
    shift_clock(&client, "31 seconds").await;
    assert_eq!(
        store::machine_tick(&client, ACCEPT, OFFLINE)
            .await
            .unwrap()
            .unreachable,
        1
    );
    let (status, output, is_error) = call_outcome(&client, call).await;
    assert_eq!((status.as_str(), is_error), ("completed", Some(true)));
    let output = output.unwrap();
    assert_eq!(output["error"], "machine_unreachable");
    assert_eq!(output["retryable"], true);
    assert_eq!(output["last_known_state"]["state"], "running");
    assert_eq!(output["last_known_state"]["pid"], 4242);
    let event = &events_of(&client, agent, "machine.unreachable").await[0];
    assert_eq!(event["last_known_state"]["state"], "running");
    assert_eq!(agent_state(&client, agent).await, "ready");

    // The real result arrives later: recorded, not swapped in.
    shift_clock(&client, "0").await;
    assert_eq!(
        store::submit_command_result(&client, machine, command, &finished("done"))
            .await
            .unwrap(),
        CommandResultOutcome::Late
    );
    let late = &events_of(&client, agent, "command.finished").await[0];
    assert_eq!(
        (late["late"].clone(), late["stdout"].clone()),
        (json!(true), json!("done"))
    );
    assert_eq!(call_outcome(&client, call).await.1.unwrap(), output);
    assert_eq!(command_state(&client, command).await.0, "finished");
    // What these turns wrote matches the OpenAPI document's event schemas.
    holdfast_tests::event_schemas::assert_saved_events_match(&client).await;
}

#[tokio::test]
async fn a_restarted_daemon_takes_over_and_unrecorded_commands_become_unknown() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let project = new_project(&client).await;
    let (machine, first) = online_machine(&client, project, "m").await;
    let (_, kept_call, kept) = queued_command(&client, project, machine, "kept").await;
    let (lost_agent, lost_call, lost) = queued_command(&client, project, machine, "lost").await;
    assert_eq!(
        store::claim_commands(&client, machine, 10, Some(first))
            .await
            .unwrap()
            .len(),
        2
    );

    // The daemon restarts; its journal only knows `kept`.
    let second = Uuid::new_v4();
    let journaled = ReportedCommand {
        id: kept,
        state: DaemonCommandState::Running,
        pid: Some(7),
    };
    heartbeat(&client, machine, second, true, vec![journaled])
        .await
        .unwrap();
    let report = store::machine_tick(&client, ACCEPT, OFFLINE).await.unwrap();
    assert_eq!(report.lost, 1);
    assert_eq!(
        command_state(&client, lost).await,
        ("unknown".into(), Some("daemon_lost_record".into()))
    );
    let (_, output, is_error) = call_outcome(&client, lost_call).await;
    assert_eq!(is_error, Some(true));
    assert_eq!(output.unwrap()["state"], "unknown");
    assert_eq!(
        events_of(&client, lost_agent, "command.unknown")
            .await
            .len(),
        1
    );
    assert_eq!(command_state(&client, kept).await.0, "accepted");
    assert_eq!(call_outcome(&client, kept_call).await.0, "waiting");

    // The old process is shut out; the new one claims.
    assert!(matches!(
        store::claim_commands(&client, machine, 10, Some(first)).await,
        Err(Error::Conflict(_))
    ));
    assert!(matches!(
        heartbeat(&client, machine, first, false, vec![]).await,
        Err(Error::Conflict(_))
    ));
    heartbeat(&client, machine, second, false, vec![])
        .await
        .unwrap();
    // Its result for the kept command is delivered.
    let unknown = CommandResult::unknown();
    assert_eq!(
        store::submit_command_result(&client, machine, kept, &unknown)
            .await
            .unwrap(),
        CommandResultOutcome::Delivered
    );
    assert_eq!(
        call_outcome(&client, kept_call).await.1.unwrap()["state"],
        "unknown"
    );
    // What these turns wrote matches the OpenAPI document's event schemas.
    holdfast_tests::event_schemas::assert_saved_events_match(&client).await;
}

#[tokio::test]
async fn a_cancelled_turn_never_hands_out_its_queued_command_and_stops_its_accepted_one() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let project = new_project(&client).await;
    let (machine, session) = online_machine(&client, project, "m").await;
    let (agent, _, command) = queued_command(&client, project, machine, "never").await;
    store::request_cancel(&client, agent).await.unwrap();
    assert_eq!(command_state(&client, command).await.0, "cancelled");
    assert!(store::claim_commands(&client, machine, 10, Some(session))
        .await
        .unwrap()
        .is_empty());

    // An accepted command is cancelled too: the heartbeats that report it
    // running name it to be stopped until its result comes, which is
    // recorded late, as the stopped command's, and leaves it cancelled.
    let (agent, _, command) = queued_command(&client, project, machine, "runs").await;
    store::claim_commands(&client, machine, 10, Some(session))
        .await
        .unwrap();
    let running = vec![ReportedCommand {
        id: command,
        state: DaemonCommandState::Running,
        pid: Some(42),
    }];
    let report = Heartbeat {
        session,
        started: false,
        commands: running,
        sandboxed: None,
        single_session: false,
    };
    let to_stop = |report: Heartbeat| {
        let client = &client;
        async move {
            store::machine_heartbeat(client, machine, &report, None)
                .await
                .unwrap()
                .cancelled_commands
        }
    };
    assert!(
        to_stop(report.clone()).await.is_empty(),
        "not cancelled yet"
    );
    store::request_cancel(&client, agent).await.unwrap();
    assert_eq!(command_state(&client, command).await.0, "cancelled");
    assert_eq!(to_stop(report.clone()).await, vec![command]);
    assert_eq!(
        to_stop(report.clone()).await,
        vec![command],
        "until its result"
    );
    assert!(store::claim_commands(&client, machine, 10, Some(session))
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        store::submit_command_result(&client, machine, command, &finished("x"))
            .await
            .unwrap(),
        CommandResultOutcome::Late
    );
    assert_eq!(command_state(&client, command).await.0, "cancelled");
    assert!(to_stop(report).await.is_empty());
    let late: Value = client
        .query_one(
            "SELECT data FROM holdfast.events WHERE agent_id = $1 AND type = 'command.finished'",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        (&late["late"], &late["reason"]),
        (&json!(true), &json!("cancelled"))
    );
}

#[tokio::test]
async fn a_run_command_that_needs_approval_is_queued_only_once_approved() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let project = new_project(&client).await;
    let (machine, _) = online_machine(&client, project, "m").await;
    let mut config = run_command_config(json!(machine));
    config["approvals"] = json!({"require_for": ["run_command"]});
    for decision in ["deny", "approve"] {
        let agent = store::create_agent(&client, project, &config)
            .await
            .unwrap();
        let (_, call) =
            commit_run_command(&client, agent, json!({"command": "rm -rf build"})).await;
        assert_eq!(
            commands_for_call(&client, call).await,
            0,
            "nothing is queued before approval"
        );
        let approval: Uuid = client
            .query_one(
                "SELECT id FROM holdfast.approvals WHERE tool_call_id = $1",
                &[&call],
            )
            .await
            .unwrap()
            .get(0);
        store::answer_approval(&client, approval, decision, "ann", None)
            .await
            .unwrap();
        let expected = i64::from(decision == "approve");
        assert_eq!(
            commands_for_call(&client, call).await,
            expected,
            "{decision}"
        );
        assert_eq!(
            events_of(&client, agent, "command.queued").await.len() as i64,
            expected
        );
    }
    // What these turns wrote matches the OpenAPI document's event schemas.
    holdfast_tests::event_schemas::assert_saved_events_match(&client).await;
}

#[tokio::test]
async fn the_machine_list_shows_online_state_waits_and_running_commands() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let project = new_project(&client).await;
    let (machine, session) = online_machine(&client, project, "m").await;
    store::register_machine(&client, project, "never-seen", None)
        .await
        .unwrap();
    let (_, _, running) = queued_command(&client, project, machine, "a").await;
    store::claim_commands(&client, machine, 10, Some(session))
        .await
        .unwrap();
    queued_command(&client, project, machine, "b").await;
    let report = ReportedCommand {
        id: running,
        state: DaemonCommandState::Running,
        pid: Some(99),
    };
    heartbeat(&client, machine, session, false, vec![report])
        .await
        .unwrap();

    let machines = store::list_machines(&client, project).await.unwrap();
    assert_eq!(machines.len(), 2);
    let (m, never) = (&machines[0], &machines[1]);
    assert!(m.online && !never.online);
    assert_eq!(m.queued_commands, 1);
    let listed = m.running_commands.as_array().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["id"], json!(running));
    assert_eq!(listed[0]["last_known_state"]["state"], "running");
    assert_eq!(listed[0]["last_known_state"]["pid"], 99);
    assert!(never.last_heartbeat_at.is_none() && never.wake_until.is_none());

    // The offline window is the one maintenance enforces.
    store::machine_tick(&client, ACCEPT, Duration::from_millis(1))
        .await
        .unwrap();
    shift_clock(&client, "1 second").await;
    assert!(!store::list_machines(&client, project).await.unwrap()[0].online);
}
