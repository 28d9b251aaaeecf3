//! What waits on people, and how turns went, over HTTP against a real
//! server and real Postgres: `GET /v1/inbox` across a project (an approval,
//! a question, a custom tool call and a queued command from four agents,
//! oldest first, filtered, paged, and each gone once answered), and
//! `last_turn` on agent views with the list filtered by outcome.

use std::time::Duration;

use holdfast_db::store;
use holdfast_db::store::NewModelPrice;
use holdfast_tests::api_server::{call, error_of, project_key, waiting_tool_call, ApiServer};
use holdfast_tests::{default_config, TestDb};
use holdfast_wire::domain::{Claim, ModelStep, ToolKind};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tokio_postgres::Client;
use uuid::Uuid;

/// An agent config with every kind of wait: `refund` needs approval,
/// `lookup` is the client's, `ask_user` asks a person, `run_command` runs
/// on `machine`.
fn waits_config(machine: Uuid, team: &str) -> Value {
    json!({
        "model": {"provider": "anthropic", "name": "claude-test"},
        "tools": [
            {"type": "custom", "name": "refund", "input_schema": {"type": "object"}},
            {"type": "custom", "name": "lookup", "input_schema": {"type": "object"}},
            {"type": "ask_user"},
            {"type": "run_command", "machine": machine}
        ],
        "approvals": {"require_for": ["refund"]},
        "metadata": {"team": team}
    })
}

async fn inbox(api: &ApiServer, key: &str, query: &str) -> Value {
    let (status, body) = call(api, Method::GET, &format!("/v1/inbox?{query}"), key, None).await;
    assert_eq!(status, StatusCode::OK, "{query}: {body}");
    body
}

fn kinds(page: &Value) -> Vec<&str> {
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["kind"].as_str().unwrap())
        .collect()
}

fn item<'a>(page: &'a Value, kind: &str) -> &'a Value {
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in {page}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_lists_every_wait_oldest_first_and_answering_each_removes_it() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let api = ApiServer::start(&db).await;
    let (project, key) = project_key(&client).await;
    let (status, machine) = call(
        &api,
        Method::POST,
        "/v1/machines",
        &key,
        Some(json!({"name": "build-box"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{machine}");
    let machine_id: Uuid = machine["id"].as_str().unwrap().parse().unwrap();
    let token = machine["token"].as_str().unwrap().to_owned();

    // Four agents, each waiting on something else, one after the other.
    let mut agents = Vec::new();
    let waits = [
        ("a", "refund", json!({"order": 7}), ToolKind::Custom),
        (
            "b",
            "ask_user",
            json!({"question": "Ship it?\nReally?"}),
            ToolKind::Question,
        ),
        ("a", "lookup", json!({"q": "invoice 9"}), ToolKind::Custom),
        (
            "b",
            "run_command",
            json!({"command": "make test"}),
            ToolKind::Command,
        ),
    ];
    for (team, name, input, kind) in waits {
        let agent = store::create_agent(&client, project, &waits_config(machine_id, team))
            .await
            .unwrap();
        waiting_tool_call(&client, agent, name, input, kind).await;
        agents.push(agent);
    }
    // Another project's wait is not this project's business.
    let (other_project, _) = project_key(&client).await;
    let other = store::create_agent(&client, other_project, &waits_config(machine_id, "a"))
        .await
        .unwrap();
    waiting_tool_call(
        &client,
        other,
        "ask_user",
        json!({"question": "not yours"}),
        ToolKind::Question,
    )
    .await;

    let all = inbox(&api, &key, "").await;
    assert_eq!(
        kinds(&all),
        ["approval", "question", "tool_call", "command"],
        "{all}"
    );
    assert_eq!(all["total"], 4);
    assert_eq!(all["has_more"], false);
    let item_agents: Vec<String> = all["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["agent_id"].as_str().unwrap().to_owned())
        .collect();
    let agent_ids: Vec<String> = agents.iter().map(Uuid::to_string).collect();
    assert_eq!(item_agents, agent_ids, "oldest first, one per agent");
    let summaries: Vec<&str> = all["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["summary"].as_str().unwrap())
        .collect();
    assert!(summaries[0].contains("refund") && summaries[0].contains("\"order\""));
    assert_eq!(summaries[1], "Ship it? Really?", "one line");
    assert!(summaries[2].contains("lookup") && summaries[2].contains("invoice 9"));
    assert_eq!(summaries[3], "Run make test on build-box");
    assert_eq!(item(&all, "command")["detail"]["machine_online"], false);
    assert_eq!(
        item(&all, "approval")["agent_metadata"],
        json!({"team": "a"})
    );
    for item in all["items"].as_array().unwrap() {
        assert!(item["age_seconds"].as_f64().unwrap() >= 0.0, "{item}");
    }

    // Filters: a kind, agent metadata; paging by cursor.
    let questions = inbox(&api, &key, "kind=question").await;
    assert_eq!(kinds(&questions), ["question"]);
    assert_eq!(questions["total"], 1);
    let team_a = inbox(&api, &key, "metadata=%7B%22team%22%3A%22a%22%7D").await;
    assert_eq!(kinds(&team_a), ["approval", "tool_call"]);
    assert_eq!(team_a["total"], 2);
    let first = inbox(&api, &key, "limit=3").await;
    assert_eq!(kinds(&first), ["approval", "question", "tool_call"]);
    assert_eq!(first["has_more"], true);
    assert_eq!(first["total"], 4);
    let cursor = first["next_cursor"].as_str().unwrap();
    let second = inbox(&api, &key, &format!("limit=3&cursor={cursor}")).await;
    assert_eq!(kinds(&second), ["command"]);
    assert_eq!(second["has_more"], false);

    // Bad parameters are 400s naming the parameter: in `field` for a
    // value of the right type that does not fit, in the message for one
    // the query string cannot hold (`invalid_query`, as on every route).
    for (query, field) in [
        ("metadata=%5B1%5D", "metadata"),
        ("cursor=nonsense", "cursor"),
        ("limit=0", "limit"),
    ] {
        let response = api
            .request(Method::GET, &format!("/v1/inbox?{query}"), &key)
            .send()
            .await
            .unwrap();
        let (status, _, message, named) = error_of(response).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {message}");
        assert_eq!(named.as_deref(), Some(field), "{query}: {message}");
    }
    let response = api
        .request(Method::GET, "/v1/inbox?kind=nope", &key)
        .send()
        .await
        .unwrap();
    let (status, kind, message, _) = error_of(response).await;
    assert_eq!(
        (status, kind.as_str()),
        (StatusCode::BAD_REQUEST, "invalid_query")
    );
    assert!(message.contains("kind"), "{message}");
    let anonymous = api.http.get(api.url("/v1/inbox")).send().await.unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);

    // Answering each, as a person or client would, removes it.
    let approval = item(&all, "approval")["id"].as_str().unwrap().to_owned();
    let (status, body) = call(
        &api,
        Method::POST,
        &format!("/v1/approvals/{approval}"),
        &key,
        Some(json!({"decision": "approve", "by": "ops"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // Approved, the custom `refund` call now waits for the client's result.
    let approved = inbox(&api, &key, "").await;
    assert_eq!(
        kinds(&approved),
        ["tool_call", "question", "tool_call", "command"]
    );
    let refund = &approved["items"][0];
    assert!(refund["summary"].as_str().unwrap().contains("refund"));
    let (status, body) = call(
        &api,
        Method::POST,
        &format!("/v1/tool-calls/{}/result", refund["id"].as_str().unwrap()),
        &key,
        Some(json!({"output": {"refunded": true}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        kinds(&inbox(&api, &key, "").await),
        ["question", "tool_call", "command"]
    );
    let question = item(&all, "question")["id"].as_str().unwrap().to_owned();
    let (status, body) = call(
        &api,
        Method::POST,
        &format!("/v1/questions/{question}/answer"),
        &key,
        Some(json!({"answer": "yes", "by": "ops"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let call_id = item(&all, "tool_call")["id"].as_str().unwrap().to_owned();
    let (status, body) = call(
        &api,
        Method::POST,
        &format!("/v1/tool-calls/{call_id}/result"),
        &key,
        Some(json!({"output": {"found": true}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(kinds(&inbox(&api, &key, "").await), ["command"]);
    // The machine's daemon comes online and accepts the command.
    let session = Uuid::new_v4();
    let (status, body) = call(
        &api,
        Method::POST,
        "/v1/machine/heartbeat",
        &token,
        Some(json!({"session": session, "started": true, "commands": []})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = call(
        &api,
        Method::POST,
        &format!("/v1/machine/commands/claim?session={session}&wait=0"),
        &token,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let empty = inbox(&api, &key, "").await;
    assert_eq!(empty["items"], json!([]));
    assert_eq!(empty["total"], 0);
}

/// Give `agent` an input and claim it: its turn is open.
async fn open_turn(client: &Client, agent: Uuid) -> (Claim, Vec<Uuid>) {
    let input = store::create_input(client, agent, &json!("go"), None)
        .await
        .unwrap();
    let claim = store::claim_agents(client, "test-worker", 10, Duration::from_secs(60))
        .await
        .unwrap()
        .into_iter()
        .find(|c| c.agent_id == agent)
        .expect("the agent is claimable");
    (claim, vec![input.input_id])
}

async fn agent_view(api: &ApiServer, key: &str, agent: Uuid) -> Value {
    let (status, body) = call(api, Method::GET, &format!("/v1/agents/{agent}"), key, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

async fn listed(api: &ApiServer, key: &str, query: &str) -> Vec<String> {
    let (status, body) = call(api, Method::GET, &format!("/v1/agents?{query}"), key, None).await;
    assert_eq!(status, StatusCode::OK, "{query}: {body}");
    body["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_turn_says_how_each_agents_latest_turn_went_and_the_list_filters_by_outcome() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let api = ApiServer::start(&db).await;
    let (project, key) = project_key(&client).await;
    store::set_model_price(
        &client,
        &NewModelPrice {
            provider: "anthropic",
            model: "claude-test",
            input_usd_per_mtok: 3.0,
            output_usd_per_mtok: 15.0,
            cache_read_usd_per_mtok: None,
            cache_write_usd_per_mtok: None,
        },
    )
    .await
    .unwrap();
    let config = json!({"model": {"provider": "anthropic", "name": "claude-test"}});
    let new_agent = || store::create_agent(&client, project, &config);

    let fresh = new_agent().await.unwrap();
    let completed = new_agent().await.unwrap();
    let (claim, inputs) = open_turn(&client, completed).await;
    store::commit_model_step(
        &client,
        claim,
        &ModelStep {
            input_ids: inputs,
            message: vec![json!({"type": "text", "text": "done"})],
            tool_calls: vec![],
            usage: json!({"input_tokens": 1000, "output_tokens": 500}),
            stop_reason: Some("end_turn".into()),
            config_version: None,
        },
    )
    .await
    .unwrap();
    let failed = new_agent().await.unwrap();
    let (claim, inputs) = open_turn(&client, failed).await;
    store::fail_turn(&client, claim, "authentication_error", "bad key", &inputs)
        .await
        .unwrap();
    let limited = new_agent().await.unwrap();
    let (claim, inputs) = open_turn(&client, limited).await;
    store::fail_turn(&client, claim, "limit_exceeded", "20 model steps", &inputs)
        .await
        .unwrap();

    assert_eq!(
        agent_view(&api, &key, fresh).await["last_turn"],
        Value::Null
    );
    let done = agent_view(&api, &key, completed).await["last_turn"].clone();
    assert_eq!(done["outcome"], "completed", "{done}");
    assert_eq!(done["turn"], 1);
    assert_eq!(done["error"], Value::Null);
    assert_eq!(done["usage"]["input_tokens"], 1000);
    assert_eq!(done["usage"]["output_tokens"], 500);
    let cost = done["usage"]["cost_usd"].as_f64().unwrap();
    assert!((cost - 0.0105).abs() < 1e-9, "{done}");
    let started: chrono::DateTime<chrono::Utc> =
        serde_json::from_value(done["started_at"].clone()).unwrap();
    let ended: chrono::DateTime<chrono::Utc> =
        serde_json::from_value(done["ended_at"].clone()).unwrap();
    assert!(started <= ended, "{done}");
    let fail = agent_view(&api, &key, failed).await["last_turn"].clone();
    assert_eq!(fail["outcome"], "failed", "{fail}");
    assert_eq!(
        fail["error"],
        json!({"type": "authentication_error", "message": "bad key"})
    );
    assert!(fail["ended_at"].is_string());
    let limit = agent_view(&api, &key, limited).await["last_turn"].clone();
    assert_eq!(limit["outcome"], "limit", "{limit}");
    assert_eq!(limit["error"]["type"], "limit_exceeded");

    // The list carries it, and filters by it in both orders.
    assert_eq!(
        listed(&api, &key, "outcome=failed").await,
        [failed.to_string()]
    );
    assert_eq!(
        listed(&api, &key, "order=activity&outcome=limit").await,
        [limited.to_string()]
    );
    assert_eq!(
        listed(&api, &key, "outcome=completed").await,
        [completed.to_string()]
    );
    let response = api
        .request(Method::GET, "/v1/agents?outcome=exploded", &key)
        .send()
        .await
        .unwrap();
    let (status, kind, message, _) = error_of(response).await;
    assert_eq!(
        (status, kind.as_str()),
        (StatusCode::BAD_REQUEST, "invalid_query")
    );
    assert!(message.contains("outcome"), "{message}");

    // A new turn on the failed agent is open: no outcome, no error, and
    // the agent is no longer listed as failed.
    open_turn(&client, failed).await;
    let reopened = agent_view(&api, &key, failed).await["last_turn"].clone();
    assert_eq!(reopened["turn"], 2, "{reopened}");
    assert_eq!(reopened["outcome"], Value::Null);
    assert_eq!(reopened["error"], Value::Null);
    assert_eq!(reopened["ended_at"], Value::Null);
    assert!(listed(&api, &key, "outcome=failed").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn project_usage_sums_each_days_model_calls_by_model_with_cost() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let api = ApiServer::start(&db).await;
    let (project, key) = project_key(&client).await;
    let (other_project, _) = project_key(&client).await;
    store::set_model_price(
        &client,
        &NewModelPrice {
            provider: "anthropic",
            model: "claude-test",
            input_usd_per_mtok: 3.0,
            output_usd_per_mtok: 15.0,
            cache_read_usd_per_mtok: None,
            cache_write_usd_per_mtok: None,
        },
    )
    .await
    .unwrap();
    let priced = json!({"model": {"provider": "anthropic", "name": "claude-test"}});
    let unpriced = json!({"model": {"provider": "anthropic", "name": "claude-free"}});
    for (owner, config) in [
        (project, &priced),
        (project, &priced),
        (project, &unpriced),
        (other_project, &priced),
    ] {
        let agent = store::create_agent(&client, owner, config).await.unwrap();
        let (claim, inputs) = open_turn(&client, agent).await;
        store::commit_model_step(
            &client,
            claim,
            &ModelStep {
                input_ids: inputs,
                message: vec![json!({"type": "text", "text": "done"})],
                tool_calls: vec![],
                usage: json!({"input_tokens": 1000, "output_tokens": 500}),
                stop_reason: Some("end_turn".into()),
                config_version: None,
            },
        )
        .await
        .unwrap();
    }

    let (status, usage) = call(&api, Method::GET, "/v1/usage?days=7", &key, None).await;
    assert_eq!(status, StatusCode::OK, "{usage}");
    let today = chrono::Utc::now().date_naive();
    assert_eq!(
        usage["since"],
        json!((today - chrono::Days::new(6)).to_string())
    );
    let days = usage["days"].as_array().unwrap();
    assert_eq!(days.len(), 2, "{usage}");
    let models: Vec<&str> = days.iter().map(|d| d["model"].as_str().unwrap()).collect();
    assert_eq!(models, ["claude-free", "claude-test"]);
    let test_day = &days[1];
    assert_eq!(test_day["day"], json!(today.to_string()));
    assert_eq!(test_day["model_steps"], 2, "not the other project's");
    assert_eq!(test_day["usage"]["input_tokens"], 2000);
    let cost = test_day["usage"]["cost_usd"].as_f64().unwrap();
    assert!((cost - 0.021).abs() < 1e-9, "{test_day}");
    assert_eq!(
        days[0]["usage"]["cost_usd"],
        Value::Null,
        "an unpriced model"
    );
    assert_eq!(usage["usage"]["input_tokens"], 3000);
    assert!((usage["usage"]["cost_usd"].as_f64().unwrap() - 0.021).abs() < 1e-9);

    for query in ["days=0", "days=367"] {
        let response = api
            .request(Method::GET, &format!("/v1/usage?{query}"), &key)
            .send()
            .await
            .unwrap();
        let (status, _, message, field) = error_of(response).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {message}");
        assert_eq!(field.as_deref(), Some("days"), "{query}");
    }
}

/// Heap and index tuples read so far in this transaction from `tables`
/// (`pg_stat_xact_user_tables` and, for the tables' indexes,
/// `pg_stat_get_xact_tuples_returned`: the transaction's own reads).
async fn tuples_read(
    client: &impl tokio_postgres::GenericClient,
    tables: &[&str],
) -> Vec<(String, i64)> {
    let tables: Vec<String> = tables.iter().map(|t| (*t).to_owned()).collect();
    client
        .query(
            "SELECT t.relname::text, \
                    coalesce(t.seq_tup_read, 0) + coalesce(t.idx_tup_fetch, 0) \
                    + coalesce((SELECT sum(pg_stat_get_xact_tuples_returned(i.indexrelid)) \
                                  FROM pg_index i WHERE i.indrelid = t.relid), 0)::bigint \
               FROM pg_stat_xact_user_tables t \
              WHERE t.schemaname = 'holdfast' AND t.relname = ANY($1) \
              ORDER BY 1",
            &[&tables],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_reads_the_callers_projects_waiting_rows_and_no_other_projects() {
    let db = TestDb::new().await;
    let mut client = db.connect().await;
    // A busy project: 2,000 agents waiting on something.
    let (busy, _) = project_key(&client).await;
    let busy_machine = store::register_machine(&client, busy, "busy-box", None)
        .await
        .unwrap()
        .machine_id;
    let waits = [
        ("refund", json!({"order": 1}), ToolKind::Custom),
        ("ask_user", json!({"question": "ok?"}), ToolKind::Question),
        ("lookup", json!({"q": "x"}), ToolKind::Custom),
        ("run_command", json!({"command": "true"}), ToolKind::Command),
    ];
    for i in 0..2000 {
        let agent = store::create_agent(&client, busy, &waits_config(busy_machine, "busy"))
            .await
            .unwrap();
        let (name, input, kind) = waits[i % waits.len()].clone();
        waiting_tool_call(&client, agent, name, input, kind).await;
    }
    // Fifty quiet projects, as a server holds many.
    for _ in 0..50 {
        let (quiet, _) = project_key(&client).await;
        store::create_agent(&client, quiet, &default_config())
            .await
            .unwrap();
    }
    // The caller's project: one agent waiting on a question.
    let (project, _) = project_key(&client).await;
    let machine = store::register_machine(&client, project, "box", None)
        .await
        .unwrap()
        .machine_id;
    let agent = store::create_agent(&client, project, &waits_config(machine, "mine"))
        .await
        .unwrap();
    waiting_tool_call(
        &client,
        agent,
        "ask_user",
        json!({"question": "mine?"}),
        ToolKind::Question,
    )
    .await;
    client.batch_execute("ANALYZE").await.unwrap();

    let tables = ["agents", "approvals", "commands", "questions", "tool_calls"];
    let transaction = client.transaction().await.unwrap();
    let before = tuples_read(&transaction, &tables).await;
    let inbox: Value = transaction
        .query_one(
            "SELECT holdfast.inbox($1, NULL, NULL, NULL, NULL, 101)",
            &[&project],
        )
        .await
        .unwrap()
        .get(0);
    let after = tuples_read(&transaction, &tables).await;
    transaction.rollback().await.unwrap();
    assert_eq!(inbox["total"], 1, "{inbox}");
    assert_eq!(kinds(&inbox), ["question"]);
    // The caller's agent, its question and its tool call, each read a
    // few times at most (an updated row's old versions count too); the
    // busy project's 2,000 waits and agents would show here by the
    // hundred.
    let read: Vec<(&str, i64)> = before
        .iter()
        .zip(&after)
        .map(|((table, was), (_, now))| (table.as_str(), now - was))
        .collect();
    for (table, tuples) in &read {
        assert!(
            *tuples <= 10,
            "holdfast.inbox read {tuples} tuples of {table} for a project with one wait: {read:?}"
        );
    }
}
