//! Store round trips and rows per operation, read from the Worker itself:
//! `Server-Timing` on the answers to create, replay and a 304 read, and the `dispatched`
//! line that the queue consumer logs for the claim and for what follows it (the
//! provider's answer and the compare-and-swap completion). The rows are what the place
//! bills: D1's `meta.rows_written`/`rows_read`, a shard's cursor `rowsWritten`/`rowsRead`.
//! `cargo xtask test` asserts them (`tests/budgets.rs`) and `cargo xtask bench` reports
//! them.

use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

/// Round trips of one job's life, when nothing goes wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RoundTrips {
    pub create: u32,
    pub replay: u32,
    pub read_304: u32,
    /// The dispatcher's claim of the attempt.
    pub claim: u32,
    /// Everything after the claim: the completion, when the provider answers at once.
    pub complete: u32,
}

/// Rows of one job's life, as the store billed them, by step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Rows {
    pub create: u64,
    pub claim: u64,
    /// Everything after the claim: the completion, when the provider answers at once.
    pub complete: u64,
}

impl Rows {
    /// The job's whole life: create, claim, completion.
    pub fn total(&self) -> u64 {
        self.create + self.claim + self.complete
    }
}

/// What one job that succeeds on its first attempt costs the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Probe {
    pub round_trips: RoundTrips,
    pub rows_written: Rows,
    pub rows_read: Rows,
    /// What its provider's answer said it billed (`usage`), as the consumer logged it
    /// (`call_tokens`); `None` if the answer said nothing.
    pub tokens: Option<Tokens>,
}

/// A provider's tokens for one answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Tokens {
    pub prompt: u64,
    pub completion: u64,
}

/// The sum of the numbers after `label` in a `Server-Timing` value, over its metrics
/// (one per place called: `d1;dur=…;desc="round trips=N rows written=W rows read=R"`,
/// or one per shard, `s8.3;…`). `None` if no metric has it.
fn server_timing_sum(value: &str, label: &str) -> Option<u64> {
    let mut total = None;
    for part in value.split(label).skip(1) {
        let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
        *total.get_or_insert(0) += digits.parse::<u64>().ok()?;
    }
    total
}

/// The round trips of a `Server-Timing` value: N of `d1;dur=…;desc="round trips=N …"`,
/// or the sum over its metrics when the Worker is sharded (one per shard called,
/// `s8.3;dur=…;desc="round trips=N …"`).
pub fn server_timing_round_trips(value: &str) -> Option<u32> {
    server_timing_sum(value, "round trips=").and_then(|n| u32::try_from(n).ok())
}

/// The round trips of [`probe`].
pub async fn round_trips(base: &str, secret: &str, log: &Path) -> Result<RoundTrips> {
    Ok(probe(base, secret, log).await?.round_trips)
}

/// Creates one job (as owner `probe-<random>`), replays it, waits for it to succeed,
/// reads it with `If-None-Match`, and reads the consumer's `dispatched` line from `log`
/// (the Worker must log at wrangler's default level): the round trips of each step, and
/// the rows the job's own steps (create, claim, completion) wrote and read.
pub async fn probe(base: &str, secret: &str, log: &Path) -> Result<Probe> {
    let owner = crate::client::unique("probe");
    let token = crate::auth::mint(secret, &owner, false, 600)?;
    let http = reqwest::Client::new();
    let body = r#"{"kind":"summarize","input":{"text":"One job whose round trips are counted."}}"#;
    let create = || {
        http.post(format!("{base}/v1/jobs"))
            .bearer_auth(&token)
            .header("Idempotency-Key", "probe")
            .body(body)
            .send()
    };
    let created = create().await?;
    let (status, create_trips) = (created.status().as_u16(), trips_of(&created));
    let timing = timing_of(&created);
    let create_written = server_timing_sum(&timing, "rows written=")
        .with_context(|| format!("create's Server-Timing has no rows written: {timing}"))?;
    let create_read = server_timing_sum(&timing, "rows read=")
        .with_context(|| format!("create's Server-Timing has no rows read: {timing}"))?;
    let job: Value = created.json().await?;
    if status != 201 {
        bail!("create answered {status}: {job}");
    }
    let id = job["id"].as_str().context("the job has no id")?.to_owned();
    let replayed = create().await?;
    if replayed.status().as_u16() != 200 {
        bail!("replay answered {}", replayed.status());
    }
    let replay_trips = trips_of(&replayed);

    let by = Instant::now() + Duration::from_secs(30);
    let (etag, attempt) = succeeded(&http, base, &token, &id, by).await?;
    let read = http
        .get(format!("{base}/v1/jobs/{id}"))
        .bearer_auth(&token)
        .header("If-None-Match", &etag)
        .send()
        .await?;
    if read.status().as_u16() != 304 {
        bail!("a read with the job's ETag answered {}", read.status());
    }
    let read_trips = trips_of(&read);

    let line = line_of(log, "dispatched", &attempt, by).await?;
    // Logged before the dispatched line, when the answer had a `usage`.
    let tokens = tokens_of(log, &attempt);
    let get = |what: &str, k: &str| {
        line[what][k]
            .as_u64()
            .with_context(|| format!("a dispatched line without {what}.{k}: {line}"))
    };
    let trips = |k: &str| get("round_trips", k).map(|n| n as u32);
    Ok(Probe {
        round_trips: RoundTrips {
            create: create_trips.context("create sent no Server-Timing")?,
            replay: replay_trips.context("replay sent no Server-Timing")?,
            read_304: read_trips.context("the 304 sent no Server-Timing")?,
            claim: trips("claim")?,
            complete: trips("after_claim")?,
        },
        rows_written: Rows {
            create: create_written,
            claim: get("rows_written", "claim")?,
            complete: get("rows_written", "after_claim")?,
        },
        rows_read: Rows {
            create: create_read,
            claim: get("rows_read", "claim")?,
            complete: get("rows_read", "after_claim")?,
        },
        tokens,
    })
}

/// An answer's `Server-Timing` value (empty when it has none).
fn timing_of(r: &reqwest::Response) -> String {
    r.headers()
        .get("server-timing")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// The round trips an answer's `Server-Timing` counts, if it has one.
fn trips_of(r: &reqwest::Response) -> Option<u32> {
    r.headers()
        .get("server-timing")
        .and_then(|v| v.to_str().ok())
        .and_then(server_timing_round_trips)
}

/// Reads job `id` until it has succeeded (until `by` at most): its ETag then, and its
/// first attempt's id.
async fn succeeded(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    id: &str,
    by: Instant,
) -> Result<(String, String)> {
    loop {
        let got = http
            .get(format!("{base}/v1/jobs/{id}"))
            .bearer_auth(token)
            .send()
            .await?;
        let etag = got
            .headers()
            .get("etag")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let job: Value = got.json().await?;
        if job["status"] == "succeeded" {
            let attempt = job["attempts"][0]["id"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            return Ok((etag, attempt));
        }
        if Instant::now() > by {
            bail!("the probe's job did not succeed in 30 s: {job}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The provider's tokens for `attempt`, from the consumer's `call_tokens` line.
fn tokens_of(log: &Path, attempt: &str) -> Option<Tokens> {
    events_of(log, "call_tokens", attempt)
        .first()
        .and_then(|l| {
            Some(Tokens {
                prompt: l["prompt_tokens"].as_u64()?,
                completion: l["completion_tokens"].as_u64()?,
            })
        })
}

/// The `event` lines of `log` that name `attempt`, in the order logged.
fn events_of(log: &Path, event: &str, attempt: &str) -> Vec<Value> {
    let marker = format!("\"event\":\"{event}\"");
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(&marker) && l.contains(attempt))
        .filter_map(|l| serde_json::from_str::<Value>(l.get(l.find('{')?..=l.rfind('}')?)?).ok())
        .collect()
}

/// The consumer's `event` line for `attempt` (such as `{"event":"dispatched",
/// "attempt_id":…,"round_trips":{"claim":…,"after_claim":…},"rows_written":{…},
/// "rows_read":{…}}`), waited for until `by`.
async fn line_of(log: &Path, event: &str, attempt: &str, by: Instant) -> Result<Value> {
    loop {
        if let Some(line) = events_of(log, event, attempt).into_iter().next() {
            return Ok(line);
        }
        if Instant::now() > by {
            bail!("the consumer logged no {event} line for {attempt}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One stop, timed: a job whose provider's call lasts about 10 s, cancelled
/// `cancel_after_ms` into the call.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StopFigure {
    /// When the mock saw the connection close, from the call's arrival.
    pub closed_after_ms: u64,
    /// When the cancel was answered, from the call's arrival (as the test saw it).
    pub cancelled_after_ms: u64,
    /// The close after the cancel's answer: the stop's latency.
    pub stop_ms: i64,
}

/// What [`stop`] did: its figure, and the job and its owner's token, to look at after.
pub struct Stopped {
    pub figure: StopFigure,
    pub job_id: String,
    pub token: String,
    pub marker: String,
}

/// What a stop stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopOf {
    /// A call whose answer has not come: the primary holds its body open for 10 s. The
    /// dispatcher sees the cancel at its next read of the attempt (`CANCEL_POLL_MS`).
    Held,
    /// A streamed answer, mid-stream: the fallback (which streams) writes two code
    /// points every 100 ms, for about 12 s. The job's hub refuses the next piece once it
    /// has the `cancelled` document, which wakes the dispatcher before its next read.
    Streamed,
}

/// The summary a streamed stop's provider writes: 204 code points, 120 chunks of two
/// with the rest of its JSON.
const STREAMED_SUMMARY: &str = "The quarterly review ran long: revenue beat the forecast, \
     costs held, hiring slowed in two teams, and the board asked for a plan to ship the \
     new billing system before the spring release of the mobile app.";

/// Creates a job (as owner `stop-<random>`) whose provider's call lasts about 10 s
/// (`of` says how), cancels it `cancel_after_ms` into the call, and waits for the mock to
/// see the connection close. Fails if the cancel does not answer `cancelled` or the
/// connection is not seen to close within 15 s.
pub async fn stop(
    base: &str,
    secret: &str,
    mock: &crate::client::Mock,
    cancel_after_ms: u64,
    of: StopOf,
) -> Result<Stopped> {
    let owner = crate::client::unique("stop");
    let token = crate::auth::mint(secret, &owner, false, 600)?;
    let marker = crate::client::unique("stop");
    let input = serde_json::json!({"text": crate::client::marked_text(&marker)});
    let body = match of {
        StopOf::Held => {
            mock.script(
                "primary",
                &marker,
                serde_json::json!([{"hold_open_ms": 10_000}]),
            )
            .await;
            serde_json::json!({"kind": "summarize", "input": input})
        }
        StopOf::Streamed => {
            let step = serde_json::json!({"summary": STREAMED_SUMMARY, "chunk_chars": 2,
                                          "chunk_ms": 100});
            mock.script("fallback", &marker, serde_json::json!([step]))
                .await;
            serde_json::json!({"kind": "summarize", "input": input, "provider": "fallback"})
        }
    };
    let http = reqwest::Client::new();
    let created = create_fresh(&http, base, &token, &body, None)
        .await
        .context("the stop's job")?;
    let job: Value = created.json().await?;
    let id = job["id"].as_str().context("the job has no id")?.to_owned();
    mock.wait_calls(&marker, 1).await;
    let seen = Instant::now();
    tokio::time::sleep(Duration::from_millis(cancel_after_ms)).await;
    let cancelled: Value = http
        .post(format!("{base}/v1/jobs/{id}/cancel"))
        .bearer_auth(&token)
        .json(&serde_json::json!({}))
        .send()
        .await?
        .json()
        .await?;
    let cancelled_after_ms = seen.elapsed().as_millis() as u64;
    if cancelled["status"] != "cancelled" {
        bail!("the cancel answered {cancelled}");
    }
    let closed = mock
        .wait_call(&marker, |call| call["closed_after_ms"].is_u64())
        .await;
    let closed_after_ms = closed["closed_after_ms"].as_u64().unwrap_or_default();
    Ok(Stopped {
        figure: StopFigure {
            closed_after_ms,
            cancelled_after_ms,
            stop_ms: closed_after_ms as i64 - cancelled_after_ms as i64,
        },
        job_id: id,
        token,
        marker,
    })
}

/// What one path of a job's life cost the store, over every step it took: the create,
/// each delivery's claim and what followed it (the `dispatched` lines; a hedge runs
/// inside its primary's), and any request after (a resolve).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PathCost {
    pub path: &'static str,
    pub round_trips: u64,
    pub rows_written: u64,
    pub rows_read: u64,
    /// The watch reads over calls in flight, apart (one per `CANCEL_POLL_MS` a call took).
    pub watch_reads: u64,
}

/// The sum of the `dispatched` lines of `job_id` in `log`, once `deliveries` of them are
/// there (waited for until `by`): round trips, rows written, rows read, watch reads.
async fn dispatched_sum(
    log: &Path,
    job_id: &str,
    deliveries: usize,
    by: Instant,
) -> Result<[u64; 4]> {
    loop {
        let lines = events_of(log, "dispatched", job_id);
        if lines.len() >= deliveries {
            let mut sum = [0u64; 4];
            for line in &lines {
                let get = |a: &str, b: &str| line[a][b].as_u64().unwrap_or_default();
                sum[0] += get("round_trips", "claim") + get("round_trips", "after_claim");
                sum[1] += get("rows_written", "claim") + get("rows_written", "after_claim");
                sum[2] += get("rows_read", "claim") + get("rows_read", "after_claim");
                sum[3] += get("watch", "round_trips");
            }
            return Ok(sum);
        }
        if Instant::now() > by {
            bail!(
                "{job_id}: {} of {deliveries} dispatched lines in 40 s",
                lines.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `POST /v1/jobs` with `body` under a fresh key: its answer, which must be a `201`.
async fn create_fresh(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    body: &Value,
    fault: Option<&str>,
) -> Result<reqwest::Response> {
    let mut created = http
        .post(format!("{base}/v1/jobs"))
        .bearer_auth(token)
        .header("Idempotency-Key", crate::client::unique("key"));
    if let Some(fault) = fault {
        created = created.header("X-Onceclick-Fault", fault);
    }
    let created = created.json(body).send().await?;
    if created.status().as_u16() != 201 {
        bail!("create answered {}", created.status());
    }
    Ok(created)
}

/// The store figures of a `Server-Timing` value: round trips, rows written, rows read.
fn timing_sum(r: &reqwest::Response) -> [u64; 3] {
    let value = r
        .headers()
        .get("server-timing")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    [
        server_timing_sum(value, "round trips=").unwrap_or_default(),
        server_timing_sum(value, "rows written=").unwrap_or_default(),
        server_timing_sum(value, "rows read=").unwrap_or_default(),
    ]
}

/// The paths of a job's life beyond a first try, each run once on a fresh job (as owner
/// `paths-<random>`), with their store cost: a hedged race the hedge wins (the
/// primary stopped as the loser), a failover after a retryable failure, and an
/// `unknown` attempt (its provider past its timeout) resolved by an admin. The
/// fallback provider is certified first (the hedge and the failover need it).
pub async fn paths(
    base: &str,
    secret: &str,
    mock: &crate::client::Mock,
    log: &Path,
) -> Result<Vec<PathCost>> {
    let api = crate::client::Api::at(base, secret);
    api.ensure_certified("fallback").await;
    let owner = crate::client::unique("paths");
    let token = crate::auth::mint(secret, &owner, false, 600)?;
    let admin = crate::auth::mint(secret, "paths-admin", true, 600)?;
    let mut out = Vec::new();
    for path in ["hedged race", "failover", "unknown, resolved"] {
        let marker = crate::client::unique("path");
        let (kind, primary, fallback, deliveries) = path_script(path);
        mock.script("primary", &marker, primary).await;
        mock.script("fallback", &marker, fallback).await;
        let body = serde_json::json!({"kind": kind,
                                      "input": {"text": crate::client::marked_text(&marker)}});
        let created = create_fresh(&api.http, base, &token, &body, None)
            .await
            .with_context(|| format!("{path}: its job"))?;
        let [trips, written, read] = timing_sum(&created);
        let job: Value = created.json().await?;
        let id = job["id"].as_str().context("the job has no id")?.to_owned();
        let mut cost = PathCost {
            path,
            round_trips: trips,
            rows_written: written,
            rows_read: read,
            watch_reads: 0,
        };
        let settled = |j: &Value| {
            let ended = j["attempts"].as_array().is_some_and(|a| {
                a.iter()
                    .all(|a| a["state"] != "starting" && a["state"] != "running")
            });
            ended && (j["status"] == "succeeded" || j["status"] == "unknown")
        };
        let job = api.wait_job(&token, &id, settled).await;
        if path == "unknown, resolved" {
            let [trips, written, read] =
                resolve_as_succeeded(&api, base, &admin, path, &job).await?;
            cost.round_trips += trips;
            cost.rows_written += written;
            cost.rows_read += read;
        }
        let by = Instant::now() + Duration::from_secs(40);
        let [trips, written, read, watches] = dispatched_sum(log, &id, deliveries, by).await?;
        cost.round_trips += trips;
        cost.rows_written += written;
        cost.rows_read += read;
        cost.watch_reads += watches;
        out.push(cost);
    }
    Ok(out)
}

/// How a path's job is made to take it: its kind, the primary's and the fallback's
/// scripts, and the deliveries (`dispatched` lines) it takes.
fn path_script(path: &str) -> (&'static str, Value, Value, usize) {
    match path {
        "hedged race" => (
            "summarize_hedged",
            serde_json::json!([{"delay_ms": 2000}]),
            serde_json::json!([{}]),
            1,
        ),
        // The kind with `auto_failover` (and a hedge after 300 ms, which a primary
        // that fails at once never reaches).
        "failover" => (
            "summarize_hedged",
            serde_json::json!([{"status": 503}]),
            serde_json::json!([{}]),
            2,
        ),
        _ => (
            "summarize",
            serde_json::json!([{"delay_ms": 30000}]),
            serde_json::json!([{}]),
            1,
        ),
    }
}

/// An admin's resolve of `job`'s first attempt (on `path`) as succeeded: its store
/// figures.
async fn resolve_as_succeeded(
    api: &crate::client::Api,
    base: &str,
    admin: &str,
    path: &str,
    job: &Value,
) -> Result<[u64; 3]> {
    let attempt = job["attempts"][0]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let resolved = api
        .http
        .post(format!("{base}/v1/attempts/{attempt}/resolve"))
        .bearer_auth(admin)
        .json(&serde_json::json!({"outcome": "succeeded",
                                  "result": {"summary": "resolved", "sentiment": "neutral"}}))
        .send()
        .await?;
    if resolved.status().as_u16() != 200 {
        bail!("{path}: the resolve answered {}", resolved.status());
    }
    Ok(timing_sum(&resolved))
}

/// What the retention purge writes and reads per job it takes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PurgeCost {
    pub jobs: u64,
    pub rows_written_per_job: f64,
    pub rows_read_per_job: f64,
}

/// The purge's own line: `jobs` first-try jobs (as owner `purge-<random>`) succeed, are
/// made idle for 30 days behind the Worker's back (their `updated_at`, in the store
/// under `persist`), and one reconciler pass (`POST /v1/_reconcile`) takes them; the
/// rows come from the pass's `reconciled` lines (`purge`, apart from the sweeps'), over
/// every place that purged.
pub async fn purge(
    base: &str,
    secret: &str,
    log: &Path,
    persist: &Path,
    jobs: usize,
) -> Result<PurgeCost> {
    let api = crate::client::Api::at(base, secret);
    let owner = crate::client::unique("purge");
    let token = crate::auth::mint(secret, &owner, false, 600)?;
    let mut ids = Vec::new();
    for i in 0..jobs {
        let body = serde_json::json!({"kind": "summarize",
            "input": {"text": format!("One job of {owner} for the purge, number {i}.")}});
        let created = crate::client::send(api.create(
            &token,
            Some(&crate::client::unique("purge-key")),
            &body.to_string(),
        ))
        .await;
        if created.status != 201 {
            bail!(
                "a purge job's create answered {}: {}",
                created.status,
                created.text
            );
        }
        ids.push(created.json()["id"].as_str().unwrap_or_default().to_owned());
    }
    for id in &ids {
        api.wait_job(&token, id, crate::client::status_is("succeeded"))
            .await;
        crate::db::execute_in(
            persist,
            "UPDATE jobs SET updated_at = '2000-01-01T00:00:00.000Z' WHERE id = ?1",
            &[id],
        );
    }
    let seen = events_of(log, "reconciled", "").len();
    // The test-only pass now, on either store (a sharded store's cron reconciles no shard: each shard's alarm does).
    let admin = crate::auth::mint(secret, "purge-admin", true, 600)?;
    let pass =
        crate::client::send(api.post_json(&admin, "/v1/_reconcile", &serde_json::json!({}))).await;
    if pass.status != 200 {
        bail!(
            "POST /v1/_reconcile answered {}: {}",
            pass.status,
            pass.text
        );
    }
    let by = Instant::now() + Duration::from_secs(20);
    loop {
        let lines: Vec<Value> = events_of(log, "reconciled", "")
            .into_iter()
            .skip(seen)
            .filter(|l| l["purged"].as_u64().unwrap_or(0) > 0)
            .collect();
        let purged: u64 = lines.iter().filter_map(|l| l["purged"].as_u64()).sum();
        if purged >= jobs as u64 {
            let sum =
                |k: &str| -> u64 { lines.iter().filter_map(|l| l["purge"][k].as_u64()).sum() };
            return Ok(PurgeCost {
                jobs: purged,
                rows_written_per_job: sum("rows_written") as f64 / purged as f64,
                rows_read_per_job: sum("rows_read") as f64 / purged as f64,
            });
        }
        if Instant::now() > by {
            bail!("the pass purged {purged} of the {jobs} idle jobs in 20 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What one job costs whose answer streams, or, for the side-by-side line, one whose
/// answer does not (`provider` `primary` in the test Worker), per job over the jobs
/// run: the store (as [`PathCost`] counts it), the requests to the job's hub (the
/// documents the store handed it, the connections the call opened to it) and the
/// messages on those (the pieces of text), and the hub's own storage writes (each kilobyte kept, a row each, and each of those rows
/// deleted once the result is stored).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StreamedCost {
    pub provider: &'static str,
    /// The call handed its text to no hub (`no_hand_off`): what reading the provider's
    /// chunks costs alone, the floor of any design.
    pub floor: bool,
    pub jobs: usize,
    /// The code points of the answer's content, and of the text streamed (the largest
    /// a job's call read; 0 for a provider that does not stream).
    pub chars: usize,
    pub streamed_chars: u64,
    pub round_trips: f64,
    pub rows_written: f64,
    pub rows_read: f64,
    pub hub_notifies: f64,
    pub hand_offs: f64,
    pub hub_opens: f64,
    pub hub_rows_written: f64,
}

impl StreamedCost {
    /// The mean of `costs`, all of one provider, answer and floor: what one job cost on
    /// average over all of them (the longest text streamed).
    pub fn mean(costs: &[StreamedCost]) -> Option<StreamedCost> {
        let first = costs.first()?;
        let n = costs.len() as f64;
        let mean = |f: fn(&StreamedCost) -> f64| costs.iter().map(f).sum::<f64>() / n;
        Some(StreamedCost {
            jobs: costs.iter().map(|c| c.jobs).sum(),
            streamed_chars: costs.iter().map(|c| c.streamed_chars).max().unwrap_or(0),
            round_trips: mean(|c| c.round_trips),
            rows_written: mean(|c| c.rows_written),
            rows_read: mean(|c| c.rows_read),
            hub_notifies: mean(|c| c.hub_notifies),
            hand_offs: mean(|c| c.hand_offs),
            hub_opens: mean(|c| c.hub_opens),
            hub_rows_written: mean(|c| c.hub_rows_written),
            ..first.clone()
        })
    }
}

/// Certifies `provider` (another provider than the kind's primary takes a first
/// attempt once certified), apart from [`streamed`], whose server CPU the caller
/// measures.
pub async fn certify(base: &str, secret: &str, provider: &str) {
    crate::client::Api::at(base, secret)
        .ensure_certified(provider)
        .await;
}

/// Runs one first-try job of `summarize` on `provider` (certified, for another than the
/// primary: [`certify`]), its answer `pad_to` code points long (padded with JSON
/// whitespace, which the contract reads as the same answer) and streamed four code
/// points per chunk, a chunk every 5 ms where the provider streams; with `floor`, the
/// call hands its text to no hub. Returns its cost ([`StreamedCost`]; a row's mean is
/// [`StreamedCost::mean`]).
pub async fn streamed(
    base: &str,
    secret: &str,
    mock: &crate::client::Mock,
    log: &Path,
    provider: &'static str,
    (pad_to, floor): (usize, bool),
) -> Result<StreamedCost> {
    let api = crate::client::Api::at(base, secret);
    let token = crate::auth::mint(secret, &crate::client::unique("streamed"), false, 600)?;
    let marker = crate::client::unique("streamed");
    let step = serde_json::json!([{"summary": "The numbers beat the forecast again.",
                                   "chunk_chars": 4, "chunk_ms": 5, "pad_to": pad_to}]);
    mock.script(provider, &marker, step).await;
    let body = serde_json::json!({"kind": "summarize", "provider": provider,
                                  "input": {"text": crate::client::marked_text(&marker)}});
    let fault = floor.then_some("no_hand_off:before");
    let created = create_fresh(&api.http, base, &token, &body, fault).await?;
    let [trips, written, read] = timing_sum(&created);
    let job: Value = created.json().await?;
    let id = job["id"].as_str().context("the job has no id")?.to_owned();
    // Waited for in the log, then read once: polling the job would count reads as the
    // job's CPU, and more of them for the longer answers.
    let by = Instant::now() + Duration::from_secs(40);
    let [d_trips, d_written, d_read, _] = dispatched_sum(log, &id, 1, by).await?;
    let job = api
        .wait_job(&token, &id, |j| j["status"] == "succeeded")
        .await;
    if job["status"] != "succeeded" {
        bail!("streamed job {id} ended {}", job["status"]);
    }
    let attempt = job["attempts"][0]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let dispatched = line_of(log, "dispatched", &attempt, by).await?;
    let notified = dispatched["hub_notified"].as_u64().unwrap_or_default();
    let (hand_offs, opens, streamed_chars) = match provider {
        "primary" => (0, 0, 0),
        _ => {
            let line = line_of(log, "call_streamed", &attempt, by).await?;
            let n = |name: &str| line[name].as_u64().unwrap_or_default();
            (n("hand_offs"), n("hub_opens"), n("chars"))
        }
    };
    // Each kilobyte kept is a row; once the result is stored, the hub deletes them all.
    let kept = events_of(log, "live_text_kept", &attempt).len() as u64;
    if kept > 0 {
        line_of(log, "live_text_deleted", &id, by).await?;
    }
    Ok(StreamedCost {
        provider,
        floor,
        jobs: 1,
        chars: pad_to,
        streamed_chars,
        round_trips: (trips + d_trips) as f64,
        rows_written: (written + d_written) as f64,
        rows_read: (read + d_read) as f64,
        hub_notifies: notified as f64,
        hand_offs: hand_offs as f64,
        hub_opens: opens as f64,
        hub_rows_written: (2 * kept) as f64,
    })
}

/// What one consumer batch of streamed calls made (issue 49, [`batch`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BatchCost {
    /// The batch's messages, its subrequests as the consumer counted them, and of
    /// those the watch's reads.
    pub messages: u64,
    pub subrequests: u64,
    pub watch_reads: u64,
    /// Each call's connections to its hub, and the pieces it sent on them.
    pub hub_opens: Vec<u64>,
    pub hand_offs: Vec<u64>,
    /// Each answer's code points, and how long the batch's calls took, in seconds.
    pub chars: usize,
    pub seconds: f64,
}

/// Holds the local queue's consumer with one call (it runs one batch at a time) while
/// `streams` streamed `summarize` jobs queue behind it, then lets it go: their messages
/// go in one batch (`max_batch_size = 10`), whose calls stream `pad_to` code points,
/// `chunk_chars` every `chunk_ms`, side by side. Waits until every job succeeded with its
/// answer, and returns the batch's line (`batch_consumed`) and each call's.
pub async fn batch(
    api: &crate::client::Api,
    mock: &crate::client::Mock,
    log: &Path,
    streams: usize,
    (pad_to, chunk_chars, chunk_ms): (usize, u32, u32),
) -> Result<BatchCost> {
    use crate::client::{id, marked_text, unique};
    let token = api.token("batch");
    let (gate, blocker) = (unique("gate"), unique("blocker"));
    mock.script("primary", &blocker, serde_json::json!([{"gate": gate}]))
        .await;
    let body = serde_json::json!({"kind": "summarize", "input": {"text": marked_text(&blocker)}});
    let blocked = create_fresh(&api.http, &api.base, &token, &body, None).await?;
    let blocked = id(&blocked.json::<Value>().await?);
    mock.wait_calls(&blocker, 1).await;
    let summary = "the numbers came in above the forecast";
    let mut attempts = Vec::new();
    for _ in 0..streams {
        let marker = unique("batch");
        let step = serde_json::json!([{"summary": summary, "chunk_chars": chunk_chars,
                                       "chunk_ms": chunk_ms, "pad_to": pad_to}]);
        mock.script("fallback", &marker, step).await;
        let body = serde_json::json!({"kind": "summarize", "provider": "fallback",
                                      "input": {"text": marked_text(&marker)}});
        let job: Value = create_fresh(&api.http, &api.base, &token, &body, None)
            .await?
            .json()
            .await?;
        attempts.push((id(&job), id(&job["attempts"][0])));
    }
    let started = Instant::now();
    mock.release(&gate).await;
    api.wait_job_for(300, &token, &blocked, |j| {
        j["status"] != "queued" && j["status"] != "running"
    })
    .await;
    let (mut hub_opens, mut hand_offs) = (Vec::new(), Vec::new());
    for (job, attempt) in &attempts {
        let done = api
            .wait_job_for(300, &token, job, |j| {
                j["status"] != "queued" && j["status"] != "running"
            })
            .await;
        if done["status"] != "succeeded" || done["result"]["summary"] != summary {
            bail!("job {job} of the batch ended {done}");
        }
        let by = Instant::now() + Duration::from_secs(10);
        let line = line_of(log, "call_streamed", attempt, by).await?;
        hub_opens.push(line["hub_opens"].as_u64().unwrap_or_default());
        hand_offs.push(line["hand_offs"].as_u64().unwrap_or_default());
    }
    let seconds = started.elapsed().as_secs_f64();
    // The batch: the last one of `streams` messages (the blocker's had one), logged once
    // its deliveries have all ended.
    let by = Instant::now() + Duration::from_secs(10);
    let batch = loop {
        let found = events_of(log, "batch_consumed", "")
            .into_iter()
            .rfind(|b| b["messages"].as_u64() == Some(streams as u64));
        match found {
            Some(batch) => break batch,
            None if Instant::now() > by => bail!("no batch of {streams} messages in the log"),
            None => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    let n = |name: &str| batch[name].as_u64().unwrap_or_default();
    Ok(BatchCost {
        messages: n("messages"),
        subrequests: n("subrequests"),
        watch_reads: n("watch_reads"),
        hub_opens,
        hand_offs,
        chars: pad_to,
        seconds,
    })
}
