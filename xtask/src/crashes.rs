//! The crash suite: `kill -9` of `wrangler dev` and workerd at random moments while
//! jobs dispatch, 20 times, each time restarted on the same persisted local D1, with the
//! reconciler let run. Then nothing may be lost or doubled:
//!
//! - every job that was answered `201` still exists;
//! - no job has two winners, and a winner is its job's `completed_by`;
//! - no attempt made a second provider call (the mock counts calls by `Idempotency-Key`);
//! - no attempt is left `starting` or `running` once the reconciler has run: each is
//!   final, or `unknown` (its dispatcher died after it may have called the provider).
//!
//! Sharded, a create's dispatch is handed on by its shard's alarm, scheduled in the
//! create's transaction (`core/src/handoff.rs`), so the reconciler's lost-dispatch sweep
//! is held back (an hour): an attempt a kill left `starting` is dispatched by the
//! alarm of the shard's next instance, or it is still `starting` at the end and the
//! suite fails.
//!
//! It lives in xtask because it owns the Worker's processes. Its figures go to
//! `target/reliability/crashes.json` like the other suites'.

use crate::test_worker::{base_vars, Scratch, StoreKind};
use crate::tools::Tools;
use crate::wrangler::{self, DevOptions, Wrangler};
use anyhow::{Context, Result};
use onceclick_tests::client::{send, unique, Api, Mock, Reply};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Crashes per run (20 until issue 49, when CI had to come back under 45 minutes).
pub(crate) const CRASHES: usize = 16;
/// Jobs created in each life of the Worker before it is killed.
const JOBS_PER_LIFE: usize = 8;
/// The provider timeout of the crash Worker: short, so lost dispatchers are found fast.
const TIMEOUT_MS: u64 = 1500;

/// xorshift64*, seeded from the clock (printed), for where the crashes fall.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

fn start(
    tools: &Tools,
    root: &Path,
    persist: &Path,
    vars: &[(String, String)],
    life: &str,
) -> Result<Wrangler> {
    let port = wrangler::free_port()?;
    Wrangler::start(
        tools,
        DevOptions {
            port,
            persist: persist.to_path_buf(),
            vars: vars.to_vec(),
            log: Some(root.join(format!("target/xtask/crash-wrangler-{life}.log"))),
            config: None,
            log_level: None,
        },
    )
}

/// One run of the suite; writes its figures and fails on any violation.
pub(crate) fn run(tools: &Tools, root: &Path, reports: &Path, store: StoreKind) -> Result<()> {
    let started = Instant::now();
    let suite = CrashSuite::new(tools, root, store)?;
    let seed = clock_seed();
    eprintln!(
        "xtask: crash suite on {}: {CRASHES} crashes (seed {seed})",
        store.name()
    );
    let lives = suite.crash_then_settle(&mut Rng(seed))?;
    // The checks, on the file itself, and on the calls the mock saw.
    let found = Found::in_file(&suite.persist, &lives.created)?;
    let calls = suite.runtime.block_on(suite.mock.calls(&suite.marker));
    judge(reports, seed, &lives, &found, &calls, started)
}

/// What every life of the Worker shares: its store, its mock provider, its vars, and
/// the owner and marker of the suite's jobs.
struct CrashSuite<'a> {
    tools: &'a Tools,
    root: &'a Path,
    store: StoreKind,
    persist: PathBuf,
    secret: String,
    mock: Mock,
    vars: Vec<(String, String)>,
    runtime: tokio::runtime::Runtime,
    token_owner: String,
    marker: String,
}

impl<'a> CrashSuite<'a> {
    fn new(tools: &'a Tools, root: &'a Path, store: StoreKind) -> Result<Self> {
        let Scratch {
            persist,
            secret,
            mock_port,
            mock,
        } = Scratch::new(
            tools,
            root.join(format!("target/xtask/crash-{}", store.name())),
        )?;
        let vars = crash_vars(store, &secret, mock_port);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        Ok(Self {
            tools,
            root,
            store,
            persist,
            secret,
            mock,
            vars,
            runtime,
            token_owner: unique("crash-owner"),
            marker: unique("crash"),
        })
    }

    /// [`CRASHES`] lives, each killed at a random moment while its jobs dispatch, then
    /// one more that is not killed and lets the reconciler clean up after the others.
    fn crash_then_settle(&self, rng: &mut Rng) -> Result<Lives> {
        let mut lives = Lives::default();
        for life in 0..=CRASHES {
            let worker = start(
                self.tools,
                self.root,
                &self.persist,
                &self.vars,
                &format!("{}-{life}", self.store.name()),
            )?;
            let api = Api::at(&worker.url, &self.secret);
            let token = api.token(&self.token_owner);
            if life == CRASHES {
                // The last life: no crash; the reconciler cleans up after the others.
                self.runtime
                    .block_on(settle(&api, &self.persist, &lives.created))?;
                drop(worker);
                break;
            }
            let lifetime = Duration::from_millis(rng.below(1800));
            let jobs: Vec<(String, u64)> = (0..JOBS_PER_LIFE)
                .map(|i| (format!("{} life {life} job {i}", self.marker), rng.below(5)))
                .collect();
            let made = self.runtime.block_on(send_until_the_kill(
                &self.mock, &api, &token, &jobs, lifetime,
            ));
            lives.count_the_kill(&self.persist);
            lives.requests += jobs.len();
            lives.created.extend(
                made.iter()
                    .filter(|r| r.status == 201)
                    .filter_map(|r| r.json()["id"].as_str().map(str::to_owned)),
            );
            worker.crash();
        }
        Ok(lives)
    }
}

/// Writes the figures to `reports/crashes.json`, then fails on any violation, or on a
/// run whose kills missed the work.
fn judge(
    reports: &Path,
    seed: u64,
    lives: &Lives,
    found: &Found,
    calls: &[Value],
    started: Instant,
) -> Result<()> {
    let second_calls = second_calls(calls);
    let violations = found.violations(second_calls);
    let figures = Figures {
        seed,
        lives,
        found,
        provider_calls: calls.len(),
        second_calls,
        violations,
        started,
    }
    .to_json();
    std::fs::create_dir_all(reports)?;
    std::fs::write(
        reports.join("crashes.json"),
        serde_json::to_string_pretty(&figures)?,
    )?;
    anyhow::ensure!(
        violations == 0,
        "the crash suite found violations: {figures}"
    );
    // A suite whose kills all land on an idle Worker proves nothing.
    let kills_mid_dispatch = lives.kills_mid_dispatch;
    anyhow::ensure!(
        kills_mid_dispatch >= CRASHES / 2,
        "only {kills_mid_dispatch} of {CRASHES} kills landed while work was in flight: {figures}"
    );
    // Nor one whose kills never cut a stream.
    anyhow::ensure!(
        !lives.streams_cut.is_empty(),
        "no kill landed while an answer streamed: {figures}"
    );
    Ok(())
}

/// The crash Worker's vars: quick to find a lost dispatch (on D1; sharded, the
/// reconciler's sweep is held back an hour, see above), quick to find a dead
/// dispatcher.
fn crash_vars(store: StoreKind, secret: &str, mock_port: u16) -> Vec<(String, String)> {
    let mut vars = base_vars(secret, mock_port, TIMEOUT_MS, None, false);
    let starting_after = match store {
        StoreKind::Durable => "3600000",
        StoreKind::D1 => "1000",
    };
    vars.extend([
        ("RECONCILE_STARTING_AFTER_MS".into(), starting_after.into()),
        ("RECONCILE_LOST_GRACE_MS".into(), "1000".into()),
    ]);
    // Sharded, nothing but the shards' own alarms reconciles (the cron has nothing to
    // do): every second here, so that `settle` sees them finish the work.
    vars.extend(
        store
            .vars()
            .into_iter()
            .filter(|(name, _)| name != "RECONCILE_EVERY_MS"),
    );
    if store == StoreKind::Durable {
        vars.push(("RECONCILE_EVERY_MS".into(), "1000".into()));
    }
    vars
}

/// The seed of where the crashes fall: the clock's nanoseconds, odd.
fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(7)
        | 1
}

/// Scripts and sends one life's `jobs` (text, kind), and gathers the answers that
/// arrive before the kill, `lifetime` from now; the rest are cut off. Jobs whose
/// provider answers at once, after a while, or never in time, or streams its answer
/// for about 2 s (the fallback), so that kills land mid-stream.
async fn send_until_the_kill(
    mock: &Mock,
    api: &Api,
    token: &str,
    jobs: &[(String, u64)],
    lifetime: Duration,
) -> Vec<Reply> {
    for (text, kind) in jobs {
        let (provider, step) = match kind {
            0 => ("primary", json!([{}])),
            1 => ("primary", json!([{"delay_ms": 400}])),
            2 => ("primary", json!([{"status": 500}])),
            3 => ("primary", json!([{"delay_ms": 5000}])),
            _ => ("fallback", json!([{"chunk_chars": 2, "chunk_ms": 60}])),
        };
        mock.script(provider, text, step).await;
    }
    let mut sends: futures::stream::FuturesUnordered<_> = jobs
        .iter()
        .map(|(text, kind)| {
            let mut body =
                json!({"kind": "summarize", "input": {"text": format!("{text}: crash me.")}});
            if *kind == 4 {
                body["provider"] = json!("fallback");
            }
            send(api.create(token, Some(&unique("crash-key")), &body.to_string()))
        })
        .collect();
    let crash_at = tokio::time::sleep(lifetime);
    tokio::pin!(crash_at);
    let mut replies = Vec::new();
    loop {
        tokio::select! {
            Some(reply) = futures::StreamExt::next(&mut sends) => replies.push(reply),
            () = &mut crash_at => break,
        }
    }
    replies
}

/// What the lives of the Worker did, counted as they went.
#[derive(Default)]
struct Lives {
    /// Creates sent.
    requests: usize,
    /// The jobs answered `201`.
    created: Vec<String>,
    /// Kills that fell while an attempt was `starting` or `running`.
    kills_mid_dispatch: usize,
    /// Streamed calls running when a kill came.
    streams_cut: HashSet<String>,
    /// Attempts `starting` (committed, not yet claimed) when a kill fell, summed: some
    /// had their message sent already, the others only the shard's rows and alarm can
    /// dispatch once the reconciler's sweep is held back.
    starting_at_kills: i64,
}

impl Lives {
    /// Reads what the kill about to fall cuts off, from the file.
    fn count_the_kill(&mut self, persist: &Path) {
        // What the kill cuts off: attempts not yet settled in the file.
        let in_flight: i64 = onceclick_tests::db::open_in(persist)
            .query_row(
                "SELECT count(*) FROM attempts WHERE state IN ('starting', 'running')",
                [],
                |r| r.get(0),
            )
            .unwrap_or(0);
        if in_flight > 0 {
            self.kills_mid_dispatch += 1;
        }
        // A streamed call running when the kill came: its dispatcher is lost mid-stream
        // (each attempt counted once, though it may stay `running` over several lives).
        if let Ok(mut running) = onceclick_tests::db::open_in(persist)
            .prepare("SELECT id FROM attempts WHERE state = 'running' AND provider = 'fallback'")
        {
            if let Ok(ids) = running.query_map([], |r| r.get::<_, String>(0)) {
                self.streams_cut.extend(ids.flatten());
            }
        }
        self.starting_at_kills += onceclick_tests::db::open_in(persist)
            .query_row(
                "SELECT count(*) FROM attempts WHERE state = 'starting'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .unwrap_or(0);
    }
}

/// What the file says once the last life has settled.
struct Found {
    /// Jobs answered `201` that are not in the file.
    lost: usize,
    /// Jobs with more than one succeeded attempt.
    two_winners: i64,
    /// Jobs whose `completed_by` is no succeeded attempt.
    bad_winner: i64,
    /// Attempts still `starting` or `running`.
    stranded: i64,
    attempts: i64,
    /// `unknown` attempts, by cause.
    timed_out: i64,
    dispatcher_lost: i64,
    /// Jobs not final whose status is not what their attempts roll up to.
    bad_rollup: i64,
}

impl Found {
    fn in_file(persist: &Path, created: &[String]) -> Result<Self> {
        let conn = onceclick_tests::db::open_in(persist);
        let exists = |id: &str| -> bool {
            conn.query_row("SELECT count(*) FROM jobs WHERE id = ?1", [id], |r| {
                r.get::<_, i64>(0)
            })
            .map(|n| n == 1)
            .unwrap_or(false)
        };
        let lost = created.iter().filter(|id| !exists(id)).count();
        let two_winners: i64 = conn.query_row(
            "SELECT count(*) FROM (SELECT job_id FROM attempts WHERE state = 'succeeded'
               GROUP BY job_id HAVING count(*) > 1)",
            [],
            |r| r.get(0),
        )?;
        let bad_winner: i64 = conn.query_row(
            "SELECT count(*) FROM jobs j WHERE j.completed_by IS NOT NULL
               AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.id = j.completed_by AND a.state = 'succeeded')",
            [],
            |r| r.get(0),
        )?;
        let stranded: i64 = conn.query_row(
            "SELECT count(*) FROM attempts WHERE state IN ('starting', 'running')",
            [],
            |r| r.get(0),
        )?;
        let attempts: i64 = conn.query_row("SELECT count(*) FROM attempts", [], |r| r.get(0))?;
        let unknown_by_cause = |code: &str| -> i64 {
            conn.query_row(
                "SELECT count(*) FROM attempts WHERE state = 'unknown' AND json_extract(error, '$.code') = ?1",
                [code],
                |r| r.get(0),
            )
            .unwrap_or(0)
        };
        Ok(Found {
            lost,
            two_winners,
            bad_winner,
            stranded,
            attempts,
            timed_out: unknown_by_cause("provider_timeout"),
            dispatcher_lost: unknown_by_cause("dispatcher_lost"),
            bad_rollup: wrong_rollups(&conn)?,
        })
    }
}

/// A job that is not final has the status its attempts roll up to: the jobs that do
/// not.
fn wrong_rollups(conn: &rusqlite::Connection) -> Result<i64> {
    let mut stmt =
        conn.prepare("SELECT id, status FROM jobs WHERE status NOT IN ('succeeded', 'cancelled')")?;
    let open_jobs: Vec<(String, String)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    drop(stmt);
    let mut bad_rollup = 0i64;
    for (job, status) in &open_jobs {
        let mut stmt = conn.prepare("SELECT state FROM attempts WHERE job_id = ?1")?;
        let states: Vec<onceclick_protocol::AttemptState> = stmt
            .query_map([job], |r| r.get::<_, String>(0))?
            .filter_map(|s| onceclick_protocol::AttemptState::from_wire(&s.ok()?))
            .collect();
        if onceclick_protocol::JobStatus::rollup(&states).as_str() != status {
            bad_rollup += 1;
        }
    }
    Ok(bad_rollup)
}

impl Found {
    /// Every broken promise, with the attempts that called their provider twice.
    fn violations(&self, second_calls: usize) -> i64 {
        self.lost as i64
            + self.two_winners
            + self.bad_winner
            + self.stranded
            + second_calls as i64
            + self.bad_rollup
    }
}

/// The attempts the mock saw called more than once (calls counted by `Idempotency-Key`).
fn second_calls(calls: &[Value]) -> usize {
    let mut per_key: HashMap<String, usize> = HashMap::new();
    for call in calls {
        if let Some(key) = call["idempotency_key"].as_str() {
            *per_key.entry(key.to_owned()).or_default() += 1;
        }
    }
    per_key.values().filter(|n| **n > 1).count()
}

/// What the suite writes to `crashes.json`.
struct Figures<'a> {
    seed: u64,
    lives: &'a Lives,
    found: &'a Found,
    provider_calls: usize,
    second_calls: usize,
    violations: i64,
    started: Instant,
}

impl Figures<'_> {
    fn to_json(&self) -> Value {
        let (lives, found) = (self.lives, self.found);
        json!({
            "crashes": CRASHES, "kills_mid_dispatch": lives.kills_mid_dispatch, "seed": self.seed,
            "streams_cut_by_kills": lives.streams_cut.len(),
            "starting_at_kills": lives.starting_at_kills,
            "requests": lives.requests, "jobs_created": lives.created.len(), "attempts": found.attempts,
            "provider_calls": self.provider_calls, "unknown_timed_out": found.timed_out,
            "unknown_dispatcher_lost": found.dispatcher_lost, "jobs_lost": found.lost,
            "two_winners": found.two_winners + found.bad_winner, "second_provider_calls": self.second_calls,
            "stranded_attempts": found.stranded, "wrong_rollups": found.bad_rollup,
            "violations": self.violations, "seconds": self.started.elapsed().as_secs_f64(),
        })
    }
}

/// Runs the reconciler until no attempt is `starting` or `running` (at most 60 s): lost
/// dispatches are sent again, dead dispatchers are found. Sharded, the cron does nothing
/// and the shards' alarms do the same work on their own.
async fn settle(api: &Api, persist: &Path, created: &[String]) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        api.run_cron().await;
        let open: i64 = onceclick_tests::db::open_in(persist)
            .query_row(
                "SELECT count(*) FROM attempts WHERE state IN ('starting', 'running')",
                [],
                |r| r.get(0),
            )
            .context("reading the crash D1")?;
        if open == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            eprintln!(
                "xtask: crash suite: {open} attempts still open after 60 s of reconciling ({} jobs)",
                created.len()
            );
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
