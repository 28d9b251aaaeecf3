//! The webhook dispatcher against real Postgres and real HTTP receivers on
//! 127.0.0.1, run in-process (`maintenance::run`); every request is checked
//! by an independent Standard Webhooks verifier (Python).

use holdfast_providers::egress::EgressPolicy;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use holdfast_db::store;
use holdfast_tests::webhook_receiver::{
    assert_every_event_received, count_status, deliveries, hook, Behaviour, Receiver,
};
use holdfast_tests::{new_agent, project_and_agent, wait_until, TestDb};
use holdfast_worker::maintenance::{self, Settings};
use holdfast_worker::webhooks::DispatcherSettings;
use serde_json::json;
use tokio::task::JoinHandle;
use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Short timings, so retries and windows pass in a test's time.
fn fast(retry_window: Duration) -> Settings {
    Settings {
        interval: Duration::from_millis(50),
        webhooks: DispatcherSettings {
            retry_window,
            request_timeout: Duration::from_secs(5),
            concurrency: 16,
            max_per_endpoint: 16,
            backoff_base: Duration::from_millis(50),
            backoff_max: Duration::from_millis(400),
            egress: Arc::new(EgressPolicy::parse("webhook=127.0.0.0/8").unwrap()),
            poll_interval: Duration::from_millis(50),
        },
        ..Settings::default()
    }
}

struct Running {
    shutdown: CancellationToken,
    task: JoinHandle<anyhow::Result<()>>,
}

fn start(db: &TestDb, settings: Settings) -> Running {
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(maintenance::run(
        settings,
        db.config.clone(),
        shutdown.clone(),
    ));
    Running { shutdown, task }
}

impl Running {
    async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .expect("maintenance stops promptly")
            .unwrap()
            .unwrap();
    }
}

async fn inputs(client: &Client, agents: &[Uuid], per_agent: usize) {
    for _ in 0..per_agent {
        for agent in agents {
            store::create_input(client, *agent, &json!("hello"), None)
                .await
                .unwrap();
        }
    }
}

async fn agents(client: &Client, project: Uuid, n: usize) -> Vec<Uuid> {
    let mut agents = Vec::new();
    for _ in 0..n {
        agents.push(new_agent(client, project).await);
    }
    agents
}

async fn wait_all(client: &Client, endpoint: Uuid, status: &str, timeout: Duration) {
    wait_until(timeout, &format!("every delivery {status}"), || async {
        count_status(client, endpoint, "pending").await == 0
            && count_status(client, endpoint, status).await > 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_delivery_is_signed_verified_and_in_order_per_agent() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, _) = project_and_agent(&client).await;
    let receiver = Receiver::start(Behaviour::Accept).await;
    let endpoint = hook(&client, project, &receiver, json!(["*"])).await;
    let agents = agents(&client, project, 4).await;
    let running = start(&db, fast(Duration::from_secs(60)));
    inputs(&client, &agents, 5).await;

    wait_all(&client, endpoint, "delivered", Duration::from_secs(30)).await;
    running.stop().await;
    assert_every_event_received(&client, endpoint, &receiver).await;

    // The body is the event exactly as the events table has it.
    let events = client
        .query(
            "SELECT agent_id, seq, id, type, data FROM holdfast.events \
              WHERE agent_id = ANY ($1) ORDER BY agent_id, seq",
            &[&agents],
        )
        .await
        .unwrap();
    let received = receiver.received();
    assert_eq!(
        received.len(),
        events.len(),
        "each event once: the receiver answered in time"
    );
    for row in &events {
        let id: Uuid = row.get(2);
        let body = received
            .iter()
            .find(|r| r.event["id"] == json!(id.to_string()))
            .unwrap();
        let keys: Vec<&str> = body
            .event
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut keys = keys;
        keys.sort_unstable();
        assert_eq!(
            keys,
            ["agent_id", "created_at", "data", "id", "seq", "type"]
        );
        assert_eq!(body.event["type"], json!(row.get::<_, String>(3)));
        assert_eq!(body.event["data"], row.get::<_, serde_json::Value>(4));
    }
    // Per agent, the endpoint saw the events in seq order.
    let mut last: HashMap<String, i64> = HashMap::new();
    for r in &received {
        let agent = r.event["agent_id"].as_str().unwrap().to_owned();
        let seq = r.event["seq"].as_i64().unwrap();
        let previous = last.insert(agent.clone(), seq).unwrap_or(0);
        assert!(
            seq > previous,
            "agent {agent}: seq {seq} arrived after {previous}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn receiver_down_then_up_gets_every_event_with_stable_ids() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, _) = project_and_agent(&client).await;
    let receiver = Receiver::start(Behaviour::Accept).await;
    let endpoint = hook(&client, project, &receiver, json!(["input.received"])).await;
    receiver.stop().await;
    let agents = agents(&client, project, 3).await;
    let running = start(&db, fast(Duration::from_secs(120)));
    inputs(&client, &agents, 3).await;

    // Down until every delivery has failed at least twice (connection
    // refused): two attempts recorded, not counting one still under way
    // (attempts are counted when claimed; one in flight at the restart
    // could succeed as the second).
    wait_until(
        Duration::from_secs(30),
        "every delivery failed twice",
        || async {
            let all = deliveries(&client, endpoint).await;
            all.len() == 9 && all.iter().all(|d| d.attempts - i32::from(d.in_flight) >= 2)
        },
    )
    .await;
    let last_error: String = client
        .query_one(
            "SELECT last_error FROM holdfast.webhook_deliveries WHERE endpoint_id = $1 LIMIT 1",
            &[&endpoint],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        last_error.contains("onnect"),
        "the failure says why: {last_error}"
    );
    assert_eq!(receiver.count(), 0);
    receiver.restart().await;

    wait_all(&client, endpoint, "delivered", Duration::from_secs(30)).await;
    running.stop().await;
    assert_every_event_received(&client, endpoint, &receiver).await;
    for d in deliveries(&client, endpoint).await {
        assert!(
            d.attempts >= 3,
            "two failures and a success: {}",
            d.attempts
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_receiver_that_always_fails_gets_deliveries_marked_failed_after_the_window() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, agent) = project_and_agent(&client).await;
    let receiver = Receiver::start(Behaviour::Status(500)).await;
    let endpoint = hook(&client, project, &receiver, json!(["input.received"])).await;
    // Long enough that retries happen even on a loaded machine; the
    // property is "retried, then failed after the window", not a rate.
    let window = Duration::from_secs(4);
    let running = start(&db, fast(window));
    inputs(&client, &[agent], 2).await;

    wait_all(&client, endpoint, "failed", Duration::from_secs(30)).await;
    running.stop().await;
    let rows = client
        .query(
            "SELECT id, attempts, last_status_code, last_error, failed_at - created_at \
               FROM holdfast.webhook_deliveries WHERE endpoint_id = $1",
            &[&endpoint],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 2);
    let by_id = receiver.by_id();
    for row in rows {
        let id: Uuid = row.get(0);
        let attempts: i32 = row.get(1);
        assert!(attempts >= 2, "retried within the window: {attempts}");
        assert_eq!(row.get::<_, Option<i32>>(2), Some(500));
        assert_eq!(
            row.get::<_, Option<String>>(3).as_deref(),
            Some("HTTP 500 Internal Server Error")
        );
        let requests = by_id.get(&id.to_string()).map_or(0, Vec::len);
        assert_eq!(
            requests, attempts as usize,
            "the attempt count is the number of requests the receiver got"
        );
        let listed = store::list_webhook_deliveries(
            &client,
            project,
            endpoint,
            holdfast_wire::domain::WebhookDeliveryFilter::default(),
        )
        .await
        .unwrap();
        let listed = listed.iter().find(|d| d.id == id).unwrap();
        assert_eq!(
            listed.status,
            holdfast_wire::domain::WebhookDeliveryStatus::Failed
        );
        assert_eq!(listed.attempts, attempts);
    }
    assert!(receiver.received().iter().all(|r| r.verified.is_ok()));
}

/// A receiver's huge `Retry-After` once made recording the attempt
/// fail (an interval overflow), so the delivery was sent again and again
/// past its window. The delay is capped at the window: every attempt is
/// recorded and the deliveries end `failed` once the window is over.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_huge_retry_after_is_capped_and_the_delivery_fails_after_the_window() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    for retry_after in ["99999999999999999", "Fri, 31 Dec 9999 23:59:59 GMT"] {
        let (project, agent) = project_and_agent(&client).await;
        let receiver = Receiver::start(Behaviour::RetryAfter(503, retry_after)).await;
        let endpoint = hook(&client, project, &receiver, json!(["input.received"])).await;
        let window = Duration::from_secs(2);
        let running = start(&db, fast(window));
        inputs(&client, &[agent], 1).await;

        wait_all(&client, endpoint, "failed", Duration::from_secs(30)).await;
        running.stop().await;
        let row = client
            .query_one(
                "SELECT attempts, last_status_code FROM holdfast.webhook_deliveries \
                  WHERE endpoint_id = $1",
                &[&endpoint],
            )
            .await
            .unwrap();
        let attempts: i32 = row.get(0);
        assert_eq!(row.get::<_, Option<i32>>(1), Some(503), "{retry_after}");
        assert!(
            (1..=2).contains(&attempts),
            "the delay is at most the window, so one or two attempts: {attempts} ({retry_after})"
        );
        assert_eq!(
            receiver.count(),
            attempts as usize,
            "every request was recorded as an attempt ({retry_after})"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_endpoint_does_not_delay_the_others() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, _) = project_and_agent(&client).await;
    let slow = Receiver::start(Behaviour::Hold).await;
    let fast_receiver = Receiver::start(Behaviour::Accept).await;
    let slow_endpoint = hook(&client, project, &slow, json!(["input.received"])).await;
    let fast_endpoint = hook(&client, project, &fast_receiver, json!(["input.received"])).await;
    let agents = agents(&client, project, 6).await;
    let mut settings = fast(Duration::from_secs(60));
    settings.webhooks.request_timeout = Duration::from_secs(20);
    settings.webhooks.concurrency = 4;
    settings.webhooks.max_per_endpoint = 2;
    let running = start(&db, settings);
    inputs(&client, &agents, 2).await;

    wait_all(&client, fast_endpoint, "delivered", Duration::from_secs(30)).await;
    // The slow endpoint's two slots fill (its requests may still be on
    // their way when the fast endpoint is done), and never more than two.
    holdfast_tests::wait_until(Duration::from_secs(10), "2 held requests", || async {
        slow.count() >= 2
    })
    .await;
    assert_eq!(
        slow.count(),
        2,
        "the slow endpoint holds only its own slots"
    );
    assert_eq!(count_status(&client, slow_endpoint, "delivered").await, 0);

    slow.release();
    wait_all(&client, slow_endpoint, "delivered", Duration::from_secs(30)).await;
    running.stop().await;
    assert_every_event_received(&client, fast_endpoint, &fast_receiver).await;
    assert_every_event_received(&client, slow_endpoint, &slow).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shutdown_stops_promptly_and_hands_back_requests_in_flight() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, agent) = project_and_agent(&client).await;
    let receiver = Receiver::start(Behaviour::Hold).await;
    let endpoint = hook(&client, project, &receiver, json!(["input.received"])).await;
    let mut settings = fast(Duration::from_secs(60));
    settings.webhooks.request_timeout = Duration::from_secs(30);
    let running = start(&db, settings.clone());
    inputs(&client, &[agent], 1).await;
    wait_until(Duration::from_secs(10), "a request is held", || async {
        receiver.count() == 1
    })
    .await;

    let started = std::time::Instant::now();
    running.stop().await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "stopped in {:?}",
        started.elapsed()
    );
    let row = client
        .query_one(
            "SELECT status, attempts, claimed_until IS NULL, next_attempt_at <= holdfast.now() \
               FROM holdfast.webhook_deliveries WHERE endpoint_id = $1",
            &[&endpoint],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "pending");
    assert_eq!(row.get::<_, i32>(1), 1);
    assert!(
        row.get::<_, bool>(2) && row.get::<_, bool>(3),
        "released: due again at once, not after its 45 s lease"
    );

    // The next dispatcher sends it at once, under the same webhook-id.
    receiver.release();
    let running = start(&db, settings);
    wait_all(&client, endpoint, "delivered", Duration::from_secs(10)).await;
    running.stop().await;
    assert_every_event_received(&client, endpoint, &receiver).await;
    assert_eq!(receiver.count(), 2, "sent twice, one id");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn private_addresses_are_refused_at_send_time_unless_allowed() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, agent) = project_and_agent(&client).await;
    let receiver = Receiver::start(Behaviour::Accept).await;
    // Created while the deployment allowed it; the dispatcher now does not.
    let endpoint = hook(&client, project, &receiver, json!(["input.received"])).await;
    let localhost = store::create_webhook_endpoint(
        &client,
        project,
        &format!("http://localhost:{}/hook", receiver.addr.port()),
        &json!(["input.received"]),
        None,
        true,
    )
    .await
    .unwrap()
    .endpoint
    .id;
    let mut settings = fast(Duration::from_millis(500));
    settings.webhooks.egress = Arc::default();
    let running = start(&db, settings);
    inputs(&client, &[agent], 1).await;

    wait_all(&client, endpoint, "failed", Duration::from_secs(30)).await;
    wait_all(&client, localhost, "failed", Duration::from_secs(30)).await;
    running.stop().await;
    assert_eq!(
        receiver.count(),
        0,
        "no request reached the loopback receiver"
    );
    for endpoint in [endpoint, localhost] {
        let error: String = client
            .query_one(
                "SELECT last_error FROM holdfast.webhook_deliveries WHERE endpoint_id = $1",
                &[&endpoint],
            )
            .await
            .unwrap()
            .get(0);
        assert!(
            error.contains("egress refused: ") && error.contains("loopback range"),
            "{error}"
        );
    }
}
