//! The per-owner rate limit on what writes or fans out: creates (`POST /v1/jobs`,
//! replays included), attempts (`POST /v1/jobs/{id}/attempts`) and job lists
//! (`GET /v1/jobs`, which asks every shard). One owner, however busy, cannot spend the
//! database's single writer, or every shard's time, for everyone.
//!
//! It is Cloudflare's rate limiting binding `RATE_LIMIT` (`[[ratelimits]]` in
//! wrangler.toml: `limit` requests per `period` of 10 or 60 seconds), keyed by owner and
//! asked before anything is read or written, so a refused request writes nothing. The
//! binding's counters are per Cloudflare location and eventually consistent: a limit
//! against abuse, not an exact quota. `RATE_LIMIT_PERIOD_S` repeats the binding's period
//! for `Retry-After` (the Worker cannot read the binding's settings).

use crate::error::{ApiResult, AppError};
use crate::http::Ctx;
use onceclick_protocol::ErrorCode;

thread_local! {
    static WARNED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The binding's name in wrangler.toml.
const BINDING: &str = "RATE_LIMIT";

/// `Retry-After` when `RATE_LIMIT_PERIOD_S` is not set: the longer period the binding allows.
const DEFAULT_PERIOD_S: u32 = 60;

/// Refuses `owner`'s write with 429 `rate_limited` when the owner is over the limit.
/// Without the binding (a deployment that chose no limit) every request passes; so does
/// one whose limiter call fails, logged: the limit guards capacity, and refusing every
/// write because the limiter stumbled would be the outage it exists to prevent.
pub(crate) async fn check(ctx: &Ctx<'_>, owner: &str) -> ApiResult<()> {
    let Ok(limiter) = ctx.env.rate_limiter(BINDING) else {
        // Said once per isolate: a binding that a `[env.…]` block did not repeat, or a
        // typo, would otherwise turn the limit off without a word.
        if !WARNED.replace(true) {
            worker::console_warn!(
                "{}",
                serde_json::json!({"event": "rate_limit_off", "why": "no RATE_LIMIT binding"})
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
            Err(AppError::new(
                ErrorCode::RateLimited,
                format!(
                    "this owner sent more creates, attempts and lists than its limit allows; nothing was written; send the same request again in {period} s"
                ),
            )
            .retry_after(period))
        }
        Err(e) => {
            worker::console_error!(
                "{}",
                serde_json::json!({"event": "rate_limiter_failed", "cause": e.to_string()})
            );
            Ok(())
        }
    }
}
