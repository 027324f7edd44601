//! The end of a move from D1 to the shards: when the D1 database kept as
//! `PREVIOUS_STORE` may go. It is a count, never a date: a D1 job that finished after the
//! move's first step, or took a fallback click since, is purged only its retention after
//! *that*, and one still `unknown` is never purged until someone resolves it. While D1
//! holds a job, its key may still come back from a browser; without `PREVIOUS_STORE` that
//! key would bind a second job in a shard.
//!
//! Both the Worker (`GET /v1/move`) and `cargo xtask move-status` read the same counts
//! (`core/src/store/move_status.sql`) and give the same verdict here.

use serde::{Deserialize, Serialize};

/// What the previous store (D1) still holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// True once D1 holds no job at all: `PREVIOUS_STORE` (and the D1 database) may go.
    pub fn previous_may_go(&self) -> bool {
        self.jobs == 0
    }

    /// The verdict in words, for an operator.
    pub fn verdict(&self) -> String {
        if self.previous_may_go() {
            return "D1 may go: it holds no job; remove PREVIOUS_STORE, then the [[d1_databases]] block (keep the cron: it certifies providers)".to_owned();
        }
        let mut why = format!(
            "keep PREVIOUS_STORE: D1 still holds {} job{}",
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
    fn only_an_empty_d1_may_go() {
        assert!(status(0, 0).previous_may_go());
        assert!(status(0, 0).verdict().starts_with("D1 may go"));
        for (jobs, unknown) in [(1, 0), (3, 1)] {
            let s = status(jobs, unknown);
            assert!(!s.previous_may_go());
            assert!(
                s.verdict().starts_with("keep PREVIOUS_STORE"),
                "{}",
                s.verdict()
            );
        }
        assert!(status(3, 1).verdict().contains("1 unknown"));
    }
}
