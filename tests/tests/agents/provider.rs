//! The provider clients against the fake provider, over real sockets: wire
//! shapes, streaming assembly, error classes, retry hints, timeouts and
//! cancellation, for both the Anthropic and the OpenAI protocol.

use holdfast_providers::egress::EgressPolicy;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use holdfast_fakes::{FakeProvider, Protocol, Reply};
use holdfast_providers::{
    ContentBlock, Delta, DeltaKind, Message, ModelError, ModelRequest, ModelResponse, ModelTarget,
    ProviderSettings, Providers, Role, ToolDefinition,
};
use holdfast_wire::config::{ModelConfig, Provider, ReasoningEffort, ServiceTier, Thinking};
use serde_json::{json, Value};
use tokio::sync::mpsc;

const BOTH: [Provider; 2] = [Provider::Anthropic, Provider::Openai];

fn settings(fake: &FakeProvider) -> ProviderSettings {
    ProviderSettings {
        anthropic_base_url: fake.base_url_anthropic(),
        anthropic_api_key: Some("sk-ant-test".into()),
        openai_base_url: fake.base_url_openai(),
        openai_api_key: Some("sk-openai-test".into()),
        idle_timeout: Duration::from_secs(10),
        ..ProviderSettings::default()
    }
}

fn providers(fake: &FakeProvider) -> Providers {
    Providers::new(settings(fake)).unwrap()
}

fn text(role: Role, t: &str) -> Message {
    Message {
        role,
        content: vec![ContentBlock::Text { text: t.into() }],
    }
}

fn request(provider: Provider) -> ModelRequest {
    ModelRequest {
        model: ModelConfig::new(provider, "test-model"),
        system: Some("You are terse.".into()),
        messages: vec![text(Role::User, "What is the weather in Zürich?")],
        tools: vec![ToolDefinition {
            name: "get_weather".into(),
            description: "Current weather for a city".into(),
            input_schema: json!({
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            }),
        }],
        provider_tools: vec![],
    }
}

/// Run one call, collecting the live deltas it sent.
async fn complete(
    providers: &Providers,
    request: &ModelRequest,
) -> (Result<ModelResponse, ModelError>, Vec<Delta>) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let target = providers.default_target(request.model.provider);
    let result = providers.complete(request, &target, Some(&tx)).await;
    drop(tx);
    let mut deltas = Vec::new();
    while let Some(delta) = rx.recv().await {
        deltas.push(delta);
    }
    (result, deltas)
}

/// The deltas of `kind`, joined.
fn joined(deltas: &[Delta], kind: DeltaKind) -> String {
    deltas
        .iter()
        .filter(|d| d.kind == kind)
        .map(|d| d.text.as_str())
        .collect()
}

fn expect_retryable(result: Result<ModelResponse, ModelError>, kind: &str) -> Option<Duration> {
    match result {
        Err(ModelError::Retryable {
            kind: got,
            retry_after,
            message,
        }) => {
            assert_eq!(got, kind, "kind (message: {message})");
            retry_after
        }
        other => panic!("expected Retryable {kind}, got {other:?}"),
    }
}

fn expect_fatal(result: Result<ModelResponse, ModelError>, error_type: &str) {
    match result {
        Err(ModelError::Fatal {
            error_type: got, ..
        }) => assert_eq!(got, error_type),
        other => panic!("expected Fatal {error_type}, got {other:?}"),
    }
}

fn expect_context_too_long(result: Result<ModelResponse, ModelError>) {
    assert!(
        matches!(result, Err(ModelError::ContextTooLong { .. })),
        "expected ContextTooLong, got {result:?}"
    );
}

#[tokio::test]
async fn text_deltas_concatenate_to_the_final_text() {
    let fake = FakeProvider::start().await;
    let providers = providers(&fake);
    let answer = "It is sunny and 21 °C in Zürich today.";
    for provider in BOTH {
        fake.push(Reply::text(answer).usage(120, 11));
        let (result, deltas) = complete(&providers, &request(provider)).await;
        let response = result.unwrap();
        assert!(deltas.len() > 3, "{provider:?} streamed {deltas:?}");
        assert_eq!(joined(&deltas, DeltaKind::Text), answer);
        assert_eq!(
            response.content,
            vec![ContentBlock::Text {
                text: answer.into()
            }]
        );
        assert_eq!(response.stop_reason.as_deref(), Some("end_turn"));
        assert_eq!(response.usage.input_tokens, 120);
        assert_eq!(response.usage.output_tokens, 11);
    }
}

async fn assert_tool_calls_assemble(provider: Provider) {
    let fake = FakeProvider::start().await;
    let providers = providers(&fake);
    let weather = json!({"city": "Zürich", "units": {"temp": "celsius"}, "days": [1, 2, 3]});
    let search = json!({"query": "quoted \"text\" and \\ backslash", "limit": 5});
    fake.push(Reply::text_and_tool_calls(
        "Let me check.",
        vec![("get_weather", weather.clone()), ("search", search.clone())],
    ));
    let (result, deltas) = complete(&providers, &request(provider)).await;
    let response = result.unwrap();
    assert_eq!(
        joined(&deltas, DeltaKind::Text),
        "Let me check.",
        "only text goes live"
    );
    assert_eq!(response.stop_reason.as_deref(), Some("tool_use"));
    assert_eq!(response.content.len(), 3);
    assert_eq!(
        response.content[0],
        ContentBlock::Text {
            text: "Let me check.".into()
        }
    );
    let calls: Vec<(&str, &str, &Value)> = response.content[1..]
        .iter()
        .map(|b| match b {
            ContentBlock::ToolUse { id, name, input } => (id.as_str(), name.as_str(), input),
            other => panic!("expected tool_use, got {other:?}"),
        })
        .collect();
    assert_eq!(calls[0].1, "get_weather");
    assert_eq!(calls[0].2, &weather);
    assert_eq!(calls[1].1, "search");
    assert_eq!(calls[1].2, &search);
    assert!(
        !calls[0].0.is_empty() && calls[0].0 != calls[1].0,
        "distinct ids"
    );
}

#[tokio::test]
async fn anthropic_input_json_delta_fragments_assemble_into_json() {
    assert_tool_calls_assemble(Provider::Anthropic).await;
}

#[tokio::test]
async fn openai_tool_call_fragments_assemble_into_json() {
    assert_tool_calls_assemble(Provider::Openai).await;
}

#[tokio::test]
async fn anthropic_thinking_is_requested_kept_signed_and_streamed_as_its_own_kind() {
    let fake = FakeProvider::start().await;
    let providers = providers(&fake);
    let mut req = request(Provider::Anthropic);
    req.model.max_tokens = Some(16000);
    req.model.thinking = Some(Thinking::Enabled {
        budget_tokens: 10000,
    });
    let thinking = json!({"type": "thinking", "thinking": "Bern is in Switzerland, so Celsius.",
                          "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"});
    let redacted = json!({"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT"});
    let call = json!({"type": "tool_use", "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
                      "name": "get_weather", "input": {"city": "Bern"}});
    fake.push(Reply::anthropic_blocks(vec![
        thinking.clone(),
        redacted.clone(),
        call.clone(),
    ]));
    let (result, deltas) = complete(&providers, &req).await;
    let response = result.unwrap();

    let sent = &fake.requests()[0].body;
    assert_eq!(
        sent["thinking"],
        json!({"type": "enabled", "budget_tokens": 10000})
    );
    assert_eq!(sent["max_tokens"], 16000);
    assert_eq!(
        response.content,
        vec![
            ContentBlock::Raw(thinking),
            ContentBlock::Raw(redacted),
            ContentBlock::ToolUse {
                id: "toolu_01T1x1fJ34qAmk2tNTrN7Up6".into(),
                name: "get_weather".into(),
                input: json!({"city": "Bern"}),
            },
        ],
        "thinking assembled from its deltas, with its signature"
    );
    assert_eq!(response.stop_reason.as_deref(), Some("tool_use"));
    assert_eq!(
        joined(&deltas, DeltaKind::Thinking),
        "Bern is in Switzerland, so Celsius."
    );
    assert_eq!(joined(&deltas, DeltaKind::Text), "", "no answer text yet");
    assert!(
        !deltas.iter().any(|d| d.text.contains("EqQB")),
        "signatures never stream live"
    );

    // Without `thinking` in the config, the request has none.
    fake.push(Reply::text("ok"));
    complete(&providers, &request(Provider::Anthropic))
        .await
        .0
        .unwrap();
    assert!(fake.requests()[1].body.get("thinking").is_none());
}

#[tokio::test]
async fn tool_calls_without_text_and_stop_reasons_are_normalised() {
    let fake = FakeProvider::start().await;
    let providers = providers(&fake);
    for provider in BOTH {
        fake.push(Reply::tool_calls(vec![("get_weather", json!({}))]));
        let response = providers
            .complete(
                &request(provider),
                &providers.default_target(request(provider).model.provider),
                None,
            )
            .await
            .unwrap();
        assert!(matches!(
            &response.content[..],
            [ContentBlock::ToolUse { input, .. }] if *input == json!({})
        ));
        assert_eq!(response.stop_reason.as_deref(), Some("tool_use"));

        fake.push(Reply::text("truncated").stop_reason("max_tokens"));
        let response = providers
            .complete(
                &request(provider),
                &providers.default_target(request(provider).model.provider),
                None,
            )
            .await
            .unwrap();
        assert_eq!(
            response.stop_reason.as_deref(),
            Some("max_tokens"),
            "{provider:?}"
        );
    }
}

#[tokio::test]
async fn error_statuses_map_to_their_error_classes() {
    let fake = FakeProvider::start().await;
    let providers = providers(&fake);
    for provider in BOTH {
        let req = request(provider);
        let before = fake.request_count();
        for (status, class) in [(401, "authentication_error"), (403, "authentication_error")] {
            fake.push(Reply::status(status));
            expect_fatal(
                providers
                    .complete(&req, &providers.default_target(req.model.provider), None)
                    .await,
                class,
            );
        }
        fake.push(Reply::status(402));
        expect_fatal(
            providers
                .complete(&req, &providers.default_target(req.model.provider), None)
                .await,
            "billing_error",
        );
        for status in [400, 404, 422] {
            fake.push(Reply::status(status));
            expect_fatal(
                providers
                    .complete(&req, &providers.default_target(req.model.provider), None)
                    .await,
                "invalid_request_error",
            );
        }
        fake.push(Reply::status(429));
        expect_retryable(
            providers
                .complete(&req, &providers.default_target(req.model.provider), None)
                .await,
            "rate_limit_error",
        );
        fake.push(Reply::status(529));
        expect_retryable(
            providers
                .complete(&req, &providers.default_target(req.model.provider), None)
                .await,
            "overloaded_error",
        );
        for status in [500, 502, 503] {
            fake.push(Reply::status(status));
            expect_retryable(
                providers
                    .complete(&req, &providers.default_target(req.model.provider), None)
                    .await,
                "api_error",
            );
        }
        fake.push(Reply::status(504));
        expect_retryable(
            providers
                .complete(&req, &providers.default_target(req.model.provider), None)
                .await,
            "timeout_error",
        );
        // No hidden retries inside the client: one request per call.
        assert_eq!(fake.request_count() - before, 12, "{provider:?}");
    }
}

#[tokio::test]
async fn context_too_long_is_recognised_for_each_provider_and_behind_gateways() {
    let fake = FakeProvider::start().await;
    let providers = providers(&fake);
    for provider in BOTH {
        let req = request(provider);
        fake.push(Reply::context_too_long());
        expect_context_too_long(
            providers
                .complete(&req, &providers.default_target(req.model.provider), None)
                .await,
        );
        fake.push(Reply::status(413));
        expect_context_too_long(
            providers
                .complete(&req, &providers.default_target(req.model.provider), None)
                .await,
        );
    }
    // A gateway wrapping Anthropic's error in its own 5xx.
    let wrapped = json!({"error": {"message": json!({"type": "error", "error": {
        "type": "invalid_request_error",
        "message": "prompt is too long: 250000 tokens > 200000 maximum"}}).to_string(),
        "type": "None", "code": "500"}});
    fake.push(Reply::status(500).body(wrapped.to_string()));
    expect_context_too_long(
        providers
            .complete(
                &request(Provider::Openai),
                &providers.default_target(request(Provider::Openai).model.provider),
                None,
            )
            .await,
    );
    // An OpenAI-compatible server answering 503 with OpenAI's code.
    fake.push(Reply::status(503).body(
        r#"{"error":{"message":"too long","type":"invalid_request_error","code":"context_length_exceeded"}}"#,
    ));
    expect_context_too_long(
        providers
            .complete(
                &request(Provider::Anthropic),
                &providers.default_target(request(Provider::Anthropic).model.provider),
                None,
            )
            .await,
    );
}

#[tokio::test]
async fn an_exhausted_quota_429_is_billing_not_rate_limit() {
    let fake = FakeProvider::start().await;
    let providers = providers(&fake);
    fake.push(Reply::status(429).body(
        r#"{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#,
    ));
    expect_fatal(
        providers
            .complete(
                &request(Provider::Openai),
                &providers.default_target(request(Provider::Openai).model.provider),
                None,
            )
            .await,
        "billing_error",
    );
}

#[tokio::test]
async fn retry_after_seconds_and_http_dates_are_parsed() {
    let fake = FakeProvider::start().await;
    let providers = providers(&fake);
    for provider in BOTH {
        let req = request(provider);
        fake.push(Reply::status(429).retry_after_secs(7));
        let hint = expect_retryable(
            providers
                .complete(&req, &providers.default_target(req.model.provider), None)
                .await,
            "rate_limit_error",
        );
        assert_eq!(hint, Some(Duration::from_secs(7)));

        fake.push(Reply::status(529).retry_after_date(SystemTime::now() + Duration::from_secs(30)));
        let hint = expect_retryable(
            providers
                .complete(&req, &providers.default_target(req.model.provider), None)
                .await,
            "overloaded_error",
        )
        .expect("a hint from the HTTP date");
        // HTTP dates have whole seconds.
        assert!(
            hint > Duration::from_secs(28) && hint <= Duration::from_secs(30),
            "{hint:?}"
        );

        fake.push(Reply::status(503));
        let hint = expect_retryable(
            providers
                .complete(&req, &providers.default_target(req.model.provider), None)
                .await,
            "api_error",
        );
        assert_eq!(hint, None, "no header, no hint");
    }
}

#[tokio::test]
async fn rate_limit_reset_headers_give_the_retry_hint() {
    let fake = FakeProvider::start().await;
    let providers = providers(&fake);
    let reset = chrono::Utc::now() + chrono::Duration::seconds(45);
    fake.push(
        Reply::status(429)
            .header("anthropic-ratelimit-requests-remaining", "0")
            .header("anthropic-ratelimit-requests-reset", reset.to_rfc3339())
            .header("anthropic-ratelimit-tokens-remaining", "90000")
            .header(
                "anthropic-ratelimit-tokens-reset",
                (reset + chrono::Duration::seconds(600)).to_rfc3339(),
            ),
    );
    let hint = expect_retryable(
        providers
            .complete(
                &request(Provider::Anthropic),
                &providers.default_target(request(Provider::Anthropic).model.provider),
                None,
            )
            .await,
        "rate_limit_error",
    )
    .expect("a hint from the exhausted bucket's reset");
    assert!(
        hint > Duration::from_secs(40) && hint <= Duration::from_secs(45),
        "{hint:?}"
    );

    fake.push(
        Reply::status(429)
            .header("x-ratelimit-remaining-requests", "59")
            .header("x-ratelimit-reset-requests", "1s")
            .header("x-ratelimit-remaining-tokens", "0")
            .header("x-ratelimit-reset-tokens", "6m0s"),
    );
    let hint = expect_retryable(
        providers
            .complete(
                &request(Provider::Openai),
                &providers.default_target(request(Provider::Openai).model.provider),
                None,
            )
            .await,
        "rate_limit_error",
    );
    assert_eq!(hint, Some(Duration::from_secs(360)));
}

#[tokio::test]
async fn an_overloaded_error_mid_stream_is_retryable() {
    let fake = FakeProvider::start().await;
    let providers = providers(&fake);
    for (provider, kind) in [
        (Provider::Anthropic, "overloaded_error"),
        (Provider::Openai, "server_error"),
    ] {
        fake.push(Reply::text("one two three four").error_after_deltas(2));
        let (result, deltas) = complete(&providers, &request(provider)).await;
        expect_retryable(result, kind);
        assert_eq!(
            joined(&deltas, DeltaKind::Text),
            "one two ",
            "deltas before the error went live"
        );
    }
}

#[tokio::test]
async fn a_stream_cut_before_its_end_marker_is_retryable() {
    let fake = FakeProvider::start().await;
    let providers = providers(&fake);
    for provider in BOTH {
        fake.push(Reply::text("one two three four").cut_after_deltas(2));
        let (result, _) = complete(&providers, &request(provider)).await;
        expect_retryable(result, "incomplete_stream_error");

        // Cut in the middle of a tool call's input JSON.
        fake.push(
            Reply::tool_calls(vec![("get_weather", json!({"city": "Bern"}))]).cut_after_deltas(2),
        );
        let (result, _) = complete(&providers, &request(provider)).await;
        expect_retryable(result, "incomplete_stream_error");

        fake.push(Reply::text("one two three four").reset_after_deltas(1));
        let (result, _) = complete(&providers, &request(provider)).await;
        expect_retryable(result, "connection_error");
    }
}

#[tokio::test]
async fn a_hang_is_cut_by_the_idle_timeout() {
    let fake = FakeProvider::start().await;
    let providers = Providers::new(ProviderSettings {
        idle_timeout: Duration::from_millis(300),
        ..settings(&fake)
    })
    .unwrap();
    for provider in BOTH {
        // No response headers at all.
        fake.push(Reply::hang());
        let (result, _) = complete(&providers, &request(provider)).await;
        expect_retryable(result, "timeout_error");
        // Headers and some text, then silence.
        fake.push(Reply::text("one two three").hold_after_deltas(1));
        let (result, deltas) = complete(&providers, &request(provider)).await;
        expect_retryable(result, "timeout_error");
        assert_eq!(joined(&deltas, DeltaKind::Text), "one ");
    }
}

#[tokio::test]
async fn a_slow_stream_that_keeps_streaming_is_not_timed_out() {
    let fake = FakeProvider::start().await;
    let idle = Duration::from_secs(1);
    let providers = Providers::new(ProviderSettings {
        idle_timeout: idle,
        ..settings(&fake)
    })
    .unwrap();
    // 13 frames 100 ms apart: longer than the idle timeout in total.
    let answer = "a slow but steady stream of words";
    fake.push(Reply::text(answer).trickle(Duration::from_millis(100)));
    let started = std::time::Instant::now();
    let (result, deltas) = complete(&providers, &request(Provider::Anthropic)).await;
    assert!(started.elapsed() > idle);
    assert_eq!(joined(&deltas, DeltaKind::Text), answer);
    assert!(result.is_ok(), "{result:?}");
}

#[tokio::test]
async fn dropping_the_call_closes_the_connection() {
    let fake = FakeProvider::start().await;
    let providers = providers(&fake);
    let mut aborted = 0;
    for provider in BOTH {
        for reply in [
            Reply::hang(),
            Reply::text("one two three").hold_after_deltas(1),
        ] {
            fake.push(reply);
            let call = {
                let providers = providers.clone();
                tokio::spawn(async move {
                    providers
                        .complete(
                            &request(provider),
                            &providers.default_target(request(provider).model.provider),
                            None,
                        )
                        .await
                })
            };
            fake.wait_until_held(1).await;
            call.abort();
            aborted += 1;
            fake.wait_for_aborted(aborted).await;
        }
    }
}

#[tokio::test]
async fn a_refused_connection_is_retryable() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let providers = Providers::new(ProviderSettings {
        anthropic_base_url: base.clone(),
        openai_base_url: format!("{base}/v1"),
        ..ProviderSettings::default()
    })
    .unwrap();
    for provider in BOTH {
        let (result, _) = complete(&providers, &request(provider)).await;
        expect_retryable(result, "connection_error");
    }
}

#[tokio::test]
async fn a_custom_url_gets_the_project_key_and_never_the_operator_key() {
    let fake = FakeProvider::start().await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    // An agent's own base URL goes through the egress policy: the fake
    // listens on loopback, which the operator allows here.
    let providers = Providers::new(ProviderSettings {
        anthropic_base_url: dead.clone(),
        anthropic_api_key: Some("operator-anthropic".into()),
        openai_base_url: dead,
        openai_api_key: Some("operator-openai".into()),
        egress: Arc::new(EgressPolicy::parse("model=127.0.0.1").unwrap()),
        ..ProviderSettings::default()
    })
    .unwrap();
    for (provider, base, project_key) in [
        (Provider::Anthropic, fake.base_url_anthropic(), None),
        (
            Provider::Openai,
            format!("{}/", fake.base_url_openai()),
            Some("project-openai".to_owned()),
        ),
    ] {
        let target = ModelTarget::CustomUrl {
            base_url: base,
            project_key: project_key.clone(),
        };
        let response = providers
            .complete(&request(provider), &target, None)
            .await
            .unwrap();
        assert_eq!(
            response.content,
            vec![ContentBlock::Text { text: "ok".into() }]
        );
        let sent = fake.last_request().unwrap();
        let credential = sent
            .header("x-api-key")
            .or(sent.header("authorization"))
            .map(str::to_owned);
        assert_eq!(
            credential,
            project_key.map(|k| format!("Bearer {k}")),
            "only the project's key, never the operator's"
        );
    }
    assert_eq!(fake.request_count(), 2);
}

/// A history with everything the mapping must handle: text, a tool call
/// answered by two results (one an error with JSON output), and a steering
/// message saved after the results (two consecutive user messages).
fn rich_request(provider: Provider) -> ModelRequest {
    let mut req = request(provider);
    req.model.max_tokens = Some(1000);
    req.messages = vec![
        text(Role::User, "Weather in Zürich and Bern?"),
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Text {
                    text: "Checking both.".into(),
                },
                ContentBlock::ToolUse {
                    id: "call_1".into(),
                    name: "get_weather".into(),
                    input: json!({"city": "Zürich"}),
                },
                ContentBlock::ToolUse {
                    id: "call_2".into(),
                    name: "get_weather".into(),
                    input: json!({"city": "Bern"}),
                },
            ],
        },
        Message {
            role: Role::User,
            content: vec![
                ContentBlock::ToolResult {
                    tool_use_id: "call_1".into(),
                    content: json!("21 °C, sunny"),
                    is_error: false,
                },
                ContentBlock::ToolResult {
                    tool_use_id: "call_2".into(),
                    content: json!({"error": "station offline"}),
                    is_error: true,
                },
            ],
        },
        text(Role::User, "Also Geneva, please."),
    ];
    req
}

/// The Anthropic body of [`rich_request`] without prompt caching.
fn rich_anthropic_body() -> Value {
    json!({
        "model": "test-model",
        "max_tokens": 1000,
        "system": "You are terse.",
        "stream": true,
        "tools": [{
            "name": "get_weather",
            "description": "Current weather for a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        }],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Weather in Zürich and Bern?"}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Checking both."},
                {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Zürich"}},
                {"type": "tool_use", "id": "call_2", "name": "get_weather", "input": {"city": "Bern"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "21 °C, sunny"},
                {"type": "tool_result", "tool_use_id": "call_2", "content": "{\"error\":\"station offline\"}", "is_error": true},
                {"type": "text", "text": "Also Geneva, please."},
            ]},
        ],
    })
}

/// The body Anthropic got for `request`, with its headers checked.
async fn sent_to_anthropic(request: &ModelRequest) -> Value {
    let fake = FakeProvider::start().await;
    let providers = providers(&fake);
    providers
        .complete(
            request,
            &providers.default_target(request.model.provider),
            None,
        )
        .await
        .unwrap();
    let seen = fake.last_request().unwrap();
    assert_eq!(seen.protocol, Protocol::Anthropic);
    assert_eq!(seen.header("x-api-key"), Some("sk-ant-test"));
    assert_eq!(seen.header("anthropic-version"), Some("2023-06-01"));
    seen.body
}

#[tokio::test]
async fn anthropic_requests_have_the_documented_wire_shape() {
    let mut uncached = rich_request(Provider::Anthropic);
    uncached.model.cache = Some(false);
    assert_eq!(sent_to_anthropic(&uncached).await, rich_anthropic_body());
}

#[tokio::test]
async fn anthropic_requests_mark_cache_breakpoints_on_the_last_tool_the_system_and_the_latest_message(
) {
    let ephemeral = json!({"type": "ephemeral"});
    let mut expected = rich_anthropic_body();
    expected["tools"][0]["cache_control"] = ephemeral.clone();
    expected["system"] =
        json!([{"type": "text", "text": "You are terse.", "cache_control": ephemeral}]);
    expected["messages"][2]["content"][2]["cache_control"] = ephemeral.clone();
    let request = rich_request(Provider::Anthropic);
    assert_eq!(request.model.cache, None, "caching is the default");
    assert_eq!(sent_to_anthropic(&request).await, expected);

    // Thinking blocks may not carry a breakpoint: the latest block that may.
    let mut thinking_last = request.clone();
    thinking_last.messages.push(Message {
        role: Role::Assistant,
        content: vec![
            ContentBlock::Text {
                text: "Geneva next.".into(),
            },
            ContentBlock::Raw(json!({"type": "redacted_thinking", "data": "EmwKAhgB"})),
        ],
    });
    let body = sent_to_anthropic(&thinking_last).await;
    assert_eq!(
        body["messages"][3]["content"],
        json!([{"type": "text", "text": "Geneva next.", "cache_control": ephemeral},
               {"type": "redacted_thinking", "data": "EmwKAhgB"}])
    );
    assert!(
        body["messages"][2]["content"][2]
            .get("cache_control")
            .is_none(),
        "one breakpoint on the messages, on the latest"
    );
}

#[tokio::test]
async fn openai_cached_and_reasoning_tokens_are_in_the_usage() {
    let fake = FakeProvider::start().await;
    let providers = providers(&fake);
    fake.push(
        Reply::text("ok")
            .usage(2048, 300)
            .cache_tokens(1024, 0)
            .reasoning_tokens(256),
    );
    let (result, _) = complete(&providers, &request(Provider::Openai)).await;
    let usage = result.unwrap().usage;
    assert_eq!(usage.input_tokens, 2048);
    assert_eq!(usage.cache_read_tokens, 1024);
    assert_eq!(usage.cache_write_tokens, 0);
    assert_eq!(usage.output_tokens, 300);
    assert_eq!(usage.reasoning_tokens, 256);
}

#[tokio::test]
async fn sampling_options_go_out_under_each_api_s_own_names() {
    let mut anthropic = rich_request(Provider::Anthropic);
    anthropic.model = ModelConfig {
        max_tokens: Some(1000),
        cache: Some(false),
        temperature: Some(0.2),
        top_p: Some(0.9),
        top_k: Some(40),
        stop_sequences: Some(vec!["END".into()]),
        user: Some("user-7f3a".into()),
        service_tier: Some(ServiceTier::StandardOnly),
        ..ModelConfig::new(Provider::Anthropic, "test-model")
    };
    let mut expected = rich_anthropic_body();
    for (name, value) in [
        ("temperature", json!(0.2)),
        ("top_p", json!(0.9)),
        ("top_k", json!(40)),
        ("stop_sequences", json!(["END"])),
        ("metadata", json!({"user_id": "user-7f3a"})),
        ("service_tier", json!("standard_only")),
    ] {
        expected[name] = value;
    }
    assert_eq!(sent_to_anthropic(&anthropic).await, expected);

    let fake = FakeProvider::start().await;
    let providers = providers(&fake);
    let mut openai = rich_request(Provider::Openai);
    openai.model = ModelConfig {
        temperature: Some(1.5),
        top_p: Some(0.5),
        stop: Some(vec!["END".into(), "STOP".into()]),
        seed: Some(42),
        user: Some("user-7f3a".into()),
        reasoning_effort: Some(ReasoningEffort::Low),
        parallel_tool_calls: Some(false),
        ..ModelConfig::new(Provider::Openai, "test-model")
    };
    complete(&providers, &openai).await.0.unwrap();
    let body = &fake.last_request().unwrap().body;
    for (name, value) in [
        ("temperature", json!(1.5)),
        ("top_p", json!(0.5)),
        ("stop", json!(["END", "STOP"])),
        ("seed", json!(42)),
        ("user", json!("user-7f3a")),
        ("reasoning_effort", json!("low")),
        ("parallel_tool_calls", json!(false)),
    ] {
        assert_eq!(body[name], value, "{name}");
    }
    // Every effort OpenAI documents goes out as it spells it.
    for (effort, spelled) in [
        (ReasoningEffort::NoReasoning, "none"),
        (ReasoningEffort::Minimal, "minimal"),
        (ReasoningEffort::Medium, "medium"),
        (ReasoningEffort::High, "high"),
        (ReasoningEffort::Xhigh, "xhigh"),
    ] {
        openai.model.reasoning_effort = Some(effort);
        complete(&providers, &openai).await.0.unwrap();
        let body = &fake.last_request().unwrap().body;
        assert_eq!(body["reasoning_effort"], spelled);
    }
    // Without tools OpenAI refuses parallel_tool_calls: it is left out.
    openai.tools.clear();
    complete(&providers, &openai).await.0.unwrap();
    let body = &fake.last_request().unwrap().body;
    assert!(body.get("parallel_tool_calls").is_none(), "{body}");
    assert_eq!(body["seed"], 42);
    // Unset options are not sent at all.
    complete(&providers, &request(Provider::Openai))
        .await
        .0
        .unwrap();
    let body = &fake.last_request().unwrap().body;
    for name in [
        "temperature",
        "top_p",
        "stop",
        "seed",
        "user",
        "reasoning_effort",
    ] {
        assert!(body.get(name).is_none(), "{name} in {body}");
    }
}

#[tokio::test]
async fn anthropic_cache_reads_and_writes_are_counted_in_the_usage() {
    let fake = FakeProvider::start().await;
    let providers = providers(&fake);
    fake.push(Reply::text("ok").usage(5000, 7).cache_tokens(4000, 900));
    let (result, _) = complete(&providers, &request(Provider::Anthropic)).await;
    let usage = result.unwrap().usage;
    assert_eq!(usage.input_tokens, 5000, "the whole prompt");
    assert_eq!(usage.cache_read_tokens, 4000);
    assert_eq!(usage.cache_write_tokens, 900);
    assert_eq!(usage.output_tokens, 7);
}

#[tokio::test]
async fn anthropic_max_tokens_defaults_to_4096() {
    let fake = FakeProvider::start().await;
    let providers = providers(&fake);
    providers
        .complete(
            &request(Provider::Anthropic),
            &providers.default_target(request(Provider::Anthropic).model.provider),
            None,
        )
        .await
        .unwrap();
    assert_eq!(fake.last_request().unwrap().body["max_tokens"], 4096);
}

#[tokio::test]
async fn openai_requests_have_the_documented_wire_shape() {
    let fake = FakeProvider::start().await;
    let providers = providers(&fake);
    providers
        .complete(
            &rich_request(Provider::Openai),
            &providers.default_target(rich_request(Provider::Openai).model.provider),
            None,
        )
        .await
        .unwrap();
    let seen = fake.last_request().unwrap();
    assert_eq!(seen.protocol, Protocol::Openai);
    assert_eq!(seen.header("authorization"), Some("Bearer sk-openai-test"));
    assert_eq!(
        seen.body,
        json!({
            "model": "test-model",
            "max_completion_tokens": 1000,
            "stream": true,
            "stream_options": {"include_usage": true},
            "tools": [{"type": "function", "function": {
                "name": "get_weather",
                "description": "Current weather for a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            }}],
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Weather in Zürich and Bern?"},
                {"role": "assistant", "content": "Checking both.", "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Zürich\"}"}},
                    {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Bern\"}"}},
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "21 °C, sunny"},
                {"role": "tool", "tool_call_id": "call_2", "content": "Error: {\"error\":\"station offline\"}"},
                {"role": "user", "content": "Also Geneva, please."},
            ],
        })
    );
}

#[tokio::test]
async fn the_fake_logs_what_a_retried_request_contained() {
    // The worker rebuilds the request at every attempt; the log shows each.
    let fake = FakeProvider::start().await;
    let providers = providers(&fake);
    fake.push(Reply::status(529));
    let mut req = request(Provider::Anthropic);
    expect_retryable(
        providers
            .complete(&req, &providers.default_target(req.model.provider), None)
            .await,
        "overloaded_error",
    );
    req.messages.push(text(Role::User, "steer: Celsius only"));
    providers
        .complete(&req, &providers.default_target(req.model.provider), None)
        .await
        .unwrap();
    let seen = fake.requests();
    assert_eq!(seen.len(), 2);
    let last_text = |i: usize| {
        seen[i].body["messages"][0]["content"]
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!(last_text(0), 1);
    assert_eq!(
        last_text(1),
        2,
        "the steering message merged into the user turn"
    );
}

#[tokio::test]
async fn compaction_is_advised_once_the_estimate_nears_the_window() {
    let fake = FakeProvider::start().await;
    let mut settings = settings(&fake);
    settings
        .context_windows
        .insert("small-model".into(), 10_000);
    let providers = Providers::new(settings).unwrap();
    assert_eq!(providers.context_window("small-model"), 10_000);
    assert_eq!(providers.context_window("other-model"), 128_000);
    let mut req = request(Provider::Anthropic);
    req.model.name = "small-model".into();
    req.model.max_tokens = Some(1000);
    assert!(!providers.should_compact(&req));
    // ~9 000 tokens of history + 1 000 reserved for output > 90% of 10 000.
    req.messages
        .push(text(Role::User, &"lorem ipsum ".repeat(3000)));
    assert!(providers.should_compact(&req));
}

#[tokio::test]
async fn each_protocol_reads_the_model_that_answered_from_its_response() {
    let fake = FakeProvider::start().await;
    let providers = providers(&fake);
    for provider in [
        Provider::Anthropic,
        Provider::Openai,
        Provider::OpenaiResponses,
    ] {
        let snapshot = format!("{provider}-snapshot-20260101");
        fake.push(Reply::text("ok").answered_by(&snapshot));
        let (result, _) = complete(&providers, &request(provider)).await;
        assert_eq!(
            result.unwrap().model.as_deref(),
            Some(snapshot.as_str()),
            "{provider}"
        );
    }
}
