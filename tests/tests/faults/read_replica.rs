//! The API's read replica against two real clusters in streaming
//! replication (a primary and a `pg_basebackup -R` hot standby): event
//! listings and stream history are read from the standby, and a read right
//! after a write never misses that write, even while the standby has
//! stopped replaying (`pg_wal_replay_pause()`); a standby that is down
//! only sends the reads to the primary.

use std::time::Duration;

use holdfast_db::connect::ConnectConfig;
use holdfast_db::store;
use holdfast_tests::api_server::{project_key, ApiServer};
use holdfast_tests::api_sse::SseReader;
use holdfast_tests::{default_config, wait_until, PrivateCluster, StandbyCluster};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tokio_postgres::Client;
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(15);

struct Rig {
    // Dropped in this order: the server before the clusters it reads.
    server: ApiServer,
    primary_sql: Client,
    standby_sql: Client,
    standby: StandbyCluster,
    primary: PrivateCluster,
}

/// A migrated primary, its standby, and an API reading from the standby.
async fn rig() -> Rig {
    let primary = PrivateCluster::start().await;
    let standby = primary.start_standby().await;
    let server = ApiServer::start_on(&primary.config(), |config| {
        config.read_database = Some(standby.config());
    })
    .await;
    Rig {
        primary_sql: connect(&primary.config()).await,
        standby_sql: connect(&standby.config()).await,
        server,
        standby,
        primary,
    }
}

async fn connect(config: &ConnectConfig) -> Client {
    let (client, connection) = config.connect().await.expect("connect");
    tokio::spawn(connection);
    client
}

impl Rig {
    /// Wait until the standby has replayed everything the primary has
    /// written so far.
    async fn caught_up(&self) {
        let position: String = self
            .primary_sql
            .query_one("SELECT pg_current_wal_lsn()::text", &[])
            .await
            .unwrap()
            .get(0);
        wait_until(WAIT, "the standby replays the primary's WAL", || async {
            self.standby_sql
                .query_one(
                    "SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn",
                    &[&position],
                )
                .await
                .unwrap()
                .get::<_, bool>(0)
        })
        .await;
    }

    /// Stop the standby's replay: from now on it serves what it had.
    async fn pause_replay(&self) {
        self.standby_sql
            .execute("SELECT pg_wal_replay_pause()", &[])
            .await
            .unwrap();
        wait_until(WAIT, "the standby's replay pauses", || async {
            self.standby_sql
                .query_one("SELECT pg_get_wal_replay_pause_state() = 'paused'", &[])
                .await
                .unwrap()
                .get::<_, bool>(0)
        })
        .await;
    }

    /// Sessions on the standby whose last statement read the events table.
    async fn standby_event_reads(&self) -> i64 {
        self.standby_sql
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                  WHERE pid <> pg_backend_pid() AND query LIKE '%FROM holdfast.events%'",
                &[],
            )
            .await
            .unwrap()
            .get(0)
    }

    /// A new project's key and an agent of it with one input, written on
    /// the primary directly (so the API remembers no write of the key).
    async fn agent_with_input(&self) -> (String, Uuid, Uuid) {
        let (project, key) = project_key(&self.primary_sql).await;
        let agent = store::create_agent(&self.primary_sql, project, &default_config())
            .await
            .unwrap();
        let input = add_input(&self.primary_sql, agent, "first").await;
        (key, agent, input)
    }
}

/// Add an input on the primary directly; returns its id.
async fn add_input(sql: &Client, agent: Uuid, text: &str) -> Uuid {
    store::create_input(sql, agent, &json!(text), None)
        .await
        .unwrap()
        .input_id
}

/// The input ids of an agent's `input.received` events in a listing.
fn listed_inputs(listing: &Value) -> Vec<Uuid> {
    listing["events"]
        .as_array()
        .expect("an event list")
        .iter()
        .filter(|event| event["type"] == "input.received")
        .map(|event| event["data"]["input_id"].as_str().unwrap().parse().unwrap())
        .collect()
}

async fn list_events(server: &ApiServer, key: &str, agent: Uuid, query: &str) -> Value {
    let response = server
        .request(
            Method::GET,
            &format!("/v1/agents/{agent}/events{query}"),
            key,
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    response.json().await.unwrap()
}

/// POST an input through the API; returns its id and the response's
/// `Holdfast-Lsn`.
async fn post_input(server: &ApiServer, key: &str, agent: Uuid, text: &str) -> (Uuid, String) {
    let response = server
        .request(Method::POST, &format!("/v1/agents/{agent}/inputs"), key)
        .json(&json!({"content": text}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let lsn = response
        .headers()
        .get("holdfast-lsn")
        .expect("a write response carries Holdfast-Lsn")
        .to_str()
        .unwrap()
        .to_owned();
    let body: Value = response.json().await.unwrap();
    (body["id"].as_str().unwrap().parse().unwrap(), lsn)
}

async fn fallbacks(server: &ApiServer) -> f64 {
    let text = server
        .http
        .get(server.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix("holdfast_read_replica_fallbacks_total "))
        .map_or(0.0, |value| value.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_and_stream_history_are_read_from_the_replica() {
    let rig = rig().await;
    let (key, agent, first) = rig.agent_with_input().await;
    rig.caught_up().await;

    // The standby stops replaying; the primary takes a second input.
    rig.pause_replay().await;
    let second = add_input(&rig.primary_sql, agent, "second").await;

    // A stream's history is read from the standby first, then its tail
    // from the primary: it has the second input all the same.
    assert_eq!(
        rig.standby_event_reads().await,
        0,
        "nothing read the standby yet"
    );
    let mut stream = SseReader::new(
        rig.server
            .request(Method::GET, &format!("/v1/agents/{agent}/stream"), &key)
            .send()
            .await
            .unwrap(),
    );
    let mut streamed = Vec::new();
    while !streamed.contains(&second) {
        let event = stream.next_event(WAIT).await.expect("the stream goes on");
        if event.event.as_deref() == Some("input.received") {
            streamed.push(
                event.json()["data"]["input_id"]
                    .as_str()
                    .unwrap()
                    .parse()
                    .unwrap(),
            );
        }
    }
    assert_eq!(
        streamed,
        [first, second],
        "each input streamed once, in order"
    );
    assert!(
        rig.standby_event_reads().await > 0,
        "the stream's history was read on the standby"
    );

    // No write of this key went through the API: the listing is the
    // paused standby's, without the second input.
    let stale = list_events(&rig.server, &key, agent, "").await;
    assert_eq!(
        listed_inputs(&stale),
        [first],
        "the listing is the paused standby's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_right_after_a_write_never_misses_it() {
    let rig = rig().await;
    let (key, agent, _) = rig.agent_with_input().await;
    rig.caught_up().await;
    // A second API process over the same clusters: it has answered no
    // write, so only `min_lsn` tells it what the client has seen.
    let other = ApiServer::start_on(&rig.primary.config(), |config| {
        config.read_database = Some(rig.standby.config());
    })
    .await;

    // Replaying: each read right after a write sees it.
    for n in 0..20 {
        let (input, lsn) = post_input(&rig.server, &key, agent, &format!("live {n}")).await;
        let listing = list_events(&rig.server, &key, agent, "?limit=1000").await;
        assert!(
            listed_inputs(&listing).contains(&input),
            "read after write {n}"
        );
        let listing = list_events(&other, &key, agent, &format!("?limit=1000&min_lsn={lsn}")).await;
        assert!(listed_inputs(&listing).contains(&input), "min_lsn read {n}");
    }

    // Paused: the standby never gets the write, so the read falls back to
    // the primary and still sees it.
    rig.pause_replay().await;
    let fallbacks_before = fallbacks(&rig.server).await;
    let (input, lsn) = post_input(&rig.server, &key, agent, "while paused").await;
    let listing = list_events(&rig.server, &key, agent, "?limit=1000").await;
    assert!(
        listed_inputs(&listing).contains(&input),
        "read after write while paused"
    );
    let listing = list_events(&other, &key, agent, &format!("?limit=1000&min_lsn={lsn}")).await;
    assert!(
        listed_inputs(&listing).contains(&input),
        "min_lsn read while paused"
    );
    assert!(fallbacks(&rig.server).await >= fallbacks_before + 2.0);

    // Without the LSN, the other process reads the paused standby: the
    // guarantee came from the LSN, not from a replica that kept up.
    let listing = list_events(&other, &key, agent, "?limit=1000").await;
    assert!(
        !listed_inputs(&listing).contains(&input),
        "a read without the LSN is the standby's"
    );

    // A malformed min_lsn is refused, naming it.
    let response = rig
        .server
        .request(
            Method::GET,
            &format!("/v1/agents/{agent}/events?min_lsn=nope"),
            &key,
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["field"], "min_lsn", "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_is_down_costs_a_fallback_not_an_error() {
    let rig = rig().await;
    let (key, agent, first) = rig.agent_with_input().await;
    tokio::task::block_in_place(|| rig.standby.cluster.stop()).unwrap();

    let listing = list_events(&rig.server, &key, agent, "").await;
    assert_eq!(listed_inputs(&listing), [first], "the primary answered");
    let mut stream = SseReader::new(
        rig.server
            .request(Method::GET, &format!("/v1/agents/{agent}/stream"), &key)
            .send()
            .await
            .unwrap(),
    );
    let event = stream.next_event(WAIT).await.expect("the stream goes on");
    assert_eq!(event.event.as_deref(), Some("input.received"));
}

/// A `min_lsn` the primary has not reached is refused at once, naming it:
/// no replica can reach it, so it would only make the read poll the
/// replica for `read_replica_wait` and then fall back to the primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_min_lsn_past_the_primarys_position_is_refused() {
    let rig = rig().await;
    let (key, agent, _) = rig.agent_with_input().await;
    let response = rig
        .server
        .request(
            Method::GET,
            &format!("/v1/agents/{agent}/events?min_lsn=FFFFFFFF/FFFFFF00"),
            &key,
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["field"], "min_lsn", "{body}");
    // The primary's own position is served.
    let position: String = rig
        .primary_sql
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .unwrap()
        .get(0);
    let listing = list_events(
        &rig.server,
        &key,
        agent,
        &format!("?limit=1000&min_lsn={position}"),
    )
    .await;
    assert!(!listed_inputs(&listing).is_empty());
}
