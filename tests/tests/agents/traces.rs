//! OpenTelemetry traces (docs/api.md, "Tracing"), received by an in-process
//! OTLP/HTTP collector from real worker processes: one trace per turn under
//! the input's `traceparent`, one span per step attempt even across a
//! SIGKILL, GenAI attributes on model and tool spans, and the trace context
//! carried on to an MCP server.

use std::time::Duration;

use holdfast_db::store;
use holdfast_fakes::{FakeProvider, Reply};
use holdfast_telemetry::TraceHeaders;
use holdfast_tests::api_server::{error_of, project_key, ApiServer};
use holdfast_tests::mcp_server::McpTestServer;
use holdfast_tests::otlp_receiver::{OtlpReceiver, ReceivedSpan};
use holdfast_tests::scenario::{agent_with_input, event_types, spawn_worker, wait_for_event};
use holdfast_tests::tls_server::PrivateCa;
use holdfast_tests::webhook_receiver::{spawn_maintenance, Behaviour, Receiver};
use holdfast_tests::{default_config, project_and_agent, wait_until, MaintenanceLoop, TestDb};
use holdfast_wire::domain::{InputMode, ModelStep};
use reqwest::Method;
use serde_json::json;

/// The dated snapshot the fake names as the model that answered.
const ANSWERED_BY: &str = "claude-test-20260101";

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_ID: &str = "00f067aa0ba902b7";
const T: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_turn_across_a_worker_kill_is_one_trace_under_the_inputs_traceparent() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let receiver = OtlpReceiver::start().await;
    let fake = FakeProvider::start().await;
    let mcp = McpTestServer::start().await;
    let api = ApiServer::start(&db).await;
    let (project, key) = project_key(&client).await;
    let mut config = default_config();
    config["tools"] = json!([{"type": "mcp", "name": "calc", "url": mcp.url}]);
    let agent = store::create_agent(&client, project, &config)
        .await
        .unwrap();

    // The first attempt's model call is held until its worker is killed.
    fake.push(Reply::hang());
    fake.push(
        Reply::tool_calls(vec![("calc__increment", json!({"by": 2}))])
            .usage(120, 7)
            .answered_by(ANSWERED_BY),
    );
    fake.push(
        Reply::text("The counter is 2.")
            .usage(150, 9)
            .answered_by(ANSWERED_BY),
    );
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint.as_str()),
        ("OTEL_SERVICE_NAME", "holdfast-worker"),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ("HOLDFAST_EGRESS_ALLOW", "mcp=127.0.0.1"),
    ];
    let mut first = spawn_worker("traced-w1", &db.config, &fake, &env);
    let response = api
        .request(Method::POST, &format!("/v1/agents/{agent}/inputs"), &key)
        .header("traceparent", format!("00-{TRACE_ID}-{PARENT_ID}-01"))
        .header("tracestate", "vendor=opaque")
        .json(&json!({"content": "add two"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    fake.wait_until_held(1).await;
    first.signal("KILL");
    assert_eq!(first.wait_exit(Duration::from_secs(10)).await, None);

    let _maintenance = MaintenanceLoop::start(&db.config);
    let mut second = spawn_worker("traced-w2", &db.config, &fake, &env);
    wait_for_event(&client, agent, "turn.completed", Duration::from_secs(30)).await;
    second.signal("TERM");
    assert_eq!(second.wait_exit(Duration::from_secs(15)).await, Some(0));

    // The drained worker exported everything before it exited.
    let spans = receiver.spans();
    let steps: Vec<&ReceivedSpan> = spans
        .iter()
        .filter(|s| s.span.name == "holdfast.step")
        .collect();
    assert!(!steps.is_empty(), "no step spans: {spans:#?}");
    for span in &spans {
        assert_eq!(span.service, "holdfast-worker");
        assert_eq!(
            span.trace_id(),
            TRACE_ID,
            "{}: one trace per turn",
            span.span.name
        );
    }
    for step in &steps {
        assert_eq!(
            step.parent_span_id(),
            PARENT_ID,
            "a step's parent is the input's span"
        );
    }
    // One span per attempt: every epoch once, none replayed.
    let mut epochs: Vec<i64> = steps
        .iter()
        .map(|s| {
            s.attribute("holdfast.lease.epoch")
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    epochs.sort();
    let distinct = {
        let mut d = epochs.clone();
        d.dedup();
        d
    };
    assert_eq!(epochs, distinct, "an attempt's span was emitted twice");
    let attempt = |epoch: i64| {
        steps
            .iter()
            .find(|s| s.attribute("holdfast.lease.epoch") == Some(epoch.to_string()))
            .unwrap_or_else(|| panic!("no span for the attempt of epoch {epoch}: {steps:#?}"))
    };
    // The killed attempt's span, emitted by the attempt that retried it,
    // which links to it.
    let lost = attempt(1);
    assert_eq!(
        lost.attribute("holdfast.step.outcome").as_deref(),
        Some("lost")
    );
    // A reap moves the epoch on, so the retry's claim is a later epoch.
    let retry = attempt(epochs[1]);
    assert_eq!(
        retry.attribute("holdfast.step.outcome").as_deref(),
        Some("committed")
    );
    assert_eq!(retry.span.links.len(), 1, "{retry:#?}");
    assert_eq!(retry.span.links[0].span_id, lost.span.span_id);
    assert_eq!(hex::encode(&retry.span.links[0].trace_id), TRACE_ID);
    // The trace state came along.
    assert_eq!(retry.span.trace_state, "vendor=opaque");

    let mut chats: Vec<&ReceivedSpan> = spans
        .iter()
        .filter(|s| s.span.name == "chat claude-test")
        .collect();
    chats.sort_by_key(|s| s.span.start_time_unix_nano);
    let usage: Vec<(Option<String>, Option<String>)> = chats
        .iter()
        .map(|s| {
            (
                s.attribute("gen_ai.usage.input_tokens"),
                s.attribute("gen_ai.usage.output_tokens"),
            )
        })
        .collect();
    assert_eq!(
        usage,
        [
            (Some("120".into()), Some("7".into())),
            (Some("150".into()), Some("9".into()))
        ],
        "the model calls that answered, with their token usage"
    );
    for chat in &chats {
        assert_eq!(
            chat.attribute("gen_ai.operation.name").as_deref(),
            Some("chat")
        );
        assert_eq!(
            chat.attribute("gen_ai.provider.name").as_deref(),
            Some("anthropic")
        );
        assert_eq!(
            chat.attribute("gen_ai.request.model").as_deref(),
            Some("claude-test")
        );
        assert_eq!(
            chat.attribute("gen_ai.response.model").as_deref(),
            Some(ANSWERED_BY),
            "the model the response named"
        );
        assert!(
            steps
                .iter()
                .any(|s| s.span.span_id == chat.span.parent_span_id),
            "a model call is a child of its attempt"
        );
    }

    let tool = spans
        .iter()
        .find(|s| s.span.name == "execute_tool calc__increment")
        .unwrap_or_else(|| panic!("no tool span: {spans:#?}"));
    assert_eq!(
        tool.attribute("gen_ai.tool.name").as_deref(),
        Some("calc__increment")
    );
    assert!(tool
        .attribute("gen_ai.tool.call.id")
        .is_some_and(|id| !id.is_empty()));
    // The tool server's scheme, host and port, never its path.
    let server = reqwest::Url::parse(&mcp.url).unwrap();
    assert_eq!(
        tool.attribute("server.address").as_deref(),
        server.host_str()
    );
    assert_eq!(
        tool.attribute("server.port"),
        server.port().map(|port| port.to_string())
    );
    assert_no_attribute_holds(tool, &[server.path()]);
    // The MCP call carried the tool span as its parent.
    let expected = format!("00-{TRACE_ID}-{}-01", tool.span_id());
    let sent = mcp.header_values("traceparent");
    assert!(
        sent.contains(&expected),
        "MCP requests carried {sent:?}, not {expected}"
    );
    assert_eq!(mcp.counter(), 2);
    // No span holds the prompt, the reply, a tool's input or output, or a
    // key (the project's API key, the worker's provider key).
    for span in &spans {
        assert_no_attribute_holds(
            span,
            &[
                "add two",
                "The counter is 2.",
                "{\"by\":2}",
                "counter is now",
                &key,
                "test-key",
            ],
        );
    }
}

#[tokio::test]
async fn a_malformed_traceparent_is_refused_naming_the_header() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let api = ApiServer::start(&db).await;
    let (project, key) = project_key(&client).await;
    let agent = store::create_agent(&client, project, &default_config())
        .await
        .unwrap();
    for (header, value) in [
        ("traceparent", format!("00-{TRACE_ID}-{PARENT_ID}")),
        (
            "traceparent",
            format!("00-{}-{PARENT_ID}-01", "0".repeat(32)),
        ),
        ("tracestate", "no equals sign".to_owned()),
    ] {
        let mut request = api
            .request(Method::POST, &format!("/v1/agents/{agent}/inputs"), &key)
            .json(&json!({"content": "hi"}));
        request = if header == "traceparent" {
            request.header("traceparent", value.as_str())
        } else {
            request
                .header("traceparent", format!("00-{TRACE_ID}-{PARENT_ID}-01"))
                .header("tracestate", value.as_str())
        };
        let (status, kind, message, field) = error_of(request.send().await.unwrap()).await;
        assert_eq!(status, 400, "{header}: {value}");
        assert_eq!(kind, "invalid_request");
        assert_eq!(field.as_deref(), Some(header), "{message}");
    }
    let inputs: i64 = client
        .query_one(
            "SELECT count(*) FROM holdfast.inputs WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(inputs, 0, "a refused input changes nothing");
}

#[tokio::test]
async fn an_input_that_arrives_during_a_step_opens_the_next_turn_under_its_own_trace() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let (_, agent) = project_and_agent(&client).await;
    let trace = |parent: &str| TraceHeaders::parse(parent, None).unwrap();
    let first = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let second = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let opening = store::create_traced_input(
        &client,
        agent,
        &json!("one"),
        None,
        Some(&trace(first)),
        InputMode::Steer,
    )
    .await
    .unwrap();
    let claim = store::claim_agents(&client, "w", 1, Duration::from_secs(60))
        .await
        .unwrap()[0];
    let turn_trace = || async {
        client
            .query_one(
                "SELECT turn_trace_parent FROM holdfast.agents WHERE id = $1",
                &[&agent],
            )
            .await
            .unwrap()
            .get::<_, Option<String>>(0)
    };
    assert_eq!(turn_trace().await.as_deref(), Some(first));
    // The second input comes while the model answers the first: the step's
    // commit ends the turn and opens the next in one agent UPDATE.
    store::create_traced_input(
        &client,
        agent,
        &json!("two"),
        None,
        Some(&trace(second)),
        InputMode::Steer,
    )
    .await
    .unwrap();
    let step = ModelStep {
        input_ids: vec![opening.input_id],
        message: vec![json!({"type": "text", "text": "done"})],
        tool_calls: vec![],
        usage: json!({}),
        stop_reason: Some("end_turn".into()),
        config_version: None,
    };
    store::commit_model_step(&client, claim, &step)
        .await
        .unwrap();
    assert_eq!(
        event_types(&client, agent).await.last().map(String::as_str),
        Some("turn.started"),
        "the commit opened the next turn"
    );
    assert_eq!(
        turn_trace().await.as_deref(),
        Some(second),
        "the next turn is the trace of the input that opened it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_webhook_delivery_is_a_span_of_its_events_turn_and_sends_that_spans_traceparent() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let otlp = OtlpReceiver::start().await;
    let fake = FakeProvider::start().await;
    let api = ApiServer::start(&db).await;
    let (project, key) = project_key(&client).await;
    let agent = store::create_agent(&client, project, &default_config())
        .await
        .unwrap();
    let receiver = Receiver::start(Behaviour::Accept).await;
    // A token in the query: kept out of the span.
    let url = format!("{}?token=endpoint-secret", receiver.url());
    let endpoint = store::create_webhook_endpoint(
        &client,
        project,
        &url,
        &json!(["turn.completed"]),
        None,
        true,
    )
    .await
    .unwrap();
    receiver.set_secret(&endpoint.secret);
    fake.push(Reply::text("Done."));
    let _worker = spawn_worker("traced-hooks", &db.config, &fake, &[]);
    let response = api
        .request(Method::POST, &format!("/v1/agents/{agent}/inputs"), &key)
        .header("traceparent", format!("00-{TRACE_ID}-{PARENT_ID}-01"))
        .json(&json!({"content": "do it"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);

    let mut maintenance = spawn_maintenance(
        &db.url(),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.endpoint.as_str()),
            ("OTEL_SERVICE_NAME", "holdfast-maintenance"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    wait_until(T, "the turn.completed webhook arrives", || async {
        receiver.count() >= 1
    })
    .await;
    // SIGTERM: the exporter flushes before the process exits.
    let pid = maintenance.id().expect("running").to_string();
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    assert!(maintenance.wait().await.unwrap().success());

    let spans = otlp.spans();
    let deliveries: Vec<&ReceivedSpan> = spans.iter().filter(|s| s.span.name == "POST").collect();
    assert_eq!(deliveries.len(), 1, "one attempt, one span: {spans:#?}");
    let delivery = deliveries[0];
    assert_eq!(delivery.service, "holdfast-maintenance");
    assert_eq!(delivery.trace_id(), TRACE_ID, "the event's turn's trace");
    assert_eq!(
        delivery.parent_span_id(),
        PARENT_ID,
        "a child of the input's span"
    );
    assert_eq!(
        delivery.attribute("http.response.status_code").as_deref(),
        Some("200")
    );
    assert_eq!(
        delivery.attribute("holdfast.event.type").as_deref(),
        Some("turn.completed")
    );
    // The endpoint's scheme, host and port; never its path or query,
    // where Slack- and Discord-style webhook URLs carry their secret.
    assert_eq!(delivery.attribute("url.scheme").as_deref(), Some("http"));
    assert_eq!(
        delivery.attribute("server.address").as_deref(),
        Some("127.0.0.1")
    );
    assert_eq!(
        delivery.attribute("server.port"),
        Some(receiver.addr.port().to_string())
    );
    assert_no_attribute_holds(delivery, &["/hook", "endpoint-secret"]);
    let received = receiver.received();
    assert_eq!(
        received[0].traceparent.as_deref(),
        Some(format!("00-{TRACE_ID}-{}-01", delivery.span_id()).as_str()),
        "the request names the delivery's span"
    );
}

/// No attribute of `span` contains any of `secrets`.
fn assert_no_attribute_holds(span: &ReceivedSpan, secrets: &[&str]) {
    for attribute in &span.span.attributes {
        let value = span.attribute(&attribute.key).unwrap_or_default();
        for secret in secrets {
            assert!(
                !value.contains(secret),
                "{} = {value:?} holds {secret:?}",
                attribute.key
            );
        }
    }
}

/// An OTLP collector whose certificate a private CA signed: a worker
/// trusting the operating system's roots only breaks off the handshake and
/// delivers nothing; a worker given the CA as `HOLDFAST_CA_BUNDLE` exports
/// its spans to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_otlp_collector_signed_by_a_private_ca_is_trusted_only_with_the_ca_bundle() {
    let ca = PrivateCa::new();
    let (listener, endpoint) = ca.listener().await;
    let mut handshakes = listener.handshakes();
    let receiver = OtlpReceiver::serve(listener, endpoint.clone());
    let fake = FakeProvider::start().await;
    let traced = |service: &'static str| {
        vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.clone()),
            ("OTEL_SERVICE_NAME", service.to_owned()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100".to_owned()),
        ]
    };

    let untrusting_db = TestDb::new().await;
    let client = untrusting_db.connect().await;
    let env = traced("worker-without-the-ca");
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let _untrusting = spawn_worker("traced-no-ca", &untrusting_db.config, &fake, &env);
    let agent = agent_with_input(&client, "hello").await;
    wait_for_event(&client, agent, "turn.completed", T).await;
    handshakes.wait_for_one(T).await;
    assert!(receiver.spans().is_empty(), "{:?}", receiver.spans());

    let trusting_db = TestDb::new().await;
    let client = trusting_db.connect().await;
    let mut env = traced("worker-with-the-ca");
    env.push(("HOLDFAST_CA_BUNDLE", ca.ca_file.display().to_string()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let _trusting = spawn_worker("traced-ca", &trusting_db.config, &fake, &env);
    let agent = agent_with_input(&client, "hello").await;
    wait_for_event(&client, agent, "turn.completed", T).await;
    let spans = receiver
        .wait_for(T, "the step's span over TLS", |spans| {
            spans.iter().any(|s| s.span.name == "holdfast.step")
        })
        .await;
    assert!(
        spans.iter().all(|s| s.service == "worker-with-the-ca"),
        "{:?}",
        spans.iter().map(|s| &s.service).collect::<Vec<_>>()
    );
}
