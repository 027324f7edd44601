//! Changing the number of shards, as README.md describes it: 8 → 16, then 16 → 4, on one
//! persisted local store, through the lives of the Worker (the same mechanism as the
//! move from D1, `moves.rs`):
//!
//! 1. **8 shards**: jobs are made, all but one succeed; the fallback is certified.
//! 2. **8 shards refusing new keys** (step 1 of the move): a new key is `503` and binds
//!    nothing; an old key is its replay.
//! 3. **16 shards, `PREVIOUS_STORE = "durable:8"`** (step 2):
//!    - every old key is still answered from its shard of 8 (the same job, or the 409 of
//!      another body);
//!    - new keys, and the one refused in life 2, are bound in shards of 16;
//!    - the failed old job takes the fallback button: its attempt is made, dispatched
//!      and recorded in the job's own shard of 8;
//!    - the owner's list holds the jobs of both layouts;
//!    - every key is bound exactly once over both layouts, in the layout of its time;
//!    - the end of the move is a count: with every old job idle for years but the one
//!      that finished after step 1, `GET /v1/move` and `cargo xtask move-status --local
//!      --previous durable:8` both say keep; once the shards of 8 have purged it too,
//!      both say they may go.
//! 4. **A second move started during the first** (16 shards refusing new keys, with
//!    `PREVIOUS_STORE` still set) is refused when it loads: every request is a 500, and
//!    the log says "one move at a time".
//! 5. **16 shards refusing new keys** (the first move ended): a new key is `503`.
//! 6. **4 shards, `PREVIOUS_STORE = "durable:16"`**: the keys of 16 answered from there,
//!    new keys bound in shards of 4, each key once; the shards of 16 still hold jobs, so
//!    they may not go.

use crate::moves::{check_move_status, MoveSuite, OLD_KEYS};
use crate::wrangler::{self, DevOptions, Wrangler};
use anyhow::{ensure, Context, Result};
use onceclick_protocol::moving::StoreLayout;
use onceclick_protocol::shard::{route_of_id, IdRoute, ShardCount};
use onceclick_tests::client::{id, send, unique, Api};
use serde_json::json;
use std::path::Path;
use std::time::Instant;

/// Keys bound in each later layout (16, then 4).
const LATER_KEYS: usize = 6;
/// The key life 2 refuses (bound in 16 in life 3), and the one life 5 refuses (in 4).
const REFUSED_IN_8: usize = 50;
const REFUSED_IN_16: usize = 60;

/// The resharding suite: the lives of the module's list, in order, on one store.
pub(crate) fn run(tools: &crate::tools::Tools, root: &Path) -> Result<()> {
    let started = Instant::now();
    let suite = MoveSuite::new(tools, root, "reshard")?;
    let moves = Reshard { suite: &suite };
    eprintln!("xtask: resharding, life 1: 8 shards");
    let old = moves.life_on(8)?;
    eprintln!("xtask: resharding, life 2: 8 shards refusing new keys");
    moves.life_refusing(8, REFUSED_IN_8, (0, &old[0]))?;
    eprintln!("xtask: resharding, life 3: 16 shards, 8 kept");
    let mid = moves.life_moved_to_16(&old)?;
    eprintln!("xtask: resharding, life 4: a second move during the first is refused");
    moves.second_move_refused()?;
    eprintln!("xtask: resharding, life 5: 16 shards refusing new keys");
    moves.life_refusing(16, REFUSED_IN_16, (OLD_KEYS, &mid[0]))?;
    eprintln!("xtask: resharding, life 6: 4 shards, 16 kept");
    moves.life_moved_to_4(&mid)?;
    eprintln!(
        "xtask: resharding 8 → 16 → 4: every key answered from the layout it was bound in, none bound twice ({:.0} s)",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

struct Reshard<'s, 'a> {
    suite: &'s MoveSuite<'a>,
}

/// Every shard's reconciler pass now, of both layouts (`POST /v1/_reconcile`, test-only):
/// what their alarms do in their time.
async fn reconcile_every_shard(api: &Api) -> Result<()> {
    let admin = api.admin_token("reshard-cron");
    let (reply, _) = onceclick_tests::client::resend_while_unavailable(
        || api.post_json(&admin, "/v1/_reconcile", &json!({})),
        &[200; 4],
    )
    .await;
    ensure!(
        reply.status == 200,
        "the shards' passes: {} {}",
        reply.status,
        reply.text
    );
    Ok(())
}

/// `durable:N`.
fn shards(count: u32) -> Result<StoreLayout> {
    ShardCount::new(count)
        .map(StoreLayout::Shards)
        .context("a shard count")
}

/// The shard count an id was made under (none for a D1's id).
fn count_of(id: &str) -> Option<u32> {
    match route_of_id(id) {
        IdRoute::Shard(shard) => Some(shard.count.get()),
        _ => None,
    }
}

impl Reshard<'_, '_> {
    fn life(&self, name: &str, count: u32, previous: Option<u32>) -> Result<Wrangler> {
        let (count, previous) = (
            count.to_string(),
            previous.map(|p| format!("durable:{p}")).unwrap_or_default(),
        );
        self.suite.life(
            name,
            &[
                ("STORE", "durable"),
                ("SHARDS", &count),
                ("PREVIOUS_STORE", &previous),
                ("RECONCILE_STARTING_AFTER_MS", "1500"),
                ("ALLOW_FAULT_INJECTION", "true"),
            ],
        )
    }

    /// Life 1: the old keys' jobs on `count` shards (the last failed), the fallback
    /// certified; every id names a shard of `count`.
    fn life_on(&self, count: u32) -> Result<Vec<String>> {
        let server = self.life(&format!("reshard-{count}"), count, None)?;
        let ids = self
            .suite
            .runtime
            .block_on(self.suite.make_old_jobs(&self.suite.api(&server)))?;
        ensure!(
            ids.iter().all(|i| count_of(i) == Some(count)),
            "{count} shards made ids of another layout: {ids:?}"
        );
        Ok(ids)
    }

    /// Step 1 on `count` shards: key `refused` is a `503` and binds nothing; key
    /// `bound.0` is still the replay of its job `bound.1`.
    fn life_refusing(&self, count: u32, refused: usize, bound: (usize, &str)) -> Result<()> {
        let server = self.life(&format!("reshard-refuse-{count}"), count, None)?;
        let suite = self.suite;
        suite.runtime.block_on(async {
            let api = suite.api(&server);
            let token = api.token(&suite.owner);
            let reply =
                send(api.create(&token, Some(&suite.key(refused)), &suite.body(refused))).await;
            ensure!(
                reply.status == 503 && reply.header("retry-after") == Some("30"),
                "a new key while {count} shards refuse them: {} {}",
                reply.status,
                reply.text
            );
            let (i, bound) = bound;
            let replay = send(api.create(&token, Some(&suite.key(i)), &suite.body(i))).await;
            ensure!(
                replay.status == 200 && id(&replay.json()) == bound,
                "a bound key while {count} shards refuse new ones: {} {}",
                replay.status,
                replay.text
            );
            Ok(())
        })?;
        ensure!(
            self.bound(count, refused)? == 0,
            "the refused key was written"
        );
        Ok(())
    }

    /// Life 3: 16 shards with the 8 kept. The ids of the keys bound in 16.
    fn life_moved_to_16(&self, old: &[String]) -> Result<Vec<String>> {
        let server = self.life("reshard-16", 16, Some(8))?;
        let suite = self.suite;
        let later: Vec<usize> = (OLD_KEYS..OLD_KEYS + LATER_KEYS)
            .chain([REFUSED_IN_8])
            .collect();
        let mid = suite.runtime.block_on(async {
            let api = suite.api(&server);
            let token = api.token(&suite.owner);
            let keys: Vec<usize> = (0..OLD_KEYS).collect();
            self.replays(&api, &token, &keys, old, 8).await?;
            let conflict = send(api.create(&token, Some(&suite.key(1)), &suite.body(1000))).await;
            ensure!(
                conflict.status == 409 && conflict.problem_code() == "idempotency_key_reused",
                "another body under a key of 8: {} {}",
                conflict.status,
                conflict.text
            );
            let mid = self.bind(&api, &token, &later, 16).await?;
            self.fallback_in_its_own_shard(&api, &token, &old[OLD_KEYS - 1])
                .await?;
            let every: Vec<String> = old.iter().chain(&mid).cloned().collect();
            self.listed(&api, &token, &every).await?;
            anyhow::Ok(mid)
        })?;
        self.bound_once(&(0..OLD_KEYS).collect::<Vec<_>>(), 8, 16)?;
        self.bound_once(&later, 16, 8)?;
        // The end of the move is a count: every job of 8 idle for years but the one that
        // took the fallback button after step 1, then that one too.
        let late = [old[OLD_KEYS - 1].clone()];
        let eight = shards(8)?;
        for (keep, left) in [(&late[..], 1), (&[][..], 0)] {
            self.backdate(8, keep)?;
            suite.runtime.block_on(async {
                let api = suite.api(&server);
                reconcile_every_shard(&api).await?;
                check_move_status(suite.tools, &api, &suite.persist, eight, Some(left)).await
            })?;
        }
        Ok(mid)
    }

    /// Each of `keys` is the replay of its job in `ids` (in the same order), from the
    /// layout of `count` shards the job was made in.
    async fn replays(
        &self,
        api: &Api,
        token: &str,
        keys: &[usize],
        ids: &[String],
        count: u32,
    ) -> Result<()> {
        ensure!(keys.len() == ids.len(), "{keys:?} and {ids:?}");
        let suite = self.suite;
        for (&i, job) in keys.iter().zip(ids) {
            ensure!(
                count_of(job) == Some(count),
                "{job} is not a job of {count} shards"
            );
            let read = send(api.get(token, &format!("/v1/jobs/{job}"))).await;
            ensure!(read.status == 200, "{job} read: {}", read.text);
            let replay = send(api.create(token, Some(&suite.key(i)), &suite.body(i))).await;
            ensure!(
                replay.status == 200 && &id(&replay.json()) == job,
                "key {i} after the move: {} {}",
                replay.status,
                replay.text
            );
        }
        Ok(())
    }

    /// Binds `keys`: each a new job of `count` shards, succeeded. Their ids.
    async fn bind(
        &self,
        api: &Api,
        token: &str,
        keys: &[usize],
        count: u32,
    ) -> Result<Vec<String>> {
        let suite = self.suite;
        let mut ids = Vec::new();
        for &i in keys {
            let made = send(api.create(token, Some(&suite.key(i)), &suite.body(i))).await;
            ensure!(made.status == 201, "key {i}: {} {}", made.status, made.text);
            let job = id(&made.json());
            ensure!(
                count_of(&job) == Some(count),
                "key {i} made {job}, not a job of {count} shards"
            );
            ids.push(job);
        }
        for job in &ids {
            let done = api
                .wait_job(token, job, |j| j["status"] == "succeeded")
                .await;
            ensure!(done["status"] == "succeeded", "{done}");
        }
        Ok(ids)
    }

    /// The failed old job takes the fallback button: its new attempt is made in the job's
    /// own shard (its id names it), dispatched there, and wins.
    async fn fallback_in_its_own_shard(&self, api: &Api, token: &str, failed: &str) -> Result<()> {
        let click = send(
            api.post_json(
                token,
                &format!("/v1/jobs/{failed}/attempts"),
                &json!({"provider": "fallback"}),
            )
            .header("Idempotency-Key", unique("click")),
        )
        .await;
        ensure!(
            click.status == 201,
            "the fallback button on an old job: {} {}",
            click.status,
            click.text
        );
        let done = api
            .wait_job(token, failed, |j| j["status"] == "succeeded")
            .await;
        ensure!(
            done["status"] == "succeeded",
            "the old job after its fallback: {done}"
        );
        let home = route_of_id(failed);
        let attempts = done["attempts"].as_array().cloned().unwrap_or_default();
        ensure!(
            attempts.len() == 2 && attempts.iter().all(|a| route_of_id(&id(a)) == home),
            "the old job's attempts are not all in its own shard: {done}"
        );
        Ok(())
    }

    /// The owner's list holds `ids`, once each, and nothing else.
    async fn listed(&self, api: &Api, token: &str, ids: &[String]) -> Result<()> {
        let list = send(api.get(token, "/v1/jobs?limit=200")).await;
        ensure!(list.status == 200, "{}", list.text);
        let mut listed: Vec<String> = list.json()["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(id)
            .collect();
        let mut want = ids.to_vec();
        listed.sort();
        want.sort();
        ensure!(
            listed == want,
            "the owner's list during the move: {listed:?}, not {want:?}"
        );
        Ok(())
    }

    /// How many jobs key `i` is bound to in the shards of `count`.
    fn bound(&self, count: u32, i: usize) -> Result<i64> {
        let mut n = 0;
        for file in onceclick_tests::db::shard_files_of(&self.suite.persist, count) {
            n += onceclick_tests::db::open_file(&file)
                .query_row(
                    "SELECT count(*) FROM jobs WHERE idempotency_key = ?1",
                    [self.suite.key(i)],
                    |r| r.get::<_, i64>(0),
                )
                .with_context(|| format!("the jobs of {}", file.display()))?;
        }
        Ok(n)
    }

    /// Each of `keys` is bound once in the shards of `count`, and not in those of `other`.
    fn bound_once(&self, keys: &[usize], count: u32, other: u32) -> Result<()> {
        for &i in keys {
            let (here, there) = (self.bound(count, i)?, self.bound(other, i)?);
            ensure!(
                here == 1 && there == 0,
                "key {i} is bound {here} times in {count} shards and {there} times in {other}"
            );
        }
        Ok(())
    }

    /// Makes every job of the shards of `count` but those in `keep` look idle since 2000,
    /// past any retention.
    fn backdate(&self, count: u32, keep: &[String]) -> Result<()> {
        for file in onceclick_tests::db::shard_files_of(&self.suite.persist, count) {
            onceclick_tests::db::open_file_writable(&file)
                .execute(
                    "UPDATE jobs SET updated_at = '2000-01-01T00:00:00.000Z'
                      WHERE id NOT IN (SELECT value FROM json_each(?1))",
                    [serde_json::to_string(keep)?],
                )
                .with_context(|| format!("backdating the jobs of {}", file.display()))?;
        }
        Ok(())
    }

    /// A second move's first step while the first move still keeps its previous layout
    /// is refused when the Worker loads its configuration: every request is a 500 that
    /// binds nothing, and the log says why.
    fn second_move_refused(&self) -> Result<()> {
        let suite = self.suite;
        let log = suite.root.join("target/xtask/move-reshard-refused.log");
        let mut vars = suite.base_vars.clone();
        vars.extend(
            [
                ("STORE", "durable"),
                ("SHARDS", "16"),
                ("PREVIOUS_STORE", "durable:8"),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned())),
        );
        let server = Wrangler::start_refused(
            suite.tools,
            DevOptions {
                port: wrangler::free_port()?,
                persist: suite.persist.clone(),
                vars,
                log: Some(log.clone()),
                config: Some(suite.refusing.clone()),
                log_level: None,
            },
        )?;
        let key = unique("second-move");
        suite.runtime.block_on(async {
            let api = suite.api(&server);
            let token = api.token(&suite.owner);
            let reply = send(api.create(&token, Some(&key), &suite.body(0))).await;
            ensure!(
                reply.status == 500 && reply.problem_code() == "internal",
                "a create under a refused configuration: {} {}",
                reply.status,
                reply.text
            );
            Ok(())
        })?;
        drop(server);
        let said = std::fs::read_to_string(&log)?;
        ensure!(
            said.contains("configuration_refused") && said.contains("one move at a time"),
            "the log does not say why the configuration was refused: {}",
            log.display()
        );
        for count in [8, 16] {
            for file in onceclick_tests::db::shard_files_of(&suite.persist, count) {
                let n: i64 = onceclick_tests::db::open_file(&file).query_row(
                    "SELECT count(*) FROM jobs WHERE idempotency_key = ?1",
                    [&key],
                    |r| r.get(0),
                )?;
                ensure!(n == 0, "a refused configuration bound {key}");
            }
        }
        Ok(())
    }

    /// Life 6: 4 shards with the 16 kept: the keys of 16 answered from there, new keys
    /// bound in 4, each key once; the shards of 16 still hold jobs.
    fn life_moved_to_4(&self, mid: &[String]) -> Result<()> {
        let server = self.life("reshard-4", 4, Some(16))?;
        let suite = self.suite;
        let first = OLD_KEYS + LATER_KEYS;
        let newer: Vec<usize> = (first..first + LATER_KEYS).chain([REFUSED_IN_16]).collect();
        suite.runtime.block_on(async {
            let api = suite.api(&server);
            let token = api.token(&suite.owner);
            let keys: Vec<usize> = (OLD_KEYS..OLD_KEYS + LATER_KEYS)
                .chain([REFUSED_IN_8])
                .collect();
            self.replays(&api, &token, &keys, mid, 16).await?;
            let new = self.bind(&api, &token, &newer, 4).await?;
            let every: Vec<String> = mid.iter().chain(&new).cloned().collect();
            self.listed(&api, &token, &every).await?;
            check_move_status(
                suite.tools,
                &api,
                &suite.persist,
                shards(16)?,
                Some(mid.len() as u64),
            )
            .await
        })?;
        let of_16: Vec<usize> = (OLD_KEYS..OLD_KEYS + LATER_KEYS)
            .chain([REFUSED_IN_8])
            .collect();
        self.bound_once(&of_16, 16, 4)?;
        self.bound_once(&newer, 4, 16)
    }
}
