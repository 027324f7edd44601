//! Routing, authentication and the headers every response carries.

use crate::auth::{self, Caller};
use crate::clock;
use crate::error::{ApiResult, AppError};
use crate::fault;
use crate::store::{Store, StoredJob};
use crate::{attempts, certify, jobs};
use futures_util::StreamExt;
use onceclick_protocol::etag::Condition;
use onceclick_protocol::{ijson, ErrorCode, MAX_BODY_BYTES};
use serde::de::DeserializeOwned;
use worker::{Env, Headers, Method, Request, Response};

/// Everything a handler may need about the request's world.
pub(crate) struct Ctx<'a> {
    pub(crate) env: &'a Env,
    pub(crate) store: &'a Store,
    /// Test-only faults this request armed (`X-Onceclick-Fault`), handed on to the
    /// dispatch of any attempt it creates.
    pub(crate) fault: Option<String>,
}

/// Answers one request. Never fails: every error becomes problem+json here, and every
/// answer carries `Server-Timing` with the D1 round trips it made.
pub(crate) async fn handle(mut req: Request, env: &Env) -> Response {
    let fault = fault::header(&req, env);
    let faults = match fault.as_deref().map(fault::parse).transpose() {
        Ok(faults) => faults.unwrap_or_default(),
        Err(why) => return AppError::new(ErrorCode::InvalidJson, why).into_response(),
    };
    let store = match env.d1("DB") {
        Ok(db) => Store::new(db).with_faults(faults, &req.path()),
        Err(e) => return AppError::internal(e).into_response(),
    };
    let ctx = Ctx {
        env,
        store: &store,
        fault,
    };
    let mut response = if req.method() == Method::Options {
        preflight()
    } else {
        route(&mut req, &ctx)
            .await
            .unwrap_or_else(AppError::into_response)
    };
    let headers = response.headers_mut();
    let _ = headers.set("Server-Timing", &store.server_timing());
    let origin = env
        .var("CORS_ALLOW_ORIGIN")
        .map(|v| v.to_string())
        .unwrap_or_else(|_| "*".to_owned());
    let _ = headers.set("Access-Control-Allow-Origin", &origin);
    let _ = headers.set("Access-Control-Expose-Headers", EXPOSED_HEADERS);
    let _ = headers.set("Timing-Allow-Origin", &origin);
    response
}

/// Response headers a browser on another origin may read (the SDK needs all of them).
const EXPOSED_HEADERS: &str =
    "ETag, Location, Idempotent-Replayed, Retry-After, Server-Timing, WWW-Authenticate";

/// The answer to a CORS preflight. The API authenticates with a bearer token, never a
/// cookie, so any origin may call it; `CORS_ALLOW_ORIGIN` narrows that.
fn preflight() -> Response {
    let headers = Headers::new();
    let _ = headers.set("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    let _ = headers.set(
        "Access-Control-Allow-Headers",
        "Authorization, Content-Type, Idempotency-Key, If-Match, If-None-Match",
    );
    let _ = headers.set("Access-Control-Max-Age", "600");
    Response::empty()
        .map(|r| r.with_status(204).with_headers(headers))
        .unwrap_or_else(|e| AppError::internal(e).into_response())
}

async fn route(req: &mut Request, ctx: &Ctx<'_>) -> ApiResult<Response> {
    let path = req.path();
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let method = req.method();
    match segments.as_slice() {
        ["v1", "health"] => {
            allow(&method, &[Method::Get])?;
            jobs::health(ctx).await
        }
        ["v1", "jobs"] => {
            allow(&method, &[Method::Post])?;
            let caller = caller(req, ctx)?;
            jobs::create(req, ctx, &caller).await
        }
        ["v1", "jobs", id] => {
            allow(&method, &[Method::Get])?;
            let caller = caller(req, ctx)?;
            jobs::get(req, ctx, &caller, id).await
        }
        ["v1", "jobs", id, "events"] => {
            allow(&method, &[Method::Get])?;
            let caller = caller(req, ctx)?;
            jobs::events(ctx, &caller, id).await
        }
        ["v1", "jobs", id, "attempts"] => {
            allow(&method, &[Method::Post])?;
            let caller = caller(req, ctx)?;
            attempts::create(req, ctx, &caller, id).await
        }
        ["v1", "jobs", id, "cancel"] => {
            allow(&method, &[Method::Post])?;
            let caller = caller(req, ctx)?;
            jobs::cancel(ctx, &caller, id).await
        }
        ["v1", "attempts", id, "resolve"] => {
            allow(&method, &[Method::Post])?;
            let caller = caller(req, ctx)?;
            caller.require_admin()?;
            attempts::resolve(req, ctx, id).await
        }
        ["v1", "providers"] => {
            allow(&method, &[Method::Get])?;
            caller(req, ctx)?;
            certify::list(ctx).await
        }
        ["v1", "providers", name, "certify"] => {
            allow(&method, &[Method::Post])?;
            let caller = caller(req, ctx)?;
            caller.require_admin()?;
            certify::certify(ctx, name).await
        }
        // Test-only: one reconciler pass with this request's faults armed, so that the
        // fault matrix reaches the cron's store calls too. Absent unless faults are.
        ["v1", "_reconcile"] if fault::allowed(ctx.env) => {
            allow(&method, &[Method::Post])?;
            caller(req, ctx)?.require_admin()?;
            crate::reconcile::run(ctx.env, ctx.store).await?;
            json(200, r#"{"status":"reconciled"}"#.to_owned(), Headers::new())
        }
        ["v1", "attempts", id, "dispatch"] => {
            allow(&method, &[Method::Post])?;
            let caller = caller(req, ctx)?;
            caller.require_admin()?;
            attempts::redispatch(ctx, id).await
        }
        _ => Err(AppError::not_found(&format!("the path {path}"))),
    }
}

fn allow(method: &Method, allowed: &[Method]) -> ApiResult<()> {
    if allowed.contains(method) {
        return Ok(());
    }
    let names: Vec<String> = allowed.iter().map(|m| m.to_string()).collect();
    Err(AppError::new(
        ErrorCode::MethodNotAllowed,
        format!("{method} is not allowed here; use {}", names.join(", ")),
    ))
}

fn caller(req: &Request, ctx: &Ctx<'_>) -> ApiResult<Caller> {
    let secret = ctx
        .env
        .secret("AUTH_SECRET")
        .map(|s| s.to_string())
        .or_else(|_| ctx.env.var("AUTH_SECRET").map(|v| v.to_string()))
        .map_err(|_| AppError::internal("AUTH_SECRET is not set"))?;
    let header = req.headers().get("Authorization").ok().flatten();
    auth::authenticate(header, &secret, clock::now_ms())
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
    headers.set("Content-Type", "application/json")?;
    Ok(Response::from_bytes(body.into_bytes())?
        .with_status(status)
        .with_headers(headers))
}
