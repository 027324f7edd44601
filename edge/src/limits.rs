//! The per-owner rate limits, two budgets that never draw on each other:
//! - `RATE_LIMIT`, on what writes or fans out: creates (`POST /v1/jobs`, replays
//!   included), attempts (`POST /v1/jobs/{id}/attempts`) and job lists (`GET /v1/jobs`,
//!   which asks every shard). One owner, however busy, cannot spend the database's
//!   single writer, or every shard's time, for everyone.
//! - `STREAM_LIMIT`, on stream opens (`GET /v1/jobs/{id}/stream`, `GET /v1/stream`).
//!   The SDK reopens its one stream whenever a job joins it, so a page that submits and
//!   waits spends about one open per create: on the create budget, watching would
//!   starve creating. It bounds opens, not open streams: a count of open streams per
//!   owner would need a counter shared across isolates, the hot object `live.rs`
//!   avoids (each job's hub bounds its own streams).
//!
//! Each is Cloudflare's rate limiting binding (`[[ratelimits]]` in wrangler.toml:
//! `limit` requests per `period` of 10 or 60 seconds, its own `namespace_id`), keyed by
//! owner and asked before anything is read or written, so a refused request writes
//! nothing. The binding's counters are per Cloudflare location and eventually
//! consistent: a limit against abuse, not an exact quota. `RATE_LIMIT_PERIOD_S` repeats
//! the bindings' period for `Retry-After` (the Worker cannot read the binding's
//! settings).

use crate::error::{ApiResult, AppError};
use crate::http::Ctx;
use onceclick_protocol::ErrorCode;

thread_local! {
    /// The budgets whose missing binding was said (one bit each).
    static WARNED: std::cell::Cell<u8> = const { std::cell::Cell::new(0) };
}

/// One budget: its binding's name in wrangler.toml, its bit in `WARNED`, its refusal.
struct Budget {
    binding: &'static str,
    bit: u8,
    code: ErrorCode,
    refused: &'static str,
}

const WRITES: Budget = Budget {
    binding: "RATE_LIMIT",
    bit: 1,
    code: ErrorCode::RateLimited,
    refused: "this owner sent more creates, attempts and lists than its limit allows; nothing was written; send the same request again in",
};

const STREAMS: Budget = Budget {
    binding: "STREAM_LIMIT",
    bit: 2,
    code: ErrorCode::StreamRateLimited,
    refused: "this owner opened more live streams than its stream limit allows (creates are not affected); poll the job, or open the stream again in",
};

/// `Retry-After` when `RATE_LIMIT_PERIOD_S` is not set: the longer period the binding allows.
const DEFAULT_PERIOD_S: u32 = 60;

/// Refuses `owner`'s create, attempt or list with 429 `rate_limited` when the owner is
/// over `RATE_LIMIT`.
pub(crate) async fn check(ctx: &Ctx<'_>, owner: &str) -> ApiResult<()> {
    limit(ctx, owner, &WRITES).await
}

/// Refuses `owner`'s stream open with 429 `stream_rate_limited` when the owner is over
/// `STREAM_LIMIT`. A stream counts once, however many jobs it follows.
pub(crate) async fn check_stream(ctx: &Ctx<'_>, owner: &str) -> ApiResult<()> {
    limit(ctx, owner, &STREAMS).await
}

/// Without the binding (a deployment that chose no limit) every request passes; so does
/// one whose limiter call fails, logged: the limit guards capacity, and refusing every
/// request because the limiter stumbled would be the outage it exists to prevent.
async fn limit(ctx: &Ctx<'_>, owner: &str, budget: &Budget) -> ApiResult<()> {
    let Ok(limiter) = ctx.env.rate_limiter(budget.binding) else {
        // Said once per isolate: a binding that a `[env.…]` block did not repeat, or a
        // typo, would otherwise turn the limit off without a word.
        let warned = WARNED.get();
        if warned & budget.bit == 0 {
            WARNED.set(warned | budget.bit);
            worker::console_warn!(
                "{}",
                serde_json::json!({"event": "rate_limit_off", "binding": budget.binding})
            );
        }
        return Ok(());
    };
    match limiter.limit(owner.to_owned()).await {
        Ok(outcome) if outcome.success => Ok(()),
        Ok(_) => {
            let period = ctx
                .env
                .var("RATE_LIMIT_PERIOD_S")
                .ok()
                .and_then(|v| v.to_string().parse::<u32>().ok())
                .unwrap_or(DEFAULT_PERIOD_S);
            Err(
                AppError::new(budget.code, format!("{} {period} s", budget.refused))
                    .retry_after(period),
            )
        }
        Err(e) => {
            worker::console_error!(
                "{}",
                serde_json::json!({"event": "rate_limiter_failed", "binding": budget.binding, "cause": e.to_string()})
            );
            Ok(())
        }
    }
}
