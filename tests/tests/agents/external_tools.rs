//! External tool IO against real loopback servers: `web_fetch` against a
//! server that counts hits, MCP against a real rmcp Streamable HTTP server,
//! and tool input validation. No database: these modules do IO only.

use holdfast_providers::egress::EgressPolicy;
use holdfast_wire::config::{split_mcp_tool_name, ToolEntry};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use holdfast_tests::counting_http::CountingServer;
use holdfast_tests::mcp_server::McpTestServer;
use holdfast_worker::tools::mcp::{self, McpLimits, McpRegistry, McpServerConfig};
use holdfast_worker::tools::schema::validate_input;
use holdfast_worker::tools::web_fetch::{
    web_fetch, web_fetch_client, web_fetch_definition, WebFetchLimits,
};
use holdfast_worker::tools::ToolOutput;
use serde_json::{json, Value};

/// The test servers listen on loopback, which web_fetch refuses by default.
fn loopback_limits() -> WebFetchLimits {
    WebFetchLimits {
        egress: Arc::new(EgressPolicy::parse("web_fetch=127.0.0.0/8").unwrap()),
        ..WebFetchLimits::default()
    }
}

/// The MCP test servers listen on loopback too.
fn loopback_mcp() -> McpLimits {
    McpLimits {
        egress: Arc::new(EgressPolicy::parse("mcp=127.0.0.0/8").unwrap()),
        ..McpLimits::default()
    }
}

async fn fetch(input: Value, limits: &WebFetchLimits) -> ToolOutput {
    let client = web_fetch_client(limits).unwrap();
    web_fetch(&client, &input, limits).await
}

fn text_of(output: &ToolOutput) -> &str {
    output.output["text"].as_str().expect("a text field")
}

fn error_message(output: &ToolOutput) -> &str {
    assert!(output.is_error, "expected an error output, got {output:?}");
    output.output.as_str().expect("an error message")
}

#[tokio::test]
async fn web_fetch_html_gives_readable_text_without_script_content() {
    let server = CountingServer::start().await;
    let out = fetch(json!({"url": server.url("/html")}), &loopback_limits()).await;

    assert!(!out.is_error, "{out:?}");
    assert_eq!(out.output["status"], 200);
    assert_eq!(out.output["url"], server.url("/html"));
    assert_eq!(out.output["truncated"], false);
    assert!(out.output["content_type"]
        .as_str()
        .unwrap()
        .starts_with("text/html"));
    let text = text_of(&out);
    for expected in [
        "# Holdfast field notes",
        "# Durable agents",
        "Every step is saved to PostgreSQL as it happens.",
        &format!("[design notes]({})", server.url("/docs/design")),
        "## Guarantees",
        "- Finished steps never run again.\n- Crash recovery never reruns a tool.",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    assert!(!text.contains("MUST-NOT-APPEAR"), "noise kept:\n{text}");
    assert!(!text.contains("font-family"), "style kept:\n{text}");
    assert_eq!(server.hits("/html"), 1);
}

#[tokio::test]
async fn web_fetch_returns_json_as_is_and_describes_binary() {
    let server = CountingServer::start().await;
    let limits = loopback_limits();

    let json_out = fetch(json!({"url": server.url("/json")}), &limits).await;
    assert!(!json_out.is_error);
    assert_eq!(
        text_of(&json_out),
        holdfast_tests::counting_http::SAMPLE_JSON
    );

    let binary = fetch(json!({"url": server.url("/binary")}), &limits).await;
    assert!(!binary.is_error);
    assert_eq!(binary.output["content_type"], "image/png");
    let text = text_of(&binary);
    assert!(text.contains("binary content (image/png"), "{text}");
    assert!(!text.contains("PNG"), "bytes leaked: {text}");
}

#[tokio::test]
async fn web_fetch_size_cap_truncates_and_says_so() {
    let server = CountingServer::start().await;
    let limits = WebFetchLimits {
        max_body_bytes: 64 * 1024,
        ..loopback_limits()
    };

    // 10 MiB offered; reading stops at the runtime's cap.
    let out = fetch(
        json!({"url": server.url(&format!("/large/{}", 10 * 1024 * 1024))}),
        &limits,
    )
    .await;
    assert!(!out.is_error, "{out:?}");
    assert_eq!(out.output["truncated"], true);
    assert_eq!(text_of(&out).len(), 64 * 1024);

    // The model's max_bytes lowers the cap…
    let out = fetch(
        json!({"url": server.url("/large/100000"), "max_bytes": 1000}),
        &limits,
    )
    .await;
    assert_eq!(out.output["truncated"], true);
    assert_eq!(text_of(&out).len(), 1000);

    // …but cannot raise it.
    let out = fetch(
        json!({"url": server.url("/large/100000"), "max_bytes": 10_000_000}),
        &limits,
    )
    .await;
    assert_eq!(text_of(&out).len(), 64 * 1024);

    // A body that fits is not marked truncated.
    let out = fetch(json!({"url": server.url("/large/5000")}), &limits).await;
    assert_eq!(out.output["truncated"], false);
    assert_eq!(text_of(&out).len(), 5000);

    // The extracted text has a cap of its own.
    let small_text = WebFetchLimits {
        max_text_bytes: 10,
        ..limits
    };
    let out = fetch(json!({"url": server.url("/large/5000")}), &small_text).await;
    assert_eq!(out.output["truncated"], true);
    assert_eq!(text_of(&out), "xxxxxxxxxx");
}

#[tokio::test]
async fn web_fetch_refuses_bad_schemes_and_bad_input_without_a_request() {
    let server = CountingServer::start().await;
    let limits = loopback_limits();
    let port = server.addr.port();
    let cases = [
        (json!({"url": "file:///etc/passwd"}), "scheme"),
        (
            json!({"url": format!("ftp://127.0.0.1:{port}/x")}),
            "scheme",
        ),
        (json!({"url": "javascript:alert(1)"}), "scheme"),
        (json!({"url": "data:text/plain,hello"}), "scheme"),
        (json!({"url": "/html"}), "not a valid absolute URL"),
        (json!({"url": "127.0.0.1/html"}), "not a valid absolute URL"),
        (json!({}), "missing field `url`"),
        (json!({"url": 5}), "invalid input"),
        (
            json!({"url": server.url("/html"), "follow": true}),
            "unknown field",
        ),
        (
            json!({"url": server.url("/html"), "max_bytes": 0}),
            "max_bytes",
        ),
        (
            json!({"url": server.url("/html"), "max_bytes": -1}),
            "invalid input",
        ),
        (json!("https://example.com"), "invalid input"),
    ];
    for (input, expected) in cases {
        let out = fetch(input.clone(), &limits).await;
        let message = error_message(&out);
        assert!(
            message.contains(expected),
            "{input}: expected {expected:?} in {message:?}"
        );
    }
    assert_eq!(server.total_hits(), 0, "a refused call made a request");
}

#[tokio::test]
async fn web_fetch_refuses_private_addresses_by_default() {
    let server = CountingServer::start().await;
    let port = server.addr.port();
    let limits = WebFetchLimits::default();
    // Loopback in every spelling a URL parser or resolver accepts.
    for url in [
        server.url("/html"),
        format!("http://2130706433:{port}/html"),
        format!("http://127.1:{port}/html"),
        format!("http://0x7f.0.0.1:{port}/html"),
        format!("http://0177.0.0.1:{port}/html"),
        format!("http://017700000001:{port}/html"),
        format!("http://0.0.0.0:{port}/html"),
        format!("http://[::1]:{port}/html"),
        format!("http://[0:0:0:0:0:0:0:1]:{port}/html"),
        format!("http://[::]:{port}/html"),
        format!("http://[::ffff:127.0.0.1]:{port}/html"),
        format!("http://[::ffff:7f00:1]:{port}/html"),
        format!("http://localhost.:{port}/html"),
        format!("http://LOCALHOST:{port}/html"),
        "http://169.254.169.254/latest/meta-data/".to_string(),
        "http://10.0.0.1/".to_string(),
    ] {
        let out = fetch(json!({ "url": url }), &limits).await;
        assert!(
            error_message(&out).contains("egress refused: "),
            "{url}: {out:?}"
        );
    }
    // A name is checked where it resolves.
    let out = fetch(
        json!({"url": format!("http://localhost:{port}/html")}),
        &limits,
    )
    .await;
    assert!(
        error_message(&out).contains("egress refused: localhost resolves to "),
        "{out:?}"
    );
    assert_eq!(server.total_hits(), 0, "a private address was reached");
}

#[tokio::test]
async fn web_fetch_timeout_is_an_error_output() {
    let server = CountingServer::start().await;
    let limits = WebFetchLimits {
        total_timeout: Duration::from_millis(300),
        ..loopback_limits()
    };
    let started = Instant::now();
    let out = fetch(json!({"url": server.url("/hold/slow")}), &limits).await;
    let message = error_message(&out);
    assert!(message.contains("timed out"), "{message}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(server.hits("/hold/slow"), 1);
}

#[tokio::test]
async fn held_request_answers_once_released() {
    let server = CountingServer::start().await;
    let url = server.url("/hold/a");
    let fetching = tokio::spawn(async move {
        let limits = loopback_limits();
        fetch(json!({ "url": url }), &limits).await
    });
    server.wait_for_hits("/hold/a", 1).await;
    assert!(!fetching.is_finished(), "answered before release");
    server.release_held();
    let out = fetching.await.unwrap();
    assert!(!out.is_error, "{out:?}");
    assert_eq!(text_of(&out), "released");
    assert_eq!(server.hits("/hold/a"), 1);
}

#[tokio::test]
async fn web_fetch_follows_a_few_redirects_and_refuses_long_chains() {
    let server = CountingServer::start().await;
    let limits = WebFetchLimits {
        max_redirects: 3,
        ..loopback_limits()
    };
    let out = fetch(json!({"url": server.url("/redirect/2")}), &limits).await;
    assert!(!out.is_error, "{out:?}");
    assert_eq!(out.output["url"], server.url("/json"));

    let out = fetch(json!({"url": server.url("/redirect/10")}), &limits).await;
    assert!(error_message(&out).contains("too many redirects"));
    assert_eq!(server.hits("/json"), 1);
}

#[tokio::test]
async fn web_fetch_error_status_keeps_the_page_and_flags_an_error() {
    let server = CountingServer::start().await;
    server.set_response(
        "/gone",
        404,
        "text/html",
        "<html><body><h1>Not found</h1><p>Try /json.</p></body></html>",
    );
    let out = fetch(json!({"url": server.url("/gone")}), &loopback_limits()).await;
    assert!(out.is_error);
    assert_eq!(out.output["status"], 404);
    assert_eq!(text_of(&out), "# Not found\n\nTry /json.");
}

#[tokio::test]
async fn web_fetch_connection_refused_is_an_error_output() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let out = fetch(
        json!({"url": format!("http://{addr}/")}),
        &loopback_limits(),
    )
    .await;
    assert!(error_message(&out).contains("could not connect"));
}

fn mcp_config(server: &McpTestServer, prefix: &str) -> McpServerConfig {
    let entry = ToolEntry::Mcp {
        name: prefix.into(),
        url: server.url.clone(),
        headers: Default::default(),
    };
    McpServerConfig::from_tool_entry(&entry).unwrap()
}

#[tokio::test]
async fn mcp_list_tools_returns_the_servers_tools_with_the_prefix() {
    let server = McpTestServer::start().await;
    let listed = mcp::list_tools(&mcp_config(&server, "counter"), &loopback_mcp())
        .await
        .unwrap();
    assert_eq!(listed.left_out, [], "every tool name is usable");
    let tools = listed.usable;
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "counter__increment",
            "counter__fail",
            "counter__echo",
            "counter__binary",
            "counter__chart"
        ]
    );
    assert_eq!(tools[0].description, "Add to the shared counter.");
    assert_eq!(
        tools[0].input_schema,
        json!({"type": "object", "properties": {"by": {"type": "integer"}}})
    );
    assert_eq!(server.tools_list_requests(), 1);
    assert_eq!(
        split_mcp_tool_name(&tools[0].name),
        Some(("counter", "increment"))
    );
}

#[tokio::test]
async fn mcp_call_tool_increments_exactly_once_and_returns_its_text() {
    let server = McpTestServer::start().await;
    let config = mcp_config(&server, "counter");
    let out = mcp::call_tool(&config, "increment", &json!({"by": 2}), &loopback_mcp()).await;
    assert_eq!(out, ToolOutput::success(json!("counter is now 2")));
    assert_eq!(server.increment_calls(), 1);
    assert_eq!(server.counter(), 2);
}

#[tokio::test]
async fn mcp_is_error_maps_to_is_error() {
    let server = McpTestServer::start().await;
    let out = mcp::call_tool(
        &mcp_config(&server, "counter"),
        "fail",
        &json!({}),
        &loopback_mcp(),
    )
    .await;
    assert_eq!(
        out,
        ToolOutput::error("the fail tool failed, as it always does")
    );
}

#[tokio::test]
async fn mcp_structured_content_is_kept() {
    let server = McpTestServer::start().await;
    let out = mcp::call_tool(
        &mcp_config(&server, "counter"),
        "echo",
        &json!({"message": "hi"}),
        &loopback_mcp(),
    )
    .await;
    assert!(!out.is_error);
    assert_eq!(
        out.output,
        json!({"content": "{\"message\":\"hi\"}", "structured_content": {"message": "hi"}})
    );
}

#[tokio::test]
async fn mcp_protocol_errors_and_bad_arguments_are_error_outputs() {
    let server = McpTestServer::start().await;
    let config = mcp_config(&server, "counter");
    let limits = loopback_mcp();

    let unknown = mcp::call_tool(&config, "nope", &json!({}), &limits).await;
    assert!(error_message(&unknown).contains("unknown tool"));

    let not_object = mcp::call_tool(&config, "increment", &json!([1]), &limits).await;
    assert!(error_message(&not_object).contains("must be a JSON object"));
    assert_eq!(server.increment_calls(), 0);
}

#[tokio::test]
async fn mcp_tool_list_is_cached_within_the_ttl() {
    let server = McpTestServer::start().await;
    let registry = McpRegistry::new(McpLimits {
        list_ttl: Duration::from_secs(600),
        ..loopback_mcp()
    });
    let config = mcp_config(&server, "counter");

    // Concurrent first uses share one listing.
    let (a, b) = tokio::join!(registry.list_tools(&config), registry.list_tools(&config));
    assert_eq!(a.unwrap(), b.unwrap());
    assert_eq!(server.tools_list_requests(), 1);

    // Within the TTL: no request, also under another prefix (same url and headers).
    let again = registry.list_tools(&config).await.unwrap().usable;
    assert_eq!(again.len(), 5, "the server's five tools");
    let renamed = registry
        .list_tools(&mcp_config(&server, "other"))
        .await
        .unwrap()
        .usable;
    assert_eq!(renamed[0].name, "other__increment");
    assert_eq!(server.tools_list_requests(), 1);

    // Other headers are another cache entry.
    let mut with_headers = config.clone();
    with_headers.headers.insert("X-Tenant".into(), "t2".into());
    registry.list_tools(&with_headers).await.unwrap();
    assert_eq!(server.tools_list_requests(), 2);

    // Invalidation forces a new listing.
    registry.invalidate(&config);
    registry.list_tools(&config).await.unwrap();
    assert_eq!(server.tools_list_requests(), 3);

    // An expired entry is listed again.
    let no_cache = McpRegistry::new(McpLimits {
        list_ttl: Duration::ZERO,
        ..loopback_mcp()
    });
    no_cache.list_tools(&config).await.unwrap();
    no_cache.list_tools(&config).await.unwrap();
    assert_eq!(server.tools_list_requests(), 5);
}

#[tokio::test]
async fn mcp_headers_from_config_reach_the_server() {
    let server = McpTestServer::start().await;
    let config = McpServerConfig {
        name: "counter".into(),
        url: server.url.clone(),
        headers: BTreeMap::from([
            ("Authorization".into(), "Bearer secret-token".into()),
            ("X-Tenant".into(), "t1".into()),
        ]),
    };
    // Outside the safe set: the server is not called at all.
    let mut unsafe_config = config.clone();
    unsafe_config
        .headers
        .insert("Metadata-Flavor".into(), "Google".into());
    let out = mcp::call_tool(&unsafe_config, "increment", &json!({}), &loopback_mcp()).await;
    assert!(error_message(&out).contains("Metadata-Flavor"), "{out:?}");
    assert_eq!(server.increment_calls(), 0, "called with a refused header");
    let out = mcp::call_tool(&config, "increment", &json!({}), &loopback_mcp()).await;
    assert!(!out.is_error, "{out:?}");
    let tenants = server.header_values("x-tenant");
    assert!(!tenants.is_empty());
    assert!(tenants.iter().all(|v| v == "t1"), "{tenants:?}");
    assert!(server
        .header_values("authorization")
        .iter()
        .all(|v| v == "Bearer secret-token"));
}

#[tokio::test]
async fn mcp_call_waits_while_held_and_answers_once_released() {
    let server = McpTestServer::start().await;
    server.hold_calls();
    let config = mcp_config(&server, "counter");
    let calling = tokio::spawn(async move {
        mcp::call_tool(&config, "increment", &json!({}), &loopback_mcp()).await
    });
    server.wait_for_increment_calls(1).await;
    assert_eq!(server.counter(), 1, "counted before answering");
    assert!(!calling.is_finished(), "answered while held");
    server.release_calls();
    let out = calling.await.unwrap();
    assert_eq!(out, ToolOutput::success(json!("counter is now 1")));
    assert_eq!(server.increment_calls(), 1);
}

#[tokio::test]
async fn mcp_call_timeout_is_an_error_output_and_not_retried() {
    let server = McpTestServer::start().await;
    server.hold_calls();
    let limits = McpLimits {
        call_timeout: Duration::from_millis(500),
        ..loopback_mcp()
    };
    let out = mcp::call_tool(
        &mcp_config(&server, "counter"),
        "increment",
        &json!({}),
        &limits,
    )
    .await;
    let message = error_message(&out);
    assert!(message.contains("timed out"), "{message}");
    assert!(message.contains("unknown"), "{message}");
    assert_eq!(server.increment_calls(), 1);
}

#[tokio::test]
async fn mcp_unreachable_server_is_an_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let config = McpServerConfig {
        name: "gone".into(),
        url: format!("http://{addr}/mcp"),
        headers: BTreeMap::new(),
    };
    let limits = McpLimits {
        list_timeout: Duration::from_secs(10),
        call_timeout: Duration::from_secs(10),
        ..loopback_mcp()
    };
    let listed = mcp::list_tools(&config, &limits).await;
    assert!(listed.is_err());
    let out = mcp::call_tool(&config, "increment", &json!({}), &limits).await;
    assert!(error_message(&out).contains("not called"), "{out:?}");
}

#[test]
fn schema_validation_accepts_valid_input_and_names_the_failing_path() {
    let schema = web_fetch_definition().input_schema;
    assert_eq!(
        validate_input(&schema, &json!({"url": "https://example.com"})),
        Ok(())
    );
    let message = validate_input(&schema, &json!({"url": 5})).unwrap_err();
    assert!(message.contains("at /url:"), "{message}");
    let message = validate_input(&schema, &json!({})).unwrap_err();
    assert!(
        message.contains("at (root):") && message.contains("url"),
        "{message}"
    );

    let nested = json!({
        "type": "object",
        "properties": {"items": {"type": "array", "items": {
            "type": "object",
            "properties": {"count": {"type": "integer"}},
            "required": ["count"]
        }}}
    });
    assert_eq!(
        validate_input(&nested, &json!({"items": [{"count": 1}]})),
        Ok(())
    );
    let message =
        validate_input(&nested, &json!({"items": [{"count": 1}, {"count": "3"}]})).unwrap_err();
    assert!(message.contains("at /items/1/count:"), "{message}");
}

/// Validators are compiled once per schema and kept (a bounded cache):
/// each schema must keep its own answer, before and after it is evicted,
/// and a broken schema must not be remembered as a working one.
#[test]
fn schema_validation_gives_each_schema_its_own_answer_across_repeated_calls() {
    let integer_count = |kind: &str| json!({"type": "object", "properties": {"count": {"type": kind}}, "required": ["count"]});
    let input = json!({"count": 3});
    for _ in 0..2 {
        assert_eq!(validate_input(&integer_count("integer"), &input), Ok(()));
        let message = validate_input(&integer_count("string"), &input).unwrap_err();
        assert!(message.contains("at /count:"), "{message}");
    }
    // More distinct schemas than the cache keeps, then the first again.
    for n in 0..300 {
        let schema = json!({"type": "object", "properties": {"count": {"maximum": n}}});
        assert_eq!(validate_input(&schema, &json!({"count": n})), Ok(()));
        assert!(validate_input(&schema, &json!({"count": n + 1})).is_err());
    }
    assert_eq!(validate_input(&integer_count("integer"), &input), Ok(()));
    assert!(validate_input(&integer_count("string"), &input).is_err());
    // A schema too large to keep is compiled at each call, with the same
    // answers.
    let mut large = integer_count("integer");
    large["description"] = json!("x".repeat(10_000));
    for _ in 0..2 {
        assert_eq!(validate_input(&large, &input), Ok(()));
        assert!(validate_input(&large, &json!({"count": "3"})).is_err());
    }
    for _ in 0..2 {
        let message = validate_input(&json!({"type": 12}), &input).unwrap_err();
        assert!(
            message.contains("input_schema is not a valid JSON Schema"),
            "{message}"
        );
    }
}

#[test]
fn schema_validation_reports_an_invalid_schema_without_panicking() {
    for schema in [
        json!({"type": 12}),
        json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "("}}}),
        json!({"$ref": "https://schemas.invalid/tool.json"}),
        json!({"$ref": "#/$defs/missing"}),
    ] {
        let message = validate_input(&schema, &json!({"a": "x"})).unwrap_err();
        assert!(
            message.contains("input_schema is not a valid JSON Schema"),
            "{schema}: {message}"
        );
    }
}
