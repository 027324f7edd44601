//! The reconciler's sweeps: lost dispatches, dead dispatchers, abandonment and purge.

use super::{bind_num, bind_text, changes, json_text, sql, Op, Route, Rows, Store};
use crate::error::ApiResult;
use onceclick_protocol::AttemptError;
use serde::Deserialize;

/// The most jobs one sweep tells the hubs of ([`Store::tell_moved`]): each is a request
/// to a hub.
const TELL_AT_MOST: usize = 100;

/// A row of ids: an attempt's, or a moved attempt's job's (one row type keeps one
/// deserializer in the Worker).
#[derive(Deserialize)]
struct Id {
    id: String,
}

/// What the reconciler applies to one provider's attempts.
pub struct ReconcileRule {
    pub provider: String,
    /// `unknown` attempts called before this are abandoned (if the provider promises).
    pub abandon_before: Option<String>,
    /// `running` attempts called before this have lost their dispatcher.
    pub lost_before: String,
}

impl Store {
    /// Attempts still `starting` that were inserted before `cutoff`: their dispatch
    /// message may have been lost.
    pub async fn stuck_starting(&self, cutoff: &str, limit: u32) -> ApiResult<Vec<String>> {
        let stmt = self.stmt(sql::STUCK_STARTING, &[bind_text(cutoff), bind_num(limit)])?;
        Ok(self
            .one(Op::StuckStarting, Route::Sweep, stmt)
            .await?
            .results::<Id>()?
            .into_iter()
            .map(|r| r.id)
            .collect())
    }

    /// The reconciler's moves, per provider, in one batch:
    /// - `unknown → abandoned` once the provider's `abandon_after_ms` has passed since
    ///   the call;
    /// - `running → unknown` for an attempt whose dispatcher died mid-call (no answer
    ///   recorded well after the provider's timeout).
    ///
    /// Returns how many attempts were abandoned and how many were found lost. The hubs
    /// of the jobs moved are told (see [`Store::tell_moved`]).
    pub async fn reconcile(&self, rules: &[ReconcileRule]) -> ApiResult<(usize, usize)> {
        let lost = AttemptError::new(
            "dispatcher_lost",
            "the dispatcher stopped before the provider answered; the provider may have done the work",
            false,
        );
        let lost = json_text(&lost)?;
        let mut abandon = Vec::new();
        for rule in rules {
            if let Some(cutoff) = &rule.abandon_before {
                abandon.push(self.stmt(
                    sql::ABANDON_UNKNOWN,
                    &[bind_text(&rule.provider), bind_text(cutoff)],
                )?);
            }
        }
        let abandon_count = abandon.len();
        let mut statements = abandon;
        for rule in rules {
            statements.push(self.stmt(
                sql::LOSE_RUNNING,
                &[
                    bind_text(&rule.provider),
                    bind_text(&rule.lost_before),
                    bind_text(&lost),
                ],
            )?);
        }
        if statements.is_empty() {
            return Ok((0, 0));
        }
        let results = self.exec(Op::Reconcile, Route::Sweep, statements).await?;
        let (abandoned, lost) = results.split_at(abandon_count.min(results.len()));
        let count = |results: &[Rows]| -> ApiResult<usize> { results.iter().map(changes).sum() };
        Ok((count(abandoned)?, count(lost)?))
    }

    /// Tells the hubs of the jobs a sweep moved (`moves`: each move's job, as `id`), each
    /// once, with its document read back after the sweep: a hub whose job settled
    /// deletes the text it kept, and one whose attempt went `unknown` keeps that
    /// attempt's text whole (`live.rs`). The store calls it after every operation that
    /// moves many jobs ([`super::Moves::Many`]), which cannot read them back in its own
    /// batch. At most
    /// [`TELL_AT_MOST`] a pass; a read that fails tells none. Either way a hub not told
    /// still reads its job at its own alarm.
    pub(super) async fn tell_moved(&self, moves: &[Rows]) {
        let Some(live) = &self.live else {
            return;
        };
        let mut jobs: Vec<String> = Vec::new();
        for moved in moves
            .iter()
            .filter_map(|r| r.results::<Id>().ok())
            .flatten()
        {
            if jobs.len() < TELL_AT_MOST && !jobs.contains(&moved.id) {
                jobs.push(moved.id);
            }
        }
        if jobs.is_empty() {
            return;
        }
        let reads: ApiResult<Vec<_>> = jobs
            .iter()
            .map(|id| self.stmt(sql::LIVE_DOC, &[bind_text(id)]))
            .collect();
        let docs = match reads {
            Ok(reads) => self.exec(Op::Job, Route::Sweep, reads).await,
            Err(e) => Err(e),
        };
        match docs {
            Ok(docs) => {
                for doc in &docs {
                    self.notify_hub(live.as_ref(), doc).await;
                }
            }
            Err(e) => crate::log::error(serde_json::json!({"event": "live_notify_failed",
                "jobs": jobs.len(), "cause": e.cause_or_detail()})),
        }
    }

    /// Deletes at most `chunk` jobs that ended (`succeeded`, `cancelled`, or `failed`
    /// with nothing in flight or unknown) and were last changed before `cutoff`, with
    /// their attempts and events. Their keys become free again. A job with an attempt
    /// `unknown` is never purged while it is unresolved. One batch; the reconciler calls
    /// it again while chunks come back full, so a backlog never makes one huge
    /// statement. Returns the number of jobs deleted.
    pub async fn purge(&self, cutoff: &str, chunk: u32) -> ApiResult<usize> {
        // The same ordered, bounded selection in all three statements: jobs are deleted
        // last, so the first two see the same rows.
        let params = [bind_text(cutoff), bind_num(chunk)];
        let events = self.stmt(sql::PURGE_EVENTS, &params)?;
        let attempts = self.stmt(sql::PURGE_ATTEMPTS, &params)?;
        let jobs = self.stmt(sql::PURGE_JOBS, &params)?;
        let [_, _, jobs] = self
            .batch(Op::Purge, Route::Sweep, [events, attempts, jobs])
            .await?;
        changes(&jobs)
    }

    /// Drops the figures of the minutes before `cutoff` (RFC 3339). One statement.
    pub async fn purge_stats(&self, cutoff: &str) -> ApiResult<()> {
        let minute = cutoff.get(..16).unwrap_or(cutoff);
        let stmt = self.stmt(sql::PURGE_STATS, &[bind_text(minute)])?;
        self.one(Op::PurgeStats, Route::Sweep, stmt).await?;
        Ok(())
    }
}
