//! Time, ids and chance: the clock's two shells. In the Worker, the runtime's clock
//! (which advances only across I/O, all we need) and `Math.random`; in the native shell
//! (the simulator), a virtual clock and a seeded generator that the simulator sets, so
//! that a run replays exactly from its seed.

/// RFC 3339 UTC with milliseconds, e.g. `2026-11-29T08:00:00.000Z`.
pub(crate) fn now_rfc3339() -> String {
    rfc3339(now_ms())
}

/// A prefixed UUIDv7: `job_…`, `att_…`. Time-ordered, so ids sort by creation.
pub(crate) fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid_v7())
}

#[cfg(target_arch = "wasm32")]
mod shell {
    use worker::js_sys::{Date, Math};

    pub(crate) fn now_ms() -> f64 {
        Date::now()
    }

    /// RFC 3339 UTC for a time in milliseconds since the epoch.
    pub(crate) fn rfc3339(ms: f64) -> String {
        String::from(Date::new(&ms.into()).to_iso_string())
    }

    pub(crate) fn uuid_v7() -> String {
        uuid::Uuid::now_v7().to_string()
    }

    /// A number in `0..n` (`n` ≥ 1), at random.
    pub(crate) fn random_below(n: u32) -> u32 {
        ((Math::random() * f64::from(n)) as u32).min(n.saturating_sub(1))
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod shell {
    use std::cell::Cell;

    thread_local! {
        static NOW_MS: Cell<f64> = const { Cell::new(1_800_000_000_000.0) };
        static RNG: Cell<u64> = const { Cell::new(0x9E37_79B9_7F4A_7C15) };
        /// Ids made in the current virtual millisecond, and which millisecond that is.
        static SEQ: Cell<(u64, u16)> = const { Cell::new((0, 0)) };
    }

    /// The virtual clock, in milliseconds since the epoch (the simulator moves it).
    pub(crate) fn now_ms() -> f64 {
        NOW_MS.with(Cell::get)
    }

    pub(crate) fn set_now_ms(ms: f64) {
        NOW_MS.with(|now| now.set(ms));
    }

    /// Seeds the generator behind ids and `Route::Any`.
    pub(crate) fn seed(seed: u64) {
        RNG.with(|rng| rng.set(seed ^ 0x9E37_79B9_7F4A_7C15));
        SEQ.with(|seq| seq.set((0, 0)));
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

    pub(crate) fn rfc3339(ms: f64) -> String {
        chrono::DateTime::from_timestamp_millis(ms as i64)
            .unwrap_or_default()
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    }

    /// A UUIDv7 of the virtual time; a counter in its first 12 random bits, started
    /// again each millisecond, keeps the ids of one millisecond in order (as the
    /// runtime's does), up to 4,096 of them.
    pub(crate) fn uuid_v7() -> String {
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

    pub(crate) fn random_below(n: u32) -> u32 {
        (next() % u64::from(n.max(1))) as u32
    }
}

pub(crate) use shell::*;
