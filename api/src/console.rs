//! The web console: `GET /` and `/console/*`, static files compiled into the
//! binary (no CDN, no second server, no build step besides `cargo build`).
//! Every response carries a strict Content-Security-Policy: scripts and
//! styles from this origin only, no inline script, no framing.

use axum::extract::Path;
use axum::http::{header, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::error::ApiError;
use crate::state::AppState;

/// The policy every console response carries (docs/security.md, "The console").
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; \
     base-uri 'none'; form-action 'self'";

/// The console's files: (name, content type, bytes).
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("../console/app.js"),
    ),
    (
        "render.js",
        "text/javascript; charset=utf-8",
        include_str!("../console/render.js"),
    ),
    (
        "sse.js",
        "text/javascript; charset=utf-8",
        include_str!("../console/sse.js"),
    ),
    (
        "favicon.svg",
        "image/svg+xml",
        include_str!("../console/favicon.svg"),
    ),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_str!("../console/style.css"),
    ),
];

const INDEX: &str = include_str!("../console/index.html");

/// The console's routes (no auth: the page holds no data; the script signs
/// in with the API key against `/v1`).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(index))
        .route("/console/{file}", get(asset))
}

fn with_security_headers(mut response: Response, cache: &'static str) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    headers.insert(
        HeaderName::from_static("cross-origin-opener-policy"),
        HeaderValue::from_static("same-origin"),
    );
    response
}

async fn index() -> Response {
    let response = ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], INDEX).into_response();
    with_security_headers(response, "no-cache")
}

async fn asset(Path(file): Path<String>) -> Response {
    match ASSETS.iter().find(|(name, _, _)| *name == file) {
        // Assets change only with the binary; no-cache revalidates cheaply
        // and a new version is never hidden behind a stale copy.
        Some((_, content_type, body)) => with_security_headers(
            ([(header::CONTENT_TYPE, *content_type)], *body).into_response(),
            "no-cache",
        ),
        None => with_security_headers(
            ApiError::not_found(format!("no console file {file}")).into_response(),
            "no-store",
        ),
    }
}
