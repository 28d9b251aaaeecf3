//! The console's server side against a real server and real Postgres: the
//! page and its files with their security headers, the project route, the
//! activity-ordered agent list (search, state filter, keyset paging) and
//! its plan over 100,000 agents, and the operations overview.

use chrono::{DateTime, Utc};
use holdfast_db::store;
use holdfast_db::store::console::AGENTS_BY_ACTIVITY_SQL;
use holdfast_tests::api_server::{project_key, ApiServer};
use holdfast_tests::{default_config, TestDb};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use uuid::Uuid;

const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_and_its_files_are_served_with_a_strict_policy() {
    let db = TestDb::new().await;
    let api = ApiServer::start(&db).await;
    for (path, content_type) in [
        ("/", "text/html"),
        ("/console/app.js", "text/javascript"),
        ("/console/render.js", "text/javascript"),
        ("/console/sse.js", "text/javascript"),
        ("/console/style.css", "text/css"),
    ] {
        let response = api.http.get(api.url(path)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        assert!(header("content-type").starts_with(content_type), "{path}");
        assert_eq!(header("content-security-policy"), CSP, "{path}");
        assert_eq!(header("x-content-type-options"), "nosniff", "{path}");
        assert_eq!(header("referrer-policy"), "no-referrer", "{path}");
        assert_eq!(header("x-frame-options"), "DENY", "{path}");
        assert_eq!(
            header("cross-origin-opener-policy"),
            "same-origin",
            "{path}"
        );
        assert_eq!(header("access-control-allow-origin"), "", "{path}: no CORS");
        let body = response.text().await.unwrap();
        // No inline script and no third-party origin in anything served.
        assert!(!body.contains("innerHTML"), "{path} uses innerHTML");
        assert!(!body.contains("https://"), "{path} names another origin");
    }
    let index = api
        .http
        .get(api.url("/"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!index.contains("<script>"), "inline script in the page");
    // No CORS on the API either: another origin's preflight is not allowed.
    let preflight = api
        .http
        .request(reqwest::Method::OPTIONS, api.url("/v1/agents"))
        .header("origin", "https://evil.example")
        .header("access-control-request-method", "GET")
        .header("access-control-request-headers", "authorization")
        .send()
        .await
        .unwrap();
    assert!(!preflight
        .headers()
        .contains_key("access-control-allow-origin"));
    let missing = api
        .http
        .get(api.url("/console/nope.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_project_route_names_the_keys_project_and_counts_its_agents() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let api = ApiServer::start(&db).await;
    let (project, key) = project_key(&client).await;
    let (other, _) = project_key(&client).await;
    store::create_agent(&client, project, &default_config())
        .await
        .unwrap();
    store::create_agent(&client, other, &default_config())
        .await
        .unwrap();
    let name: String = client
        .query_one(
            "SELECT name FROM holdfast.projects WHERE id = $1",
            &[&project],
        )
        .await
        .unwrap()
        .get(0);
    let body: Value = api
        .request(Method::GET, "/v1/project", &key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["name"], name.as_str());
    assert_eq!(
        body["agents_by_state"],
        json!({"idle": 1, "ready": 0, "running": 0, "waiting": 0, "archived": 0})
    );
    let anonymous = api.http.get(api.url("/v1/project")).send().await.unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
}

async fn page(api: &ApiServer, key: &str, query: &str) -> Value {
    let response = api
        .request(
            Method::GET,
            &format!("/v1/agents?order=activity&{query}"),
            key,
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK, "{query}");
    response.json().await.unwrap()
}

fn ids(page: &Value) -> Vec<String> {
    page["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_activity_list_pages_newest_first_and_filters_and_searches() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let api = ApiServer::start(&db).await;
    let (project, key) = project_key(&client).await;
    let mut created = Vec::new();
    for n in 0..25 {
        let config = json!({"model": {"provider": "anthropic", "name": "m"},
                            "metadata": {"n": n, "team": if n % 5 == 0 { "Blue" } else { "red" }}});
        created.push(
            store::create_agent(&client, project, &config)
                .await
                .unwrap(),
        );
    }
    // The oldest agent gets an event: it becomes the most recently active.
    store::create_input(&client, created[0], &json!("hello"), None)
        .await
        .unwrap();

    let mut seen = Vec::new();
    let mut query = "limit=10".to_owned();
    loop {
        let body = page(&api, &key, &query).await;
        seen.extend(ids(&body));
        if !body["has_more"].as_bool().unwrap() {
            assert!(body.get("next_cursor").is_none());
            break;
        }
        query = format!("limit=10&cursor={}", body["next_cursor"].as_str().unwrap());
    }
    let mut expected: Vec<String> = created[1..].iter().rev().map(Uuid::to_string).collect();
    expected.insert(0, created[0].to_string());
    assert_eq!(seen, expected, "newest activity first, every agent once");

    // Each agent carries the time it is ordered by: the latest event's,
    // else its creation; the default order has no such time.
    let first = page(&api, &key, "limit=2").await;
    let activity = |agent: &Value| -> DateTime<Utc> {
        serde_json::from_value(agent["activity_at"].clone()).unwrap()
    };
    let (event_at, second_created): (DateTime<Utc>, DateTime<Utc>) = client
        .query_one(
            "SELECT (SELECT last_event_at FROM holdfast.agents WHERE id = $1), \
                    (SELECT created_at FROM holdfast.agents WHERE id = $2)",
            &[&created[0], &created[24]],
        )
        .await
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!(activity(&first["agents"][0]), event_at);
    assert_eq!(activity(&first["agents"][1]), second_created);
    let by_created: Value = api
        .request(Method::GET, "/v1/agents?limit=1", &key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(by_created["agents"][0].get("activity_at").is_none());

    let ready = page(&api, &key, "state=ready").await;
    assert_eq!(ids(&ready), vec![created[0].to_string()]);
    let by_id = page(&api, &key, &format!("q={}", created[7])).await;
    assert_eq!(ids(&by_id), vec![created[7].to_string()]);
    let by_value = page(&api, &key, "q=n%3D7").await;
    assert_eq!(ids(&by_value), vec![created[7].to_string()]);
    let by_text = page(&api, &key, "q=blue").await;
    assert_eq!(ids(&by_text).len(), 5, "case-insensitive text search");
    // A part of an id (its last 12 characters, in capitals) finds it.
    let tail = created[7].to_string()[24..].to_uppercase();
    let by_part = page(&api, &key, &format!("q={tail}")).await;
    assert_eq!(ids(&by_part), [created[7].to_string()], "partial id search");

    let bad = api
        .request(
            Method::GET,
            "/v1/agents?order=activity&cursor=nonsense",
            &key,
        )
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    let body: Value = bad.json().await.unwrap();
    assert_eq!(body["error"]["field"], "cursor");
    let bad = api
        .request(Method::GET, "/v1/agents?q=x", &key)
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deep_activity_page_over_100000_agents_is_an_index_scan() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, _) = project_key(&client).await;
    client
        .execute(
            "INSERT INTO holdfast.agents (project_id, config, created_at)
             SELECT $1, '{\"model\": {\"provider\": \"anthropic\", \"name\": \"m\"}}',
                    now() - g * interval '1 second'
               FROM generate_series(1, 100000) g",
            &[&project],
        )
        .await
        .unwrap();
    client
        .batch_execute("ANALYZE holdfast.agents")
        .await
        .unwrap();
    let (activity, id): (chrono::DateTime<chrono::Utc>, Uuid) = client
        .query_one(
            "SELECT created_at, id FROM holdfast.agents ORDER BY created_at LIMIT 1 OFFSET 50000",
            &[],
        )
        .await
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    for state in [None, Some("idle")] {
        let plan: Vec<String> = client
            .query(
                &format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT TEXT) {AGENTS_BY_ACTIVITY_SQL}"),
                &[
                    &project,
                    &state,
                    &Some(activity),
                    &Some(id),
                    &None::<Uuid>,
                    &None::<Value>,
                    &None::<String>,
                    &51i64,
                    &None::<String>,
                ],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        let plan = plan.join("\n");
        assert!(
            plan.contains("Index Scan using agents_project"),
            "state {state:?}:\n{plan}"
        );
        assert!(!plan.contains("Sort"), "state {state:?}:\n{plan}");
        // One page of rows read, not the 50,000 above the cursor.
        let rows_removed = plan.contains("Rows Removed by Filter");
        assert!(!rows_removed, "state {state:?}:\n{plan}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_shows_only_the_callers_project() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let api = ApiServer::start(&db).await;
    let (project, key) = project_key(&client).await;
    let (other, _) = project_key(&client).await;
    let mine = store::create_agent(&client, project, &default_config())
        .await
        .unwrap();
    let theirs = store::create_agent(&client, other, &default_config())
        .await
        .unwrap();
    for agent in [mine, theirs] {
        store::create_input(&client, agent, &json!("go"), None)
            .await
            .unwrap();
    }
    store::claim_agents(&client, "worker-a", 10, std::time::Duration::from_secs(60))
        .await
        .unwrap();
    let body: Value = api
        .request(Method::GET, "/v1/operations", &key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["agents_by_state"]["running"], 1);
    let workers = body["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 1);
    assert_eq!(workers[0]["worker"], "worker-a");
    assert_eq!(workers[0]["agents_held"], 1);
    assert_eq!(workers[0]["agents"], json!([mine]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_activity_list_masks_secrets_in_config() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let api = ApiServer::start(&db).await;
    let (project, key) = project_key(&client).await;
    let config = json!({
        "model": {"provider": "anthropic", "name": "m"},
        "tools": [{"type": "mcp", "name": "calc", "url": "https://mcp.example/mcp",
                   "headers": {"Authorization": "Bearer mcp-secret-42"}}]
    });
    client
        .execute(
            "INSERT INTO holdfast.agents (project_id, config) VALUES ($1, $2)",
            &[&project, &config],
        )
        .await
        .unwrap();
    let list: Value = api
        .request(Method::GET, "/v1/agents?order=activity", &key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        list["agents"][0]["config"]["tools"][0]["headers"]["Authorization"], "***",
        "{list}"
    );
    assert!(!list.to_string().contains("mcp-secret-42"));
}

/// `agent`'s turn: `input`, then a saved answer `answer`.
async fn answered(client: &tokio_postgres::Client, agent: Uuid, input: &str, answer: &str) {
    let created = store::create_input(client, agent, &json!(input), None)
        .await
        .unwrap();
    let claim = store::claim_agents(
        client,
        "test-worker",
        10,
        std::time::Duration::from_secs(60),
    )
    .await
    .unwrap()
    .into_iter()
    .find(|c| c.agent_id == agent)
    .expect("the agent is claimable");
    store::commit_model_step(
        client,
        claim,
        &holdfast_wire::domain::ModelStep {
            input_ids: vec![created.input_id],
            message: vec![json!({"type": "text", "text": answer})],
            tool_calls: vec![],
            usage: json!({"input_tokens": 1, "output_tokens": 1}),
            stop_reason: Some("end_turn".into()),
            config_version: None,
        },
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_finds_agents_by_the_words_of_their_inputs_and_answers_in_the_callers_project_only()
{
    let db = TestDb::new().await;
    let client = db.connect().await;
    let api = ApiServer::start(&db).await;
    let (project, key) = project_key(&client).await;
    let (other, _) = project_key(&client).await;
    let mut config = default_config();
    config["metadata"] = json!({"team": "billing"});
    let answers = store::create_agent(&client, project, &config)
        .await
        .unwrap();
    answered(
        &client,
        answers,
        "what is the balance?",
        "The **reconciliation** of the ledger is done.",
    )
    .await;
    let asks = store::create_agent(&client, project, &config)
        .await
        .unwrap();
    // An input no model call has taken yet is found too.
    store::create_input(
        &client,
        asks,
        &json!([{"type": "text", "text": "Please check the Quarterly numbers"}]),
        None,
    )
    .await
    .unwrap();
    let quiet = store::create_agent(&client, project, &config)
        .await
        .unwrap();
    answered(&client, quiet, "hello", "hi there").await;
    // Another project's agent says the same word: not the caller's.
    let theirs = store::create_agent(&client, other, &config).await.unwrap();
    answered(&client, theirs, "go", "reconciliation elsewhere").await;

    // A word only in an answer (case and markdown aside) finds its agent.
    let found = page(&api, &key, "q=Reconciliation").await;
    assert_eq!(ids(&found), [answers.to_string()], "{found}");
    // A word of a pending input's text block.
    let found = page(&api, &key, "q=quarterly").await;
    assert_eq!(ids(&found), [asks.to_string()], "{found}");
    // Words combine (all must be in one input or message); a quoted phrase.
    let found = page(&api, &key, "q=ledger%20reconciliation").await;
    assert_eq!(ids(&found), [answers.to_string()], "{found}");
    let found = page(&api, &key, "q=%22ledger%20reconciliation%22").await;
    assert_eq!(ids(&found), Vec::<String>::new(), "{found}");
    let found = page(&api, &key, "q=nowhere").await;
    assert_eq!(ids(&found), Vec::<String>::new(), "{found}");
    // The other filters still narrow a conversation search.
    let found = page(&api, &key, "q=reconciliation&state=archived").await;
    assert_eq!(ids(&found), Vec::<String>::new(), "{found}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_search_over_4000_agents_reads_the_text_indexes() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (project, _) = project_key(&client).await;
    let (other, _) = project_key(&client).await;
    // 2,000 agents in each of two projects, each with an input and an
    // answer of a few sentences; one answer in the caller's project names
    // a rare word.
    client
        .batch_execute(&format!(
            "INSERT INTO holdfast.agents (project_id, config)
             SELECT p, '{{\"model\": {{\"provider\": \"anthropic\", \"name\": \"m\"}}}}'
               FROM unnest(ARRAY['{project}'::uuid, '{other}'::uuid]) p, generate_series(1, 2000);
             INSERT INTO holdfast.inputs (project_id, agent_id, content)
             SELECT project_id, id, to_jsonb('Please look at invoice ' || id || ' and the ledger for the quarter')
               FROM holdfast.agents;
             INSERT INTO holdfast.messages (agent_id, seq, role, content)
             SELECT id, 1, 'assistant',
                    jsonb_build_array(jsonb_build_object('type', 'text', 'text',
                        'The invoice ' || id || ' matches the ledger. Totals were checked twice '
                        || 'against the bank statement and the quarterly report.'))
               FROM holdfast.agents;
             UPDATE holdfast.messages SET content = '[{{\"type\": \"text\", \"text\": \"a zanzibar answer\"}}]'
              WHERE agent_id = (SELECT id FROM holdfast.agents WHERE project_id = '{project}' LIMIT 1);
             ANALYZE holdfast.agents, holdfast.inputs, holdfast.messages;"
        ))
        .await
        .unwrap();
    let plan: Vec<String> = client
        .query(
            &format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT TEXT) {AGENTS_BY_ACTIVITY_SQL}"),
            &[
                &project,
                &None::<String>,
                &None::<DateTime<Utc>>,
                &None::<Uuid>,
                &None::<Uuid>,
                &None::<Value>,
                &Some("zanzibar"),
                &51i64,
                &None::<String>,
            ],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let plan = plan.join("\n");
    assert!(plan.contains("messages_search_idx"), "{plan}");
    assert!(plan.contains("inputs_search_idx"), "{plan}");
    let found = store::console::agents_by_activity(
        &client,
        project,
        &store::console::AgentFilter {
            text: Some("zanzibar".into()),
            ..Default::default()
        },
        None,
        51,
    )
    .await
    .unwrap();
    assert_eq!(found.len(), 1);
    // The figure in docs/internals/benchmarks.md.
    let took = plan
        .lines()
        .find(|l| l.starts_with("Execution Time"))
        .unwrap_or_default();
    eprintln!("conversation search over 4,000 agents: {took}");
}
