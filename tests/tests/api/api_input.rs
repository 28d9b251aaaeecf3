//! Hostile input against the real API over sockets: U+0000 in every string
//! field of every route, out-of-range config numbers (at the API and in
//! SQL), randomized bodies over every route in the served OpenAPI document,
//! the per-key rate limit, and streams of a revoked key.

use std::collections::BTreeSet;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use holdfast_api::rate_limit::RateLimit;
use holdfast_db::store;
use holdfast_tests::api_server::{error_of, waiting_custom_call, ApiServer};
use holdfast_tests::api_sse::{SseItem, SseReader};
use holdfast_tests::TestDb;
use holdfast_wire::config::ModelConfig;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use reqwest::{Method, StatusCode};
use serde_json::{json, Map, Value};
use tokio_postgres::Client;
use uuid::Uuid;

/// Every row of every table in the `holdfast` schema, as one digest per
/// table: equal snapshots mean nothing was written.
async fn database_snapshot(client: &Client) -> Vec<(String, String)> {
    let tables: Vec<String> = client
        .query(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'holdfast' ORDER BY tablename",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut snapshot = Vec::new();
    for table in tables {
        let digest: String = client
            .query_one(
                &format!(
                    "SELECT coalesce(md5(string_agg(t::text, '|' ORDER BY t::text)), '') \
                       FROM holdfast.{table} t"
                ),
                &[],
            )
            .await
            .unwrap()
            .get(0);
        snapshot.push((table, digest));
    }
    snapshot
}

/// A valid agent config that uses every config field with a string in it.
fn full_config() -> Value {
    json!({
        "model": {"provider": "anthropic", "name": "claude-test",
                  "base_url": "https://models.example.com", "max_tokens": 100},
        "system": "Be brief.",
        "tools": [{"type": "custom", "name": "lookup", "description": "find an order",
                   "input_schema": {"type": "object", "properties": {"id": {"type": "string"}}}}],
        "approvals": {"require_for": ["lookup"]},
        "metadata": {"note": "n", "tags": ["a"]}
    })
}

/// A valid body for each tenant route that takes one (path templates as in
/// the OpenAPI document).
fn valid_bodies() -> Vec<(Method, &'static str, Value)> {
    vec![
        (Method::POST, "/v1/agents", full_config()),
        (Method::PATCH, "/v1/agents/{id}", full_config()),
        (
            Method::POST,
            "/v1/agents/{id}/inputs",
            json!({"content": [{"type": "text", "text": "hi"}]}),
        ),
        (
            Method::POST,
            "/v1/tool-calls/{id}/result",
            json!({"output": {"status": "shipped", "lines": ["a"]}, "is_error": false}),
        ),
        (
            Method::POST,
            "/v1/approvals/{id}",
            json!({"decision": "approve", "by": "alice", "reason": "ok"}),
        ),
        (
            Method::POST,
            "/v1/questions/{id}/answer",
            json!({"answer": "blue", "by": "alice"}),
        ),
        (
            Method::POST,
            "/v1/webhooks",
            json!({"url": "https://hooks.example.com/h", "events": ["*"], "description": "d"}),
        ),
        (
            Method::POST,
            "/v1/machines",
            json!({"name": "box", "wake_url": "https://wake.example.com/"}),
        ),
        (
            Method::POST,
            "/v1/machines/{id}/wake",
            json!({"window_secs": 60}),
        ),
        (
            Method::PUT,
            "/v1/provider-keys/{provider}",
            json!({"key": "sk-project-key"}),
        ),
        (Method::PATCH, "/v1/inputs/{id}", json!({"mode": "steer"})),
        (
            Method::POST,
            "/v1/agents/{id}/fork",
            json!({"at": {"seq": 1}, "config": {"system": "be brief"}}),
        ),
        (
            Method::POST,
            "/v1/agents/{id}/replays",
            json!({"config": {"system": "be brief"}}),
        ),
        (
            Method::POST,
            "/v1/agents/{id}/schedules",
            json!({"every": "1h", "timezone": "UTC", "input": {"content": "hi", "mode": "queue"}}),
        ),
        (
            Method::PATCH,
            "/v1/agents/{id}/schedules/{schedule_id}",
            json!({"paused": true}),
        ),
    ]
}

/// Every string and every object key in `value`, each with U+0000 put in,
/// with the field path the API must name: `(path, mutated value)`.
fn nul_variants(value: &Value) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    collect_nul_variants(value, "", &mut |path, replaced| out.push((path, replaced)));
    out
}

fn collect_nul_variants(value: &Value, path: &str, emit: &mut dyn FnMut(String, Value)) {
    match value {
        Value::String(s) => emit(path.to_owned(), Value::String(format!("{s}\u{0}x"))),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                collect_nul_variants(item, &format!("{path}[{i}]"), &mut |p, replaced| {
                    let mut items = items.clone();
                    items[i] = replaced;
                    emit(p, Value::Array(items));
                });
            }
        }
        Value::Object(map) => {
            let join = |key: &str| {
                if path.is_empty() {
                    key.to_owned()
                } else {
                    format!("{path}.{key}")
                }
            };
            for (key, item) in map {
                let mut renamed = Map::new();
                for (k, v) in map {
                    let k = if k == key {
                        format!("{k}\u{0}")
                    } else {
                        k.clone()
                    };
                    renamed.insert(k, v.clone());
                }
                emit(join(&format!("{key}\\u0000")), Value::Object(renamed));
                collect_nul_variants(item, &join(key), &mut |p, replaced| {
                    let mut map = map.clone();
                    map.insert(key.clone(), replaced);
                    emit(p, Value::Object(map));
                });
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// The served OpenAPI document's operations: (method, path template, the
/// operation object).
async fn operations(server: &ApiServer) -> Vec<(Method, String, Value)> {
    let doc: Value = server
        .http
        .get(server.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().unwrap() {
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            out.push((method, path.clone(), operation.clone()));
        }
    }
    assert!(
        out.len() >= 25,
        "the document lists {} operations",
        out.len()
    );
    out
}

/// Machine daemon routes take a machine token and keep what a machine
/// reports (U+0000 made storable), so the tenant rule does not apply there.
fn is_daemon_route(path: &str) -> bool {
    path.starts_with("/v1/machine/")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nul_in_any_string_field_of_any_route_is_refused_naming_it_and_writes_nothing() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let server = ApiServer::start_with(&db, |c| c.rate_limit = None).await;
    let (project, key) = project_key_with_custom_urls(&client).await;
    let agent = store::create_agent(&client, project, &full_config())
        .await
        .unwrap();
    let tool_call = waiting_custom_call(&client, agent).await;

    // The table covers every tenant route that takes a JSON body.
    let with_body: BTreeSet<(String, String)> = operations(&server)
        .await
        .into_iter()
        .filter(|(_, path, op)| !op["requestBody"].is_null() && !is_daemon_route(path))
        .map(|(method, path, _)| (method.to_string(), path))
        .collect();
    let covered: BTreeSet<(String, String)> = valid_bodies()
        .into_iter()
        .map(|(method, path, _)| (method.to_string(), path.to_owned()))
        .collect();
    assert_eq!(covered, with_body, "routes with a body vs. the table");

    let before = database_snapshot(&client).await;
    let mut cases = 0;
    for (method, template, body) in valid_bodies() {
        let id = match template {
            "/v1/agents/{id}"
            | "/v1/agents/{id}/inputs"
            | "/v1/agents/{id}/fork"
            | "/v1/agents/{id}/replays"
            | "/v1/agents/{id}/schedules"
            | "/v1/agents/{id}/schedules/{schedule_id}" => agent,
            "/v1/tool-calls/{id}/result" => tool_call,
            _ => Uuid::new_v4(),
        };
        let path = template
            .replace("{id}", &id.to_string())
            .replace("{schedule_id}", &Uuid::new_v4().to_string())
            .replace("{provider}", "anthropic");
        for (field, mutated) in nul_variants(&body) {
            let response = server
                .request(method.clone(), &path, &key)
                .header("idempotency-key", Uuid::new_v4().to_string())
                .json(&mutated)
                .send()
                .await
                .unwrap();
            let (status, kind, _, named) = error_of(response).await;
            assert_eq!(
                (status, kind.as_str(), named.as_deref()),
                (
                    StatusCode::BAD_REQUEST,
                    "invalid_request",
                    Some(field.as_str())
                ),
                "{method} {template} with U+0000 in {field}"
            );
            cases += 1;
        }
    }
    // Query parameters carry it too (`%00`).
    for path in [
        "/v1/agents?state=idle%00".to_owned(),
        format!("/v1/agents/{agent}/events?after=%00"),
        format!("/v1/agents/{agent}/tool-calls?status=pending%00"),
        format!("/v1/agents/{agent}/approvals?status=%00"),
        format!("/v1/agents/{agent}/questions?status=%00"),
        format!("/v1/agents/{agent}/stream?after=1%00"),
    ] {
        let response = server
            .request(Method::GET, &path, &key)
            .send()
            .await
            .unwrap();
        let (status, _, _, named) = error_of(response).await;
        let param = path.split('?').nth(1).unwrap().split('=').next().unwrap();
        assert_eq!(
            (status, named.as_deref()),
            (StatusCode::BAD_REQUEST, Some(param)),
            "GET {path}"
        );
        cases += 1;
    }
    assert!(cases > 40, "only {cases} cases");
    assert_eq!(
        database_snapshot(&client).await,
        before,
        "something was written"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_range_config_numbers_are_refused_by_the_api_and_by_sql() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let server = ApiServer::start(&db).await;
    let (project, key) = project_key_with_custom_urls(&client).await;
    let agent = store::create_agent(&client, project, &full_config())
        .await
        .unwrap();
    let config_with = |max_tokens: Value| {
        let mut config = full_config();
        config["model"]["max_tokens"] = max_tokens;
        config
    };
    let bad: Vec<Value> = vec![
        json!(5_000_000_000_u64),
        json!(4_294_967_296_u64),
        json!(1.0),
        json!(1.5),
        json!(0),
        json!(-1),
        json!(1e30),
        json!("100"),
    ];
    let before = database_snapshot(&client).await;
    for max_tokens in &bad {
        let response = server
            .request(Method::POST, "/v1/agents", &key)
            .json(&config_with(max_tokens.clone()))
            .send()
            .await
            .unwrap();
        let (status, _, _, field) = error_of(response).await;
        assert_eq!(
            (status, field.as_deref()),
            (StatusCode::BAD_REQUEST, Some("model.max_tokens")),
            "POST with max_tokens {max_tokens}"
        );
        let response = server
            .request(Method::PATCH, &format!("/v1/agents/{agent}"), &key)
            .json(&json!({"model": {"max_tokens": max_tokens}}))
            .send()
            .await
            .unwrap();
        let (status, _, _, field) = error_of(response).await;
        assert_eq!(
            (status, field.as_deref()),
            (StatusCode::BAD_REQUEST, Some("model.max_tokens")),
            "PATCH with max_tokens {max_tokens}"
        );
        // A SQL client gets the same rule.
        let error = client
            .query_one(
                "SELECT holdfast.create_agent($1, $2)",
                &[&project, &config_with(max_tokens.clone())],
            )
            .await
            .expect_err("SQL accepted an out-of-range max_tokens");
        let db_error = error.as_db_error().expect("a database error");
        assert_eq!(db_error.code().code(), "HF422", "{max_tokens}");
        assert_eq!(db_error.column(), Some("model.max_tokens"), "{max_tokens}");
    }
    assert_eq!(
        database_snapshot(&client).await,
        before,
        "something was written"
    );

    // The edges of the range are accepted, and the worker's type holds them.
    for max_tokens in [json!(1), json!(u32::MAX)] {
        let response = server
            .request(Method::POST, "/v1/agents", &key)
            .json(&config_with(max_tokens.clone()))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::CREATED, "{max_tokens}");
        let created: Value = response.json().await.unwrap();
        let model: ModelConfig = serde_json::from_value(created["config"]["model"].clone())
            .expect("the worker parses it");
        assert_eq!(
            Some(u64::from(model.max_tokens.unwrap())),
            max_tokens.as_u64()
        );
    }
}

/// A random JSON value: the types, edge numbers and strings bodies get wrong.
fn random_value(rng: &mut StdRng, depth: u32) -> Value {
    let leaf = depth == 0 || rng.random_bool(0.6);
    if leaf {
        return match rng.random_range(0..4) {
            0 => Value::Null,
            1 => Value::Bool(rng.random()),
            2 => random_number(rng),
            _ => Value::String(random_string(rng)),
        };
    }
    if rng.random_bool(0.5) {
        let len = rng.random_range(0..4);
        Value::Array((0..len).map(|_| random_value(rng, depth - 1)).collect())
    } else {
        let len = rng.random_range(0..4);
        let mut map = Map::new();
        for _ in 0..len {
            let key = if rng.random_bool(0.7) {
                FIELD_NAMES.choose(rng).unwrap().to_string()
            } else {
                random_string(rng)
            };
            map.insert(key, random_value(rng, depth - 1));
        }
        Value::Object(map)
    }
}

/// Field names the API's bodies have, so random objects hit real fields.
const FIELD_NAMES: &[&str] = &[
    "model",
    "provider",
    "name",
    "base_url",
    "max_tokens",
    "system",
    "tools",
    "type",
    "approvals",
    "require_for",
    "metadata",
    "content",
    "output",
    "is_error",
    "decision",
    "by",
    "reason",
    "answer",
    "url",
    "events",
    "description",
    "wake_url",
    "window_secs",
    "session",
    "started",
    "commands",
    "state",
    "pid",
    "exit_code",
    "signal",
    "stdout",
    "stderr",
    "mode",
    "input_schema",
    "config",
    "text",
    "id",
];

fn random_number(rng: &mut StdRng) -> Value {
    let pick = rng.random_range(0..12);
    match pick {
        0 => json!(0),
        1 => json!(-1),
        2 => json!(i64::MAX),
        3 => json!(i64::MIN),
        4 => json!(u64::MAX),
        5 => json!(5_000_000_000_u64),
        6 => json!(1.0),
        7 => json!(-0.5),
        8 => json!(1e300),
        9 => json!(u32::MAX),
        10 => json!(rng.random_range(1..100)),
        _ => json!(rng.random::<i64>()),
    }
}

fn random_string(rng: &mut StdRng) -> String {
    let pick = rng.random_range(0..12);
    match pick {
        0 => String::new(),
        1 => "\u{0}".to_owned(),
        2 => "a\u{0}b".to_owned(),
        3 => "x".repeat(rng.random_range(100..5000)),
        4 => "é☃\u{FFFF}\u{10FFFF}".to_owned(),
        5 => "../../etc/passwd".to_owned(),
        6 => "http://127.0.0.1:1/".to_owned(),
        7 => "*".to_owned(),
        8 => [
            "anthropic",
            "openai",
            "approve",
            "deny",
            "finished",
            "unknown",
            "custom",
        ]
        .choose(rng)
        .unwrap()
        .to_string(),
        9 => Uuid::new_v4().to_string(),
        10 => "'; DROP TABLE holdfast.agents; --".to_owned(),
        _ => (0..rng.random_range(1..20))
            .map(|_| rng.random_range(b'a'..=b'z') as char)
            .collect(),
    }
}

/// `value` with one node (chosen at random) replaced by a random value.
fn mutate(rng: &mut StdRng, value: &Value) -> Value {
    let descend = rng.random_bool(0.6);
    match value {
        Value::Object(map) if descend && !map.is_empty() => {
            let key = map
                .keys()
                .nth(rng.random_range(0..map.len()))
                .unwrap()
                .clone();
            let mut map = map.clone();
            let child = mutate(rng, &map[&key]);
            map.insert(key, child);
            Value::Object(map)
        }
        Value::Array(items) if descend && !items.is_empty() => {
            let i = rng.random_range(0..items.len());
            let mut items = items.clone();
            items[i] = mutate(rng, &items[i]);
            Value::Array(items)
        }
        _ => random_value(rng, 2),
    }
}

/// A query value: valid-looking, out of range, of the wrong type, or NUL.
fn random_query_value(rng: &mut StdRng) -> String {
    let values = [
        "0",
        "1",
        "2",
        "-1",
        "20",
        "21",
        "1000",
        "1001",
        "99999999999999999999",
        "1.5",
        "pending",
        "idle",
        "waiting",
        "archived",
        "%00",
        "a%00",
        "",
        "%FF",
        "true",
    ];
    match rng.random_range(0..4) {
        0 => Uuid::new_v4().to_string(),
        _ => values.choose(rng).unwrap().to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomized_bodies_on_every_route_never_get_a_5xx() {
    let seed: u64 = std::env::var("HOLDFAST_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x484F_4C44);
    let per_operation: usize = std::env::var("HOLDFAST_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    println!(
        "fuzz seed {seed} ({per_operation} cases per operation; HOLDFAST_FUZZ_SEED to replay)"
    );
    let mut rng = StdRng::seed_from_u64(seed);

    let db = TestDb::new().await;
    let client = db.connect().await;
    let server = ApiServer::start_with(&db, |c| c.rate_limit = None).await;
    let (project, key) = project_key_with_custom_urls(&client).await;
    let agent = store::create_agent(&client, project, &full_config())
        .await
        .unwrap();
    let tool_call = waiting_custom_call(&client, agent).await;
    let machine: Value = server
        .request(Method::POST, "/v1/machines", &key)
        .json(&json!({"name": "fuzz-box"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let machine_id = machine["id"].as_str().unwrap().to_owned();
    let machine_token = machine["token"].as_str().unwrap().to_owned();
    let ids = [
        agent.to_string(),
        tool_call.to_string(),
        machine_id.clone(),
        Uuid::new_v4().to_string(),
        "not-a-uuid".to_owned(),
        "%00".to_owned(),
        "0".to_owned(),
    ];
    let mut bodies = valid_bodies()
        .into_iter()
        .map(|(method, path, body)| ((method, path.to_owned()), body))
        .collect::<Vec<_>>();
    bodies.push((
        (Method::POST, "/v1/machine/heartbeat".to_owned()),
        json!({"session": Uuid::new_v4(), "started": true, "commands": [
            {"id": Uuid::new_v4(), "state": "running", "pid": 1}]}),
    ));
    bodies.push((
        (Method::POST, "/v1/machine/commands/{id}/result".to_owned()),
        json!({"state": "finished", "exit_code": 0, "stdout": "out", "stderr": ""}),
    ));

    let mut failures = Vec::new();
    let mut sent = 0;
    for (method, template, operation) in operations(&server).await {
        let valid_body = bodies
            .iter()
            .find(|((m, p), _)| *m == method && *p == template)
            .map(|(_, body)| body.clone());
        let query_params: Vec<String> = operation["parameters"]
            .as_array()
            .map(|params| {
                params
                    .iter()
                    .filter(|p| p["in"] == "query")
                    .filter_map(|p| p["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        for _ in 0..per_operation {
            let mut path = template.clone();
            while let Some(start) = path.find('{') {
                let end = path[start..].find('}').unwrap() + start;
                path.replace_range(start..=end, ids.choose(&mut rng).unwrap());
            }
            let mut query = Vec::new();
            for name in &query_params {
                if rng.random_bool(0.6) {
                    query.push(format!("{name}={}", random_query_value(&mut rng)));
                }
            }
            if !query.is_empty() {
                path = format!("{path}?{}", query.join("&"));
            }
            let body = match (&valid_body, operation["requestBody"].is_null()) {
                (_, true) if rng.random_bool(0.8) => None,
                (Some(valid), _) if rng.random_bool(0.7) => Some(mutate(&mut rng, valid)),
                _ => Some(random_value(&mut rng, 3)),
            };
            let token = if is_daemon_route(&template) {
                &machine_token
            } else {
                &key
            };
            let mut request = server.request(method.clone(), &path, token);
            if rng.random_bool(0.3) {
                request =
                    request.header("idempotency-key", random_string(&mut rng).replace('\0', ""));
            }
            if let Some(body) = &body {
                request = request.json(body);
            }
            let started = Instant::now();
            let response = request.send().await.unwrap();
            sent += 1;
            let status = response.status();
            if status.is_server_error() {
                let text = response.text().await.unwrap_or_default();
                failures.push(format!(
                    "{status} after {:?}: {method} {path} body {} → {text}",
                    started.elapsed(),
                    body.map(|b| b.to_string()).unwrap_or_default()
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "seed {seed}: {} of {sent} requests got a 5xx:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_over_the_rate_limit_gets_429_with_retry_after_and_other_keys_are_unaffected() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let server = ApiServer::start_with(&db, |c| {
        c.rate_limit = Some(RateLimit {
            requests: NonZeroU32::new(1).unwrap(),
            per: Duration::from_secs(3600),
            burst: NonZeroU32::new(5).unwrap(),
        })
    })
    .await;
    let (_, key_a) = project_key_with_custom_urls(&client).await;
    let (_, key_b) = project_key_with_custom_urls(&client).await;
    for i in 0..5 {
        let response = server
            .request(Method::GET, "/v1/agents", &key_a)
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            StatusCode::OK,
            "request {i} of the burst"
        );
    }
    let refused = server
        .request(Method::GET, "/v1/agents", &key_a)
        .send()
        .await
        .unwrap();
    let retry_after: u64 = refused
        .headers()
        .get("retry-after")
        .expect("a Retry-After header")
        .to_str()
        .unwrap()
        .parse()
        .expect("Retry-After in seconds");
    assert!(
        (1..=3600).contains(&retry_after),
        "Retry-After {retry_after}"
    );
    let (status, kind, _, _) = error_of(refused).await;
    assert_eq!(
        (status, kind.as_str()),
        (StatusCode::TOO_MANY_REQUESTS, "rate_limited")
    );
    let other = server
        .request(Method::GET, "/v1/agents", &key_b)
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), StatusCode::OK, "another key is unaffected");

    // The document says so, on every route an API key or a machine token
    // opens.
    for (method, path, operation) in operations(&server).await {
        let keyed = path.starts_with("/v1/");
        assert_eq!(
            !operation["responses"]["429"].is_null(),
            keyed,
            "{method} {path}: 429 documented"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_ends_within_seconds_of_its_keys_revocation() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    // The default re-check interval: the property is about the shipped setting.
    let server = ApiServer::start(&db).await;
    let created = store::create_api_key(&client, &format!("p{}", Uuid::new_v4().simple()))
        .await
        .unwrap();
    client
        .execute(
            "UPDATE holdfast.projects SET allow_custom_model_urls = true WHERE id = $1",
            &[&created.project_id],
        )
        .await
        .unwrap();
    let agent = store::create_agent(&client, created.project_id, &full_config())
        .await
        .unwrap();
    let path = format!("/v1/agents/{agent}/stream");
    let response = server
        .request(Method::GET, &path, &created.key)
        .send()
        .await
        .unwrap();
    let mut stream = SseReader::new(response);
    // The stream is live: an input committed now arrives on it.
    store::create_input(&client, agent, &json!("hello"), None)
        .await
        .unwrap();
    let first = stream
        .next_event(Duration::from_secs(10))
        .await
        .expect("the stream is open");
    assert_eq!(first.event.as_deref(), Some("input.received"));

    store::revoke_api_key(&client, &created.key_id.to_string())
        .await
        .unwrap();
    let revoked_at = Instant::now();
    loop {
        match stream.next_item(Duration::from_secs(6)).await {
            SseItem::End => break,
            // Heartbeats, and the turn's events saved before the revocation.
            SseItem::Comment(_) | SseItem::Event(_) => continue,
        }
    }
    let took = revoked_at.elapsed();
    assert!(
        took < Duration::from_secs(6),
        "ended {took:?} after revocation"
    );
    let again = server
        .request(Method::GET, &path, &created.key)
        .send()
        .await
        .unwrap();
    assert_eq!(
        again.status(),
        StatusCode::UNAUTHORIZED,
        "a reconnect is refused"
    );
}

/// A project and key whose agents may set `model.base_url` (the operator
/// allowed custom URLs), so [`full_config`] carries every string field.
async fn project_key_with_custom_urls(client: &tokio_postgres::Client) -> (uuid::Uuid, String) {
    let (project, key) = holdfast_tests::api_server::project_key(client).await;
    client
        .execute(
            "UPDATE holdfast.projects SET allow_custom_model_urls = true WHERE id = $1",
            &[&project],
        )
        .await
        .unwrap();
    (project, key)
}
