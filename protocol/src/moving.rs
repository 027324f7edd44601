//! Moves between store layouts, and their end: when the layout kept as
//! `PREVIOUS_STORE` may go.
//!
//! - [`StoreLayout`] is a layout as a deployment names it: `d1`, or `durable:N` (N
//!   shards). `PREVIOUS_STORE` names the previous one whole, so that one mechanism moves
//!   D1 to shards, shards to another count (up or down), and shards back to D1.
//! - [`MoveStatus`] is what the previous layout still holds, summed over its places. The
//!   end is a count, never a date: a job that finished after the move's first step, or
//!   took a fallback click since, is purged only its retention after *that*, and one still
//!   `unknown` is never purged until someone resolves it. While the previous layout holds
//!   a job, its key may still come back from a browser; without `PREVIOUS_STORE` that key
//!   would bind a second job in the new layout.
//!
//! Both the Worker (`GET /v1/move`) and `cargo xtask move-status` read the same counts
//! (`core/src/store/move_status.sql`) and give the same verdict here.

use crate::shard::{ShardCount, MAX_SHARDS};
use serde::{Deserialize, Serialize};
use std::fmt;

/// A store layout: where a deployment's jobs live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreLayout {
    /// One D1 database (`STORE=d1`).
    D1,
    /// Durable Object shards (`STORE=durable`, `SHARDS`).
    Shards(ShardCount),
}

impl StoreLayout {
    /// Reads a layout as `PREVIOUS_STORE` names one: `d1`, or `durable:N` with N a power
    /// of two up to [`MAX_SHARDS`]. The error says what is wrong, for an operator.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text == "d1" {
            return Ok(StoreLayout::D1);
        }
        let count = text.strip_prefix("durable:").ok_or_else(|| {
            format!("{text:?} names no store layout; use \"d1\" or \"durable:N\" (N shards)")
        })?;
        count
            .parse()
            .ok()
            .and_then(ShardCount::new)
            .map(StoreLayout::Shards)
            .ok_or_else(|| {
                format!("{text:?}: the shard count must be a power of two from 1 to {MAX_SHARDS}")
            })
    }
}

/// `d1`, or `durable:N`: what [`StoreLayout::parse`] reads.
impl fmt::Display for StoreLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreLayout::D1 => f.write_str("d1"),
            StoreLayout::Shards(count) => write!(f, "durable:{}", count.get()),
        }
    }
}

/// Whether a deployment's layouts make a move this service can keep its promise in:
/// `now`, the one it moves from (`PREVIOUS_STORE`), and whether it refuses new keys
/// (`REFUSE_NEW_KEYS`, a move's first step). The error says why not, for an operator.
///
/// One move at a time: refusing new keys *during* a move would be the first step of a
/// second move while the first one's layout still holds keys, and a deployment keeps one
/// previous layout, not a chain. A move to the layout it is already on names nothing to
/// move.
pub fn check_move(
    now: StoreLayout,
    previous: Option<StoreLayout>,
    refusing: bool,
) -> Result<(), String> {
    match previous {
        Some(previous) if previous == now => Err(format!(
            "PREVIOUS_STORE is {previous}, the layout this deployment is on: a move names the layout it leaves; remove PREVIOUS_STORE"
        )),
        Some(previous) if refusing => Err(format!(
            "REFUSE_NEW_KEYS is set during a move from {previous}: one move at a time. End this one first (cargo xtask move-status says when {previous} may go, then remove PREVIOUS_STORE), then start the next"
        )),
        _ => Ok(()),
    }
}

/// What the previous layout still holds (one place's counts, or their sum: [`MoveStatus::add`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveStatus {
    /// Jobs left in it, of any status.
    pub jobs: u64,
    /// Of those, jobs waiting for someone to resolve an `unknown` attempt (never purged
    /// until then).
    pub unknown: u64,
    /// Of those, jobs still `queued` or `running`.
    pub open: u64,
    /// When the most recently changed of them last changed (RFC 3339), if any.
    pub last_updated_at: Option<String>,
}

impl MoveStatus {
    /// Adds another place's counts to these (a sharded layout's places, one by one).
    pub fn add(&mut self, other: MoveStatus) {
        self.jobs += other.jobs;
        self.unknown += other.unknown;
        self.open += other.open;
        // RFC 3339 in UTC with the same precision: the later sorts last.
        self.last_updated_at = self.last_updated_at.take().max(other.last_updated_at);
    }

    /// True once the previous layout holds no job at all: `PREVIOUS_STORE` may go.
    pub fn previous_may_go(&self) -> bool {
        self.jobs == 0
    }

    /// The verdict in words, for an operator, about the previous layout `previous`.
    pub fn verdict(&self, previous: StoreLayout) -> String {
        if self.previous_may_go() {
            return match previous {
                StoreLayout::D1 => "d1 may go: it holds no job; remove PREVIOUS_STORE, then the [[d1_databases]] block (keep the cron: it certifies providers)".to_owned(),
                StoreLayout::Shards(_) => format!("{previous} may go: its shards hold no job; remove PREVIOUS_STORE (its objects keep only a copy of the certifications and old figures, and do not run)"),
            };
        }
        let mut why = format!(
            "keep PREVIOUS_STORE: {previous} still holds {} job{}",
            self.jobs,
            if self.jobs == 1 { "" } else { "s" }
        );
        if self.unknown > 0 {
            why.push_str(&format!(
                " ({} unknown: resolve them, GET /v1/attempts?state=unknown)",
                self.unknown
            ));
        }
        if let Some(at) = &self.last_updated_at {
            why.push_str(&format!(
                "; the last changed at {at}, and is purged JOB_RETENTION_HOURS after that"
            ));
        }
        why
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(jobs: u64, unknown: u64) -> MoveStatus {
        MoveStatus {
            jobs,
            unknown,
            open: 0,
            last_updated_at: (jobs > 0).then(|| "2026-12-01T10:00:00.000Z".to_owned()),
        }
    }

    #[test]
    fn only_an_empty_layout_may_go() {
        let eight = StoreLayout::parse("durable:8").unwrap();
        assert!(status(0, 0).previous_may_go());
        assert!(status(0, 0)
            .verdict(StoreLayout::D1)
            .starts_with("d1 may go"));
        assert!(status(0, 0).verdict(eight).starts_with("durable:8 may go"));
        for (jobs, unknown) in [(1, 0), (3, 1)] {
            let s = status(jobs, unknown);
            assert!(!s.previous_may_go());
            let verdict = s.verdict(eight);
            assert!(
                verdict.starts_with("keep PREVIOUS_STORE: durable:8 still holds"),
                "{verdict}"
            );
        }
        assert!(status(3, 1).verdict(StoreLayout::D1).contains("1 unknown"));
    }

    #[test]
    fn places_add_up() {
        let mut sum = MoveStatus::default();
        sum.add(status(0, 0));
        sum.add(status(2, 1));
        let mut later = status(1, 0);
        later.last_updated_at = Some("2026-12-02T00:00:00.000Z".to_owned());
        sum.add(later);
        assert_eq!((sum.jobs, sum.unknown), (3, 1));
        assert_eq!(
            sum.last_updated_at.as_deref(),
            Some("2026-12-02T00:00:00.000Z")
        );
    }

    #[test]
    fn one_move_at_a_time() {
        let (d1, eight) = (StoreLayout::D1, StoreLayout::parse("durable:8").unwrap());
        let sixteen = StoreLayout::parse("durable:16").unwrap();
        for (now, previous, refusing) in [
            (d1, None, false),
            (d1, None, true),
            (sixteen, Some(eight), false),
            (eight, Some(d1), false),
            (d1, Some(eight), false),
        ] {
            assert_eq!(check_move(now, previous, refusing), Ok(()));
        }
        let refused = check_move(sixteen, Some(eight), true).unwrap_err();
        assert!(refused.contains("one move at a time"), "{refused}");
        let same = check_move(eight, Some(eight), false).unwrap_err();
        assert!(same.contains("the layout this deployment is on"), "{same}");
    }

    #[test]
    fn layouts_read_back_what_they_write() {
        for text in ["d1", "durable:1", "durable:16", "durable:4096"] {
            assert_eq!(StoreLayout::parse(text).unwrap().to_string(), text);
        }
        for bad in [
            "",
            "durable",
            "durable:6",
            "durable:8192",
            "durable:-1",
            "D1",
            "shards:8",
        ] {
            assert!(StoreLayout::parse(bad).is_err(), "{bad}");
        }
    }
}
