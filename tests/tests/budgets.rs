//! `config.budget`: a turn or agent whose model usage reached a maximum
//! makes no further model call; its turn ends `budget_exceeded`. Through a
//! real worker process and the fake provider; the maxima are the usage the
//! fake was told to report, so the budget is reached exactly.

use std::time::Duration;

use holdfast_engine::store::{self, NewModelPrice};
use holdfast_fakes::{FakeProvider, Reply};
use holdfast_tests::scenario::{
    agent_with_config, answer_waiting_call, count_events, last_event_data, spawn_worker,
    wait_for_events,
};
use holdfast_tests::TestDb;
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
