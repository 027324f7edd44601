//! Time and ids. Workers advance the clock only across I/O, which is all we need.

use worker::js_sys::Date;

pub(crate) fn now_ms() -> f64 {
    Date::now()
}

/// RFC 3339 UTC with milliseconds, e.g. `2026-11-29T08:00:00.000Z`.
pub(crate) fn now_rfc3339() -> String {
    String::from(Date::new_0().to_iso_string())
}

/// A prefixed UUIDv7: `job_…`, `att_…`. Time-ordered, so ids sort by creation.
pub(crate) fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::now_v7())
}

/// RFC 3339 UTC for a time in milliseconds since the epoch.
pub(crate) fn rfc3339(ms: f64) -> String {
    String::from(Date::new(&ms.into()).to_iso_string())
}
