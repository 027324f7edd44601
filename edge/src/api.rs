//! Routing and authentication, and the headers every response carries. The top of
//! the module tree: routes → handlers (`jobs`, `attempts`, `certify`) → domain
//! (`dispatch`, `certification`, `reconcile`) → `store`; `http` holds what handlers share
//! about requests and responses.

use crate::auth::{self, Caller};
use crate::clock;
use crate::error::{ApiResult, AppError};
use crate::fault;
use crate::http::{json, Ctx};
use crate::problem::IntoResponse as _;
use crate::{attempts, certify, jobs, limits, lists, moving, stats};
use onceclick_protocol::ErrorCode;
use worker::{Env, Headers, Method, Request, Response};

/// Answers one request. Never fails: every error becomes problem+json here, and every
/// answer carries `Server-Timing` with the D1 round trips it made.
pub(crate) async fn handle(mut req: Request, env: &Env, worker: &worker::Context) -> Response {
    let fault = crate::fault_header::header(&req, env);
    let faults = match fault.as_deref().map(fault::parse).transpose() {
        Ok(faults) => faults.unwrap_or_default(),
        Err(why) => return AppError::new(ErrorCode::InvalidJson, why).into_response(),
    };
    let store = match crate::places::from_env(env) {
        Ok(store) => store
            .with_faults(faults, &req.path())
            .with_live(crate::live::notifier(env)),
        // A configuration no store can be made of (`places::from_env`): every request
        // is refused, and says why in the log.
        Err(e) => {
            crate::log::error(serde_json::json!({"event": "configuration_refused",
                "cause": e.cause}));
            return e.into_response();
        }
    };
    let host = crate::worker_host::WorkerHost::new(env, Some(worker));
    let ctx = Ctx {
        env,
        host: &host,
        worker,
        store: &store,
        fault,
    };
    let mut response = if req.method() == Method::Options {
        preflight(&req)
    } else {
        route(&mut req, &ctx).await.unwrap_or_else(|e| {
            // Logged once, here, and only a failure on our side (one with a cause).
            if let Some(cause) = &e.cause {
                worker::console_error!(
                    "{}",
                    serde_json::json!({"event": "request_failed", "method": req.method().to_string(),
                                       "path": req.path(), "code": e.code.as_str(), "cause": cause})
                );
            }
            e.into_response()
        })
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
/// cookie, so any origin may call it; `CORS_ALLOW_ORIGIN` narrows that. It allows the
/// headers the browser asks for (an app's own, through the SDK's `headers` option: a
/// trace id, a gateway's key), and the API's own when it asks for none.
fn preflight(req: &Request) -> Response {
    let headers = Headers::new();
    let _ = headers.set("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    let asked = req
        .headers()
        .get("Access-Control-Request-Headers")
        .ok()
        .flatten();
    let _ = headers.set(
        "Access-Control-Allow-Headers",
        asked.as_deref().unwrap_or(
            "Authorization, Content-Type, Idempotency-Key, If-Match, If-None-Match, Last-Event-ID",
        ),
    );
    let _ = headers.set("Access-Control-Max-Age", "600");
    // The answer depends on what was asked: a shared cache keeps one per question.
    let _ = headers.set("Vary", "Access-Control-Request-Headers");
    Response::empty()
        .map(|r| r.with_status(204).with_headers(headers))
        .unwrap_or_else(|e| AppError::internal(e).into_response())
}

/// The routing table, one arm per path: the methods it allows, who may call it and the
/// limit it counts against, then its handler.
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
            allow(&method, &[Method::Post, Method::Get])?;
            let caller = caller(req, ctx).await?;
            // A list reads every shard: it counts against the owner's limit like a create.
            limits::check(ctx, &caller.owner).await?;
            if method == Method::Get {
                lists::jobs(req, ctx, &caller).await
            } else {
                jobs::create(req, ctx, &caller).await
            }
        }
        ["v1", "stats"] => {
            allow(&method, &[Method::Get])?;
            caller(req, ctx).await?.require_admin()?;
            stats::get(req, ctx).await
        }
        ["v1", "move"] => {
            allow(&method, &[Method::Get])?;
            caller(req, ctx).await?.require_admin()?;
            moving::get(ctx).await
        }
        ["v1", "attempts"] => {
            allow(&method, &[Method::Get])?;
            caller(req, ctx).await?.require_admin()?;
            lists::attempts(req, ctx).await
        }
        ["v1", "jobs", id] => {
            allow(&method, &[Method::Get])?;
            let caller = caller(req, ctx).await?;
            jobs::get(req, ctx, &caller, id).await
        }
        ["v1", "jobs", id, "stream"] => {
            allow(&method, &[Method::Get])?;
            let caller = caller(req, ctx).await?;
            // A stream holds a connection and a hub's place: it counts against the
            // owner's stream budget, never the one creates need.
            limits::check_stream(ctx, &caller.owner).await?;
            crate::stream::job(req, ctx, &caller, id).await
        }
        ["v1", "stream"] => {
            allow(&method, &[Method::Get])?;
            let caller = caller(req, ctx).await?;
            // One stream, however many jobs it follows: it counts once, on the stream
            // budget.
            limits::check_stream(ctx, &caller.owner).await?;
            crate::stream::jobs(req, ctx, &caller).await
        }
        ["v1", "jobs", id, "events"] => {
            allow(&method, &[Method::Get])?;
            let caller = caller(req, ctx).await?;
            jobs::events(ctx, &caller, id).await
        }
        ["v1", "jobs", id, "attempts"] => {
            allow(&method, &[Method::Post])?;
            let caller = caller(req, ctx).await?;
            limits::check(ctx, &caller.owner).await?;
            attempts::create(req, ctx, &caller, id).await
        }
        ["v1", "jobs", id, "cancel"] => {
            allow(&method, &[Method::Post])?;
            let caller = caller(req, ctx).await?;
            jobs::cancel(ctx, &caller, id).await
        }
        ["v1", "attempts", id, "resolve"] => {
            allow(&method, &[Method::Post])?;
            caller(req, ctx).await?.require_admin()?;
            attempts::resolve(req, ctx, id).await
        }
        ["v1", "kinds"] => {
            allow(&method, &[Method::Get])?;
            caller(req, ctx).await?;
            certify::kinds(ctx)
        }
        ["v1", "providers"] => {
            allow(&method, &[Method::Get])?;
            caller(req, ctx).await?;
            certify::list(ctx).await
        }
        ["v1", "providers", name, "certify"] => {
            allow(&method, &[Method::Post])?;
            caller(req, ctx).await?.require_admin()?;
            certify::certify(ctx, name).await
        }
        // Test-only: one reconciler pass with this request's faults armed, so that the
        // fault matrix reaches the cron's store calls too. Absent unless faults are.
        ["v1", "_reconcile"] if crate::fault_header::allowed(ctx.env) => {
            allow(&method, &[Method::Post])?;
            caller(req, ctx).await?.require_admin()?;
            let body: serde_json::Value = req.json().await.unwrap_or_default();
            let alarm_in_ms = body.get("alarm_in_ms").and_then(serde_json::Value::as_i64);
            crate::cron::run_now(ctx.env, ctx.store, ctx.fault.as_deref(), alarm_in_ms).await?;
            json(200, r#"{"status":"reconciled"}"#.to_owned(), Headers::new())
        }
        ["v1", "attempts", id, "dispatch"] => {
            allow(&method, &[Method::Post])?;
            caller(req, ctx).await?.require_admin()?;
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

async fn caller(req: &Request, ctx: &Ctx<'_>) -> ApiResult<Caller> {
    let config = auth::AuthConfig::from_env(ctx.env);
    if config.secret.is_none() && config.jwks_url.is_none() {
        return Err(AppError::internal(
            "neither AUTH_SECRET nor JWKS_URL is set",
        ));
    }
    let header = req.headers().get("Authorization").ok().flatten();
    auth::authenticate(header.as_deref(), &config, clock::now_ms(), ctx.worker).await
}
