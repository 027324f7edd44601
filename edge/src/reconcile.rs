//! The reconciler, run by cron every minute: re-sends lost dispatches, abandons
//! `unknown` attempts whose provider promised to stop, marks attempts whose dispatcher
//! died as `unknown`, and purges finished jobs past retention.

use crate::clock;
use crate::dispatch;
use crate::error::ApiResult;
use crate::providers;
use crate::store::{ReconcileRule, Store};
use serde_json::json;
use worker::{console_log, Env};

/// An attempt `starting` for this long has probably lost its dispatch message.
const DEFAULT_STARTING_AFTER_MS: f64 = 30_000.0;
/// A `running` attempt this long past its provider's timeout has lost its dispatcher.
const LOST_GRACE_MS: f64 = 60_000.0;
/// A key stays bound at least this long after its job ends, whatever the config says.
const MIN_RETENTION_HOURS: f64 = 24.0;
const DEFAULT_RETENTION_HOURS: f64 = 168.0;

fn var_f64(env: &Env, name: &str) -> Option<f64> {
    env.var(name).ok().and_then(|v| v.to_string().parse().ok())
}

pub(crate) async fn run(env: &Env) -> ApiResult<()> {
    let store = Store::new(env.d1("DB")?);
    let now = clock::now_ms();

    let starting_after =
        var_f64(env, "RECONCILE_STARTING_AFTER_MS").unwrap_or(DEFAULT_STARTING_AFTER_MS);
    let stuck = store
        .stuck_starting(&clock::rfc3339(now - starting_after), 100)
        .await?;
    for attempt_id in &stuck {
        dispatch::enqueue(env, attempt_id).await;
    }

    let rules: Vec<ReconcileRule> = providers::configured(env)?
        .into_iter()
        .map(|p| ReconcileRule {
            abandon_before: p.abandon_after_ms.map(|ms| clock::rfc3339(now - ms as f64)),
            lost_before: clock::rfc3339(now - p.timeout_ms as f64 - LOST_GRACE_MS),
            provider: p.name,
        })
        .collect();
    let (abandoned, lost) = store.reconcile(&rules).await?;

    let hours = var_f64(env, "JOB_RETENTION_HOURS")
        .unwrap_or(DEFAULT_RETENTION_HOURS)
        .max(MIN_RETENTION_HOURS);
    let purged = store
        .purge(&clock::rfc3339(now - hours * 3_600_000.0))
        .await?;

    console_log!(
        "{}",
        json!({"event": "reconciled", "redispatched": stuck.len(), "abandoned": abandoned,
               "lost": lost, "purged": purged})
    );
    Ok(())
}
