//! The webhook outbox and delivery state in SQL (sql/schema/webhooks.sql),
//! against real Postgres: validation, the outbox trigger's transaction,
//! claims (order, leases, fairness), attempt outcomes and the retry window.

use std::time::Duration;

use holdfast_db::{store, Error};
use holdfast_tests::{new_agent, project_and_agent, TestDb};
use holdfast_wire::domain::{RecordedAttempt, WebhookDeliveryFilter, WebhookDeliveryStatus};
use serde_json::json;
use tokio_postgres::Client;
use uuid::Uuid;

const LEASE: Duration = Duration::from_secs(30);
const WINDOW: Duration = Duration::from_secs(600);

async fn endpoint(client: &Client, project: Uuid, events: serde_json::Value) -> Uuid {
    store::create_webhook_endpoint(
        client,
        project,
        "http://127.0.0.1:9/hook",
        &events,
        None,
        true,
    )
    .await
    .unwrap()
    .endpoint
    .id
}

async fn input(client: &impl store::Prepared, agent: Uuid) {
    store::create_input(client, agent, &json!("hello"), None)
        .await
        .unwrap();
}

async fn deliveries(client: &Client, endpoint: Uuid) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM holdfast.webhook_deliveries WHERE endpoint_id = $1",
            &[&endpoint],
        )
        .await
        .unwrap()
        .get(0)
}

fn invalid_field(e: Error) -> String {
    match e {
        Error::Invalid { field, .. } => field.unwrap_or_default(),
        other => panic!("expected HF422, got {other}"),
    }
}

#[tokio::test]
async fn create_returns_a_standard_webhooks_secret_and_list_hides_it() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, _) = project_and_agent(&client).await;
    let created = store::create_webhook_endpoint(
        &client,
        project,
        "https://example.com/hook",
        &json!(["turn.completed", "input.received", "turn.completed"]),
        Some("ops"),
        false,
    )
    .await
    .unwrap();
    let key = created
        .secret
        .strip_prefix("whsec_")
        .expect("whsec_ prefix");
    let decoded = base64_len(key);
    assert!(
        decoded >= 24,
        "secret has {decoded} bytes, spec needs >= 24"
    );
    assert_eq!(
        created.endpoint.events,
        vec!["turn.completed", "input.received"],
        "duplicates dropped, order kept"
    );
    let other = store::create_webhook_endpoint(
        &client,
        project,
        "https://example.com/hook",
        &json!(["*"]),
        None,
        false,
    )
    .await
    .unwrap();
    assert_ne!(created.secret, other.secret, "each endpoint its own secret");

    let listed = store::list_webhook_endpoints(&client, project)
        .await
        .unwrap();
    assert_eq!(listed, vec![created.endpoint.clone(), other.endpoint]);
    let text = serde_json::to_string(&listed).unwrap();
    assert!(!text.contains("whsec_"), "list never shows secrets");
}

/// Length in bytes of standard base64 text.
fn base64_len(text: &str) -> usize {
    let padding = text.chars().rev().take_while(|c| *c == '=').count();
    text.len() / 4 * 3 - padding
}

#[tokio::test]
async fn bad_url_or_event_type_is_hf422_naming_the_field() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, _) = project_and_agent(&client).await;
    let create = |url: &'static str, events: serde_json::Value, allow_private: bool| {
        let client = &client;
        async move {
            store::create_webhook_endpoint(client, project, url, &events, None, allow_private).await
        }
    };
    for url in [
        "ftp://example.com/hook",
        "example.com/hook",
        "javascript:alert(1)",
        "http://",
        "http:///path",
        "https://exa mple.com/",
    ] {
        let e = create(url, json!(["*"]), true).await.unwrap_err();
        assert_eq!(invalid_field(e), "url", "{url}");
    }
    for events in [
        json!([]),
        json!("*"),
        json!(["turn.exploded"]),
        json!(["*", 3]),
        json!({"type": "*"}),
    ] {
        let e = create("https://example.com/", events.clone(), true)
            .await
            .unwrap_err();
        assert_eq!(invalid_field(e), "events", "{events}");
    }
    let e = store::create_webhook_endpoint(
        &client,
        project,
        "https://example.com/",
        &json!(["*"]),
        Some(&"x".repeat(1001)),
        false,
    )
    .await
    .unwrap_err();
    assert_eq!(invalid_field(e), "description");
    let e = store::create_webhook_endpoint(
        &client,
        Uuid::new_v4(),
        "https://example.com/",
        &json!(["*"]),
        None,
        false,
    )
    .await
    .unwrap_err();
    assert!(matches!(e, Error::NotFound(_)), "{e}");
}

#[tokio::test]
async fn private_and_loopback_urls_need_the_deployment_setting() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, _) = project_and_agent(&client).await;
    let private = [
        "http://localhost:8080/hook",
        "http://api.localhost/hook",
        "http://127.0.0.1/hook",
        "http://127.1/hook",
        "http://2130706433/hook",
        "http://0x7f.0.0.1/hook",
        "http://10.1.2.3/",
        "http://172.20.0.1/",
        "http://192.168.1.1:80/",
        "http://169.254.169.254/latest/meta-data",
        "http://100.64.0.1/",
        "http://0.0.0.0/",
        "http://[::1]:8080/",
        "http://[::ffff:127.0.0.1]/",
        "http://[fd00::1]/",
        "http://[fe80::1]/",
        "http://user:pw@127.0.0.1/",
        "http://db.internal/",
        "http://LOCALHOST./",
    ];
    for url in private {
        let e = store::create_webhook_endpoint(&client, project, url, &json!(["*"]), None, false)
            .await
            .unwrap_err();
        assert_eq!(invalid_field(e), "url", "{url} must be refused");
        store::create_webhook_endpoint(&client, project, url, &json!(["*"]), None, true)
            .await
            .unwrap_or_else(|e| panic!("{url} allowed by the setting: {e}"));
    }
    for url in [
        "https://example.com/hook",
        "http://93.184.216.34/",
        "https://[2606:4700::1111]/",
        "https://hooks.example.com:8443/a?b=c#d",
        "https://user@example.com/",
    ] {
        store::create_webhook_endpoint(&client, project, url, &json!(["*"]), None, false)
            .await
            .unwrap_or_else(|e| panic!("{url} is public: {e}"));
    }
}

#[tokio::test]
async fn an_event_in_a_rolled_back_transaction_has_no_delivery() {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    let (project, agent) = project_and_agent(&client).await;
    let hook = endpoint(&client, project, json!(["*"])).await;

    let tx = client.transaction().await.unwrap();
    input(&tx, agent).await;
    let inside: i64 = tx
        .query_one(
            "SELECT count(*) FROM holdfast.webhook_deliveries WHERE endpoint_id = $1",
            &[&hook],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        inside > 0,
        "the trigger wrote deliveries in the event's transaction"
    );
    tx.rollback().await.unwrap();
    assert_eq!(deliveries(&client, hook).await, 0, "rolled back with it");

    let tx = client.transaction().await.unwrap();
    input(&tx, agent).await;
    tx.commit().await.unwrap();
    let events: i64 = client
        .query_one(
            "SELECT count(*) FROM holdfast.events WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        deliveries(&client, hook).await,
        events,
        "a committed event gets its delivery"
    );
}

#[tokio::test]
async fn deliveries_follow_the_endpoint_filter_and_project() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, agent) = project_and_agent(&client).await;
    let (other_project, other_agent) = project_and_agent(&client).await;
    let all = endpoint(&client, project, json!(["*"])).await;
    let turns = endpoint(&client, project, json!(["turn.started"])).await;
    let inputs = endpoint(&client, project, json!(["input.received"])).await;
    let deleted = endpoint(&client, project, json!(["*"])).await;
    store::delete_webhook_endpoint(&client, project, deleted)
        .await
        .unwrap();
    let elsewhere = endpoint(&client, other_project, json!(["*"])).await;

    input(&client, agent).await; // input.received + turn.started
    assert_eq!(deliveries(&client, all).await, 2);
    assert_eq!(deliveries(&client, turns).await, 1);
    assert_eq!(deliveries(&client, inputs).await, 1);
    assert_eq!(deliveries(&client, deleted).await, 0);
    assert_eq!(deliveries(&client, elsewhere).await, 0);
    input(&client, other_agent).await;
    assert_eq!(deliveries(&client, elsewhere).await, 2);
    assert_eq!(
        deliveries(&client, all).await,
        2,
        "no events of another project"
    );
}

#[tokio::test]
async fn claim_keeps_each_agents_order_per_endpoint_and_returns_the_event() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, agent) = project_and_agent(&client).await;
    let second = new_agent(&client, project).await;
    let hook = endpoint(&client, project, json!(["input.received"])).await;
    for _ in 0..3 {
        input(&client, agent).await;
    }
    input(&client, second).await;

    let batch = store::claim_webhook_deliveries(&client, 10, LEASE, 16)
        .await
        .unwrap();
    let agents: Vec<Uuid> = batch.iter().map(|c| c.event.agent_id).collect();
    assert_eq!(batch.len(), 2, "one head per (endpoint, agent): {agents:?}");
    assert!(agents.contains(&agent) && agents.contains(&second));
    let head = batch.iter().find(|c| c.event.agent_id == agent).unwrap();
    assert_eq!(head.event.seq, 1, "the agent's first event goes first");
    assert_eq!(head.event.kind, "input.received");
    assert_eq!(head.attempt, 1);
    assert_eq!(head.endpoint_id, hook);
    assert_eq!(head.url, "http://127.0.0.1:9/hook");
    assert!(head.secret.starts_with("whsec_"));
    assert_eq!(head.event.data["content"], json!("hello"));

    assert!(
        store::claim_webhook_deliveries(&client, 10, LEASE, 16)
            .await
            .unwrap()
            .is_empty(),
        "later events wait while the head is in flight"
    );
    let outcome = store::record_webhook_attempt(&client, head, Some(204), None, LEASE, WINDOW)
        .await
        .unwrap();
    assert_eq!(outcome, RecordedAttempt::Delivered);
    let next = store::claim_webhook_deliveries(&client, 10, LEASE, 16)
        .await
        .unwrap();
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].event.agent_id, agent);
    assert!(
        next[0].event.seq > head.event.seq,
        "then the next one, in order"
    );

    // A failed head waiting for its retry no longer holds the others back.
    store::record_webhook_attempt(
        &client,
        &next[0],
        Some(500),
        Some("HTTP 500"),
        Duration::from_secs(3600),
        WINDOW,
    )
    .await
    .unwrap();
    let after_failure = store::claim_webhook_deliveries(&client, 10, LEASE, 16)
        .await
        .unwrap();
    assert_eq!(after_failure.len(), 1);
    assert!(after_failure[0].event.seq > next[0].event.seq);
}

#[tokio::test]
async fn an_expired_claim_comes_back_with_the_same_id_and_a_stale_outcome_changes_nothing() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, agent) = project_and_agent(&client).await;
    let hook = endpoint(&client, project, json!(["input.received"])).await;
    input(&client, agent).await;

    let first = store::claim_webhook_deliveries(&client, 10, LEASE, 16)
        .await
        .unwrap();
    assert_eq!(first.len(), 1);
    assert!(store::claim_webhook_deliveries(&client, 10, LEASE, 16)
        .await
        .unwrap()
        .is_empty());
    // The claiming dispatcher died; its lease passes.
    client
        .batch_execute("SET holdfast.clock_offset = '31 seconds'")
        .await
        .unwrap();
    let second = store::claim_webhook_deliveries(&client, 10, LEASE, 16)
        .await
        .unwrap();
    assert_eq!(second.len(), 1, "the dead claim came back");
    assert_eq!(
        second[0].delivery_id, first[0].delivery_id,
        "same webhook-id"
    );
    assert_eq!(second[0].attempt, 2);

    let stale =
        store::record_webhook_attempt(&client, &first[0], Some(500), None, Duration::ZERO, WINDOW)
            .await
            .unwrap();
    assert_eq!(stale, RecordedAttempt::Superseded);
    let rows =
        store::list_webhook_deliveries(&client, project, hook, WebhookDeliveryFilter::default())
            .await
            .unwrap();
    assert_eq!(rows[0].status, WebhookDeliveryStatus::Pending);
    assert_eq!(
        rows[0].last_status_code, None,
        "the stale outcome was not applied"
    );

    // A 2xx is the truth whenever it arrives, even from the older attempt.
    let late =
        store::record_webhook_attempt(&client, &first[0], Some(200), None, Duration::ZERO, WINDOW)
            .await
            .unwrap();
    assert_eq!(late, RecordedAttempt::Delivered);
    let current =
        store::record_webhook_attempt(&client, &second[0], Some(500), None, Duration::ZERO, WINDOW)
            .await
            .unwrap();
    assert_eq!(
        current,
        RecordedAttempt::Superseded,
        "delivered stays delivered"
    );
}

#[tokio::test]
async fn failures_retry_inside_the_window_then_fail_with_their_attempt_count() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, agent) = project_and_agent(&client).await;
    let hook = endpoint(&client, project, json!(["input.received"])).await;
    input(&client, agent).await;
    let window = Duration::from_millis(300);

    let mut attempts = 0;
    loop {
        let batch = store::claim_webhook_deliveries(&client, 10, LEASE, 16)
            .await
            .unwrap();
        let Some(claim) = batch.first() else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        attempts += 1;
        assert_eq!(claim.attempt, attempts);
        let outcome = store::record_webhook_attempt(
            &client,
            claim,
            Some(500),
            Some("HTTP 500"),
            Duration::from_millis(100),
            window,
        )
        .await
        .unwrap();
        if outcome == RecordedAttempt::Failed {
            break;
        }
        assert_eq!(outcome, RecordedAttempt::RetryScheduled);
    }
    assert!(
        attempts >= 3,
        "retried within the window ({attempts} attempts)"
    );
    let rows =
        store::list_webhook_deliveries(&client, project, hook, WebhookDeliveryFilter::default())
            .await
            .unwrap();
    let row = &rows[0];
    assert_eq!(row.status, WebhookDeliveryStatus::Failed);
    assert_eq!(row.attempts, attempts);
    assert_eq!(row.last_status_code, Some(500));
    assert_eq!(row.last_error.as_deref(), Some("HTTP 500"));
    assert!(row.next_attempt_at.is_none() && row.failed_at.is_some());
    let elapsed = row.failed_at.unwrap() - row.created_at;
    assert!(
        elapsed >= chrono::Duration::milliseconds(300),
        "not failed before the window ended: {elapsed}"
    );
    assert!(store::claim_webhook_deliveries(&client, 10, LEASE, 16)
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn a_full_endpoint_does_not_take_the_slots_of_others() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, _) = project_and_agent(&client).await;
    let slow = endpoint(&client, project, json!(["input.received"])).await;
    // Many agents (no order constraint between them) hit the slow endpoint first.
    for _ in 0..10 {
        let agent = new_agent(&client, project).await;
        input(&client, agent).await;
    }
    let fast = endpoint(&client, project, json!(["input.received"])).await;
    let agent = new_agent(&client, project).await;
    input(&client, agent).await;

    let first = store::claim_webhook_deliveries(&client, 4, LEASE, 2)
        .await
        .unwrap();
    let per = |batch: &[holdfast_wire::domain::ClaimedWebhookDelivery], e: Uuid| {
        batch.iter().filter(|c| c.endpoint_id == e).count()
    };
    assert_eq!(per(&first, slow), 2, "capped at 2 in flight");
    let second = store::claim_webhook_deliveries(&client, 4, LEASE, 2)
        .await
        .unwrap();
    assert_eq!(per(&second, slow), 0, "the slow endpoint is full");
    assert_eq!(per(&second, fast), 1, "the other endpoint is served");
}

#[tokio::test]
async fn delete_fails_pending_deliveries_and_hides_the_endpoint() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, agent) = project_and_agent(&client).await;
    let (other_project, _) = project_and_agent(&client).await;
    let hook = endpoint(&client, project, json!(["*"])).await;
    input(&client, agent).await;

    let e = store::delete_webhook_endpoint(&client, other_project, hook)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::NotFound(_)), "another project's: {e}");
    let rows = store::list_webhook_deliveries(
        &client,
        project,
        hook,
        WebhookDeliveryFilter {
            status: Some(WebhookDeliveryStatus::Pending),
            limit: 1,
            before: None,
        },
    )
    .await
    .unwrap();
    assert_eq!(rows.len(), 1, "limit and status filter");
    assert!(store::list_webhook_deliveries(
        &client,
        other_project,
        hook,
        WebhookDeliveryFilter::default()
    )
    .await
    .is_err());

    store::delete_webhook_endpoint(&client, project, hook)
        .await
        .unwrap();
    let statuses: Vec<(String, Option<String>)> = client
        .query(
            "SELECT status, last_error FROM holdfast.webhook_deliveries WHERE endpoint_id = $1",
            &[&hook],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert!(!statuses.is_empty());
    assert!(statuses
        .iter()
        .all(|(s, e)| s == "failed" && e.as_deref() == Some("endpoint deleted")));
    assert!(store::list_webhook_endpoints(&client, project)
        .await
        .unwrap()
        .is_empty());
    assert!(matches!(
        store::delete_webhook_endpoint(&client, project, hook).await,
        Err(Error::NotFound(_))
    ));
    assert!(store::claim_webhook_deliveries(&client, 10, LEASE, 16)
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn release_makes_in_flight_claims_due_at_once() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, agent) = project_and_agent(&client).await;
    endpoint(&client, project, json!(["input.received"])).await;
    input(&client, agent).await;
    let batch = store::claim_webhook_deliveries(&client, 10, LEASE, 16)
        .await
        .unwrap();
    let claims: Vec<(Uuid, i32)> = batch.iter().map(|c| (c.delivery_id, c.attempt)).collect();
    assert_eq!(
        store::release_webhook_deliveries(&client, &claims)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        store::release_webhook_deliveries(&client, &claims)
            .await
            .unwrap(),
        0,
        "only claims still in flight"
    );
    let again = store::claim_webhook_deliveries(&client, 10, LEASE, 16)
        .await
        .unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].delivery_id, batch[0].delivery_id);
    assert_eq!(again[0].attempt, 2, "the released attempt stays counted");
    let stats = store::webhook_queue_stats(&client).await.unwrap();
    assert_eq!(stats.in_flight, 1);
}
