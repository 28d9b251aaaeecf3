//! MCP servers over Streamable HTTP, with the official `rmcp` SDK as client.
//!
//! An agent config names a server with a tool entry
//! `{"type": "mcp", "name": "<prefix>", "url": "https://…", "headers"?: {…}}`.
//! The model sees each of the server's tools as `<prefix>__<tool>`; the
//! prefix keeps tools of different servers (and built-in tools) apart, and
//! [`holdfast_wire::config::split_mcp_tool_name`] maps a call back to its server and tool.
//!
//! Each operation opens its own MCP session (initialize handshake, one
//! request, close): no connection state outlives a step, so any worker can
//! run any call, and a server restart between two calls costs nothing. Tool
//! lists are cached per (url, headers) by [`McpRegistry`] for
//! [`McpLimits::list_ttl`]: listed at first use, reused after that.
//! Every operation is bounded by a timeout and a response size cap.
//!
//! The server URL is the tenant's, so requests go through the egress policy
//! (kind `mcp`, [`holdfast_providers::egress`]): rmcp gets a reqwest client of
//! ours whose resolver checks every address, which ignores proxy variables,
//! and which follows only same-origin 307/308 redirects (as rmcp's own
//! client does: they keep the JSON-RPC body; the host, and so the checked
//! addresses, stay the same). Tenant headers are limited to
//! [`holdfast_providers::egress::check_mcp_header`]: the API refuses others,
//! and a config written past it (over SQL) makes the server unusable, so
//! its tools are reported unavailable on the timeline rather than sent
//! without a header the tenant set.

use std::collections::{BTreeMap, HashMap};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use holdfast_providers::egress::{check_mcp_header, refusal_in, EgressKind, EgressPolicy};
use holdfast_providers::ToolDefinition;
use holdfast_telemetry as telemetry;
use holdfast_wire::config::{prefixed_tool_name, ToolEntry, MCP_NAME_SEPARATOR};
use lru::LruCache;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ContentBlock,
    Implementation, ResourceContents,
};
use rmcp::service::{ClientInitializeError, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceError, ServiceExt};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// One MCP server of an agent's config.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpServerConfig {
    /// The prefix of this server's tools: `[A-Za-z0-9_-]{1,32}`, no `__`.
    pub name: String,
    /// The Streamable HTTP endpoint (http or https).
    pub url: String,
    /// Sent with every request (e.g. `Authorization`); only names
    /// [`check_mcp_header`] allows are usable.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// The config entry is unusable (reported at agent creation or config change).
    #[error("invalid MCP server config: {0}")]
    InvalidConfig(String),
    /// The server could not be reached, refused the session, or failed the request.
    #[error("MCP server {server:?}: {message}")]
    Server { server: String, message: String },
    #[error("MCP server {server:?} did not answer within {} s", timeout.as_secs_f64())]
    Timeout { server: String, timeout: Duration },
}

impl McpServerConfig {
    /// The server of one `{"type": "mcp", …}` tool entry, checked.
    pub fn from_tool_entry(entry: &ToolEntry) -> Result<McpServerConfig, McpError> {
        let ToolEntry::Mcp { name, url, headers } = entry else {
            return Err(McpError::InvalidConfig(format!(
                "tool entry {:?} is not an MCP server",
                entry.name()
            )));
        };
        let config = McpServerConfig {
            name: name.clone(),
            url: url.clone(),
            headers: headers.clone(),
        };
        config.validate()?;
        Ok(config)
    }

    /// Checks the prefix, the URL and the headers (their syntax, and that
    /// [`check_mcp_header`] allows each name).
    pub fn validate(&self) -> Result<(), McpError> {
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 32
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            && !self.name.contains(MCP_NAME_SEPARATOR);
        if !name_ok {
            return Err(McpError::InvalidConfig(format!(
                "name {:?} must be 1-32 characters of A-Z, a-z, 0-9, _ and -, without \"__\"",
                self.name
            )));
        }
        match reqwest::Url::parse(&self.url) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host() => {}
            _ => {
                return Err(McpError::InvalidConfig(format!(
                    "url {:?} of MCP server {:?} must be an absolute http(s) URL",
                    self.url, self.name
                )))
            }
        }
        self.header_map()?;
        Ok(())
    }

    /// The headers to send, or why they cannot be: a name that is not
    /// valid HTTP, or one [`check_mcp_header`] refuses (a config written
    /// past the API's check).
    fn header_map(&self) -> Result<HashMap<HeaderName, HeaderValue>, McpError> {
        let mut map = HashMap::new();
        for (name, value) in &self.headers {
            let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                McpError::InvalidConfig(format!("{name:?} is not a valid HTTP header name"))
            })?;
            check_mcp_header(name).map_err(McpError::InvalidConfig)?;
            let value = HeaderValue::from_str(value).map_err(|_| {
                McpError::InvalidConfig(format!("the value of header {name:?} is not valid"))
            })?;
            map.insert(header, value);
        }
        Ok(map)
    }

    /// What the tool list depends on: the URL and the headers (hashed, so
    /// credentials are not kept as a key). The prefix is not part of it.
    fn cache_key(&self) -> CacheKey {
        let mut hasher = Sha256::new();
        for (name, value) in &self.headers {
            hasher.update(name.to_ascii_lowercase().as_bytes());
            hasher.update([0]);
            hasher.update(value.as_bytes());
            hasher.update([0]);
        }
        (self.url.clone(), hasher.finalize().into())
    }
}

/// Bounds of MCP operations.
#[derive(Clone, Debug)]
pub struct McpLimits {
    /// Opening a session and listing the tools, all pages.
    pub list_timeout: Duration,
    /// Opening a session and one tool call.
    pub call_timeout: Duration,
    /// How long a listed tool set is reused.
    pub list_ttl: Duration,
    /// How many servers' tool lists are kept (the ones used last).
    pub cached_servers: usize,
    /// Largest JSON response or SSE event accepted from a server.
    pub max_response_bytes: usize,
    /// Bytes of joined text content returned to the model at most.
    pub max_text_bytes: usize,
    /// Which addresses servers may be at (kind `mcp`); public ones by default.
    pub egress: Arc<EgressPolicy>,
}

impl Default for McpLimits {
    fn default() -> Self {
        McpLimits {
            list_timeout: Duration::from_secs(30),
            call_timeout: Duration::from_secs(120),
            list_ttl: Duration::from_secs(300),
            cached_servers: 1024,
            max_response_bytes: 4 * 1024 * 1024,
            max_text_bytes: 100 * 1024,
            egress: Arc::default(),
        }
    }
}

/// The worker's MCP client: tool lists cached per (url, headers) with a
/// TTL, so a server is listed at first use and not at every model call.
/// Concurrent first uses of one server share a single listing. Failed
/// listings are not cached. The cache holds the lists of the
/// [`McpLimits::cached_servers`] servers used last: tenants name servers
/// (and headers) freely, so an unbounded map would grow with every one ever
/// named. Cheap to share (`Arc`).
pub struct McpRegistry {
    limits: McpLimits,
    lists: Mutex<LruCache<CacheKey, ListSlot>>,
}

/// (url, SHA-256 of the headers).
type CacheKey = (String, [u8; 32]);
/// One server's list; its async lock is held while the list is fetched.
type ListSlot = Arc<tokio::sync::Mutex<Option<CachedList>>>;

struct CachedList {
    listed_at: Instant,
    /// Unprefixed: the same server may be named differently by two agents.
    tools: Vec<ToolDefinition>,
}

impl McpRegistry {
    pub fn new(limits: McpLimits) -> McpRegistry {
        let capacity = NonZeroUsize::new(limits.cached_servers).unwrap_or(NonZeroUsize::MIN);
        McpRegistry {
            limits,
            lists: Mutex::new(LruCache::new(capacity)),
        }
    }

    /// The server's tools as the model sees them (`<prefix>__<tool>`),
    /// from the cache when listed less than `list_ttl` ago.
    pub async fn list_tools(&self, config: &McpServerConfig) -> Result<ServerTools, McpError> {
        let slot = {
            let mut lists = self.lists.lock().unwrap_or_else(|e| e.into_inner());
            lists
                .get_or_insert(config.cache_key(), ListSlot::default)
                .clone()
        };
        // Held across the listing: concurrent callers wait and reuse it.
        let mut cached = slot.lock().await;
        let fresh = cached
            .as_ref()
            .filter(|c| c.listed_at.elapsed() < self.limits.list_ttl);
        let tools = match fresh {
            Some(list) => list.tools.clone(),
            None => {
                let tools = list_server_tools(config, &self.limits).await?;
                *cached = Some(CachedList {
                    listed_at: Instant::now(),
                    tools: tools.clone(),
                });
                tools
            }
        };
        Ok(prefix_tools(config, tools))
    }

    /// Forgets the cached list of this server (e.g. after a call named a
    /// tool the server no longer has).
    pub fn invalidate(&self, config: &McpServerConfig) {
        let mut lists = self.lists.lock().unwrap_or_else(|e| e.into_inner());
        lists.pop(&config.cache_key());
    }

    /// Calls `tool` (the server's own name, without prefix); see [`call_tool`].
    pub async fn call_tool(
        &self,
        config: &McpServerConfig,
        tool: &str,
        arguments: &Value,
    ) -> super::ToolOutput {
        call_tool(config, tool, arguments, &self.limits).await
    }
}

/// A server's tools as the model sees them, and those it cannot be offered.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServerTools {
    /// Named `<prefix>__<tool>`, in the server's order.
    pub usable: Vec<ToolDefinition>,
    /// Tools left out: the server's own name of each, and why.
    pub left_out: Vec<(String, String)>,
}

/// Lists the server's tools, uncached, as the model sees them
/// (`<prefix>__<tool>`), with the tools left out and why.
pub async fn list_tools(
    config: &McpServerConfig,
    limits: &McpLimits,
) -> Result<ServerTools, McpError> {
    Ok(prefix_tools(
        config,
        list_server_tools(config, limits).await?,
    ))
}

/// The server's tools named as the model sees them. A tool whose prefixed
/// name a model provider would refuse (`[A-Za-z0-9_-]{1,64}`) is left out
/// with the reason, for the step to report.
fn prefix_tools(config: &McpServerConfig, tools: Vec<ToolDefinition>) -> ServerTools {
    let mut listed = ServerTools::default();
    for tool in tools {
        let name = prefixed_tool_name(&config.name, &tool.name);
        let usable = name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if usable {
            listed.usable.push(ToolDefinition { name, ..tool });
        } else {
            listed.left_out.push((
                tool.name,
                format!(
                    "its name as the model would see it, {name:?}, is not a valid tool name \
                     (at most 64 characters of A-Z, a-z, 0-9, _ and -)"
                ),
            ));
        }
    }
    listed
}

/// One session: initialize, list every page, close.
async fn list_server_tools(
    config: &McpServerConfig,
    limits: &McpLimits,
) -> Result<Vec<ToolDefinition>, McpError> {
    let server = config.name.clone();
    let listing = async {
        let session = open_session(config, limits).await?;
        let listed = session.peer().list_all_tools().await;
        close_in_background(session);
        listed.map_err(|e| McpError::Server {
            server: server.clone(),
            message: format!("listing tools failed: {}", describe_service_error(&e)),
        })
    };
    let tools = tokio::time::timeout(limits.list_timeout, listing)
        .await
        .map_err(|_| McpError::Timeout {
            server: server.clone(),
            timeout: limits.list_timeout,
        })??;
    Ok(tools
        .into_iter()
        .map(|tool| ToolDefinition {
            description: tool
                .description
                .map(|d| d.into_owned())
                .or(tool.title)
                .unwrap_or_default(),
            input_schema: Value::Object((*tool.input_schema).clone()),
            name: tool.name.into_owned(),
        })
        .collect())
}

/// Calls `tool` (the server's own name, without prefix) with `arguments`
/// (a JSON object, or null for none), in a session of its own, within
/// `limits.call_timeout`. Never `Err`: every failure is an error output.
///
/// Output: the text content blocks joined with newlines (other blocks as
/// short placeholders) as a JSON string; when the server sends
/// `structuredContent`, `{"content": <that text>, "structured_content": …}`.
/// `is_error` is the server's `isError`, or true when the call failed
/// (protocol error, unreachable server, timeout).
pub async fn call_tool(
    config: &McpServerConfig,
    tool: &str,
    arguments: &Value,
    limits: &McpLimits,
) -> super::ToolOutput {
    use super::ToolOutput;
    let arguments = match arguments {
        Value::Object(map) => Some(map.clone()),
        Value::Null => None,
        other => {
            return ToolOutput::error(format!(
                "the input of {} must be a JSON object, not {other}",
                prefixed_tool_name(&config.name, tool)
            ))
        }
    };
    let mut params = CallToolRequestParams::new(tool.to_string());
    params.arguments = arguments;
    let call = async {
        let session = open_session(config, limits).await?;
        let result = session.peer().call_tool(params).await;
        close_in_background(session);
        Ok::<_, McpError>(result)
    };
    match tokio::time::timeout(limits.call_timeout, call).await {
        Ok(Ok(Ok(result))) => tool_output(result, limits.max_text_bytes),
        Ok(Ok(Err(ServiceError::McpError(error)))) => ToolOutput::error(format!(
            "MCP server {:?} refused the call to {tool:?}: {} (code {})",
            config.name, error.message, error.code.0
        )),
        Ok(Ok(Err(e))) => ToolOutput::error(format!(
            "the call to {tool:?} on MCP server {:?} failed: {}; whether the tool ran is unknown",
            config.name,
            describe_service_error(&e)
        )),
        Ok(Err(e)) => ToolOutput::error(format!("{e}; the tool was not called")),
        Err(_) => ToolOutput::error(format!(
            "the call to {tool:?} on MCP server {:?} timed out after {} s; whether the tool ran is unknown",
            config.name,
            limits.call_timeout.as_secs_f64()
        )),
    }
}

fn tool_output(result: CallToolResult, max_text_bytes: usize) -> super::ToolOutput {
    let is_error = result.is_error == Some(true);
    if result.content.iter().any(|b| b.as_image().is_some()) {
        return super::ToolOutput {
            output: content_blocks(result, max_text_bytes),
            is_error,
        };
    }
    let text = result
        .content
        .iter()
        .map(content_text)
        .collect::<Vec<_>>()
        .join("\n");
    let text = cap_text(text, max_text_bytes);
    let output = match result.structured_content {
        Some(structured) => json!({"content": text, "structured_content": structured}),
        None => Value::String(text),
    };
    super::ToolOutput { output, is_error }
}

/// A result with images as content blocks (docs/api.md, "Content
/// blocks"): each image an `image` block with its base64, the rest text
/// blocks (`structured_content` as its JSON text, last), the text capped
/// as a whole. SQL stores the images once and leaves out, with a note, one
/// it does not take (`holdfast.keep_tool_output`).
fn content_blocks(result: CallToolResult, max_text_bytes: usize) -> Value {
    let mut budget = max_text_bytes;
    let mut text_block = |text: String| {
        let text = cap_text(text, budget);
        budget = budget.saturating_sub(text.len());
        json!({"type": "text", "text": text})
    };
    let mut blocks: Vec<Value> = result
        .content
        .iter()
        .map(|block| match block.as_image() {
            Some(image) => json!({"type": "image", "source": {
                "type": "base64", "media_type": image.mime_type, "data": image.data,
            }}),
            None => text_block(content_text(block)),
        })
        .collect();
    if let Some(structured) = result.structured_content {
        blocks.push(text_block(structured.to_string()));
    }
    Value::Array(blocks)
}

/// Text blocks as they are; other blocks as a short placeholder (the model
/// gets no base64; images, when a result has some, go as content blocks).
fn content_text(block: &ContentBlock) -> String {
    match block {
        ContentBlock::Text(text) => text.text.clone(),
        ContentBlock::Image(image) => format!("[image: {}]", image.mime_type),
        ContentBlock::Audio(audio) => format!("[audio: {}]", audio.mime_type),
        ContentBlock::Resource(embedded) => match &embedded.resource {
            ResourceContents::TextResourceContents { text, .. } => text.clone(),
            ResourceContents::BlobResourceContents { uri, mime_type, .. } => format!(
                "[resource {uri}: {}]",
                mime_type.as_deref().unwrap_or("binary")
            ),
            _ => "[resource]".to_string(),
        },
        ContentBlock::ResourceLink(resource) => format!("[resource link: {}]", resource.uri),
        _ => "[non-text content]".to_string(),
    }
}

fn cap_text(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text.push_str("\n[output truncated]");
    text
}

type Session = RunningService<RoleClient, ClientConfig>;

/// Connects and runs the initialize handshake.
async fn open_session(config: &McpServerConfig, limits: &McpLimits) -> Result<Session, McpError> {
    let refused = |message: String| McpError::Server {
        server: config.name.clone(),
        message,
    };
    let url = reqwest::Url::parse(&config.url).map_err(|e| refused(e.to_string()))?;
    limits
        .egress
        .check_url(EgressKind::Mcp, &url)
        .map_err(|e| refused(e.to_string()))?;
    // A name is resolved and checked here, and the client connects to
    // exactly those addresses (rmcp's transport errors do not carry the
    // resolver's reason, so resolving first is also what names it).
    let resolved = match url.host_str() {
        Some(host) if host.parse::<std::net::IpAddr>().is_err() && !host.starts_with('[') => {
            let addrs = limits
                .egress
                .resolve(EgressKind::Mcp, host)
                .await
                .map_err(|e| refused(e.to_string()))?;
            Some((host.to_owned(), addrs))
        }
        _ => None,
    };
    let http = egress_client(&limits.egress, resolved).map_err(|e| refused(e.to_string()))?;
    let mut headers = config.header_map()?;
    // The current span (the tool call's, or the step's while listing), so
    // the server's spans join the turn's trace.
    for (name, value) in telemetry::outbound_headers() {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    let transport_config = StreamableHttpClientTransportConfig::with_uri(config.url.clone())
        .custom_headers(headers)
        .max_json_response_size(limits.max_response_bytes)
        .max_sse_event_size(limits.max_response_bytes);
    let transport = StreamableHttpClientTransport::with_client(http, transport_config);
    let client_info = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("holdfast", env!("CARGO_PKG_VERSION")),
    );
    client_info
        .serve(transport)
        .await
        .map_err(|e| McpError::Server {
            server: config.name.clone(),
            message: format!(
                "could not open a session: {}",
                describe_initialize_error(&e)
            ),
        })
}

/// The HTTP client rmcp's transport runs on: the egress policy's client
/// for kind `mcp` (the process's trust store, names resolved and checked by
/// the policy, proxy variables ignored), with the server's host pinned to
/// `resolved` (addresses the policy checked). Redirects are followed only
/// when rmcp's default would (same origin, 307/308, at most 10), since
/// other redirects would lose the JSON-RPC body or send the tenant's
/// headers to another host. Idle connections are not pooled (rmcp's
/// default, against Delayed-ACK stalls).
fn egress_client(
    egress: &Arc<EgressPolicy>,
    resolved: Option<(String, Vec<std::net::SocketAddr>)>,
) -> reqwest::Result<reqwest::Client> {
    let redirects = reqwest::redirect::Policy::custom(|attempt| {
        let same_origin = attempt
            .previous()
            .last()
            .is_some_and(|from| from.origin() == attempt.url().origin());
        let keeps_body = matches!(attempt.status().as_u16(), 307 | 308);
        if same_origin && keeps_body && attempt.previous().len() <= 10 {
            attempt.follow()
        } else {
            attempt.stop()
        }
    });
    let builder = egress
        .client_builder(EgressKind::Mcp)
        .redirect(redirects)
        .pool_max_idle_per_host(0);
    match resolved {
        Some((host, addrs)) => builder.resolve_to_addrs(&host, &addrs),
        None => builder,
    }
    .build()
}

/// Ends the session (the transport tells the server) without making the
/// caller wait for it: the result is already in hand.
fn close_in_background(mut session: Session) {
    tokio::spawn(async move {
        let _ = session.close_with_timeout(Duration::from_secs(5)).await;
    });
}

fn describe_initialize_error(error: &ClientInitializeError) -> String {
    match error {
        // The transport's own error, without the transport's type name.
        ClientInitializeError::TransportError { error, .. } => error_chain(error.error.as_ref()),
        other => other.to_string(),
    }
}

fn describe_service_error(error: &ServiceError) -> String {
    match error {
        ServiceError::McpError(e) => format!("{} (code {})", e.message, e.code.0),
        ServiceError::TransportSend(error) => error_chain(error.error.as_ref()),
        other => error_chain(other),
    }
}

/// An error and its causes, each cause once ("error sending request for
/// url (…): client error (Connect): Connection refused (os error 111)").
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    if let Some(refused) = refusal_in(error) {
        return refused.to_string();
    }
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let message = cause.to_string();
        if !text.contains(&message) {
            text.push_str(": ");
            text.push_str(&message);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(value: Value) -> ToolEntry {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn config_entries_are_checked() {
        let ok = McpServerConfig::from_tool_entry(&entry(json!({
            "type": "mcp", "name": "docs", "url": "https://mcp.example.com/mcp",
            "headers": {"Authorization": "Bearer t"}
        })))
        .unwrap();
        assert_eq!(ok.headers["Authorization"], "Bearer t");
        for bad in [
            json!({"type": "mcp", "name": "a__b", "url": "https://x/mcp"}),
            json!({"type": "mcp", "name": "", "url": "https://x/mcp"}),
            json!({"type": "mcp", "name": "a", "url": "file:///etc/passwd"}),
            json!({"type": "mcp", "name": "a", "url": "https://x/mcp", "headers": {"bad name": "x"}}),
            json!({"type": "custom", "name": "a"}),
        ] {
            assert!(
                McpServerConfig::from_tool_entry(&entry(bad.clone())).is_err(),
                "accepted {bad}"
            );
        }
    }

    #[tokio::test]
    async fn the_tool_list_cache_keeps_only_the_servers_used_last() {
        // Loopback servers: the default egress policy refuses them before
        // any connection, so each listing fails at once and leaves its slot.
        let registry = McpRegistry::new(McpLimits {
            cached_servers: 2,
            ..McpLimits::default()
        });
        let server = |port: u16| {
            McpServerConfig::from_tool_entry(&entry(json!({
                "type": "mcp", "name": "s", "url": format!("http://127.0.0.1:{port}/mcp")
            })))
            .unwrap()
        };
        for port in 1..=50 {
            assert!(registry.list_tools(&server(port)).await.is_err());
        }
        let lists = registry.lists.lock().unwrap();
        assert_eq!(lists.len(), 2);
        assert!(lists.contains(&server(50).cache_key()));
        assert!(lists.contains(&server(49).cache_key()));
    }

    #[test]
    fn headers_outside_the_safe_set_make_the_server_unusable() {
        let config = McpServerConfig::from_tool_entry(&entry(json!({
            "type": "mcp", "name": "a", "url": "https://x/mcp",
            "headers": {"Authorization": "Bearer t", "X-Tenant": "7"}
        })))
        .unwrap();
        let mut sent: Vec<String> = config
            .header_map()
            .unwrap()
            .keys()
            .map(|k| k.to_string())
            .collect();
        sent.sort();
        assert_eq!(sent, ["authorization", "x-tenant"]);
        for refused in ["Accept", "Metadata-Flavor", "X-Forwarded-For"] {
            let error = McpServerConfig::from_tool_entry(&entry(json!({
                "type": "mcp", "name": "a", "url": "https://x/mcp",
                "headers": {"Authorization": "Bearer t", refused: "x"}
            })))
            .unwrap_err()
            .to_string();
            assert!(error.contains(refused), "{error}");
        }
    }

    #[test]
    fn cache_key_ignores_the_prefix_but_not_headers() {
        let a = McpServerConfig {
            name: "a".into(),
            url: "https://x/mcp".into(),
            headers: BTreeMap::new(),
        };
        let b = McpServerConfig {
            name: "b".into(),
            ..a.clone()
        };
        let mut c = a.clone();
        c.headers.insert("authorization".into(), "Bearer 2".into());
        assert_eq!(a.cache_key(), b.cache_key());
        assert_ne!(a.cache_key(), c.cache_key());
    }
}
