//! A shard's alarm, decided: when its reconciler pass is due, whether this alarm runs
//! it, and when the alarm comes next. No I/O and no clock: the Worker's shard
//! (`shard.rs`) reads the kept due time and its rows, hands off, reconciles and sets the
//! alarm as these say; the simulator's shards do the same.
//!
//! One alarm serves the shard's outbox (`handoff.rs`) and its pass: the pass's due time
//! is kept apart (the shard's `onceclick_pass` table), and the alarm comes at the sooner
//! of the two needs while the shard holds jobs.

/// Whether the shard still holds any job (and so needs its alarm).
pub const HAS_JOBS: &str = "SELECT EXISTS (SELECT 1 FROM jobs) AS any";

/// How often a shard with jobs reconciles itself when `RECONCILE_EVERY_MS` is not set.
const DEFAULT_EVERY_MS: f64 = 60_000.0;

/// How often a shard with jobs reconciles itself, from `RECONCILE_EVERY_MS` (at least a
/// millisecond; the default for anything else).
pub fn every_ms(var: Option<&str>) -> f64 {
    var.and_then(|v| v.parse::<f64>().ok())
        .filter(|ms| *ms >= 1.0)
        .unwrap_or(DEFAULT_EVERY_MS)
}

/// The shard's next pass, as an alarm finds it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pass {
    /// When it is due (ms since the epoch).
    pub due_ms: f64,
    /// No due time was kept (the shard's first alarm): keep this one.
    pub keep: bool,
    /// It is due: this alarm reconciles the shard, then keeps the next due time,
    /// [`every_ms`] from when the pass ends.
    pub runs: bool,
}

/// The pass as an alarm at `now_ms` finds it, from the due time kept (`None`: a shard's
/// first alarm, whose first pass is a period away). A kept one is never further than a
/// period: `RECONCILE_EVERY_MS` may have been lowered since it was kept.
pub fn pass(kept: Option<f64>, now_ms: f64, every_ms: f64) -> Pass {
    let (due_ms, keep) = match kept {
        Some(due) => (due.min(now_ms + every_ms), false),
        None => (now_ms + every_ms, true),
    };
    Pass {
        due_ms,
        keep,
        runs: now_ms >= due_ms,
    }
}

/// When the alarm comes next, in ms from `now_ms`: when the outbox needs it (`outbox`,
/// `Outbox::next_in_ms`); else, while the shard still holds jobs (retained, or in
/// flight), when its pass is due (`due_ms`); else none, until the next write sets one.
/// `holds_jobs` is asked only when the outbox needs no alarm.
///
/// Decide and set it in one synchronous turn, after the alarm's last await: a create
/// that came meanwhile has kept its attempt in the outbox, so the next alarm is now (or
/// in `RETRY_MS`, after a refusal), never the pass's time.
pub fn next_in_ms(
    outbox: Option<f64>,
    due_ms: f64,
    now_ms: f64,
    holds_jobs: impl FnOnce() -> bool,
) -> Option<f64> {
    outbox.or_else(|| {
        let forgets = crate::mutant::on(crate::mutant::Mutant::AlarmForgetsPass);
        (!forgets && holds_jobs()).then(|| (due_ms - now_ms).max(0.0))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_pass_is_a_period_away_and_a_kept_one_never_further() {
        assert_eq!(
            pass(None, 1_000.0, 500.0),
            Pass {
                due_ms: 1_500.0,
                keep: true,
                runs: false
            }
        );
        let lowered = pass(Some(90_000.0), 1_000.0, 500.0);
        assert_eq!((lowered.due_ms, lowered.keep), (1_500.0, false));
        assert!(pass(Some(1_000.0), 1_000.0, 500.0).runs);
    }

    #[test]
    fn the_outbox_comes_first_and_the_pass_only_while_jobs_are_held() {
        let never = || -> bool { panic!("not asked while the outbox needs the alarm") };
        assert_eq!(next_in_ms(Some(0.0), 9_000.0, 1_000.0, never), Some(0.0));
        assert_eq!(next_in_ms(None, 9_000.0, 1_000.0, || true), Some(8_000.0));
        assert_eq!(next_in_ms(None, 900.0, 1_000.0, || true), Some(0.0));
        assert_eq!(next_in_ms(None, 9_000.0, 1_000.0, || false), None);
    }

    #[test]
    fn the_period_is_read_or_defaulted() {
        assert_eq!(every_ms(Some("1000")), 1_000.0);
        assert_eq!(every_ms(Some("0")), DEFAULT_EVERY_MS);
        assert_eq!(every_ms(Some("soon")), DEFAULT_EVERY_MS);
        assert_eq!(every_ms(None), DEFAULT_EVERY_MS);
    }
}
