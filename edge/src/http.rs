//! What every handler shares about HTTP: the request's context, reading a JSON body
//! within its limit, conditional headers, and JSON answers.

use crate::error::{ApiResult, AppError};
use crate::store::{Store, StoredJob};
use futures_util::StreamExt;
use onceclick_protocol::etag::Condition;
use onceclick_protocol::{ijson, ErrorCode, MAX_BODY_BYTES};
use serde::de::DeserializeOwned;
use worker::{Env, Headers, Request, Response};

/// Everything a handler may need about the request's world.
pub(crate) struct Ctx<'a> {
    pub(crate) env: &'a Env,
    /// The same world through the core's interface (`host.rs`).
    pub(crate) host: &'a dyn crate::host::Host,
    /// The request's context: work that may finish after the response (`wait_until`).
    pub(crate) worker: &'a worker::Context,
    pub(crate) store: &'a Store,
    /// Test-only faults this request armed (`X-Onceclick-Fault`), handed on to the
    /// dispatch of any attempt it creates.
    pub(crate) fault: Option<String>,
}

/// Reads the body as I-JSON into `T`: `413` over 64 KiB, `400 invalid_json` otherwise.
pub(crate) async fn read_json<T: DeserializeOwned>(req: &mut Request, what: &str) -> ApiResult<T> {
    let body = read_body(req).await?;
    // An empty body is an empty object: every field of an optional body is optional.
    let body = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}".to_vec()
    } else {
        body
    };
    let value =
        ijson::parse(&body).map_err(|e| AppError::new(ErrorCode::InvalidJson, e.to_string()))?;
    // serde reads a struct from a JSON array too (its fields in order): every body of
    // the API is an object, so anything else is refused before it can mean something.
    if !value.is_object() {
        return Err(AppError::new(
            ErrorCode::InvalidJson,
            format!("the body is not {what}: it must be a JSON object"),
        ));
    }
    serde_json::from_value(value).map_err(|e| {
        AppError::new(
            ErrorCode::InvalidJson,
            format!("the body is not {what}: {e}"),
        )
    })
}

/// The body, at most [`MAX_BODY_BYTES`]: refused with 413 from `Content-Length` when
/// it says so, and otherwise while it streams (a chunked body has no length), so an
/// oversized body is never buffered whole. A body that breaks off is a 400.
async fn read_body(req: &mut Request) -> ApiResult<Vec<u8>> {
    let too_large = |n: String| {
        AppError::new(
            ErrorCode::PayloadTooLarge,
            format!("the body is {n} bytes; at most {MAX_BODY_BYTES} are accepted"),
        )
    };
    let declared = req
        .headers()
        .get("Content-Length")
        .ok()
        .flatten()
        .and_then(|v| v.parse::<usize>().ok());
    if let Some(n) = declared.filter(|n| *n > MAX_BODY_BYTES) {
        return Err(too_large(n.to_string()));
    }
    let broken = |e: worker::Error| {
        AppError::new(
            ErrorCode::InvalidJson,
            format!("the body could not be read: {e}"),
        )
    };
    let mut stream = match req.stream() {
        Ok(stream) => stream,
        // No body at all.
        Err(_) => return Ok(Vec::new()),
    };
    let mut body = Vec::new();
    while let Some(chunk) = stream.next().await {
        body.extend_from_slice(&chunk.map_err(broken)?);
        if body.len() > MAX_BODY_BYTES {
            return Err(too_large(format!("more than {MAX_BODY_BYTES}")));
        }
    }
    Ok(body)
}

/// Whether an `If-None-Match` header names `current` (weak comparison, RFC 9110).
pub(crate) fn none_match(header: &str, current: &str) -> bool {
    Condition::parse(header).matches_weak(current)
}

/// `ETag` for a job response.
pub(crate) fn job_headers(stored: &StoredJob) -> Headers {
    let headers = Headers::new();
    let _ = headers.set("ETag", &stored.etag);
    headers
}

/// A JSON response with `status`.
pub(crate) fn json(status: u16, body: String, headers: Headers) -> ApiResult<Response> {
    headers
        .set("Content-Type", "application/json")
        .map_err(crate::problem::runtime)?;
    Ok(Response::from_bytes(body.into_bytes())
        .map_err(crate::problem::runtime)?
        .with_status(status)
        .with_headers(headers))
}

/// A query's parameters, decoded, in their order, each once unless it may repeat (see
/// [`query_repeating`]).
pub(crate) type Query = Vec<(String, String)>;

/// `400 invalid_query`: a bad query parameter.
pub(crate) fn invalid_query(detail: impl Into<String>) -> AppError {
    AppError::new(ErrorCode::InvalidQuery, detail)
}

/// The request's query parameters, each at most once and each one of `known`. Read from
/// the raw URL with `form_urlencoded`: parsing the whole URL with the `url` crate would
/// link its IDNA tables into the Worker for a query string.
pub(crate) fn query(req: &Request, known: &[&str]) -> ApiResult<Query> {
    query_repeating(req, known, &[])
}

/// [`query`], where the parameters in `repeating` may be given more than once
/// (`?job=a&job=b`).
pub(crate) fn query_repeating(
    req: &Request,
    known: &[&str],
    repeating: &[&str],
) -> ApiResult<Query> {
    let url = req.inner().url();
    let without_fragment = url.split('#').next().unwrap_or_default();
    let raw = without_fragment.split_once('?').map_or("", |(_, q)| q);
    let mut seen: Query = Vec::new();
    for (name, value) in form_urlencoded::parse(raw.as_bytes()) {
        if !known.contains(&name.as_ref()) {
            return Err(invalid_query(format!(
                "unknown query parameter {name:?}; this takes {}",
                known.join(", ")
            )));
        }
        if !repeating.contains(&name.as_ref()) && seen.iter().any(|(n, _)| *n == name) {
            return Err(invalid_query(format!(
                "the query parameter {name:?} is given twice"
            )));
        }
        seen.push((name.into_owned(), value.into_owned()));
    }
    Ok(seen)
}

/// The value of parameter `name`, if given.
pub(crate) fn param<'a>(query: &'a Query, name: &str) -> Option<&'a str> {
    query
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// Parameter `name` as a whole number within `range`, if given.
pub(crate) fn whole_number(
    query: &Query,
    name: &str,
    range: std::ops::RangeInclusive<u64>,
) -> ApiResult<Option<u64>> {
    param(query, name)
        .map(|text| {
            text.parse::<u64>()
                .ok()
                .filter(|n| range.contains(n))
                .ok_or_else(|| {
                    invalid_query(format!(
                        "{name} must be a whole number from {} to {}",
                        range.start(),
                        range.end()
                    ))
                })
        })
        .transpose()
}
