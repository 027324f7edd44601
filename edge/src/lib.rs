//! The onceclick API on Cloudflare Workers: one intent, one job, however often it is sent.
//!
//! The Worker is the shell of `onceclick-core`, which holds the decisions and the store's
//! SQL: `api` routes and authenticates, `jobs`, `attempts` and `lists` read requests for
//! the core's `decide_*`, `queue` consumes the dispatch queue (`dispatch::deliver`),
//! `cron` runs the reconciler, `places` carries the store's batches to D1 or the `shard`
//! Durable Objects, `openai` makes the provider's HTTP call, and `problem` turns every
//! failure into problem+json. See ARCHITECTURE.md for the codemap.

mod analytics;
mod api;
mod attempts;
mod auth;
mod certify;
mod cron;
mod fault_header;
mod http;
mod jobs;
mod jwks;
mod limits;
mod lists;
mod live;
mod moving;
mod openai;
mod places;
mod problem;
pub mod queue;
mod shard;
pub mod stats;
mod stream;
mod worker_host;
mod worker_platform;

// The core's modules, under the names the Worker's files use.
use onceclick_core::{
    alarm, certification, clock, dispatch, error, fault, handoff, host, keeping, kinds, log,
    message, outcome, pacing, platform, providers, reconcile, store,
};

use serde_json::json;
use worker::{
    event, Context, Env, MessageBatch, Request, Response, Result, ScheduleContext, ScheduledEvent,
};

/// The platform the core runs on, installed once as the module starts.
#[event(start)]
fn start() {
    platform::install(&worker_platform::WorkerPlatform);
}

#[event(fetch)]
async fn fetch(req: Request, env: Env, ctx: Context) -> Result<Response> {
    Ok(api::handle(req, &env, &ctx).await)
}

/// Never returns `Err`: each message is acked or retried inside.
#[event(queue)]
async fn queue(batch: MessageBatch<message::Dispatch>, env: Env, _ctx: Context) -> Result<()> {
    queue::consume(batch, &env).await;
    Ok(())
}

#[event(scheduled)]
async fn scheduled(_event: ScheduledEvent, env: Env, _ctx: ScheduleContext) {
    if let Err(e) = cron::cron(&env).await {
        worker::console_error!(
            "{}",
            json!({"event": "reconcile_failed", "code": e.code.as_str(), "cause": e.cause_or_detail()})
        );
    }
}
