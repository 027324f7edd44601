//! The live job stream (`GET /v1/jobs/{id}/stream`) against the real Worker, its hubs
//! and the mock provider: every move pushed in order, resuming with `Last-Event-ID`,
//! the end of a stream, a lost notification, and the errors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use onceclick_tests::client::{id, marked_text, send, status_is, unique, Api, Mock};
use onceclick_tests::sse::{self, Item};
use serde_json::{json, Value};

const FAULT: &str = "X-Onceclick-Fault";

/// A `summarize` job whose call the mock holds at `gate`, created with `drop-enqueue`
/// so that it stays `queued` until the test dispatches it.
async fn held_job(api: &Api, mock: &Mock, token: &str, gate: &str) -> Value {
    let marker = unique("live");
    mock.script("primary", &marker, json!([{"gate": gate}]))
        .await;
    let body = json!({"kind": "summarize", "input": {"text": marked_text(&marker)}});
    let reply = send(
        api.create(token, Some(&unique("key")), &body.to_string())
            .header(FAULT, "drop-enqueue"),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    reply.json()
}

/// Sends the job's first attempt to the queue (the admin's dispatch), with `fault`.
async fn dispatch(api: &Api, job: &Value, fault: Option<&str>) {
    let attempt = id(&job["attempts"][0]);
    let mut rb = api.post_json(
        &api.admin_token("ops"),
        &format!("/v1/attempts/{attempt}/dispatch"),
        &json!({}),
    );
    if let Some(fault) = fault {
        rb = rb.header(FAULT, fault);
    }
    assert_eq!(send(rb).await.status, 202);
}

async fn get(api: &Api, token: &str, job_id: &str) -> Value {
    let reply = send(api.get(token, &format!("/v1/jobs/{job_id}"))).await;
    assert_eq!(reply.status, 200);
    reply.json()
}

#[tokio::test]
async fn every_move_reaches_the_stream_in_order_then_it_closes_and_resumes_exactly() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    let token = api.token("live");
    let gate = unique("gate");
    let job = held_job(&api, &mock, &token, &gate).await;
    let job_id = id(&job);

    let opened = sse::open(&api, Some(&token), &job_id, None).await;
    assert_eq!(opened.status, 200);
    assert_eq!(opened.content_type.as_deref(), Some("text/event-stream"));
    assert_eq!(opened.cache_control.as_deref(), Some("no-store"));
    let mut stream = opened.stream.unwrap();
    let mut seen = Vec::new();
    let (first_id, first) = stream.next_event().await.unwrap();
    assert_eq!(first["status"], "queued", "{first}");
    seen.push((first_id.clone(), first));

    dispatch(&api, &job, None).await;
    let (running_id, running) = stream.next_event().await.unwrap();
    assert_eq!(running["status"], "running", "{running}");
    seen.push((running_id.clone(), running));

    // Up to date: a second stream resuming at this change says it is live at once,
    // with a comment, and then gets what follows.
    let mut resumed = sse::follow(&api, Some(&token), &job_id, Some(&running_id)).await;
    assert_eq!(resumed.next().await, Some(Item::Comment("live".into())));

    mock.release(&gate).await;
    let (done_id, done) = stream.next_event().await.unwrap();
    assert_eq!(done["status"], "succeeded", "{done}");
    seen.push((done_id.clone(), done.clone()));
    assert_eq!(
        stream.next_event().await,
        None,
        "the stream ends after its settling change"
    );
    assert_eq!(resumed.next_event().await.unwrap().1, done);
    assert_eq!(resumed.next_event().await, None);

    // Positions only grow, and the last document is what GET answers.
    let positions: Vec<u64> = seen.iter().map(|(p, _)| sse::seq(p)).collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");
    assert_eq!(done, get(&api, &token, &job_id).await);

    // Resuming from each event: nothing seen again, the latest always arrives; from
    // the last, 204.
    for (position, _) in &seen[..seen.len() - 1] {
        let mut again = sse::follow(&api, Some(&token), &job_id, Some(position)).await;
        let (next_id, next) = again.next_event().await.unwrap();
        assert!(sse::seq(&next_id) > sse::seq(position));
        assert_eq!((next_id, next), (done_id.clone(), done.clone()));
        assert_eq!(again.next_event().await, None);
    }
    let ended = sse::open(&api, Some(&token), &job_id, Some(&done_id)).await;
    assert_eq!(ended.status, 204, "{:?}", ended.body);
    // Without a position, a settled job's stream is its document, then the end.
    let mut fresh = sse::follow(&api, Some(&token), &job_id, None).await;
    assert_eq!(fresh.next_event().await.unwrap().1, done);
    assert_eq!(fresh.next_event().await, None);
}

#[tokio::test]
async fn a_lost_notification_is_late_never_lost() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    let token = api.token("live-lost");
    let gate = unique("gate");
    let job = held_job(&api, &mock, &token, &gate).await;
    let job_id = id(&job);
    let mut stream = sse::follow(&api, Some(&token), &job_id, None).await;
    assert_eq!(stream.next_event().await.unwrap().1["status"], "queued");
    // The claim's notification is dropped: the hub's re-read brings `running`.
    dispatch(&api, &job, Some("notify:before")).await;
    let attempt = id(&job["attempts"][0]);
    let (_, running) = stream.next_event().await.unwrap();
    assert_eq!(running["status"], "running", "{running}");
    assert!(
        onceclick_tests::log::wait_fault_fired("notify", "before", &attempt).await,
        "the claim's notification was not dropped"
    );
    mock.release(&gate).await;
    let (_, done) = stream.next_event().await.unwrap();
    assert_eq!(done["status"], "succeeded");
    assert_eq!(stream.next_event().await, None);
}

// The hub heard the job fail; the new attempt's notification is lost. A stream opened
// then reads the job `running` itself: the hub's older, settled document must neither
// be sent nor end the stream (it did: the stream ended `failed` while the attempt ran).
#[tokio::test]
async fn a_stale_settled_document_from_the_hub_never_ends_a_newer_stream() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    api.ensure_certified("fallback").await;
    let token = api.token("live-stale");
    let marker = unique("live-stale");
    let gate = format!("{marker}-g");
    mock.script("primary", &marker, json!([{"status": 503}]))
        .await;
    mock.script("fallback", &marker, json!([{"gate": gate}]))
        .await;
    let body = json!({"kind": "summarize", "input": {"text": marked_text(&marker)}});
    let reply = send(api.create(&token, Some(&unique("key")), &body.to_string())).await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    let job_id = id(&reply.json());
    // The hub hears `failed`: a stream that follows it to its end.
    let mut first = sse::follow(&api, Some(&token), &job_id, None).await;
    let mut last = None;
    while let Some((_, doc)) = first.next_event().await {
        last = Some(doc);
    }
    assert_eq!(last.unwrap()["status"], "failed");

    let path = format!("/v1/jobs/{job_id}/attempts");
    let retried = send(
        api.post_json(&token, &path, &json!({"provider": "fallback"}))
            .header(FAULT, "notify:before"),
    )
    .await;
    assert_eq!(retried.status, 201, "{}", retried.text);
    assert!(
        onceclick_tests::log::wait_fault_fired("notify", "before", &path).await,
        "the new attempt's notification was not dropped"
    );
    // The dispatcher's claim (`running`) is told the hub with the same fault, and lost
    // too: once it fired, the store has the job running.
    let body = retried.json();
    let attempt = body["attempts"]
        .as_array()
        .and_then(|a| a.last())
        .map_or_else(|| id(&body), id);
    assert!(
        onceclick_tests::log::wait_fault_fired("notify", "before", &attempt).await,
        "the claim's notification was not dropped"
    );
    let mut stream = sse::follow(&api, Some(&token), &job_id, None).await;
    let (_, opened) = stream.next_event().await.unwrap();
    assert_eq!(
        opened["status"], "running",
        "the stream sent the hub's stale document: {opened}"
    );
    mock.release(&gate).await;
    let mut last = opened;
    while let Some((_, doc)) = stream.next_event().await {
        assert_ne!(doc["status"], "failed", "{doc}");
        last = doc;
    }
    assert_eq!(last["status"], "succeeded", "{last}");
}

#[tokio::test]
async fn a_cancel_reaches_the_stream_and_ends_it() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    let token = api.token("live-cancel");
    let gate = unique("gate");
    let job = held_job(&api, &mock, &token, &gate).await;
    let job_id = id(&job);
    let mut stream = sse::follow(&api, Some(&token), &job_id, None).await;
    assert_eq!(stream.next_event().await.unwrap().1["status"], "queued");
    dispatch(&api, &job, None).await;
    assert_eq!(stream.next_event().await.unwrap().1["status"], "running");
    let cancelled =
        send(api.post_json(&token, &format!("/v1/jobs/{job_id}/cancel"), &json!({}))).await;
    assert_eq!(cancelled.status, 200);
    let (_, last) = stream.next_event().await.unwrap();
    assert_eq!(last["status"], "cancelled", "{last}");
    assert_eq!(stream.next_event().await, None);
    assert_eq!(last, get(&api, &token, &job_id).await);
    mock.release(&gate).await;
}

// A client that claims a position ahead of the job's (a bug, or a store restored from
// a backup) gets nothing older than it claims: not the current document at open, and
// not the changes up to its claim afterwards, the settling one included.
#[tokio::test]
async fn a_position_ahead_of_the_jobs_gets_nothing_older_than_it_claims() {
    let api = Api::from_env();
    let token = api.token("live-ahead");
    let job = queued_job(&api, &token).await;
    let job_id = id(&job);
    let mut fresh = sse::follow(&api, Some(&token), &job_id, None).await;
    let (at, _) = fresh.next_event().await.unwrap();
    drop(fresh);
    let ahead = (sse::seq(&at) + 1000).to_string();
    let mut stream = sse::follow(&api, Some(&token), &job_id, Some(&ahead)).await;
    assert!(
        matches!(stream.next().await, Some(sse::Item::Comment(_))),
        "nothing changed after the claimed position: a comment, no event"
    );
    let cancelled =
        send(api.post_json(&token, &format!("/v1/jobs/{job_id}/cancel"), &json!({}))).await;
    assert_eq!(cancelled.status, 200);
    // The stream ends at its maximum duration (`LIVE_MAX_STREAM_MS`), having sent no
    // change: the cancel is older than what the client claims to have.
    assert_eq!(stream.next_event().await, None);
    let mut after = sse::follow(&api, Some(&token), &job_id, None).await;
    assert_eq!(after.next_event().await.unwrap().1["status"], "cancelled");
}

#[tokio::test]
async fn a_failure_that_fails_over_never_ends_the_stream() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    api.ensure_certified("fallback").await;
    let token = api.token("live-failover");
    let marker = unique("live-failover");
    mock.script("primary", &marker, json!([{"status": 500}]))
        .await;
    let body = json!({"kind": "summarize_hedged", "input": {"text": marked_text(&marker)}});
    let reply = send(
        api.create(&token, Some(&unique("key")), &body.to_string())
            .header(FAULT, "drop-enqueue"),
    )
    .await;
    assert_eq!(reply.status, 201);
    let job = reply.json();
    let mut stream = sse::follow(&api, Some(&token), &id(&job), None).await;
    dispatch(&api, &job, None).await;
    let mut statuses = Vec::new();
    while let Some((_, doc)) = stream.next_event().await {
        statuses.push(doc["status"].as_str().unwrap().to_owned());
        assert!(
            doc["status"] != "failed",
            "a failure that fails over looked final: {doc}"
        );
    }
    assert_eq!(
        statuses.last().map(String::as_str),
        Some("succeeded"),
        "{statuses:?}"
    );
}

#[tokio::test]
async fn a_stream_refuses_what_get_refuses_and_bad_positions() {
    let api = Api::from_env();
    let token = api.token("live-errors");
    let job = queued_job(&api, &token).await;
    let job_id = id(&job);

    let anonymous = sse::open(&api, None, &job_id, None).await;
    assert_eq!(anonymous.status, 401);
    let other = sse::open(&api, Some(&api.token("someone-else")), &job_id, None).await;
    assert_eq!(other.status, 404);
    assert!(other.body.unwrap().contains("\"code\":\"not_found\""));
    let missing = sse::open(
        &api,
        Some(&token),
        "job_00000000-0000-7000-8000-000000000000",
        None,
    )
    .await;
    assert_eq!(missing.status, 404);
    for bad in ["x", "-1", "07", "1.5", "99999999999999999999999"] {
        let refused = sse::open(&api, Some(&token), &job_id, Some(bad)).await;
        assert_eq!(refused.status, 400, "{bad:?}");
        assert!(
            refused
                .body
                .unwrap()
                .contains("\"code\":\"invalid_last_event_id\""),
            "{bad:?}"
        );
    }
    // Over the subscriber limit: `live_load.rs`, at the test Worker's 200.
    dispatch(&api, &job, None).await;
}

/// Reads events from a multi-job stream until `done` says every job is where the test
/// wants it, recording each job's events in order.
async fn read_until(stream: &mut sse::Stream, seen: &mut Seen, done: impl Fn(&Seen) -> bool) {
    while !done(seen) {
        let (position, doc) = stream
            .next_event()
            .await
            .expect("the stream ended before its jobs got there");
        seen.entry(id(&doc)).or_default().push((position, doc));
    }
}

fn last_status<'a>(seen: &'a Seen, job: &str) -> Option<&'a str> {
    seen.get(job)?.last()?.1["status"].as_str()
}

/// A `summarize` job that the mock answers at once, created with `drop-enqueue` so that
/// it stays `queued` until the test dispatches it.
async fn queued_job(api: &Api, token: &str) -> Value {
    let body = json!({"kind": "summarize", "input": {"text": marked_text(&unique("live"))}});
    let reply = send(
        api.create(token, Some(&unique("key")), &body.to_string())
            .header(FAULT, "drop-enqueue"),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    reply.json()
}

type Seen = std::collections::HashMap<String, Vec<(String, Value)>>;

#[tokio::test]
async fn one_stream_follows_several_jobs_each_from_its_own_position() {
    let api = Api::from_env();
    let token = api.token("live-many");
    let mut jobs = Vec::new();
    for _ in 0..3 {
        jobs.push(queued_job(&api, &token).await);
    }
    let ids: Vec<String> = jobs.iter().map(id).collect();
    // A fourth job, already settled: its document comes once, and the stream stays open
    // for the others.
    let gone_id = id(&queued_job(&api, &token).await);
    let cancelled =
        send(api.post_json(&token, &format!("/v1/jobs/{gone_id}/cancel"), &json!({}))).await;
    assert_eq!(cancelled.status, 200);

    let mut asked: Vec<(&str, Option<&str>)> = ids.iter().map(|j| (j.as_str(), None)).collect();
    asked.push((&gone_id, None));
    let opened = sse::open_many(&api, Some(&token), &asked).await;
    assert_eq!(opened.status, 200, "{:?}", opened.body);
    assert_eq!(opened.content_type.as_deref(), Some("text/event-stream"));
    assert_eq!(opened.cache_control.as_deref(), Some("no-store"));
    let mut stream = opened.stream.unwrap();
    let mut seen = Seen::new();
    read_until(&mut stream, &mut seen, |s| s.len() == 4).await;
    for job in &ids {
        assert_eq!(last_status(&seen, job), Some("queued"));
    }
    assert_eq!(last_status(&seen, &gone_id), Some("cancelled"));

    // The first job runs to the end; the stream stays open for the others.
    dispatch(&api, &jobs[0], None).await;
    read_until(&mut stream, &mut seen, |s| {
        last_status(s, &ids[0]) == Some("succeeded")
    })
    .await;
    // A reconnect names each job's position: the first settled and current, the second
    // current, the third behind (position 0: it gets its document again), the
    // cancelled one settled and current.
    let last = |s: &Seen, job: &str| s[job].last().unwrap().0.clone();
    let at = [
        last(&seen, &ids[0]),
        last(&seen, &ids[1]),
        "0".to_owned(),
        last(&seen, &gone_id),
    ];
    let resumed_ask: Vec<(&str, Option<&str>)> = vec![
        (&ids[0], Some(&at[0])),
        (&ids[1], Some(&at[1])),
        (&ids[2], Some(&at[2])),
        (&gone_id, Some(&at[3])),
    ];
    let mut resumed = sse::open_many(&api, Some(&token), &resumed_ask)
        .await
        .stream
        .unwrap();
    let (_, first) = resumed.next_event().await.unwrap();
    assert_eq!(
        id(&first),
        ids[2],
        "only the job behind comes first: {first}"
    );
    assert_eq!(first["status"], "queued");

    dispatch(&api, &jobs[1], None).await;
    dispatch(&api, &jobs[2], None).await;
    read_until(&mut stream, &mut seen, |s| {
        ids.iter().all(|j| last_status(s, j) == Some("succeeded"))
    })
    .await;
    assert_eq!(
        stream.next_event().await,
        None,
        "the stream ends when every job has"
    );
    for job in ids.iter().chain([&gone_id]) {
        let positions: Vec<u64> = seen[job].iter().map(|(p, _)| sse::seq(p)).collect();
        assert!(
            positions.windows(2).all(|w| w[0] < w[1]),
            "{job}: {positions:?}"
        );
        assert_eq!(seen[job].last().unwrap().1, get(&api, &token, job).await);
    }
    assert_eq!(seen[&gone_id].len(), 1, "the settled job came once");

    // The resumed stream: nothing it already had, the others' last changes.
    let mut again = Seen::new();
    again
        .entry(id(&first))
        .or_default()
        .push((String::new(), first));
    while let Some((position, doc)) = resumed.next_event().await {
        again.entry(id(&doc)).or_default().push((position, doc));
    }
    assert!(!again.contains_key(&gone_id));
    assert!(
        !again.contains_key(&ids[0]),
        "the settled, current job sent nothing"
    );
    for job in &ids[1..] {
        assert_eq!(last_status(&again, job), Some("succeeded"), "{job}");
        let docs: Vec<&Value> = again[job].iter().map(|(_, d)| d).collect();
        assert!(
            docs.windows(2).all(|w| w[0] != w[1]),
            "a change came twice: {docs:?}"
        );
    }
    // Every job's last change in hand: 204.
    let lasts: Vec<String> = ids
        .iter()
        .chain([&gone_id])
        .map(|j| last(&seen, j))
        .collect();
    let ended_ask: Vec<(&str, Option<&str>)> = ids
        .iter()
        .chain([&gone_id])
        .zip(&lasts)
        .map(|(j, p)| (j.as_str(), Some(p.as_str())))
        .collect();
    let ended = sse::open_many(&api, Some(&token), &ended_ask).await;
    assert_eq!(ended.status, 204, "{:?}", ended.body);
}

#[tokio::test]
async fn a_stream_of_several_jobs_refuses_a_bad_query_and_a_job_it_may_not_see() {
    let api = Api::from_env();
    let token = api.token("live-many-errors");
    let mine = id(&queued_job(&api, &token).await);
    let theirs = id(&queued_job(&api, &api.token("live-many-other")).await);

    let anonymous = sse::open_many(&api, None, &[(&mine, None)]).await;
    assert_eq!(anonymous.status, 401);
    let other = sse::open_many(&api, Some(&token), &[(&mine, None), (&theirs, None)]).await;
    assert_eq!(other.status, 404, "another owner's job among them");
    let problem: serde_json::Value = serde_json::from_str(&other.body.unwrap()).unwrap();
    assert_eq!(problem["code"], "not_found");
    assert_eq!(
        problem["job_id"],
        theirs.as_str(),
        "the refusal names the job: {problem}"
    );

    let many: Vec<String> = (0..21).map(|i| format!("{mine}{i}")).collect();
    // Each bad query, and the job its refusal names (where one job is at fault), so
    // that a client follows that one some other way and the rest live.
    let bad_queries = [
        (String::new(), None),
        (format!("job={mine}&job={mine}"), Some(mine.clone())),
        (format!("job={mine}:07"), Some(format!("{mine}:07"))),
        (format!("job={mine}:x"), Some(format!("{mine}:x"))),
        (format!("job={mine}&job=a%3Ab:7"), Some("a:b:7".to_owned())),
        ("job=:7".to_owned(), Some(":7".to_owned())),
        (format!("job={mine}&after=7"), None),
        (
            many.iter()
                .map(|j| format!("job={j}"))
                .collect::<Vec<_>>()
                .join("&"),
            None,
        ),
    ];
    for (query, named) in &bad_queries {
        let refused =
            sse::open_path(&api, Some(&token), &format!("/v1/stream?{query}"), None).await;
        assert_eq!(refused.status, 400, "{query:?}: {:?}", refused.body);
        let problem: serde_json::Value = serde_json::from_str(&refused.body.unwrap()).unwrap();
        assert_eq!(problem["code"], "invalid_query", "{query:?}");
        assert_eq!(
            problem["job_id"].as_str(),
            named.as_deref(),
            "{query:?}: {problem}"
        );
    }
}

#[tokio::test]
async fn a_hedged_jobs_stream_stays_open_until_the_loser_settles() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    api.ensure_certified("fallback").await;
    let token = api.token("live-hedge");
    let marker = unique("live-hedge");
    let (gate_primary, gate_hedge) = (format!("{marker}-p"), format!("{marker}-f"));
    mock.script("primary", &marker, json!([{"gate": gate_primary}]))
        .await;
    mock.script(
        "fallback",
        &marker,
        json!([{"gate": gate_hedge, "summary": "hedge"}]),
    )
    .await;
    let body = json!({"kind": "summarize_hedged", "input": {"text": marked_text(&marker)}});
    let reply = send(api.create(&token, Some(&unique("key")), &body.to_string())).await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    let job_id = id(&reply.json());
    let mut stream = sse::follow(&api, Some(&token), &job_id, None).await;
    mock.wait_calls(&marker, 2).await;
    // The hedge wins while the primary still runs: the job is succeeded, and its stream
    // stays open for the loser.
    mock.release(&gate_hedge).await;
    let won = loop {
        let (_, doc) = stream
            .next_event()
            .await
            .expect("the stream ended before the hedge won");
        if doc["status"] == "succeeded" {
            break doc;
        }
    };
    assert!(
        won["attempts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["state"] == "running" || a["state"] == "starting"),
        "the loser is still in flight when the winner is shown: {won}"
    );
    mock.release(&gate_primary).await;
    let mut last = won.clone();
    while let Some((_, doc)) = stream.next_event().await {
        last = doc;
    }
    assert_eq!(last["attempts"][0]["state"], "superseded", "{last}");
    assert_eq!(last["result"], won["result"], "the result never changes");
    assert_eq!(last, get(&api, &token, &job_id).await);
}

#[tokio::test]
async fn an_unknown_shows_on_the_stream_and_its_resolve_ends_it() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    let token = api.token("live-unknown");
    let marker = unique("live-unknown");
    // Longer than the test Worker's provider timeout: the attempt becomes `unknown`.
    mock.script("primary", &marker, json!([{"delay_ms": 30000}]))
        .await;
    let body = json!({"kind": "summarize", "input": {"text": marked_text(&marker)}});
    let reply = send(api.create(&token, Some(&unique("key")), &body.to_string())).await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    let job_id = id(&reply.json());
    let mut stream = sse::follow(&api, Some(&token), &job_id, None).await;
    let unknown = loop {
        let (_, doc) = stream
            .next_event()
            .await
            .expect("an unknown job's stream stays open");
        if doc["status"] == "unknown" {
            break doc;
        }
    };
    let att = unknown["attempts"][0]["id"].as_str().unwrap().to_owned();
    let resolved = send(api.post_json(
        &api.admin_token("ops"),
        &format!("/v1/attempts/{att}/resolve"),
        &json!({"outcome": "failed"}),
    ))
    .await;
    assert_eq!(resolved.status, 200, "{}", resolved.text);
    let (_, last) = stream
        .next_event()
        .await
        .expect("the resolve reaches the stream");
    assert_eq!(last["status"], "failed", "{last}");
    assert_eq!(
        stream.next_event().await,
        None,
        "failed, nothing in flight: the end"
    );
    assert_eq!(last, get(&api, &token, &job_id).await);
}

#[tokio::test]
async fn a_stream_ends_at_its_maximum_duration_and_resumes_where_it_was() {
    let api = Api::from_env();
    let token = api.token("live-max");
    // Queued until dispatched: the job does not move, and its stream would stay open.
    let job_id = id(&queued_job(&api, &token).await);
    let mut stream = sse::follow(&api, Some(&token), &job_id, None).await;
    let (position, first) = stream.next_event().await.unwrap();
    assert_eq!(first["status"], "queued");
    let opened = std::time::Instant::now();
    // The test Worker's LIVE_MAX_STREAM_MS is 8 s (the reader panics after 20 s of
    // silence, so an end that never comes fails the test).
    assert_eq!(
        stream.next_event().await,
        None,
        "the stream ends at its maximum"
    );
    assert!(
        opened.elapsed() >= std::time::Duration::from_secs(6),
        "it ended at its maximum duration, not before: {:?}",
        opened.elapsed()
    );
    let mut resumed = sse::follow(&api, Some(&token), &job_id, Some(&position)).await;
    assert_eq!(
        resumed.next().await,
        Some(Item::Comment("live".into())),
        "resumed where it was: nothing again, live at once"
    );
}

/// The deltas of one stream, in order: `(id, attempt_id, offset, text)`.
type Deltas = Vec<(String, String, u64, String)>;

/// Reads `stream` until `enough` says so or it ends, sorting its events into deltas and
/// job documents; `true` if the stream ended.
async fn read_text(
    stream: &mut sse::Stream,
    deltas: &mut Deltas,
    docs: &mut Vec<Value>,
    enough: impl Fn(&Deltas, &[Value]) -> bool,
) -> bool {
    while !enough(deltas, docs) {
        let Some((position, event, data)) = stream.next_typed().await else {
            return true;
        };
        match event.as_str() {
            "delta" => deltas.push((
                position,
                data["attempt_id"].as_str().unwrap().to_owned(),
                data["offset"].as_u64().unwrap(),
                data["text"].as_str().unwrap().to_owned(),
            )),
            "job" => docs.push(data),
            other => panic!("an event this test does not know: {other}"),
        }
    }
    false
}

/// Scripts the fallback to stream a summary `chunk_chars` code points at a time, one chunk
/// every `chunk_ms`; returns the content it writes.
async fn stream_from_fallback(
    mock: &Mock,
    marker: &str,
    summary: &str,
    chunk_chars: u32,
    chunk_ms: u32,
) -> String {
    let step = json!({"summary": summary, "chunk_chars": chunk_chars, "chunk_ms": chunk_ms});
    mock.script("fallback", marker, json!([step])).await;
    json!({"summary": summary, "sentiment": "neutral"}).to_string()
}

/// Opens the stream of `job_id`, reads it until `n` deltas came, and drops it: a
/// connection lost in the middle of the text. Panics if the job ended before.
async fn first_deltas(api: &Api, token: &str, job_id: &str, n: usize) -> Deltas {
    let mut first = sse::follow(api, Some(token), job_id, None).await;
    let (mut deltas, mut docs) = (Vec::new(), Vec::new());
    let ended = read_text(&mut first, &mut deltas, &mut docs, |d, _| d.len() >= n).await;
    assert!(!ended, "the stream ended before {n} deltas: {docs:?}");
    deltas
}

/// Each delta begins where the one before it ended, in code points, from `from`; its id
/// says attempt 1's text as far as it. The text they make.
fn joined(deltas: &[(String, String, u64, String)], from: u64) -> String {
    joined_of(1, deltas, from)
}

/// [`joined`], for attempt `n`.
fn joined_of(n: u32, deltas: &[(String, String, u64, String)], from: u64) -> String {
    let mut text = String::new();
    let mut at = from;
    for (position, _, offset, piece) in deltas {
        assert_eq!(*offset, at, "no gap and nothing twice: {deltas:?}");
        at += piece.chars().count() as u64;
        assert!(
            position.ends_with(&format!("/{n}:{at}")),
            "the id says how far the text came: {position} at {at}"
        );
        text.push_str(piece);
    }
    text
}

// Issue 25: a streamed answer's text reaches the job's streams as it is written, as
// `delta` events whose offsets count code points; a stream that reconnects with the
// last delta's id continues after exactly that chunk; one that comes late gets the text
// so far first. The winner's `job` event then carries the result.
#[tokio::test]
async fn a_streamed_answer_reaches_the_stream_as_it_is_written_and_resumes_after_its_last_chunk() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    let token = api.token("deltas");
    let marker = unique("deltas");
    let summary =
        "Café, 会议 and 😀: the meeting ran long, and the numbers came in above the forecast";
    let content = stream_from_fallback(&mock, &marker, summary, 3, 40).await;
    let job = api
        .create_job(&token, "summarize", &marked_text(&marker), Some("fallback"))
        .await;
    let job_id = id(&job);
    let attempt_id = id(&job["attempts"][0]);

    let deltas = first_deltas(&api, &token, &job_id, 3).await;
    let had = joined(&deltas, 0);

    // A late subscriber: the text so far in one piece (or more), then the rest.
    let mut late = sse::follow(&api, Some(&token), &job_id, None).await;
    let (mut late_deltas, mut late_docs) = (Vec::new(), Vec::new());
    // A reconnect with the last delta's id: the text after exactly that chunk.
    let last = deltas.last().unwrap().0.clone();
    let mut resumed = sse::follow(&api, Some(&token), &job_id, Some(&last)).await;
    let (mut rest, mut rest_docs) = (Vec::new(), Vec::new());
    let (late_ended, rest_ended) = tokio::join!(
        read_text(&mut late, &mut late_deltas, &mut late_docs, |_, _| false),
        read_text(&mut resumed, &mut rest, &mut rest_docs, |_, _| false),
    );
    assert!(late_ended && rest_ended);

    let had_chars = had.chars().count() as u64;
    assert_eq!(had.clone() + &joined(&rest, had_chars), content, "{rest:?}");
    assert!(
        late_deltas.first().is_some_and(|d| d.2 == 0),
        "a late stream starts at the text's start: {late_deltas:?}"
    );
    assert_eq!(joined(&late_deltas, 0), content);
    for (_, attempt, _, _) in deltas.iter().chain(&rest).chain(&late_deltas) {
        assert_eq!(attempt, &attempt_id);
    }
    for docs in [&rest_docs, &late_docs] {
        let done = docs.last().unwrap();
        assert_eq!(done["status"], "succeeded", "{done}");
        assert_eq!(done["result"]["summary"], summary);
    }
    let calls = mock.calls(&marker).await;
    assert_eq!(calls.len(), 1, "one call");
    // The text is dropped once the result is stored: a stream opened now has the
    // document alone.
    let mut after = sse::follow(&api, Some(&token), &job_id, None).await;
    let (mut none, mut settled) = (Vec::new(), Vec::new());
    assert!(read_text(&mut after, &mut none, &mut settled, |_, _| false).await);
    assert!(none.is_empty(), "{none:?}");
    assert_eq!(settled.len(), 1);
}

// Issue 25: a streamed call hands its text to the job's hub at most once per interval,
// however many chunks come meanwhile (each hand-off is a subrequest and an object
// request). A chunk every 5 ms: handing on each chunk as it came made one hand-off per
// chunk; spaced, each carries many.
#[tokio::test]
async fn a_streamed_call_hands_its_text_on_per_interval_not_per_chunk() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    let token = api.token("hand-offs");
    let marker = unique("hand-offs");
    // Shorter than the input text (the kind's rule), written one code point a chunk.
    let summary =
        "The numbers beat the forecast for the third time this year; the board asked twice.";
    let content = stream_from_fallback(&mock, &marker, summary, 1, 5).await;
    let job = api
        .create_job(&token, "summarize", &marked_text(&marker), Some("fallback"))
        .await;
    let attempt_id = id(&job["attempts"][0]);
    let done = api
        .wait_job(&token, &id(&job), |j| j["status"] == "succeeded")
        .await;
    assert_eq!(done["result"]["summary"], summary, "{done}");
    let line = onceclick_tests::log::wait_event("call_streamed", 10, |l| {
        l["attempt_id"] == attempt_id.as_str()
    })
    .await
    .expect("the call says what it handed on");
    let chunks = content.chars().count() as u64;
    assert_eq!(line["chars"], chunks, "{line}");
    let hand_offs = line["hand_offs"].as_u64().unwrap_or_default();
    assert!(
        hand_offs >= 1 && hand_offs * 4 <= chunks,
        "{hand_offs} hand-offs for {chunks} chunks 5 ms apart: {line}"
    );
    // No stream watched: the hub said so to every piece it answered (a piece tried again
    // after a slow answer is counted once more).
    let alone = line["alone"].as_u64().unwrap_or_default();
    assert!(alone >= 1 && alone + 1 >= hand_offs, "{line}");
}

// Issue 49: a call whose job no stream watches hands its text on at the slow pace, each
// piece answered "alone"; a stream that subscribes mid-answer pokes the call, which
// sends what it has at once and the rest at the watched pace. The stream has the whole
// text, no gap and nothing twice, and the live part of it in many pieces.
#[tokio::test]
async fn a_call_nobody_watches_hands_on_rarely_until_a_stream_subscribes() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    let token = api.token("alone");
    let marker = unique("alone");
    let summary =
        "The numbers beat the forecast for the third time this year; the board asked twice.";
    // About 120 code points, one every 40 ms: five seconds.
    let content = stream_from_fallback(&mock, &marker, summary, 1, 40).await;
    let job = api
        .create_job(&token, "summarize", &marked_text(&marker), Some("fallback"))
        .await;
    let (job_id, attempt_id) = (id(&job), id(&job["attempts"][0]));
    // An eighth of the answer has left the mock: the call has handed on, alone.
    let sent = |c: &Value| c["sent"].as_array().map_or(0, Vec::len);
    let call = mock.wait_call(&marker, |c| sent(c) >= 15).await;
    let first_ms = call["sent"][0][1].as_u64().unwrap();
    let mut stream = sse::follow(&api, Some(&token), &job_id, None).await;
    // How long the call had text before its job was watched (the mock's clock is this
    // machine's).
    let unwatched_ms = onceclick_tests::client::epoch_ms().saturating_sub(first_ms);
    let (mut deltas, mut docs) = (Vec::new(), Vec::new());
    assert!(read_text(&mut stream, &mut deltas, &mut docs, |_, _| false).await);
    assert_eq!(docs.last().unwrap()["status"], "succeeded", "{docs:?}");
    assert_eq!(joined(&deltas, 0), content, "{deltas:?}");
    let line = onceclick_tests::log::wait_event("call_streamed", 10, |l| {
        l["attempt_id"] == attempt_id.as_str()
    })
    .await
    .expect("the call's line");
    let (alone, hand_offs) = (
        line["alone"].as_u64().unwrap(),
        line["hand_offs"].as_u64().unwrap(),
    );
    // Unwatched, one piece per 500 ms: the first, one per interval, and one more while
    // the stream subscribed (one per 50 ms would be ten times as many).
    assert!(
        alone >= 1 && alone <= 3 + unwatched_ms / 500 && alone < hand_offs,
        "{alone} pieces answered alone in {unwatched_ms} ms unwatched: {line}"
    );
    assert!(line["pokes"].as_u64().unwrap() >= 1, "{line}");
    // The catch-up, then about 100 code points over 4 s: at the watched pace (one piece
    // per 50 ms, each chunk 40 ms apart) some 80 pieces, at the slow one at most 9.
    assert!(
        deltas.len() >= 20,
        "{} deltas after the stream subscribed: {deltas:?} {line}",
        deltas.len()
    );
}

/// Reads `stream` until a `job` event whose status is `status`: the deltas before it,
/// and that document.
async fn text_until(stream: &mut sse::Stream, status: &str) -> (Deltas, Value) {
    let (mut deltas, mut docs) = (Vec::new(), Vec::new());
    let there = |_: &Deltas, docs: &[Value]| docs.last().is_some_and(|d| d["status"] == status);
    let ended = read_text(stream, &mut deltas, &mut docs, there).await;
    assert!(
        !ended,
        "the stream ended before {status}: {deltas:?} {docs:?}"
    );
    (deltas, docs.pop().unwrap())
}

// Issue 25: a stream that reconnects once the hedge has won, while the primary still runs, gets
// the winner's text it lacks before the document that shows the win; one opened then
// gets all of it; neither gets text after that document.
#[tokio::test]
async fn a_stream_that_reconnects_after_the_hedge_won_gets_the_winners_last_words_first() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    api.ensure_certified("fallback").await;
    let token = api.token("tail");
    let marker = unique("tail");
    let gate_primary = format!("{marker}-p");
    let summary = "Ünïcode all the way: 会议 ran long, 😀 and the forecast held";
    mock.script("primary", &marker, json!([{"gate": gate_primary}]))
        .await;
    let content = stream_from_fallback(&mock, &marker, summary, 4, 30).await;
    let job = api
        .create_job(&token, "summarize_hedged", &marked_text(&marker), None)
        .await;
    let job_id = id(&job);

    let deltas = first_deltas(&api, &token, &job_id, 2).await;
    let had = joined_of(2, &deltas, 0);

    let won = api.wait_job(&token, &job_id, status_is("succeeded")).await;
    let hedge = won["attempts"][1].clone();
    assert_eq!(hedge["id"], won["completed_by"], "the hedge won: {won}");
    assert_eq!(
        won["attempts"][0]["state"], "running",
        "the primary still runs: {won}"
    );
    for (_, attempt, _, _) in &deltas {
        assert_eq!(attempt, hedge["id"].as_str().unwrap());
    }

    let last = deltas.last().unwrap().0.clone();
    let mut resumed = sse::follow(&api, Some(&token), &job_id, Some(&last)).await;
    let mut late = sse::follow(&api, Some(&token), &job_id, None).await;
    let ((rest, resumed_won), (all, late_won)) = tokio::join!(
        text_until(&mut resumed, "succeeded"),
        text_until(&mut late, "succeeded")
    );
    let had_chars = had.chars().count() as u64;
    assert_eq!(had + &joined_of(2, &rest, had_chars), content, "{rest:?}");
    assert_eq!(joined_of(2, &all, 0), content, "{all:?}");
    assert_eq!(resumed_won["result"]["summary"], summary);
    assert_eq!(late_won["completed_by"], hedge["id"]);

    // The loser is stopped; the streams end with it, and no text comes after the win.
    mock.release(&gate_primary).await;
    for stream in [&mut resumed, &mut late] {
        let (mut more, mut ending) = (Vec::new(), Vec::new());
        assert!(read_text(stream, &mut more, &mut ending, |_, _| false).await);
        assert!(more.is_empty(), "text after the win: {more:?}");
        assert_eq!(ending.last().unwrap()["attempts"][0]["state"], "superseded");
    }
}

// Issue 25: a stop while the answer streams closes the provider's connection before its
// stream is done, and no piece of text follows the document that says `cancelled`; the
// text before it has no gap. The dispatcher logs the stop with the code points it read
// and dropped (and whether the hub's refusal or its tick woke it: printed, not
// asserted, since either may come first).
#[tokio::test]
async fn a_stop_mid_stream_closes_the_providers_connection_and_no_text_follows_it() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    let token = api.token("stop-mid-stream");
    let marker = unique("stop-mid-stream");
    // The answer's JSON puts `sentiment` first: its summary begins at code point 34.
    let summary = "会议 😀 café: the meeting ran long, then the numbers, which came in \
                   above the forecast for the third quarter running";
    let content = stream_from_fallback(&mock, &marker, summary, 2, 100).await;
    let job = api
        .create_job(&token, "summarize", &marked_text(&marker), Some("fallback"))
        .await;
    let job_id = id(&job);
    let attempt_id = id(&job["attempts"][0]);

    let mut stream = sse::follow(&api, Some(&token), &job_id, None).await;
    let (mut deltas, mut docs) = (Vec::new(), Vec::new());
    let into_summary = |d: &Deltas, _: &[Value]| chars_of(d) >= 44;
    let ended = read_text(&mut stream, &mut deltas, &mut docs, into_summary).await;
    assert!(!ended, "the stream ended before 44 code points: {docs:?}");
    let cancelled =
        send(api.post_json(&token, &format!("/v1/jobs/{job_id}/cancel"), &json!({}))).await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.json());
    assert_eq!(cancelled.json()["status"], "cancelled");

    // The rest of the stream, in order, to its end (the job has settled).
    let mut rest = Vec::new();
    while let Some(event) = stream.next_typed().await {
        rest.push(event);
    }
    let at = rest
        .iter()
        .position(|(_, event, data)| event == "job" && data["status"] == "cancelled")
        .unwrap_or_else(|| panic!("no cancelled document on the stream: {rest:?}"));
    assert_eq!(
        at + 1,
        rest.len(),
        "the cancelled document ends it: {rest:?}"
    );
    for (position, event, data) in &rest[..at] {
        match event.as_str() {
            "delta" => deltas.push((
                position.clone(),
                data["attempt_id"].as_str().unwrap().to_owned(),
                data["offset"].as_u64().unwrap(),
                data["text"].as_str().unwrap().to_owned(),
            )),
            "job" => assert_eq!(data["status"], "running", "{data}"),
            other => panic!("an event this test does not know: {other}"),
        }
    }
    let shown = joined(&deltas, 0);
    assert!(
        content.starts_with(&shown) && shown.len() < content.len() && shown.contains('😀'),
        "the text shown is the start of the answer, not all of it: {shown:?}"
    );

    // The mock saw its connection closed before its stream was done (it records a close
    // only then), and was called once.
    let call = mock
        .wait_call(&marker, |call| call["closed_after_ms"].is_u64())
        .await;
    assert_eq!(call["stream"], true, "{call}");
    assert_eq!(mock.calls(&marker).await.len(), 1, "one call");
    let now = get(&api, &token, &job_id).await;
    assert_eq!(now["status"], "cancelled", "{now}");
    assert_eq!(now["attempts"][0]["state"], "cancelled", "{now}");
    assert_eq!(now["result"], Value::Null);
    let line = onceclick_tests::log::wait_event("call_stopped", 10, |l| {
        l["attempt_id"] == attempt_id.as_str()
    })
    .await
    .expect("the dispatcher logs the stop");
    println!("the stop: {line}");
    assert_eq!(line["reason"], "cancelled", "{line}");
    let read = line["streamed_chars"].as_u64().unwrap_or_default();
    let (shown, all) = (shown.chars().count() as u64, content.chars().count() as u64);
    assert!(
        shown <= read && read < all,
        "the stop read {read} code points: at least the {shown} shown, fewer than all {all}"
    );
}

/// The code points of `deltas`' text.
fn chars_of(deltas: &Deltas) -> usize {
    deltas.iter().map(|(_, _, _, t)| t.chars().count()).sum()
}

// Issue 25: a stream cut off after its first chunks, and one that stalls past the
// silence limit, each leave the attempt `unknown` (the provider did paid work) with its
// partial text kept: a stream opened then, as the ops page's, gets exactly the text the
// provider sent before it broke, and the document that says `unknown`. The operator's
// resolve with that text passes only if it keeps the kind's contract. (The hub holds
// text under a kilobyte in memory alone: this Worker's 4 s silence limit ends the stall
// well before an idle hub is evicted; docs/streaming.md, "Left open".)
#[tokio::test]
async fn an_unknown_streamed_attempt_keeps_its_partial_text() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    let token = api.token("partial");
    let summary = "Ünïcode 会议 😀: the meeting ran long and the numbers held";
    let mut jobs = Vec::new();
    for fault in ["cut", "stall"] {
        let marker = unique("partial");
        let step = json!({"summary": summary, "chunk_chars": 4, "chunk_ms": 20,
                          "stream_fault": fault, "fault_after": 12});
        mock.script("fallback", &marker, json!([step])).await;
        let job = api
            .create_job(&token, "summarize", &marked_text(&marker), Some("fallback"))
            .await;
        jobs.push((fault, job));
    }
    // 12 chunks of 4: the JSON up to its summary (34 code points), and `Ünïcode 会议 😀: `.
    let content = json!({"summary": summary, "sentiment": "neutral"}).to_string();
    let sent: String = content.chars().take(48).collect();
    assert!(sent.ends_with("😀: "), "{sent}");
    for (fault, job) in jobs {
        let job_id = id(&job);
        let unknown = api.wait_job(&token, &job_id, status_is("unknown")).await;
        assert_eq!(
            unknown["attempts"][0]["state"], "unknown",
            "{fault}: {unknown}"
        );
        let mut stream = sse::follow(&api, Some(&token), &job_id, None).await;
        let (mut deltas, mut docs) = (Vec::new(), Vec::new());
        let enough = |d: &Deltas, docs: &[Value]| {
            chars_of(d) >= 48 && docs.iter().any(|doc| doc["status"] == "unknown")
        };
        let read = read_text(&mut stream, &mut deltas, &mut docs, enough);
        let ended = tokio::time::timeout(std::time::Duration::from_secs(15), read)
            .await
            .unwrap_or_else(|_| panic!("{fault}: no partial text in 15 s: {deltas:?}"));
        assert!(
            !ended,
            "{fault}: the stream ended before its text: {docs:?}"
        );
        assert_eq!(
            joined(&deltas, 0),
            sent,
            "{fault}: the text sent before the break"
        );
        assert_eq!(docs.last().unwrap()["result"], Value::Null);

        // The operator resolves with that text, its JSON closed: it passes only if it
        // keeps the kind's contract. One that breaks it writes nothing.
        let admin = api.admin_token("ops");
        let resolve = format!("/v1/attempts/{}/resolve", id(&unknown["attempts"][0]));
        let mut result: Value = serde_json::from_str(&format!("{sent}\"}}")).unwrap();
        assert_eq!(result["summary"], "Ünïcode 会议 😀: ");
        result["confidence"] = json!(0.5);
        let body = json!({"outcome": "succeeded", "result": result});
        let refused = send(api.post_json(&admin, &resolve, &body)).await;
        assert_eq!(
            (refused.status, refused.problem_code().as_str()),
            (422, "contract_violation"),
            "{fault}: {}",
            refused.text
        );
        assert_eq!(
            get(&api, &token, &job_id).await,
            unknown,
            "{fault}: nothing written"
        );
        result.as_object_mut().unwrap().remove("confidence");
        let body = json!({"outcome": "succeeded", "result": result});
        let resolved = send(api.post_json(&admin, &resolve, &body)).await;
        assert_eq!(resolved.status, 200, "{fault}: {}", resolved.text);
        assert_eq!(resolved.json()["status"], "succeeded");
        assert_eq!(resolved.json()["result"], result);
        let (rest, done) = text_until(&mut stream, "succeeded").await;
        assert!(
            rest.is_empty(),
            "{fault}: no text after the resolve: {rest:?}"
        );
        assert_eq!(done["result"], result);
    }
}

/// A `summarize` job on the streaming fallback (scripted for `marker`), followed from
/// its creation and dispatched with `fault`: the job, and the deltas and documents its
/// stream sent until it ended.
async fn streamed_job(
    api: &Api,
    token: &str,
    marker: &str,
    fault: Option<&str>,
) -> (Value, Deltas, Vec<Value>) {
    let body = json!({"kind": "summarize", "input": {"text": marked_text(marker)},
                      "provider": "fallback"});
    let reply = send(
        api.create(token, Some(&unique("key")), &body.to_string())
            .header(FAULT, "drop-enqueue"),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    let job = reply.json();
    let mut stream = sse::follow(api, Some(token), &id(&job), None).await;
    dispatch(api, &job, fault).await;
    let (mut deltas, mut docs) = (Vec::new(), Vec::new());
    assert!(read_text(&mut stream, &mut deltas, &mut docs, |_, _| false).await);
    (job, deltas, docs)
}

// Issue 49 (issue 42, 6 before it): the job's hub cuts the call's connection at a
// piece mid-answer (`hand_off:before`), or forgets what it held there as an eviction
// would (`hub_reset:before`; `wrangler dev` cannot evict an object). The call opens
// another connection (a cut) or is told where the hub stands (a reset), and the stream
// gets the whole text as it is written: no gap, nothing twice. Returns the call's line.
async fn the_text_outlives(fault: &str, op: &str) -> Value {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    let token = api.token("hub-once");
    let marker = unique("hub-once");
    let content = stream_from_fallback(&mock, &marker, "above the forecast, again", 3, 40).await;
    let (job, deltas, docs) = streamed_job(&api, &token, &marker, Some(fault)).await;
    let attempt = id(&job["attempts"][0]);
    assert!(
        onceclick_tests::log::fault_fired(op, "before", &attempt),
        "the fault {fault} did not fire"
    );
    assert_eq!(docs.last().unwrap()["status"], "succeeded", "{docs:?}");
    assert_eq!(joined(&deltas, 0), content, "{deltas:?}");
    onceclick_tests::log::wait_event("call_streamed", 5, |l| l["attempt_id"] == attempt.as_str())
        .await
        .expect("the call's line")
}

#[tokio::test]
async fn a_connection_cut_mid_answer_is_opened_again_and_the_stream_has_all_the_text() {
    let line = the_text_outlives("hand_off:before", "hand_off").await;
    // The first connection, and the one after the cut.
    assert_eq!(line["hub_opens"], 2, "{line}");
}

#[tokio::test]
async fn a_hub_reset_mid_answer_is_sent_what_it_lost_and_the_stream_has_all_the_text() {
    let line = the_text_outlives("hub_reset:before", "hub_reset").await;
    // An evicted hub keeps its sockets: the same connection carries the rest.
    assert_eq!(line["hub_opens"], 1, "{line}");
}

// Issue 49: a long answer (20,000 code points) travels on one connection to its hub,
// whatever its length: its deltas join to the provider's content, and the call opened
// the hub once however many pieces it sent.
#[tokio::test]
async fn a_long_answer_goes_to_its_hub_on_one_connection() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    let token = api.token("long-answer");
    let marker = unique("long-answer");
    let summary = "the numbers came in above the forecast";
    let chars = 20_000;
    let step = json!({"summary": summary, "chunk_chars": 40, "chunk_ms": 5, "pad_to": chars});
    mock.script("fallback", &marker, json!([step])).await;
    let (job, deltas, docs) = streamed_job(&api, &token, &marker, None).await;
    let done = docs.last().unwrap();
    assert_eq!(done["status"], "succeeded", "{docs:?}");
    let text = joined(&deltas, 0);
    assert_eq!(text.chars().count(), chars, "the whole answer streamed");
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap()["summary"],
        summary
    );
    let attempt = id(&job["attempts"][0]);
    let line = onceclick_tests::log::wait_event("call_streamed", 5, |l| {
        l["attempt_id"] == attempt.as_str()
    })
    .await
    .expect("the call's line");
    assert_eq!(line["hub_opens"], 1, "{line}");
    assert!(
        line["hand_offs"].as_u64().unwrap() > 3,
        "many pieces: {line}"
    );
}

// Issue 42, 6: one job's hub will not subscribe. The stream of several jobs serves the
// others and names that one (an `unserved` event), which the client then polls (the
// whole stream was refused, 503).
#[tokio::test]
async fn a_stream_of_several_jobs_serves_the_others_when_one_hub_fails() {
    let api = Api::from_env();
    let token = api.token("hub-unserved");
    let (a, b) = (
        id(&queued_job(&api, &token).await),
        id(&queued_job(&api, &token).await),
    );
    let path = format!("/v1/stream?job={a}&job={b}");
    let opened = sse::open_with(&api, Some(&token), &path, &[(FAULT, "subscribe:before")]).await;
    assert_eq!(opened.status, 200, "{:?}", opened.body);
    let mut stream = opened.stream.unwrap();
    let mut unserved = None;
    let mut docs = Vec::new();
    while docs.len() < 2 {
        match stream.next().await.expect("the stream ended") {
            Item::Event { event, data, .. } if event == "unserved" => {
                unserved = Some(serde_json::from_str::<Value>(&data).unwrap());
            }
            Item::Event { event, data, .. } if event == "job" => {
                docs.push(serde_json::from_str::<Value>(&data).unwrap());
                if docs.len() == 1 {
                    // B moves: its hub pushes the change.
                    let cancelled =
                        send(api.post_json(&token, &format!("/v1/jobs/{b}/cancel"), &json!({})))
                            .await;
                    assert_eq!(cancelled.status, 200);
                }
            }
            _ => {}
        }
    }
    let unserved = unserved.expect("the job whose hub failed is named");
    assert_eq!(unserved["job_id"], a.as_str(), "{unserved}");
    assert_eq!(unserved["code"], "service_unavailable", "{unserved}");
    assert!(docs.iter().all(|d| d["id"] == b.as_str()), "{docs:?}");
    assert_eq!(docs[0]["status"], "queued");
    assert_eq!(docs[1]["status"], "cancelled");
    assert!(onceclick_tests::log::fault_fired(
        "subscribe",
        "before",
        "/v1/stream"
    ));
}

// Issue 42, 7: a stream whose client stops reading, over long texts. Its hub sockets'
// listener cuts it once the live frames waiting pass the Worker's bound (128 KiB here):
// it drops them and closes the stream's hub sockets itself (the old bound, counted in
// frames, was looked at only when the client read). Four jobs of about a megabyte each
// on one stream: more than the buffers between the Worker and a client that does not
// read can take (one megabyte was not always). The Worker stays healthy, and each job
// is still followed to its result.
#[tokio::test]
async fn a_stream_that_does_not_read_is_cut_at_its_bound_and_resumes() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    let token = api.token("no-reader");
    let marker = unique("no-reader");
    // About a megabyte of text a job, 16,384 code points to a chunk.
    let step = json!({"summary": "above the forecast", "pad_to": 1_000_000,
                      "chunk_chars": 16_384, "chunk_ms": 5});
    mock.script("fallback", &marker, json!([step])).await;
    let mut jobs = Vec::new();
    for n in 0..4 {
        let text = format!("{} ({n})", marked_text(&marker));
        let body = json!({"kind": "summarize", "input": {"text": text}, "provider": "fallback"});
        let reply = send(
            api.create(&token, Some(&unique("key")), &body.to_string())
                .header(FAULT, "drop-enqueue"),
        )
        .await;
        assert_eq!(reply.status, 201, "{}", reply.text);
        jobs.push(reply.json());
    }
    let ids: Vec<String> = jobs.iter().map(id).collect();
    let followed: Vec<(&str, Option<&str>)> = ids.iter().map(|j| (j.as_str(), None)).collect();
    let opened = sse::open_many(&api, Some(&token), &followed).await;
    assert_eq!(opened.status, 200, "{:?}", opened.body);
    let mut stream = opened.stream.unwrap();
    for _ in &ids {
        let (_, queued) = stream.next_event().await.unwrap();
        assert_eq!(queued["status"], "queued");
    }
    for job in &jobs {
        dispatch(&api, job, None).await;
    }
    // The client reads nothing while the texts come.
    let mut done = Vec::new();
    for job_id in &ids {
        done.push(api.wait_job(&token, job_id, status_is("succeeded")).await);
    }
    let cut = onceclick_tests::log::wait_event("stream_cut", 10, |line| {
        line["jobs"][0] == ids[0].as_str()
    })
    .await
    .expect("a stream that did not read was never cut");
    assert_eq!(cut["cause"], "the stream's reader fell behind", "{cut}");
    let max = cut["max_bytes"].as_u64().unwrap();
    assert!((131_072..140_000).contains(&max), "{cut}");
    assert!(cut["waiting_bytes"].as_u64().unwrap() > max, "{cut}");
    // Healthy: it answers at once.
    assert_eq!(get(&api, &token, &ids[0]).await, done[0]);
    // Reading again: what the buffers held, then the end; each job, followed again,
    // gives its result.
    while stream.next_typed().await.is_some() {}
    for (job_id, done) in ids.iter().zip(&done) {
        let mut again = sse::follow(&api, Some(&token), job_id, None).await;
        assert_eq!(&again.next_event().await.unwrap().1, done);
    }
}
