//! Limits on runaway agents (model steps, tool calls, subagent depth and
//! fan-out), cancel down a subagent tree, and fair claims (sql/schema/leases.sql).
//! SQL-level tests against real Postgres, and one through a real worker
//! process and a scripted fake model.

use std::collections::HashSet;
use std::time::Duration;

use holdfast_db::{store, Error};
use holdfast_fakes::{FakeProvider, Reply};
use holdfast_tests::scenario::{
    agent_state, agent_with_config, count_events, last_event_data, pending_inputs, saved_text,
    spawn_worker, wait_for_event,
};
use holdfast_tests::{wait_until, TestDb};
use holdfast_wire::domain::{Claim, ModelStep, NewToolCall, ToolKind};
use serde_json::{json, Value};
use tokio_postgres::Client;
use uuid::Uuid;

const TTL: Duration = Duration::from_secs(60);
const T: Duration = Duration::from_secs(30);

fn config_with(limits: Value, tools: Value) -> Value {
    json!({"model": {"provider": "anthropic", "name": "claude-test"}, "tools": tools, "limits": limits})
}

/// A config whose agents may spawn subagents `levels` deep: each level's
/// spawn_subagent tool carries the next level's config.
fn spawning_config(limits: Value, levels: usize) -> Value {
    let mut config =
        json!({"model": {"provider": "anthropic", "name": "claude-test"}, "tools": []});
    for _ in 0..levels {
        config = json!({
            "model": {"provider": "anthropic", "name": "claude-test"},
            "tools": [{"type": "spawn_subagent", "config": config}],
        });
    }
    config["limits"] = limits;
    config
}

fn calls_step(input_ids: Vec<Uuid>, calls: &[(&str, ToolKind)]) -> ModelStep {
    ModelStep {
        input_ids,
        message: vec![json!({"type": "text", "text": "working"})],
        tool_calls: calls
            .iter()
            .enumerate()
            .map(|(i, (name, kind))| NewToolCall {
                provider_id: format!("toolu_{i}"),
                name: (*name).to_owned(),
                input: json!({"prompt": "go"}),
                kind: *kind,
            })
            .collect(),
        usage: json!({}),
        stop_reason: Some("tool_use".into()),
        config_version: None,
    }
}

/// Claim `agent`, which must be the only ready agent.
async fn claim(client: &Client, agent: Uuid) -> Claim {
    let claims = store::claim_agents(client, "w", 1, TTL).await.unwrap();
    assert_eq!(claims.len(), 1, "one agent ready");
    assert_eq!(claims[0].agent_id, agent, "the expected agent is ready");
    claims[0]
}

/// The agent answers with `n` spawn_subagent calls and runs them (as the
/// worker's tool batch does); returns each spawn's child (None: refused).
async fn spawn_children(
    client: &Client,
    agent: Uuid,
    config: &Value,
    n: usize,
) -> Vec<Option<Uuid>> {
    let c = claim(client, agent).await;
    let calls = vec![("spawn_subagent", ToolKind::Internal); n];
    store::commit_model_step(
        client,
        c,
        &calls_step(pending_inputs(client, agent).await, &calls),
    )
    .await
    .unwrap();
    let c = claim(client, agent).await;
    let ids: Vec<Uuid> = client
        .query(
            "SELECT id FROM holdfast.tool_calls WHERE agent_id = $1 AND status = 'pending' ORDER BY position",
            &[&agent],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut children = Vec::new();
    for call in ids {
        let child_config = config["tools"][0]["config"].clone();
        children.push(
            store::spawn_subagent(client, c, call, &child_config, "go")
                .await
                .unwrap(),
        );
    }
    store::release_agent(client, c, None).await.unwrap();
    children
}

async fn refused_output(client: &Client, agent: Uuid) -> Value {
    client
        .query_one(
            "SELECT output FROM holdfast.tool_calls WHERE agent_id = $1 AND status = 'completed' AND is_error",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0)
}

async fn count_agents(client: &Client, sql: &str, id: Uuid) -> i64 {
    client.query_one(sql, &[&id]).await.unwrap().get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_model_that_always_calls_a_tool_stops_at_the_step_limit_without_another_call() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    // A tool the agent does not have: each call gets an error result and the
    // model is asked again, for ever, unless something bounds the turn.
    fake.set_default(Reply::tool_calls(vec![("lookup", json!({"q": "more"}))]));
    let _worker = spawn_worker("w-steps", &db.config, &fake, &[]);
    let agent = agent_with_config(
        &client,
        &config_with(json!({"max_model_steps_per_turn": 3}), json!([])),
    )
    .await;
    store::create_input(&client, agent, &json!("loop"), None)
        .await
        .unwrap();

    wait_for_event(&client, agent, "turn.failed", T).await;
    let failed = last_event_data(&client, agent, "turn.failed").await;
    assert_eq!(failed["error"]["type"], "limit_exceeded", "{failed}");
    assert_eq!(failed["error"]["limit"], "max_model_steps_per_turn");
    assert_eq!(failed["error"]["value"], 3);
    wait_until(T, "the agent settles idle", || async {
        agent_state(&client, agent).await == "idle"
    })
    .await;
    assert_eq!(fake.request_count(), 3, "exactly the limit's model calls");
    assert_eq!(count_events(&client, agent, "model.response").await, 3);
    // The third response's call never ran; the cause is in the history.
    let outcomes: Vec<String> = client
        .query(
            "SELECT status FROM holdfast.tool_calls WHERE agent_id = $1 ORDER BY created_at, position",
            &[&agent],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(outcomes, ["completed", "completed", "cancelled"]);
    assert!(saved_text(&client, agent)
        .await
        .contains("[holdfast] The turn failed: limit_exceeded"));
}

#[tokio::test]
async fn a_response_with_too_many_tool_calls_fails_the_turn_and_runs_none() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let agent = agent_with_config(
        &client,
        &json!({
            "model": {"provider": "anthropic", "name": "claude-test"},
            "tools": [{"type": "ask_user"}],
            "limits": {"max_tool_calls_per_response": 2},
        }),
    )
    .await;
    store::create_input(&client, agent, &json!("hi"), None)
        .await
        .unwrap();
    let c = claim(&client, agent).await;
    let step = calls_step(
        pending_inputs(&client, agent).await,
        &[
            ("ask_user", ToolKind::Question),
            ("a", ToolKind::Internal),
            ("b", ToolKind::Internal),
        ],
    );
    store::commit_model_step(&client, c, &step).await.unwrap();

    let failed = last_event_data(&client, agent, "turn.failed").await;
    assert_eq!(failed["error"]["type"], "limit_exceeded");
    assert_eq!(failed["error"]["limit"], "max_tool_calls_per_response");
    assert_eq!(failed["error"]["value"], 2);
    let open = count_agents(
        &client,
        "SELECT count(*) FROM holdfast.tool_calls WHERE agent_id = $1 AND status <> 'cancelled'",
        agent,
    )
    .await;
    assert_eq!(open, 0, "no call of the response runs");
    assert_eq!(count_events(&client, agent, "question.asked").await, 0);
    assert_eq!(
        count_events(&client, agent, "model.response").await,
        1,
        "the response is saved"
    );
    assert_eq!(agent_state(&client, agent).await, "idle");
    // What these turns wrote matches the OpenAPI document's event schemas.
    holdfast_tests::event_schemas::assert_saved_events_match(&client).await;
}

#[tokio::test]
async fn the_subagent_depth_limit_holds_and_no_agent_exists_beyond_it() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let config = spawning_config(json!({"max_subagent_depth": 2}), 4);
    let root = agent_with_config(&client, &config).await;
    store::create_input(&client, root, &json!("go"), None)
        .await
        .unwrap();
    let child = spawn_children(&client, root, &config, 1).await[0].expect("depth 1");
    let child_config = config["tools"][0]["config"].clone();
    let grandchild = spawn_children(&client, child, &child_config, 1).await[0].expect("depth 2");
    let grandchild_config = child_config["tools"][0]["config"].clone();
    let refused = spawn_children(&client, grandchild, &grandchild_config, 1).await;
    assert_eq!(refused, [None], "depth 3 is refused");

    let output = refused_output(&client, grandchild).await;
    assert_eq!(output["type"], "limit_exceeded", "{output}");
    assert_eq!(output["limit"], "max_subagent_depth");
    assert_eq!(output["value"], 2);
    let deepest: i32 = client
        .query_one(
            "SELECT max(subagent_depth) FROM holdfast.agents WHERE root_agent_id = $1",
            &[&root],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(deepest, 2);
    assert_eq!(
        count_agents(
            &client,
            "SELECT count(*) FROM holdfast.agents WHERE root_agent_id = $1",
            root
        )
        .await,
        2
    );
    // The refused call has its result: the grandchild's turn goes on.
    assert_eq!(agent_state(&client, grandchild).await, "ready");
}

#[tokio::test]
async fn the_live_children_limit_holds() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let config = spawning_config(json!({"max_live_children": 2}), 1);
    let root = agent_with_config(&client, &config).await;
    store::create_input(&client, root, &json!("go"), None)
        .await
        .unwrap();
    let children = spawn_children(&client, root, &config, 3).await;
    assert!(
        children[0].is_some() && children[1].is_some(),
        "{children:?}"
    );
    assert_eq!(children[2], None, "a third child at once is refused");
    assert_eq!(
        refused_output(&client, root).await["limit"],
        "max_live_children"
    );
    assert_eq!(
        count_agents(
            &client,
            "SELECT count(*) FROM holdfast.agents WHERE root_agent_id = $1",
            root
        )
        .await,
        2
    );
}

#[tokio::test]
async fn the_descendants_limit_counts_the_whole_tree() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let config = spawning_config(json!({"max_descendants": 2}), 3);
    let root = agent_with_config(&client, &config).await;
    store::create_input(&client, root, &json!("go"), None)
        .await
        .unwrap();
    let child = spawn_children(&client, root, &config, 1).await[0].unwrap();
    let child_config = config["tools"][0]["config"].clone();
    let grandchild = spawn_children(&client, child, &child_config, 1).await[0].unwrap();
    // The grandchild is at depth 2 of 4 allowed, but the tree is full.
    let grandchild_config = child_config["tools"][0]["config"].clone();
    let refused = spawn_children(&client, grandchild, &grandchild_config, 1).await;
    assert_eq!(refused, [None]);
    assert_eq!(
        refused_output(&client, grandchild).await["limit"],
        "max_descendants"
    );
}

#[tokio::test]
async fn cancelling_a_parent_cancels_its_children_and_grandchildren() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let config = spawning_config(json!({}), 2);
    let root = agent_with_config(&client, &config).await;
    store::create_input(&client, root, &json!("go"), None)
        .await
        .unwrap();
    let child = spawn_children(&client, root, &config, 1).await[0].unwrap();
    let child_config = config["tools"][0]["config"].clone();
    let grandchild = spawn_children(&client, child, &child_config, 1).await[0].unwrap();
    // The grandchild is mid-step on a worker.
    let grandchild_claim = claim(&client, grandchild).await;
    assert_eq!(agent_state(&client, root).await, "waiting");
    assert_eq!(agent_state(&client, child).await, "waiting");

    store::request_cancel(&client, root).await.unwrap();
    assert_eq!(count_events(&client, root, "turn.cancelled").await, 1);
    assert_eq!(count_events(&client, child, "turn.cancelled").await, 1);
    assert_eq!(agent_state(&client, child).await, "idle");
    // The running grandchild is asked to stop; its worker completes it.
    let requested: bool = client
        .query_one(
            "SELECT cancel_requested_at IS NOT NULL FROM holdfast.agents WHERE id = $1",
            &[&grandchild],
        )
        .await
        .unwrap()
        .get(0);
    assert!(requested, "the running grandchild has a cancel request");
    store::complete_cancel(&client, grandchild_claim)
        .await
        .unwrap();
    assert_eq!(count_events(&client, grandchild, "turn.cancelled").await, 1);
    // Nothing was handed back to the cancelled parents.
    assert_eq!(count_events(&client, root, "subagent.finished").await, 0);
    assert_eq!(count_events(&client, child, "subagent.finished").await, 0);
}

#[tokio::test]
async fn failing_a_parents_turn_cancels_its_children() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let config = spawning_config(json!({}), 1);
    let root = agent_with_config(&client, &config).await;
    store::create_input(&client, root, &json!("go"), None)
        .await
        .unwrap();
    let c = claim(&client, root).await;
    let step = calls_step(
        pending_inputs(&client, root).await,
        &[("spawn_subagent", ToolKind::Internal)],
    );
    store::commit_model_step(&client, c, &step).await.unwrap();
    let c = claim(&client, root).await;
    let call: Uuid = client
        .query_one(
            "SELECT id FROM holdfast.tool_calls WHERE agent_id = $1",
            &[&root],
        )
        .await
        .unwrap()
        .get(0);
    let child = store::spawn_subagent(&client, c, call, &config["tools"][0]["config"], "go")
        .await
        .unwrap()
        .unwrap();
    store::fail_turn(&client, c, "internal_error", "boom", &[])
        .await
        .unwrap();
    assert_eq!(count_events(&client, child, "turn.cancelled").await, 1);
    assert_eq!(agent_state(&client, child).await, "idle");
}

#[tokio::test]
async fn a_busy_child_is_cancelled_by_maintenance_once_its_lock_is_free() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let config = spawning_config(json!({}), 1);
    let root = agent_with_config(&client, &config).await;
    store::create_input(&client, root, &json!("go"), None)
        .await
        .unwrap();
    let child = spawn_children(&client, root, &config, 1).await[0].unwrap();
    // Another session holds the child's row while the parent is cancelled.
    let holder = db.connect().await;
    holder.batch_execute("BEGIN").await.unwrap();
    holder
        .execute(
            "SELECT 1 FROM holdfast.agents WHERE id = $1 FOR UPDATE",
            &[&child],
        )
        .await
        .unwrap();
    store::request_cancel(&client, root).await.unwrap();
    assert_eq!(count_events(&client, child, "turn.cancelled").await, 0);
    holder.batch_execute("COMMIT").await.unwrap();

    let report = store::maintenance_tick(&client).await.unwrap();
    assert_eq!(report.subagents_cancelled, 1);
    assert_eq!(count_events(&client, child, "turn.cancelled").await, 1);
    assert_eq!(
        store::maintenance_tick(&client)
            .await
            .unwrap()
            .subagents_cancelled,
        0,
        "done once"
    );
}

#[tokio::test]
async fn limits_are_validated_naming_the_field() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let project = store::ensure_project(&client, "limits").await.unwrap();
    for (limits, field) in [
        (
            json!({"max_subagent_depth": 0}),
            "limits.max_subagent_depth",
        ),
        (
            json!({"max_subagent_depth": 1.5}),
            "limits.max_subagent_depth",
        ),
        (
            json!({"max_subagent_depth": "2"}),
            "limits.max_subagent_depth",
        ),
        (
            json!({"max_subagent_depth": 5}),
            "limits.max_subagent_depth",
        ),
        (
            json!({"max_model_steps_per_turn": 101}),
            "limits.max_model_steps_per_turn",
        ),
        (json!({"max_steps": 3}), "limits.max_steps"),
        (json!([1]), "limits"),
    ] {
        match store::create_agent(&client, project, &config_with(limits.clone(), json!([]))).await {
            Err(Error::Invalid { field: Some(f), .. }) => assert_eq!(f, field, "{limits}"),
            other => panic!("{limits}: {other:?}"),
        }
    }
    store::create_agent(
        &client,
        project,
        &config_with(
            json!({"max_subagent_depth": 4, "max_model_steps_per_turn": 1}),
            json!([]),
        ),
    )
    .await
    .unwrap();
    // The operator's maximum moves the bound.
    client
        .execute("SELECT holdfast.set_limit_maxima(100, 64, 8, 16, 64)", &[])
        .await
        .unwrap();
    store::create_agent(
        &client,
        project,
        &config_with(json!({"max_subagent_depth": 5}), json!([])),
    )
    .await
    .unwrap();
}

/// `n` ready agents in a new project named `name`; returns (project, agents).
async fn ready_agents(client: &Client, name: &str, n: i32) -> (Uuid, Vec<Uuid>) {
    let project = store::ensure_project(client, name).await.unwrap();
    let agents = client
        .query(
            "SELECT a FROM (SELECT holdfast.create_agent($1, $2) AS a FROM generate_series(1, $3)) s,
                    LATERAL holdfast.create_input(s.a, '\"hi\"', NULL)",
            &[&project, &holdfast_tests::default_config(), &n],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    (project, agents)
}

#[tokio::test]
async fn a_small_project_is_not_starved_by_a_big_one() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (_, _big) = ready_agents(&client, "big", 500).await;
    let (_, small) = ready_agents(&client, "small", 5).await;
    let claimed: HashSet<Uuid> = store::claim_agents(&client, "w", 10, TTL)
        .await
        .unwrap()
        .iter()
        .map(|c| c.agent_id)
        .collect();
    assert_eq!(claimed.len(), 10);
    for agent in &small {
        assert!(
            claimed.contains(agent),
            "the small project's agents are all in the first 10"
        );
    }
}

#[tokio::test]
async fn an_old_agent_that_became_ready_late_waits_its_turn() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let project = store::ensure_project(&client, "order").await.unwrap();
    let old = holdfast_tests::new_agent(&client, project).await;
    let first = holdfast_tests::new_agent(&client, project).await;
    let second = holdfast_tests::new_agent(&client, project).await;
    for agent in [first, second, old] {
        store::create_input(&client, agent, &json!("hi"), None)
            .await
            .unwrap();
    }
    let order: Vec<Uuid> = {
        let mut order = Vec::new();
        for _ in 0..3 {
            order.push(store::claim_agents(&client, "w", 1, TTL).await.unwrap()[0].agent_id);
        }
        order
    };
    assert_eq!(
        order,
        [first, second, old],
        "claimed in the order they became ready"
    );
}

#[tokio::test]
async fn a_projects_running_cap_holds_even_for_concurrent_claimers() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (capped, capped_agents) = ready_agents(&client, "capped", 6).await;
    let (_, free_agents) = ready_agents(&client, "free", 3).await;
    store::set_project_max_running(&client, "capped", Some(2))
        .await
        .unwrap();
    let a = db.connect().await;
    let b = db.connect().await;
    let (ca, cb) = tokio::join!(
        store::claim_agents(&a, "wa", 10, TTL),
        store::claim_agents(&b, "wb", 10, TTL)
    );
    let claimed: Vec<Claim> = ca.unwrap().into_iter().chain(cb.unwrap()).collect();
    let ids: HashSet<Uuid> = claimed.iter().map(|c| c.agent_id).collect();
    let running_capped = capped_agents.iter().filter(|a| ids.contains(a)).count();
    assert_eq!(running_capped, 2, "the capped project runs 2 at once");
    assert!(
        free_agents.iter().all(|a| ids.contains(a)),
        "others are not held back"
    );
    let running: i64 = count_agents(
        &client,
        "SELECT count(*) FROM holdfast.agents WHERE project_id = $1 AND state = 'running'",
        capped,
    )
    .await;
    assert_eq!(running, 2);

    // A released slot is taken again, one at a time.
    let capped_claim = claimed
        .iter()
        .find(|c| capped_agents.contains(&c.agent_id))
        .unwrap();
    store::release_agent(&client, *capped_claim, None)
        .await
        .unwrap();
    let again = store::claim_agents(&client, "w", 10, TTL).await.unwrap();
    assert_eq!(again.len(), 1);
    assert!(capped_agents.contains(&again[0].agent_id));
    // No cap again: the rest run.
    store::set_project_max_running(&client, "capped", None)
        .await
        .unwrap();
    assert_eq!(
        store::claim_agents(&client, "w", 10, TTL)
            .await
            .unwrap()
            .len(),
        4
    );
}
