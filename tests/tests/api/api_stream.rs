//! The SSE stream against a real server and real Postgres: resume without
//! gaps or duplicates while events keep committing, live deltas, fan-out to
//! many streams, survival of a lost LISTEN connection, slow clients dropped,
//! heartbeats, graceful shutdown.

use std::time::Duration;

use futures::future::join_all;
use holdfast_db::store;
use holdfast_tests::api_server::{project_key, ApiServer};
use holdfast_tests::api_sse::{SseItem, SseReader};
use holdfast_tests::{default_config, wait_until, TestDb};
use reqwest::Method;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_postgres::Client;
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(15);

async fn open_stream(
    server: &ApiServer,
    key: &str,
    agent: Uuid,
    last_event_id: Option<i64>,
) -> SseReader {
    let mut request = server.request(Method::GET, &format!("/v1/agents/{agent}/stream"), key);
    if let Some(seq) = last_event_id {
        request = request.header("Last-Event-ID", seq.to_string());
    }
    SseReader::new(request.send().await.unwrap())
}

async fn new_agent(client: &Client, project: Uuid) -> Uuid {
    store::create_agent(client, project, &default_config())
        .await
        .unwrap()
}

async fn last_seq(client: &Client, agent: Uuid) -> i64 {
    client
        .query_one(
            "SELECT last_event_seq FROM holdfast.agents WHERE id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0)
}

/// Read saved events until `until` (inclusive); returns their seqs.
async fn read_until(stream: &mut SseReader, until: i64) -> Vec<i64> {
    let mut seqs = Vec::new();
    while seqs.last().copied().unwrap_or(0) < until {
        let event = stream
            .next_event(WAIT)
            .await
            .unwrap_or_else(|| panic!("stream ended after {seqs:?}"));
        if event.event.as_deref() == Some("delta") {
            continue;
        }
        let seq = event.seq().expect("a saved event has an id");
        let data = event.json();
        assert_eq!(data["seq"], json!(seq), "id and data agree");
        assert_eq!(data["type"].as_str(), event.event.as_deref());
        seqs.push(seq);
    }
    seqs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_stream_gets_every_later_event_once_in_order_while_events_commit() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let agent = new_agent(&client, project).await;
    let server = ApiServer::start(&db).await;

    // 60 inputs: input.received, turn.started, then one input.received each.
    const INPUTS: i64 = 60;
    let total = INPUTS + 1;
    let writer = {
        let writer = db.connect().await;
        tokio::spawn(async move {
            for i in 0..INPUTS {
                store::create_input(&writer, agent, &json!(format!("m{i}")), None)
                    .await
                    .unwrap();
                // Pacing, so the reader disconnects and resumes mid-way.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };

    let mut first = open_stream(&server, &key, agent, None).await;
    assert_eq!(read_until(&mut first, 5).await, vec![1, 2, 3, 4, 5]);
    drop(first);

    let mut resumed = open_stream(&server, &key, agent, Some(5)).await;
    assert!(
        last_seq(&client, agent).await < total,
        "events were still committing when the stream resumed"
    );
    let seqs = read_until(&mut resumed, total).await;
    assert_eq!(seqs, (6..=total).collect::<Vec<_>>());
    writer.await.unwrap();

    // ?after= resumes the same way (and Last-Event-ID wins over it).
    let mut by_query = SseReader::new(
        server
            .request(
                Method::GET,
                &format!("/v1/agents/{agent}/stream?after={}", total - 2),
                &key,
            )
            .send()
            .await
            .unwrap(),
    );
    assert_eq!(
        read_until(&mut by_query, total).await,
        vec![total - 1, total]
    );
    let mut both = SseReader::new(
        server
            .request(
                Method::GET,
                &format!("/v1/agents/{agent}/stream?after=1"),
                &key,
            )
            .header("Last-Event-ID", (total - 1).to_string())
            .send()
            .await
            .unwrap(),
    );
    assert_eq!(read_until(&mut both, total).await, vec![total]);
}

#[tokio::test]
async fn deltas_arrive_live_in_order_with_the_events_and_without_ids() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let agent = new_agent(&client, project).await;
    let other = new_agent(&client, project).await;
    store::create_input(&client, agent, &json!("hi"), None)
        .await
        .unwrap();
    let server = ApiServer::start(&db).await;
    let mut stream = open_stream(&server, &key, agent, None).await;
    // Caught up: the stream is on the agent's feed.
    assert_eq!(read_until(&mut stream, 2).await, vec![1, 2]);

    let notify = |payload: serde_json::Value| {
        let client = &client;
        async move {
            client
                .execute(
                    "SELECT pg_notify('holdfast_stream', $1)",
                    &[&payload.to_string()],
                )
                .await
                .unwrap();
        }
    };
    notify(json!({"agent_id": other, "epoch": 1, "text": "not yours"})).await;
    client
        .execute("SELECT pg_notify('holdfast_stream', 'not json')", &[])
        .await
        .unwrap();
    notify(json!({"agent_id": agent, "epoch": 1, "text": "Hel"})).await;
    notify(json!({"agent_id": agent, "epoch": 1, "text": "lo"})).await;
    notify(json!({"agent_id": agent, "epoch": 1, "kind": "thinking", "text": "hmm"})).await;
    notify(json!({"agent_id": agent, "epoch": 1, "kind": "text", "text": "!"})).await;
    store::create_input(&client, agent, &json!("more"), None)
        .await
        .unwrap();

    let mut seen = Vec::new();
    while seen.len() < 5 {
        let event = stream.next_event(WAIT).await.expect("an event");
        seen.push(event);
    }
    assert_eq!(seen[0].event.as_deref(), Some("delta"));
    assert_eq!(seen[0].id, None, "deltas carry no id");
    assert_eq!(seen[0].json(), json!({"text": "Hel", "epoch": 1}));
    assert_eq!(seen[1].json(), json!({"text": "lo", "epoch": 1}));
    assert_eq!(
        seen[2].event.as_deref(),
        Some("thinking_delta"),
        "its own kind"
    );
    assert_eq!(seen[2].id, None);
    assert_eq!(seen[2].json(), json!({"text": "hmm", "epoch": 1}));
    assert_eq!(seen[3].event.as_deref(), Some("delta"));
    assert_eq!(seen[3].json(), json!({"text": "!", "epoch": 1}));
    assert_eq!(seen[4].event.as_deref(), Some("input.received"));
    assert_eq!(seen[4].seq(), Some(3));
    let saved: i64 = client
        .query_one(
            "SELECT count(*) FROM holdfast.events WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(saved, 3, "deltas are never saved");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_streams_on_one_agent_each_get_every_event_once() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let agent = new_agent(&client, project).await;
    store::create_input(&client, agent, &json!("start"), None)
        .await
        .unwrap();
    let server = ApiServer::start(&db).await;
    let mut streams = Vec::new();
    for _ in 0..50 {
        let mut stream = open_stream(&server, &key, agent, None).await;
        assert_eq!(read_until(&mut stream, 2).await, vec![1, 2]);
        streams.push(stream);
    }
    for i in 0..20 {
        store::create_input(&client, agent, &json!(format!("m{i}")), None)
            .await
            .unwrap();
    }
    let results = join_all(streams.iter_mut().map(|s| read_until(s, 22))).await;
    for seqs in results {
        assert_eq!(seqs, (3..=22).collect::<Vec<_>>());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_survive_the_loss_of_the_listen_connection() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let agent = new_agent(&client, project).await;
    store::create_input(&client, agent, &json!("start"), None)
        .await
        .unwrap();
    let server = ApiServer::start(&db).await;
    let mut stream = open_stream(&server, &key, agent, None).await;
    assert_eq!(read_until(&mut stream, 2).await, vec![1, 2]);

    let listen_pid = || async {
        client
            .query_opt(
                "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()",
                &[&holdfast_api::fanout::LISTEN_APPLICATION_NAME],
            )
            .await
            .unwrap()
            .map(|r| r.get::<_, i32>(0))
    };
    wait_until(WAIT, "the LISTEN session", || async {
        listen_pid().await.is_some()
    })
    .await;
    let old = listen_pid().await.unwrap();
    client
        .execute("SELECT pg_terminate_backend($1)", &[&old])
        .await
        .unwrap();
    // Committed around the loss: its hint may never arrive.
    store::create_input(&client, agent, &json!("during"), None)
        .await
        .unwrap();
    wait_until(WAIT, "a new LISTEN session", || async {
        listen_pid().await.is_some_and(|pid| pid != old)
    })
    .await;
    store::create_input(&client, agent, &json!("after"), None)
        .await
        .unwrap();
    assert_eq!(read_until(&mut stream, 4).await, vec![3, 4]);
}

#[tokio::test]
async fn an_idle_stream_gets_heartbeat_comments() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let agent = new_agent(&client, project).await;
    let server = ApiServer::start_with(&db, |c| c.sse_heartbeat = Duration::from_millis(100)).await;
    let mut stream = open_stream(&server, &key, agent, None).await;
    assert_eq!(
        stream.next_item(WAIT).await,
        SseItem::Comment("heartbeat".into())
    );
}

#[tokio::test]
async fn shutdown_ends_open_streams_and_serve_returns() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let agent = new_agent(&client, project).await;
    let server = ApiServer::start(&db).await;
    let mut stream = open_stream(&server, &key, agent, None).await;
    tokio::time::timeout(WAIT, server.stop())
        .await
        .expect("serve returns once its streams end")
        .unwrap();
    assert_eq!(stream.next_item(WAIT).await, SseItem::End);
}

/// Undo HTTP/1.1 chunked transfer coding.
fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(line_end) = body.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size =
            usize::from_str_radix(std::str::from_utf8(&body[..line_end]).unwrap().trim(), 16)
                .unwrap();
        body = &body[line_end + 2..];
        if size == 0 || body.len() < size {
            return out;
        }
        out.extend_from_slice(&body[..size]);
        body = &body[size + 2..];
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_dropped_and_resumes_from_the_table() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let agent = new_agent(&client, project).await;
    let server = ApiServer::start_with(&db, |c| {
        c.slow_client_timeout = Duration::from_millis(300);
    })
    .await;

    // A client with a tiny receive buffer that reads nothing.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut slow = socket.connect(server.addr).await.unwrap();
    slow.write_all(
        format!(
            "GET /v1/agents/{agent}/stream HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {key}\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();

    // Far more than the socket buffers hold: 121 events of ~100 kB.
    client
        .execute(
            "SELECT holdfast.create_input($1, to_jsonb(repeat('x', 100000))) FROM generate_series(1, 120)",
            &[&agent],
        )
        .await
        .unwrap();
    let total = last_seq(&client, agent).await;

    let dropped = || async {
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
            .find_map(|l| l.strip_prefix("holdfast_api_stream_clients_dropped_total "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    wait_until(WAIT, "the slow client to be dropped", || async {
        dropped().await >= 1.0
    })
    .await;

    // What it gets now is what was buffered, then the end of the response.
    let mut raw = Vec::new();
    tokio::time::timeout(WAIT, slow.read_to_end(&mut raw))
        .await
        .expect("the server closed the response")
        .unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let body = String::from_utf8(dechunk(&raw[split + 4..])).unwrap();
    let ids: Vec<i64> = body
        .lines()
        .filter_map(|l| l.strip_prefix("id: ").map(|v| v.parse().unwrap()))
        .collect();
    assert!(!ids.is_empty(), "it got something before falling behind");
    assert!(
        (ids.len() as i64) < total,
        "it was dropped, not buffered: {} of {total}",
        ids.len()
    );
    assert_eq!(ids, (1..=ids.len() as i64).collect::<Vec<_>>());

    let last = *ids.last().unwrap();
    let mut resumed = open_stream(&server, &key, agent, Some(last)).await;
    assert_eq!(
        read_until(&mut resumed, total).await,
        (last + 1..=total).collect::<Vec<_>>()
    );
}
