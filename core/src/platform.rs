//! The core's ways out to its platform that every part of it needs, not only the
//! handlers (which have their [`crate::host::Host`]): the clock, chance and ids, and
//! the log. The shell installs its own once, before anything runs: the Worker at its
//! module's start (`worker_platform.rs`), the simulator natively, with a virtual clock,
//! a seeded generator and a log it reads back.

use serde_json::Value;
use std::sync::OnceLock;

/// What the core asks of its platform everywhere.
pub trait Platform: Sync {
    /// Now, in milliseconds since the epoch.
    fn now_ms(&self) -> f64;
    /// RFC 3339 UTC with milliseconds for a time in milliseconds since the epoch, e.g.
    /// `2026-11-29T08:00:00.000Z`.
    fn rfc3339(&self, ms: f64) -> String;
    /// A UUIDv7 (time-ordered), as `uuid` writes it.
    fn uuid_v7(&self) -> String;
    /// A number in `0..n` (`n` ≥ 1), at random.
    fn random_below(&self, n: u32) -> u32;
    /// One structured log line: about a failure (`error`), or about something that went
    /// as designed.
    fn log(&self, error: bool, line: Value);
}

static PLATFORM: OnceLock<&'static dyn Platform> = OnceLock::new();

/// Installs the shell's platform; false if one was installed already (it stays).
pub fn install(platform: &'static dyn Platform) -> bool {
    PLATFORM.set(platform).is_ok()
}

/// The installed platform. Before any is, none: the epoch, no chance, no log.
pub fn get() -> &'static dyn Platform {
    PLATFORM.get().copied().unwrap_or(&Unset)
}

/// What the core sees before its shell installs a platform.
struct Unset;

impl Platform for Unset {
    fn now_ms(&self) -> f64 {
        0.0
    }

    fn rfc3339(&self, _ms: f64) -> String {
        "1970-01-01T00:00:00.000Z".to_owned()
    }

    fn uuid_v7(&self) -> String {
        "00000000-0000-0000-0000-000000000000".to_owned()
    }

    fn random_below(&self, _n: u32) -> u32 {
        0
    }

    fn log(&self, _error: bool, _line: Value) {}
}
