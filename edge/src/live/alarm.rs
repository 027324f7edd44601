//! The hub's one alarm, for two needs: while streams are open, a re-read of the job
//! every `LIVE_REREAD_MS`, so that a lost notification is only late; and while storage
//! keeps text, a read at least every [`Live::check_every_ms`], so that the text never
//! outlives its job even when every notification is lost.

use super::{number_var, Live, DEFAULT_REREAD_MS};
use onceclick_protocol::live::{Hub, Position};
use worker::{Result, WebSocket};

impl Live {
    /// The alarm: reads the job (offered as a notification is); the text goes once the
    /// job is settled or gone, and stays while it is not (an `unknown` attempt's text is
    /// what an operator resolves it with, and such a job is never purged). The next
    /// alarm is the sooner of the needs that remain ([`next_alarm_in`]).
    pub(super) async fn reread(&self) -> Result<()> {
        let sockets = self.state.get_websockets_with_tag(super::STREAM);
        // Storage is asked only when no stream needs the alarm anyway. A failure to ask
        // counts as kept: the alarm comes again (the runtime's own retries of a failed
        // alarm run out).
        let kept = sockets.is_empty()
            && self.keeps().await.unwrap_or_else(|e| {
                crate::log::error(serde_json::json!({"event": "live_reread_failed",
                    "cause": e.to_string()}));
                true
            });
        if sockets.is_empty() && !kept {
            return Ok(()); // nobody listens, nothing kept: no next alarm
        }
        let Some(job) = self.job_of(&sockets).await else {
            crate::log::error(serde_json::json!({"event": "live_reread_failed",
                "cause": "a live hub that does not know its job's id"}));
            return self
                .state
                .storage()
                .set_alarm(self.check_every_ms() as i64)
                .await;
        };
        let read = match crate::places::from_env(&self.env) {
            Ok(store) => store.job(None, &job).await,
            Err(e) => Err(e),
        };
        let failed = match read {
            Ok(Some(stored)) => {
                let mut due = false;
                if let Some(seq) = Position::of_etag(&stored.etag) {
                    due = self.offer(seq.0, &stored.doc).await.is_some();
                }
                // Settled: emptied now (a delete that failed before is done again); a
                // delete that fails now is tried again at the next re-read.
                (due || (kept && self.settled.get()))
                    && Self::delete_kept(self.state.storage(), &job, "alarm", "settled")
                        .await
                        .is_err()
            }
            // Purged: what it kept goes; a delete that fails is tried again soon.
            Ok(None) => {
                if self.forget(&sockets, kept)
                    && Self::delete_kept(self.state.storage(), &job, "alarm", "gone")
                        .await
                        .is_err()
                {
                    let again = self.reread_every() as i64;
                    return self.state.storage().set_alarm(again).await;
                }
                return Ok(());
            }
            Err(e) => {
                crate::log::error(serde_json::json!({"event": "live_reread_failed",
                    "job_id": job, "cause": e.cause_or_detail()}));
                true
            }
        };
        // Decided after the last await: a stream that subscribed meanwhile counts.
        let keeps = !self.settled.get() && (kept || !sockets.is_empty());
        let streams = !self.state.get_websockets_with_tag(super::STREAM).is_empty();
        if kept && keeps {
            crate::log::info(serde_json::json!({"event": "live_text_checked", "job_id": job}));
        }
        let next = next_alarm_in(
            streams || failed,
            keeps,
            self.reread_every(),
            self.check_every_ms(),
        );
        match next {
            Some(in_ms) => self.state.storage().set_alarm(in_ms as i64).await,
            None => Ok(()),
        }
    }

    /// A purged job: its streams end (a reconnect is told 404) and memory lets it go.
    /// Whether storage is to be emptied: it keeps text, as memory or the alarm knew.
    fn forget(&self, sockets: &[WebSocket], kept: bool) -> bool {
        for socket in sockets {
            let _ = socket.close(Some(1000), Some("the job is gone"));
        }
        *self.latest.borrow_mut() = Hub::default();
        self.keeper.borrow_mut().settle() || kept
    }

    /// How often a hub with streams open re-reads its job, in ms.
    pub(super) fn reread_every(&self) -> u64 {
        number_var(&self.env, "LIVE_REREAD_MS", DEFAULT_REREAD_MS).max(100)
    }

    /// The longest a hub that keeps text goes without reading its job, in ms: the
    /// retention (`JOB_RETENTION_HOURS`, as the purge counts it), or
    /// `LIVE_KEPT_CHECK_MS` if that is shorter. A job settles at the latest a retention
    /// before its purge, so the hub has read it settled, and deleted the text, by then.
    pub(super) fn check_every_ms(&self) -> u64 {
        let retention =
            (crate::worker_host::config(&self.env).retention_hours * 3_600_000.0) as u64;
        number_var(&self.env, "LIVE_KEPT_CHECK_MS", retention)
            .min(retention)
            .max(100)
    }

    /// Sets the alarm `in_ms` from now, unless it is set sooner. A failure is said in
    /// the log: the next write of text, or the next stream, tries again.
    pub(super) async fn arm(&self, in_ms: u64) {
        let storage = self.state.storage();
        let set = storage.get_alarm().await.ok().flatten();
        if sooner(set, crate::clock::now_ms(), in_ms) {
            if let Err(e) = storage.set_alarm(in_ms as i64).await {
                crate::log::error(serde_json::json!({"event": "live_alarm_failed",
                    "cause": e.to_string()}));
            }
        }
    }
}

/// Whether an alarm set for `set` (ms since the epoch; `None`: none) must be brought
/// forward to `in_ms` from `now`. One alarm serves both the re-read and the check of
/// kept text: neither may put off the other.
pub(super) fn sooner(set: Option<i64>, now: f64, in_ms: u64) -> bool {
    set.is_none_or(|at| at as f64 > now + in_ms as f64)
}

/// When the hub's next alarm comes, in ms from now: every `reread_ms` while streams
/// are open (or after a read that failed), at most `check_ms` away while storage keeps
/// text, the sooner of the two when both; none when neither.
fn next_alarm_in(streams: bool, keeps: bool, reread_ms: u64, check_ms: u64) -> Option<u64> {
    [streams.then_some(reread_ms), keeps.then_some(check_ms)]
        .into_iter()
        .flatten()
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Issue 42, item 3: one alarm serves the re-read of open streams and the check of
    // kept text; neither need starves the other.
    #[test]
    fn the_next_alarm_is_the_sooner_need_and_none_without_one() {
        let (reread, check) = (5_000, 168 * 3_600_000);
        assert_eq!(next_alarm_in(true, true, reread, check), Some(reread));
        assert_eq!(next_alarm_in(true, false, reread, check), Some(reread));
        // The last stream gone, the text still kept: the check, not nothing.
        assert_eq!(next_alarm_in(false, true, reread, check), Some(check));
        assert_eq!(next_alarm_in(false, false, reread, check), None);
        // A check period shorter than the re-read (a test Worker's) still wins.
        assert_eq!(next_alarm_in(true, true, 1_000, 300), Some(300));
    }

    #[test]
    fn an_alarm_is_brought_forward_never_put_off() {
        let now = 1_000_000.0;
        assert!(sooner(None, now, 5_000), "none set: set it");
        // A check a week away does not put off a stream's re-read …
        assert!(sooner(Some(1_000_000 + 604_800_000), now, 5_000));
        // … and a re-read due soon is not put off by a check.
        assert!(!sooner(Some(1_003_000), now, 604_800_000));
        assert!(
            !sooner(Some(1_005_000), now, 5_000),
            "as soon: left as it is"
        );
    }
}
