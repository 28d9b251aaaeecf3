//! Model calls end to end through real worker processes and the fake
//! provider: error classes, durable retries, steering, compaction, deltas.

use std::time::{Duration, Instant};

use holdfast_db::store;
use holdfast_fakes::{FakeProvider, Reply};
use holdfast_tests::scenario::{
    agent_state, agent_with_input, count_events, event_types, last_event_data, saved_text,
    spawn_worker, wait_for_event, wait_for_events,
};
use holdfast_tests::tls_server::PrivateCa;
use holdfast_tests::{MaintenanceLoop, ScratchDir, TestDb};
use serde_json::json;

const FAST_BACKOFF: [(&str, &str); 2] = [
    ("HOLDFAST_MODEL_BACKOFF_BASE", "10ms"),
    ("HOLDFAST_MODEL_BACKOFF_MAX", "50ms"),
];
const T: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn authentication_billing_and_invalid_request_errors_end_the_turn_at_once() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    let _w = spawn_worker("w-fatal", &db.config, &fake, &FAST_BACKOFF);
    for (status, error_type) in [
        (401, "authentication_error"),
        (403, "authentication_error"),
        (402, "billing_error"),
        (400, "invalid_request_error"),
    ] {
        let requests_before = fake.request_count();
        fake.push(Reply::status(status));
        let agent = agent_with_input(&client, "hi").await;
        wait_for_event(&client, agent, "turn.failed", T).await;
        assert_eq!(
            event_types(&client, agent).await,
            ["input.received", "turn.started", "turn.failed"],
            "{status}: no retry, no response"
        );
        let failed = last_event_data(&client, agent, "turn.failed").await;
        assert_eq!(failed["error"]["type"], json!(error_type), "{status}");
        assert_eq!(agent_state(&client, agent).await, "idle");
        assert_eq!(
            fake.request_count(),
            requests_before + 1,
            "{status}: one request"
        );
        assert!(
            saved_text(&client, agent).await.contains(error_type),
            "{status}: the error is in the agent's history"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_input_after_a_terminal_model_error_sees_that_error_in_its_history() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    let _w = spawn_worker("w-after-fatal", &db.config, &fake, &FAST_BACKOFF);
    fake.push(Reply::status(401));
    let agent = agent_with_input(&client, "first question").await;
    wait_for_event(&client, agent, "turn.failed", T).await;

    fake.push(Reply::text("answered"));
    store::create_input(&client, agent, &json!("second question"), None)
        .await
        .unwrap();
    wait_for_event(&client, agent, "turn.completed", T).await;
    assert_eq!(fake.request_count(), 2);
    // The next turn's request carries the failed turn: its input, then the
    // error as the assistant's message, then the new input.
    let messages = fake.last_request().unwrap().body["messages"].clone();
    let texts: Vec<(String, String)> = messages
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_owned(),
                m["content"].to_string(),
            )
        })
        .collect();
    assert_eq!(texts.len(), 3, "{messages}");
    assert!(texts[0].1.contains("first question"), "{messages}");
    assert_eq!(texts[1].0, "assistant", "{messages}");
    assert!(
        texts[1].1.contains("The turn failed: authentication_error"),
        "{messages}"
    );
    assert!(texts[2].1.contains("second question"), "{messages}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retryable_failures_are_retried_and_the_turn_ends_with_one_response() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    let _w = spawn_worker("w-retry", &db.config, &fake, &FAST_BACKOFF);
    let failures = [
        ("429", Reply::status(429).retry_after_secs(0)),
        ("529", Reply::status(529)),
        ("500", Reply::status(500)),
        (
            "cut mid-message",
            Reply::text("PARTIAL one two three").cut_after_deltas(2),
        ),
        (
            "reset mid-message",
            Reply::text("PARTIAL one two three").reset_after_deltas(2),
        ),
        (
            "overloaded mid-stream",
            Reply::text("PARTIAL one two three").error_after_deltas(1),
        ),
    ];
    for (what, failure) in failures {
        let requests_before = fake.request_count();
        fake.push(failure);
        fake.push(Reply::text("Recovered."));
        let agent = agent_with_input(&client, "hi").await;
        wait_for_event(&client, agent, "turn.completed", T).await;
        assert_eq!(
            event_types(&client, agent).await,
            [
                "input.received",
                "turn.started",
                "model.retry",
                "model.response",
                "turn.completed"
            ],
            "{what}"
        );
        let retry = last_event_data(&client, agent, "model.retry").await;
        assert_eq!(retry["attempt"], json!(1), "{what}");
        assert_eq!(
            fake.request_count(),
            requests_before + 2,
            "{what}: two requests"
        );
        assert!(
            !saved_text(&client, agent).await.contains("PARTIAL"),
            "{what}: partial output kept"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retry_after_is_honoured_even_across_a_worker_kill() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    fake.push(Reply::status(429).retry_after_secs(2));
    fake.push(Reply::text("After the wait."));
    let _maintenance = MaintenanceLoop::start(&db.config);
    let w1 = spawn_worker("w-before", &db.config, &fake, &FAST_BACKOFF);
    let agent = agent_with_input(&client, "hi").await;
    fake.wait_for_requests(1).await;
    let first_request = Instant::now();
    wait_for_event(&client, agent, "model.retry", T).await;
    // The worker dies during the wait; the wait itself is saved.
    w1.signal("KILL");
    let retry = last_event_data(&client, agent, "model.retry").await;
    assert!(retry["delay_ms"].as_i64().unwrap() >= 2000, "{retry}");

    let _w2 = spawn_worker("w-after", &db.config, &fake, &FAST_BACKOFF);
    fake.wait_for_requests(2).await;
    let waited = first_request.elapsed();
    assert!(
        waited >= Duration::from_millis(1900),
        "retried after {waited:?}, before Retry-After"
    );
    wait_for_event(&client, agent, "turn.completed", T).await;
    assert_eq!(count_events(&client, agent, "model.response").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_ninth_consecutive_failure_ends_the_turn() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    fake.set_default(Reply::status(503));
    let _w = spawn_worker("w-exhaust", &db.config, &fake, &FAST_BACKOFF);
    let agent = agent_with_input(&client, "hi").await;
    wait_for_event(&client, agent, "turn.failed", T).await;
    let retries: Vec<serde_json::Value> = client
        .query("SELECT data FROM holdfast.events WHERE agent_id = $1 AND type = 'model.retry' ORDER BY seq", &[&agent])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(retries.len(), 8, "{retries:?}");
    assert_eq!(fake.request_count(), 9);
    let failed = last_event_data(&client, agent, "turn.failed").await;
    assert_eq!(failed["error"]["type"], json!("retries_exhausted"));
    assert_eq!(agent_state(&client, agent).await, "idle");

    // A new input starts a fresh budget.
    fake.set_default(Reply::text("Back."));
    store::create_input(&client, agent, &json!("again"), None)
        .await
        .unwrap();
    wait_for_event(&client, agent, "turn.completed", T).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_steering_input_reaches_the_retry_after_a_worker_kill_and_the_cut_text_nowhere() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    fake.push(Reply::text("PARTIAL thoughts that never finish").hold_after_deltas(2));
    fake.push(Reply::text("Answer with the steering applied."));
    let _maintenance = MaintenanceLoop::start(&db.config);
    let w1 = spawn_worker("w-steer-1", &db.config, &fake, &FAST_BACKOFF);
    let agent = agent_with_input(&client, "write a poem").await;
    fake.wait_until_held(1).await;
    store::create_input(&client, agent, &json!("make it about the sea"), None)
        .await
        .unwrap();
    w1.signal("KILL");
    let _w2 = spawn_worker("w-steer-2", &db.config, &fake, &FAST_BACKOFF);
    wait_for_event(&client, agent, "turn.completed", T).await;

    let retried = fake.last_request().unwrap().body.to_string();
    assert!(retried.contains("write a poem"), "{retried}");
    assert!(
        retried.contains("make it about the sea"),
        "the steering message is in the retry"
    );
    assert!(!retried.contains("PARTIAL"));
    assert!(!saved_text(&client, agent).await.contains("PARTIAL"));
    assert_eq!(count_events(&client, agent, "model.response").await, 1);
    assert_eq!(count_events(&client, agent, "turn.completed").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_context_too_long_reply_compacts_and_the_retried_call_uses_the_summary() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    let _w = spawn_worker("w-compact", &db.config, &fake, &FAST_BACKOFF);
    fake.push(Reply::text("first answer"));
    let agent = agent_with_input(&client, "FIRST-QUESTION").await;
    wait_for_events(&client, agent, "turn.completed", 1, T).await;
    fake.push(Reply::text("second answer"));
    store::create_input(&client, agent, &json!("second question"), None)
        .await
        .unwrap();
    wait_for_events(&client, agent, "turn.completed", 2, T).await;

    fake.push(Reply::context_too_long());
    fake.push(Reply::text("SUMMARY-OF-EARLIER-TURNS"));
    fake.push(Reply::text("third answer"));
    store::create_input(&client, agent, &json!("third question"), None)
        .await
        .unwrap();
    wait_for_events(&client, agent, "turn.completed", 3, T).await;

    assert_eq!(count_events(&client, agent, "context.compacted").await, 1);
    assert_eq!(count_events(&client, agent, "model.response").await, 3);
    assert_eq!(fake.request_count(), 5);
    let requests = fake.requests();
    let summary_call = requests[3].body.to_string();
    assert!(
        summary_call.contains("FIRST-QUESTION"),
        "the summary call reads the old history"
    );
    let retried = requests[4].body.to_string();
    assert!(retried.contains("SUMMARY-OF-EARLIER-TURNS"), "{retried}");
    assert!(
        !retried.contains("FIRST-QUESTION"),
        "old messages replaced: {retried}"
    );
    assert!(retried.contains("third question"));
    // What these turns wrote matches the OpenAPI document's event schemas.
    holdfast_tests::event_schemas::assert_saved_events_match(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn live_deltas_concatenate_to_the_saved_response_text() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let fake = FakeProvider::start().await;
    let text = "The quick brown fox jumps over the lazy dog, twice over.";
    fake.push(Reply::text(text).trickle(Duration::from_millis(20)));
    let mut session = holdfast_db::connect::listen(&db.config, &["holdfast_stream"])
        .await
        .unwrap();
    let _w = spawn_worker("w-deltas", &db.config, &fake, &[]);
    let agent = agent_with_input(&client, "hi").await;
    wait_for_event(&client, agent, "model.response", T).await;

    let mut streamed = String::new();
    while let Ok(Some(n)) =
        tokio::time::timeout(Duration::from_millis(500), session.notifications.recv()).await
    {
        let payload: serde_json::Value = serde_json::from_str(n.payload()).unwrap();
        assert_eq!(payload["agent_id"], json!(agent.to_string()));
        streamed.push_str(payload["text"].as_str().unwrap());
    }
    assert_eq!(streamed, text);
    let saved = last_event_data(&client, agent, "model.response").await;
    assert_eq!(saved["message"][0]["text"], json!(text));
}

/// A model endpoint whose certificate a private CA signed: a worker trusts
/// the operating system's roots only, so it breaks off the handshake (no
/// request arrives, the retry says why) until the operator gives the CA as
/// `HOLDFAST_CA_BUNDLE`; a worker given it completes the turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_model_endpoint_signed_by_a_private_ca_is_trusted_only_with_the_ca_bundle() {
    let ca = PrivateCa::new();
    let (listener, origin) = ca.listener().await;
    let mut handshakes = listener.handshakes();
    let fake = FakeProvider::serve(listener, origin);
    assert!(fake.base_url().starts_with("https://localhost:"));

    let untrusting_db = TestDb::new().await;
    let client = untrusting_db.connect().await;
    let _untrusting = spawn_worker("w-no-ca", &untrusting_db.config, &fake, &FAST_BACKOFF);
    let agent = agent_with_input(&client, "hello").await;
    wait_for_event(&client, agent, "model.retry", T).await;
    handshakes.wait_for_one(T).await;
    let retry = last_event_data(&client, agent, "model.retry").await;
    assert_eq!(retry["error"]["type"], "connection_error", "{retry}");
    let message = retry["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("certificate") && message.contains("UnknownIssuer"),
        "{message}"
    );
    assert_eq!(fake.request_count(), 0, "no request got past the handshake");

    let trusting_db = TestDb::new().await;
    let client = trusting_db.connect().await;
    let bundle = ca.ca_file.display().to_string();
    let mut env: Vec<(&str, &str)> = FAST_BACKOFF.to_vec();
    env.push(("HOLDFAST_CA_BUNDLE", &bundle));
    let _trusting = spawn_worker("w-ca", &trusting_db.config, &fake, &env);
    let agent = agent_with_input(&client, "hello").await;
    wait_for_event(&client, agent, "turn.completed", T).await;
    assert_eq!(count_events(&client, agent, "model.retry").await, 0);
    assert!(saved_text(&client, agent).await.contains("ok"));
    assert!(fake.request_count() >= 1);
}

/// A CA bundle that is not a PEM certificate file stops the process at
/// start, naming the setting and the file, before it connects anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_bundle_without_a_certificate_stops_the_process_naming_the_setting() {
    let db = TestDb::new().await;
    let fake = FakeProvider::start().await;
    let files = ScratchDir::new("bad-ca-bundle");
    let not_pem = files.join("bundle.pem");
    std::fs::write(&not_pem, "not a certificate\n").unwrap();
    for (bundle, says) in [
        (not_pem.display().to_string(), "holds no PEM certificate"),
        (
            files.join("missing.pem").display().to_string(),
            "cannot read it",
        ),
    ] {
        let mut worker = spawn_worker(
            "w-bad-ca",
            &db.config,
            &fake,
            &[("HOLDFAST_CA_BUNDLE", bundle.as_str())],
        );
        assert_eq!(worker.wait_exit(T).await, Some(1), "{bundle}");
        let log = worker.log_text();
        assert!(
            log.contains(&format!("HOLDFAST_CA_BUNDLE: {bundle}: ")) && log.contains(says),
            "{log}"
        );
    }
    assert_eq!(fake.request_count(), 0);
}
