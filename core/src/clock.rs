//! Time, ids and chance, from the platform the shell installed (`platform.rs`).

use crate::platform;

/// Now, in milliseconds since the epoch.
pub fn now_ms() -> f64 {
    platform::get().now_ms()
}

/// RFC 3339 UTC with milliseconds, e.g. `2026-11-29T08:00:00.000Z`.
pub fn rfc3339(ms: f64) -> String {
    platform::get().rfc3339(ms)
}

/// RFC 3339 UTC with milliseconds, now.
pub fn now_rfc3339() -> String {
    rfc3339(now_ms())
}

/// A UUIDv7: time-ordered, so ids sort by creation.
pub fn uuid_v7() -> String {
    platform::get().uuid_v7()
}

/// A prefixed UUIDv7: `job_…`, `att_…`.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid_v7())
}

/// A number in `0..n` (`n` ≥ 1), at random.
pub fn random_below(n: u32) -> u32 {
    platform::get().random_below(n)
}
