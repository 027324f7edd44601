//! The onceclick API on Cloudflare Workers: one intent, one job, however often it is sent.
//!
//! `api` routes and authenticates, `jobs` holds the handlers, `store` owns all SQL,
//! `error` turns every failure into problem+json. See ARCHITECTURE.md for the codemap.

mod api;
mod auth;
mod clock;
mod error;
mod jobs;
mod kinds;
mod providers;
mod store;

use worker::{event, Context, Env, Request, Response, Result};

#[event(fetch)]
async fn fetch(req: Request, env: Env, _ctx: Context) -> Result<Response> {
    Ok(api::handle(req, &env).await)
}
