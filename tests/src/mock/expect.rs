//! The headers a provider requires: `POST /_expect {"provider", "headers": {NAME: VALUE}}`
//! makes every later call to that provider that lacks one of them (or carries another
//! value) a `401`, as a real provider refuses a call without its key, so that a test
//! fails when a provider's configured headers do not reach it.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;
use std::collections::{BTreeMap, HashMap};

/// The headers each provider requires, by provider; names in lower case.
pub(super) type Expected = HashMap<String, BTreeMap<String, String>>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Expect {
    provider: String,
    headers: BTreeMap<String, String>,
}

pub(super) async fn expect(
    State(mock): State<super::Mock>,
    Json(expect): Json<Expect>,
) -> StatusCode {
    let headers = expect
        .headers
        .into_iter()
        .map(|(name, value)| (name.to_ascii_lowercase(), value))
        .collect();
    mock.lock().expected.insert(expect.provider, headers);
    StatusCode::NO_CONTENT
}

/// The `401` for a call to `provider` that lacks a header it requires, if it does.
pub(super) fn refused(
    expected: &Expected,
    provider: &str,
    headers: &HeaderMap,
) -> Option<Response> {
    let (name, _) = expected.get(provider)?.iter().find(|(name, value)| {
        headers.get(name.as_str()).and_then(|v| v.to_str().ok()) != Some(value.as_str())
    })?;
    let message = format!("this provider requires the header {name}");
    Some(
        (
            StatusCode::UNAUTHORIZED,
            Json(json!({"error": {"message": message}})),
        )
            .into_response(),
    )
}

/// The headers of a call worth recording: every one but the transport's.
pub(super) fn recorded(headers: &HeaderMap) -> BTreeMap<String, String> {
    const TRANSPORT: [&str; 6] = [
        "host",
        "content-length",
        "connection",
        "accept",
        "accept-encoding",
        "user-agent",
    ];
    headers
        .iter()
        .filter(|(name, _)| !TRANSPORT.contains(&name.as_str()))
        .filter_map(|(name, value)| {
            Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned()))
        })
        .collect()
}
