//! The live stream's figures (issue 24), on each store:
//! - in Chromium (`tests/e2e/live.bench.js`): a move's commit to `onUpdate`, pushed
//!   and polled in one run; the click on Generate to the result on the demo page; the
//!   requests the browser sends for a job of 10 s; a stream's first bytes;
//! - on the server: the Worker's CPU per watcher-hour of a job that does not move (as
//!   an `unknown` waits for its resolve), watched by streams and then by pollers at
//!   the SDK's 4 s cap, side by side on one Worker with no consumer, so nothing else
//!   runs. What each watcher-hour is billed for follows from the counts the design
//!   fixes (a stream reopens every `LIVE_MAX_STREAM_MS`, its job's hub re-reads every
//!   `LIVE_REREAD_MS`), priced in `bench_report.rs`.

use crate::bench_jobs::{create_job, without_consumer};
use crate::test_worker::{Launch, StoreKind, TestWorker};
use crate::tools::Tools;
use crate::wrangler::{self, free_port};
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Watchers per arm of the CPU figure, and how long each arm is measured.
const WATCHERS: usize = 40;
const WINDOW: Duration = Duration::from_secs(30);
/// The SDK's polling cap, and the deployed stream's limits (edge/src/stream.rs,
/// edge/src/live.rs).
const POLL_EVERY: Duration = Duration::from_secs(4);
const MAX_STREAM_S: f64 = 300.0;
const REREAD_S: f64 = 5.0;
const KEEP_ALIVE_S: f64 = 15.0;

pub(crate) fn run(tools: &Tools) -> Result<Value> {
    let root = tools.root.clone();
    wrangler::build_edge(tools)?;
    crate::sdk::build(tools)?;
    crate::sdk::copy_for_demo(&root)?;
    let mut figures = json!({
        "watchers": WATCHERS,
        "window_s": WINDOW.as_secs(),
        "max_stream_s": MAX_STREAM_S,
        "reread_s": REREAD_S,
        "keep_alive_s": KEEP_ALIVE_S,
        "poll_every_s": POLL_EVERY.as_secs(),
    });
    for store in [StoreKind::D1, StoreKind::Durable] {
        let browser = browser_figures(tools, store)?;
        let watchers = watcher_cpu(tools, store)?;
        figures[store.name()] = json!({ "browser": browser, "watchers": watchers });
    }
    Ok(figures)
}

/// The Worker as deployed (no test extras: the hub re-reads every 5 s, streams last
/// 5 minutes), its rate limit out of reach, its providers timing out after 15 s.
fn launch(tools: &Tools, store: StoreKind, config: std::path::PathBuf) -> Result<TestWorker> {
    TestWorker::launch(
        tools,
        &tools.root,
        &Launch {
            store,
            extra_vars: Vec::new(),
            log_level: Some("error"),
            test_vars: false,
            persist_from: None,
            config: Some(config),
            provider_timeout_ms: 15_000,
            primary_streams: false,
        },
    )
}

fn browser_figures(tools: &Tools, store: StoreKind) -> Result<Value> {
    let root = &tools.root;
    let worker = launch(tools, store, wrangler::unlimited_config(root)?)?;
    let proxy_port = free_port()?;
    onceclick_tests::proxy::spawn(proxy_port, worker.server.url.clone())?;
    let token = onceclick_tests::auth::mint(&worker.secret, "bench-live", false, 3600)?;
    let admin = onceclick_tests::auth::mint(&worker.secret, "bench-live-admin", true, 3600)?;
    let out = root.join("target/bench-live");
    std::fs::create_dir_all(&out)?;
    eprintln!("xtask: bench live ({}): Chromium figures", store.name());
    let mut node = tools.command("node");
    node.arg(root.join("tests/e2e/live.bench.js"))
        .env("ONCECLICK_URL", &worker.server.url)
        .env(
            "ONCECLICK_MOCK_URL",
            format!("http://127.0.0.1:{}", worker.mock_port),
        )
        .env(
            "ONCECLICK_PROXY_URL",
            format!("http://127.0.0.1:{proxy_port}"),
        )
        .env("ONCECLICK_E2E_TOKEN", token)
        .env("ONCECLICK_E2E_ADMIN", admin)
        .env("ONCECLICK_E2E_OUT", &out)
        .env("ONCECLICK_D1_DIR", &worker.persist)
        .env("ONCECLICK_CHROMIUM", "/usr/bin/chromium");
    let done = node
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("could not start node")?;
    let printed = String::from_utf8_lossy(&done.stdout);
    if !done.status.success() {
        bail!("live.bench.js failed ({}): {printed}", done.status);
    }
    let line = printed
        .lines()
        .find_map(|l| l.strip_prefix("LIVE_BENCH "))
        .context("live.bench.js printed no LIVE_BENCH line")?;
    Ok(serde_json::from_str(line)?)
}

/// The Worker's CPU per watcher-hour: `WATCHERS` jobs that never move (no consumer),
/// each watched by one stream for `WINDOW`, then by one poller for as long.
fn watcher_cpu(tools: &Tools, store: StoreKind) -> Result<Value> {
    let worker = launch(tools, store, without_consumer(&tools.root)?)?;
    let token = onceclick_tests::auth::mint(&worker.secret, "bench-watchers", false, 3600)?;
    let url = worker.server.url.clone();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(WATCHERS * 2)
        .build()?;
    let jobs = runtime.block_on(create_jobs(&http, &url, &token))?;
    eprintln!(
        "xtask: bench live ({}): {WATCHERS} streams, then {WATCHERS} pollers, {} s each",
        store.name(),
        WINDOW.as_secs()
    );
    let push = runtime.block_on(async {
        let mut streams = Vec::new();
        for (id, _) in &jobs {
            let response = http
                .get(format!("{url}/v1/jobs/{id}/stream"))
                .bearer_auth(&token)
                .send()
                .await?;
            if response.status() != 200 {
                bail!("stream of {id}: {}", response.status());
            }
            streams.push(response);
        }
        // Every stream has sent its first event before the window opens.
        for s in &mut streams {
            s.chunk().await?;
        }
        let cpu = worker.server.cpu_time();
        let reading = streams.into_iter().map(|mut s| {
            tokio::spawn(async move {
                let mut bytes = 0;
                while let Ok(Ok(Some(chunk))) = tokio::time::timeout(WINDOW, s.chunk()).await {
                    bytes += chunk.len();
                }
                bytes
            })
        });
        let reading: Vec<_> = reading.collect();
        tokio::time::sleep(WINDOW).await;
        let spent = worker.server.cpu_time() - cpu;
        for r in reading {
            r.abort();
        }
        Ok::<_, anyhow::Error>(spent)
    })?;
    let (poll, polls) = runtime.block_on(async {
        let cpu = worker.server.cpu_time();
        let deadline = Instant::now() + WINDOW;
        let pollers = jobs.iter().map(|(id, etag)| {
            let (http, url, token, id, etag) = (
                http.clone(),
                url.clone(),
                token.clone(),
                id.clone(),
                etag.clone(),
            );
            tokio::spawn(async move {
                let mut sent = 0u32;
                while Instant::now() < deadline {
                    let answer = http
                        .get(format!("{url}/v1/jobs/{id}"))
                        .bearer_auth(&token)
                        .header("If-None-Match", &etag)
                        .send()
                        .await;
                    if answer.is_ok_and(|a| a.status() == 304) {
                        sent += 1;
                    }
                    tokio::time::sleep(POLL_EVERY).await;
                }
                sent
            })
        });
        let mut polls = 0;
        for p in pollers.collect::<Vec<_>>() {
            polls += p.await?;
        }
        Ok::<_, anyhow::Error>((worker.server.cpu_time() - cpu, polls))
    })?;
    let per_hour = |spent: Duration| {
        spent.as_secs_f64() * 1e3 / WATCHERS as f64 * (3600.0 / WINDOW.as_secs_f64())
    };
    if polls == 0 {
        bail!("no poll answered 304");
    }
    Ok(json!({
        "push_cpu_ms_per_watcher_hour": per_hour(push),
        "poll_cpu_ms_per_watcher_hour": per_hour(poll),
        "polls_answered_304": polls,
    }))
}

/// `WATCHERS` new jobs: their ids and ETags.
async fn create_jobs(
    http: &reqwest::Client,
    url: &str,
    token: &str,
) -> Result<Vec<(String, String)>> {
    let mut jobs = Vec::new();
    for n in 0..WATCHERS {
        let body = format!(
            r#"{{"kind":"summarize","input":{{"text":"Watched job number {n}, which never moves while it is watched."}}}}"#
        );
        let key = format!("bench-watch-{n}");
        jobs.push(create_job(http, url, token, &key, body).await?);
    }
    Ok(jobs)
}
