//! A bounded load test of the live job stream, on loopback against the real Worker:
//! 200 subscribers on one job (the test Worker's `LIVE_MAX_SUBSCRIBERS`, so the next
//! one is refused), then 50 jobs with 4 subscribers each. Every subscriber follows its
//! job to the end as a client does, reconnecting from its position when the server
//! ends a stream early (at its maximum duration), and must see the final document
//! exactly once, after changes that only grow, ending equal to `GET`. The figures go to
//! RELIABILITY.md (`live_load`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use futures::future::join_all;
use onceclick_tests::client::{id, marked_text, send, unique, Api};
use onceclick_tests::sse::{self, Stream};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const FAULT: &str = "X-Onceclick-Fault";

/// Streams one job may have open in the test Worker (`LIVE_MAX_SUBSCRIBERS`).
const MAX_SUBSCRIBERS: usize = 200;

/// Jobs, and subscribers on each, of the second part.
const JOBS: usize = 50;
const PER_JOB: usize = 4;

/// How often one subscriber may reconnect before the test gives up on it: a stream
/// lasts 8 s in the test Worker, and the whole test takes far less than a minute.
const MAX_OPENS: u32 = 8;

/// A `summarize` job the mock answers at once, kept `queued` (`drop-enqueue`) until
/// the test dispatches it, so that its subscribers can all be open first.
async fn queued_job(api: &Api, token: &str) -> Value {
    let body = json!({"kind": "summarize", "input": {"text": marked_text(&unique("load"))}});
    let reply = send(
        api.create(token, Some(&unique("key")), &body.to_string())
            .header(FAULT, "drop-enqueue"),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    reply.json()
}

async fn dispatch(api: &Api, job: &Value) {
    let attempt = id(&job["attempts"][0]);
    let reply = send(api.post_json(
        &api.admin_token("ops"),
        &format!("/v1/attempts/{attempt}/dispatch"),
        &json!({}),
    ))
    .await;
    assert_eq!(reply.status, 202, "{}", reply.text);
}

/// One subscriber: its open stream and what it has seen, position by position.
struct Subscriber {
    job_id: String,
    stream: Option<Stream>,
    seen: Vec<(u64, Value)>,
    opens: u32,
    refused: u32,
    /// When its job's settling document arrived.
    settled_at: Option<Instant>,
}

/// Opens a stream on `job_id` and reads its first event.
async fn subscribe(api: &Api, token: &str, job_id: &str) -> Subscriber {
    let opened = sse::open(api, Some(token), job_id, None).await;
    assert_eq!(opened.status, 200, "{:?}", opened.body);
    let mut sub = Subscriber {
        job_id: job_id.to_owned(),
        stream: opened.stream,
        seen: Vec::new(),
        opens: 1,
        refused: 0,
        settled_at: None,
    };
    let first = sub.stream.as_mut().unwrap().next_event().await;
    let (position, doc) = first.expect("a first event: the job as it is");
    sub.take(&position, doc);
    sub
}

impl Subscriber {
    fn take(&mut self, position: &str, doc: Value) {
        let position = onceclick_tests::sse::seq(position);
        if let Some((last, _)) = self.seen.last() {
            assert!(
                position > *last,
                "{}: position {position} after {last}: a change twice, or out of order",
                self.job_id
            );
        }
        if is_settled(&doc) {
            self.settled_at = Some(Instant::now());
        }
        self.seen.push((position, doc));
    }

    /// Reads to the job's end, reconnecting from the last position whenever the server
    /// ends the stream before the job settled.
    async fn follow(mut self, api: &Api, token: &str) -> Self {
        loop {
            if let Some(mut stream) = self.stream.take() {
                while let Some((position, doc)) = stream.next_event().await {
                    self.take(&position, doc);
                }
            }
            if self.settled_at.is_some() {
                return self;
            }
            assert!(
                self.opens < MAX_OPENS,
                "{}: reconnected {} times",
                self.job_id,
                self.opens
            );
            let last = self.seen.last().map(|(p, _)| p.to_string());
            let opened = sse::open(api, Some(token), &self.job_id, last.as_deref()).await;
            match opened.status {
                200 => {
                    self.opens += 1;
                    self.stream = opened.stream;
                }
                // The stream it just left may still hold its place at the hub for a
                // moment: a client backs off and comes back.
                429 => {
                    self.refused += 1;
                    assert!(
                        self.refused < 100,
                        "{}: refused {} times",
                        self.job_id,
                        self.refused
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                status => panic!(
                    "{}: a reconnect from {last:?} answered {status} {:?}",
                    self.job_id, opened.body
                ),
            }
        }
    }
}

fn is_settled(doc: &Value) -> bool {
    serde_json::from_value::<onceclick_protocol::Job>(doc.clone())
        .expect("a job document")
        .is_settled()
}

/// Checks one subscriber's whole view, and returns its time from `from` to the job's
/// settling document, in milliseconds.
fn check(sub: &Subscriber, current: &Value, from: Instant) -> f64 {
    let settling: Vec<&(u64, Value)> = sub.seen.iter().filter(|(_, d)| is_settled(d)).collect();
    assert_eq!(
        settling.len(),
        1,
        "{}: the final document exactly once",
        sub.job_id
    );
    let (_, last) = sub.seen.last().unwrap();
    assert_eq!(
        last, current,
        "{}: the last document is what GET answers",
        sub.job_id
    );
    let at = sub.settled_at.unwrap();
    at.saturating_duration_since(from).as_secs_f64() * 1000.0
}

async fn current(api: &Api, token: &str, job_id: &str) -> Value {
    let reply = send(api.get(token, &format!("/v1/jobs/{job_id}"))).await;
    assert_eq!(reply.status, 200);
    reply.json()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[tokio::test]
async fn every_subscriber_of_a_crowded_job_and_of_many_jobs_sees_the_final_document_once() {
    let api = Api::from_env();
    let token = api.token("live-load");

    // Part 1: one job, as many subscribers as it may have, all open at once.
    let job = queued_job(&api, &token).await;
    let job_id = id(&job);
    let opening = Instant::now();
    let crowd = join_all((0..MAX_SUBSCRIBERS).map(|_| subscribe(&api, &token, &job_id))).await;
    let open_ms = opening.elapsed().as_secs_f64() * 1000.0;
    for sub in &crowd {
        assert_eq!(
            sub.seen[0].1["status"], "queued",
            "each hears the job as it is"
        );
    }
    let over = sse::open(&api, Some(&token), &job_id, None).await;
    assert_eq!(over.status, 429, "one over the limit: {:?}", over.body);
    assert!(over
        .body
        .unwrap()
        .contains("\"code\":\"too_many_subscribers\""));
    let moved = Instant::now();
    dispatch(&api, &job).await;
    let crowd = join_all(crowd.into_iter().map(|s| s.follow(&api, &token))).await;
    let doc = current(&api, &token, &job_id).await;
    assert_eq!(doc["status"], "succeeded");
    let mut crowd_ms: Vec<f64> = crowd.iter().map(|s| check(s, &doc, moved)).collect();
    crowd_ms.sort_by(f64::total_cmp);
    let crowd_reopens: u32 = crowd.iter().map(|s| s.opens - 1).sum();
    let crowd_refused: u32 = crowd.iter().map(|s| s.refused).sum();

    // Part 2: many jobs, a few subscribers each, all moving at once.
    let jobs = join_all((0..JOBS).map(|_| queued_job(&api, &token))).await;
    let ids: Vec<String> = jobs
        .iter()
        .flat_map(|job| std::iter::repeat_n(id(job), PER_JOB))
        .collect();
    let subs = join_all(ids.iter().map(|job_id| subscribe(&api, &token, job_id))).await;
    let moved_many = Instant::now();
    join_all(jobs.iter().map(|job| dispatch(&api, job))).await;
    let subs = join_all(subs.into_iter().map(|s| s.follow(&api, &token))).await;
    let mut docs = std::collections::HashMap::new();
    for job in &jobs {
        let job_id = id(job);
        let doc = current(&api, &token, &job_id).await;
        assert_eq!(doc["status"], "succeeded", "{job_id}");
        docs.insert(job_id, doc);
    }
    let mut many_ms: Vec<f64> = subs
        .iter()
        .map(|s| check(s, &docs[&s.job_id], moved_many))
        .collect();
    many_ms.sort_by(f64::total_cmp);
    let many_reopens: u32 = subs.iter().map(|s| s.opens - 1).sum();
    let many_refused: u32 = subs.iter().map(|s| s.refused).sum();

    onceclick_tests::report::write(
        "live_load",
        &json!({
            "store": std::env::var("ONCECLICK_STORE").unwrap_or_default(),
            "one_job_subscribers": crowd.len(),
            "one_job_open_all_ms": open_ms,
            "one_job_final_p50_ms": percentile(&crowd_ms, 0.5),
            "one_job_final_p99_ms": percentile(&crowd_ms, 0.99),
            "one_job_reconnects": crowd_reopens,
            "one_job_reconnects_refused": crowd_refused,
            "many_jobs": JOBS,
            "many_subscribers": subs.len(),
            "many_final_p50_ms": percentile(&many_ms, 0.5),
            "many_final_p99_ms": percentile(&many_ms, 0.99),
            "many_reconnects": many_reopens,
            "many_reconnects_refused": many_refused,
            "final_seen_exactly_once": crowd.len() + subs.len(),
        }),
    );
}
