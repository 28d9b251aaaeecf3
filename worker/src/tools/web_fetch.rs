//! `web_fetch`: GET one http(s) URL and give the model its text.
//!
//! Bounded in every direction, because the URL comes from a model: only
//! http and https; only addresses the egress policy allows for `web_fetch`
//! ([`holdfast_providers::egress`]: public ones, plus what the operator allows
//! with `HOLDFAST_EGRESS_ALLOW`), so a prompt-injected model cannot reach
//! cloud metadata, localhost or the internal network (IP literals are
//! checked before the request and at every redirect, host names when they
//! resolve, so DNS rebinding gains nothing; proxy variables are ignored); a
//! connect timeout and a total timeout (headers and body);
//! at most [`WebFetchLimits::max_redirects`] redirects; the body is streamed
//! and reading stops at the byte cap, with `truncated: true`; the returned
//! text is capped again after extraction. HTML becomes readable text
//! (see `html_text`), JSON and other text types are returned as they are,
//! and binary types are described, not downloaded.
//!
//! Output: `{"url", "status", "content_type", "text", "truncated"}`, where
//! `url` is the final URL after redirects. A 4xx/5xx response is still a
//! full output (the page often says what is wrong) with `is_error: true`.
//! Input errors, refused schemes, timeouts and connection failures are an
//! error output whose message says what to change.

use std::sync::Arc;
use std::time::Duration;

use encoding_rs::{Encoding, UTF_8};
use holdfast_providers::egress::{refusal_in, EgressKind, EgressPolicy};
use holdfast_providers::ToolDefinition;
use holdfast_telemetry as telemetry;
use holdfast_wire::config::ToolEntry;
use reqwest::header::CONTENT_TYPE;
use reqwest::{redirect, Url};
use serde::Deserialize;
use serde_json::{json, Value};

use super::html_text::html_to_text;
use super::ToolOutput;

/// How far one fetch may go. The defaults suit a model reading web pages.
#[derive(Clone, Debug)]
pub struct WebFetchLimits {
    /// Time to establish the TCP (and TLS) connection.
    pub connect_timeout: Duration,
    /// Time for the whole fetch: redirects, headers and body.
    pub total_timeout: Duration,
    /// Redirects followed before giving up.
    pub max_redirects: usize,
    /// Body bytes read at most (the model's `max_bytes` may lower it).
    pub max_body_bytes: usize,
    /// Bytes of extracted text returned at most.
    pub max_text_bytes: usize,
    pub user_agent: String,
    /// Which addresses a fetch may reach (kind `web_fetch`). The default
    /// allows public addresses only.
    pub egress: Arc<EgressPolicy>,
}

impl Default for WebFetchLimits {
    fn default() -> Self {
        WebFetchLimits {
            connect_timeout: Duration::from_secs(10),
            total_timeout: Duration::from_secs(30),
            max_redirects: 5,
            max_body_bytes: 2 * 1024 * 1024,
            max_text_bytes: 100 * 1024,
            user_agent: concat!("holdfast/", env!("CARGO_PKG_VERSION"), " (web_fetch)").into(),
            egress: Arc::default(),
        }
    }
}

/// The HTTP client `web_fetch` expects: connect timeout, redirect policy,
/// user agent, and the egress policy's resolver (proxy variables ignored),
/// all from `limits`; every redirect is checked against the policy again.
/// Build it once and share it (it pools connections); the total timeout and
/// size caps are applied per call.
pub fn web_fetch_client(limits: &WebFetchLimits) -> reqwest::Result<reqwest::Client> {
    let max_redirects = limits.max_redirects;
    let egress = limits.egress.clone();
    let policy = redirect::Policy::custom(move |attempt| {
        if attempt.previous().len() > max_redirects {
            let message = format!("too many redirects (more than {max_redirects})");
            return attempt.error(message);
        }
        if !matches!(attempt.url().scheme(), "http" | "https") {
            let message = format!("redirected to {}, which is not http(s)", attempt.url());
            return attempt.error(message);
        }
        if let Err(refused) = egress.check_url(EgressKind::WebFetch, attempt.url()) {
            return attempt.error(refused);
        }
        attempt.follow()
    });
    limits
        .egress
        .client_builder(EgressKind::WebFetch)
        .connect_timeout(limits.connect_timeout)
        .redirect(policy)
        .user_agent(limits.user_agent.clone())
        .build()
}

/// The tool as the model sees it.
pub fn web_fetch_definition() -> ToolDefinition {
    ToolDefinition {
        name: ToolEntry::WebFetch {}.name().into(),
        description: "Fetch a web page or file over http(s) with a GET request and return its \
            content as text. HTML is converted to readable text (headings as #, lists, \
            links as [text](url)); JSON and plain text are returned as they are; binary \
            files are only described. Long content is cut off and marked truncated: true. \
            Returns {url, status, content_type, text, truncated}."
            .into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "url": {
                    "type": "string",
                    "description": "The absolute http:// or https:// URL to fetch."
                },
                "max_bytes": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "Read at most this many bytes of the response body (the runtime's limit applies when larger or absent)."
                }
            },
            "required": ["url"],
            "additionalProperties": false
        }),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WebFetchInput {
    url: String,
    max_bytes: Option<u64>,
}

/// Fetches `input.url` within `limits`; never panics, never returns `Err`:
/// every failure is a [`ToolOutput`] with `is_error: true`. `client` should
/// come from [`web_fetch_client`].
pub async fn web_fetch(
    client: &reqwest::Client,
    input: &Value,
    limits: &WebFetchLimits,
) -> ToolOutput {
    let input = match WebFetchInput::deserialize(input) {
        Ok(input) => input,
        Err(e) => {
            return ToolOutput::error(format!(
                "web_fetch: invalid input ({e}). Expected {{\"url\": \"https://...\", \"max_bytes\"?: positive integer}}."
            ))
        }
    };
    let url = match Url::parse(input.url.trim()) {
        Ok(url) => url,
        Err(e) => {
            return ToolOutput::error(format!(
                "web_fetch: {:?} is not a valid absolute URL ({e}). Give a full URL such as https://example.com/page.",
                input.url
            ))
        }
    };
    if !matches!(url.scheme(), "http" | "https") {
        return ToolOutput::error(format!(
            "web_fetch: the {:?} scheme is not supported; only http:// and https:// URLs can be fetched.",
            url.scheme()
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return ToolOutput::error(format!("web_fetch: {url} has no host."));
    }
    if let Err(refused) = limits.egress.check_url(EgressKind::WebFetch, &url) {
        return ToolOutput::error(format!("web_fetch: {url}: {refused}"));
    }
    let body_cap = match input.max_bytes {
        Some(0) => return ToolOutput::error("web_fetch: max_bytes must be at least 1."),
        Some(n) => usize::try_from(n)
            .unwrap_or(usize::MAX)
            .min(limits.max_body_bytes),
        None => limits.max_body_bytes,
    };
    match tokio::time::timeout(
        limits.total_timeout,
        fetch(client, url.clone(), body_cap, limits),
    )
    .await
    {
        Ok(Ok(output)) => output,
        Ok(Err(e)) => ToolOutput::error(format!(
            "web_fetch: fetching {url} failed: {}",
            describe(&e)
        )),
        Err(_) => ToolOutput::error(format!(
            "web_fetch: fetching {url} timed out after {} s.",
            limits.total_timeout.as_secs_f64()
        )),
    }
}

/// How the body is turned into text, decided from the Content-Type (and,
/// when there is none, from the first bytes).
#[derive(Clone, Copy, Debug, PartialEq)]
enum BodyKind {
    Html,
    Text,
    Binary,
}

async fn fetch(
    client: &reqwest::Client,
    url: Url,
    body_cap: usize,
    limits: &WebFetchLimits,
) -> reqwest::Result<ToolOutput> {
    let mut request = client.get(url);
    for (name, value) in telemetry::outbound_headers() {
        request = request.header(name, value);
    }
    let mut response = request.send().await?;
    let status = response.status();
    let final_url = response.url().clone();
    let content_type = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mime = content_type.as_deref().map(|ct| {
        ct.split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
    });
    let declared_kind = mime.as_deref().map(kind_of_mime);

    let (text, truncated) = if declared_kind == Some(BodyKind::Binary) {
        // Not downloaded: the model cannot use the bytes.
        let size = response
            .content_length()
            .map(|n| format!(", {n} bytes"))
            .unwrap_or_default();
        let mime = mime.as_deref().unwrap_or("unknown");
        (
            format!("[binary content ({mime}{size}) not downloaded: web_fetch returns text only]"),
            false,
        )
    } else {
        let mut body = Vec::new();
        let mut truncated = false;
        while let Some(chunk) = response.chunk().await? {
            body.extend_from_slice(&chunk);
            if body.len() > body_cap {
                body.truncate(body_cap);
                truncated = true;
                break;
            }
        }
        let kind = declared_kind.unwrap_or_else(|| sniff(&body));
        let text = match kind {
            BodyKind::Binary => format!(
                "[binary content ({} bytes read) not shown: web_fetch returns text only]",
                body.len()
            ),
            BodyKind::Html => {
                let decoded = decode_body(&body, content_type.as_deref(), kind);
                html_to_text(&decoded, Some(&final_url))
            }
            BodyKind::Text => decode_body(&body, content_type.as_deref(), kind),
        };
        let (text, cut) = cap_text(text, limits.max_text_bytes);
        (text, truncated || cut)
    };

    let output = json!({
        "url": final_url.as_str(),
        "status": status.as_u16(),
        "content_type": content_type,
        "text": text,
        "truncated": truncated,
    });
    Ok(ToolOutput {
        output,
        is_error: status.is_client_error() || status.is_server_error(),
    })
}

fn kind_of_mime(mime: &str) -> BodyKind {
    match mime {
        "text/html" | "application/xhtml+xml" => BodyKind::Html,
        _ if mime.starts_with("text/") => BodyKind::Text,
        "application/json"
        | "application/xml"
        | "application/javascript"
        | "application/ecmascript"
        | "application/x-javascript"
        | "application/x-ndjson"
        | "application/ndjson"
        | "application/yaml"
        | "application/x-yaml"
        | "application/toml"
        | "application/graphql"
        | "application/x-www-form-urlencoded"
        | "image/svg+xml" => BodyKind::Text,
        _ if mime.ends_with("+json") || mime.ends_with("+xml") => BodyKind::Text,
        _ => BodyKind::Binary,
    }
}

/// No Content-Type: text if the start decodes as UTF-8 without NULs, HTML
/// if it also looks like a document.
fn sniff(body: &[u8]) -> BodyKind {
    let head = &body[..body.len().min(1024)];
    let text = match std::str::from_utf8(head) {
        Ok(text) => text,
        // A multi-byte character cut by the 1 KiB window is still text.
        Err(e) if e.error_len().is_none() => {
            std::str::from_utf8(&head[..e.valid_up_to()]).unwrap_or("")
        }
        Err(_) => return BodyKind::Binary,
    };
    if text.contains('\0') {
        return BodyKind::Binary;
    }
    let start = text
        .trim_start()
        .get(..15)
        .unwrap_or("")
        .to_ascii_lowercase();
    if start.starts_with("<!doctype html") || start.starts_with("<html") {
        BodyKind::Html
    } else {
        BodyKind::Text
    }
}

/// Bytes to text in the page's encoding, found as a browser finds it: a
/// byte order mark, else the Content-Type's charset, else (HTML) a
/// `charset=` in the first 1024 bytes (a `<meta>`), else UTF-8 when the bytes
/// are UTF-8, else chardetng's guess. Labels mean what the WHATWG Encoding
/// standard says (`iso-8859-1` is windows-1252, as in browsers). A character
/// cut by the size cap is dropped, not replaced.
fn decode_body(body: &[u8], content_type: Option<&str>, kind: BodyKind) -> String {
    let declared = content_type
        .and_then(|ct| {
            ct.split(';').skip(1).find_map(|param| {
                let (key, value) = param.split_once('=')?;
                key.trim()
                    .eq_ignore_ascii_case("charset")
                    .then(|| Encoding::for_label(value.trim().trim_matches('"').as_bytes()))
                    .flatten()
            })
        })
        .or_else(|| match kind {
            BodyKind::Html => charset_in_head(body),
            _ => None,
        });
    let encoding = Encoding::for_bom(body)
        .map(|(encoding, _)| encoding)
        .or(declared)
        .unwrap_or_else(|| match std::str::from_utf8(body) {
            Ok(_) => UTF_8,
            // A UTF-8 body cut mid-character by the cap is still UTF-8.
            Err(e) if e.error_len().is_none() => UTF_8,
            Err(_) => {
                let mut detector = chardetng::EncodingDetector::new();
                detector.feed(body, true);
                detector.guess(None, true)
            }
        });
    // Not the last buffer: an incomplete character at the end stays in the
    // decoder instead of becoming U+FFFD.
    let mut decoder = encoding.new_decoder_with_bom_removal();
    let mut text = String::with_capacity(
        decoder
            .max_utf8_buffer_length(body.len())
            .unwrap_or(body.len() * 3),
    );
    let _ = decoder.decode_to_string(body, &mut text, false);
    text
}

/// The encoding a page names in its first 1024 bytes (`<meta charset=…>`
/// or `<meta http-equiv=Content-Type content="…; charset=…">`).
fn charset_in_head(body: &[u8]) -> Option<&'static Encoding> {
    let head = &body[..body.len().min(1024)];
    let lower = head.to_ascii_lowercase();
    let at = lower.windows(8).position(|w| w == b"charset=")? + 8;
    let label = &head[at..];
    let label = label
        .strip_prefix(b"\"")
        .or_else(|| label.strip_prefix(b"'"))
        .unwrap_or(label);
    let end = label
        .iter()
        .position(|b| matches!(b, b'"' | b'\'' | b';' | b'>' | b'/') || b.is_ascii_whitespace())
        .unwrap_or(label.len());
    Encoding::for_label(&label[..end])
}

/// Cuts `text` to at most `max` bytes at a character boundary.
fn cap_text(mut text: String, max: usize) -> (String, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    (text, true)
}

/// A reqwest error in words a model can act on.
fn describe(error: &reqwest::Error) -> String {
    if let Some(refused) = refusal_in(error) {
        return refused.to_string();
    }
    if error.is_redirect() {
        return root_cause(error);
    }
    if error.is_timeout() {
        return "timed out".into();
    }
    if error.is_connect() {
        return format!("could not connect ({})", root_cause(error));
    }
    root_cause(error)
}

fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut current = error;
    while let Some(source) = current.source() {
        current = source;
    }
    current.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mime_kinds() {
        assert_eq!(kind_of_mime("text/html"), BodyKind::Html);
        assert_eq!(kind_of_mime("text/csv"), BodyKind::Text);
        assert_eq!(kind_of_mime("application/vnd.api+json"), BodyKind::Text);
        assert_eq!(kind_of_mime("image/png"), BodyKind::Binary);
        assert_eq!(kind_of_mime("application/octet-stream"), BodyKind::Binary);
    }

    #[test]
    fn sniffing_without_content_type() {
        assert_eq!(sniff(b"  <!DOCTYPE html><p>x"), BodyKind::Html);
        assert_eq!(sniff(b"plain words"), BodyKind::Text);
        assert_eq!(sniff(b"\x89PNG\r\n\x1a\n\0\0"), BodyKind::Binary);
    }

    #[test]
    fn decoding_drops_a_cut_character() {
        let cut = "héllo".as_bytes()[..2].to_vec(); // "h" + half of "é"
        assert_eq!(decode_body(&cut, Some("text/plain"), BodyKind::Text), "h");
        let cut = b"\x82\xb1\x82"; // "こ" + half of "ん" in Shift_JIS
        assert_eq!(
            decode_body(cut, Some("text/plain; charset=Shift_JIS"), BodyKind::Text),
            "こ"
        );
    }

    #[test]
    fn declared_charsets_decode() {
        let decode = |body: &[u8], charset: &str| {
            decode_body(
                body,
                Some(&format!("text/plain; charset={charset}")),
                BodyKind::Text,
            )
        };
        // ISO-8859-1 means windows-1252, as in browsers: 0x80 and 0x93/0x94
        // are the euro sign and curly quotes, not C1 controls.
        assert_eq!(
            decode(b"\x80 5, \x93caf\xe9\x94", "ISO-8859-1"),
            "€ 5, “café”"
        );
        assert_eq!(
            decode(b"\x80 5, \x93caf\xe9\x94", "windows-1252"),
            "€ 5, “café”"
        );
        assert_eq!(
            decode(b"\x82\xb1\x82\xf1\x82\xc9\x82\xbf\x82\xcd", "Shift_JIS"),
            "こんにちは"
        );
        assert_eq!(decode(b"\xc4\xe3\xba\xc3", "GBK"), "你好");
        assert_eq!(
            decode(b"\xcf\xf0\xe8\xe2\xe5\xf2", "windows-1251"),
            "Привет"
        );
        assert_eq!(
            decode(b"\xcf\xf0\xe8\xe2\xe5\xf2", "\"windows-1251\""),
            "Привет"
        );
    }

    #[test]
    fn html_names_its_charset_in_a_meta_tag() {
        let page =
            b"<html><head><meta charset=\"windows-1251\"><title>\xcf\xf0\xe8\xe2\xe5\xf2</title>";
        assert!(decode_body(page, Some("text/html"), BodyKind::Html).contains("Привет"));
        let page = b"<meta http-equiv=\"Content-Type\" content=\"text/html; charset=shift_jis\">\x82\xb1\x82\xf1";
        assert!(decode_body(page, None, BodyKind::Html).ends_with("こん"));
        // The header wins over the page, and a byte order mark over both.
        let page = b"<meta charset=shift_jis>\xcf\xf0";
        assert!(decode_body(
            page,
            Some("text/html; charset=windows-1251"),
            BodyKind::Html
        )
        .ends_with("Пр"));
        let page = b"\xef\xbb\xbf<meta charset=windows-1251>\xd0\x9f";
        assert!(decode_body(
            page,
            Some("text/html; charset=windows-1251"),
            BodyKind::Html
        )
        .ends_with("П"));
    }

    #[test]
    fn undeclared_non_utf8_text_is_guessed() {
        let text = "Съешь же ещё этих мягких французских булок, да выпей чаю. \
                    Широкая электрификация южных губерний даст мощный толчок подъёму сельского хозяйства.";
        let (body, _, _) = encoding_rs::WINDOWS_1251.encode(text);
        assert_eq!(decode_body(&body, Some("text/plain"), BodyKind::Text), text);
        assert_eq!(
            decode_body("plain ascii".as_bytes(), None, BodyKind::Text),
            "plain ascii"
        );
    }

    #[test]
    fn text_cap_respects_char_boundaries() {
        assert_eq!(cap_text("aé".into(), 2), ("a".to_string(), true));
        assert_eq!(cap_text("ab".into(), 2), ("ab".to_string(), false));
    }
}
