//! Custom tool results and cancellation over HTTP: first result wins,
//! cancelled calls refuse later answers, a running agent's worker is asked
//! to stop.

use std::time::Duration;

use futures::future::join_all;
use holdfast_db::group_commit::GroupCommit;
use holdfast_db::store;
use holdfast_tests::api_server::{project_key, waiting_custom_call, ApiServer};
use holdfast_tests::scenario::{agent_state, event_types};
use holdfast_tests::{default_config, TestDb};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tokio_postgres::AsyncMessage;
use uuid::Uuid;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_concurrent_results_for_one_custom_call_exactly_one_wins() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let agent = store::create_agent(&client, project, &default_config())
        .await
        .unwrap();
    let call = waiting_custom_call(&client, agent).await;
    assert_eq!(agent_state(&client, agent).await, "waiting");
    let server = ApiServer::start(&db).await;

    let path = format!("/v1/tool-calls/{call}/result");
    let posts = (0..20).map(|i| {
        server
            .request(Method::POST, &path, &key)
            .json(&json!({"output": {"answer": i}}))
            .send()
    });
    let mut winners = Vec::new();
    let mut conflicts = Vec::new();
    for response in join_all(posts).await {
        let response = response.unwrap();
        let status = response.status();
        let body: Value = response.json().await.unwrap();
        match status {
            StatusCode::OK => winners.push(body),
            StatusCode::CONFLICT => conflicts.push(body),
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one result wins");
    assert_eq!(conflicts.len(), 19);
    let winner = &winners[0];
    assert_eq!(winner["status"], "completed");
    for conflict in &conflicts {
        assert_eq!(conflict["error"]["type"], "conflict");
        // The 409 shows the call as it stands: the winner's output.
        assert_eq!(conflict["tool_call"]["status"], "completed");
        assert_eq!(conflict["tool_call"]["output"], winner["output"]);
    }
    let completed: i64 = client
        .query_one(
            "SELECT count(*) FROM holdfast.events WHERE agent_id = $1 AND type = 'tool_call.completed'",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(completed, 1);
    assert_eq!(
        agent_state(&client, agent).await,
        "ready",
        "all results in: the model must answer"
    );

    // The same payload again is still a 409: first result wins, no replays.
    let again = server
        .request(Method::POST, &path, &key)
        .json(&json!({"output": winner["output"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::CONFLICT);
}

#[tokio::test]
async fn cancelling_a_waiting_agent_cancels_its_calls_and_later_results_get_409() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let agent = store::create_agent(&client, project, &default_config())
        .await
        .unwrap();
    let call = waiting_custom_call(&client, agent).await;
    let server = ApiServer::start(&db).await;

    let pending: Value = server
        .request(
            Method::GET,
            &format!("/v1/agents/{agent}/tool-calls?status=pending"),
            &key,
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(pending["tool_calls"][0]["id"], json!(call));
    assert_eq!(pending["tool_calls"][0]["kind"], "custom");
    assert_eq!(pending["tool_calls"][0]["status"], "waiting");

    let cancel = server
        .request(Method::POST, &format!("/v1/agents/{agent}/cancel"), &key)
        .send()
        .await
        .unwrap();
    assert_eq!(cancel.status(), StatusCode::OK);
    let cancel: Value = cancel.json().await.unwrap();
    assert_eq!(cancel["status"], "cancelled");
    assert_eq!(cancel["agent"]["state"], "idle");
    assert_eq!(cancel["agent"]["turn_open"], false);
    assert_eq!(
        event_types(&client, agent).await.last().map(String::as_str),
        Some("turn.cancelled")
    );
    let cancelled: Value = client
        .query_one(
            "SELECT data FROM holdfast.events WHERE agent_id = $1 AND type = 'turn.cancelled'",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(cancelled["cancelled_tool_calls"], json!([call]));

    let late = server
        .request(Method::POST, &format!("/v1/tool-calls/{call}/result"), &key)
        .json(&json!({"output": "too late"}))
        .send()
        .await
        .unwrap();
    assert_eq!(late.status(), StatusCode::CONFLICT);
    let late: Value = late.json().await.unwrap();
    assert_eq!(late["tool_call"]["status"], "cancelled");
    assert_eq!(late["tool_call"]["output"], Value::Null);

    let pending: Value = server
        .request(
            Method::GET,
            &format!("/v1/agents/{agent}/tool-calls?status=pending"),
            &key,
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(pending["tool_calls"], json!([]));
    let all: Value = server
        .request(
            Method::GET,
            &format!("/v1/agents/{agent}/tool-calls?status=cancelled&kind=custom"),
            &key,
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(all["tool_calls"][0]["id"], json!(call));

    // Nothing left to cancel.
    let again = server
        .request(Method::POST, &format!("/v1/agents/{agent}/cancel"), &key)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::CONFLICT);
}

#[tokio::test]
async fn cancelling_a_running_agent_asks_its_worker_to_stop() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let agent = store::create_agent(&client, project, &default_config())
        .await
        .unwrap();
    store::create_input(&client, agent, &json!("think hard"), None)
        .await
        .unwrap();
    let claim = store::claim_agents(&client, "w", 1, Duration::from_secs(60))
        .await
        .unwrap()[0];
    let server = ApiServer::start(&db).await;

    // The worker's view: a LISTEN on holdfast_cancel.
    let (worker, mut connection) = db.config.connect().await.unwrap();
    let (tx, mut notifications) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(message)) = futures::StreamExt::next(&mut messages).await {
            if let AsyncMessage::Notification(n) = message {
                let _ = tx.send((n.channel().to_owned(), n.payload().to_owned()));
            }
        }
    });
    worker
        .batch_execute("LISTEN holdfast_cancel")
        .await
        .unwrap();

    let cancel = server
        .request(Method::POST, &format!("/v1/agents/{agent}/cancel"), &key)
        .send()
        .await
        .unwrap();
    assert_eq!(cancel.status(), StatusCode::ACCEPTED);
    let cancel: Value = cancel.json().await.unwrap();
    assert_eq!(cancel["status"], "requested");
    assert_eq!(cancel["agent"]["state"], "running");
    assert_eq!(cancel["agent"]["cancel_requested"], true);
    let (channel, payload) = tokio::time::timeout(Duration::from_secs(10), notifications.recv())
        .await
        .expect("a cancel notification")
        .unwrap();
    assert_eq!(
        (channel.as_str(), payload),
        ("holdfast_cancel", agent.to_string())
    );
    let renewal = store::renew_leases(&client, "w", &[claim], Duration::from_secs(60))
        .await
        .unwrap();
    assert!(
        renewal[0].cancel_requested,
        "renewals report it too (a missed notification)"
    );
    assert!(
        !event_types(&client, agent)
            .await
            .contains(&"turn.cancelled".to_owned()),
        "turn.cancelled waits for the worker to stop"
    );
}

#[tokio::test]
async fn an_oversized_output_is_413_and_nothing_is_written() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let agent = store::create_agent(&client, project, &default_config())
        .await
        .unwrap();
    let call = waiting_custom_call(&client, agent).await;
    let server = ApiServer::start_with(&db, |config| config.max_tool_output_bytes = 1000).await;
    let path = format!("/v1/tool-calls/{call}/result");
    let big = server
        .request(Method::POST, &path, &key)
        .json(&json!({"output": "x".repeat(1000)}))
        .send()
        .await
        .unwrap();
    assert_eq!(big.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let big: Value = big.json().await.unwrap();
    assert_eq!(big["error"]["type"], "output_too_large");
    let status: String = client
        .query_one(
            "SELECT status FROM holdfast.tool_calls WHERE id = $1",
            &[&call],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(status, "waiting");
    let fits = server
        .request(Method::POST, &path, &key)
        .json(&json!({"output": "x".repeat(900), "is_error": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(fits.status(), StatusCode::OK);
    let fits: Value = fits.json().await.unwrap();
    assert_eq!(fits["is_error"], true);
}

#[tokio::test]
async fn only_a_custom_call_accepts_a_client_result() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let agent = store::create_agent(&client, project, &default_config())
        .await
        .unwrap();
    store::create_input(&client, agent, &json!("go"), None)
        .await
        .unwrap();
    let claim = store::claim_agents(&client, "w", 1, Duration::from_secs(60))
        .await
        .unwrap()[0];
    let inputs: Vec<Uuid> = client
        .query(
            "SELECT id FROM holdfast.inputs WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let step = holdfast_wire::domain::ModelStep {
        input_ids: inputs,
        message: vec![json!({"type": "text", "text": "fetching"})],
        tool_calls: vec![holdfast_wire::domain::NewToolCall {
            provider_id: "toolu_x".into(),
            name: "web_fetch".into(),
            input: json!({}),
            kind: holdfast_wire::domain::ToolKind::External,
        }],
        usage: json!({}),
        stop_reason: Some("tool_use".into()),
        config_version: None,
    };
    store::commit_model_step(&client, claim, &step)
        .await
        .unwrap();
    let call: Uuid = client
        .query_one(
            "SELECT id FROM holdfast.tool_calls WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    let server = ApiServer::start(&db).await;
    let response = server
        .request(Method::POST, &format!("/v1/tool-calls/{call}/result"), &key)
        .json(&json!({"output": "forged"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CONFLICT);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["tool_call"]["kind"], "external");
    assert_eq!(body["tool_call"]["status"], "pending");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_results_for_different_calls_share_one_commit_and_each_gets_its_own_answer() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let mut calls = Vec::new();
    for _ in 0..5 {
        let agent = store::create_agent(&client, project, &default_config())
            .await
            .unwrap();
        calls.push(waiting_custom_call(&client, agent).await);
    }
    // A window long enough that every concurrent post falls inside it.
    let server = ApiServer::start_with(&db, |config| {
        config.group_commit = GroupCommit {
            window: Duration::from_millis(500),
            batch: 32,
        };
    })
    .await;
    let post = |call: Uuid, output: Value| {
        server
            .request(Method::POST, &format!("/v1/tool-calls/{call}/result"), &key)
            .json(&json!({ "output": output }))
            .send()
    };
    // Five results, a second result for the first call (never in the same
    // batch as the other: one of the two wins, the other gets 409) and one
    // for a call that does not exist (404).
    let mut posts: Vec<_> = calls
        .iter()
        .enumerate()
        .map(|(i, call)| post(*call, json!({ "answer": i })))
        .collect();
    posts.push(post(calls[0], json!("again")));
    posts.push(post(Uuid::new_v4(), json!("nobody asked")));
    let mut answers = Vec::new();
    for response in join_all(posts).await {
        let response = response.unwrap();
        answers.push((response.status(), response.json::<Value>().await.unwrap()));
    }
    for (i, (status, body)) in answers[1..5].iter().enumerate() {
        let i = i + 1;
        assert_eq!(*status, StatusCode::OK, "{body}");
        assert_eq!(body["id"], json!(calls[i]));
        assert_eq!(
            body["output"],
            json!({ "answer": i }),
            "each gets its own call"
        );
    }
    let (first, again) = (&answers[0], &answers[5]);
    let (winner, loser) = match (first.0, again.0) {
        (StatusCode::OK, StatusCode::CONFLICT) => (first, again),
        (StatusCode::CONFLICT, StatusCode::OK) => (again, first),
        other => panic!("one of the two results for one call wins: {other:?}"),
    };
    assert_eq!(winner.1["id"], json!(calls[0]));
    assert_eq!(
        loser.1["tool_call"]["output"], winner.1["output"],
        "the 409 shows the winner's output"
    );
    assert_eq!(answers[6].0, StatusCode::NOT_FOUND, "{}", answers[6].1);

    // The other four results share one commit (the first call's winner may
    // have come in the batch after).
    let transactions: i64 = client
        .query_one(
            "SELECT count(DISTINCT xmin::text) FROM holdfast.tool_calls WHERE id = ANY ($1)",
            &[&calls[1..].to_vec()],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(transactions, 1, "the four other results share one commit");
}
