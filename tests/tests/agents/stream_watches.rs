//! Events hints only for watched agents: `holdfast_events` is sent
//! for agents with a stream watch and no others; a watch registered while a
//! writer holds the agent waits for it, and a writer that comes after the
//! watch hints; maintenance drops the watches of a LISTEN session that is
//! gone; and through the API, a stream opened before or while an event
//! commits gets it without any later write to carry it.

use std::time::Duration;

use holdfast_db::connect::{self, Session};
use holdfast_db::store;
use holdfast_tests::api_server::{project_key, ApiServer};
use holdfast_tests::api_sse::SseReader;
use holdfast_tests::{new_agent, project_and_agent, wait_for_lock_wait_in, TestDb};
use reqwest::Method;
use serde_json::json;
use tokio_postgres::Client;
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(15);

async fn backend_pid(client: &Client) -> i32 {
    client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0)
}

async fn input(client: &Client, agent: Uuid, text: &str) {
    store::create_input(client, agent, &json!(text), None)
        .await
        .unwrap();
}

/// The payloads on `session` up to a marker NOTIFY sent from `client` now:
/// everything committed before it, and nothing else.
async fn hints_until_marker(session: &mut Session, client: &Client) -> Vec<String> {
    client
        .batch_execute("NOTIFY holdfast_events, 'marker'")
        .await
        .unwrap();
    let mut payloads = Vec::new();
    loop {
        let hint = tokio::time::timeout(WAIT, session.notifications.recv())
            .await
            .expect("the marker arrives")
            .expect("the LISTEN session stays up");
        if hint.payload() == "marker" {
            return payloads;
        }
        payloads.push(hint.payload().to_string());
    }
}

#[tokio::test]
async fn events_are_hinted_only_for_watched_agents_and_always_outside_read_committed() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, watched) = project_and_agent(&client).await;
    let unwatched = new_agent(&client, project).await;
    let mut session = connect::listen(&db.config, &["holdfast_events"])
        .await
        .unwrap();
    let listener = backend_pid(&session.client).await;
    store::watch_agent_events(&client, Uuid::new_v4(), watched, listener)
        .await
        .unwrap();

    // One transaction writing both agents' events (input.received and
    // turn.started each): one hint, for the watched agent only.
    client.batch_execute("BEGIN").await.unwrap();
    input(&client, watched, "a").await;
    input(&client, unwatched, "b").await;
    client.batch_execute("COMMIT").await.unwrap();
    assert_eq!(
        hints_until_marker(&mut session, &client).await,
        vec![watched.to_string()]
    );

    // Under REPEATABLE READ the watch check could miss a watch newer than
    // the transaction's snapshot: every agent is hinted.
    client
        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        .await
        .unwrap();
    input(&client, unwatched, "c").await;
    client.batch_execute("COMMIT").await.unwrap();
    assert_eq!(
        hints_until_marker(&mut session, &client).await,
        vec![unwatched.to_string()]
    );
}

#[tokio::test]
async fn a_watch_waits_for_a_writer_of_the_agent_and_a_later_writer_hints() {
    let db = TestDb::new().await;
    let observer = db.connect().await;
    let (_, agent) = project_and_agent(&observer).await;
    let mut session = connect::listen(&db.config, &["holdfast_events"])
        .await
        .unwrap();
    let listener = backend_pid(&session.client).await;

    // A writer holds the agent (its events are written, not committed):
    // the watch waits for it, so the events are committed by the time the
    // stream reads after the watch.
    let writer = db.connect().await;
    writer.batch_execute("BEGIN").await.unwrap();
    input(&writer, agent, "first").await;
    let api = db.connect().await;
    let watch = Uuid::new_v4();
    let registering =
        tokio::spawn(async move { store::watch_agent_events(&api, watch, agent, listener).await });
    wait_for_lock_wait_in(&observer, &db.name, "%watch_agent_events%").await;
    writer.batch_execute("COMMIT").await.unwrap();
    registering.await.unwrap().unwrap();
    assert_eq!(
        store::last_event_seq(&observer, agent).await.unwrap(),
        Some(2),
        "the writer's input.received and turn.started are readable after the watch"
    );
    // The writer registered nothing and found no watch: no hint.
    assert!(hints_until_marker(&mut session, &observer).await.is_empty());

    // A watch being registered holds the agent: a writer waits for it, then
    // sees it and hints.
    let api = db.connect().await;
    api.batch_execute("BEGIN").await.unwrap();
    store::watch_agent_events(&api, watch, agent, listener)
        .await
        .unwrap();
    let writing = tokio::spawn(async move {
        input(&writer, agent, "second").await;
        writer
    });
    wait_for_lock_wait_in(&observer, &db.name, "%create_input%").await;
    api.batch_execute("COMMIT").await.unwrap();
    writing.await.unwrap();
    assert_eq!(
        hints_until_marker(&mut session, &observer).await,
        vec![agent.to_string()]
    );

    // Unwatched: no hint again.
    store::unwatch_agent_events(&observer, watch).await.unwrap();
    input(&observer, agent, "third").await;
    assert!(hints_until_marker(&mut session, &observer).await.is_empty());
}

#[tokio::test]
async fn maintenance_drops_the_watches_of_a_listen_session_that_is_gone() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, agent) = project_and_agent(&client).await;
    let other = new_agent(&client, project).await;
    let gone = db.connect().await;
    let alive = db.connect().await;
    let gone_pid = backend_pid(&gone).await;
    store::watch_agent_events(&client, Uuid::new_v4(), agent, gone_pid)
        .await
        .unwrap();
    let kept = Uuid::new_v4();
    store::watch_agent_events(&client, kept, other, backend_pid(&alive).await)
        .await
        .unwrap();
    drop(gone);
    holdfast_tests::wait_until(WAIT, "the dropped session's backend to exit", || async {
        client
            .query_one(
                "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $1",
                &[&gone_pid],
            )
            .await
            .unwrap()
            .get::<_, bool>(0)
    })
    .await;

    let report = store::maintenance_tick(&client).await.unwrap();
    assert_eq!(report.watches_dropped, 1);
    let left: Vec<Uuid> = client
        .query("SELECT id FROM holdfast.stream_watches", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(left, vec![kept]);
}

async fn open_stream(server: &ApiServer, key: &str, agent: Uuid, after: i64) -> SseReader {
    SseReader::new(
        server
            .request(Method::GET, &format!("/v1/agents/{agent}/stream"), key)
            .header("Last-Event-ID", after.to_string())
            .send()
            .await
            .unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_opened_before_or_while_an_event_commits_gets_it_without_a_later_write() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let agent = store::create_agent(&client, project, &holdfast_tests::default_config())
        .await
        .unwrap();
    let server = ApiServer::start(&db).await;
    let writer = std::sync::Arc::new(db.connect().await);

    // Each round opens a new feed (the previous round's stream is closed,
    // so its feed and watch are gone) while one input commits, at a varying
    // offset around the stream's start; nothing is written after it. The
    // stream must get every event up to that commit: from the table, or
    // from a hint its feed's watch brought.
    let mut seen = 0;
    for round in 0..24u64 {
        let write = {
            let writer = writer.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_micros(round % 6 * 500)).await;
                input(&writer, agent, &format!("m{round}")).await;
                store::last_event_seq(&*writer, agent)
                    .await
                    .unwrap()
                    .unwrap()
            })
        };
        let mut stream = open_stream(&server, &key, agent, seen).await;
        let last = write.await.unwrap();
        while seen < last {
            let event = stream
                .next_event(WAIT)
                .await
                .unwrap_or_else(|| panic!("round {round}: no event after {seen} of {last}"));
            let seq = event.seq().expect("a saved event");
            assert_eq!(seq, seen + 1, "round {round}: in order, none missed");
            seen = seq;
        }
    }
}
