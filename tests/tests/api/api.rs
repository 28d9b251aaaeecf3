//! The HTTP API against a real server and real Postgres: project isolation,
//! idempotent inputs, agents, the event log, and bad input.

use std::time::Duration;

use futures::future::join_all;
use holdfast_db::group_commit::GroupCommit;
use holdfast_db::store;
use holdfast_tests::api_server::{error_of, project_key, raw_http, waiting_custom_call, ApiServer};
use holdfast_tests::api_sse::SseReader;
use holdfast_tests::scenario::event_types;
use holdfast_tests::{default_config, TestDb};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tokio_postgres::Client;
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(10);

/// Everything a project's requests could change, as one comparable value.
async fn snapshot(client: &Client, project: Uuid) -> Value {
    client
        .query_one(
            "SELECT jsonb_build_object(
                 'agents', (SELECT coalesce(jsonb_agg(jsonb_build_object(
                     'id', a.id, 'config', a.config, 'state', a.state, 'turn_open', a.turn_open,
                     'cancel', a.cancel_requested_at, 'seq', a.last_event_seq, 'updated', a.updated_at)
                     ORDER BY a.id), '[]') FROM holdfast.agents a WHERE a.project_id = $1),
                 'inputs', (SELECT count(*) FROM holdfast.inputs i WHERE i.project_id = $1),
                 'events', (SELECT count(*) FROM holdfast.events e
                              JOIN holdfast.agents a ON a.id = e.agent_id WHERE a.project_id = $1),
                 'tool_calls', (SELECT coalesce(jsonb_agg(jsonb_build_object('id', t.id, 'status', t.status, 'output', t.output)
                     ORDER BY t.id), '[]') FROM holdfast.tool_calls t
                              JOIN holdfast.agents a ON a.id = t.agent_id WHERE a.project_id = $1))",
            &[&project],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_answers_404_for_another_projects_agent_and_changes_nothing() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (_, key_a) = project_key(&client).await;
    let (project_b, _) = project_key(&client).await;
    let agent_b = store::create_agent(&client, project_b, &default_config())
        .await
        .unwrap();
    let call_b = waiting_custom_call(&client, agent_b).await;
    let idle_b = store::create_agent(&client, project_b, &default_config())
        .await
        .unwrap();
    let server = ApiServer::start(&db).await;
    let before = snapshot(&client, project_b).await;

    let routes: Vec<(Method, String, Option<Value>)> = vec![
        (Method::GET, format!("/v1/agents/{agent_b}"), None),
        (
            Method::PATCH,
            format!("/v1/agents/{agent_b}"),
            Some(json!({"system": "pwned"})),
        ),
        (
            Method::POST,
            format!("/v1/agents/{agent_b}/inputs"),
            Some(json!({"content": "hi"})),
        ),
        (Method::POST, format!("/v1/agents/{agent_b}/cancel"), None),
        (Method::POST, format!("/v1/agents/{idle_b}/archive"), None),
        (Method::GET, format!("/v1/agents/{agent_b}/events"), None),
        (Method::GET, format!("/v1/agents/{agent_b}/stream"), None),
        (
            Method::GET,
            format!("/v1/agents/{agent_b}/tool-calls?status=pending"),
            None,
        ),
        (
            Method::POST,
            format!("/v1/tool-calls/{call_b}/result"),
            Some(json!({"output": "pwned"})),
        ),
    ];
    for (method, path, body) in routes {
        let missing = Uuid::new_v4();
        let missing_path = path
            .replace(&agent_b.to_string(), &missing.to_string())
            .replace(&idle_b.to_string(), &missing.to_string())
            .replace(&call_b.to_string(), &missing.to_string());
        let send = |path: String| {
            let mut request = server.request(method.clone(), &path, &key_a);
            if let Some(body) = &body {
                request = request.json(body);
            }
            request.send()
        };
        let (status, kind, message, _) = error_of(send(path.clone()).await.unwrap()).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}");
        assert_eq!(kind, "not_found", "{method} {path}");
        // Indistinguishable from an id that does not exist at all.
        let (missing_status, missing_kind, missing_message, _) =
            error_of(send(missing_path).await.unwrap()).await;
        assert_eq!((missing_status, missing_kind), (status, kind));
        assert_eq!(
            missing_message.replace(&missing.to_string(), "ID"),
            message
                .replace(&agent_b.to_string(), "ID")
                .replace(&idle_b.to_string(), "ID")
                .replace(&call_b.to_string(), "ID"),
            "{method} {path}"
        );
    }
    let listed: Value = server
        .request(Method::GET, "/v1/agents", &key_a)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["agents"], json!([]), "A lists none of B's agents");
    assert_eq!(snapshot(&client, project_b).await, before, "B is unchanged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_inputs_with_one_idempotency_key_create_one_input() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let agent = store::create_agent(&client, project, &default_config())
        .await
        .unwrap();
    let server = ApiServer::start(&db).await;
    let path = format!("/v1/agents/{agent}/inputs");
    let requests = (0..50).map(|_| {
        server
            .request(Method::POST, &path, &key)
            .header("Idempotency-Key", "order-42")
            .json(&json!({"content": "ship it"}))
            .send()
    });
    let mut bodies = Vec::new();
    let mut replayed = 0;
    for response in join_all(requests).await {
        let response = response.unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
        match response.headers().get("idempotent-replayed") {
            Some(v) if v == "true" => replayed += 1,
            Some(other) => panic!("Idempotent-Replayed: {other:?}"),
            None => {}
        }
        bodies.push(response.text().await.unwrap());
    }
    assert_eq!(replayed, 49, "every request but the first is a replay");
    assert!(
        bodies.iter().all(|b| b == &bodies[0]),
        "identical bodies: {bodies:?}"
    );
    let inputs: i64 = client
        .query_one(
            "SELECT count(*) FROM holdfast.inputs WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(inputs, 1);
    let body: Value = serde_json::from_str(&bodies[0]).unwrap();
    assert_eq!(body["content"], json!("ship it"));
    assert_eq!(body["agent_id"], json!(agent));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_inputs_for_different_agents_share_one_commit_and_each_gets_its_own_answer() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let mut agents = Vec::new();
    for _ in 0..7 {
        agents.push(
            store::create_agent(&client, project, &default_config())
                .await
                .unwrap(),
        );
    }
    store::archive_agent(&client, agents[4]).await.unwrap();
    let earlier = store::create_input(&client, agents[5], &json!("first"), Some("k"))
        .await
        .unwrap();
    let (other_project, _) = project_key(&client).await;
    let elsewhere = store::create_agent(&client, other_project, &default_config())
        .await
        .unwrap();
    // A window long enough that every concurrent post falls inside it.
    let server = ApiServer::start_with(&db, |config| {
        config.group_commit = GroupCommit {
            window: Duration::from_millis(500),
            batch: 32,
        };
    })
    .await;
    let post = |agent: Uuid, content: &str, idempotency_key: Option<&str>| {
        let mut request = server
            .request(Method::POST, &format!("/v1/agents/{agent}/inputs"), &key)
            .json(&json!({ "content": content }));
        if let Some(idempotency_key) = idempotency_key {
            request = request.header("Idempotency-Key", idempotency_key);
        }
        request.send()
    };
    // Four inputs; one for an archived agent (409); one for another
    // project's agent and one for no agent (404); a replay (201, replayed);
    // the replayed key with another body (422; for an agent of its own: a
    // second input for one of the four would push that one's into the next
    // batch).
    let mut posts: Vec<_> = agents[..4]
        .iter()
        .enumerate()
        .map(|(i, agent)| post(*agent, ["a", "b", "c", "d"][i], None))
        .collect();
    posts.push(post(agents[4], "too late", None));
    posts.push(post(elsewhere, "not yours", None));
    posts.push(post(Uuid::new_v4(), "nobody", None));
    posts.push(post(agents[5], "first", Some("k")));
    posts.push(post(agents[6], "another", Some("k")));
    let mut answers = Vec::new();
    for response in join_all(posts).await {
        let response = response.unwrap();
        let replayed = response.headers().get("idempotent-replayed").is_some();
        answers.push((
            response.status(),
            replayed,
            response.json::<Value>().await.unwrap(),
        ));
    }
    let mut created = Vec::new();
    for (i, (status, replayed, body)) in answers[..4].iter().enumerate() {
        assert_eq!((*status, *replayed), (StatusCode::CREATED, false), "{body}");
        assert_eq!(
            body["agent_id"],
            json!(agents[i]),
            "each gets its own input"
        );
        assert_eq!(body["content"], json!(["a", "b", "c", "d"][i]));
        created.push(body["id"].as_str().unwrap().parse::<Uuid>().unwrap());
    }
    assert_eq!(answers[4].0, StatusCode::CONFLICT, "{}", answers[4].2);
    assert_eq!(answers[5].0, StatusCode::NOT_FOUND, "{}", answers[5].2);
    assert_eq!(
        answers[5].2["error"]["message"],
        format!("agent {elsewhere} not found"),
        "another project's agent reads as missing"
    );
    assert_eq!(answers[6].0, StatusCode::NOT_FOUND, "{}", answers[6].2);
    assert_eq!((answers[7].0, answers[7].1), (StatusCode::CREATED, true));
    assert_eq!(answers[7].2["id"], json!(earlier.input_id));
    assert_eq!(
        answers[8].0,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        answers[8].2
    );
    assert_eq!(answers[8].2["error"]["field"], "idempotency_key");

    let transactions: i64 = client
        .query_one(
            "SELECT count(DISTINCT xmin::text) FROM holdfast.inputs WHERE id = ANY ($1)",
            &[&created],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(transactions, 1, "the four inputs share one commit");
}

#[tokio::test]
async fn an_idempotency_key_reused_with_another_body_is_422_and_too_long_is_400() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let agent = store::create_agent(&client, project, &default_config())
        .await
        .unwrap();
    let server = ApiServer::start(&db).await;
    let path = format!("/v1/agents/{agent}/inputs");
    let post = |idempotency_key: String, content: &str| {
        server
            .request(Method::POST, &path, &key)
            .header("Idempotency-Key", idempotency_key)
            .json(&json!({ "content": content }))
            .send()
    };
    let first = post("k1".into(), "one").await.unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let (status, kind, _, field) = error_of(post("k1".into(), "two").await.unwrap()).await;
    assert_eq!(
        (status, kind.as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, "idempotency_key_reused")
    );
    assert_eq!(field.as_deref(), Some("idempotency_key"));
    let (status, _, _, field) = error_of(post("x".repeat(256), "one").await.unwrap()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(field.as_deref(), Some("Idempotency-Key"));
    let ok = post("y".repeat(255), "three").await.unwrap();
    assert_eq!(ok.status(), StatusCode::CREATED, "255 characters is fine");
    let inputs: i64 = client
        .query_one(
            "SELECT count(*) FROM holdfast.inputs WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(inputs, 2);
}

#[tokio::test]
async fn agents_are_created_validated_read_listed_and_patched() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (_, key) = project_key(&client).await;
    let server = ApiServer::start(&db).await;

    let created = server
        .request(Method::POST, "/v1/agents", &key)
        .json(&json!({
            "model": {"provider": "openai", "name": "gpt-test", "max_tokens": 100},
            "system": "be brief",
            "tools": [{"type": "custom", "name": "lookup"}],
            "metadata": {"team": "a"}
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    let location = created.headers()["location"].to_str().unwrap().to_owned();
    let agent: Value = created.json().await.unwrap();
    let id = agent["id"].as_str().unwrap().to_owned();
    assert_eq!(location, format!("/v1/agents/{id}"));
    assert_eq!(agent["state"], "idle");
    assert_eq!(agent["config"]["system"], "be brief");

    // Invalid configs: 400 naming the field.
    for (config, field) in [
        (
            json!({"model": {"provider": "gemini", "name": "x"}}),
            "model.provider",
        ),
        (json!({"model": {"provider": "openai"}}), "model.name"),
        (
            json!({"model": {"provider": "openai", "name": "x"}, "tools": [{"type": "custom", "name": "t"}, {"type": "custom", "name": "t"}]}),
            "tools[1].name",
        ),
        (
            json!({"model": {"provider": "openai", "name": "x"}, "temperature": 1}),
            "temperature",
        ),
        (
            json!({"model": {"provider": "openai", "name": "x", "temprature": 1}}),
            "model.temprature",
        ),
        (json!({"model": "gpt"}), "model"),
    ] {
        let response = server
            .request(Method::POST, "/v1/agents", &key)
            .json(&config)
            .send()
            .await
            .unwrap();
        let (status, kind, message, named) = error_of(response).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{config}");
        assert_eq!(kind, "invalid_request");
        assert_eq!(named.as_deref(), Some(field), "{config}: {message}");
        assert!(
            message.contains(field.split('[').next().unwrap()),
            "{message}"
        );
    }

    let read: Value = server
        .request(Method::GET, &location, &key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(read, agent);

    // A merge patch: one field changes, the others stay; config.updated.
    let patched = server
        .request(Method::PATCH, &location, &key)
        .json(&json!({"model": {"name": "gpt-next"}, "metadata": null}))
        .send()
        .await
        .unwrap();
    assert_eq!(patched.status(), StatusCode::OK);
    let patched: Value = patched.json().await.unwrap();
    assert_eq!(
        patched["config"],
        json!({
            "model": {"provider": "openai", "name": "gpt-next", "max_tokens": 100},
            "system": "be brief",
            "tools": [{"type": "custom", "name": "lookup"}]
        })
    );
    let events: Value = server
        .request(Method::GET, &format!("{location}/events"), &key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(events["events"][0]["type"], "config.updated");
    assert_eq!(events["events"][0]["data"]["config"], patched["config"]);
    // The same patch again changes nothing and records nothing.
    server
        .request(Method::PATCH, &location, &key)
        .json(&json!({"model": {"name": "gpt-next"}}))
        .send()
        .await
        .unwrap();
    let seq: i64 = client
        .query_one(
            "SELECT last_event_seq FROM holdfast.agents WHERE id = $1::text::uuid",
            &[&id],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(seq, 1);
    // A patch that makes the config invalid is refused, and nothing changes.
    let (status, _, _, field) = error_of(
        server
            .request(Method::PATCH, &location, &key)
            .json(&json!({"model": {"provider": "nope"}}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, field.as_deref()),
        (StatusCode::BAD_REQUEST, Some("model.provider"))
    );

    // List, with a state filter and pages.
    let second: Value = server
        .request(Method::POST, "/v1/agents", &key)
        .json(&default_config())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    server
        .request(
            Method::POST,
            &format!("/v1/agents/{}/inputs", second["id"].as_str().unwrap()),
            &key,
        )
        .json(&json!({"content": "go"}))
        .send()
        .await
        .unwrap();
    let ids = |list: &Value| -> Vec<String> {
        list["agents"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let all: Value = server
        .request(Method::GET, "/v1/agents", &key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        ids(&all),
        vec![id.clone(), second["id"].as_str().unwrap().to_owned()]
    );
    let ready: Value = server
        .request(Method::GET, "/v1/agents?state=ready", &key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ids(&ready), vec![second["id"].as_str().unwrap().to_owned()]);
    let page: Value = server
        .request(Method::GET, "/v1/agents?limit=1", &key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (ids(&page), page["has_more"].clone()),
        (vec![id.clone()], json!(true))
    );
    let next: Value = server
        .request(Method::GET, &format!("/v1/agents?limit=1&after={id}"), &key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(next["has_more"], json!(false));
    assert_eq!(ids(&next), vec![second["id"].as_str().unwrap().to_owned()]);
}

#[tokio::test]
async fn archive_refuses_new_inputs_and_only_an_idle_agent_is_archived() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let idle = store::create_agent(&client, project, &default_config())
        .await
        .unwrap();
    let busy = store::create_agent(&client, project, &default_config())
        .await
        .unwrap();
    store::create_input(&client, busy, &json!("work"), None)
        .await
        .unwrap();
    let server = ApiServer::start(&db).await;

    let (status, kind, _, _) = error_of(
        server
            .request(Method::POST, &format!("/v1/agents/{busy}/archive"), &key)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, kind.as_str()), (StatusCode::CONFLICT, "conflict"));

    let archived = server
        .request(Method::POST, &format!("/v1/agents/{idle}/archive"), &key)
        .send()
        .await
        .unwrap();
    assert_eq!(archived.status(), StatusCode::OK);
    let archived: Value = archived.json().await.unwrap();
    assert_eq!(archived["state"], "archived");
    let input = server
        .request(Method::POST, &format!("/v1/agents/{idle}/inputs"), &key)
        .json(&json!({"content": "hello?"}))
        .send()
        .await
        .unwrap();
    let (status, _, _, _) = error_of(input).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let patch = server
        .request(Method::PATCH, &format!("/v1/agents/{idle}"), &key)
        .json(&json!({"system": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(patch.status(), StatusCode::CONFLICT);
    let inputs: i64 = client
        .query_one(
            "SELECT count(*) FROM holdfast.inputs WHERE agent_id = $1",
            &[&idle],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(inputs, 0);
    let events = event_types(&client, idle).await;
    assert_eq!(events, vec!["agent.archived"]);
}

#[tokio::test]
async fn the_event_log_pages_after_a_seq_with_a_capped_limit() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let agent = store::create_agent(&client, project, &default_config())
        .await
        .unwrap();
    // 1 input.received, 2 turn.started, then one input.received each.
    client
        .execute(
            "SELECT holdfast.create_input($1, to_jsonb('m' || g)) FROM generate_series(1, 1199) g",
            &[&agent],
        )
        .await
        .unwrap();
    let server = ApiServer::start(&db).await;
    let get = |query: String| {
        let request = server.request(
            Method::GET,
            &format!("/v1/agents/{agent}/events{query}"),
            &key,
        );
        async move {
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            response.json::<Value>().await.unwrap()
        }
    };
    let seqs = |page: &Value| -> Vec<i64> {
        page["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["seq"].as_i64().unwrap())
            .collect()
    };
    let first = get(String::new()).await;
    assert_eq!(
        seqs(&first),
        (1..=100).collect::<Vec<_>>(),
        "default limit 100"
    );
    assert_eq!(first["has_more"], json!(true));
    let event = &first["events"][0];
    for field in ["seq", "id", "agent_id", "type", "data", "created_at"] {
        assert!(event.get(field).is_some(), "event has {field}: {event}");
    }
    assert_eq!(event["type"], "input.received");
    let most = get("?after=10&limit=1000".into()).await;
    assert_eq!(seqs(&most), (11..=1010).collect::<Vec<_>>(), "at most 1000");
    let over = server
        .request(
            Method::GET,
            &format!("/v1/agents/{agent}/events?limit=1001"),
            &key,
        )
        .send()
        .await
        .unwrap();
    assert_eq!(over.status(), StatusCode::BAD_REQUEST);
    let body: Value = over.json().await.unwrap();
    assert_eq!(body["error"]["field"], "limit", "{body}");
    let last = get("?after=1195&limit=10".into()).await;
    assert_eq!(seqs(&last), (1196..=1200).collect::<Vec<_>>());
    assert_eq!(last["has_more"], json!(false));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_the_right_4xx_with_the_error_shape_and_write_nothing() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let agent = store::create_agent(&client, project, &default_config())
        .await
        .unwrap();
    let call = waiting_custom_call(&client, agent).await;
    let revoked = store::create_api_key(
        &client,
        &client
            .query_one(
                "SELECT name FROM holdfast.projects WHERE id = $1",
                &[&project],
            )
            .await
            .unwrap()
            .get::<_, String>(0),
    )
    .await
    .unwrap();
    store::revoke_api_key(&client, &revoked.prefix)
        .await
        .unwrap();
    let server = ApiServer::start(&db).await;
    let before = snapshot(&client, project).await;
    let inputs = format!("/v1/agents/{agent}/inputs");
    let result = format!("/v1/tool-calls/{call}/result");

    struct Case {
        name: &'static str,
        request: reqwest::RequestBuilder,
        status: StatusCode,
        kind: &'static str,
        field: Option<&'static str>,
    }
    let raw = |method: Method, path: &str, body: &'static str| {
        server
            .request(method, path, &key)
            .header("content-type", "application/json")
            .body(body)
    };
    let cases = vec![
        Case {
            name: "malformed JSON",
            request: raw(Method::POST, "/v1/agents", "{\"model\":"),
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_json",
            field: None,
        },
        Case {
            name: "trailing garbage",
            request: raw(Method::POST, &inputs, "{\"content\": \"a\"} x"),
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_json",
            field: None,
        },
        Case {
            name: "empty body",
            request: raw(Method::POST, &inputs, ""),
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_json",
            field: None,
        },
        Case {
            name: "content of the wrong type",
            request: raw(Method::POST, &inputs, "{\"content\": 5}"),
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request",
            field: Some("content"),
        },
        Case {
            name: "empty content",
            request: raw(Method::POST, &inputs, "{\"content\": []}"),
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request",
            field: Some("content"),
        },
        Case {
            name: "missing content",
            request: raw(Method::POST, &inputs, "{}"),
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request",
            field: None,
        },
        Case {
            name: "unknown input field",
            request: raw(
                Method::POST,
                &inputs,
                "{\"content\": \"a\", \"role\": \"system\"}",
            ),
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request",
            field: None,
        },
        Case {
            name: "is_error of the wrong type",
            request: raw(
                Method::POST,
                &result,
                "{\"output\": 1, \"is_error\": \"yes\"}",
            ),
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request",
            field: Some("is_error"),
        },
        Case {
            name: "missing output",
            request: raw(Method::POST, &result, "{\"is_error\": false}"),
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request",
            field: None,
        },
        Case {
            name: "a body of the wrong shape for an agent",
            request: raw(Method::POST, "/v1/agents", "[1, 2]"),
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request",
            field: Some("config"),
        },
        Case {
            name: "a thinking budget not below max_tokens",
            request: raw(
                Method::POST,
                "/v1/agents",
                r#"{"model": {"provider": "anthropic", "name": "m", "max_tokens": 2048,
                              "thinking": {"type": "enabled", "budget_tokens": 2048}}}"#,
            ),
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request",
            field: Some("model.thinking.budget_tokens"),
        },
        Case {
            name: "an OpenAI setting on an Anthropic model",
            request: raw(
                Method::POST,
                "/v1/agents",
                r#"{"model": {"provider": "anthropic", "name": "m", "seed": 7}}"#,
            ),
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request",
            field: Some("model.seed"),
        },
        Case {
            name: "not JSON",
            request: server
                .request(Method::POST, &inputs, &key)
                .header("content-type", "text/plain")
                .body("hello"),
            status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
            kind: "unsupported_media_type",
            field: None,
        },
        Case {
            name: "invalid UUID in a path",
            request: server.request(Method::GET, "/v1/agents/not-a-uuid", &key),
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_path",
            field: None,
        },
        Case {
            name: "invalid UUID in a tool call path",
            request: raw(Method::POST, "/v1/tool-calls/123/result", "{\"output\": 1}"),
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_path",
            field: None,
        },
        Case {
            name: "query of the wrong type",
            request: server.request(
                Method::GET,
                &format!("/v1/agents/{agent}/events?after=abc"),
                &key,
            ),
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_query",
            field: None,
        },
        Case {
            name: "negative after",
            request: server.request(
                Method::GET,
                &format!("/v1/agents/{agent}/events?after=-1"),
                &key,
            ),
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request",
            field: Some("after"),
        },
        Case {
            name: "limit 0",
            request: server.request(
                Method::GET,
                &format!("/v1/agents/{agent}/events?limit=0"),
                &key,
            ),
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request",
            field: Some("limit"),
        },
        Case {
            name: "unknown state filter",
            request: server.request(Method::GET, "/v1/agents?state=sleeping", &key),
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_query",
            field: None,
        },
        Case {
            name: "unknown tool call status filter",
            request: server.request(
                Method::GET,
                &format!("/v1/agents/{agent}/tool-calls?status=done"),
                &key,
            ),
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_query",
            field: None,
        },
        Case {
            name: "bad Last-Event-ID",
            request: server
                .request(Method::GET, &format!("/v1/agents/{agent}/stream"), &key)
                .header("Last-Event-ID", "five"),
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request",
            field: Some("Last-Event-ID"),
        },
        Case {
            name: "empty Idempotency-Key",
            request: raw(Method::POST, &inputs, "{\"content\": \"a\"}")
                .header("Idempotency-Key", ""),
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request",
            field: Some("Idempotency-Key"),
        },
        Case {
            name: "missing key",
            request: server.http.get(server.url(&format!("/v1/agents/{agent}"))),
            status: StatusCode::UNAUTHORIZED,
            kind: "unauthorized",
            field: None,
        },
        Case {
            name: "wrong scheme",
            request: server
                .http
                .get(server.url(&format!("/v1/agents/{agent}")))
                .basic_auth("user", Some(&key)),
            status: StatusCode::UNAUTHORIZED,
            kind: "unauthorized",
            field: None,
        },
        Case {
            name: "invalid key",
            request: server
                .request(Method::POST, &inputs, "hf_0000")
                .json(&json!({"content": "a"})),
            status: StatusCode::UNAUTHORIZED,
            kind: "unauthorized",
            field: None,
        },
        Case {
            name: "revoked key",
            request: server
                .request(Method::POST, &inputs, &revoked.key)
                .json(&json!({"content": "a"})),
            status: StatusCode::UNAUTHORIZED,
            kind: "unauthorized",
            field: None,
        },
        Case {
            name: "method not allowed",
            request: server.request(Method::DELETE, &format!("/v1/agents/{agent}"), &key),
            status: StatusCode::METHOD_NOT_ALLOWED,
            kind: "method_not_allowed",
            field: None,
        },
        Case {
            name: "no such route",
            request: server.request(Method::GET, "/v1/nothing", &key),
            status: StatusCode::NOT_FOUND,
            kind: "not_found",
            field: None,
        },
    ];
    for case in cases {
        let response = case.request.send().await.unwrap();
        if case.status == StatusCode::UNAUTHORIZED {
            assert_eq!(
                response
                    .headers()
                    .get("www-authenticate")
                    .map(|v| v.to_str().unwrap()),
                Some("Bearer"),
                "{}",
                case.name
            );
        }
        let (status, kind, message, field) = error_of(response).await;
        assert_eq!(status, case.status, "{}: {message}", case.name);
        assert_eq!(kind, case.kind, "{}: {message}", case.name);
        if case.field.is_some() {
            assert_eq!(field.as_deref(), case.field, "{}: {message}", case.name);
        }
        assert!(
            !message.to_lowercase().contains("sql") && !message.contains("holdfast."),
            "{}: no SQL in {message}",
            case.name
        );
    }

    // Oversized bodies, sent the way a careful client does: the headers
    // first, then no more than the server reads before it answers (writing
    // on after a 413 would race the server's close). The 1 MiB of every
    // route but the two that take images and documents (content.rs tests
    // their 48 MiB).
    let limit = 1024 * 1024;
    let head = |framing: &str| {
        format!(
            "POST /v1/agents HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {key}\r\n\
             Content-Type: application/json\r\nConnection: close\r\n{framing}\r\n"
        )
    };
    let by_length = raw_http(
        server.addr,
        head(&format!("Content-Length: {}\r\n", 2 * limit)).into_bytes(),
    )
    .await;
    let mut chunked = head("Transfer-Encoding: chunked\r\n").into_bytes();
    chunked.extend_from_slice(format!("{:x}\r\n", limit + 1).as_bytes());
    chunked.extend(std::iter::repeat_n(b' ', limit + 1));
    chunked.extend_from_slice(b"\r\n0\r\n\r\n");
    let by_chunks = raw_http(server.addr, chunked).await;
    for (status, body) in [by_length, by_chunks] {
        assert_eq!(status, 413, "{body}");
        assert_eq!(body["error"]["type"], "payload_too_large", "{body}");
    }

    assert_eq!(
        snapshot(&client, project).await,
        before,
        "nothing was written"
    );
}

#[tokio::test]
async fn a_stream_of_a_missing_agent_is_404_not_an_empty_stream() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let agent = store::create_agent(&client, project, &default_config())
        .await
        .unwrap();
    let server = ApiServer::start(&db).await;
    let missing = server
        .request(
            Method::GET,
            &format!("/v1/agents/{}/stream", Uuid::new_v4()),
            &key,
        )
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    // The agent exists but has no events yet: a stream, open and silent
    // until its first event.
    let mut stream = SseReader::new(
        server
            .request(Method::GET, &format!("/v1/agents/{agent}/stream"), &key)
            .send()
            .await
            .unwrap(),
    );
    store::create_input(&client, agent, &json!("first"), None)
        .await
        .unwrap();
    let first = stream.next_event(WAIT).await.expect("an event");
    assert_eq!(first.seq(), Some(1));
    assert_eq!(first.event.as_deref(), Some("input.received"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_past_the_timeout_is_503_and_its_retry_with_the_key_replays() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, key) = project_key(&client).await;
    let agent = store::create_agent(&client, project, &default_config())
        .await
        .unwrap();
    let server =
        ApiServer::start_with(&db, |c| c.request_timeout = Duration::from_millis(300)).await;
    // Hold the agent's row lock so the input cannot be written in time.
    let mut holder = db.connect().await;
    let tx = holder.transaction().await.unwrap();
    tx.execute("SELECT holdfast.lock_agent($1)", &[&agent])
        .await
        .unwrap();
    let post = || {
        server
            .request(Method::POST, &format!("/v1/agents/{agent}/inputs"), &key)
            .header("Idempotency-Key", "retry-me")
            .json(&json!({"content": "hello"}))
            .send()
    };
    let (status, kind, _, _) = error_of(post().await.unwrap()).await;
    assert_eq!(
        (status, kind.as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, "timeout")
    );
    tx.rollback().await.unwrap();
    // The timed-out call may still have been written once the lock was
    // free; a retry with the same key returns it instead of a second input.
    let retry = post().await.unwrap();
    assert_eq!(retry.status(), StatusCode::CREATED);
    let inputs: i64 = client
        .query_one(
            "SELECT count(*) FROM holdfast.inputs WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(inputs, 1);
}
