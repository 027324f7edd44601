//! The reconciler's runs on the Worker (its shell, `reconcile.rs` being the pass): the
//! cron's on the D1 database (the layout now's, or the one a move leaves), and the
//! test-only `POST /v1/_reconcile`.

use crate::error::ApiResult;
use crate::reconcile::run;
use crate::store::Store;
use crate::worker_host::WorkerHost;
use serde_json::json;
use worker::Env;

/// The cron: the D1 database's pass. Shards, of the layout now or of the one a move
/// leaves, each run their own pass from their alarm (`shard.rs`); sharded now, the cron
/// only sweeps the D1 a move from D1 leaves, if any.
///
/// Then, on either store, the background certification pass (`certification::auto`):
/// each provider a kind names that has no report for the kind's current contract
/// version and its own digest is certified, a few a pass, its reports written where
/// every report is (D1, or every shard).
pub(crate) async fn cron(env: &Env) -> ApiResult<()> {
    let store = crate::places::from_env(env)?.with_live(crate::live::notifier(env));
    let host = WorkerHost::new(env, None);
    run_d1(env, &host, &store).await?;
    certify_due(&host, &store).await
}

/// The D1's pass: the store's own, when new jobs live in D1; else the D1 a move from D1
/// leaves, if any (shards reconcile themselves).
async fn run_d1(env: &Env, host: &WorkerHost<'_>, store: &Store) -> ApiResult<()> {
    match store.is_sharded() {
        false => run(host, store).await,
        true => run_previous(env, host, store).await,
    }
}

/// The background certification pass: a store that fails it fails the cron's run,
/// and the next run takes it up again (nothing due is marked done until its report is
/// written).
async fn certify_due(host: &WorkerHost<'_>, store: &Store) -> ApiResult<()> {
    crate::certification::auto(store, host).await.map(drop)
}

/// The pass over the previous layout's D1, during a move from D1 (a previous layout of
/// shards reconciles itself: each shard's alarm).
async fn run_previous(env: &Env, host: &WorkerHost<'_>, store: &Store) -> ApiResult<()> {
    if store.previous() == Some(onceclick_protocol::moving::StoreLayout::D1) {
        let store = crate::places::d1(env.d1("DB").map_err(crate::problem::runtime)?)
            .with_live(crate::live::notifier(env));
        run(host, &store).await?;
    }
    Ok(())
}

/// The test-only `POST /v1/_reconcile`: one pass now, with the request's faults, and the
/// background certification pass. Sharded (now, or the layout a move leaves): every
/// shard's own pass, concurrently (each with the same faults), and the D1's, if the store
/// has one; or, with `alarm_in_ms`, every shard's alarm moved that close, so that a test
/// can watch the alarms do the work.
pub(crate) async fn run_now(
    env: &Env,
    store: &Store,
    fault: Option<&str>,
    alarm_in_ms: Option<i64>,
) -> ApiResult<()> {
    let host = WorkerHost::new(env, None);
    run_d1(env, &host, store).await?;
    certify_due(&host, store).await?;
    let shards = store.shards();
    if shards.is_empty() {
        return Ok(());
    }
    let objects = crate::places::Shards::from_env(env)?;
    let calls = shards.into_iter().map(|shard| {
        let body =
            json!({"shard": shard.object_name(), "fault": fault, "alarm_in_ms": alarm_in_ms});
        let objects = &objects;
        async move { objects.send(shard, "/reconcile", &body).await }
    });
    for outcome in futures_util::future::join_all(calls).await {
        outcome?;
    }
    Ok(())
}
