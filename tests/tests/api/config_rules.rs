//! One rule for an agent config: SQL's `holdfast.validate_config` (what SQL
//! clients store) and the typed `AgentConfig` (what the API accepts and the
//! worker parses at every step) agree. Whatever SQL accepts the worker can
//! parse — otherwise a config stored by SQL would fail every step of its
//! agent — and a field the config does not have is refused by both, named
//! the same way.

use holdfast_db::Error;
use holdfast_tests::TestDb;
use holdfast_wire::config::AgentConfig;
use serde_json::{json, Value};

fn model() -> Value {
    json!({"provider": "anthropic", "name": "m"})
}

fn with(fields: Value) -> Value {
    let mut config = json!({"model": model()});
    for (key, value) in fields.as_object().unwrap() {
        config[key] = value.clone();
    }
    config
}

/// An Anthropic model with these `fields` besides its provider and name.
fn anthropic(fields: Value) -> Value {
    let mut model = json!({"provider": "anthropic", "name": "m"});
    for (key, value) in fields.as_object().unwrap() {
        model[key] = value.clone();
    }
    json!({"model": model})
}

/// [`anthropic`] of OpenAI.
fn openai(fields: Value) -> Value {
    let mut config = anthropic(fields);
    config["model"]["provider"] = json!("openai");
    config
}

/// [`anthropic`] of the OpenAI Responses API.
fn responses(fields: Value) -> Value {
    let mut config = anthropic(fields);
    config["model"]["provider"] = json!("openai_responses");
    config
}

/// An Anthropic model of the default output limit with this `thinking`.
fn thinking(thinking: Value) -> Value {
    json!({"model": {"provider": "anthropic", "name": "m", "thinking": thinking}})
}

/// Configs both accept.
fn valid() -> Vec<Value> {
    vec![
        json!({"model": model()}),
        json!({"model": {"provider": "anthropic", "name": "m".repeat(256)}}),
        json!({"model": {"provider": "openai", "name": "gpt", "endpoint": "default",
                         "base_url": "https://llm.example/v1", "max_tokens": 4294967295_u64}}),
        with(json!({"system": "s", "metadata": {"a": [1, {"b": null}]}})),
        json!({"model": {"provider": "anthropic", "name": "m",
                         "thinking": {"type": "enabled", "budget_tokens": 1024}}}),
        json!({"model": {"provider": "anthropic", "name": "m",
                         "thinking": {"type": "enabled", "budget_tokens": 4095}}}),
        json!({"model": {"provider": "anthropic", "name": "m", "max_tokens": 64000,
                         "thinking": {"type": "enabled", "budget_tokens": 63999}}}),
        json!({"model": {"provider": "anthropic", "name": "m", "thinking": {"type": "adaptive"}}}),
        json!({"model": {"provider": "anthropic", "name": "m", "thinking": {"type": "disabled"}}}),
        json!({"model": {"provider": "anthropic", "name": "m", "cache": false}}),
        json!({"model": {"provider": "anthropic", "name": "m", "cache": true}}),
        json!({"model": {"provider": "anthropic", "name": "m", "temperature": 1, "top_p": 0.9,
                         "top_k": 40, "stop_sequences": ["END"], "user": "u-42",
                         "service_tier": "standard_only"}}),
        json!({"model": {"provider": "anthropic", "name": "m", "temperature": 0.0,
                         "stop_sequences": [], "service_tier": "auto"}}),
        json!({"model": {"provider": "anthropic", "name": "m", "top_p": 0.95,
                         "thinking": {"type": "adaptive"}}}),
        json!({"model": {"provider": "anthropic", "name": "m", "temperature": 0.5,
                         "thinking": {"type": "disabled"}}}),
        json!({"model": {"provider": "openai", "name": "gpt", "temperature": 2, "top_p": 0,
                         "stop": ["a", "b", "c", "d"], "seed": -9007199254740993_i64,
                         "user": "u-42", "reasoning_effort": "minimal",
                         "parallel_tool_calls": false}}),
        responses(
            json!({"temperature": 2, "top_p": 0.5, "user": "u-42", "max_tokens": 100,
                         "reasoning_effort": "high", "parallel_tool_calls": true}),
        ),
        anthropic(json!({"parallel_tool_calls": false, "tool_choice": {"type": "any"}})),
        anthropic(json!({"tool_choice": {"type": "none"}, "thinking": {"type": "adaptive"}})),
        openai(json!({"tool_choice": {"type": "tool", "name": "lookup"}})),
        responses(json!({"tool_choice": {"type": "auto"}})),
        openai(json!({"reasoning_effort": "none"})),
        responses(json!({"reasoning_effort": "xhigh"})),
        with(json!({"tools": []})),
        with(json!({"tools": [
            {"type": "custom", "name": "lookup"},
            {"type": "custom", "name": "deploy", "description": "d", "input_schema": {"type": "object"}},
            {"type": "web_fetch"},
            {"type": "web_search"},
            {"type": "mcp", "name": "docs", "url": "https://mcp.example/mcp"},
            {"type": "mcp", "name": "calc", "url": "http://x/mcp", "headers": {"Authorization": "Bearer t"}},
            {"type": "ask_user"},
            {"type": "spawn_subagent", "config": {"model": model()}},
            {"type": "run_command"}
        ]})),
        with(
            json!({"tools": [{"type": "run_command", "machine": "m1"}, {"type": "spawn_subagent"}]}),
        ),
        with(json!({"tools": [
            {"type": "anthropic_web_search", "max_uses": 3, "allowed_domains": ["docs.example"],
             "user_location": {"type": "approximate", "city": "Bern", "country": "CH", "timezone": "Europe/Zurich"}},
            {"type": "anthropic_web_fetch", "blocked_domains": ["intranet.example"],
             "citations": {"enabled": true}, "max_content_tokens": 100000}
        ]})),
        with(json!({"tools": [{"type": "anthropic_web_search"}, {"type": "anthropic_web_fetch"}]})),
        with(json!({"approvals": {}})),
        with(json!({"approvals": {"require_for": ["lookup", "web_fetch"]}})),
        with(json!({"limits": {}})),
        with(
            json!({"limits": {"max_model_steps_per_turn": 5, "max_tool_calls_per_response": 1,
                               "max_subagent_depth": 2, "max_live_children": 3, "max_descendants": 4}}),
        ),
    ]
}

/// Configs both refuse, and the field each names first (SQL names the
/// field exactly; the typed parse names it or, inside a tool entry, the
/// entry).
fn invalid() -> Vec<(Value, &'static str)> {
    vec![
        (
            with(json!({"tools": [{"type": "anthropic_web_search", "name": "search"}]})),
            "tools[0]",
        ),
        (
            with(json!({"tools": [{"type": "anthropic_web_fetch", "max_uses": "3"}]})),
            "tools[0]",
        ),
        (
            with(
                json!({"tools": [{"type": "anthropic_web_search", "user_location": {"type": "exact"}}]}),
            ),
            "tools[0]",
        ),
        (
            with(
                json!({"tools": [{"type": "anthropic_web_search", "user_location": {"type": "approximate", "street": "x"}}]}),
            ),
            "tools[0]",
        ),
        (
            with(
                json!({"tools": [{"type": "anthropic_web_fetch", "citations": {"enabled": "yes"}}]}),
            ),
            "tools[0]",
        ),
        (
            with(json!({"tools": [{"type": "anthropic_web_fetch", "citations": {}}]})),
            "tools[0]",
        ),
        (json!([]), "config"),
        (json!({}), "model"),
        (json!({"model": "gpt"}), "model"),
        (with(json!({"temperature": 1})), "temperature"),
        (
            json!({"model": {"provider": "anthropic", "name": "m", "temprature": 1}}),
            "model.temprature",
        ),
        (
            json!({"model": {"provider": "gemini", "name": "m"}}),
            "model.provider",
        ),
        (json!({"model": {"provider": "anthropic"}}), "model.name"),
        (
            json!({"model": {"provider": "anthropic", "name": 5}}),
            "model.name",
        ),
        // The name is a metrics label: its length is bounded.
        (
            json!({"model": {"provider": "anthropic", "name": "m".repeat(257)}}),
            "model.name",
        ),
        (
            json!({"model": {"provider": "anthropic", "name": "m", "endpoint": 5}}),
            "model.endpoint",
        ),
        (
            json!({"model": {"provider": "anthropic", "name": "m", "max_tokens": 1.0}}),
            "model.max_tokens",
        ),
        (
            json!({"model": {"provider": "anthropic", "name": "m", "max_tokens": 5000000000_u64}}),
            "model.max_tokens",
        ),
        (
            json!({"model": {"provider": "anthropic", "name": "m", "max_tokens": "10"}}),
            "model.max_tokens",
        ),
        (thinking(json!("on")), "model.thinking"),
        (thinking(json!({"type": "auto"})), "model.thinking"),
        (thinking(json!({"budget_tokens": 2048})), "model.thinking"),
        (
            thinking(json!({"type": "enabled"})),
            "model.thinking.budget_tokens",
        ),
        (
            thinking(json!({"type": "enabled", "budget_tokens": 1023})),
            "model.thinking.budget_tokens",
        ),
        // At or above the output limit (max_tokens, default 4096).
        (
            thinking(json!({"type": "enabled", "budget_tokens": 4096})),
            "model.thinking.budget_tokens",
        ),
        (
            json!({"model": {"provider": "anthropic", "name": "m", "max_tokens": 2000,
                             "thinking": {"type": "enabled", "budget_tokens": 2000}}}),
            "model.thinking.budget_tokens",
        ),
        (
            thinking(json!({"type": "enabled", "budget_tokens": 2048.0})),
            "model.thinking",
        ),
        (
            thinking(json!({"type": "enabled", "budget_tokens": 5000000000_u64})),
            "model.thinking",
        ),
        (
            thinking(json!({"type": "adaptive", "budget_tokens": 2048})),
            "model.thinking",
        ),
        (
            json!({"model": {"provider": "openai", "name": "o3",
                             "thinking": {"type": "enabled", "budget_tokens": 2048}}}),
            "model.thinking",
        ),
        (
            json!({"model": {"provider": "anthropic", "name": "m", "cache": "off"}}),
            "model.cache",
        ),
        (
            json!({"model": {"provider": "anthropic", "name": "m", "cache": {"type": "ephemeral"}}}),
            "model.cache",
        ),
        (
            json!({"model": {"provider": "openai", "name": "gpt", "cache": false}}),
            "model.cache",
        ),
        (anthropic(json!({"temperature": "1"})), "model.temperature"),
        (anthropic(json!({"temperature": 1.5})), "model.temperature"),
        (anthropic(json!({"temperature": -0.1})), "model.temperature"),
        (
            json!({"model": {"provider": "openai", "name": "gpt", "temperature": 2.5}}),
            "model.temperature",
        ),
        (
            anthropic(json!({"temperature": 0.5, "thinking": {"type": "adaptive"}})),
            "model.temperature",
        ),
        (anthropic(json!({"top_p": 1.01})), "model.top_p"),
        (
            anthropic(
                json!({"top_p": 0.9, "thinking": {"type": "enabled", "budget_tokens": 1024}}),
            ),
            "model.top_p",
        ),
        (anthropic(json!({"top_k": -1})), "model.top_k"),
        (anthropic(json!({"top_k": 2.5})), "model.top_k"),
        (
            anthropic(json!({"top_k": 5, "thinking": {"type": "adaptive"}})),
            "model.top_k",
        ),
        (
            anthropic(json!({"stop_sequences": "END"})),
            "model.stop_sequences",
        ),
        (
            anthropic(json!({"stop_sequences": [1]})),
            "model.stop_sequences",
        ),
        (
            anthropic(json!({"stop_sequences": [""]})),
            "model.stop_sequences",
        ),
        (anthropic(json!({"user": 42})), "model.user"),
        (anthropic(json!({"user": ""})), "model.user"),
        (anthropic(json!({"user": "u".repeat(257)})), "model.user"),
        (
            anthropic(json!({"service_tier": "priority"})),
            "model.service_tier",
        ),
        (anthropic(json!({"stop": ["END"]})), "model.stop"),
        (anthropic(json!({"seed": 7})), "model.seed"),
        (
            anthropic(json!({"reasoning_effort": "high"})),
            "model.reasoning_effort",
        ),
        (
            anthropic(json!({"tool_choice": "any"})),
            "model.tool_choice",
        ),
        (
            anthropic(json!({"tool_choice": {"type": "required"}})),
            "model.tool_choice",
        ),
        (
            anthropic(json!({"tool_choice": {"type": "auto", "name": "x"}})),
            "model.tool_choice",
        ),
        (
            anthropic(json!({"tool_choice": {"type": "tool"}})),
            "model.tool_choice.name",
        ),
        (
            anthropic(json!({"tool_choice": {"type": "tool", "name": ""}})),
            "model.tool_choice.name",
        ),
        (
            anthropic(json!({"tool_choice": {"type": "any"},
                             "thinking": {"type": "adaptive"}})),
            "model.tool_choice",
        ),
        (openai(json!({"top_k": 5})), "model.top_k"),
        (responses(json!({"stop": ["END"]})), "model.stop"),
        (responses(json!({"seed": 7})), "model.seed"),
        (responses(json!({"cache": true})), "model.cache"),
        (responses(json!({"temperature": 2.5})), "model.temperature"),
        (
            openai(json!({"stop_sequences": ["x"]})),
            "model.stop_sequences",
        ),
        (
            openai(json!({"service_tier": "auto"})),
            "model.service_tier",
        ),
        (openai(json!({"stop": []})), "model.stop"),
        (
            openai(json!({"stop": ["a", "b", "c", "d", "e"]})),
            "model.stop",
        ),
        (openai(json!({"stop": ["a", ""]})), "model.stop"),
        (openai(json!({"seed": 1.5})), "model.seed"),
        (openai(json!({"seed": "7"})), "model.seed"),
        (
            openai(json!({"reasoning_effort": "max"})),
            "model.reasoning_effort",
        ),
        (
            openai(json!({"parallel_tool_calls": "yes"})),
            "model.parallel_tool_calls",
        ),
        (with(json!({"system": 5})), "system"),
        (with(json!({"tools": {}})), "tools"),
        (with(json!({"tools": [5]})), "tools[0]"),
        (with(json!({"tools": [{"name": "x"}]})), "tools[0]"),
        (with(json!({"tools": [{"type": "search"}]})), "tools[0]"),
        (
            with(json!({"tools": [{"type": "web_fetch"}, {"type": "custom"}]})),
            "tools[1]",
        ),
        (
            with(json!({"tools": [{"type": "custom", "name": "a", "url": "u"}]})),
            "tools[0]",
        ),
        (
            with(json!({"tools": [{"type": "web_fetch", "name": "fetch"}]})),
            "tools[0]",
        ),
        // The search backend's key is the operator's: no tenant field for it.
        (
            with(json!({"tools": [{"type": "web_search", "api_key": "k"}]})),
            "tools[0]",
        ),
        (
            with(json!({"tools": [{"type": "mcp", "name": "a"}]})),
            "tools[0]",
        ),
        (
            with(json!({"tools": [{"type": "mcp", "name": "a", "url": "u", "headers": {"X": 1}}]})),
            "tools[0]",
        ),
        (
            with(json!({"tools": [{"type": "run_command", "machine": 7}]})),
            "tools[0]",
        ),
        (
            with(json!({"tools": [{"type": "custom", "name": "a", "description": 1}]})),
            "tools[0]",
        ),
        (
            with(json!({"approvals": {"require_for": "lookup"}})),
            "approvals.require_for",
        ),
        (
            with(json!({"approvals": {"require_for": [1]}})),
            "approvals.require_for",
        ),
        (
            with(json!({"approvals": {"require": []}})),
            "approvals.require",
        ),
        (with(json!({"metadata": [1]})), "metadata"),
        (
            with(json!({"limits": {"max_steps": 1}})),
            "limits.max_steps",
        ),
        (
            with(json!({"limits": {"max_descendants": 1.0}})),
            "limits.max_descendants",
        ),
        (
            with(json!({"limits": {"max_descendants": -1}})),
            "limits.max_descendants",
        ),
        (
            with(json!({"limits": {"max_descendants": "3"}})),
            "limits.max_descendants",
        ),
    ]
}

/// Configs the typed parse accepts that SQL refuses for what only it
/// checks: values out of range, the operator's maxima, duplicate names.
/// (The other direction — SQL accepting what the worker cannot parse — is
/// what must never happen.)
fn refused_by_sql_only() -> Vec<(Value, &'static str)> {
    vec![
        (
            json!({"model": {"provider": "anthropic", "name": ""}}),
            "model.name",
        ),
        (
            json!({"model": {"provider": "anthropic", "name": "m", "base_url": "ftp://x"}}),
            "model.base_url",
        ),
        (
            json!({"model": {"provider": "anthropic", "name": "m", "max_tokens": 0}}),
            "model.max_tokens",
        ),
        (
            with(json!({"tools": [{"type": "custom", "name": "a b"}]})),
            "tools[0].name",
        ),
        (
            with(json!({"tools": [{"type": "ask_user"}, {"type": "ask_user"}]})),
            "tools[1].name",
        ),
        (
            with(json!({"tools": [{"type": "web_search"}, {"type": "web_search"}]})),
            "tools[1].name",
        ),
        (
            with(json!({"limits": {"max_descendants": 0}})),
            "limits.max_descendants",
        ),
        (
            with(json!({"limits": {"max_descendants": 1000000}})),
            "limits.max_descendants",
        ),
        // Within i64 but over SQL's 18 digits.
        (
            openai(json!({"seed": 1000000000000000000_i64})),
            "model.seed",
        ),
        // Anthropic's server tools: Anthropic agents only, one web_search
        // and one web_fetch whoever runs it, settings Anthropic accepts.
        (
            json!({"model": {"provider": "openai", "name": "gpt"},
                   "tools": [{"type": "anthropic_web_search"}]}),
            "tools[0].type",
        ),
        (
            with(json!({"tools": [{"type": "web_search"}, {"type": "anthropic_web_search"}]})),
            "tools[1].name",
        ),
        (
            with(json!({"tools": [{"type": "anthropic_web_fetch"}, {"type": "web_fetch"}]})),
            "tools[1].name",
        ),
        (
            with(json!({"tools": [{"type": "anthropic_web_search", "max_uses": 0}]})),
            "tools[0].max_uses",
        ),
        (
            with(json!({"tools": [{"type": "anthropic_web_fetch", "max_content_tokens": 0}]})),
            "tools[0].max_content_tokens",
        ),
        (
            with(json!({"tools": [{"type": "anthropic_web_search",
                                   "allowed_domains": ["a.example"], "blocked_domains": ["b.example"]}]})),
            "tools[0].blocked_domains",
        ),
        (
            with(json!({"tools": [{"type": "anthropic_web_fetch", "allowed_domains": [""]}]})),
            "tools[0].allowed_domains",
        ),
        (
            with(json!({"tools": [{"type": "anthropic_web_search"}],
                        "approvals": {"require_for": ["web_search"]}})),
            "approvals.require_for",
        ),
        // serde reads a struct from an array of its fields too (here none).
        (with(json!({"approvals": []})), "approvals.require_for"),
        (with(json!({"limits": []})), "limits"),
        // An explicit null is "absent" to the typed parse; SQL wants the
        // field's type (a merge patch's null removes the field instead).
        (with(json!({"system": null})), "system"),
    ]
}

async fn sql_verdict(client: &tokio_postgres::Client, config: &Value) -> Result<(), Error> {
    client
        .execute("SELECT holdfast.validate_config($1)", &[config])
        .await
        .map(drop)
        .map_err(Error::from)
}

fn field_of(error: Error) -> String {
    match error {
        Error::Invalid {
            field: Some(field), ..
        } => field,
        other => panic!("not a named invalid-config error: {other:?}"),
    }
}

#[tokio::test]
async fn sql_and_the_typed_config_accept_and_refuse_the_same_configs() {
    let db = TestDb::new().await;
    let client = db.connect().await;

    for config in valid() {
        sql_verdict(&client, &config)
            .await
            .unwrap_or_else(|e| panic!("SQL refused {config}: {e:?}"));
        let parsed = AgentConfig::from_value(&config)
            .unwrap_or_else(|e| panic!("the typed parse refused {config}: {e:?}"));
        // Written back (a subagent's config is), it means the same.
        assert_eq!(
            AgentConfig::from_value(&parsed.to_value()).unwrap(),
            parsed,
            "a round trip changed {config}"
        );
    }

    for (config, field) in invalid() {
        let sql = field_of(sql_verdict(&client, &config).await.unwrap_err());
        let typed = AgentConfig::from_value(&config).unwrap_err().field;
        assert!(
            sql.starts_with(field),
            "SQL named {sql:?} for {config}, expected {field:?}"
        );
        assert!(
            typed.starts_with(field),
            "the typed parse named {typed:?} for {config}, expected {field:?}"
        );
    }

    for (config, field) in refused_by_sql_only() {
        AgentConfig::from_value(&config)
            .unwrap_or_else(|e| panic!("the typed parse refused {config}: {e:?}"));
        let sql = field_of(sql_verdict(&client, &config).await.unwrap_err());
        assert_eq!(sql, field, "for {config}");
    }
}
