//! Model usage summed per step, turn, agent and project (sql/schema/usage.sql):
//! through a real worker process, the fake provider's streams and the API.
//! Every expected number is summed from the usage the fake was told to
//! report, never written down by hand.

use std::time::Duration;

use holdfast_db::store::{self, NewModelPrice};
use holdfast_fakes::{FakeProvider, Reply};
use holdfast_tests::api_server::{error_of, project_key, ApiServer};
use holdfast_tests::scenario::{
    answer_waiting_call, last_event_data, spawn_worker, wait_for_events,
};
use holdfast_tests::TestDb;
use holdfast_wire::domain::TokenUsage;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(30);

/// What the fake reports for one response.
#[derive(Clone, Copy)]
struct Reported {
    input: u64,
    output: u64,
    cache_read: u64,
    cache_write: u64,
    reasoning: u64,
}

impl Reported {
    fn onto(self, reply: Reply) -> Reply {
        reply
            .usage(self.input, self.output)
            .cache_tokens(self.cache_read, self.cache_write)
            .reasoning_tokens(self.reasoning)
    }
}

/// The sum of `reported`, priced at `price` (input, output, cache read,
/// cache write per million tokens) when given.
fn sum(reported: &[Reported], price: Option<(f64, f64, f64, f64)>) -> TokenUsage {
    let total = |f: fn(&Reported) -> u64| reported.iter().map(f).sum::<u64>() as i64;
    let cost = price.map(|(input, output, read, write)| {
        reported
            .iter()
            .map(|r| {
                ((r.input - r.cache_read - r.cache_write) as f64 * input
                    + r.cache_read as f64 * read
                    + r.cache_write as f64 * write
                    + r.output as f64 * output)
                    / 1e6
            })
            .sum()
    });
    TokenUsage {
        input_tokens: total(|r| r.input),
        output_tokens: total(|r| r.output),
        cache_read_tokens: total(|r| r.cache_read),
        cache_write_tokens: total(|r| r.cache_write),
        reasoning_tokens: total(|r| r.reasoning),
        cost_usd: cost,
        ..TokenUsage::default()
    }
}

/// `actual` is `expected`, the cost to a millionth of a cent (it is a
/// decimal sum in SQL, a float one here).
fn assert_usage(actual: &TokenUsage, expected: &TokenUsage, what: &str) {
    let tokens = |u: &TokenUsage| {
        (
            u.input_tokens,
            u.output_tokens,
            u.cache_read_tokens,
            u.cache_write_tokens,
            u.reasoning_tokens,
        )
    };
    assert_eq!(tokens(actual), tokens(expected), "{what}: tokens");
    match (actual.cost_usd, expected.cost_usd) {
        (Some(a), Some(e)) => assert!((a - e).abs() < 1e-8, "{what}: cost {a} != {e}"),
        (a, e) => assert_eq!(a, e, "{what}: cost"),
    }
}

fn usage_of(value: &Value) -> TokenUsage {
    serde_json::from_value(value.clone()).expect("a usage object")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn usage_sums_per_turn_agent_and_project_equal_what_the_provider_reported_at_the_operators_prices(
) {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let server = ApiServer::start(&db).await;
    let (project, key) = project_key(&client).await;
    let price = (3.0, 15.0, 0.3, 3.75);
    store::set_model_price(
        &client,
        &NewModelPrice {
            provider: "anthropic",
            model: "claude-priced",
            input_usd_per_mtok: price.0,
            output_usd_per_mtok: price.1,
            cache_read_usd_per_mtok: Some(price.2),
            cache_write_usd_per_mtok: Some(price.3),
        },
    )
    .await
    .unwrap();

    // Turn 1: a tool call and the answer; turn 2: one answer.
    let first = [
        Reported {
            input: 3000,
            output: 20,
            cache_read: 0,
            cache_write: 2500,
            reasoning: 0,
        },
        Reported {
            input: 3100,
            output: 12,
            cache_read: 2500,
            cache_write: 550,
            reasoning: 0,
        },
    ];
    let second = [Reported {
        input: 3300,
        output: 40,
        cache_read: 3050,
        cache_write: 200,
        reasoning: 0,
    }];
    let fake = FakeProvider::start().await;
    fake.push(first[0].onto(Reply::tool_calls(vec![("lookup", json!({"order": "A-7"}))])));
    fake.push(first[1].onto(Reply::text("It shipped.")));
    fake.push(second[0].onto(Reply::text("You are welcome.")));
    let _worker = spawn_worker("w-usage", &db.config, &fake, &[]);

    let config = json!({"model": {"provider": "anthropic", "name": "claude-priced"},
                        "tools": [{"type": "custom", "name": "lookup"}]});
    let agent = store::create_agent(&client, project, &config)
        .await
        .unwrap();
    store::create_input(&client, agent, &json!("where is A-7?"), None)
        .await
        .unwrap();
    answer_waiting_call(&client, agent, json!("shipped")).await;
    wait_for_events(&client, agent, "turn.completed", 1, T).await;
    let first_turn = usage_of(&last_event_data(&client, agent, "turn.completed").await["usage"]);
    assert_usage(
        &first_turn,
        &sum(&first, Some(price)),
        "turn.completed of turn 1",
    );
    store::create_input(&client, agent, &json!("thanks"), None)
        .await
        .unwrap();
    wait_for_events(&client, agent, "turn.completed", 2, T).await;
    let second_turn = usage_of(&last_event_data(&client, agent, "turn.completed").await["usage"]);
    assert_usage(
        &second_turn,
        &sum(&second, Some(price)),
        "turn.completed of turn 2",
    );

    let usage = server.client(&key).agent_usage(agent).await.unwrap();
    let every: Vec<Reported> = first.iter().chain(&second).copied().collect();
    assert_usage(&usage.usage, &sum(&every, Some(price)), "the agent's sum");
    assert_eq!(usage.turns.len(), 2, "two turns called the model");
    assert_eq!(usage.turns[0].model_steps, 2);
    assert_usage(&usage.turns[0].usage, &sum(&first, Some(price)), "turn 1");
    assert_eq!(usage.turns[1].model_steps, 1);
    assert_usage(&usage.turns[1].usage, &sum(&second, Some(price)), "turn 2");
    assert!(
        usage.turns[0].turn < usage.turns[1].turn,
        "oldest turn first"
    );

    // An OpenAI agent of the same project, on a model without a price.
    let reasoning = [Reported {
        input: 900,
        output: 300,
        cache_read: 128,
        cache_write: 0,
        reasoning: 256,
    }];
    fake.push(reasoning[0].onto(Reply::text("Thought it through.")));
    let unpriced = json!({"model": {"provider": "openai", "name": "gpt-unpriced"}});
    let other = store::create_agent(&client, project, &unpriced)
        .await
        .unwrap();
    store::create_input(&client, other, &json!("think"), None)
        .await
        .unwrap();
    wait_for_events(&client, other, "turn.completed", 1, T).await;
    let usage = server.client(&key).agent_usage(other).await.unwrap();
    assert_usage(
        &usage.usage,
        &sum(&reasoning, None),
        "an unpriced model's sum",
    );
    assert_eq!(usage.usage.cost_usd, None, "unpriced: cost null");
    assert_eq!(usage.turns.len(), 1);
    assert_usage(
        &usage.turns[0].usage,
        &sum(&reasoning, None),
        "an unpriced turn",
    );

    // The project's view: one row per provider and model (one day).
    let rows = client
        .query(
            "SELECT provider, model, model_steps, input_tokens, output_tokens, cache_read_tokens,
                    cache_write_tokens, reasoning_tokens, cost_usd::float8
               FROM holdfast.usage_by_project WHERE project_id = $1 ORDER BY provider",
            &[&project],
        )
        .await
        .unwrap();
    let view: Vec<(String, String, i64, TokenUsage)> = rows
        .iter()
        .map(|r| {
            let usage = TokenUsage {
                input_tokens: r.get(3),
                output_tokens: r.get(4),
                cache_read_tokens: r.get(5),
                cache_write_tokens: r.get(6),
                reasoning_tokens: r.get(7),
                cost_usd: r.get(8),
                ..TokenUsage::default()
            };
            (r.get(0), r.get(1), r.get(2), usage)
        })
        .collect();
    assert_eq!(view.len(), 2, "{:?}", view);
    assert_eq!(
        (view[0].0.as_str(), view[0].1.as_str(), view[0].2),
        ("anthropic", "claude-priced", 3)
    );
    assert_usage(
        &view[0].3,
        &sum(&every, Some(price)),
        "the view's anthropic row",
    );
    assert_eq!(
        (view[1].0.as_str(), view[1].1.as_str(), view[1].2),
        ("openai", "gpt-unpriced", 1)
    );
    assert_usage(&view[1].3, &sum(&reasoning, None), "the view's openai row");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_usage_of_an_agent_of_another_project_is_a_404() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let server = ApiServer::start(&db).await;
    let (project, _) = project_key(&client).await;
    let (_, other_key) = project_key(&client).await;
    let config = json!({"model": {"provider": "anthropic", "name": "claude-test"}});
    let agent = store::create_agent(&client, project, &config)
        .await
        .unwrap();
    let response = server
        .request(
            Method::GET,
            &format!("/v1/agents/{agent}/usage"),
            &other_key,
        )
        .send()
        .await
        .unwrap();
    let (status, error_type, _, _) = error_of(response).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(error_type, "not_found");
}

#[tokio::test]
async fn a_price_out_of_range_is_refused_naming_its_field_and_changes_nothing() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let price = |input, cache_read| NewModelPrice {
        provider: "anthropic",
        model: "claude-x",
        input_usd_per_mtok: input,
        output_usd_per_mtok: 15.0,
        cache_read_usd_per_mtok: cache_read,
        cache_write_usd_per_mtok: None,
    };
    store::set_model_price(&client, &price(3.0, None))
        .await
        .unwrap();
    for (bad, field) in [
        (price(-1.0, None), "input_usd_per_mtok"),
        (price(3.0, Some(-0.5)), "cache_read_usd_per_mtok"),
    ] {
        let error = store::set_model_price(&client, &bad).await.unwrap_err();
        assert_eq!(error.field(), Some(field), "{error}");
    }
    let prices = store::list_model_prices(&client).await.unwrap();
    assert_eq!(prices.len(), 1);
    assert_eq!(
        prices[0].input_usd_per_mtok, 3.0,
        "the refused sets changed nothing"
    );
    assert_eq!(prices[0].cache_read_usd_per_mtok, None);
    assert!(store::remove_model_price(&client, "anthropic", "claude-x")
        .await
        .unwrap());
    assert!(!store::remove_model_price(&client, "anthropic", "claude-x")
        .await
        .unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_compaction_call_counts_in_the_turn_agent_and_project_sums() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let server = ApiServer::start(&db).await;
    let (project, key) = project_key(&client).await;
    let price = (3.0, 15.0, 0.3, 3.75);
    store::set_model_price(
        &client,
        &NewModelPrice {
            provider: "anthropic",
            model: "claude-compacted",
            input_usd_per_mtok: price.0,
            output_usd_per_mtok: price.1,
            cache_read_usd_per_mtok: Some(price.2),
            cache_write_usd_per_mtok: Some(price.3),
        },
    )
    .await
    .unwrap();
    let reported = |input, output| Reported {
        input,
        output,
        cache_read: 0,
        cache_write: 0,
        reasoning: 0,
    };
    let (first, summary, answer) = (reported(4000, 30), reported(5200, 400), reported(900, 25));
    let fake = FakeProvider::start().await;
    fake.push(first.onto(Reply::text("first answer")));
    // Turn 2: the context is too long; the summary call, then the answer.
    fake.push(Reply::context_too_long());
    fake.push(summary.onto(Reply::text("SUMMARY")));
    fake.push(answer.onto(Reply::text("second answer")));
    let _worker = spawn_worker("w-usage-compaction", &db.config, &fake, &[]);

    let config = json!({"model": {"provider": "anthropic", "name": "claude-compacted"}});
    let agent = store::create_agent(&client, project, &config)
        .await
        .unwrap();
    store::create_input(&client, agent, &json!("first question"), None)
        .await
        .unwrap();
    wait_for_events(&client, agent, "turn.completed", 1, T).await;
    store::create_input(&client, agent, &json!("second question"), None)
        .await
        .unwrap();
    wait_for_events(&client, agent, "turn.completed", 2, T).await;
    assert_eq!(fake.request_count(), 4, "answer, too long, summary, answer");

    let second_turn = usage_of(&last_event_data(&client, agent, "turn.completed").await["usage"]);
    assert_usage(
        &second_turn,
        &sum(&[summary, answer], Some(price)),
        "turn.completed of the compacted turn",
    );
    let usage = server.client(&key).agent_usage(agent).await.unwrap();
    assert_usage(
        &usage.usage,
        &sum(&[first, summary, answer], Some(price)),
        "the agent's sum",
    );
    assert_eq!(usage.turns.len(), 2);
    assert_eq!(
        usage.turns[1].model_steps, 2,
        "the summary call and the answer"
    );
    assert_usage(
        &usage.turns[1].usage,
        &sum(&[summary, answer], Some(price)),
        "the compacted turn",
    );
    let calls: i64 = client
        .query_one(
            "SELECT model_steps FROM holdfast.usage_by_project WHERE project_id = $1",
            &[&project],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(calls, 3, "the project's view counts the compaction");
}
