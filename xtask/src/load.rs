//! `cargo xtask load`: the bench's load generator, run as its own process so that its
//! work is not the bench's (the bench spawns it once per workload).
//!
//! It reads a [`Spec`] as JSON on stdin and writes an [`Outcome`] as JSON on stdout. It
//! opens `connections` HTTP/1.1 connections (hyper, kept alive) and runs each as a closed
//! loop, one request after another, on one thread (like `wrk -t1`): a fixed concurrency.
//! Requests that start in the warm-up are not counted. It stops by itself after
//! `warmup_ms + duration_ms`, or after `total` requests when that is set. Loopback only.

use anyhow::{bail, Context, Result};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Read;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

/// One workload.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Spec {
    /// `127.0.0.1:PORT`.
    pub(crate) addr: String,
    pub(crate) method: String,
    pub(crate) path: String,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: String,
    /// When set, each request carries `Idempotency-Key: {prefix}-{connection}-{n}`: a
    /// new key every time.
    pub(crate) fresh_key: Option<String>,
    /// The status every answer must have.
    pub(crate) expect: u16,
    pub(crate) connections: usize,
    pub(crate) warmup_ms: u64,
    pub(crate) duration_ms: u64,
    /// Stop after this many requests in all (then the time is only a bound).
    pub(crate) total: Option<usize>,
}

/// What one workload measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct Outcome {
    /// Requests counted (started after the warm-up).
    pub(crate) requests: usize,
    /// Every request sent, the warm-up's too.
    pub(crate) issued: usize,
    /// Connections the server dropped and the generator opened again.
    pub(crate) reconnects: usize,
    /// From the end of the warm-up to the last counted answer.
    pub(crate) seconds: f64,
    pub(crate) rate: f64,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    /// How many answers said `round trips=N` in `Server-Timing`, by N.
    pub(crate) round_trips: BTreeMap<u32, usize>,
    /// Answers with another status than `expect`, by status.
    pub(crate) unexpected: BTreeMap<u16, usize>,
    /// The first such answer's body, to say what went wrong.
    pub(crate) first_unexpected: Option<String>,
    /// CPU time of the server's processes (wrangler and workerd) per request sent,
    /// including what a request leaves for later (the dispatch a create enqueues): filled
    /// in by the bench, which sees the server.
    pub(crate) cpu_ms_per_request: f64,
}

/// `cargo xtask load`: the spec on stdin, the outcome on stdout.
pub(crate) fn main() -> Result<()> {
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input)?;
    let spec: Spec = serde_json::from_str(&input).context("reading the load spec")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let outcome = runtime.block_on(generate(spec))?;
    println!("{}", serde_json::to_string(&outcome)?);
    Ok(())
}

/// Runs `spec` in a new process of this binary and returns what it measured.
pub(crate) fn spawn(spec: &Spec) -> Result<Outcome> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new(std::env::current_exe()?)
        .arg("load")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("starting the load generator")?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(serde_json::to_string(spec)?.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("the load generator failed ({}) on {spec:?}", out.status);
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// One counted request: when it ended, how long it took, what it answered.
struct Sample {
    done: Instant,
    latency: Duration,
    round_trips: Option<u32>,
    status: u16,
    body: Option<String>,
}

async fn generate(spec: Spec) -> Result<Outcome> {
    let started = Instant::now();
    let warm_end = started + Duration::from_millis(spec.warmup_ms);
    let end = warm_end + Duration::from_millis(spec.duration_ms);
    let issued = std::rc::Rc::new(std::cell::Cell::new(0usize));
    let local = tokio::task::LocalSet::new();
    let mut tasks = Vec::new();
    for conn in 0..spec.connections {
        let spec = spec.clone();
        let issued = issued.clone();
        tasks.push(
            local.spawn_local(async move { connection(&spec, conn, warm_end, end, &issued).await }),
        );
    }
    let (samples, reconnects) = local
        .run_until(async {
            let mut all = Vec::new();
            let mut reconnects = 0;
            for task in tasks {
                let (samples, again) = task.await??;
                all.extend(samples);
                reconnects += again;
            }
            anyhow::Ok((all, reconnects))
        })
        .await?;
    Ok(Outcome {
        issued: issued.get(),
        reconnects,
        ..summarize(&spec, warm_end, samples)
    })
}

/// One kept-alive connection, sending one request after another until `end`. A
/// connection the server drops is opened again (and counted); more than a few such
/// drops end the workload with an error.
async fn connection(
    spec: &Spec,
    conn: usize,
    warm_end: Instant,
    end: Instant,
    issued: &std::cell::Cell<usize>,
) -> Result<(Vec<Sample>, usize)> {
    let mut samples = Vec::new();
    let mut sender: Option<http1::SendRequest<Full<Bytes>>> = None;
    let mut reconnects = 0usize;
    let mut n = 0usize;
    loop {
        let now = Instant::now();
        if now >= end || spec.total.is_some_and(|t| issued.get() >= t) {
            return Ok((samples, reconnects));
        }
        let open = match sender.as_mut() {
            Some(open) => open,
            None => {
                let stream = TcpStream::connect(&spec.addr).await?;
                stream.set_nodelay(true)?;
                let (open, driver) = http1::handshake(TokioIo::new(stream)).await?;
                tokio::task::spawn_local(driver);
                sender.insert(open)
            }
        };
        issued.set(issued.get() + 1);
        let mut request = hyper::Request::builder()
            .method(spec.method.as_str())
            .uri(&spec.path)
            .header("host", &spec.addr);
        for (name, value) in &spec.headers {
            request = request.header(name, value);
        }
        if let Some(prefix) = &spec.fresh_key {
            request = request.header("idempotency-key", format!("{prefix}-{conn}-{n}"));
        }
        n += 1;
        let request = request.body(Full::new(Bytes::from(spec.body.clone())))?;
        let answer = match open.ready().await {
            Ok(()) => open.send_request(request).await,
            Err(e) => Err(e),
        };
        let answer = match answer {
            Ok(answer) => answer,
            Err(e) if reconnects < 10 => {
                eprintln!("xtask load: connection {conn} dropped ({e}); opening it again");
                reconnects += 1;
                sender = None;
                continue;
            }
            Err(e) => bail!("connection {conn} dropped {reconnects} times; the last: {e}"),
        };
        let status = answer.status().as_u16();
        let round_trips = answer
            .headers()
            .get("server-timing")
            .and_then(|v| v.to_str().ok())
            .and_then(onceclick_tests::probe::server_timing_round_trips);
        let body = answer.into_body().collect().await?.to_bytes();
        let done = Instant::now();
        if now >= warm_end || spec.total.is_some() {
            samples.push(Sample {
                done,
                latency: done - now,
                round_trips,
                status,
                body: (status != spec.expect).then(|| String::from_utf8_lossy(&body).into_owned()),
            });
        }
    }
}

fn summarize(spec: &Spec, warm_end: Instant, samples: Vec<Sample>) -> Outcome {
    let mut out = Outcome {
        requests: samples.len(),
        ..Outcome::default()
    };
    let first = if spec.total.is_some() {
        samples.iter().map(|s| s.done - s.latency).min()
    } else {
        Some(warm_end)
    };
    let last = samples.iter().map(|s| s.done).max();
    if let (Some(first), Some(last)) = (first, last) {
        out.seconds = (last - first).as_secs_f64();
    }
    if out.seconds > 0.0 {
        out.rate = out.requests as f64 / out.seconds;
    }
    let mut latencies: Vec<Duration> = samples.iter().map(|s| s.latency).collect();
    latencies.sort();
    out.p50_ms = percentile(&latencies, 0.50);
    out.p99_ms = percentile(&latencies, 0.99);
    for s in samples {
        if let Some(n) = s.round_trips {
            *out.round_trips.entry(n).or_default() += 1;
        }
        if s.status != spec.expect {
            *out.unexpected.entry(s.status).or_default() += 1;
            if out.first_unexpected.is_none() {
                out.first_unexpected = s.body;
            }
        }
    }
    out
}

/// The `p` quantile of sorted latencies, in milliseconds (nearest rank).
pub(crate) fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1].as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let ms: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&ms, 0.5), 50.0);
        assert_eq!(percentile(&ms, 0.99), 99.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }
}
