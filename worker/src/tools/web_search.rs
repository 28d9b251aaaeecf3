//! `web_search`: search the web through the operator's search backend and
//! give the model a short list of results.
//!
//! Backends (`HOLDFAST_WEB_SEARCH_BACKEND`): a SearXNG instance's JSON API
//! (`GET {url}/search?q=…&format=json`), the natural choice for self-hosters,
//! or the Brave Search API (`GET {url}/res/v1/web/search?q=…&count=…`, the
//! key in `X-Subscription-Token`). The backend, its URL and its key are the
//! operator's, like a model endpoint: they never appear in an agent's config
//! or in a result, and the URL does not go through the egress policy (the
//! model picks only the query, never where it is sent).
//!
//! A call is bounded: at most [`WebSearchLimits::max_results`] results, each
//! snippet cut to [`WebSearchLimits::max_snippet_chars`], the whole output to
//! [`WebSearchLimits::max_output_bytes`] (later results dropped, marked
//! `truncated: true`), the backend's body read to
//! [`WebSearchLimits::max_body_bytes`], and a total timeout per attempt. A
//! 429 or 5xx is retried inside the call with [`Backoff`] (honouring
//! `Retry-After`, up to the backoff's cap); when retries run out the call
//! ends with an error result, never a failed turn.
//!
//! Output: `{"query", "results": [{"title", "url", "snippet", "published"?}],
//! "truncated"}`, `query` as sent to the backend (with `site:` when given).

use std::fmt;
use std::time::Duration;

use holdfast_outbound::backoff::Backoff;
use holdfast_providers::ToolDefinition;
use holdfast_wire::config::ToolEntry;
use reqwest::header::{HeaderValue, ACCEPT, RETRY_AFTER};
use reqwest::{StatusCode, Url};
use serde::Deserialize;
use serde_json::{json, Value};

use super::ToolOutput;

/// A backend key: shown as `***` in logs and settings dumps.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(pub String);

impl std::str::FromStr for ApiKey {
    type Err = std::convert::Infallible;

    fn from_str(key: &str) -> Result<ApiKey, Self::Err> {
        Ok(ApiKey(key.to_owned()))
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// Where searches go (the operator's choice).
#[derive(Clone, Debug, PartialEq)]
pub enum WebSearchBackend {
    /// A SearXNG instance with the `json` format enabled (`search.formats`
    /// in its settings.yml); `url` is its base URL.
    Searxng { url: Url },
    /// The Brave Search API; `url` is `https://api.search.brave.com` unless
    /// the operator points it at a compatible proxy.
    Brave { url: Url, api_key: ApiKey },
}

impl WebSearchBackend {
    /// The default base URL of the Brave Search API.
    pub const BRAVE_URL: &'static str = "https://api.search.brave.com";
}

/// How far one search may go, and how it retries. The defaults suit a
/// model reading result lists.
#[derive(Clone, Debug)]
pub struct WebSearchLimits {
    /// `None`: no backend configured; every call says so.
    pub backend: Option<WebSearchBackend>,
    /// Results returned at most (the model's `max_results` may lower it).
    pub max_results: usize,
    /// Characters of each snippet kept.
    pub max_snippet_chars: usize,
    /// Bytes of the whole output (its JSON) at most.
    pub max_output_bytes: usize,
    /// Bytes of the backend's response read at most.
    pub max_body_bytes: usize,
    /// Time for one attempt (headers and body).
    pub attempt_timeout: Duration,
    /// Retries after a 429 or 5xx (`HOLDFAST_WEB_SEARCH_MAX_RETRIES`).
    pub max_retries: u32,
    /// Delays between those retries (`HOLDFAST_WEB_SEARCH_BACKOFF_BASE`,
    /// `HOLDFAST_WEB_SEARCH_BACKOFF_MAX`).
    pub backoff: Backoff,
}

impl Default for WebSearchLimits {
    fn default() -> Self {
        WebSearchLimits {
            backend: None,
            max_results: 10,
            max_snippet_chars: 400,
            max_output_bytes: 16 * 1024,
            max_body_bytes: 2 * 1024 * 1024,
            attempt_timeout: Duration::from_secs(20),
            max_retries: 3,
            backoff: Backoff {
                base: Duration::from_millis(500),
                cap: Duration::from_secs(8),
            },
        }
    }
}

/// The largest `max_results` a model may ask for (Brave's own maximum).
const MAX_RESULTS_CEILING: u64 = 20;

/// The tool as the model sees it.
pub fn web_search_definition() -> ToolDefinition {
    ToolDefinition {
        name: ToolEntry::WebSearch {}.name().into(),
        description: "Search the web. Returns {query, results: [{title, url, snippet, \
            published?}], truncated}: a short list of pages, not their content (use \
            web_fetch on a result's url to read it). Cite a result by its url."
            .into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 400,
                    "description": "What to search for."
                },
                "max_results": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_RESULTS_CEILING,
                    "description": "Return at most this many results (the runtime's limit applies when larger or absent)."
                },
                "site": {
                    "type": "string",
                    "pattern": "^[A-Za-z0-9.-]+$",
                    "description": "Only results from this domain, e.g. docs.rs."
                },
                "recency_days": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "Only results from about the last this many days (rounded up to a day, week, month or year)."
                }
            },
            "required": ["query"],
            "additionalProperties": false
        }),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WebSearchInput {
    query: String,
    max_results: Option<u64>,
    site: Option<String>,
    recency_days: Option<u64>,
}

/// The time window a search asks its backend for: `recency_days` rounded
/// up to the windows both backends know.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Window {
    Day,
    Week,
    Month,
    Year,
}

impl Window {
    /// `None` beyond a year: no backend window is that wide, so none is sent.
    fn of_days(days: u64) -> Option<Window> {
        match days {
            0..=1 => Some(Window::Day),
            2..=7 => Some(Window::Week),
            8..=31 => Some(Window::Month),
            32..=366 => Some(Window::Year),
            _ => None,
        }
    }

    /// SearXNG's `time_range`.
    fn searxng(self) -> &'static str {
        match self {
            Window::Day => "day",
            Window::Week => "week",
            Window::Month => "month",
            Window::Year => "year",
        }
    }

    /// Brave's `freshness`.
    fn brave(self) -> &'static str {
        match self {
            Window::Day => "pd",
            Window::Week => "pw",
            Window::Month => "pm",
            Window::Year => "py",
        }
    }
}

/// One result, as the model sees it.
#[derive(Debug, PartialEq)]
struct Hit {
    title: String,
    url: String,
    snippet: String,
    published: Option<String>,
}

/// Searches for `input.query` within `limits`; never panics, never returns
/// `Err`: every failure is a [`ToolOutput`] with `is_error: true`.
pub async fn web_search(
    client: &reqwest::Client,
    input: &Value,
    limits: &WebSearchLimits,
) -> ToolOutput {
    let input = match WebSearchInput::deserialize(input) {
        Ok(input) => input,
        Err(e) => {
            return ToolOutput::error(format!(
                "web_search: invalid input ({e}). Expected {{\"query\": \"...\", \"max_results\"?: 1-{MAX_RESULTS_CEILING}, \"site\"?: \"example.com\", \"recency_days\"?: positive integer}}."
            ))
        }
    };
    let Some(backend) = &limits.backend else {
        return ToolOutput::error(
            "web_search: no search backend is configured on this deployment (the operator sets HOLDFAST_WEB_SEARCH_BACKEND).",
        );
    };
    let mut query = input.query.trim().to_owned();
    if query.is_empty() {
        return ToolOutput::error("web_search: query must not be empty.");
    }
    if let Some(site) = input.site.as_deref().map(str::trim) {
        if site.is_empty()
            || !site
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
        {
            return ToolOutput::error(format!(
                "web_search: site {site:?} is not a domain name; give one such as docs.rs."
            ));
        }
        // Both backends understand the `site:` operator.
        query = format!("{query} site:{site}");
    }
    let wanted = match input.max_results {
        Some(0) => return ToolOutput::error("web_search: max_results must be at least 1."),
        Some(n) => usize::try_from(n.min(MAX_RESULTS_CEILING))
            .unwrap_or(limits.max_results)
            .min(limits.max_results),
        None => limits.max_results,
    };
    let window = match input.recency_days {
        Some(0) => return ToolOutput::error("web_search: recency_days must be at least 1."),
        Some(days) => Window::of_days(days),
        None => None,
    };
    let request = request_for(client, backend, &query, wanted, window);
    let body = match send_with_retries(request, limits).await {
        Ok(body) => body,
        Err(message) => return ToolOutput::error(format!("web_search: {message}")),
    };
    let hits = match parse(backend, &body) {
        Ok(hits) => hits,
        Err(e) => {
            return ToolOutput::error(format!(
                "web_search: the search backend's answer could not be read ({e})."
            ))
        }
    };
    ToolOutput::success(compact(&query, hits, wanted, limits))
}

fn request_for(
    client: &reqwest::Client,
    backend: &WebSearchBackend,
    query: &str,
    wanted: usize,
    window: Option<Window>,
) -> reqwest::RequestBuilder {
    match backend {
        WebSearchBackend::Searxng { url } => {
            let mut url = endpoint(url, "search");
            {
                let mut pairs = url.query_pairs_mut();
                pairs.append_pair("q", query).append_pair("format", "json");
                if let Some(window) = window {
                    pairs.append_pair("time_range", window.searxng());
                }
            }
            client.get(url)
        }
        WebSearchBackend::Brave { url, api_key } => {
            let mut url = endpoint(url, "res/v1/web/search");
            {
                let mut pairs = url.query_pairs_mut();
                pairs
                    .append_pair("q", query)
                    .append_pair("count", &wanted.to_string());
                if let Some(window) = window {
                    pairs.append_pair("freshness", window.brave());
                }
            }
            client
                .get(url)
                .header(ACCEPT, HeaderValue::from_static("application/json"))
                .header("X-Subscription-Token", api_key.0.as_str())
        }
    }
}

/// `path` below `base`, whether or not the operator's URL ends in `/`.
fn endpoint(base: &Url, path: &str) -> Url {
    let mut url = base.clone();
    let joined = format!("{}/{path}", base.path().trim_end_matches('/'));
    url.set_path(&joined);
    url
}

/// Sends `request`, retrying 429 and 5xx answers; the body of the first
/// success, or a message for the model.
async fn send_with_retries(
    request: reqwest::RequestBuilder,
    limits: &WebSearchLimits,
) -> std::result::Result<Vec<u8>, String> {
    let mut attempt = 0;
    loop {
        let Some(this) = request.try_clone() else {
            return Err("the request could not be built.".into());
        };
        let outcome = tokio::time::timeout(limits.attempt_timeout, send_once(this, limits)).await;
        let (status, retry_after) = match outcome {
            Ok(Ok(Attempt::Body(body))) => return Ok(body),
            Ok(Ok(Attempt::Refused {
                status,
                retry_after,
            })) if retryable(status) => (status, retry_after),
            Ok(Ok(Attempt::Refused { status, .. })) => {
                return Err(format!(
                    "the search backend answered {status}; the search cannot be done this way."
                ))
            }
            Ok(Err(e)) => {
                return Err(format!(
                    "the search backend could not be reached ({}).",
                    without_url(&e)
                ))
            }
            Err(_) => {
                return Err(format!(
                    "the search backend did not answer within {} s.",
                    limits.attempt_timeout.as_secs_f64()
                ))
            }
        };
        attempt += 1;
        if attempt > limits.max_retries {
            return Err(format!(
                "the search backend answered {status} {} time(s) in a row; try again later.",
                attempt
            ));
        }
        let delay = limits
            .backoff
            .delay(attempt, retry_after.map(|d| d.min(limits.backoff.cap)));
        tracing::info!(%status, attempt, ?delay, "web_search: retrying the backend");
        tokio::time::sleep(delay).await;
    }
}

fn retryable(status: StatusCode) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error()
}

enum Attempt {
    Body(Vec<u8>),
    Refused {
        status: StatusCode,
        retry_after: Option<Duration>,
    },
}

async fn send_once(
    request: reqwest::RequestBuilder,
    limits: &WebSearchLimits,
) -> reqwest::Result<Attempt> {
    let mut response = request.send().await?;
    let status = response.status();
    if !status.is_success() {
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        return Ok(Attempt::Refused {
            status,
            retry_after,
        });
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        body.extend_from_slice(&chunk);
        if body.len() > limits.max_body_bytes {
            // A result list this long is cut; the JSON is then unreadable,
            // which parse() reports.
            body.truncate(limits.max_body_bytes);
            break;
        }
    }
    Ok(Attempt::Body(body))
}

/// A reqwest error without its URL (a Brave proxy URL may carry a token).
fn without_url(error: &reqwest::Error) -> String {
    let mut current: &dyn std::error::Error = error;
    while let Some(source) = current.source() {
        current = source;
    }
    if error.is_timeout() {
        return "timed out".into();
    }
    current.to_string()
}

/// SearXNG's JSON answer: the fields used of each result.
#[derive(Deserialize)]
struct SearxngAnswer {
    results: Vec<SearxngResult>,
}

#[derive(Deserialize)]
struct SearxngResult {
    #[serde(default)]
    title: String,
    url: Option<String>,
    #[serde(default)]
    content: Option<String>,
    #[serde(rename = "publishedDate", default)]
    published_date: Option<String>,
}

/// Brave's answer: web results live under `web.results` (absent when there
/// are none).
#[derive(Deserialize)]
struct BraveAnswer {
    web: Option<BraveWeb>,
}

#[derive(Deserialize)]
struct BraveWeb {
    #[serde(default)]
    results: Vec<BraveResult>,
}

#[derive(Deserialize)]
struct BraveResult {
    #[serde(default)]
    title: String,
    url: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    page_age: Option<String>,
}

fn parse(backend: &WebSearchBackend, body: &[u8]) -> serde_json::Result<Vec<Hit>> {
    Ok(match backend {
        WebSearchBackend::Searxng { .. } => serde_json::from_slice::<SearxngAnswer>(body)?
            .results
            .into_iter()
            .filter_map(|r| {
                Some(Hit {
                    title: r.title,
                    url: r.url?,
                    snippet: r.content.unwrap_or_default(),
                    published: r.published_date,
                })
            })
            .collect(),
        WebSearchBackend::Brave { .. } => serde_json::from_slice::<BraveAnswer>(body)?
            .web
            .map(|web| web.results)
            .unwrap_or_default()
            .into_iter()
            .map(|r| Hit {
                title: r.title,
                url: r.url,
                snippet: r.description.unwrap_or_default(),
                published: r.page_age,
            })
            .collect(),
    })
}

/// The output: the first `wanted` hits with markup stripped and snippets
/// cut, as many as fit in `limits.max_output_bytes`.
fn compact(query: &str, hits: Vec<Hit>, wanted: usize, limits: &WebSearchLimits) -> Value {
    let mut truncated = false;
    let mut results = Vec::new();
    // The envelope's own bytes count too.
    let mut size = json!({"query": query, "results": [], "truncated": true})
        .to_string()
        .len();
    for hit in hits.into_iter().take(wanted) {
        let mut snippet = strip_tags(&hit.snippet);
        if snippet.chars().count() > limits.max_snippet_chars {
            snippet = snippet.chars().take(limits.max_snippet_chars).collect();
            snippet.push('…');
        }
        let mut entry = json!({
            "title": strip_tags(&hit.title),
            "url": hit.url,
            "snippet": snippet,
        });
        if let Some(published) = hit.published.filter(|p| !p.is_empty()) {
            entry["published"] = Value::String(published);
        }
        let entry_size = entry.to_string().len() + 1;
        if size + entry_size > limits.max_output_bytes {
            truncated = true;
            break;
        }
        size += entry_size;
        results.push(entry);
    }
    json!({"query": query, "results": results, "truncated": truncated})
}

/// Snippet text without the HTML the backends mark matches with (Brave's
/// `<strong>`), the common entities decoded and whitespace collapsed.
fn strip_tags(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_tag = false;
    for c in text.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            _ if !in_tag => out.push(c),
            _ => {}
        }
    }
    let decoded = out
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&#x27;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&nbsp;", " ")
        .replace("&amp;", "&");
    decoded.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recency_rounds_up_to_a_backend_window() {
        assert_eq!(Window::of_days(1), Some(Window::Day));
        assert_eq!(Window::of_days(3), Some(Window::Week));
        assert_eq!(Window::of_days(30), Some(Window::Month));
        assert_eq!(Window::of_days(200), Some(Window::Year));
        assert_eq!(Window::of_days(1000), None);
    }

    #[test]
    fn endpoints_join_with_or_without_a_trailing_slash() {
        for base in ["http://s.example/searx", "http://s.example/searx/"] {
            let url = endpoint(&Url::parse(base).unwrap(), "search");
            assert_eq!(url.as_str(), "http://s.example/searx/search");
        }
    }

    #[test]
    fn markup_is_stripped_from_snippets() {
        assert_eq!(
            strip_tags("The <strong>Rust</strong>  book &amp; more"),
            "The Rust book & more"
        );
    }

    #[test]
    fn the_output_stays_within_its_byte_limit() {
        let limits = WebSearchLimits {
            max_output_bytes: 600,
            ..WebSearchLimits::default()
        };
        let hits = (0..10)
            .map(|i| Hit {
                title: format!("t{i}"),
                url: format!("https://e.example/{i}"),
                snippet: "x".repeat(100),
                published: None,
            })
            .collect();
        let out = compact("q", hits, 10, &limits);
        assert!(out.to_string().len() <= 600, "{out}");
        assert_eq!(out["truncated"], true);
        assert!(!out["results"].as_array().unwrap().is_empty());
    }
}
