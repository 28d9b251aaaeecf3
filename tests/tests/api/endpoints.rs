//! Operator-owned model endpoints, custom URLs, projects' own provider keys
//! and masked secrets, over the real API (HTTP on a socket) with a real
//! `holdfast worker` process whose environment holds operator keys. A second
//! fake model server plays the tenant's own server and records every
//! request's headers.

use std::time::Duration;

use holdfast_db::store;
use holdfast_fakes::FakeProvider;
use holdfast_providers::secrets::SecretKey;
use holdfast_tests::api_server::{call, ApiServer};
use holdfast_tests::mcp_server::McpTestServer;
use holdfast_tests::process::holdfast_bin;
use holdfast_tests::scenario::{spawn_worker, wait_for_event};
use holdfast_tests::TestDb;
use holdfast_wire::domain::NewModelEndpoint;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(30);
const OPERATOR_ANTHROPIC_KEY: &str = "sk-operator-anthropic-secret";
const OPERATOR_OPENAI_KEY: &str = "sk-operator-openai-secret";
const SECRET_KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";

/// The API (with the operator's secret key), a fresh project and its key.
struct Setup {
    db: TestDb,
    api: ApiServer,
    project: Uuid,
    project_name: String,
    key: String,
}

impl Setup {
    async fn new() -> Setup {
        let db = TestDb::new().await;
        let api = ApiServer::start_with(&db, |config| {
            config.secret_key = Some(SecretKey::parse(SECRET_KEY).unwrap());
            // The MCP test servers listen on loopback.
            config.egress = std::sync::Arc::new(
                holdfast_providers::egress::EgressPolicy::parse("mcp=127.0.0.1").unwrap(),
            );
        })
        .await;
        let (project, project_name, key) = new_project(&db).await;
        Setup {
            db,
            api,
            project,
            project_name,
            key,
        }
    }

    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        call(&self.api, method, path, &self.key, body).await
    }
}

async fn new_project(db: &TestDb) -> (Uuid, String, String) {
    let name = format!("p{}", Uuid::new_v4().simple());
    let created = store::create_api_key(&db.connect().await, &name)
        .await
        .unwrap();
    (created.project_id, name, created.key)
}

/// A worker on `operator` (the `default` endpoint of both providers) with
/// the operator's keys and secret key in its environment, plus `extra`.
fn worker(
    setup: &Setup,
    operator: &FakeProvider,
    extra: &[(&str, &str)],
) -> holdfast_tests::process::HoldfastProcess {
    let mut env = vec![
        ("ANTHROPIC_API_KEY", OPERATOR_ANTHROPIC_KEY),
        ("OPENAI_API_KEY", OPERATOR_OPENAI_KEY),
        ("HOLDFAST_SECRET_KEY", SECRET_KEY),
        // The capture and MCP servers listen on loopback.
        ("HOLDFAST_EGRESS_ALLOW", "model=127.0.0.1,mcp=127.0.0.1"),
    ];
    env.extend_from_slice(extra);
    spawn_worker(
        &format!("w-{}", Uuid::new_v4().simple()),
        &setup.db.config,
        operator,
        &env,
    )
}

fn assert_refused(status: StatusCode, body: &Value, field: &str) {
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["type"], "model_not_permitted", "{body}");
    assert_eq!(body["error"]["field"], field, "{body}");
}

async fn send_and_finish(setup: &Setup, agent: &str, text: &str) {
    let client = setup.db.connect().await;
    let agent_id: Uuid = agent.parse().unwrap();
    // This turn's turn.completed, not an earlier turn's.
    let completed = || async {
        let count: i64 = client
            .query_one(
                "SELECT count(*) FROM holdfast.events WHERE agent_id = $1 AND type = 'turn.completed'",
                &[&agent_id],
            )
            .await
            .unwrap()
            .get(0);
        count
    };
    let before = completed().await;
    let (status, body) = setup
        .call(
            Method::POST,
            &format!("/v1/agents/{agent}/inputs"),
            Some(json!({"content": text})),
        )
        .await;
    assert!(status.is_success(), "{body}");
    holdfast_tests::wait_until(WAIT, "this turn's turn.completed", || async {
        completed().await > before
    })
    .await;
}

/// Every credential-like header a request carried.
fn credentials(fake: &FakeProvider) -> Vec<String> {
    fake.requests()
        .iter()
        .flat_map(|r| {
            [r.header("x-api-key"), r.header("authorization")]
                .into_iter()
                .flatten()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[tokio::test]
async fn a_custom_base_url_is_refused_unless_allowed_and_never_gets_an_operator_key() {
    let setup = Setup::new().await;
    let operator = FakeProvider::start().await;
    let tenant = FakeProvider::start().await;
    let _worker = worker(&setup, &operator, &[]);
    let urls = [
        ("anthropic", tenant.base_url_anthropic()),
        ("openai", tenant.base_url_openai()),
    ];

    // Not allowed: refused at create and by PATCH, naming model.base_url.
    for (provider, url) in &urls {
        let (status, body) = setup
            .call(
                Method::POST,
                "/v1/agents",
                Some(json!({"model": {"provider": provider, "name": "m", "base_url": url}})),
            )
            .await;
        assert_refused(status, &body, "model.base_url");
        let (status, agent) = setup
            .call(
                Method::POST,
                "/v1/agents",
                Some(json!({"model": {"provider": provider, "name": "m"}})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{agent}");
        let path = format!("/v1/agents/{}", agent["id"].as_str().unwrap());
        let (status, body) = setup
            .call(
                Method::PATCH,
                &path,
                Some(json!({"model": {"base_url": url}})),
            )
            .await;
        assert_refused(status, &body, "model.base_url");
        let (_, unchanged) = setup.call(Method::GET, &path, None).await;
        assert!(unchanged["config"]["model"].get("base_url").is_none());
    }

    // Allowed for the project: both ways reach the tenant's server, which
    // never sees an operator key (the worker has both in its environment).
    store::set_project_custom_model_urls(&setup.db.connect().await, &setup.project_name, true)
        .await
        .unwrap();
    for (provider, url) in &urls {
        let (status, created) = setup
            .call(
                Method::POST,
                "/v1/agents",
                Some(json!({"model": {"provider": provider, "name": "m", "base_url": url}})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{created}");
        send_and_finish(&setup, created["id"].as_str().unwrap(), "hello").await;

        let (_, agent) = setup
            .call(
                Method::POST,
                "/v1/agents",
                Some(json!({"model": {"provider": provider, "name": "m"}})),
            )
            .await;
        let id = agent["id"].as_str().unwrap();
        let (status, patched) = setup
            .call(
                Method::PATCH,
                &format!("/v1/agents/{id}"),
                Some(json!({"model": {"base_url": url}})),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{patched}");
        send_and_finish(&setup, id, "hello").await;
    }
    assert_eq!(tenant.request_count(), 4);
    assert_eq!(
        credentials(&tenant),
        Vec::<String>::new(),
        "no credential at all: the project has no key of its own"
    );
    assert_eq!(operator.request_count(), 0);

    // Withdrawn: the next model call is refused, nothing is sent.
    store::set_project_custom_model_urls(&setup.db.connect().await, &setup.project_name, false)
        .await
        .unwrap();
    let agent: Uuid = setup
        .db
        .connect()
        .await
        .query_one(
            "SELECT id FROM holdfast.agents \
              WHERE project_id = $1 AND config #> '{model,base_url}' IS NOT NULL \
              ORDER BY id LIMIT 1",
            &[&setup.project],
        )
        .await
        .unwrap()
        .get(0);
    let (status, _) = setup
        .call(
            Method::POST,
            &format!("/v1/agents/{agent}/inputs"),
            Some(json!({"content": "again"})),
        )
        .await;
    assert!(status.is_success());
    let client = setup.db.connect().await;
    wait_for_event(&client, agent, "turn.failed", WAIT).await;
    assert_eq!(tenant.request_count(), 4);
}

#[tokio::test]
async fn an_operator_endpoint_enforces_its_allow_list_and_project_scope() {
    let setup = Setup::new().await;
    let operator = FakeProvider::start().await;
    let gpu = FakeProvider::start().await;
    let (_, _, other_key) = new_project(&setup.db).await;
    store::add_model_endpoint(
        &setup.db.connect().await,
        &NewModelEndpoint {
            name: "gpu".into(),
            kind: "openai".into(),
            base_url: gpu.base_url_openai(),
            credential_env: Some("GPU_GATEWAY_KEY".into()),
            project: Some(setup.project_name.clone()),
            models: vec!["m-allowed".into()],
        },
    )
    .await
    .unwrap();
    let _worker = worker(&setup, &operator, &[("GPU_GATEWAY_KEY", "sk-gpu-gateway")]);
    let config =
        |name: &str| json!({"model": {"provider": "openai", "name": name, "endpoint": "gpu"}});

    let (status, agent) = setup
        .call(Method::POST, "/v1/agents", Some(config("m-allowed")))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{agent}");
    let id = agent["id"].as_str().unwrap();
    send_and_finish(&setup, id, "hi").await;
    assert_eq!(gpu.request_count(), 1);
    assert_eq!(credentials(&gpu), vec!["Bearer sk-gpu-gateway".to_owned()]);
    assert_eq!(operator.request_count(), 0);

    let (status, body) = setup
        .call(Method::POST, "/v1/agents", Some(config("m-other")))
        .await;
    assert_refused(status, &body, "model.name");
    let (status, body) = setup
        .call(
            Method::PATCH,
            &format!("/v1/agents/{id}"),
            Some(json!({"model": {"name": "m-other"}})),
        )
        .await;
    assert_refused(status, &body, "model.name");
    let (status, body) = setup
        .call(
            Method::POST,
            "/v1/agents",
            Some(
                json!({"model": {"provider": "anthropic", "name": "m-allowed", "endpoint": "gpu"}}),
            ),
        )
        .await;
    assert_refused(status, &body, "model.endpoint");

    // Another project: the endpoint is out of scope, told like an unknown one.
    let (status, out_of_scope) = call(
        &setup.api,
        Method::POST,
        "/v1/agents",
        &other_key,
        Some(config("m-allowed")),
    )
    .await;
    assert_refused(status, &out_of_scope, "model.endpoint");
    let (_, unknown) = call(
        &setup.api,
        Method::POST,
        "/v1/agents",
        &other_key,
        Some(json!({"model": {"provider": "openai", "name": "m-allowed", "endpoint": "nope"}})),
    )
    .await;
    assert_eq!(
        out_of_scope["error"]["message"]
            .as_str()
            .unwrap()
            .replace("gpu", "X"),
        unknown["error"]["message"]
            .as_str()
            .unwrap()
            .replace("nope", "X"),
    );

    // Removed: the agent's next model call fails its turn, nothing is sent.
    store::remove_model_endpoint(&setup.db.connect().await, "gpu")
        .await
        .unwrap();
    setup
        .call(
            Method::POST,
            &format!("/v1/agents/{id}/inputs"),
            Some(json!({"content": "again"})),
        )
        .await;
    let client = setup.db.connect().await;
    wait_for_event(&client, id.parse().unwrap(), "turn.failed", WAIT).await;
    assert_eq!(gpu.request_count(), 1);
}

#[tokio::test]
async fn a_project_key_is_used_sealed_and_never_shown() {
    let setup = Setup::new().await;
    let operator = FakeProvider::start().await;
    let tenant = FakeProvider::start().await;
    let worker = worker(&setup, &operator, &[]);
    let tenant_key = "sk-ant-tenant-own-key-7f3a";

    let (status, body) = setup
        .call(
            Method::PUT,
            "/v1/provider-keys/anthropic",
            Some(json!({"key": tenant_key})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["provider"], "anthropic");
    let (status, listed) = setup.call(Method::GET, "/v1/provider-keys", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(listed["provider_keys"][0]["provider"], "anthropic");
    assert!(!body.to_string().contains(tenant_key) && !listed.to_string().contains(tenant_key));
    let (status, _) = setup
        .call(
            Method::PUT,
            "/v1/provider-keys/mistral",
            Some(json!({"key": "x"})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // The default endpoint: the project's key replaces the operator's.
    let (_, agent) = setup
        .call(
            Method::POST,
            "/v1/agents",
            Some(json!({"model": {"provider": "anthropic", "name": "m"}})),
        )
        .await;
    send_and_finish(&setup, agent["id"].as_str().unwrap(), "hi").await;
    assert_eq!(credentials(&operator), vec![tenant_key.to_owned()]);

    // A custom URL: the project's key, and only it.
    store::set_project_custom_model_urls(&setup.db.connect().await, &setup.project_name, true)
        .await
        .unwrap();
    let (_, custom) = setup
        .call(
            Method::POST,
            "/v1/agents",
            Some(json!({"model": {"provider": "anthropic", "name": "m", "base_url": tenant.base_url_anthropic()}})),
        )
        .await;
    send_and_finish(&setup, custom["id"].as_str().unwrap(), "hi").await;
    assert_eq!(credentials(&tenant), vec![tenant_key.to_owned()]);

    // Never shown: not by any GET, not in events (webhook bodies are the
    // events), not in the worker's log; sealed in the table.
    for path in [
        format!("/v1/agents/{}", agent["id"].as_str().unwrap()),
        "/v1/agents".to_owned(),
        format!("/v1/agents/{}/events", agent["id"].as_str().unwrap()),
        format!("/v1/agents/{}/events", custom["id"].as_str().unwrap()),
    ] {
        let (_, body) = setup.call(Method::GET, &path, None).await;
        assert!(!body.to_string().contains(tenant_key), "{path}: {body}");
    }
    let client = setup.db.connect().await;
    let in_events: i64 = client
        .query_one(
            "SELECT count(*) FROM holdfast.events WHERE data::text LIKE '%' || $1 || '%'",
            &[&tenant_key],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(in_events, 0);
    assert!(!worker.log_text().contains(tenant_key));
    let sealed: Vec<u8> = client
        .query_one(
            "SELECT sealed FROM holdfast.project_provider_keys WHERE project_id = $1 AND provider = 'anthropic'",
            &[&setup.project],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!sealed
        .windows(tenant_key.len())
        .any(|w| w == tenant_key.as_bytes()));
    assert!(
        sealed.len() > tenant_key.len(),
        "nonce and tag around the ciphertext"
    );

    // Deleted: the operator's key again.
    let (status, _) = setup
        .call(Method::DELETE, "/v1/provider-keys/anthropic", None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    send_and_finish(&setup, agent["id"].as_str().unwrap(), "again").await;
    assert_eq!(
        credentials(&operator).last().map(String::as_str),
        Some(OPERATOR_ANTHROPIC_KEY)
    );
}

#[tokio::test]
async fn mcp_header_values_are_masked_everywhere_but_sent_to_the_server() {
    let setup = Setup::new().await;
    let operator = FakeProvider::start().await;
    let mcp = McpTestServer::start().await;
    let _worker = worker(&setup, &operator, &[]);
    let secret = "Bearer mcp-secret-42";
    let tool = json!({"type": "mcp", "name": "calc", "url": mcp.url, "headers": {"Authorization": secret}});

    let (status, agent) = setup
        .call(
            Method::POST,
            "/v1/agents",
            Some(json!({"model": {"provider": "anthropic", "name": "m"}, "tools": [tool]})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{agent}");
    assert_eq!(
        agent["config"]["tools"][0]["headers"]["Authorization"],
        "***"
    );
    let id = agent["id"].as_str().unwrap();
    let (_, shown) = setup
        .call(Method::GET, &format!("/v1/agents/{id}"), None)
        .await;
    assert_eq!(
        shown["config"]["tools"][0]["headers"]["Authorization"],
        "***"
    );
    let (_, list) = setup.call(Method::GET, "/v1/agents", None).await;
    assert_eq!(
        list["agents"][0]["config"]["tools"][0]["headers"]["Authorization"],
        "***"
    );
    assert!(!list.to_string().contains("mcp-secret-42"));

    // A read-modify-write with the masked tools keeps the secret; the event
    // (and so its webhook) shows "***".
    let (status, patched) = setup
        .call(
            Method::PATCH,
            &format!("/v1/agents/{id}"),
            Some(json!({"system": "be brief", "tools": shown["config"]["tools"]})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{patched}");
    let client = setup.db.connect().await;
    let (stored, event): (Value, Value) = {
        let row = client
            .query_one(
                "SELECT a.config, e.data FROM holdfast.agents a \
                   JOIN holdfast.events e ON e.agent_id = a.id AND e.type = 'config.updated' \
                  WHERE a.id = $1",
                &[&id.parse::<Uuid>().unwrap()],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(stored["tools"][0]["headers"]["Authorization"], secret);
    assert_eq!(
        event["config"]["tools"][0]["headers"]["Authorization"],
        "***"
    );
    assert_eq!(event["config"]["system"], "be brief");

    // "***" has nothing to keep at another url, or in a new agent.
    let mut moved = tool.clone();
    moved["url"] = json!("http://127.0.0.1:9/mcp");
    moved["headers"]["Authorization"] = json!("***");
    let (status, body) = setup
        .call(
            Method::PATCH,
            &format!("/v1/agents/{id}"),
            Some(json!({"tools": [moved.clone()]})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["field"], "tools[0].headers.Authorization");
    let (status, _) = setup
        .call(
            Method::POST,
            "/v1/agents",
            Some(json!({"model": {"provider": "anthropic", "name": "m"}, "tools": [moved]})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // The worker sends the real value to the MCP server.
    send_and_finish(&setup, id, "hi").await;
    assert!(
        mcp.header_values("authorization")
            .contains(&secret.to_owned()),
        "{:?}",
        mcp.header_values("authorization")
    );
    assert!(!mcp
        .header_values("authorization")
        .contains(&"***".to_owned()));
}

#[tokio::test]
async fn mcp_headers_nested_in_subagent_configs_are_masked_in_every_read_and_kept_by_the_same_rule()
{
    let db = TestDb::new().await;
    let api = ApiServer::start_with(&db, |config| {
        config.egress = std::sync::Arc::new(
            holdfast_providers::egress::EgressPolicy::parse("mcp=127.0.0.1").unwrap(),
        );
    })
    .await;
    let (_, _, key) = new_project(&db).await;
    let call = |method: Method, path: String, body: Option<Value>| {
        let (api, key) = (&api, &key);
        async move { call(api, method, &path, key, body).await }
    };
    let mcp = |name: &str, secret: &str| {
        json!({"type": "mcp", "name": name, "url": "http://127.0.0.1:9/mcp",
               "headers": {"Authorization": secret}})
    };
    // Two levels down: the subagent's config, and its own subagent's.
    let config = json!({"model": {"provider": "anthropic", "name": "m"}, "tools": [
        {"type": "spawn_subagent", "config": {
            "model": {"provider": "anthropic", "name": "m"},
            "tools": [mcp("child", "Bearer child-secret-1"),
                      {"type": "spawn_subagent", "config": {
                          "model": {"provider": "anthropic", "name": "m"},
                          "tools": [mcp("grandchild", "Bearer grandchild-secret-2")]}}]}}]});
    let nested = |view: &Value| {
        (
            view["tools"][0]["config"]["tools"][0]["headers"]["Authorization"].clone(),
            view["tools"][0]["config"]["tools"][1]["config"]["tools"][0]["headers"]
                ["Authorization"]
                .clone(),
        )
    };
    let masked = (json!("***"), json!("***"));

    let (status, agent) = call(Method::POST, "/v1/agents".into(), Some(config.clone())).await;
    assert_eq!(status, StatusCode::CREATED, "{agent}");
    assert_eq!(nested(&agent["config"]), masked, "{agent}");
    let id = agent["id"].as_str().unwrap().to_owned();
    let (_, shown) = call(Method::GET, format!("/v1/agents/{id}"), None).await;
    assert_eq!(nested(&shown["config"]), masked, "{shown}");
    for listing in ["/v1/agents", "/v1/agents?order=activity"] {
        let (_, list) = call(Method::GET, listing.into(), None).await;
        assert_eq!(nested(&list["agents"][0]["config"]), masked, "{list}");
        assert!(!list.to_string().contains("secret-"), "{list}");
    }

    // The masked config sent back keeps both stored values; the event (and
    // so every webhook delivery of it) shows "***".
    let mut round_trip = shown["config"].clone();
    round_trip["system"] = json!("be brief");
    let (status, patched) = call(
        Method::PATCH,
        format!("/v1/agents/{id}"),
        Some(json!({"system": "be brief", "tools": round_trip["tools"]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{patched}");
    assert_eq!(nested(&patched["config"]), masked);
    let client = db.connect().await;
    let row = client
        .query_one(
            "SELECT a.config, e.data FROM holdfast.agents a \
               JOIN holdfast.events e ON e.agent_id = a.id AND e.type = 'config.updated' \
              WHERE a.id = $1",
            &[&id.parse::<Uuid>().unwrap()],
        )
        .await
        .unwrap();
    let (stored, event): (Value, Value) = (row.get(0), row.get(1));
    assert_eq!(
        nested(&stored),
        (
            json!("Bearer child-secret-1"),
            json!("Bearer grandchild-secret-2")
        ),
        "the round trip kept the stored values"
    );
    assert_eq!(nested(&event["config"]), masked, "{event}");
    let (_, events) = call(Method::GET, format!("/v1/agents/{id}/events"), None).await;
    assert!(!events.to_string().contains("secret-"), "{events}");

    // A nested "***" at another url has nothing to keep, as at the top.
    let mut moved = round_trip["tools"].clone();
    moved[0]["config"]["tools"][1]["config"]["tools"][0]["url"] = json!("http://127.0.0.1:10/mcp");
    let (status, body) = call(
        Method::PATCH,
        format!("/v1/agents/{id}"),
        Some(json!({"tools": moved})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(
        body["error"]["field"],
        "tools[0].config.tools[1].config.tools[0].headers.Authorization"
    );
    let mut fresh = config.clone();
    fresh["tools"][0]["config"]["tools"][0]["headers"]["Authorization"] = json!("***");
    let (status, body) = call(Method::POST, "/v1/agents".into(), Some(fresh)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(
        body["error"]["field"],
        "tools[0].config.tools[0].headers.Authorization"
    );
}

#[tokio::test]
async fn the_endpoints_and_projects_commands_manage_endpoints_and_projects_as_processes() {
    let db = TestDb::new().await;
    let (_, project, _) = new_project(&db).await;
    let url = db.url();
    let run = |args: Vec<&str>| {
        let output = std::process::Command::new(holdfast_bin())
            .args(&args)
            .env("HOLDFAST_DATABASE_URL", &url)
            .env("HOLDFAST_LOG", "warn")
            .output()
            .expect("run holdfast");
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (code, _, stderr) = run(vec![
        "endpoints",
        "add",
        "vllm",
        "--kind",
        "openai",
        "--base-url",
        "http://10.0.0.5:8000/v1",
        "--credential-env",
        "VLLM_KEY",
        "--project",
        &project,
        "--model",
        "llama-3",
        "--model",
        "qwen",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    let (code, stdout, _) = run(vec!["endpoints", "list", "--json"]);
    assert_eq!(code, Some(0));
    let listed: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(listed[0]["name"], "vllm");
    assert_eq!(listed[0]["kind"], "openai");
    assert_eq!(listed[0]["credential_env"], "VLLM_KEY");
    assert_eq!(listed[0]["project"], project.as_str());
    assert_eq!(listed[0]["models"], json!(["llama-3", "qwen"]));

    let (code, _, stderr) = run(vec![
        "endpoints",
        "add",
        "vllm",
        "--kind",
        "openai",
        "--base-url",
        "http://x",
    ]);
    assert_eq!(code, Some(1), "a taken name is refused");
    assert!(stderr.contains("already exists"), "{stderr}");
    let (code, _, stderr) = run(vec![
        "endpoints",
        "add",
        "leak",
        "--kind",
        "openai",
        "--base-url",
        "http://x",
        "--credential-env",
        "HOLDFAST_DATABASE_URL",
    ]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("credential_env"), "{stderr}");
    let (code, _, _) = run(vec![
        "endpoints",
        "add",
        "default",
        "--kind",
        "openai",
        "--base-url",
        "http://x",
    ]);
    assert_eq!(code, Some(1), "default is reserved");

    let (code, stdout, _) = run(vec!["projects", "allow-custom-urls", &project]);
    assert_eq!(code, Some(0));
    assert!(stdout.contains("may set model.base_url"));
    let allowed: bool = db
        .connect()
        .await
        .query_one(
            "SELECT allow_custom_model_urls FROM holdfast.projects WHERE name = $1",
            &[&project],
        )
        .await
        .unwrap()
        .get(0);
    assert!(allowed);
    let (code, _, _) = run(vec!["projects", "allow-custom-urls", "no-such-project"]);
    assert_eq!(code, Some(1));

    // The running cap: set, cleared, and refused when negative or unknown.
    let max_running = || async {
        db.connect()
            .await
            .query_one(
                "SELECT max_running FROM holdfast.projects WHERE name = $1",
                &[&project],
            )
            .await
            .unwrap()
            .get::<_, Option<i32>>(0)
    };
    let (code, stdout, _) = run(vec!["projects", "max-running", &project, "3"]);
    assert_eq!(code, Some(0));
    assert!(stdout.contains("at most 3 agents"), "{stdout}");
    assert_eq!(max_running().await, Some(3));
    let (code, _, stderr) = run(vec!["projects", "max-running", &project, "-1"]);
    assert_eq!(code, Some(2), "a usage error: {stderr}");
    assert!(stderr.contains("`none`"), "{stderr}");
    assert_eq!(max_running().await, Some(3), "unchanged");
    let (code, _, _) = run(vec!["projects", "max-running", "no-such-project", "3"]);
    assert_eq!(code, Some(1));
    let (code, _, _) = run(vec!["projects", "max-running", &project, "none"]);
    assert_eq!(code, Some(0));
    assert_eq!(max_running().await, None);

    let (code, _, _) = run(vec!["endpoints", "remove", "vllm"]);
    assert_eq!(code, Some(0));
    let (_, stdout, _) = run(vec!["endpoints", "list", "--json"]);
    assert_eq!(serde_json::from_str::<Value>(&stdout).unwrap(), json!([]));
    let (code, _, _) = run(vec!["endpoints", "remove", "vllm"]);
    assert_eq!(code, Some(1));
}
