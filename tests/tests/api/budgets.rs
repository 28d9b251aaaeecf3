//! `config.budget`: a turn or agent whose model usage reached a maximum
//! makes no further model call; its turn ends `budget_exceeded`. Through a
//! real worker process and the fake provider; the maxima are the usage the
//! fake was told to report, so the budget is reached exactly.

use std::time::Duration;

use holdfast_db::store::{self, NewModelPrice};
use holdfast_db::Error;
use holdfast_fakes::{FakeProvider, Reply};
use holdfast_tests::scenario::{
    agent_state, agent_with_config, answer_waiting_call, count_events, last_event_data,
    spawn_worker, wait_for_events,
};
use holdfast_tests::wait_until;
use holdfast_tests::TestDb;
use holdfast_wire::api::approvals::ApprovalView;
use holdfast_wire::domain::ApprovalStatus;
use serde_json::{json, Value};
use uuid::Uuid;

const T: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_turn_that_reached_its_token_budget_ends_budget_exceeded_without_another_model_call() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    let (input, output) = (1200u64, 34u64);
    fake.push(Reply::tool_calls(vec![("lookup", json!({"order": "A-7"}))]).usage(input, output));
    fake.push(Reply::text("A new turn has its own budget.").usage(10, 5));
    let _worker = spawn_worker("w-budget-turn", &db.config, &fake, &[]);
    let max = input + output;
    let config = json!({"model": {"provider": "anthropic", "name": "claude-test"},
                        "tools": [{"type": "custom", "name": "lookup"}],
                        "budget": {"max_tokens_per_turn": max}});
    let agent = agent_with_config(&client, &config).await;
    store::create_input(&client, agent, &json!("where is A-7?"), None)
        .await
        .unwrap();
    answer_waiting_call(&client, agent, json!("shipped")).await;
    wait_for_events(&client, agent, "turn.failed", 1, T).await;
    let error = &last_event_data(&client, agent, "turn.failed").await["error"];
    assert_eq!(error["type"], "budget_exceeded");
    assert_eq!(error["budget"], "max_tokens_per_turn");
    assert_eq!(error["limit"], json!(max));
    assert_eq!(error["value"], json!(max));
    assert_eq!(
        fake.requests().len(),
        1,
        "the tool result was not sent to the model"
    );

    // The next turn starts from nothing.
    store::create_input(&client, agent, &json!("and now?"), None)
        .await
        .unwrap();
    wait_for_events(&client, agent, "turn.completed", 1, T).await;
    assert_eq!(fake.requests().len(), 2);
    assert_eq!(count_events(&client, agent, "turn.failed").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_agent_that_reached_its_cost_budget_fails_its_next_turn_before_paying_and_keeps_the_input(
) {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (input_price, output_price) = (3.0, 15.0);
    store::set_model_price(
        &client,
        &NewModelPrice {
            provider: "anthropic",
            model: "claude-budget",
            input_usd_per_mtok: input_price,
            output_usd_per_mtok: output_price,
            cache_read_usd_per_mtok: None,
            cache_write_usd_per_mtok: None,
        },
    )
    .await
    .unwrap();
    let fake = FakeProvider::start().await;
    let (input, output) = (2000u64, 400u64);
    fake.push(Reply::text("That used the budget.").usage(input, output));
    let _worker = spawn_worker("w-budget-agent", &db.config, &fake, &[]);
    let cost = (input as f64 * input_price + output as f64 * output_price) / 1e6;
    let config = json!({"model": {"provider": "anthropic", "name": "claude-budget"},
                        "budget": {"max_cost_usd_per_agent": cost}});
    let agent = agent_with_config(&client, &config).await;
    store::create_input(&client, agent, &json!("first"), None)
        .await
        .unwrap();
    wait_for_events(&client, agent, "turn.completed", 1, T).await;
    store::create_input(&client, agent, &json!("second"), None)
        .await
        .unwrap();
    wait_for_events(&client, agent, "turn.failed", 1, T).await;
    let error = &last_event_data(&client, agent, "turn.failed").await["error"];
    assert_eq!(error["type"], "budget_exceeded");
    assert_eq!(error["budget"], "max_cost_usd_per_agent");
    assert_eq!(error["value"].as_f64(), Some(cost));
    assert_eq!(
        fake.requests().len(),
        1,
        "no call after the budget was used"
    );
    let history: Vec<Value> = client
        .query(
            "SELECT content FROM holdfast.messages WHERE agent_id = $1 AND role = 'user' ORDER BY seq",
            &[&agent],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        history.len(),
        2,
        "the refused turn's input is in the history"
    );
}

#[tokio::test]
async fn a_budget_out_of_range_is_refused_naming_its_field() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    for (budget, field) in [
        (
            json!({"max_cost_usd_per_turn": 0}),
            "budget.max_cost_usd_per_turn",
        ),
        (
            json!({"max_tokens_per_agent": 1.5}),
            "budget.max_tokens_per_agent",
        ),
        (json!({"max_tokens": 10}), "budget.max_tokens"),
        (
            json!({"max_tokens_per_turn": 10, "on_exceeded": "maybe"}),
            "budget.on_exceeded",
        ),
        (json!("lots"), "budget"),
    ] {
        let config = json!({"model": {"provider": "anthropic", "name": "claude-test"},
                            "budget": budget});
        let project: Uuid = client
            .query_one("SELECT holdfast.ensure_project('budgets')", &[])
            .await
            .unwrap()
            .get(0);
        let error = store::create_agent(&client, project, &config)
            .await
            .unwrap_err();
        assert_eq!(error.field(), Some(field), "{budget}: {error}");
    }
}

/// An agent whose turn budget is the usage of its first call, asking
/// (`on_exceeded: "ask"`) and with a custom tool, and its turn stopped at
/// that budget: after the tool's result, the turn waits on a budget
/// approval and no second model call is made. Returns the agent and the
/// budget's maximum.
async fn turn_waiting_on_its_budget(
    client: &tokio_postgres::Client,
    fake: &FakeProvider,
) -> (Uuid, u64) {
    let (input, output) = (1200u64, 34u64);
    fake.push(Reply::tool_calls(vec![("lookup", json!({"order": "A-7"}))]).usage(input, output));
    let max = input + output;
    let config = json!({"model": {"provider": "anthropic", "name": "claude-test"},
                        "tools": [{"type": "custom", "name": "lookup"}],
                        "budget": {"max_tokens_per_turn": max, "on_exceeded": "ask"}});
    let agent = agent_with_config(client, &config).await;
    store::create_input(client, agent, &json!("where is A-7?"), None)
        .await
        .unwrap();
    answer_waiting_call(client, agent, json!("shipped")).await;
    wait_for_events(client, agent, "approval.requested", 1, T).await;
    wait_until(T, "the agent waits on the approval", || async {
        agent_state(client, agent).await == "waiting"
    })
    .await;
    assert_eq!(fake.requests().len(), 1, "no model call past the budget");
    (agent, max)
}

async fn pending_budget_approval(client: &tokio_postgres::Client, agent: Uuid) -> ApprovalView {
    let pending = store::list_approvals(client, agent, Some(ApprovalStatus::Pending), 10)
        .await
        .unwrap();
    assert_eq!(pending.len(), 1, "one pending approval: {pending:?}");
    ApprovalView::from(pending.into_iter().next().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_turn_at_its_budget_that_asks_waits_for_an_approval_and_approving_lets_it_go_on() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    let _worker = spawn_worker("w-budget-ask", &db.config, &fake, &[]);
    let (agent, max) = turn_waiting_on_its_budget(&client, &fake).await;

    let requested = last_event_data(&client, agent, "approval.requested").await;
    assert_eq!(requested["kind"], "budget");
    let reached =
        json!({"budget": "max_tokens_per_turn", "limit": max, "value": max, "granted": 0});
    assert_eq!(requested["budget"], reached);
    let approval = pending_budget_approval(&client, agent).await;
    let wire = serde_json::to_value(&approval).unwrap();
    assert_eq!(wire["kind"], "budget");
    assert_eq!(wire["budget"], reached);
    assert!(
        wire.get("tool_name").is_none() && wire.get("tool_call_id").is_none(),
        "a budget approval names no tool call: {wire}"
    );
    assert_eq!(count_events(&client, agent, "turn.failed").await, 0);

    // Approved: one more maximum, and the call it was stopped before is made.
    fake.push(Reply::text("A-7 shipped.").usage(10, 5));
    store::answer_approval(&client, approval.id, "approve", "ops@example.com", None)
        .await
        .unwrap();
    wait_for_events(&client, agent, "turn.completed", 1, T).await;
    assert_eq!(fake.requests().len(), 2);
    let answered = last_event_data(&client, agent, "approval.answered").await;
    assert_eq!(answered["kind"], "budget");
    assert_eq!(answered["decision"], "approve");
    let grants: Value = client
        .query_one(
            "SELECT budget_grants FROM holdfast.agents WHERE id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(grants["max_tokens_per_turn"]["grants"], 1);

    // The grant was for that turn: the next turn's budget is the maximum
    // again, and its first call (cheap) is made.
    fake.push(Reply::text("Still here.").usage(10, 5));
    store::create_input(&client, agent, &json!("and now?"), None)
        .await
        .unwrap();
    wait_for_events(&client, agent, "turn.completed", 2, T).await;
    assert_eq!(fake.requests().len(), 3);
    // What these turns wrote matches the OpenAPI document's event schemas.
    holdfast_tests::event_schemas::assert_saved_events_match(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn denying_a_budget_approval_ends_the_turn_budget_exceeded_without_another_call() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    let _worker = spawn_worker("w-budget-deny", &db.config, &fake, &[]);
    let (agent, max) = turn_waiting_on_its_budget(&client, &fake).await;
    let approval = pending_budget_approval(&client, agent).await;

    store::answer_approval(
        &client,
        approval.id,
        "deny",
        "ops@example.com",
        Some("too dear"),
    )
    .await
    .unwrap();
    wait_for_events(&client, agent, "turn.failed", 1, T).await;
    let error = &last_event_data(&client, agent, "turn.failed").await["error"];
    assert_eq!(error["type"], "budget_exceeded");
    assert_eq!(error["budget"], "max_tokens_per_turn");
    assert_eq!(error["limit"], json!(max));
    assert_eq!(agent_state(&client, agent).await, "idle");
    assert_eq!(fake.requests().len(), 1, "denied: no call past the budget");
    // What these turns wrote matches the OpenAPI document's event schemas.
    holdfast_tests::event_schemas::assert_saved_events_match(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancelling_a_turn_that_waits_on_its_budget_cancels_the_approval() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    let _worker = spawn_worker("w-budget-cancel", &db.config, &fake, &[]);
    let (agent, _) = turn_waiting_on_its_budget(&client, &fake).await;
    let approval = pending_budget_approval(&client, agent).await;

    store::request_cancel(&client, agent).await.unwrap();
    wait_for_events(&client, agent, "turn.cancelled", 1, T).await;
    assert_eq!(agent_state(&client, agent).await, "idle");
    let late = store::answer_approval(&client, approval.id, "approve", "ops@example.com", None)
        .await
        .unwrap_err();
    assert!(matches!(late, Error::Conflict(_)), "{late}");
    assert_eq!(fake.requests().len(), 1);
}
