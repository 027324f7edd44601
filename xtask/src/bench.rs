//! `cargo xtask bench`: onceclick against a baseline Worker, side by side in one run.
//!
//! Both Workers are built with worker-build on the same profile and pins, and served by
//! `wrangler dev --log-level error` on loopback: the baseline (`bench/baseline`: "ok"
//! with no D1, and one bare `INSERT` into a table shaped like `jobs`), onceclick on an
//! empty D1, and onceclick on a D1 seeded with 1,000,000 jobs. The load comes from
//! `cargo xtask load` (`load.rs`), a separate process with 16 kept-alive connections.
//! Every workload runs once per round; the second round runs them in reverse order, and
//! each ratio is taken inside one round, since the machine is shared and noisy.
//!
//! The figures, each beside its target, go to `BENCHMARKS.md` and `bench/results.json`.
//! `cargo xtask test` runs [`SHORT`] (no 1M seed, no sizes, no report) and prints its
//! ratios.

use crate::bench_jobs::{create_job, without_consumer};
use crate::load::{self, Outcome, Spec};
use crate::test_worker::{Launch, StoreKind, TestWorker};
use crate::tools::{self, Tools};
use crate::wrangler::{self, DevOptions, Wrangler, BASELINE, EDGE};
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Open connections of every workload.
const CONNECTIONS: usize = 16;

/// How much of the bench to run.
pub(crate) struct Plan {
    rounds: usize,
    warmup_ms: u64,
    measured_ms: u64,
    /// Jobs created for the end-to-end figure.
    e2e_jobs: usize,
    /// Seed a second D1 with this many jobs and measure create on it (0: skip).
    seeded_jobs: usize,
    /// The whole report: sizes and the wasm start, the dispatch's round trips, the
    /// SDK's cost, and BENCHMARKS.md with bench/results.json. `cargo xtask test` checks
    /// the sizes and the round trips itself, so its short run skips them.
    report: bool,
}

/// `cargo xtask bench`.
pub(crate) const FULL: Plan = Plan {
    rounds: 2,
    warmup_ms: 1000,
    measured_ms: 4000,
    e2e_jobs: 1000,
    seeded_jobs: 1_000_000,
    report: true,
};

/// The short run in `cargo xtask test`: about 20 seconds of load; ratios printed only.
pub(crate) const SHORT: Plan = Plan {
    rounds: 1,
    warmup_ms: 400,
    measured_ms: 2000,
    e2e_jobs: 200,
    seeded_jobs: 0,
    report: false,
};

/// The request body of every create (and of the baseline's insert).
const BODY: &str = r#"{"kind":"summarize","input":{"text":"A benchmark sentence that is long enough to summarize."}}"#;

/// The workloads, in the order of the first round.
const WORKLOADS: [&str; 8] = [
    "ok",
    "insert",
    "create",
    "replay",
    "read_304",
    "create_one",
    "create_1m",
    "create_dispatched",
];

/// Targets: (figure, comparison, bound). Ratios are per round; sizes are bytes.
const TARGETS: [(&str, &str, f64); 7] = [
    ("create / insert", ">=", 0.8),
    ("replay / create", ">=", 1.2),
    ("read_304 / ok", ">=", 0.6),
    ("create_1m p50 / create_one p50", "<=", 1.2),
    (
        "round trips (create, replay, read_304, completion)",
        "==",
        1.0,
    ),
    ("worker gzip bytes", "<=", 400.0 * 1024.0),
    ("sdk gzip bytes", "<=", 40.0 * 1024.0),
];

/// The servers of one bench run; stopped when dropped.
struct Servers {
    baseline: Wrangler,
    /// onceclick with no queue consumer: the request path alone (what a create leaves
    /// for the dispatcher waits in the local queue).
    onceclick: TestWorker,
    /// The same on a D1 seeded with `plan.seeded_jobs` jobs.
    seeded: Option<TestWorker>,
    /// onceclick as deployed, its consumer dispatching: for the end-to-end figures.
    dispatching: TestWorker,
    token: String,
    /// The seeded Worker has its own secret, and so has the dispatching one.
    seeded_token: String,
    dispatching_token: String,
    job_path: String,
    etag: String,
}

pub(crate) fn run(tools: &Tools, plan: &Plan) -> Result<Value> {
    let root = tools.root.clone();
    let started = Instant::now();
    wrangler::build(tools, &EDGE)?;
    wrangler::build(tools, &BASELINE)?;
    let built = started.elapsed();
    let started = Instant::now();

    let sizes = if plan.report {
        sizes(tools)?
    } else {
        Value::Null
    };
    let seed = match plan.seeded_jobs {
        0 => None,
        n => Some(seed_template(tools, &root, n)?),
    };
    let servers = start(tools, &root, seed.as_deref())?;

    let mut rounds: Vec<BTreeMap<&str, Outcome>> = Vec::new();
    for round in 0..plan.rounds {
        let mut order: Vec<&str> = WORKLOADS.to_vec();
        if round % 2 == 1 {
            order.reverse();
        }
        let mut outcomes = BTreeMap::new();
        for name in order {
            let (Some(spec), Some((server, _))) =
                (spec(&servers, plan, name, round), servers.target(name))
            else {
                continue;
            };
            let cpu_before = server.cpu_time();
            let mut outcome = load::spawn(&spec)?;
            if outcome.requests == 0 || !outcome.unexpected.is_empty() {
                bail!(
                    "workload {name}: {} requests, unexpected answers {:?}, the first: {}",
                    outcome.requests,
                    outcome.unexpected,
                    outcome.first_unexpected.as_deref().unwrap_or("")
                );
            }
            eprintln!(
                "xtask: bench round {round} {name}: {:.0} req/s, p50 {:.2} ms, p99 {:.2} ms",
                outcome.rate, outcome.p50_ms, outcome.p99_ms
            );
            if name == "create_dispatched" {
                // The dispatches it enqueued are part of its cost, and must not run
                // into the next workload.
                drain(&servers.dispatching)?;
            }
            outcome.cpu_ms_per_request =
                (server.cpu_time() - cpu_before).as_secs_f64() * 1e3 / outcome.issued.max(1) as f64;
            outcomes.insert(name, outcome);
        }
        rounds.push(outcomes);
    }
    let e2e = end_to_end(&servers, plan)?;
    let cost = if plan.report {
        job_cost(tools, &root)?
    } else {
        Value::Null
    };
    drop(servers);

    let mut results = results(&rounds, &e2e, &cost, &sizes, plan, started.elapsed(), built);
    if plan.report {
        // Needs Chromium: without it the rest of the report still stands.
        results["sdk_submit"] =
            crate::sdk::submit_cost(tools).unwrap_or_else(|e| json!({"error": format!("{e:#}")}));
    }
    if plan.report {
        results["live"] = crate::bench_live::run(tools)?;
    }
    results["date"] = json!(today());
    results["analysis"] =
        json!(std::fs::read_to_string(root.join("bench/ANALYSIS.md")).unwrap_or_default());
    print(&results);
    if plan.report {
        let json_path = root.join("bench/results.json");
        std::fs::write(&json_path, serde_json::to_string_pretty(&results)? + "\n")?;
        std::fs::write(
            root.join("BENCHMARKS.md"),
            crate::bench_report::render(&results),
        )?;
        eprintln!(
            "xtask: wrote BENCHMARKS.md and {} ({:.0} s of bench, {:.0} s of builds)",
            json_path.display(),
            started.elapsed().as_secs_f64(),
            built.as_secs_f64()
        );
    }
    Ok(results)
}

/// `cargo xtask bench --live`: the live stream's figures alone, put into the last full
/// run's bench/results.json, and BENCHMARKS.md rendered again from it.
pub(crate) fn live_only(tools: &Tools) -> Result<()> {
    let live = crate::bench_live::run(tools)?;
    rewrite(&tools.root, |results| {
        results["live"] = live;
        results["live"]["date"] = json!(today());
    })
}

/// `cargo xtask bench --render`: BENCHMARKS.md again, from the last run's figures and
/// the current bench/ANALYSIS.md.
pub(crate) fn render_only(root: &Path) -> Result<()> {
    rewrite(root, |_| {})
}

/// Reads bench/results.json, changes it with `change`, takes bench/ANALYSIS.md as it is
/// now, and writes both it and BENCHMARKS.md.
fn rewrite(root: &Path, change: impl FnOnce(&mut Value)) -> Result<()> {
    let path = root.join("bench/results.json");
    let mut results: Value = serde_json::from_str(
        &std::fs::read_to_string(&path)
            .context("bench/results.json: run `cargo xtask bench` once")?,
    )?;
    change(&mut results);
    results["analysis"] =
        json!(std::fs::read_to_string(root.join("bench/ANALYSIS.md")).unwrap_or_default());
    std::fs::write(&path, serde_json::to_string_pretty(&results)? + "\n")?;
    std::fs::write(
        root.join("BENCHMARKS.md"),
        crate::bench_report::render(&results),
    )?;
    eprintln!("xtask: wrote {} and BENCHMARKS.md", path.display());
    Ok(())
}

fn start(tools: &Tools, root: &Path, seed: Option<&Path>) -> Result<Servers> {
    let no_consumer = without_consumer(root)?;
    let launch = |persist_from, config: Option<&PathBuf>| Launch {
        store: StoreKind::D1,
        extra_vars: Vec::new(),
        log_level: Some("error"),
        test_vars: false,
        persist_from,
        config: config.cloned(),
        provider_timeout_ms: crate::test_worker::TEST_TIMEOUT_MS,
        primary_streams: false,
    };
    let onceclick = TestWorker::launch(tools, root, &launch(None, Some(&no_consumer)))?;
    let seeded = match seed {
        Some(dir) => Some(TestWorker::launch(
            tools,
            root,
            &launch(Some(dir), Some(&no_consumer)),
        )?),
        None => None,
    };
    let unlimited = wrangler::unlimited_config(root)?;
    let dispatching = TestWorker::launch(tools, root, &launch(None, Some(&unlimited)))?;
    let baseline = start_baseline(tools, root)?;

    // One job to replay and to read. Nothing dispatches it, so its ETag holds.
    let token = onceclick_tests::auth::mint(&onceclick.secret, "bench", false, 3600)?;
    let job = one_job(&onceclick.server.url, &token)?;
    let seeded_token = match &seeded {
        Some(w) => onceclick_tests::auth::mint(&w.secret, "bench", false, 3600)?,
        None => String::new(),
    };
    let dispatching_token = onceclick_tests::auth::mint(&dispatching.secret, "bench", false, 3600)?;
    Ok(Servers {
        baseline,
        onceclick,
        seeded,
        dispatching,
        token,
        seeded_token,
        dispatching_token,
        job_path: format!("/v1/jobs/{}", job.0),
        etag: job.1,
    })
}

/// The baseline Worker (`bench/baseline`) under `wrangler dev`, on a fresh persisted D1
/// with its migration applied.
pub(crate) fn start_baseline(tools: &Tools, root: &Path) -> Result<Wrangler> {
    let config = root.join("bench/baseline/wrangler.toml");
    let port = wrangler::free_port()?;
    let persist = root.join(format!("target/xtask/bench-baseline-{port}"));
    let _ = std::fs::remove_dir_all(&persist);
    wrangler::migrate_with(tools, Some(&config), &persist, true)?;
    Wrangler::start(
        tools,
        DevOptions {
            port,
            persist,
            vars: Vec::new(),
            log: Some(root.join(format!("target/xtask/bench-baseline-{port}.log"))),
            config: Some(config),
            log_level: Some("error"),
        },
    )
}

/// Creates the job that replay and read use: its id and ETag.
pub(crate) fn one_job(url: &str, token: &str) -> Result<(String, String)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(create_job(
        &reqwest::Client::new(),
        url,
        token,
        "bench-seed",
        BODY.to_owned(),
    ))
}

impl Servers {
    /// The server that workload `name` loads and the bearer token it takes (none for
    /// the baseline); `None` when that server is not running in this plan.
    fn target(&self, name: &str) -> Option<(&Wrangler, &str)> {
        Some(match name {
            "ok" | "insert" => (&self.baseline, ""),
            "create_1m" => (&self.seeded.as_ref()?.server, self.seeded_token.as_str()),
            "create_dispatched" => (&self.dispatching.server, self.dispatching_token.as_str()),
            _ => (&self.onceclick.server, self.token.as_str()),
        })
    }
}

/// The load of workload `name` in `round`; `None` when its server is not running.
fn spec(servers: &Servers, plan: &Plan, name: &str, round: usize) -> Option<Spec> {
    let (server, token) = servers.target(name)?;
    let mut headers = Vec::new();
    if !token.is_empty() {
        headers.push(("authorization".to_owned(), format!("Bearer {token}")));
    }
    let nonce = tools::random_secret().unwrap_or_default();
    let nonce = &nonce[..8.min(nonce.len())];
    // A create with a fresh key each time; every workload is a variation of it.
    let create = Spec {
        addr: server.url.trim_start_matches("http://").to_owned(),
        method: "POST".into(),
        path: "/v1/jobs".into(),
        headers,
        body: BODY.into(),
        fresh_key: Some(format!("bench-{nonce}-{round}")),
        expect: 201,
        connections: CONNECTIONS,
        warmup_ms: plan.warmup_ms,
        duration_ms: plan.measured_ms,
        total: None,
    };
    Some(match name {
        "ok" => Spec {
            method: "GET".into(),
            path: "/ok".into(),
            body: String::new(),
            fresh_key: None,
            expect: 200,
            ..create
        },
        "insert" => Spec {
            path: "/insert".into(),
            ..create
        },
        "create" | "create_dispatched" => create,
        "replay" => Spec {
            headers: [
                create.headers.clone(),
                vec![("idempotency-key".into(), "bench-seed".into())],
            ]
            .concat(),
            fresh_key: None,
            expect: 200,
            ..create
        },
        "read_304" => Spec {
            method: "GET".into(),
            path: servers.job_path.clone(),
            headers: [
                create.headers.clone(),
                vec![("if-none-match".into(), servers.etag.clone())],
            ]
            .concat(),
            body: String::new(),
            fresh_key: None,
            expect: 304,
            ..create
        },
        // One connection, so that p50 is the time one create takes, not a queue's.
        "create_one" | "create_1m" => Spec {
            connections: 1,
            ..create
        },
        _ => return None,
    })
}

/// Waits until no job of `worker` is queued or running (at most a minute).
pub(crate) fn drain(worker: &TestWorker) -> Result<()> {
    let db = onceclick_tests::db::open_in(&worker.persist);
    let by = Instant::now() + Duration::from_secs(60);
    loop {
        let open: i64 = db.query_row(
            "SELECT count(*) FROM jobs WHERE status IN ('queued', 'running')",
            [],
            |r| r.get(0),
        )?;
        if open == 0 {
            return Ok(());
        }
        if Instant::now() > by {
            bail!("{open} jobs were still queued or running a minute after the workload");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Create → dispatch → provider → succeeded, for `plan.e2e_jobs` new jobs at once.
fn end_to_end(servers: &Servers, plan: &Plan) -> Result<Value> {
    let worker = &servers.dispatching;
    let prefix = format!("e2e-{}", &tools::random_secret()?[..8]);
    let spec = Spec {
        fresh_key: Some(prefix.clone()),
        total: Some(plan.e2e_jobs),
        duration_ms: 60_000,
        warmup_ms: 0,
        ..spec(servers, plan, "create_dispatched", 0).context("the create workload")?
    };
    // The pages the database uses (its size less its free pages), before and after.
    let used = || -> Result<i64> {
        let db = onceclick_tests::db::open_in(&worker.persist);
        Ok(db.query_row(
            "SELECT (page_count - freelist_count) * page_size
               FROM pragma_page_count, pragma_freelist_count, pragma_page_size",
            [],
            |r| r.get(0),
        )?)
    };
    let bytes_before = used()?;
    let cpu_before = worker.server.cpu_time();
    let created = load::spawn(&spec)?;
    if created.requests != plan.e2e_jobs || !created.unexpected.is_empty() {
        bail!("end to end: {created:?}");
    }
    drain(worker)?;
    let cpu_ms_per_job =
        (worker.server.cpu_time() - cpu_before).as_secs_f64() * 1e3 / plan.e2e_jobs as f64;
    let bytes_per_job = (used()? - bytes_before) as f64 / plan.e2e_jobs as f64;
    let db = onceclick_tests::db::open_in(&worker.persist);
    let like = format!("{prefix}-%");
    let (succeeded, span_s): (i64, f64) = db.query_row(
        "SELECT count(*), (julianday(max(updated_at)) - julianday(min(created_at))) * 86400.0
           FROM jobs WHERE owner_id = 'bench' AND idempotency_key LIKE ?1 AND status = 'succeeded'",
        [&like],
        |r| Ok((r.get(0)?, r.get::<_, Option<f64>>(1)?.unwrap_or(0.0))),
    )?;
    if succeeded != plan.e2e_jobs as i64 {
        bail!(
            "end to end: {succeeded} of {} jobs succeeded",
            plan.e2e_jobs
        );
    }
    // Claim to compare-and-swap, by the database's clock (the mock answers at once).
    let mut statement = db.prepare(
        "SELECT (julianday(a.finished_at) - julianday(a.dispatched_at)) * 86400000.0,
                julianday(a.finished_at) * 86400.0
           FROM attempts a JOIN jobs j ON j.id = a.job_id
          WHERE j.owner_id = 'bench' AND j.idempotency_key LIKE ?1 AND a.state = 'succeeded'",
    )?;
    let rows = statement.query_map([&like], |r| Ok((r.get::<_, f64>(0)?, r.get::<_, f64>(1)?)))?;
    let rows: Vec<(f64, f64)> = rows.collect::<rusqlite::Result<_>>()?;
    let mut ms: Vec<Duration> = rows
        .iter()
        .map(|(m, _)| Duration::from_secs_f64(m.max(0.0) / 1e3))
        .collect();
    ms.sort();
    let first = rows.iter().map(|r| r.1).fold(f64::INFINITY, f64::min);
    let last = rows.iter().map(|r| r.1).fold(f64::NEG_INFINITY, f64::max);
    Ok(json!({
        "jobs": succeeded,
        "jobs_per_s": succeeded as f64 / span_s.max(1e-3),
        "create_rate": created.rate,
        "cpu_ms_per_job": cpu_ms_per_job,
        "stored_bytes_per_job": bytes_per_job,
        "completion_per_s": rows.len() as f64 / (last - first).max(1e-3),
        "completion_p50_ms": load::percentile(&ms, 0.5),
        "completion_p99_ms": load::percentile(&ms, 0.99),
    }))
}

/// What one job that succeeds at once costs the store, on D1 and on a shard: round trips
/// and rows written and read per step, from `Server-Timing` and the `dispatched` line the
/// consumer logs (which `--log-level error` hides): a short-lived Worker per store at
/// the default log level, one job each; and one stop, timed (`probe::stop`, with the
/// test Worker's `CANCEL_POLL_MS`). `{"d1": probe, "durable": probe}`.
fn job_cost(tools: &Tools, root: &Path) -> Result<Value> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut out = serde_json::Map::new();
    for (name, store) in [("d1", StoreKind::D1), ("durable", StoreKind::Durable)] {
        let worker = TestWorker::start(tools, root, store)?;
        let probe = runtime.block_on(onceclick_tests::probe::probe(
            &worker.server.url,
            &worker.secret,
            &worker.log,
        ))?;
        let mock = mock_of(&worker);
        let [stops, streamed_stops] = stops(&runtime, &worker, &mock)?;
        let paths = runtime.block_on(onceclick_tests::probe::paths(
            &worker.server.url,
            &worker.secret,
            &mock,
            &worker.log,
        ))?;
        let purge = runtime.block_on(onceclick_tests::probe::purge(
            &worker.server.url,
            &worker.secret,
            &worker.log,
            &worker.persist,
            20,
        ))?;
        let streamed = streamed(&runtime, &worker, &mock)?;
        let mut value = serde_json::to_value(probe)?;
        value["streamed"] = streamed;
        value["stops"] = stops;
        value["streamed_stops"] = streamed_stops;
        value["paths"] = serde_json::to_value(&paths)?;
        value["purge"] = serde_json::to_value(purge)?;
        out.insert(name.to_owned(), value);
    }
    Ok(Value::Object(out))
}

/// The mock provider of `worker`.
fn mock_of(worker: &TestWorker) -> onceclick_tests::client::Mock {
    onceclick_tests::client::Mock {
        base: format!("http://127.0.0.1:{}", worker.mock_port),
        http: reqwest::Client::new(),
    }
}

/// The cost per job whose answer streams, beside the same job answered whole (the test
/// Worker's primary does not stream, its fallback does), each with the server's CPU
/// over its run (`probe::streamed`).
fn streamed(
    runtime: &tokio::runtime::Runtime,
    worker: &TestWorker,
    mock: &onceclick_tests::client::Mock,
) -> Result<Value> {
    // Certified first: its calls are no streamed job's CPU.
    runtime.block_on(onceclick_tests::probe::certify(
        &worker.server.url,
        &worker.secret,
        "fallback",
    ));
    let mut out = Vec::new();
    for (provider, chars, jobs) in [
        ("primary", 400, 8),
        ("fallback", 400, 8),
        ("fallback", 2048, 6),
    ] {
        let cpu = worker.server.cpu_time();
        let cost = runtime.block_on(onceclick_tests::probe::streamed(
            &worker.server.url,
            &worker.secret,
            mock,
            &worker.log,
            provider,
            chars,
            jobs,
        ))?;
        let mut cost = serde_json::to_value(cost)?;
        cost["cpu_ms_per_job"] =
            json!((worker.server.cpu_time() - cpu).as_secs_f64() * 1e3 / jobs as f64);
        out.push(cost);
    }
    Ok(Value::Array(out))
}

/// `cargo xtask bench --streamed`: the cost per streamed job alone, on each store, put
/// into the last full run's bench/results.json, and BENCHMARKS.md rendered again.
pub(crate) fn streamed_only(tools: &Tools) -> Result<()> {
    measure_only(tools, streamed, |results, measured| {
        for (name, streamed) in measured {
            results["job_cost"][name]["streamed"] = streamed;
        }
        results["job_cost"]["streamed_date"] = json!(today());
    })
}

/// One part of the job cost alone: `measure` on a fresh test Worker of each store, then
/// `put` of what it measured (by store name) into the last full run's
/// bench/results.json, and BENCHMARKS.md rendered again from it.
fn measure_only<T>(
    tools: &Tools,
    measure: impl Fn(&tokio::runtime::Runtime, &TestWorker, &onceclick_tests::client::Mock) -> Result<T>,
    put: impl FnOnce(&mut Value, Vec<(&'static str, T)>),
) -> Result<()> {
    wrangler::build(tools, &EDGE)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut measured = Vec::new();
    for (name, store) in [("d1", StoreKind::D1), ("durable", StoreKind::Durable)] {
        let worker = TestWorker::start(tools, &tools.root, store)?;
        measured.push((name, measure(&runtime, &worker, &mock_of(&worker))?));
    }
    rewrite(&tools.root, |results| put(results, measured))
}

/// The stops of one store, each kind apart (`probe::StopOf`): calls held open, then
/// streamed answers, each cancelled at five offsets across one watch interval (250 ms in
/// this Worker), so that the figures do not depend on where the cancel falls between two
/// reads. Each list is shortest first.
fn stops(
    runtime: &tokio::runtime::Runtime,
    worker: &TestWorker,
    mock: &onceclick_tests::client::Mock,
) -> Result<[Value; 2]> {
    use onceclick_tests::probe::StopOf;
    let mut out = [Value::Null, Value::Null];
    for (slot, of) in out.iter_mut().zip([StopOf::Held, StopOf::Streamed]) {
        let mut figures = Vec::new();
        for offset in [0, 50, 100, 150, 200] {
            let stop = runtime.block_on(onceclick_tests::probe::stop(
                &worker.server.url,
                &worker.secret,
                mock,
                1000 + offset,
                of,
            ))?;
            figures.push(stop.figure);
        }
        figures.sort_by_key(|s| s.stop_ms);
        *slot = serde_json::to_value(&figures)?;
    }
    Ok(out)
}

/// `cargo xtask bench --stops`: the stops alone (held and streamed, on each store), put
/// into the last full run's bench/results.json, and BENCHMARKS.md rendered again from it.
pub(crate) fn stops_only(tools: &Tools) -> Result<()> {
    measure_only(tools, stops, |results, measured| {
        for (name, [held, streamed]) in measured {
            results["job_cost"][name]["stops"] = held;
            results["job_cost"][name]["streamed_stops"] = streamed;
        }
        results["job_cost"]["stops_date"] = json!(today());
    })
}

/// gzip bytes of what ships: both Workers as `wrangler deploy --dry-run` bundles them,
/// the SDK as `cargo xtask sdk` builds it; and the time to compile and instantiate each
/// Worker's wasm.
fn sizes(tools: &Tools) -> Result<Value> {
    let root = &tools.root;
    let mut out = serde_json::Map::new();
    for (name, config) in [
        ("worker", None),
        ("baseline", Some(root.join("bench/baseline/wrangler.toml"))),
    ] {
        let bundle = bundle(tools, name, config.as_deref())?;
        let start = wasm_start(tools, &bundle.wasm)?;
        out.insert(
            name.into(),
            json!({"wasm_gzip": bundle.wasm_gzip, "js_gzip": bundle.js_gzip,
                   "gzip": bundle.wasm_gzip + bundle.js_gzip, "wasm_raw": bundle.wasm_raw,
                   "start": start}),
        );
    }
    crate::sdk::build(tools)?;
    let (wasm, js) = crate::sdk::sizes(root)?;
    out.insert(
        "sdk".into(),
        json!({"wasm_gzip": wasm, "js_gzip": js, "gzip": wasm + js}),
    );
    Ok(Value::Object(out))
}

/// What `wrangler deploy --dry-run` wrote for one Worker.
pub(crate) struct Bundle {
    pub(crate) wasm: PathBuf,
    pub(crate) wasm_raw: usize,
    pub(crate) wasm_gzip: usize,
    pub(crate) js_gzip: usize,
}

/// Bundles a Worker with `wrangler deploy --dry-run --outdir` (offline) and weighs it.
pub(crate) fn bundle(tools: &Tools, name: &str, config: Option<&Path>) -> Result<Bundle> {
    let outdir = tools.root.join(format!("target/xtask/bundle-{name}"));
    let _ = std::fs::remove_dir_all(&outdir);
    let mut cmd = tools.command("wrangler");
    cmd.args(["deploy", "--dry-run", "--outdir"]).arg(&outdir);
    if let Some(config) = config {
        cmd.arg("--config").arg(config);
    }
    let out = cmd.output().context("wrangler deploy --dry-run")?;
    if !out.status.success() {
        bail!(
            "wrangler deploy --dry-run failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mut wasm = None;
    let mut js_gzip = 0;
    for entry in std::fs::read_dir(&outdir)?.flatten() {
        let path = entry.path();
        match path.extension().and_then(|e| e.to_str()) {
            Some("wasm") => wasm = Some(path),
            Some("js" | "mjs") => js_gzip += tools::gzip_len(&path)?,
            _ => {}
        }
    }
    let wasm = wasm.with_context(|| format!("no .wasm in {}", outdir.display()))?;
    Ok(Bundle {
        wasm_raw: std::fs::metadata(&wasm)?.len() as usize,
        wasm_gzip: tools::gzip_len(&wasm)?,
        js_gzip,
        wasm,
    })
}

/// Compiling and instantiating a Worker's wasm in Node's V8 (the engine workerd embeds),
/// imports stubbed: the part of a cold start that the bundle decides. Median of 5 fresh
/// processes, with V8's defaults (lazy, Liftoff first) and with every function compiled
/// by TurboFan up front.
fn wasm_start(tools: &Tools, wasm: &Path) -> Result<Value> {
    const SCRIPT: &str = r#"
const bytes = require('fs').readFileSync(process.argv[1]);
const t0 = performance.now();
const mod = new WebAssembly.Module(bytes);
const t1 = performance.now();
const imports = {};
for (const i of WebAssembly.Module.imports(mod)) {
  const stub = i.kind === 'function' ? () => { throw new Error('stub'); }
    : i.kind === 'memory' ? new WebAssembly.Memory({ initial: 17 })
    : i.kind === 'table' ? new WebAssembly.Table({ initial: 1, element: 'anyfunc' })
    : i.kind === 'tag' ? (WebAssembly.JSTag ?? new WebAssembly.Tag({ parameters: ['externref'] }))
    : new WebAssembly.Global({ value: 'i32', mutable: true }, 0);
  (imports[i.module] ??= {})[i.name] = stub;
}
new WebAssembly.Instance(mod, imports);
const t2 = performance.now();
console.log(JSON.stringify({ compile_ms: t1 - t0, instantiate_ms: t2 - t1 }));
"#;
    let mut out = serde_json::Map::new();
    for (mode, flags) in [
        ("default", &[][..]),
        (
            "eager_turbofan",
            &["--no-wasm-lazy-compilation", "--no-liftoff"][..],
        ),
    ] {
        let mut totals = Vec::new();
        for _ in 0..5 {
            let run = tools
                .command("node")
                .args(flags)
                .args(["-e", SCRIPT])
                .arg(wasm)
                .output()?;
            let figures: Value = serde_json::from_slice(&run.stdout).with_context(|| {
                format!(
                    "timing the wasm start: {}",
                    String::from_utf8_lossy(&run.stderr)
                )
            })?;
            let total = figures["compile_ms"].as_f64().unwrap_or(0.0)
                + figures["instantiate_ms"].as_f64().unwrap_or(0.0);
            totals.push(Duration::from_secs_f64(total / 1e3));
        }
        totals.sort();
        out.insert(mode.into(), json!(load::percentile(&totals, 0.5)));
    }
    Ok(Value::Object(out))
}

/// The template D1 with `jobs` seeded jobs: built once per schema and seed, then copied
/// for each run. Written straight into the SQLite file (no Worker running), as
/// succeeded jobs of 100 owners, each with its attempt; the triggers log their events
/// as in real use.
fn seed_template(tools: &Tools, root: &Path, jobs: usize) -> Result<PathBuf> {
    let sql = SEED_SQL.replace("{JOBS}", &jobs.to_string());
    let mut inputs = sql.clone();
    let mut migrations: Vec<_> = std::fs::read_dir(root.join("edge/migrations"))?
        .flatten()
        .map(|e| e.path())
        .collect();
    migrations.sort();
    for path in migrations {
        inputs.push_str(&std::fs::read_to_string(path)?);
    }
    let hash = &tools::sha256_hex(inputs.as_bytes())[..12];
    let dir = root.join(format!("target/xtask/seed-{jobs}-{hash}"));
    if dir.join("done").exists() {
        return Ok(dir);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let started = Instant::now();
    eprintln!("xtask: seeding a D1 with {jobs} jobs (once per schema)");
    wrangler::migrate(tools, &dir, true)?;
    let db = onceclick_tests::db::open_writable_in(&dir);
    db.execute_batch(&sql)?;
    drop(db);
    std::fs::write(dir.join("done"), "")?;
    eprintln!("xtask: seeded in {:.0} s", started.elapsed().as_secs_f64());
    Ok(dir)
}

const SEED_SQL: &str = "
PRAGMA synchronous = OFF;
BEGIN;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {JOBS})
INSERT INTO jobs (id, owner_id, idempotency_key, fingerprint, kind, input, provider, status,
                  version, result, completed_by, created_at, updated_at, seq, doc_seq)
SELECT printf('job_seed_%08d', i), printf('seed-owner-%02d', i % 100), printf('seed-key-%08d', i),
       lower(hex(randomblob(32))), 'summarize',
       '{\"text\":\"A seeded job, one of many, for the bench to create beside.\"}', 'primary',
       'succeeded', 3, '{\"summary\":\"A seeded job.\"}', printf('att_seed_%08d', i),
       strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 day'), strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 day'),
       4, 4
  FROM n;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {JOBS})
INSERT INTO attempts (id, job_id, n, provider, state, started_at, dispatched_at, finished_at,
                      started_seq, running_seq)
SELECT printf('att_seed_%08d', i), printf('job_seed_%08d', i), 1, 'primary', 'succeeded',
       strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 day'), strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 day'),
       strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 day'), 2, 3
  FROM n;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {JOBS})
INSERT INTO job_events (job_id, seq, at, type, attempt_id, details)
SELECT printf('job_seed_%08d', i), 4, strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 day'),
       'attempt_succeeded', printf('att_seed_%08d', i),
       '{\"from\":\"running\",\"to\":\"succeeded\",\"provider\":\"primary\",\"error\":null}'
  FROM n;
COMMIT;
";

/// Mean of a figure over the rounds that have it.
fn mean(rounds: &[BTreeMap<&str, Outcome>], name: &str, figure: fn(&Outcome) -> f64) -> f64 {
    let values: Vec<f64> = rounds
        .iter()
        .filter_map(|r| r.get(name))
        .map(figure)
        .collect();
    values.iter().sum::<f64>() / (values.len().max(1) as f64)
}

/// `a / b` in each round that has both.
fn ratios(
    rounds: &[BTreeMap<&str, Outcome>],
    a: &str,
    b: &str,
    figure: fn(&Outcome) -> f64,
) -> Vec<f64> {
    rounds
        .iter()
        .filter_map(|r| Some(figure(r.get(a)?) / figure(r.get(b)?)))
        .collect()
}

fn results(
    rounds: &[BTreeMap<&str, Outcome>],
    e2e: &Value,
    cost: &Value,
    sizes: &Value,
    plan: &Plan,
    bench_time: Duration,
    build_time: Duration,
) -> Value {
    let rate = |o: &Outcome| o.rate;
    let p50 = |o: &Outcome| o.p50_ms;
    let mut workloads = serde_json::Map::new();
    for name in WORKLOADS {
        if rounds.iter().all(|r| !r.contains_key(name)) {
            continue;
        }
        let trips: BTreeMap<u32, usize> = rounds
            .iter()
            .filter_map(|r| r.get(name))
            .flat_map(|o| o.round_trips.clone())
            .fold(BTreeMap::new(), |mut m, (k, v)| {
                *m.entry(k).or_default() += v;
                m
            });
        workloads.insert(
            name.into(),
            json!({
                "rate": mean(rounds, name, rate),
                "p50_ms": mean(rounds, name, p50),
                "p99_ms": mean(rounds, name, |o| o.p99_ms),
                "cpu_ms_per_request": mean(rounds, name, |o| o.cpu_ms_per_request),
                "requests": rounds.iter().filter_map(|r| r.get(name)).map(|o| o.requests).sum::<usize>(),
                "per_round": rounds.iter().filter_map(|r| r.get(name)).map(|o| o.rate).collect::<Vec<_>>(),
                "round_trips": trips,
            }),
        );
    }
    let ratio_of = |a, b| ratios(rounds, a, b, rate);
    // The same ratios from CPU per request (b's over a's): what one core would serve,
    // far steadier than rates on a shared machine.
    let cpu = |o: &Outcome| 1.0 / o.cpu_ms_per_request.max(1e-6);
    let cpu_ratios = json!({
        "create / insert": ratios(rounds, "create", "insert", cpu),
        "replay / create": ratios(rounds, "replay", "create", cpu),
        "read_304 / ok": ratios(rounds, "read_304", "ok", cpu),
        "create_dispatched / insert": ratios(rounds, "create_dispatched", "insert", cpu),
    });
    let figures = json!({
        "create / insert": ratio_of("create", "insert"),
        "replay / create": ratio_of("replay", "create"),
        "read_304 / ok": ratio_of("read_304", "ok"),
        "create_dispatched / insert": ratio_of("create_dispatched", "insert"),
        "create_1m p50 / create_one p50": ratios(rounds, "create_1m", "create_one", p50),
        "round trips (create, replay, read_304, completion)": [
            workloads.get("create").map(|w| w["round_trips"].clone()),
            workloads.get("replay").map(|w| w["round_trips"].clone()),
            workloads.get("read_304").map(|w| w["round_trips"].clone()),
            cost["d1"]["round_trips"]["complete"].clone(),
        ],
        "worker gzip bytes": sizes["worker"]["gzip"],
        "sdk gzip bytes": sizes["sdk"]["gzip"],
    });
    json!({
        "plan": {"rounds": plan.rounds, "warmup_ms": plan.warmup_ms,
                 "measured_ms": plan.measured_ms, "connections": CONNECTIONS,
                 "e2e_jobs": plan.e2e_jobs, "seeded_jobs": plan.seeded_jobs},
        "seconds": {"bench": bench_time.as_secs_f64(), "builds": build_time.as_secs_f64()},
        "workloads": workloads,
        "end_to_end": e2e,
        "dispatch_round_trips": cost["d1"]["round_trips"],
        "job_cost": cost,
        "sizes": sizes,
        "figures": figures,
        "cpu_ratios": cpu_ratios,
        "targets": TARGETS.iter().map(|(f, op, bound)| json!({"figure": f, "op": op, "bound": bound, "met": met(&figures[*f], op, *bound)})).collect::<Vec<_>>(),
    })
}

/// Whether every value of a figure meets its target (ratios: every round; round trips:
/// every answer said exactly 1).
fn met(figure: &Value, op: &str, bound: f64) -> Option<bool> {
    let check = |x: f64| match op {
        ">=" => x >= bound,
        "<=" => x <= bound,
        _ => x == bound,
    };
    match figure {
        Value::Number(n) => n.as_f64().map(check),
        Value::Array(items) if op == "==" => Some(items.iter().all(|i| match i {
            Value::Object(counts) => counts.len() == 1 && counts.contains_key("1"),
            Value::Number(n) => n.as_f64() == Some(bound),
            _ => false,
        })),
        Value::Array(items) if !items.is_empty() => {
            Some(items.iter().all(|i| i.as_f64().is_some_and(check)))
        }
        _ => None,
    }
}

fn print(results: &Value) {
    println!(
        "{:<12} {:>9} {:>9} {:>9} {:>9}  round trips",
        "workload", "req/s", "p50 ms", "p99 ms", "CPU ms"
    );
    if let Some(workloads) = results["workloads"].as_object() {
        for (name, w) in workloads {
            println!(
                "{:<12} {:>9.0} {:>9.2} {:>9.2} {:>9.2}  {}",
                name,
                w["rate"].as_f64().unwrap_or(0.0),
                w["p50_ms"].as_f64().unwrap_or(0.0),
                w["p99_ms"].as_f64().unwrap_or(0.0),
                w["cpu_ms_per_request"].as_f64().unwrap_or(0.0),
                w["round_trips"]
            );
        }
    }
    println!("end to end: {}", results["end_to_end"]);
    println!(
        "the same ratios by CPU per request: {}",
        results["cpu_ratios"]
    );
    for target in results["targets"].as_array().into_iter().flatten() {
        let figure = target["figure"].as_str().unwrap_or_default();
        println!(
            "{figure}: {} (target {} {}; met: {})",
            results["figures"][figure],
            target["op"].as_str().unwrap_or_default(),
            target["bound"],
            target["met"]
        );
    }
}

/// `date -u`, for the report's heading.
pub(crate) fn today() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}
