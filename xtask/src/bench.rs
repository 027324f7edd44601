//! `cargo xtask bench`: how fast the three hot paths are, measured side by side in one
//! run against a fresh `wrangler dev` on loopback, so the numbers that matter are the
//! ratios (the machine is shared and noisy; absolute rates move run to run).
//!
//! Each round runs the three workloads one after another, each a fixed number of
//! requests at a fixed concurrency: creating new jobs, replaying one job's key, and
//! reading one job with `If-None-Match` (a 304). Bounded in count and time; loopback
//! only.

use anyhow::{bail, Result};
use std::time::{Duration, Instant};

const ROUNDS: usize = 3;
const REQUESTS: usize = 150;
const CONCURRENCY: usize = 8;
const LIMIT: Duration = Duration::from_secs(120);

#[derive(Default, Clone)]
struct Stats {
    latencies: Vec<Duration>,
    wall: Duration,
}

impl Stats {
    fn rate(&self) -> f64 {
        self.latencies.len() as f64 / self.wall.as_secs_f64()
    }
    fn percentile(&self, p: f64) -> Duration {
        let mut sorted = self.latencies.clone();
        sorted.sort();
        sorted
            .get(((sorted.len() as f64 - 1.0) * p) as usize)
            .copied()
            .unwrap_or_default()
    }
}

pub(crate) fn run(url: &str, secret: &str) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(bench(url, secret))
}

async fn bench(url: &str, secret: &str) -> Result<()> {
    let token = onceclick_tests::auth::mint(secret, "bench", false, 3600)?;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(CONCURRENCY)
        .build()?;
    let body =
        r#"{"kind":"summarize","input":{"text":"A benchmark sentence that is long enough."}}"#;

    // One job to replay and to read.
    let seed = http
        .post(format!("{url}/v1/jobs"))
        .bearer_auth(&token)
        .header("Idempotency-Key", "bench-seed")
        .body(body)
        .send()
        .await?;
    let job: serde_json::Value = seed.json().await?;
    let job_id = job["id"].as_str().unwrap_or_default().to_owned();
    // Read it once it has settled, so its ETag stays current through the bench.
    let settle_by = Instant::now() + Duration::from_secs(30);
    let etag = loop {
        let get = http
            .get(format!("{url}/v1/jobs/{job_id}"))
            .bearer_auth(&token)
            .send()
            .await?;
        let etag = get
            .headers()
            .get("etag")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let job: serde_json::Value = get.json().await?;
        if job["status"] == "succeeded" {
            break etag;
        }
        if Instant::now() > settle_by {
            bail!("the seed job did not succeed in 30 s: {job}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    let deadline = Instant::now() + LIMIT;
    let names = ["create (201)", "replay (200)", "read (304)"];
    let mut totals = vec![Stats::default(); 3];
    for round in 0..ROUNDS {
        for (w, total) in totals.iter_mut().enumerate() {
            if Instant::now() > deadline {
                bail!("the bench ran past its {LIMIT:?} bound");
            }
            let stats = workload(&http, url, &token, body, &job_id, &etag, w, round).await?;
            total.latencies.extend(stats.latencies);
            total.wall += stats.wall;
        }
    }

    let base = totals[0].rate();
    println!(
        "{ROUNDS} rounds × {REQUESTS} requests per workload, {CONCURRENCY} at a time, against wrangler dev on loopback"
    );
    println!(
        "{:<14} {:>9} {:>9} {:>9} {:>12}",
        "workload", "req/s", "p50 ms", "p95 ms", "× create"
    );
    for (name, stats) in names.iter().zip(&totals) {
        println!(
            "{:<14} {:>9.0} {:>9.1} {:>9.1} {:>12.2}",
            name,
            stats.rate(),
            stats.percentile(0.5).as_secs_f64() * 1e3,
            stats.percentile(0.95).as_secs_f64() * 1e3,
            stats.rate() / base
        );
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn workload(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    body: &str,
    job_id: &str,
    etag: &str,
    which: usize,
    round: usize,
) -> Result<Stats> {
    let expected = [201, 200, 304][which];
    let started = Instant::now();
    let mut latencies = Vec::with_capacity(REQUESTS);
    let mut next = 0;
    while next < REQUESTS {
        let batch: Vec<_> = (next..(next + CONCURRENCY).min(REQUESTS))
            .map(|i| {
                let rb = match which {
                    0 => http
                        .post(format!("{url}/v1/jobs"))
                        .header("Idempotency-Key", format!("bench-{round}-{i}"))
                        .body(body.to_owned()),
                    1 => http
                        .post(format!("{url}/v1/jobs"))
                        .header("Idempotency-Key", "bench-seed")
                        .body(body.to_owned()),
                    _ => http
                        .get(format!("{url}/v1/jobs/{job_id}"))
                        .header("If-None-Match", etag),
                };
                let rb = rb.bearer_auth(token);
                tokio::spawn(async move {
                    let t = Instant::now();
                    let status = rb.send().await.map(|r| r.status().as_u16());
                    (status, t.elapsed())
                })
            })
            .collect();
        for task in batch {
            let (status, elapsed) = task.await?;
            let status = status?;
            if status != expected {
                bail!("expected {expected}, got {status}");
            }
            latencies.push(elapsed);
        }
        next += CONCURRENCY;
    }
    Ok(Stats {
        latencies,
        wall: started.elapsed(),
    })
}
