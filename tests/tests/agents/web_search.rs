//! `web_search` through real worker processes against a fake backend that
//! speaks SearXNG's and Brave's wire formats: a search runs once and its
//! results reach the model, rate limits are retried inside the call, a
//! backend that keeps failing is an error result (the turn goes on), and a
//! worker killed mid-search never searches again.

use std::time::Duration;

use holdfast_fakes::{FakeProvider, Reply};
use holdfast_tests::scenario::{count_events, spawn_worker, start_turn, wait_for_event};
use holdfast_tests::search_backend::{SearchBackend, BRAVE_KEY};
use holdfast_tests::{MaintenanceLoop, TestDb};
use serde_json::{json, Value};
use tokio_postgres::Client;
use uuid::Uuid;

const T: Duration = Duration::from_secs(30);

/// The worker's settings for `backend` (SearXNG or Brave), with retries
/// short enough for a test.
fn settings<'a>(kind: &'a str, backend: &'a SearchBackend) -> Vec<(&'a str, &'a str)> {
    let mut envs = vec![
        ("HOLDFAST_WEB_SEARCH_BACKEND", kind),
        ("HOLDFAST_WEB_SEARCH_URL", backend.url.as_str()),
        ("HOLDFAST_WEB_SEARCH_MAX_RETRIES", "2"),
        ("HOLDFAST_WEB_SEARCH_BACKOFF_BASE", "10ms"),
        ("HOLDFAST_WEB_SEARCH_BACKOFF_MAX", "50ms"),
    ];
    if kind == "brave" {
        envs.push(("HOLDFAST_WEB_SEARCH_API_KEY", BRAVE_KEY));
    }
    envs
}

/// The web_search call's status, and its output and error flag once it
/// has them.
async fn search_call(client: &Client, agent: Uuid) -> (String, Option<Value>, Option<bool>) {
    let row = client
        .query_one(
            "SELECT status, output, is_error FROM holdfast.tool_calls
              WHERE agent_id = $1 AND name = 'web_search'",
            &[&agent],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_searxng_search_runs_once_and_its_results_reach_the_model() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    let backend = SearchBackend::start().await;
    fake.push(Reply::tool_calls(vec![(
        "web_search",
        json!({"query": "durable agents", "site": "docs.example", "recency_days": 5, "max_results": 1}),
    )]));
    fake.push(Reply::text("Found it."));
    let _worker = spawn_worker("w-searx", &db.config, &fake, &settings("searxng", &backend));
    let agent = start_turn(&client, json!([{"type": "web_search"}]), "search").await;
    wait_for_event(&client, agent, "turn.completed", T).await;

    let requests = backend.requests();
    assert_eq!(requests.len(), 1, "one search: {requests:?}");
    let params = &requests[0].params;
    assert_eq!(requests[0].path, "/search");
    assert_eq!(params["q"], "durable agents site:docs.example");
    assert_eq!(params["format"], "json");
    assert_eq!(params["time_range"], "week", "5 days round up to a week");

    let (status, output, is_error) = search_call(&client, agent).await;
    assert_eq!((status.as_str(), is_error), ("completed", Some(false)));
    assert_eq!(
        output.unwrap(),
        json!({"query": "durable agents site:docs.example", "truncated": false, "results": [{
            "title": "Durable agents on PostgreSQL",
            "url": "https://docs.example/durable-agents",
            "snippet": "Every step is saved as it happens, so a crash loses nothing.",
            "published": "2026-11-20T00:00:00"
        }]}),
        "max_results 1 keeps the first result only"
    );
    // The model saw the tool, then the result.
    let first = fake.requests()[0].body.to_string();
    assert!(first.contains("\"web_search\""), "{first}");
    let next = fake.last_request().unwrap().body.to_string();
    assert!(
        next.contains("https://docs.example/durable-agents"),
        "{next}"
    );
    assert!(!next.contains("blog.example"), "{next}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_brave_429_then_200_is_one_result_and_the_key_stays_with_the_operator() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    let backend = SearchBackend::start().await;
    backend.fail_next(&[429]);
    fake.push(Reply::tool_calls(vec![(
        "web_search",
        json!({"query": "rust book", "recency_days": 30}),
    )]));
    fake.push(Reply::text("Here it is."));
    let _worker = spawn_worker("w-brave", &db.config, &fake, &settings("brave", &backend));
    let agent = start_turn(&client, json!([{"type": "web_search"}]), "search").await;
    wait_for_event(&client, agent, "turn.completed", T).await;

    let requests = backend.requests();
    assert_eq!(requests.len(), 2, "the 429 was retried once: {requests:?}");
    for request in &requests {
        assert_eq!(request.path, "/res/v1/web/search");
        assert_eq!(request.token.as_deref(), Some(BRAVE_KEY));
        assert_eq!(request.params["q"], "rust book");
        assert_eq!(request.params["count"], "10");
        assert_eq!(request.params["freshness"], "pm");
    }
    assert_eq!(count_events(&client, agent, "tool_call.completed").await, 1);
    let (status, output, is_error) = search_call(&client, agent).await;
    assert_eq!((status.as_str(), is_error), ("completed", Some(false)));
    let output = output.unwrap();
    let results = output["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(
        results[0],
        json!({"title": "The Rust Programming Language",
               "url": "https://doc.rust-lang.org/book/",
               "snippet": "Welcome to The Rust Programming Language, an introductory book about Rust.",
               "published": "2026-10-01T08:00:00"}),
        "markup stripped, page_age as published"
    );
    assert!(results[1].get("published").is_none(), "{output}");

    // The key never reaches the model, the timeline or the stored config.
    for request in fake.requests() {
        assert!(!request.body.to_string().contains(BRAVE_KEY));
    }
    let leaked: i64 = client
        .query_one(
            "SELECT (SELECT count(*) FROM holdfast.events WHERE data::text LIKE '%' || $1 || '%')
                  + (SELECT count(*) FROM holdfast.agents WHERE config::text LIKE '%' || $1 || '%')",
            &[&BRAVE_KEY],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(leaked, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backend_that_keeps_failing_is_an_error_result_and_the_turn_goes_on() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    let backend = SearchBackend::start().await;
    backend.fail_next(&[503, 502, 500, 500]);
    fake.push(Reply::tool_calls(vec![(
        "web_search",
        json!({"query": "anything"}),
    )]));
    fake.push(Reply::text("The search is down."));
    let _worker = spawn_worker("w-down", &db.config, &fake, &settings("searxng", &backend));
    let agent = start_turn(&client, json!([{"type": "web_search"}]), "search").await;
    wait_for_event(&client, agent, "turn.completed", T).await;

    assert_eq!(backend.requests().len(), 3, "the first try and two retries");
    let (status, output, is_error) = search_call(&client, agent).await;
    assert_eq!((status.as_str(), is_error), ("completed", Some(true)));
    let output = output.unwrap();
    let message = output.as_str().unwrap();
    assert!(message.contains("500"), "{message}");
    assert!(!message.contains(&backend.url), "{message}");
    assert_eq!(count_events(&client, agent, "turn.failed").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_a_backend_a_search_is_an_error_result_saying_so() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    fake.push(Reply::tool_calls(vec![(
        "web_search",
        json!({"query": "x"}),
    )]));
    fake.push(Reply::text("No search here."));
    let _worker = spawn_worker("w-nobackend", &db.config, &fake, &[]);
    let agent = start_turn(&client, json!([{"type": "web_search"}]), "search").await;
    wait_for_event(&client, agent, "turn.completed", T).await;
    let (_, output, is_error) = search_call(&client, agent).await;
    assert_eq!(is_error, Some(true));
    let output = output.unwrap();
    assert!(
        output
            .as_str()
            .unwrap()
            .contains("HOLDFAST_WEB_SEARCH_BACKEND"),
        "{output}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_killed_mid_search_never_searches_again_and_the_model_is_told() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    let backend = SearchBackend::start().await;
    backend.hold();
    fake.push(Reply::tool_calls(vec![(
        "web_search",
        json!({"query": "held"}),
    )]));
    fake.push(Reply::text("I could not tell what the search found."));
    let _maintenance = MaintenanceLoop::start(&db.config);
    let envs = settings("searxng", &backend);
    let w1 = spawn_worker("w-search-1", &db.config, &fake, &envs);
    let agent = start_turn(&client, json!([{"type": "web_search"}]), "search").await;
    backend.wait_for_requests(1).await;
    let (status, _, _) = search_call(&client, agent).await;
    assert_eq!(status, "running", "marked running before the IO");
    w1.signal("KILL");

    let _w2 = spawn_worker("w-search-2", &db.config, &fake, &envs);
    wait_for_event(&client, agent, "turn.completed", T).await;
    backend.release();
    assert_eq!(backend.requests().len(), 1, "searched once, never again");
    assert_eq!(
        count_events(&client, agent, "tool_call.interrupted").await,
        1
    );
    let retried = fake.last_request().unwrap().body.to_string();
    assert!(
        retried.contains("Tool call was interrupted; its external outcome is unknown."),
        "{retried}"
    );
}
