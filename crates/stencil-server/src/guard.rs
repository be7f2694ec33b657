//! Who may drive the server: the checks every request passes before a handler runs.
//!
//! A local server is reachable by every web page the user opens. Browsers send "simple"
//! cross-origin requests (a `text/plain` POST) without asking, and DNS rebinding lets a hostile
//! domain resolve to 127.0.0.1. So, in this order:
//! 1. **Host**: the `Host` header must be an IP literal, `localhost` (or `*.localhost`), or a
//!    name given with `--allowed-host`. A rebinding attack always carries its own domain name.
//! 2. **Origin**: a request from a web page (`Origin` header) must be same-origin or from an
//!    origin given with `--cors-origin`; only those get CORS headers, and a preflight
//!    (`OPTIONS`) is answered only for them. No origin is allowed by default.
//! 3. **Content-Type**: a POST body must be `application/json` (415 otherwise), which no web
//!    page can send cross-origin without a preflight.
//! 4. **API key** (when set): `Authorization: Bearer <key>` (the scheme matched
//!    case-insensitively, RFC 7235) or Anthropic's `x-api-key: <key>` on `/v1` and `/api`, the
//!    key compared in constant time.
//!
//! Refusals are written in the shape of the API the path belongs to.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use stencil_openai::ApiError;

use crate::errors::Api;
use crate::handlers::ErrorResponse;
use crate::AppState;

/// Host, origin and content-type checks; adds CORS headers for allowed origins.
pub(crate) async fn guard(
    State(state): State<Arc<AppState>>,
    req: Request,
    next: Next,
) -> Response {
    let config = &state.config;
    let api = Api::for_path(req.uri().path());
    let headers = req.headers();
    if let Some(host) = headers.get(header::HOST) {
        let host = host.to_str().unwrap_or_default();
        if !host_allowed(host, &config.allowed_hosts) {
            return refuse(
                api,
                StatusCode::FORBIDDEN,
                format!("Host `{host}` is not allowed: this server answers requests for localhost and IP addresses; start it with --allowed-host {} to serve that name", host_name(host)),
                "host_not_allowed",
            );
        }
    }
    let origin = match headers.get(header::ORIGIN) {
        None => None,
        Some(o) => {
            let text = o.to_str().unwrap_or_default();
            if !origin_allowed(text, headers, &config.cors_origins) {
                return refuse(
                api,
                    StatusCode::FORBIDDEN,
                    format!("requests from web pages at `{text}` are refused; start the server with --cors-origin {text} to allow that origin"),
                    "origin_not_allowed",
                );
            }
            Some(o.clone())
        }
    };
    let preflight = req.method() == Method::OPTIONS
        && headers.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    if let (true, Some(origin)) = (preflight, &origin) {
        let mut r = StatusCode::NO_CONTENT.into_response();
        let h = r.headers_mut();
        cors_headers(h, origin);
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST, OPTIONS"),
        );
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static(
                "authorization, content-type, x-api-key, anthropic-version, anthropic-beta",
            ),
        );
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("600"),
        );
        return r;
    }
    if req.method() == Method::POST && !is_json(headers) {
        let got = headers
            .get(header::CONTENT_TYPE)
            .map_or("no Content-Type".to_string(), |v| {
                format!("Content-Type `{}`", v.to_str().unwrap_or("?"))
            });
        return refuse(
                api,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("the request body must be sent as `Content-Type: application/json` (got {got}; with curl add -H 'Content-Type: application/json')"),
            "unsupported_media_type",
        );
    }
    let mut response = next.run(req).await;
    if let Some(origin) = &origin {
        cors_headers(response.headers_mut(), origin);
    }
    response
}

/// `Authorization: Bearer <key>` on `/v1` routes when the server has a key.
pub(crate) async fn auth(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if let Some(key) = &state.config.api_key {
        let path = req.uri().path();
        if path.starts_with("/v1") || path.starts_with("/api") {
            let h = req.headers();
            let bearer = h
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(bearer_token);
            let x_api_key = h.get("x-api-key").and_then(|v| v.to_str().ok());
            let ok = [bearer, x_api_key]
                .into_iter()
                .flatten()
                .any(|k| same_secret(k.trim().as_bytes(), key.as_bytes()));
            if !ok {
                return ErrorResponse(Api::for_path(path), ApiError::unauthorized())
                    .into_response();
            }
        }
    }
    next.run(req).await
}

/// The token of an `Authorization` value with the `Bearer` scheme, in any letter case.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// Compares two secrets in time that depends only on their lengths.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        diff |= a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0xff);
    }
    std::hint::black_box(diff) == 0
}

fn refuse(api: Api, status: StatusCode, message: String, code: &str) -> Response {
    ErrorResponse(
        api,
        ApiError {
            status: status.as_u16(),
            message,
            kind: "invalid_request_error",
            param: None,
            code: Some(code.into()),
        },
    )
    .into_response()
}

/// The host name of a `Host` value, without its port (`[::1]:80` -> `::1`).
fn host_name(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let name = host_name(host).trim_end_matches('.').to_ascii_lowercase();
    name.parse::<IpAddr>().is_ok()
        || name == "localhost"
        || name.ends_with(".localhost")
        || allowed
            .iter()
            .any(|a| a == "*" || a.trim_end_matches('.').eq_ignore_ascii_case(&name))
}

/// Same-origin (the origin's host and port are this request's `Host`) or configured.
fn origin_allowed(origin: &str, headers: &HeaderMap, allowed: &[String]) -> bool {
    if allowed
        .iter()
        .any(|a| a == "*" || a.trim_end_matches('/') == origin)
    {
        return true;
    }
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    origin.split_once("://").is_some_and(|(scheme, rest)| {
        matches!(scheme, "http" | "https") && rest.eq_ignore_ascii_case(host)
    })
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"))
}

fn cors_headers(h: &mut HeaderMap, origin: &HeaderValue) {
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
    h.insert(header::VARY, HeaderValue::from_static("Origin"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts() {
        let none: &[String] = &[];
        for ok in [
            "localhost",
            "localhost:8080",
            "127.0.0.1:8080",
            "[::1]:80",
            "10.0.0.5",
            "app.localhost:1",
        ] {
            assert!(host_allowed(ok, none), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:8080",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
        ] {
            assert!(!host_allowed(bad, none), "{bad}");
        }
        assert!(host_allowed("box.lan:8080", &["box.lan".into()]));
        assert!(host_allowed("anything", &["*".into()]));
    }

    #[test]
    fn bearer_and_secrets() {
        assert_eq!(bearer_token("Bearer k1"), Some("k1"));
        assert_eq!(bearer_token("bearer  k1 "), Some("k1"));
        assert_eq!(bearer_token("BEARER k1"), Some("k1"));
        assert_eq!(bearer_token("Basic k1"), None);
        assert_eq!(bearer_token("Bearer "), None);
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abc", b"abd"));
        assert!(!same_secret(b"abc", b"abcd"));
        assert!(!same_secret(b"", b"a"));
    }

    #[test]
    fn origins() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8080"));
        assert!(origin_allowed("http://127.0.0.1:8080", &h, &[]));
        assert!(!origin_allowed("http://evil.example", &h, &[]));
        assert!(!origin_allowed("null", &h, &[]));
        assert!(origin_allowed(
            "http://app.test",
            &h,
            &["http://app.test/".into()]
        ));
    }
}
