//! Jobs that hold still for the figures that read or watch them: created over HTTP on a
//! Worker with no queue consumer, so nothing dispatches them and their ETags hold. The
//! bench (`bench.rs`), the live figures (`bench_live.rs`) and the shards' capacity
//! (`bench_durable.rs`) each start such a Worker.

use crate::wrangler;
use anyhow::{bail, Result};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The root wrangler.toml without its queue consumer and cron, and with no rate limit
/// that a load of one owner would reach, in `target/xtask/wrangler-no-consumer.toml`.
pub(crate) fn without_consumer(root: &Path) -> Result<PathBuf> {
    wrangler::derived_config(root, "wrangler-no-consumer.toml", |config| {
        config.remove("triggers");
        if let Some(toml::Value::Table(queues)) = config.get_mut("queues") {
            queues.remove("consumers");
        }
        wrangler::raise_rate_limit(config);
    })
}

/// `POST /v1/jobs` of `body` under `key`: the job's id and ETag.
pub(crate) async fn create_job(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    key: &str,
    body: String,
) -> Result<(String, String)> {
    let created = http
        .post(format!("{url}/v1/jobs"))
        .bearer_auth(token)
        .header("Idempotency-Key", key)
        .body(body)
        .send()
        .await?;
    let etag = created
        .headers()
        .get("etag")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let job: Value = created.json().await?;
    match job["id"].as_str() {
        Some(id) if !etag.is_empty() => Ok((id.to_owned(), etag)),
        _ => bail!("a bench job ({key}): {job}"),
    }
}
