//! The simulator's platform for the Worker's core (`onceclick_core::platform`): a
//! virtual clock the world moves, a seeded generator behind ids and random picks, and
//! a log the world drains after every step. Per thread: each world runs on one.

use onceclick_core::platform::Platform;
use serde_json::Value;
use std::cell::{Cell, RefCell};

thread_local! {
    static NOW_MS: Cell<f64> = const { Cell::new(1_800_000_000_000.0) };
    static RNG: Cell<u64> = const { Cell::new(0x9E37_79B9_7F4A_7C15) };
    /// Ids made in the current virtual millisecond, and which millisecond that is.
    static SEQ: Cell<(u64, u16)> = const { Cell::new((0, 0)) };
    static LINES: RefCell<Vec<Value>> = const { RefCell::new(Vec::new()) };
}

struct SimPlatform;

/// Installs the simulator's platform (once per process; every thread has its own state).
pub(crate) fn install() {
    onceclick_core::platform::install(&SimPlatform);
}

/// The virtual clock, in milliseconds since the epoch.
pub(crate) fn now_ms() -> f64 {
    NOW_MS.with(Cell::get)
}

/// Sets the virtual clock.
pub(crate) fn set_now_ms(ms: f64) {
    NOW_MS.with(|now| now.set(ms));
}

/// Seeds the generator behind ids and random picks.
pub(crate) fn seed(seed: u64) {
    RNG.with(|rng| rng.set(seed ^ 0x9E37_79B9_7F4A_7C15));
    SEQ.with(|seq| seq.set((0, 0)));
}

/// The virtual clock as the store's times spell it (RFC 3339, milliseconds).
pub(crate) fn rfc3339(ms: f64) -> String {
    chrono::DateTime::from_timestamp_millis(ms as i64)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The log lines written since the last call.
pub(crate) fn drain_log() -> Vec<Value> {
    LINES.with(|lines| std::mem::take(&mut *lines.borrow_mut()))
}

/// splitmix64: small, seedable, and good enough to spread ids and picks.
fn next() -> u64 {
    RNG.with(|rng| {
        let mut z = rng.get().wrapping_add(0x9E37_79B9_7F4A_7C15);
        rng.set(z);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    })
}

impl Platform for SimPlatform {
    fn now_ms(&self) -> f64 {
        now_ms()
    }

    fn rfc3339(&self, ms: f64) -> String {
        rfc3339(ms)
    }

    /// A UUIDv7 of the virtual time; a counter in its first 12 random bits, started
    /// again each millisecond, keeps the ids of one millisecond in order (as the
    /// runtime's does), up to 4,096 of them.
    fn uuid_v7(&self) -> String {
        let ms = now_ms() as u64;
        let seq = SEQ.with(|s| {
            let (last, n) = s.get();
            let n = if last == ms { n.wrapping_add(1) } else { 0 };
            s.set((ms, n));
            n
        });
        let mut random = [0u8; 10];
        random[..2].copy_from_slice(&(seq & 0x0fff).to_be_bytes());
        random[2..].copy_from_slice(&next().to_be_bytes());
        uuid::Builder::from_unix_timestamp_millis(ms, &random)
            .into_uuid()
            .to_string()
    }

    fn random_below(&self, n: u32) -> u32 {
        (next() % u64::from(n.max(1))) as u32
    }

    fn log(&self, _error: bool, line: Value) {
        LINES.with(|lines| lines.borrow_mut().push(line));
    }
}
