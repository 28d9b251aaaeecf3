//! Contained step failures: a step that fails on every attempt is
//! retried with a durable backoff and ends the turn with `internal_error`
//! after `HOLDFAST_STEP_MAX_ATTEMPTS`, without a hot loop and without
//! holding a worker slot. Real `holdfast worker` process, real Postgres,
//! the fake model provider over a real socket.

use std::time::Duration;

use holdfast_db::store;
use holdfast_fakes::{FakeProvider, Reply};
use holdfast_tests::counting_http::CountingServer;
use holdfast_tests::scenario::{
    agent_with_config, agent_with_input, last_event_data, spawn_worker, start_turn, wait_for_event,
};
use holdfast_tests::{wait_until, TestDb};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_step_failing_every_time_backs_off_on_the_timeline_then_fails_the_turn_with_internal_error(
) {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    fake.set_default(Reply::text("fine"));
    let _worker = spawn_worker(
        "w-step-failures",
        &db.config,
        &fake,
        &[
            ("HOLDFAST_WORKER_CONCURRENCY", "1"),
            ("HOLDFAST_STEP_MAX_ATTEMPTS", "4"),
            ("HOLDFAST_STEP_BACKOFF_BASE", "200ms"),
            ("HOLDFAST_STEP_BACKOFF_MAX", "5s"),
        ],
    );
    // A config the worker can't represent (max_tokens past u32). The API and
    // validate_config refuse it now, but a row stored before that check (or
    // written by hand) still holds it: put it there the way such a row got it.
    let valid = json!({"model": {"provider": "anthropic", "name": "claude-test"}});
    let broken = agent_with_config(&client, &valid).await;
    client
        .execute(
            "UPDATE holdfast.agents
                SET config = jsonb_set(config, '{model,max_tokens}', '5000000000')
              WHERE id = $1",
            &[&broken],
        )
        .await
        .unwrap();
    store::create_input(&client, broken, &json!("hi"), None)
        .await
        .unwrap();

    // While the broken agent waits out its backoff, the one slot serves others.
    let healthy = agent_with_input(&client, "hello").await;

    // Each failure releases the agent until `run_after`, set in the same
    // transaction as `updated_at`: their difference is the delay chosen.
    // Delays for failures 1, 2, 3 lie in [100, 200], [200, 400] and
    // [400, 800] ms (200 ms doubling, the upper half of each ceiling), so
    // they grow.
    let delays = std::cell::RefCell::new(Vec::<f64>::new());
    wait_until(
        Duration::from_secs(30),
        "three failures recorded with their delays",
        || {
            let (client, delays) = (&client, &delays);
            async move {
                let row = client
                .query_one(
                    "SELECT step_failures, extract(epoch FROM run_after - updated_at)::float8 * 1000
                       FROM holdfast.agents WHERE id = $1",
                    &[&broken],
                )
                .await
                .unwrap();
                let (failures, delay): (i32, f64) = (row.get(0), row.get(1));
                let mut delays = delays.borrow_mut();
                if failures as usize == delays.len() + 1 {
                    delays.push(delay);
                }
                delays.len() == 3
            }
        },
    )
    .await;
    let delays_ms = delays.into_inner();
    // `run_after` is computed a moment before `updated_at` is written (both
    // read the clock, holdfast.now()), so a measured delay can fall short of
    // the chosen one by that moment: a few ms on a loaded machine.
    const SLACK_MS: f64 = 25.0;
    for (i, delay) in delays_ms.iter().enumerate() {
        let ceiling = 200.0 * f64::from(1 << i);
        assert!(
            (ceiling / 2.0 - SLACK_MS..=ceiling + 1.0).contains(delay),
            "failure {}: {delay} ms, expected within [{}, {ceiling}]: {delays_ms:?}",
            i + 1,
            ceiling / 2.0
        );
    }
    assert!(
        delays_ms
            .windows(2)
            .all(|pair| pair[1] + SLACK_MS >= pair[0]),
        "growing: {delays_ms:?}"
    );
    wait_for_event(&client, healthy, "turn.completed", Duration::from_secs(30)).await;

    wait_for_event(&client, broken, "turn.failed", Duration::from_secs(30)).await;
    let failed = last_event_data(&client, broken, "turn.failed").await;
    assert_eq!(failed["error"]["type"], "internal_error", "{failed}");
    let message = failed["error"]["message"].as_str().unwrap();
    assert!(message.contains("4 times"), "{message}");
    assert!(
        message.contains("5000000000"),
        "the cause is named: {message}"
    );
    // Each backoff was on the timeline: the attempt, the error and when the
    // next attempt was due.
    let retries = client
        .query(
            "SELECT data, created_at FROM holdfast.events
              WHERE agent_id = $1 AND type = 'step.retry' ORDER BY seq",
            &[&broken],
        )
        .await
        .unwrap();
    assert_eq!(retries.len(), 3, "one per failure below the limit");
    for (i, row) in retries.iter().enumerate() {
        let data: serde_json::Value = row.get(0);
        let at: chrono::DateTime<chrono::Utc> = row.get(1);
        assert_eq!(data["attempt"], i + 1, "{data}");
        assert_eq!(data["max_attempts"], 4, "{data}");
        assert_eq!(data["error"]["type"], "internal_error", "{data}");
        assert!(
            data["error"]["message"]
                .as_str()
                .unwrap()
                .contains("5000000000"),
            "{data}"
        );
        let retry_at: chrono::DateTime<chrono::Utc> =
            serde_json::from_value(data["retry_at"].clone()).unwrap();
        let delay_ms = data["delay_ms"].as_i64().unwrap();
        assert!(
            (delays_ms[i] - delay_ms as f64).abs() <= SLACK_MS,
            "{data}: {delays_ms:?}"
        );
        // retry_at is read from the clock a moment before the event's time
        // (two reads in one SQL call, which a loaded machine can hold apart
        // for tens of milliseconds); a retry_at without the delay, or with
        // it twice, is far outside this window.
        let due_in = (retry_at - at).num_milliseconds();
        let gap = (SLACK_MS as i64).max(delay_ms / 2);
        assert!(
            (delay_ms - gap..=delay_ms).contains(&due_in),
            "{data} at {at}"
        );
    }
    // The cause is in the history the model will see next turn.
    let history: String = client
        .query_one(
            "SELECT string_agg(content::text, ' ') FROM holdfast.messages WHERE agent_id = $1",
            &[&broken],
        )
        .await
        .unwrap()
        .get(0);
    assert!(history.contains("internal_error"), "{history}");
    // The broken agent never reached the model: only the healthy one did.
    assert_eq!(fake.request_count(), 1);
    let (state, failures): (String, i32) = {
        let row = client
            .query_one(
                "SELECT state, step_failures FROM holdfast.agents WHERE id = $1",
                &[&broken],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!((state.as_str(), failures), ("idle", 0));
    // What these turns wrote matches the OpenAPI document's event schemas.
    holdfast_tests::event_schemas::assert_saved_events_match(&client).await;
}

/// A page with non-ASCII text after an entity once panicked the HTML
/// extractor and wedged the step's slot for good; 12 of them on a worker of
/// concurrency 4 ended no turn and stopped all claims.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twelve_non_ascii_pages_fetched_on_four_slots_all_end_and_the_worker_still_claims() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let pages = CountingServer::start().await;
    let page = "<html><body><p>Tom &amp; Jerry — популярный мультсериал, \
                &laquo;классика&raquo; &amp;Ж и не только</p></body></html>";
    pages.set_response("/page", 200, "text/html; charset=utf-8", page);
    let fake = FakeProvider::start().await;
    for _ in 0..12 {
        fake.push(Reply::tool_calls(vec![(
            "web_fetch",
            json!({"url": pages.url("/page")}),
        )]));
    }
    fake.set_default(Reply::text("done"));
    let _worker = spawn_worker(
        "w-pages",
        &db.config,
        &fake,
        &[
            ("HOLDFAST_WORKER_CONCURRENCY", "4"),
            ("HOLDFAST_EGRESS_ALLOW", "web_fetch=127.0.0.1"),
        ],
    );
    let mut agents = Vec::new();
    for _ in 0..12 {
        agents.push(start_turn(&client, json!([{"type": "web_fetch"}]), "read it").await);
    }
    for agent in &agents {
        wait_for_event(&client, *agent, "turn.completed", Duration::from_secs(60)).await;
    }
    assert_eq!(pages.hits("/page"), 12);
    let outputs: Vec<String> = client
        .query(
            "SELECT data ->> 'output' FROM holdfast.events WHERE type = 'tool_call.completed'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(outputs.len(), 12);
    for output in outputs {
        assert!(output.contains("Tom & Jerry — популярный"), "{output}");
    }
    let later = agent_with_input(&client, "still there?").await;
    wait_for_event(&client, later, "turn.completed", Duration::from_secs(30)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_model_reply_holding_u0000_is_saved_storable_after_one_request() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    // The fake streams it as JSON does on the wire: "\u0000" inside a text delta.
    fake.set_default(Reply::text("before\u{0}after"));
    let _worker = spawn_worker("w-nul-reply", &db.config, &fake, &[]);
    let agent = agent_with_input(&client, "hello").await;
    wait_for_event(&client, agent, "turn.completed", Duration::from_secs(30)).await;

    let response = last_event_data(&client, agent, "model.response")
        .await
        .to_string();
    assert!(
        response.contains("before\u{FFFD}after"),
        "saved with U+FFFD in place of U+0000: {response}"
    );
    let responses: i64 = client
        .query_one(
            "SELECT count(*) FROM holdfast.events WHERE agent_id = $1 AND type = 'model.response'",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(responses, 1);
    assert_eq!(fake.request_count(), 1, "one paid call, not a loop");
}
