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
use crate::providers;
use crate::store::{ReconcileRule, Store};
use serde_json::json;

/// An attempt `starting` for this long has probably lost its dispatch message.
const DEFAULT_STARTING_AFTER_MS: f64 = 30_000.0;
/// A `running` attempt this long past its provider's timeout has lost its dispatcher.
const LOST_GRACE_MS: f64 = 60_000.0;
/// Jobs deleted per purge batch, so that a backlog never makes one statement too big
/// for D1 (`PURGE_CHUNK` overrides it).
const DEFAULT_PURGE_CHUNK: f64 = 200.0;
/// Purge batches per run at most; the next run goes on where this one stopped.
const MAX_PURGE_CHUNKS: usize = 25;

fn var_f64(host: &dyn Host, name: &str) -> Option<f64> {
    host.var(name).and_then(|v| v.parse().ok())
}

/// One reconciler pass over `store` (one database, or one shard's own).
pub fn run<'a>(
    host: &'a dyn Host,
    store: &'a Store,
) -> futures_util::future::LocalBoxFuture<'a, ApiResult<()>> {
    Box::pin(async move {
        let now = clock::now_ms();

        let starting_after =
            var_f64(host, "RECONCILE_STARTING_AFTER_MS").unwrap_or(DEFAULT_STARTING_AFTER_MS);
        let stuck = store
            .stuck_starting(&clock::rfc3339(now - starting_after), 100)
            .await?;
        for attempt_id in &stuck {
            dispatch::enqueue(host, attempt_id, None).await;
        }

        let lost_grace = var_f64(host, "RECONCILE_LOST_GRACE_MS").unwrap_or(LOST_GRACE_MS);
        let rules: Vec<ReconcileRule> = providers::configured(host)?
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

        let hours = crate::retention::hours(var_f64(host, "JOB_RETENTION_HOURS"));
        let cutoff = clock::rfc3339(now - hours * 3_600_000.0);
        let chunk = var_f64(host, "PURGE_CHUNK")
            .unwrap_or(DEFAULT_PURGE_CHUNK)
            .clamp(1.0, 1_000.0) as u32;
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
