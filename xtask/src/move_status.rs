//! `cargo xtask move-status`: how many jobs the layout a move leaves still holds, and
//! so whether `PREVIOUS_STORE` may go (`onceclick_protocol::moving`). The same statement
//! as `GET /v1/move` (`core/src/store/move_status.sql`), asked of:
//!
//! - a D1 directly (`wrangler d1 execute DB`, deployed or `--local`), for when the
//!   deployment no longer binds it;
//! - local shards' SQLite files (`--local`), each shard of the previous count, summed;
//! - deployed shards through the Worker (`--url`: `GET /v1/move`), since a Durable
//!   Object's storage is read only from inside the Worker.

use crate::tools::Tools;
use anyhow::{bail, ensure, Context, Result};
use onceclick_protocol::moving::{MoveStatus, StoreLayout};
use std::path::{Path, PathBuf};

/// Where the counts are asked.
pub(crate) enum Asked {
    /// The deployed store: a D1 with `wrangler d1 execute --remote` (shards need `--url`).
    Deployed,
    /// The local store `wrangler dev --persist-to` keeps in this folder.
    Local(PathBuf),
    /// A deployed Worker's `GET /v1/move`, as an admin.
    Worker { url: String, token: String },
}

/// The layout a move leaves: `flag` if given, else wrangler.toml's `PREVIOUS_STORE`
/// (when set), else `d1` (a move from D1).
pub(crate) fn previous_layout(root: &Path, flag: Option<&str>) -> Result<StoreLayout> {
    let configured = || -> Result<Option<String>> {
        let text = std::fs::read_to_string(root.join("wrangler.toml"))?;
        let config: toml::Table = text.parse().context("wrangler.toml does not parse")?;
        Ok(config
            .get("vars")
            .and_then(|vars| vars.get("PREVIOUS_STORE"))
            .and_then(|v| v.as_str())
            .filter(|v| !v.is_empty())
            .map(str::to_owned))
    };
    let text = match flag {
        Some(text) => text.to_owned(),
        None => configured()?.unwrap_or_else(|| "d1".to_owned()),
    };
    StoreLayout::parse(&text).map_err(anyhow::Error::msg)
}

/// What `previous` still holds, asked where `at` says.
pub(crate) fn status(tools: &Tools, previous: StoreLayout, at: &Asked) -> Result<MoveStatus> {
    match (previous, at) {
        (_, Asked::Worker { url, token }) => from_worker(previous, url, token),
        (StoreLayout::D1, Asked::Local(persist)) => from_d1(tools, Some(persist)),
        (StoreLayout::D1, Asked::Deployed) => from_d1(tools, None),
        (StoreLayout::Shards(count), Asked::Local(persist)) => {
            from_local_shards(persist, count.get())
        }
        (StoreLayout::Shards(_), Asked::Deployed) => bail!(
            "a Durable Object's storage is read only through the Worker: ask it with --url (and an admin token)"
        ),
    }
}

/// The local shards of `count`, each asked, the counts summed. A shard never called has
/// no file, and holds nothing; but a folder with no shard of `count` at all is more
/// likely the wrong folder than an empty layout, and a shard's file that has not named
/// itself yet (its name is kept on its first call) could be of either count: both are
/// errors, never a "may go".
fn from_local_shards(persist: &Path, count: u32) -> Result<MoveStatus> {
    let prefix = format!("s{count}.");
    let mut sum = MoveStatus::default();
    let mut asked = 0;
    for (file, name) in onceclick_tests::db::shard_names_in(persist) {
        let place = ask_file(&file)?;
        match name {
            Some(name) if name.starts_with(&prefix) => {
                sum.add(place);
                asked += 1;
            }
            Some(_) => {}
            None if place.jobs == 0 => {}
            None => bail!(
                "{} holds {} jobs and names no shard: its count is unknown",
                file.display(),
                place.jobs
            ),
        }
    }
    ensure!(
        asked > 0,
        "no shard of durable:{count} under {}: is it the folder `wrangler dev --persist-to` keeps?",
        persist.display()
    );
    Ok(sum)
}

/// One shard's file asked the statement `GET /v1/move` runs.
fn ask_file(file: &Path) -> Result<MoveStatus> {
    onceclick_tests::db::open_file(file)
        .query_row(MOVE_STATUS_SQL, [], |r| {
            Ok(MoveStatus {
                jobs: r.get("jobs")?,
                unknown: r.get("unknown")?,
                open: r.get("open")?,
                last_updated_at: r.get("last_updated_at")?,
            })
        })
        .with_context(|| format!("the counts of {}", file.display()))
}

/// A deployed Worker's `GET /v1/move`, which must be about `previous`.
fn from_worker(previous: StoreLayout, url: &str, token: &str) -> Result<MoveStatus> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (status, body) = runtime.block_on(async {
        let reply = reqwest::Client::new()
            .get(format!("{}/v1/move", url.trim_end_matches('/')))
            .bearer_auth(token)
            .send()
            .await?;
        let status = reply.status();
        anyhow::Ok((status, reply.text().await?))
    })?;
    ensure!(status.is_success(), "GET /v1/move: {status} {body}");
    let answer: serde_json::Value = serde_json::from_str(&body)?;
    ensure!(
        answer["previous_store"] == previous.to_string(),
        "the Worker moves from {}, not {previous}: {body}",
        answer["previous_store"]
    );
    serde_json::from_value(answer).with_context(|| format!("GET /v1/move: {body}"))
}

/// What a D1 still holds: `wrangler d1 execute DB` with the statement `GET /v1/move`
/// runs, on the deployed database, or on the local one kept in `local` (the folder
/// `--persist-to` names).
fn from_d1(tools: &Tools, local: Option<&Path>) -> Result<MoveStatus> {
    let mut cmd = tools.command("wrangler");
    cmd.args([
        "d1",
        "execute",
        "DB",
        "--json",
        "--command",
        MOVE_STATUS_SQL,
    ]);
    match local {
        Some(persist) => cmd.arg("--local").arg("--persist-to").arg(persist),
        None => cmd.arg("--remote"),
    };
    let out = cmd.output().context("running wrangler d1 execute")?;
    ensure!(
        out.status.success(),
        "wrangler d1 execute failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // `[{"results": [{…}], "success": true, "meta": {…}}]`: one result set, one row.
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "wrangler's answer: {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })?;
    let row = answer[0]["results"][0].clone();
    serde_json::from_value(row.clone()).with_context(|| format!("the counts of D1: {row}"))
}

/// The statement both `GET /v1/move` and [`status`] run.
const MOVE_STATUS_SQL: &str = include_str!("../../core/src/store/move_status.sql");
