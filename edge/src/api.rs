//! Routing, authentication and the headers every response carries.

use crate::auth::{self, Caller};
use crate::clock;
use crate::error::{ApiResult, AppError};
use crate::jobs;
use crate::store::Store;
use onceclick_protocol::ErrorCode;
use worker::{Env, Method, Request, Response};

/// Everything a handler may need about the request's world.
pub(crate) struct Ctx<'a> {
    pub(crate) env: &'a Env,
    pub(crate) store: &'a Store,
}

/// Answers one request. Never fails: every error becomes problem+json here, and every
/// answer carries `Server-Timing` with the D1 round trips it made.
pub(crate) async fn handle(mut req: Request, env: &Env) -> Response {
    let store = match env.d1("DB") {
        Ok(db) => Store::new(db),
        Err(e) => return AppError::internal(e).into_response(),
    };
    let ctx = Ctx { env, store: &store };
    let mut response = route(&mut req, &ctx)
        .await
        .unwrap_or_else(AppError::into_response);
    let _ = response
        .headers_mut()
        .set("Server-Timing", &store.server_timing());
    response
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
