//! The move from D1 to Durable Objects, as README.md describes it, on one persisted
//! local store, in three lives of the Worker:
//!
//! 1. **D1** (`STORE=d1`): jobs are made, most succeed, one fails; the fallback provider
//!    is certified.
//! 2. **D1, refusing new keys** (`REFUSE_NEW_KEYS = true`, the first deploy of the move):
//!    a new key is `503` and binds nothing; a resend of an old key is still its replay.
//! 3. **Shards with the D1 kept** (`STORE=durable`, `SHARDS=8`, `PREVIOUS_STORE=d1`):
//!    - every old key is still answered from D1 (the same job, or the 409 of another
//!      body);
//!    - new keys, and the key refused in life 2, are bound in shards;
//!    - before certify runs again, an old job whose lost dispatch the cron resends fails
//!      over on D1's own certifications (its primary answers 500);
//!    - the failed old job takes the fallback button, and the attempt runs in D1;
//!    - an owner's list holds the old jobs and the new;
//!    - every key is bound exactly once over D1 and the shards together;
//!    - the end of the move is a count: with every D1 job idle for years but the two
//!      that finished after step 1, `GET /v1/move` and `cargo xtask move-status --local`
//!      both say keep; once those are purged too, both say D1 may go;
//!    - the shards start with no certification, and the cron's background pass
//!      certifies the fallback there: no one certifies by hand.
//! 4. **A redeploy that changes the fallback's JSON form** (`json_object` to `strict`):
//!    its certifications are void (a fallback attempt is refused), the cron's pass
//!    certifies it again, and the fallback button then runs on it, asked the new way.
//!
//! It lives in xtask because it owns the Worker's processes, like the crash suite.

use crate::test_worker::{base_vars, Scratch, TEST_TIMEOUT_MS};
use crate::tools::Tools;
use crate::wrangler::{self, DevOptions, Wrangler};
use anyhow::{ensure, Context, Result};
use onceclick_protocol::moving::StoreLayout;
use onceclick_tests::client::{id, marked_text, send, unique, Api, Mock};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Keys made before the move.
pub(crate) const OLD_KEYS: usize = 6;
/// Keys made after it.
const NEW_KEYS: usize = 12;

/// The move suite: the three lives of the module's list, in order, on one store.
pub(crate) fn run(tools: &Tools, root: &Path) -> Result<()> {
    let started = Instant::now();
    let suite = MoveSuite::new(tools, root, "move")?;
    eprintln!("xtask: the move from D1 to Durable Objects, life 1: D1");
    let old = suite.life_on_d1()?;
    eprintln!("xtask: the move, life 2: D1 refusing new keys");
    suite.life_refusing_new_keys(&old)?;
    eprintln!("xtask: the move, life 3: 8 shards, D1 kept");
    suite.life_on_shards(&old)?;
    eprintln!("xtask: the move, life 4: the fallback's JSON form changes");
    suite.life_redeployed()?;
    eprintln!(
        "xtask: the move from D1 to Durable Objects: {OLD_KEYS} old keys answered from D1, {} new keys in shards, no key bound twice ({:.0} s)",
        NEW_KEYS + 1,
        started.elapsed().as_secs_f64()
    );
    crate::reshards::run(tools, root)
}

/// What the three lives share: one persisted local store, one mock provider, one owner
/// whose keys and texts are numbered.
pub(crate) struct MoveSuite<'a> {
    pub(crate) tools: &'a Tools,
    pub(crate) root: &'a Path,
    pub(crate) persist: PathBuf,
    secret: String,
    pub(crate) mock: Mock,
    pub(crate) base_vars: Vec<(String, String)>,
    /// The wrangler.toml of life 2.
    pub(crate) refusing: PathBuf,
    pub(crate) runtime: tokio::runtime::Runtime,
    pub(crate) owner: String,
    pub(crate) marker: String,
}

/// The jobs made on D1 in life 1.
struct OldJobs {
    /// One per old key, in key order; the last failed at its provider.
    ids: Vec<String>,
    /// The job whose dispatch was lost before the move.
    stuck: String,
}

impl OldJobs {
    /// The old job that failed, to take the fallback button in life 3.
    fn failed(&self) -> &String {
        &self.ids[OLD_KEYS - 1]
    }
}

impl<'a> MoveSuite<'a> {
    /// A suite on a new store in `target/xtask/<dir>`.
    pub(crate) fn new(tools: &'a Tools, root: &'a Path, dir: &str) -> Result<Self> {
        let Scratch {
            persist,
            secret,
            mock_port,
            mock,
        } = Scratch::new(tools, root.join("target/xtask").join(dir))?;
        let base_vars = base_vars(&secret, mock_port, TEST_TIMEOUT_MS, None, false);
        // Step 1's flag is written as the TOML boolean (`REFUSE_NEW_KEYS = true`), the
        // form a string-only read would have taken for "off"; `--var` would pass a string.
        let refusing = wrangler::derived_config(root, "wrangler-move-refuse.toml", |config| {
            wrangler::raise_rate_limit(config);
            if let Some(toml::Value::Table(vars)) = config.get_mut("vars") {
                vars.insert("REFUSE_NEW_KEYS".into(), toml::Value::Boolean(true));
            }
        })?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        Ok(Self {
            tools,
            root,
            persist,
            secret,
            mock,
            base_vars,
            refusing,
            runtime,
            owner: unique("mover"),
            marker: unique("move"),
        })
    }

    /// One life of the Worker on the suite's store: `name` picks its log (and, for
    /// `refuse`, life 2's wrangler.toml); `extra` vars go over the base ones.
    pub(crate) fn life(&self, name: &str, extra: &[(&str, &str)]) -> Result<Wrangler> {
        let mut vars = self.base_vars.clone();
        vars.extend(
            extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        let config = match name {
            name if name.contains("refuse") => self.refusing.clone(),
            _ => wrangler::unlimited_config(self.root)?,
        };
        Wrangler::start(
            self.tools,
            DevOptions {
                port: wrangler::free_port()?,
                persist: self.persist.clone(),
                vars,
                log: Some(self.root.join(format!("target/xtask/move-{name}.log"))),
                config: Some(config),
                log_level: None,
            },
        )
    }

    pub(crate) fn api(&self, server: &Wrangler) -> Api {
        Api::at(&server.url, &self.secret)
    }

    /// Key `i`'s body: its text carries its own marker (zero-padded); only `-05` is
    /// scripted.
    pub(crate) fn body(&self, i: usize) -> String {
        json!({"kind": "summarize", "input": {"text": marked_text(&format!("{}-{i:02}", self.marker))}})
            .to_string()
    }

    pub(crate) fn key(&self, i: usize) -> String {
        format!("{}-{i}", self.owner)
    }

    /// The marker of the job whose dispatch is lost before the move.
    fn stuck_marker(&self) -> String {
        format!("{}-stuck", self.marker)
    }

    /// Life 1, on D1: the stuck job, then the old keys' jobs, all but the last
    /// succeeding; the fallback certified. Every id is D1's (a UUIDv7).
    fn life_on_d1(&self) -> Result<OldJobs> {
        let server = self.life("d1", &[("STORE", "d1"), ("ALLOW_FAULT_INJECTION", "true")])?;
        let stuck = self
            .runtime
            .block_on(self.make_stuck_job(&self.api(&server)))?;
        let ids = self
            .runtime
            .block_on(self.make_old_jobs(&self.api(&server)))?;
        ensure!(
            ids.iter().all(|i| onceclick_protocol::shard::route_of_id(i)
                == onceclick_protocol::shard::IdRoute::Database),
            "D1 made ids that are not UUIDv7: {ids:?}"
        );
        drop(server);
        Ok(OldJobs { ids, stuck })
    }

    /// A D1 job on a kind with auto_failover whose dispatch is lost before the move: the
    /// cron of life 3 sends it again, and its primary then fails with a 500.
    async fn make_stuck_job(&self, api: &Api) -> Result<String> {
        let token = api.token(&self.owner);
        let body = json!({"kind": "summarize_hedged", "input": {"text": marked_text(&self.stuck_marker())}});
        let reply = send(
            api.create(
                &token,
                Some(&format!("{}-stuck", self.owner)),
                &body.to_string(),
            )
            .header("X-Onceclick-Fault", "drop-enqueue"),
        )
        .await;
        ensure!(
            reply.status == 201,
            "the stuck job: {} {}",
            reply.status,
            reply.text
        );
        Ok(id(&reply.json()))
    }

    /// The old keys' jobs, each waited for: all succeed but the last, which fails at its
    /// provider (to take the fallback button later). Then the fallback is certified.
    pub(crate) async fn make_old_jobs(&self, api: &Api) -> Result<Vec<String>> {
        let token = api.token(&self.owner);
        self.mock
            .script(
                "primary",
                &format!("{}-{:02}", self.marker, OLD_KEYS - 1),
                json!([{"status": 503}]),
            )
            .await;
        let mut ids = Vec::new();
        for i in 0..OLD_KEYS {
            let reply = send(api.create(&token, Some(&self.key(i)), &self.body(i))).await;
            ensure!(
                reply.status == 201,
                "old key {i}: {} {}",
                reply.status,
                reply.text
            );
            ids.push(id(&reply.json()));
        }
        for (i, job) in ids.iter().enumerate() {
            let want = if i == OLD_KEYS - 1 {
                "failed"
            } else {
                "succeeded"
            };
            let done = api
                .wait_job(&token, job, |j| {
                    j["status"] != "queued" && j["status"] != "running"
                })
                .await;
            ensure!(done["status"] == want, "old job {i}: {done}");
        }
        api.ensure_certified("fallback").await;
        Ok(ids)
    }

    /// Life 2, on D1 refusing new keys: a new key is a `503` with `Retry-After: 30` and
    /// binds nothing; an old key is still its replay.
    fn life_refusing_new_keys(&self, old: &OldJobs) -> Result<()> {
        let refused_key = self.key(OLD_KEYS + NEW_KEYS);
        let server = self.life("refuse", &[("STORE", "d1")])?;
        self.runtime.block_on(async {
            let api = self.api(&server);
            let token = api.token(&self.owner);
            let refused = send(api.create(&token, Some(&refused_key), &self.body(99))).await;
            ensure!(
                refused.status == 503 && refused.problem_code() == "service_unavailable",
                "a new key while D1 refuses them: {} {}",
                refused.status,
                refused.text
            );
            ensure!(
                refused.header("retry-after") == Some("30"),
                "the refusal's Retry-After: {:?}",
                refused.header("retry-after")
            );
            let replay = send(api.create(&token, Some(&self.key(0)), &self.body(0))).await;
            ensure!(
                replay.status == 200 && id(&replay.json()) == old.ids[0],
                "an old key while D1 refuses new ones: {} {}",
                replay.status,
                replay.text
            );
            Ok(())
        })?;
        drop(server);
        ensure!(
            d1_count(
                &self.persist,
                "SELECT count(*) FROM jobs WHERE idempotency_key = ?1",
                &refused_key
            )? == 0,
            "the refused key was written"
        );
        Ok(())
    }

    /// Life 3, on eight shards with D1 kept: old keys answered from D1, new ones bound
    /// in shards, D1's jobs still moving on D1; every key bound once; and the end of the
    /// move, a count.
    fn life_on_shards(&self, old: &OldJobs) -> Result<()> {
        let server = self.life(
            "shards",
            &[
                ("STORE", "durable"),
                ("SHARDS", "8"),
                ("PREVIOUS_STORE", "d1"),
                ("RECONCILE_STARTING_AFTER_MS", "1500"),
            ],
        )?;
        self.runtime.block_on(async {
            let api = self.api(&server);
            let token = api.token(&self.owner);
            self.old_keys_answered_from_d1(&api, &token, old).await?;
            let new_ids = self.new_keys_bound_in_shards(&api, &token).await?;
            self.d1_job_fails_over_before_certify(&api, &token, old)
                .await?;
            // Shards start with no certifications: the cron's background pass certifies
            // them, with no one certifying by hand.
            certified_by_cron(&api, "fallback").await?;
            // The failed old job takes the fallback button, and the attempt runs in D1.
            fallback_stays_home(&api, &token, old.failed()).await?;
            let every: Vec<String> = old
                .ids
                .iter()
                .chain(&new_ids)
                .chain([&old.stuck])
                .cloned()
                .collect();
            lists_exactly(&api, &token, &every).await
        })?;
        // Every key bound exactly once, over D1 and the shards together.
        every_key_bound_once(&self.persist, &|i| self.key(i))?;
        self.end_of_the_move(&server, old)?;
        drop(server);
        Ok(())
    }

    /// Old keys: the same jobs, from D1; another body under an old key is a conflict.
    async fn old_keys_answered_from_d1(&self, api: &Api, token: &str, old: &OldJobs) -> Result<()> {
        for (i, old) in old.ids.iter().enumerate() {
            let replay = send(api.create(token, Some(&self.key(i)), &self.body(i))).await;
            ensure!(
                replay.status == 200 && &id(&replay.json()) == old,
                "old key {i} after the move: {} {}",
                replay.status,
                replay.text
            );
            let read = send(api.get(token, &format!("/v1/jobs/{old}"))).await;
            ensure!(read.status == 200, "old job {i} read: {}", read.text);
        }
        let conflict = send(api.create(token, Some(&self.key(1)), &self.body(1000))).await;
        ensure!(
            conflict.status == 409 && conflict.problem_code() == "idempotency_key_reused",
            "another body under an old key: {} {}",
            conflict.status,
            conflict.text
        );
        Ok(())
    }

    /// New keys, and the one refused before: bound in shards, and done there. Their ids.
    async fn new_keys_bound_in_shards(&self, api: &Api, token: &str) -> Result<Vec<String>> {
        let mut new_ids = Vec::new();
        for i in (OLD_KEYS..OLD_KEYS + NEW_KEYS).chain([OLD_KEYS + NEW_KEYS]) {
            let made = send(api.create(token, Some(&self.key(i)), &self.body(i))).await;
            ensure!(
                made.status == 201,
                "new key {i}: {} {}",
                made.status,
                made.text
            );
            let job = id(&made.json());
            ensure!(
                matches!(
                    onceclick_protocol::shard::route_of_id(&job),
                    onceclick_protocol::shard::IdRoute::Shard(_)
                ),
                "new key {i} made {job}, not a shard's id"
            );
            new_ids.push(job);
        }
        for job in &new_ids {
            let done = api
                .wait_job(token, job, |j| j["status"] == "succeeded")
                .await;
            ensure!(done["status"] == "succeeded", "{done}");
        }
        Ok(new_ids)
    }

    /// Before certify runs again (the shards have no certifications yet), a D1 job
    /// still fails over on D1's own: the cron resends its lost dispatch, its primary
    /// answers 500, and auto_failover goes to fallback, certified in D1 in life 1.
    async fn d1_job_fails_over_before_certify(
        &self,
        api: &Api,
        token: &str,
        old: &OldJobs,
    ) -> Result<()> {
        self.mock
            .script("primary", &self.stuck_marker(), json!([{"status": 500}]))
            .await;
        api.run_cron().await;
        let done = api
            .wait_job(token, &old.stuck, |j| {
                j["status"] != "queued" && j["status"] != "running"
            })
            .await;
        let providers: Vec<&str> = done["attempts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a["provider"].as_str())
            .collect();
        ensure!(
            done["status"] == "succeeded" && providers == ["primary", "fallback"],
            "a D1 job's failover before certify runs again: {done}"
        );
        Ok(())
    }

    /// The end of the move is a count, not a date. Every D1 job idle for years but the
    /// two that finished after step 1 (the fallback click, the failover): those stay,
    /// and the check says keep, whatever JOB_RETENTION_HOURS since step 1 would have
    /// said. Once they are purged too, D1 may go.
    fn end_of_the_move(&self, server: &Wrangler, old: &OldJobs) -> Result<()> {
        let finished_late = [old.failed().clone(), old.stuck.clone()];
        backdate_d1(&self.persist, &finished_late)?;
        self.runtime.block_on(async {
            let api = self.api(server);
            api.run_cron().await;
            check_move_status(
                self.tools,
                &api,
                &self.persist,
                StoreLayout::D1,
                Some(finished_late.len() as u64),
            )
            .await?;
            backdate_d1(&self.persist, &[])?;
            api.run_cron().await;
            check_move_status(self.tools, &api, &self.persist, StoreLayout::D1, Some(0)).await
        })
    }
}

impl MoveSuite<'_> {
    /// Life 4: the shards again, the fallback now asked for JSON with a strict schema.
    fn life_redeployed(&self) -> Result<()> {
        let providers = self
            .base_vars
            .iter()
            .find(|(k, _)| k == "PROVIDERS")
            .map(|(_, v)| v.replace(r#""json_form":"json_object""#, r#""json_form":"strict""#))
            .context("the base vars name the providers")?;
        ensure!(providers.contains(r#""json_form":"strict""#), "{providers}");
        let server = self.life(
            "redeploy",
            &[
                ("STORE", "durable"),
                ("SHARDS", "8"),
                ("PREVIOUS_STORE", "d1"),
                ("PROVIDERS", &providers),
            ],
        )?;
        self.runtime.block_on(async {
            let api = self.api(&server);
            let token = api.token(&self.owner);
            ensure!(
                !all_certified(&api, "fallback").await,
                "a new JSON form voids the fallback's certifications"
            );
            let marker = unique("redeploy");
            self.mock
                .script("primary", &marker, json!([{"status": 503}]))
                .await;
            let job = api
                .create_job(&token, "summarize", &marked_text(&marker), None)
                .await;
            let job_id = id(&job);
            api.wait_job(&token, &job_id, |j| j["status"] == "failed")
                .await;
            let path = format!("/v1/jobs/{job_id}/attempts");
            let refused =
                send(api.post_json(&token, &path, &json!({"provider": "fallback"}))).await;
            ensure!(
                refused.problem_code() == "provider_not_certified",
                "the fallback, voided, is refused: {}",
                refused.text
            );
            certified_by_cron(&api, "fallback").await?;
            let accepted =
                send(api.post_json(&token, &path, &json!({"provider": "fallback"}))).await;
            ensure!(accepted.status == 201, "{}", accepted.text);
            let done = api
                .wait_job(&token, &job_id, |j| j["status"] == "succeeded")
                .await;
            ensure!(done["status"] == "succeeded", "{done}");
            let asked = self.mock.calls(&marker).await;
            ensure!(
                asked
                    .iter()
                    .any(|c| c["provider"] == "fallback" && c["response_format"] == "json_schema"),
                "the fallback is asked the new way: {asked:?}"
            );
            Ok(())
        })
    }
}

/// Whether `provider` is certified for every kind that names it (`GET /v1/providers`).
pub(crate) async fn all_certified(api: &Api, provider: &str) -> bool {
    let token = api.token("certification-reader");
    let reply = send(api.get(&token, "/v1/providers")).await;
    let body = reply.json();
    let kinds: Vec<bool> = body["providers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["name"] == provider)
        .flat_map(|p| p["kinds"].as_object().into_iter().flat_map(|k| k.values()))
        .map(|k| k["certified"] == true)
        .collect();
    !kinds.is_empty() && kinds.iter().all(|c| *c)
}

/// Runs the cron until `provider` is certified for every kind that names it: each pass
/// certifies a few pairs (`certification::auto`).
pub(crate) async fn certified_by_cron(api: &Api, provider: &str) -> Result<()> {
    for _ in 0..8 {
        if all_certified(api, provider).await {
            return Ok(());
        }
        api.run_cron().await;
    }
    ensure!(
        all_certified(api, provider).await,
        "the cron's background passes did not certify {provider}"
    );
    Ok(())
}

/// Checks that every key of the suite is bound exactly once, over D1 and the shards
/// together, and in the store of its time.
fn every_key_bound_once(persist: &Path, key: &dyn Fn(usize) -> String) -> Result<()> {
    for i in 0..=OLD_KEYS + NEW_KEYS {
        let sql = "SELECT count(*) FROM jobs WHERE idempotency_key = ?1";
        let in_d1 = d1_count(persist, sql, &key(i))?;
        let in_shards: i64 = onceclick_tests::db::open_shards_in(persist)
            .query_row(sql, [key(i)], |r| r.get(0))
            .unwrap_or(0);
        ensure!(
            in_d1 + in_shards == 1,
            "key {i} is bound {in_d1} times in D1 and {in_shards} times in shards"
        );
        ensure!(
            (i < OLD_KEYS) == (in_d1 == 1),
            "key {i} is bound in the wrong store (D1: {in_d1})"
        );
    }
    Ok(())
}

/// Makes every D1 job but those in `keep` look idle since 2000, past any retention.
fn backdate_d1(persist: &Path, keep: &[String]) -> Result<()> {
    backdate(&onceclick_tests::db::open_writable_in(persist), keep).context("backdating D1's jobs")
}

/// Makes every job of the database `conn` but those in `keep` look idle since 2000, past
/// any retention.
pub(crate) fn backdate(conn: &rusqlite::Connection, keep: &[String]) -> Result<()> {
    conn.execute(
        "UPDATE jobs SET updated_at = '2000-01-01T00:00:00.000Z'
          WHERE id NOT IN (SELECT value FROM json_each(?1))",
        [serde_json::to_string(keep)?],
    )?;
    Ok(())
}

/// The failed old job `failed` takes the fallback button: its new attempt is made where
/// the job lives (its id names the place, and the attempt's names the same), dispatched
/// there, and wins.
pub(crate) async fn fallback_stays_home(api: &Api, token: &str, failed: &str) -> Result<()> {
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
    let home = onceclick_protocol::shard::route_of_id(failed);
    let attempts = done["attempts"].as_array().cloned().unwrap_or_default();
    ensure!(
        attempts.len() == 2
            && attempts
                .iter()
                .all(|a| onceclick_protocol::shard::route_of_id(&id(a)) == home),
        "the old job's attempts are not all where it lives: {done}"
    );
    Ok(())
}

/// The owner's list (of `token`) holds `ids`, once each, and nothing else.
pub(crate) async fn lists_exactly(api: &Api, token: &str, ids: &[String]) -> Result<()> {
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

/// `GET /v1/move` and `cargo xtask move-status --local` agree that `previous` holds
/// `jobs` jobs, and say it may go exactly when that is 0.
pub(crate) async fn check_move_status(
    tools: &Tools,
    api: &Api,
    persist: &Path,
    previous: StoreLayout,
    jobs: Option<u64>,
) -> Result<()> {
    let admin = api.admin_token("mover-admin");
    let reply = send(api.get(&admin, "/v1/move")).await;
    ensure!(
        reply.status == 200,
        "GET /v1/move: {} {}",
        reply.status,
        reply.text
    );
    let endpoint = reply.json();
    let at = crate::move_status::Asked::Local(persist.to_owned());
    let local = crate::move_status::status(tools, previous, &at)?;
    ensure!(
        endpoint["jobs"].as_u64() == Some(local.jobs)
            && endpoint["previous_store"] == previous.to_string(),
        "GET /v1/move says {endpoint}, move-status of {previous} {local:?}"
    );
    if let Some(jobs) = jobs {
        ensure!(
            local.jobs == jobs,
            "{previous} holds {local:?}, not {jobs} jobs"
        );
    }
    let may_go = local.jobs == 0;
    ensure!(
        endpoint["previous_may_go"] == may_go && local.previous_may_go() == may_go,
        "the verdict with {} jobs left: {endpoint}",
        local.jobs
    );
    let verdict = local.verdict(previous);
    let want = match may_go {
        true => format!("{previous} may go"),
        false => format!("keep PREVIOUS_STORE: {previous} still holds"),
    };
    ensure!(
        verdict.starts_with(&want) && endpoint["verdict"] == verdict.as_str(),
        "{verdict}, {endpoint}"
    );
    eprintln!("xtask: move-status: {verdict}");
    Ok(())
}

pub(crate) fn d1_count(persist: &Path, sql: &str, param: &str) -> Result<i64> {
    onceclick_tests::db::open_d1_in(persist)
        .query_row(sql, [param], |r| r.get(0))
        .with_context(|| format!("{sql} on the D1 file"))
}
