//! The reconciler, run by cron every minute: re-sends lost dispatches, abandons
//! `unknown` attempts whose provider promised to stop, marks attempts whose dispatcher
//! died as `unknown`, and purges jobs past retention.
//!
//! Retention covers every job: one that `succeeded`, was `cancelled`, or `failed` is
//! purged with its key once it has been idle for `JOB_RETENTION_HOURS`; a job with an
//! attempt `unknown` is never purged while that attempt is unresolved (nor one with an
//! attempt in flight). A browser keeps a key for as long as its job is not final, so
//! the two agree: no key is forgotten by the server while a client may still send it
//! for a job that could run.
//!
//! The jobs the sweeps move are read back and their hubs told (`Store::reconcile`): a
//! hub that kept an `unknown` attempt's text deletes it once the job is abandoned. The
//! purge tells no hub: each hub that keeps text reads its job at least once per
//! retention period (`live.rs`), so it has deleted the text before the purge can come.

use crate::clock;
use crate::dispatch;
use crate::error::ApiResult;
use crate::host::Host;
use crate::store::{ReconcileRule, Store};
use serde_json::json;

/// Purge batches per run at most; the next run goes on where this one stopped.
const MAX_PURGE_CHUNKS: usize = 25;

/// One reconciler pass over `store` (one database, or one shard's own).
pub fn run<'a>(
    host: &'a dyn Host,
    store: &'a Store,
) -> futures_util::future::LocalBoxFuture<'a, ApiResult<()>> {
    Box::pin(async move {
        let now = clock::now_ms();
        let config = host.config();

        let starting_after = config.starting_after_ms;
        let stuck = store
            .stuck_starting(&clock::rfc3339(now - starting_after), 100)
            .await?;
        for attempt_id in &stuck {
            dispatch::enqueue(host, attempt_id, None).await;
        }

        let lost_grace = config.lost_grace_ms;
        let rules: Vec<ReconcileRule> = config
            .providers()?
            .iter()
            .map(|p| ReconcileRule {
                abandon_before: p.abandon_after_ms.map(|ms| clock::rfc3339(now - ms as f64)),
                lost_before: clock::rfc3339(now - p.timeout_ms as f64 - lost_grace),
                provider: p.name.clone(),
            })
            .collect();
        let told = store.notified();
        let (abandoned, lost) = store.reconcile(&rules).await?;
        let told = store.notified() - told;

        let hours = config.retention_hours;
        let cutoff = clock::rfc3339(now - hours * 3_600_000.0);
        let chunk = config.purge_chunk;
        // The purge's own rows, apart from the sweeps' (`cargo xtask bench` reads them).
        let before = store.cost();
        let mut purged = 0;
        for _ in 0..MAX_PURGE_CHUNKS {
            let deleted = store.purge(&cutoff, chunk).await?;
            purged += deleted;
            if deleted < chunk as usize {
                break;
            }
        }

        store.purge_stats(&cutoff).await?;
        let after = store.cost();

        crate::log::info(
            json!({"event": "reconciled", "store": store.name(), "redispatched": stuck.len(), "abandoned": abandoned,
               "lost": lost, "told": told, "purged": purged,
               "rows_written": after.written, "rows_read": after.read,
               "purge": {"rows_written": after.written - before.written,
                         "rows_read": after.read - before.read}}),
        );
        Ok(())
    })
}
