//! Changing the number of shards, and going back to D1, as README.md describes it: 8 → 16,
//! then 16 → 4, then 4 → D1, on one persisted local store, through the lives of the
//! Worker (the same mechanism as the move from D1, `moves.rs`):
//!
//! 1. **8 shards**: jobs are made, all but one succeed; the fallback is certified.
//! 2. **8 shards refusing new keys** (step 1 of the move): a new key is `503` and binds
//!    nothing; an old key is its replay.
//! 3. **16 shards, `PREVIOUS_STORE = "durable:8"`** (step 2):
//!    - every old key is still answered from its shard of 8 (the same job, or the 409 of
//!      another body);
//!    - new keys, and the one refused in life 2, are bound in shards of 16;
//!    - the shards of 16 start with no certification, and the cron's pass certifies them;
//!    - the failed old job takes the fallback button: its attempt is made, dispatched
//!      and recorded in the job's own shard of 8 (on that shard's certification);
//!    - the owner's list holds the jobs of both layouts;
//!    - every key is bound exactly once over both layouts, in the layout of its time;
//!    - the end of the move is a count: with every old job idle for years but the one
//!      that finished after step 1, `GET /v1/move` and `cargo xtask move-status --local
//!      --previous durable:8` both say keep; once the old shards' alarms have purged it
//!      too, both say they may go.
//! 4. **A second move started during the first** (16 shards refusing new keys, with
//!    `PREVIOUS_STORE` still set) is refused when it loads: every request is a 500, and
//!    the log says "one move at a time".
//! 5. **16 shards refusing new keys** (the first move ended), then **4 shards,
//!    `PREVIOUS_STORE = "durable:16"`**: the keys of 16 answered from there, new keys
//!    bound in shards of 4, each key once; the move ends when the alarms have purged 16.
//! 6. **4 shards refusing new keys**, then **D1, `PREVIOUS_STORE = "durable:4"`**: the
//!    keys of 4 answered from there, new keys bound in D1 (UUIDv7 ids), each key once;
//!    the shards of 4 still hold jobs, so they may not go.

use crate::moves::{
    all_certified, backdate, certified_by_cron, check_move_status, d1_count, fallback_stays_home,
    lists_exactly, MoveSuite, OLD_KEYS,
};
use crate::wrangler::{self, DevOptions, Wrangler};
use anyhow::{ensure, Context, Result};
use onceclick_protocol::moving::StoreLayout;
use onceclick_protocol::shard::{route_of_id, IdRoute, ShardCount};
use onceclick_tests::client::{id, send, unique, Api};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

/// Keys bound in each later layout (16, 4, then D1).
const LATER_KEYS: usize = 6;
/// The keys each step 1 refuses (on 8, 16 and 4 shards), each bound in the next layout.
const REFUSED: [usize; 3] = [50, 60, 70];

/// The resharding suite: the lives of the module's list, in order, on one store.
pub(crate) fn run(tools: &crate::tools::Tools, root: &Path) -> Result<()> {
    let started = Instant::now();
    let suite = MoveSuite::new(tools, root, "reshard")?;
    let moves = Reshard { suite: &suite };
    let (eight, sixteen, four) = (shards(8)?, shards(16)?, shards(4)?);
    eprintln!("xtask: resharding, life 1: 8 shards");
    let old = moves.life_on(eight)?;
    eprintln!("xtask: resharding, life 2: 8 shards refusing new keys");
    moves.life_refusing(eight, REFUSED[0], (0, &old[0]))?;
    eprintln!("xtask: resharding, life 3: 16 shards, 8 kept");
    let (keys_16, mid) = moves.life_moved_to_16(&old)?;
    eprintln!("xtask: resharding, life 4: a second move during the first is refused");
    moves.second_move_refused()?;
    eprintln!("xtask: resharding, life 5: 16 shards refusing new keys, then 4 shards, 16 kept");
    moves.life_refusing(sixteen, REFUSED[1], (keys_16[0], &mid[0]))?;
    let keys_4 = moves.later_keys(2, REFUSED[1]);
    let new = moves.life_moved(four, sixteen, (&keys_16, &mid), &keys_4, true)?;
    eprintln!("xtask: resharding, life 6: 4 shards refusing new keys, then D1, 4 kept");
    moves.life_refusing(four, REFUSED[2], (keys_4[0], &new[0]))?;
    let keys_d1 = moves.later_keys(3, REFUSED[2]);
    moves.life_moved(StoreLayout::D1, four, (&keys_4, &new), &keys_d1, false)?;
    eprintln!(
        "xtask: resharding 8 → 16 → 4 → D1: every key answered from the layout it was bound in, none bound twice ({:.0} s)",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

struct Reshard<'s, 'a> {
    suite: &'s MoveSuite<'a>,
}

/// `GET /v1/stats`'s replays and conflicts of the last hour, over every place.
async fn repeats(api: &Api) -> Result<(u64, u64)> {
    let admin = api.admin_token("reshard-stats");
    let reply = send(api.get(&admin, "/v1/stats")).await;
    ensure!(
        reply.status == 200,
        "GET /v1/stats: {} {}",
        reply.status,
        reply.text
    );
    let totals = &reply.json()["totals"];
    let n = |name: &str| {
        totals[name]
            .as_u64()
            .with_context(|| format!("no {name} in {totals}"))
    };
    Ok((n("replays")?, n("conflicts")?))
}

/// `durable:N`.
fn shards(count: u32) -> Result<StoreLayout> {
    ShardCount::new(count)
        .map(StoreLayout::Shards)
        .context("a shard count")
}

/// Whether `id` is a job (or attempt) of `layout`: a UUIDv7 for D1, a UUIDv8 naming a
/// shard of its count otherwise.
fn made_in(id: &str, layout: StoreLayout) -> bool {
    match (route_of_id(id), layout) {
        (IdRoute::Database, StoreLayout::D1) => true,
        (IdRoute::Shard(shard), StoreLayout::Shards(count)) => shard.count == count,
        _ => false,
    }
}

impl Reshard<'_, '_> {
    /// A life on `now`, moving from `previous` if any.
    fn life(
        &self,
        name: &str,
        now: StoreLayout,
        previous: Option<StoreLayout>,
    ) -> Result<Wrangler> {
        let previous = previous.map(|p| p.to_string()).unwrap_or_default();
        let mut vars = vec![
            ("PREVIOUS_STORE", previous.as_str()),
            ("RECONCILE_STARTING_AFTER_MS", "1500"),
            ("ALLOW_FAULT_INJECTION", "true"),
        ];
        let count;
        match now {
            StoreLayout::D1 => vars.push(("STORE", "d1")),
            StoreLayout::Shards(n) => {
                count = n.get().to_string();
                vars.extend([("STORE", "durable"), ("SHARDS", count.as_str())]);
            }
        }
        self.suite.life(name, &vars)
    }

    /// The keys the `n`th later layout binds (`LATER_KEYS` of its own, and the key the
    /// step 1 before it refused).
    fn later_keys(&self, n: usize, refused: usize) -> Vec<usize> {
        let first = OLD_KEYS + (n - 1) * LATER_KEYS;
        (first..first + LATER_KEYS).chain([refused]).collect()
    }

    /// Life 1: the old keys' jobs on `layout` (the last failed), the fallback certified;
    /// every id is one of `layout`.
    fn life_on(&self, layout: StoreLayout) -> Result<Vec<String>> {
        let server = self.life(&format!("reshard-{layout}"), layout, None)?;
        let ids = self
            .suite
            .runtime
            .block_on(self.suite.make_old_jobs(&self.suite.api(&server)))?;
        ensure!(
            ids.iter().all(|i| made_in(i, layout)),
            "{layout} made ids of another layout: {ids:?}"
        );
        Ok(ids)
    }

    /// Step 1 on `layout`: key `refused` is a `503` and binds nothing; key `bound.0` is
    /// still the replay of its job `bound.1`.
    fn life_refusing(
        &self,
        layout: StoreLayout,
        refused: usize,
        bound: (usize, &str),
    ) -> Result<()> {
        let server = self.life(&format!("reshard-refuse-{layout}"), layout, None)?;
        let suite = self.suite;
        suite.runtime.block_on(async {
            let api = suite.api(&server);
            let token = api.token(&suite.owner);
            let reply =
                send(api.create(&token, Some(&suite.key(refused)), &suite.body(refused))).await;
            ensure!(
                reply.status == 503 && reply.header("retry-after") == Some("30"),
                "a new key while {layout} refuses them: {} {}",
                reply.status,
                reply.text
            );
            let (i, bound) = bound;
            let replay = send(api.create(&token, Some(&suite.key(i)), &suite.body(i))).await;
            ensure!(
                replay.status == 200 && id(&replay.json()) == bound,
                "a bound key while {layout} refuses new ones: {} {}",
                replay.status,
                replay.text
            );
            Ok(())
        })?;
        ensure!(
            self.bound(layout, refused)? == 0,
            "the refused key was written"
        );
        Ok(())
    }

    /// Life 3: 16 shards with the 8 kept; its end. The keys bound in 16, and their ids.
    fn life_moved_to_16(&self, old: &[String]) -> Result<(Vec<usize>, Vec<String>)> {
        let (eight, sixteen) = (shards(8)?, shards(16)?);
        let server = self.life("reshard-16", sixteen, Some(eight))?;
        let suite = self.suite;
        let later = self.later_keys(1, REFUSED[0]);
        let old_keys: Vec<usize> = (0..OLD_KEYS).collect();
        let mid = suite.runtime.block_on(async {
            let api = suite.api(&server);
            let token = api.token(&suite.owner);
            ensure!(
                !all_certified(&api, "fallback").await,
                "the shards of 16 start with no certification"
            );
            let before = repeats(&api).await?;
            self.replays(&api, &token, (&old_keys, old), eight).await?;
            let conflict = send(api.create(&token, Some(&suite.key(1)), &suite.body(1000))).await;
            ensure!(
                conflict.status == 409 && conflict.problem_code() == "idempotency_key_reused",
                "another body under a key of 8: {} {}",
                conflict.status,
                conflict.text
            );
            // Each replay and the conflict answered from the old layout are counted too.
            let after = repeats(&api).await?;
            ensure!(
                after.0 >= before.0 + OLD_KEYS as u64 && after.1 > before.1,
                "GET /v1/stats counted {after:?} replays and conflicts, {before:?} before"
            );
            let mid = self.bind(&api, &token, &later, sixteen).await?;
            // Its attempt is made, dispatched and recorded in its own shard of 8.
            fallback_stays_home(&api, &token, &old[OLD_KEYS - 1]).await?;
            certified_by_cron(&api, "fallback").await?;
            let every: Vec<String> = old.iter().chain(&mid).cloned().collect();
            lists_exactly(&api, &token, &every).await?;
            anyhow::Ok(mid)
        })?;
        self.bound_once(&old_keys, eight, sixteen)?;
        self.bound_once(&later, sixteen, eight)?;
        // The end of the move is a count: every job of 8 idle for years but the one that
        // took the fallback button after step 1, then that one too.
        self.purged(&server, eight, &old[OLD_KEYS - 1..], 1)?;
        self.purged(&server, eight, &[], 0)?;
        Ok((later, mid))
    }

    /// Step 2 of a move from `previous` to `now`: the keys `before.0` (whose jobs are
    /// `before.1`) answered from `previous`, the keys `keys` bound in `now`, each key
    /// once, and `previous` still holding its jobs; with `end`, then the move's end, its
    /// old jobs purged by their shards' alarms. The ids of `keys`' jobs.
    fn life_moved(
        &self,
        now: StoreLayout,
        previous: StoreLayout,
        before: (&[usize], &[String]),
        keys: &[usize],
        end: bool,
    ) -> Result<Vec<String>> {
        let server = self.life(&format!("reshard-{now}"), now, Some(previous))?;
        let suite = self.suite;
        let new = suite.runtime.block_on(async {
            let api = suite.api(&server);
            let token = api.token(&suite.owner);
            self.replays(&api, &token, before, previous).await?;
            let new = self.bind(&api, &token, keys, now).await?;
            let every: Vec<String> = before.1.iter().chain(&new).cloned().collect();
            lists_exactly(&api, &token, &every).await?;
            let held = Some(before.1.len() as u64);
            check_move_status(suite.tools, &api, &suite.persist, previous, held).await?;
            anyhow::Ok(new)
        })?;
        self.bound_once(before.0, previous, now)?;
        self.bound_once(keys, now, previous)?;
        if end {
            self.purged(&server, previous, &[], 0)?;
        }
        Ok(new)
    }

    /// Each of `keys.0` is the replay of its job in `keys.1` (in the same order), from the
    /// layout `layout` the job was made in.
    async fn replays(
        &self,
        api: &Api,
        token: &str,
        (keys, ids): (&[usize], &[String]),
        layout: StoreLayout,
    ) -> Result<()> {
        ensure!(keys.len() == ids.len(), "{keys:?} and {ids:?}");
        let suite = self.suite;
        for (&i, job) in keys.iter().zip(ids) {
            ensure!(made_in(job, layout), "{job} is not a job of {layout}");
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

    /// Binds `keys`: each a new job of `layout`, succeeded. Their ids.
    async fn bind(
        &self,
        api: &Api,
        token: &str,
        keys: &[usize],
        layout: StoreLayout,
    ) -> Result<Vec<String>> {
        let suite = self.suite;
        let mut ids = Vec::new();
        for &i in keys {
            let made = send(api.create(token, Some(&suite.key(i)), &suite.body(i))).await;
            ensure!(made.status == 201, "key {i}: {} {}", made.status, made.text);
            let job = id(&made.json());
            ensure!(
                made_in(&job, layout),
                "key {i} made {job}, not a job of {layout}"
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

    /// How many jobs key `i` is bound to in `layout`.
    fn bound(&self, layout: StoreLayout, i: usize) -> Result<i64> {
        let sql = "SELECT count(*) FROM jobs WHERE idempotency_key = ?1";
        let count = match layout {
            StoreLayout::D1 => return d1_count(&self.suite.persist, sql, &self.suite.key(i)),
            StoreLayout::Shards(count) => count.get(),
        };
        let mut n = 0;
        for file in onceclick_tests::db::shard_files_of(&self.suite.persist, count) {
            n += onceclick_tests::db::open_file(&file)
                .query_row(sql, [self.suite.key(i)], |r| r.get::<_, i64>(0))
                .with_context(|| format!("the jobs of {}", file.display()))?;
        }
        Ok(n)
    }

    /// Each of `keys` is bound once in `layout`, and not in `other`.
    fn bound_once(&self, keys: &[usize], layout: StoreLayout, other: StoreLayout) -> Result<()> {
        for &i in keys {
            let (here, there) = (self.bound(layout, i)?, self.bound(other, i)?);
            ensure!(
                here == 1 && there == 0,
                "key {i} is bound {here} times in {layout} and {there} times in {other}"
            );
        }
        Ok(())
    }

    /// The end of a move from the shards `previous`: every job there but those in `keep`
    /// made to look idle since 2000, past any retention; then every shard's alarm moved
    /// near (`POST /v1/_reconcile` with `alarm_in_ms`), and `GET /v1/move` awaited until
    /// the alarms have purged all but `left` jobs, which `move-status` then says too.
    fn purged(
        &self,
        server: &Wrangler,
        previous: StoreLayout,
        keep: &[String],
        left: u64,
    ) -> Result<()> {
        let StoreLayout::Shards(count) = previous else {
            anyhow::bail!("a D1 is purged by the cron, not by alarms");
        };
        for file in onceclick_tests::db::shard_files_of(&self.suite.persist, count.get()) {
            backdate(&onceclick_tests::db::open_file_writable(&file), keep)
                .with_context(|| format!("backdating the jobs of {}", file.display()))?;
        }
        let suite = self.suite;
        suite.runtime.block_on(async {
            let api = suite.api(server);
            let admin = api.admin_token("reshard-alarms");
            let (armed, _) = onceclick_tests::client::resend_while_unavailable(
                || api.post_json(&admin, "/v1/_reconcile", &json!({"alarm_in_ms": 50})),
                &[200; 4],
            )
            .await;
            ensure!(
                armed.status == 200,
                "the alarms: {} {}",
                armed.status,
                armed.text
            );
            // The alarms run on their own: wait for their purge, as a person would ask.
            let by = Instant::now() + Duration::from_secs(60);
            loop {
                let status = send(api.get(&admin, "/v1/move")).await.json();
                if status["jobs"].as_u64() == Some(left) {
                    break;
                }
                ensure!(
                    Instant::now() < by,
                    "{previous}'s alarms did not purge: {status}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            check_move_status(suite.tools, &api, &suite.persist, previous, Some(left)).await
        })
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
}
