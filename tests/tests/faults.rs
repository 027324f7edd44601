//! The fault paths: a lost answer, a D1 write that fails or commits without its reply,
//! a crash between the claim and the provider call, a slow provider. Every test here
//! names a fault with `X-Onceclick-Fault: <store call>:<before|after>` (honoured only
//! by the test Worker, `ALLOW_FAULT_INJECTION=true`) or builds the state by hand, and
//! proves that one intent still ends in exactly one job, and nothing paid for is lost.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use onceclick_tests::client::marked_text as text;
use onceclick_tests::client::{id, send, status_is, unique, Api, Mock, Reply};
use onceclick_tests::{db, log};
use serde_json::{json, Value};

use onceclick_tests::client::FAULT_HEADER as FAULT;

/// Waits until the Worker has logged that the fault `op:when` fired on behalf of
/// `scope`: proof that a test exercised the path it names.
async fn fired(op: &str, when: &str, scope: &str) {
    assert!(
        log::wait_fault_fired(op, when, scope).await,
        "the fault {op}:{when} never fired for {scope}"
    );
}

fn body(marker: &str) -> String {
    json!({"kind": "summarize", "input": {"text": text(marker)}}).to_string()
}

fn attempt(job: &Value, n: usize) -> &Value {
    &job["attempts"][n - 1]
}

fn events_of(job_id: &str) -> i64 {
    db::count("SELECT count(*) FROM job_log WHERE job_id = ?1", job_id)
}

async fn job(api: &Api, token: &str, job_id: &str) -> Reply {
    send(api.get(token, &format!("/v1/jobs/{job_id}"))).await
}

/// Creates a job whose text carries `marker`, with `fault` armed; checks the 201.
async fn create_with_fault(api: &Api, token: &str, marker: &str, fault: &str) -> Value {
    let reply = api
        .create_marked(token, "summarize", marker, Some(fault))
        .await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    reply.json()
}

/// Creates a `summarize_hedged` job whose text carries `marker`, with `fault` armed if
/// given; checks the 201 and returns the job's id.
async fn create_hedged(api: &Api, token: &str, marker: &str, fault: Option<&str>) -> String {
    let reply = api
        .create_marked(token, "summarize_hedged", marker, fault)
        .await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    id(&reply.json())
}

/// Runs the reconciler until `done` holds for the job (at most 30 s): an attempt whose
/// dispatch was lost is re-sent once it has been `starting` for 1.5 s.
async fn reconcile_until(
    api: &Api,
    token: &str,
    job_id: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        api.run_cron().await;
        let current = job(api, token, job_id).await.json();
        if done(&current) {
            return current;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "job {job_id} did not get there: {current}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

// ---- lost answers and resends ------------------------------------------------------

#[tokio::test]
async fn a_resent_fallback_click_gets_the_attempt_the_first_send_made() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    let token = api.token("resend-click");
    let marker = unique("resend-click");
    mock.script(
        "primary",
        &marker,
        json!([{"status": 400}, {"gate": format!("{marker}-g")}]),
    )
    .await;
    let created = api
        .create_job(&token, "summarize", &text(&marker), None)
        .await;
    let job_id = id(&created);
    api.wait_job(&token, &job_id, status_is("failed")).await;
    let etag = job(&api, &token, &job_id)
        .await
        .header("etag")
        .unwrap()
        .to_owned();

    let path = format!("/v1/jobs/{job_id}/attempts");
    let click = unique("click");
    let request = || {
        api.post_json(&token, &path, &json!({"provider": "primary"}))
            .header("Idempotency-Key", &click)
            .header("If-Match", &etag)
    };
    let first = send(request()).await;
    assert_eq!(first.status, 201, "{}", first.text);
    assert_eq!(first.json()["n"], 2);
    // The answer was lost; the browser sends the very same request again.
    let again = send(request()).await;
    assert_eq!(again.status, 200, "{}", again.text);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.json()["id"], first.json()["id"]);
    assert_eq!(again.json()["n"], 2);

    // The same key asking for something else is a conflict, and writes nothing.
    let other = send(
        api.post_json(&token, &path, &json!({"provider": "fallback"}))
            .header("Idempotency-Key", &click),
    )
    .await;
    assert_eq!(other.status, 409, "{}", other.text);
    assert_eq!(other.problem_code(), "idempotency_key_reused");

    // Still the same attempt once the job has finished.
    mock.release(&format!("{marker}-g")).await;
    api.wait_job(&token, &job_id, status_is("succeeded")).await;
    let late = send(request()).await;
    assert_eq!(late.status, 200, "{}", late.text);
    assert_eq!(late.json()["id"], first.json()["id"]);
    assert_eq!(db::attempts_of(&job_id), 2);
}

#[tokio::test]
async fn the_quoted_and_bare_idempotency_key_name_the_same_job() {
    let api = Api::from_env();
    let token = api.token("sf-string");
    let key = unique("sf");
    let marker = unique("sf");
    let quoted = send(api.create(&token, Some(&format!("\"{key}\"")), &body(&marker))).await;
    assert_eq!(quoted.status, 201, "{}", quoted.text);
    let bare = send(api.create(&token, Some(&key), &body(&marker))).await;
    assert_eq!(bare.status, 200, "{}", bare.text);
    assert_eq!(bare.json()["id"], quoted.json()["id"]);
    assert_eq!(db::jobs_with_key(&key), 1);

    for bad in [
        format!("\"{key}"),
        format!("\"{key}\\x\""),
        format!("\"{key}\"x"),
    ] {
        let reply = send(api.create(&token, Some(&bad), &body(&marker))).await;
        assert_eq!(reply.status, 400, "{bad}: {}", reply.text);
        assert_eq!(reply.problem_code(), "idempotency_key_invalid");
    }
}

// ---- failed or half-done D1 writes ---------------------------------------------------

#[tokio::test]
async fn a_d1_failure_is_a_retryable_503_and_a_resend_converges_on_one_job() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    let token = api.token("d1-create");

    // Before it commits: 503, nothing written.
    let key = unique("key");
    let marker = unique("d1-before");
    let failed = send(
        api.create(&token, Some(&key), &body(&marker))
            .header(FAULT, "create_or_get_job:before"),
    )
    .await;
    assert_eq!(failed.status, 503, "{}", failed.text);
    assert_eq!(failed.problem_code(), "service_unavailable");
    assert_eq!(failed.header("retry-after"), Some("1"));
    assert_eq!(failed.json()["retryable"], true);
    assert_eq!(db::jobs_with_key(&key), 0, "nothing was written");
    fired("create_or_get_job", "before", "/v1/jobs").await;

    // A fault that names no store call is refused, not ignored.
    let misspelt = send(
        api.create(&token, Some(&key), &body(&marker))
            .header(FAULT, "create_or_get_jobs:before"),
    )
    .await;
    assert_eq!(misspelt.status, 400, "{}", misspelt.text);
    assert_eq!(db::jobs_with_key(&key), 0);

    // After it commits, with its reply lost: 503; the resend is the replay.
    let key = unique("key");
    let marker = unique("d1-after");
    let lost = send(
        api.create(&token, Some(&key), &body(&marker))
            .header(FAULT, "create_or_get_job:after"),
    )
    .await;
    assert_eq!(lost.status, 503, "{}", lost.text);
    assert_eq!(db::jobs_with_key(&key), 1, "the write had committed");
    let resent = send(api.create(&token, Some(&key), &body(&marker))).await;
    assert_eq!(resent.status, 200, "{}", resent.text);
    assert_eq!(resent.header("idempotent-replayed"), Some("true"));
    let job_id = id(&resent.json());
    // Its dispatch was never sent; the reconciler sends it, and it runs once.
    let done = reconcile_until(&api, &token, &job_id, |j| j["status"] == "succeeded").await;
    assert_eq!(done["attempts"].as_array().unwrap().len(), 1);
    assert_eq!(mock.calls(&marker).await.len(), 1);
}

#[tokio::test]
async fn a_claim_whose_reply_was_lost_still_calls_the_provider_once() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    let token = api.token("claim-lost");
    for fault in ["claim:after", "claim:before"] {
        let marker = unique("claim");
        let created = create_with_fault(&api, &token, &marker, fault).await;
        let done = api
            .wait_job(&token, &id(&created), status_is("succeeded"))
            .await;
        assert_eq!(attempt(&done, 1)["state"], "succeeded", "{fault}");
        let (op, when) = fault.split_once(':').unwrap();
        fired(op, when, attempt(&done, 1)["id"].as_str().unwrap()).await;
        let calls = mock.calls(&marker).await;
        assert_eq!(calls.len(), 1, "{fault}: exactly one provider call");
        assert_eq!(calls[0]["idempotency_key"], attempt(&done, 1)["id"]);
    }
}

#[tokio::test]
async fn a_failure_between_the_claim_and_the_call_fails_the_attempt_retryably() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    let token = api.token("prepare");
    let marker = unique("prepare");
    let created = create_with_fault(&api, &token, &marker, "dispatch_prepare:before").await;
    let job_id = id(&created);
    let failed = api
        .wait_job(&token, &job_id, |j| {
            j["status"] != "queued" && j["status"] != "running"
        })
        .await;
    assert_eq!(failed["status"], "failed", "not unknown: {failed}");
    let error = &attempt(&failed, 1)["error"];
    assert_eq!(error["code"], "dispatch_failed");
    assert_eq!(error["retryable"], true);
    assert!(
        mock.calls(&marker).await.is_empty(),
        "no provider was called"
    );
    fired(
        "dispatch_prepare",
        "before",
        attempt(&failed, 1)["id"].as_str().unwrap(),
    )
    .await;

    // Nothing is in doubt, so the fallback button works at once.
    let retry = send(api.post_json(
        &token,
        &format!("/v1/jobs/{job_id}/attempts"),
        &json!({"provider": "primary"}),
    ))
    .await;
    assert_eq!(retry.status, 201, "{}", retry.text);
    api.wait_job(&token, &job_id, status_is("succeeded")).await;
    assert_eq!(mock.calls(&marker).await.len(), 1);
}

#[tokio::test]
async fn a_result_survives_a_failed_write_and_a_lost_reply() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    let token = api.token("complete-faults");
    for fault in [
        "complete:before",
        "complete:after",
        "complete:before,complete:after",
    ] {
        let marker = unique("complete");
        let created = create_with_fault(&api, &token, &marker, fault).await;
        let done = api
            .wait_job(&token, &id(&created), status_is("succeeded"))
            .await;
        assert_eq!(done["completed_by"], attempt(&done, 1)["id"], "{fault}");
        assert_eq!(attempt(&done, 1)["state"], "succeeded", "{fault}");
        assert_eq!(mock.calls(&marker).await.len(), 1, "{fault}");
        for part in fault.split(',') {
            let (op, when) = part.split_once(':').unwrap();
            fired(op, when, attempt(&done, 1)["id"].as_str().unwrap()).await;
        }
    }
}

#[tokio::test]
async fn a_result_that_d1_keeps_refusing_is_recorded_through_the_queue() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    let token = api.token("complete-queue");
    let marker = unique("complete-queue");
    // More failures than one delivery tries: the result goes back to the queue.
    let faults = ["complete:before"; 8].join(",");
    let created = create_with_fault(&api, &token, &marker, &faults).await;
    let done = api
        .wait_job(&token, &id(&created), status_is("succeeded"))
        .await;
    assert_eq!(done["completed_by"], attempt(&done, 1)["id"]);
    assert_eq!(mock.calls(&marker).await.len(), 1, "the provider ran once");
    // Every try of the delivery failed; the write that took came from the queue.
    let att = attempt(&done, 1)["id"].as_str().unwrap().to_owned();
    fired("complete", "before", &att).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while log::faults_fired("complete", &att) < 8 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(log::faults_fired("complete", &att), 8);
}

#[tokio::test]
async fn a_result_resolves_an_attempt_the_reconciler_marked_unknown() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    let token = api.token("late-unknown");
    let marker = unique("late-unknown");
    let gate = format!("{marker}-g");
    mock.script("primary", &marker, json!([{"gate": gate}]))
        .await;
    let created = api
        .create_job(&token, "summarize", &text(&marker), None)
        .await;
    let job_id = id(&created);
    mock.wait_calls(&marker, 1).await;
    // The reconciler believes the dispatcher died: the call was long ago.
    let att = attempt(&created, 1)["id"].as_str().unwrap().to_owned();
    db::execute_with(
        "UPDATE attempts SET dispatched_at = '2000-01-01T00:00:00.000Z' WHERE id = ?1",
        &[&att],
    );
    let unknown = reconcile_until(&api, &token, &job_id, |j| j["status"] == "unknown").await;
    assert_eq!(attempt(&unknown, 1)["error"]["code"], "dispatcher_lost");
    mock.release(&gate).await;
    let done = api.wait_job(&token, &job_id, status_is("succeeded")).await;
    assert_eq!(
        attempt(&done, 1)["state"],
        "succeeded",
        "unknown → succeeded"
    );
    assert_eq!(done["completed_by"], att.as_str());
    assert!(done["result"]["summary"].is_string());
}

#[tokio::test]
async fn a_failure_while_starting_a_hedge_keeps_the_primary_call_and_its_answer() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    api.ensure_certified("fallback").await;
    let token = api.token("hedge-fault");
    let marker = unique("hedge-fault");
    let gate = format!("{marker}-g");
    mock.script("primary", &marker, json!([{"gate": gate}]))
        .await;
    let job_id = create_hedged(&api, &token, &marker, Some("insert_hedge:before")).await;
    // The hedge could not start, and said so.
    let events = api.wait_event(&token, &job_id, "failover_skipped").await;
    let skipped = events
        .iter()
        .find(|e| e["type"] == "failover_skipped")
        .unwrap();
    assert_eq!(skipped["details"]["for"], "hedge");
    fired(
        "insert_hedge",
        "before",
        skipped["attempt_id"].as_str().unwrap(),
    )
    .await;
    mock.release(&gate).await;
    let done = api.wait_job(&token, &job_id, status_is("succeeded")).await;
    assert_eq!(done["attempts"].as_array().unwrap().len(), 1);
    assert_eq!(
        done["completed_by"],
        attempt(&done, 1)["id"],
        "the primary's answer"
    );
    assert!(mock
        .calls(&marker)
        .await
        .iter()
        .all(|c| c["provider"] == "primary"));
}

#[tokio::test]
async fn a_hedge_left_starting_when_the_job_succeeds_never_calls_its_provider() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    api.ensure_certified("fallback").await;
    let token = api.token("hedge-stale");
    let admin = api.admin_token("ops");
    let marker = unique("hedge-stale");
    let gate = format!("{marker}-g");
    mock.script("primary", &marker, json!([{"gate": gate}]))
        .await;
    // The hedge is inserted, but the dispatcher never hears so: it stays `starting`.
    let job_id = create_hedged(&api, &token, &marker, Some("insert_hedge:after")).await;
    let hedged = api
        .wait_job(&token, &job_id, |j| {
            j["attempts"].as_array().unwrap().len() == 2
        })
        .await;
    assert_eq!(attempt(&hedged, 2)["state"], "starting");
    fired(
        "insert_hedge",
        "after",
        attempt(&hedged, 1)["id"].as_str().unwrap(),
    )
    .await;
    mock.release(&gate).await;
    let done = api.wait_job(&token, &job_id, status_is("succeeded")).await;
    assert_eq!(done["completed_by"], attempt(&done, 1)["id"]);
    assert_eq!(attempt(&done, 2)["state"], "superseded", "{done}");

    // A stale dispatch of the hedge (the reconciler's, or an operator's) calls nothing.
    let hedge = attempt(&done, 2)["id"].as_str().unwrap().to_owned();
    let again = send(api.post_json(
        &admin,
        &format!("/v1/attempts/{hedge}/dispatch"),
        &json!({}),
    ))
    .await;
    assert_eq!(again.status, 202, "{}", again.text);
    api.wait_event(&token, &job_id, "dispatch_ignored").await;
    api.run_cron().await;
    let calls = mock.calls(&marker).await;
    assert!(
        calls.iter().all(|c| c["provider"] == "primary"),
        "no call after the job was final: {calls:?}"
    );
    assert_eq!(calls.len(), 1);
}

// ---- contract edges ------------------------------------------------------------------

#[tokio::test]
async fn resolving_an_attempt_that_is_not_unknown_writes_nothing() {
    let api = Api::from_env();
    let token = api.token("resolve-nothing");
    let admin = api.admin_token("ops");
    let marker = unique("resolve-nothing");
    let created = api
        .create_job(&token, "summarize", &text(&marker), None)
        .await;
    let job_id = id(&created);
    let done = api.wait_job(&token, &job_id, status_is("succeeded")).await;
    let before = job(&api, &token, &job_id).await;
    let events = events_of(&job_id);
    let att = attempt(&done, 1)["id"].as_str().unwrap().to_owned();
    let resolve = format!("/v1/attempts/{att}/resolve");
    for outcome in [
        json!({"outcome": "succeeded", "result": done["result"]}),
        json!({"outcome": "failed"}),
        json!({"outcome": "cancelled"}),
    ] {
        let reply = send(api.post_json(&admin, &resolve, &outcome)).await;
        assert_eq!(reply.status, 409, "{outcome}: {}", reply.text);
        assert_eq!(reply.problem_code(), "attempt_not_unknown");
    }
    assert_eq!(events_of(&job_id), events, "no event");
    let after = job(&api, &token, &job_id).await;
    assert_eq!(
        after.header("etag"),
        before.header("etag"),
        "no ETag change"
    );
}

#[tokio::test]
async fn resolving_with_another_result_than_the_jobs_is_refused() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    api.ensure_certified("fallback").await;
    let token = api.token("resolve-other");
    let admin = api.admin_token("ops");
    let marker = unique("resolve-other");
    // The primary hangs past its timeout; the hedge wins; the primary ends `unknown`:
    // its dispatcher cannot read that the job was won (every watch read fails), so it
    // does not stop the call, which times out.
    mock.script("primary", &marker, json!([{"delay_ms": 30000}]))
        .await;
    mock.script("fallback", &marker, json!([{"summary": "the hedge"}]))
        .await;
    let blind = vec!["watch:before"; 40].join(",");
    let job_id = create_hedged(&api, &token, &marker, Some(&blind)).await;
    let done = api
        .wait_job(&token, &job_id, |j| {
            j["status"] == "succeeded" && j["attempts"][0]["state"] == "unknown"
        })
        .await;
    let att = attempt(&done, 1)["id"].as_str().unwrap().to_owned();
    let resolve = format!("/v1/attempts/{att}/resolve");
    let events = events_of(&job_id);
    let other = json!({"summary": "something else", "sentiment": "neutral"});
    let refused = send(api.post_json(
        &admin,
        &resolve,
        &json!({"outcome": "succeeded", "result": other}),
    ))
    .await;
    assert_eq!(refused.status, 409, "{}", refused.text);
    assert_eq!(refused.problem_code(), "job_finished");
    assert_eq!(events_of(&job_id), events, "nothing written");

    let same = send(api.post_json(
        &admin,
        &resolve,
        &json!({"outcome": "succeeded", "result": done["result"]}),
    ))
    .await;
    assert_eq!(same.status, 200, "{}", same.text);
    assert_eq!(attempt(&same.json(), 1)["state"], "superseded");
    assert_eq!(
        same.json()["result"],
        done["result"],
        "the result never changes"
    );
}

/// Sends raw bytes to the Worker and reads the status line of its answer. With
/// `finish: false` the connection stays open after the bytes, as a client still
/// uploading would: only a server that answers while the body streams answers at all.
async fn raw_status(api: &Api, request: Vec<u8>, finish: bool) -> Option<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let authority = api.base.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&authority).await.unwrap();
    // The Worker may answer (413) before it has read everything; that is the point.
    let _ = stream.write_all(&request).await;
    if finish {
        let _ = stream.shutdown().await;
    }
    let mut answer = vec![0u8; 4096];
    let n = tokio::time::timeout(std::time::Duration::from_secs(15), stream.read(&mut answer))
        .await
        .ok()?
        .ok()?;
    let head = String::from_utf8_lossy(&answer[..n]).into_owned();
    head.split(' ').nth(1).and_then(|s| s.parse().ok())
}

fn chunked_head(api: &Api, token: &str, key: &str) -> Vec<u8> {
    let authority = api.base.trim_start_matches("http://");
    format!(
        "POST /v1/jobs HTTP/1.1\r\nHost: {authority}\r\nAuthorization: Bearer {token}\r\n\
         Idempotency-Key: {key}\r\nContent-Type: application/json\r\n\
         Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    .into_bytes()
}

#[tokio::test]
async fn a_chunked_body_over_64_kib_is_refused_while_it_streams() {
    let api = Api::from_env();
    let token = api.token("chunked");
    let key = unique("chunked");
    let mut request = chunked_head(&api, &token, &key);
    let text = "x".repeat(70 * 1024);
    let payload = json!({"kind": "summarize", "input": {"text": text}}).to_string();
    for chunk in payload.as_bytes().chunks(4096) {
        request.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        request.extend_from_slice(chunk);
        request.extend_from_slice(b"\r\n");
    }
    // No last chunk: the body never ends. Buffering it whole would wait forever.
    assert_eq!(raw_status(&api, request, false).await, Some(413));
    assert_eq!(db::jobs_with_key(&key), 0, "nothing was written");
}

#[tokio::test]
async fn a_replay_is_answered_from_the_stored_job_after_the_config_changed() {
    let api = Api::from_env();
    let owner = "redeploy";
    let token = api.token(owner);
    // Jobs made under another deployment: a provider since removed, a primary since
    // moved down the list, a kind since retired. Written as that deployment would have.
    let cases = [
        ("summarize", Some("retired"), "retired"),
        ("summarize", None, "fallback"),
        ("summarize_v0", None, "primary"),
    ];
    for (kind, named, provider) in cases {
        let key = unique("redeploy");
        let input = json!({"text": format!("{key}: written by an older deploy.")});
        let fingerprint = onceclick_protocol::fingerprint(kind, &input, provider);
        let job_id = format!("job_{key}");
        db::execute_with(
            "INSERT INTO jobs (id, owner_id, idempotency_key, fingerprint, kind, input, provider,
                               status, version, created_at, updated_at, seq, doc_seq)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'failed', 1,
                     strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
                     1, 1)",
            &[
                &job_id,
                owner,
                &key,
                fingerprint.as_str(),
                kind,
                &input.to_string(),
                provider,
            ],
        );
        let mut request = json!({"kind": kind, "input": input});
        if let Some(p) = named {
            request["provider"] = json!(p);
        }
        let reply = send(api.create(&token, Some(&key), &request.to_string())).await;
        assert_eq!(reply.status, 200, "{kind} {named:?}: {}", reply.text);
        assert_eq!(reply.header("idempotent-replayed"), Some("true"));
        assert_eq!(reply.json()["id"], job_id.as_str());

        // The same key with another request is still a conflict.
        let mut other = request.clone();
        other["input"]["text"] = json!("another text");
        let reply = send(api.create(&token, Some(&key), &other.to_string())).await;
        assert_eq!(reply.status, 409, "{}", reply.text);
    }
}

#[tokio::test]
async fn numbers_are_read_exactly_and_fingerprint_as_sent() {
    let api = Api::from_env();
    let owner = "numbers";
    let token = api.token(owner);
    let key = unique("numbers");
    // Not a valid summarize input, so only the replay path reads it: it must compute
    // the very fingerprint a correct parser gives.
    let sent = r#"{"kind":"summarize","input":{"x":901.4274674687379}}"#;
    let input: Value = serde_json::from_str(r#"{"x":901.4274674687379}"#).unwrap();
    assert_eq!(input["x"].to_string(), "901.4274674687379");
    let fingerprint = onceclick_protocol::fingerprint("summarize", &input, "primary");
    let job_id = format!("job_{key}");
    db::execute_with(
        "INSERT INTO jobs (id, owner_id, idempotency_key, fingerprint, kind, input, provider,
                           status, version, created_at, updated_at, seq, doc_seq)
         VALUES (?1, ?2, ?3, ?4, 'summarize', ?5, 'primary', 'failed', 1,
                 strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
                 1, 1)",
        &[
            &job_id,
            owner,
            &key,
            fingerprint.as_str(),
            &input.to_string(),
        ],
    );
    let reply = send(api.create(&token, Some(&key), sent)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.json()["input"]["x"].to_string(), "901.4274674687379");
}

/// A job of `token`'s whose only attempt failed; returns its id and ETag.
async fn failed_job(api: &Api, mock: &Mock, token: &str) -> (String, String) {
    let marker = unique("if-match-9110");
    mock.script("primary", &marker, json!([{"status": 400}]))
        .await;
    let created = api
        .create_job(token, "summarize", &text(&marker), None)
        .await;
    let job_id = id(&created);
    api.wait_job(token, &job_id, status_is("failed")).await;
    let etag = job(api, token, &job_id)
        .await
        .header("etag")
        .unwrap()
        .to_owned();
    (job_id, etag)
}

/// The status of a fallback click on `job_id` with `If-Match: if_match`.
async fn click_with(api: &Api, token: &str, job_id: &str, if_match: &str) -> u16 {
    send(
        api.post_json(
            token,
            &format!("/v1/jobs/{job_id}/attempts"),
            &json!({"provider": "primary"}),
        )
        .header("If-Match", if_match),
    )
    .await
    .status
}

#[tokio::test]
async fn if_match_follows_rfc_9110() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    let token = api.token("if-match-9110");

    let (job_id, _) = failed_job(&api, &mock, &token).await;
    assert_eq!(
        click_with(&api, &token, &job_id, "*").await,
        201,
        "* matches any job"
    );
    let (job_id, etag) = failed_job(&api, &mock, &token).await;
    let list = format!("\"1\", {etag}");
    assert_eq!(
        click_with(&api, &token, &job_id, &list).await,
        201,
        "a list"
    );
    let (job_id, etag) = failed_job(&api, &mock, &token).await;
    let weak = format!("W/{etag}");
    assert_eq!(
        click_with(&api, &token, &job_id, &weak).await,
        412,
        "If-Match compares strongly"
    );
    assert_eq!(click_with(&api, &token, &job_id, &etag).await, 201);
}

#[tokio::test]
async fn the_etag_moves_only_when_the_document_does() {
    let api = Api::from_env();
    let token = api.token("etag-moves");
    let admin = api.admin_token("ops");
    let marker = unique("etag-moves");
    let created = api
        .create_job(&token, "summarize", &text(&marker), None)
        .await;
    let job_id = id(&created);
    api.wait_job(&token, &job_id, status_is("succeeded")).await;
    let etag = job(&api, &token, &job_id)
        .await
        .header("etag")
        .unwrap()
        .to_owned();
    let att = attempt(&created, 1)["id"].as_str().unwrap().to_owned();
    // A redelivered dispatch is logged (`dispatch_ignored`), and changes nothing.
    let again =
        send(api.post_json(&admin, &format!("/v1/attempts/{att}/dispatch"), &json!({}))).await;
    assert_eq!(again.status, 202);
    api.wait_event(&token, &job_id, "dispatch_ignored").await;
    let read = send(
        api.get(&token, &format!("/v1/jobs/{job_id}"))
            .header("If-None-Match", &etag),
    )
    .await;
    assert_eq!(read.status, 304, "no spurious change: {}", read.text);
    let weak = send(
        api.get(&token, &format!("/v1/jobs/{job_id}"))
            .header("If-None-Match", format!("W/{etag}")),
    )
    .await;
    assert_eq!(weak.status, 304, "If-None-Match compares weakly");
}

#[tokio::test]
async fn an_ambiguous_provider_answer_is_unknown_never_a_failover() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    api.ensure_certified("fallback").await;
    let token = api.token("ambiguous");
    for (step, code) in [
        (json!({"status": 504}), "provider_gateway_timeout"),
        (json!({"reply": "cut_off"}), "provider_answer_cut_off"),
    ] {
        let marker = unique("ambiguous");
        mock.script("primary", &marker, json!([step])).await;
        let created = api
            .create_job(&token, "summarize", &text(&marker), None)
            .await;
        let done = api
            .wait_job(&token, &id(&created), |j| {
                j["status"] != "queued" && j["status"] != "running"
            })
            .await;
        assert_eq!(done["status"], "unknown", "{code}: {done}");
        assert_eq!(attempt(&done, 1)["error"]["code"], code);
        assert_eq!(done["attempts"].as_array().unwrap().len(), 1, "no failover");
        assert!(mock
            .calls(&marker)
            .await
            .iter()
            .all(|c| c["provider"] == "primary"));
    }
}

// ---- retention and the clock ---------------------------------------------------------

#[tokio::test]
async fn retention_purges_idle_failed_jobs_in_chunks_and_never_an_unknown_one() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    let token = api.token("retention");
    let marker = unique("retention");
    mock.script("primary", &marker, json!([{"status": 400}]))
        .await;
    // Three failed jobs (more than one purge chunk in the test Worker) …
    let mut failed = Vec::new();
    for _ in 0..3 {
        let key = unique("retention-key");
        let reply = send(api.create(&token, Some(&key), &body(&format!("{marker}-f")))).await;
        assert_eq!(reply.status, 201, "{}", reply.text);
        let job_id = id(&reply.json());
        api.wait_job(&token, &job_id, status_is("failed")).await;
        failed.push((key, job_id));
    }
    // … and one that is unknown.
    let hang = unique("retention-hang");
    mock.script("primary", &hang, json!([{"delay_ms": 30000}]))
        .await;
    let unknown = api
        .create_job(&token, "summarize", &text(&hang), None)
        .await;
    let unknown_id = id(&unknown);
    api.wait_job(&token, &unknown_id, status_is("unknown"))
        .await;

    // Everything idle for 30 days.
    for job_id in failed.iter().map(|(_, j)| j).chain([&unknown_id]) {
        db::execute_with(
            "UPDATE jobs SET updated_at = '2000-01-01T00:00:00.000Z' WHERE id = ?1",
            &[job_id],
        );
    }
    api.run_cron().await;
    for (key, job_id) in &failed {
        assert_eq!(
            db::count("SELECT count(*) FROM jobs WHERE id = ?1", job_id),
            0,
            "the idle failed job was purged"
        );
        assert_eq!(
            db::count("SELECT count(*) FROM job_log WHERE job_id = ?1", job_id),
            0
        );
        assert_eq!(db::jobs_with_key(key), 0, "with its key");
    }
    assert_eq!(
        db::count("SELECT count(*) FROM jobs WHERE id = ?1", &unknown_id),
        1,
        "an unresolved unknown job is never purged"
    );
    // The key is free again: the same request now makes a new job.
    let (key, old) = &failed[0];
    let reply = send(api.create(&token, Some(key), &body(&format!("{marker}-f")))).await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    assert_ne!(id(&reply.json()), *old);
}

#[tokio::test]
async fn every_event_time_follows_its_sequence() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    api.ensure_certified("fallback").await;
    let token = api.token("clock");
    let marker = unique("clock");
    let gate = format!("{marker}-g");
    mock.script("primary", &marker, json!([{"gate": gate}]))
        .await;
    let job_id = create_hedged(&api, &token, &marker, None).await;
    api.wait_job(&token, &job_id, status_is("succeeded")).await;
    mock.release(&gate).await;
    api.wait_job(&token, &job_id, |j| {
        j["attempts"][0]["state"] == "superseded"
    })
    .await;
    let times = db::event_times(&job_id);
    assert!(times.len() >= 6, "{times:?}");
    let mut sorted = times.clone();
    sorted.sort();
    assert_eq!(times, sorted, "`at` never goes backwards against `seq`");
}
