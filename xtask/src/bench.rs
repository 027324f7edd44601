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
//!
//! The run's parts live beside it: the figures and targets of `bench/results.json`
//! (`bench_results.rs`), how much of it runs (`bench_plan.rs`), the cost of a job to the store (`bench_cost.rs`), the sizes and
//! the wasm start (`bench_sizes.rs`), the seeded D1 (`bench_seed.rs`), and BENCHMARKS.md
//! (`bench_report.rs`).

use crate::bench_jobs::{create_job, without_consumer};
use crate::bench_plan::{Plan, CONNECTIONS, WORKLOADS};
use crate::load::{self, Outcome, Spec};
use crate::test_worker::{Launch, StoreKind, TestWorker};
use crate::tools::{self, Tools};
use crate::wrangler::{self, DevOptions, Wrangler, BASELINE, EDGE};
use crate::{bench_cost, bench_results, bench_seed, bench_sizes};

pub(crate) use crate::bench_plan::{FULL, SHORT};
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The request body of every create (and of the baseline's insert).
const BODY: &str = r#"{"kind":"summarize","input":{"text":"A benchmark sentence that is long enough to summarize."}}"#;

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

/// One run of `plan`: the Workers built, the servers started, the rounds measured, then
/// the whole job and (for the report) its cost to the store, the SDK's cost and the live
/// stream; the figures printed, and with the report written.
pub(crate) fn run(tools: &Tools, plan: &Plan) -> Result<Value> {
    let root = tools.root.clone();
    let started = Instant::now();
    wrangler::build(tools, &EDGE)?;
    wrangler::build(tools, &BASELINE)?;
    let built = started.elapsed();
    let started = Instant::now();

    let sizes = if plan.report {
        bench_sizes::sizes(tools)?
    } else {
        Value::Null
    };
    let seed = match plan.seeded_jobs {
        0 => None,
        n => Some(bench_seed::seed_template(tools, &root, n)?),
    };
    let servers = start(tools, &root, seed.as_deref())?;
    let rounds = (0..plan.rounds)
        .map(|round| measure_round(&servers, plan, round))
        .collect::<Result<Vec<_>>>()?;
    let e2e = end_to_end(&servers, plan)?;
    let cost = if plan.report {
        bench_cost::job_cost(tools, &root)?
    } else {
        Value::Null
    };
    drop(servers);
    let mut cost = cost;
    if plan.report {
        put_streamed(&mut cost, bench_cost::streamed_all(tools)?);
    }

    let mut results =
        bench_results::results(&rounds, &e2e, &cost, &sizes, plan, started.elapsed(), built);
    if plan.report {
        // Needs Chromium: without it the rest of the report still stands.
        results["sdk_submit"] =
            crate::sdk::submit_cost(tools).unwrap_or_else(|e| json!({"error": format!("{e:#}")}));
        results["live"] = crate::bench_live::run(tools)?;
    }
    results["date"] = json!(today());
    results["analysis"] =
        json!(std::fs::read_to_string(root.join("bench/ANALYSIS.md")).unwrap_or_default());
    bench_results::print(&results);
    if plan.report {
        write_report(&root, &results, started, built)?;
    }
    Ok(results)
}

/// Every workload once (those whose server runs in this plan), in reverse order in odd
/// rounds, each with the CPU time of its server's processes per request.
fn measure_round(
    servers: &Servers,
    plan: &Plan,
    round: usize,
) -> Result<BTreeMap<&'static str, Outcome>> {
    let mut order: Vec<&str> = WORKLOADS.to_vec();
    if round % 2 == 1 {
        order.reverse();
    }
    let mut outcomes = BTreeMap::new();
    for name in order {
        let (Some(spec), Some((server, _))) =
            (spec(servers, plan, name, round), servers.target(name))
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
    Ok(outcomes)
}

/// bench/results.json and BENCHMARKS.md, from the full run's `results`.
fn write_report(root: &Path, results: &Value, started: Instant, built: Duration) -> Result<()> {
    let json_path = root.join("bench/results.json");
    std::fs::write(&json_path, serde_json::to_string_pretty(results)? + "\n")?;
    std::fs::write(
        root.join("BENCHMARKS.md"),
        crate::bench_report::render(results),
    )?;
    eprintln!(
        "xtask: wrote BENCHMARKS.md and {} ({:.0} s of bench, {:.0} s of builds)",
        json_path.display(),
        started.elapsed().as_secs_f64(),
        built.as_secs_f64()
    );
    Ok(())
}

/// The run's servers: onceclick with no consumer (and on the seeded D1, if any),
/// onceclick dispatching, and the baseline; with the job that replay and read use.
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

/// `cargo xtask bench --streamed`: the cost per streamed job alone, on each store, put
/// into the last full run's bench/results.json, and BENCHMARKS.md rendered again.
pub(crate) fn streamed_only(tools: &Tools) -> Result<()> {
    wrangler::build(tools, &EDGE)?;
    let measured = bench_cost::streamed_all(tools)?;
    rewrite(&tools.root, |results| {
        put_streamed(&mut results["job_cost"], measured);
        results["job_cost"]["streamed_date"] = json!(today());
    })
}

/// Puts [`bench_cost::streamed_all`]'s figures into `job_cost`.
fn put_streamed(job_cost: &mut Value, measured: Vec<(&'static str, Value, Value)>) {
    for (name, rows, batch) in measured {
        job_cost[name]["streamed"] = rows;
        job_cost[name]["streamed_batch"] = batch;
    }
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
        measured.push((
            name,
            measure(&runtime, &worker, &bench_cost::mock_of(&worker))?,
        ));
    }
    rewrite(&tools.root, |results| put(results, measured))
}

/// `cargo xtask bench --stops`: the stops alone (held and streamed, on each store), put
/// into the last full run's bench/results.json, and BENCHMARKS.md rendered again from it.
pub(crate) fn stops_only(tools: &Tools) -> Result<()> {
    measure_only(tools, bench_cost::stops, |results, measured| {
        for (name, [held, streamed]) in measured {
            results["job_cost"][name]["stops"] = held;
            results["job_cost"][name]["streamed_stops"] = streamed;
        }
        results["job_cost"]["stops_date"] = json!(today());
    })
}

/// `date -u`, for the report's heading.
pub(crate) fn today() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}
