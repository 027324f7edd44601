//! The fault matrix: every store call the API, the dispatcher and the reconciler make,
//! failed both ways — before it commits, and after it commits with its reply lost — in
//! a scenario that reaches it. For each cell the suite checks that the client got a
//! retryable error or the right answer, that retrying converged on the one job, that
//! no result a provider delivered was lost, and that no attempt was left `running` or
//! `unknown` without a provider call; and that the fault really fired (the Worker's
//! log). The matrix goes to RELIABILITY.md.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use futures::StreamExt;
use onceclick_tests::client::marked_text as text;
use onceclick_tests::client::{id, send, status_is, unique, Api, Mock};
use onceclick_tests::{db, log, report};
use serde_json::{json, Value};

use onceclick_tests::client::FAULT_HEADER as FAULT;
const WHENS: [&str; 2] = ["before", "after"];

type Verdict = Result<(), String>;

macro_rules! check {
    ($cond:expr, $($why:tt)+) => {
        if !$cond {
            return Err(format!($($why)+));
        }
    };
}

fn body(kind: &str, marker: &str) -> String {
    json!({"kind": kind, "input": {"text": text(marker)}}).to_string()
}

/// Every attempt of the job whose provider was never called is in a state that says
/// so (`starting`, `failed`, `cancelled`, `superseded`), never `running` or `unknown`.
async fn none_in_doubt_without_a_call(mock: &Mock, marker: &str, job: &Value) -> Verdict {
    let calls = mock.calls(marker).await;
    for attempt in job["attempts"].as_array().into_iter().flatten() {
        let called = calls
            .iter()
            .filter(|c| c["idempotency_key"] == attempt["id"])
            .count();
        check!(
            called <= 1,
            "attempt {} was called {called} times",
            attempt["id"]
        );
        let state = attempt["state"].as_str().unwrap_or_default();
        check!(
            called == 1 || !matches!(state, "running" | "unknown"),
            "attempt {} is {state} though no provider was called",
            attempt["id"]
        );
    }
    Ok(())
}

/// Waits until the fault fired (the Worker logs it), at most 10 s.
async fn fired(op: &str, when: &str, scope: &str) -> Verdict {
    check!(
        log::wait_fault_fired(op, when, scope).await,
        "the fault {op}:{when} never fired for {scope}"
    );
    Ok(())
}

/// Sends again while the answer is a 503, as a client does (the contract says it is
/// retryable): the faults here are one-shot, but a test's own write to the D1 file can
/// make the Worker's next write find the database busy. At most 10 tries.
async fn resend(make: impl Fn() -> reqwest::RequestBuilder) -> onceclick_tests::client::Reply {
    let mut tries = 1;
    loop {
        let reply = send(make()).await;
        if reply.status != 503 || tries == 10 {
            return reply;
        }
        tries += 1;
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

async fn reconcile(api: &Api, fault: Option<&str>) -> u16 {
    let mut rb = api.post_json(&api.admin_token("matrix-ops"), "/v1/_reconcile", &json!({}));
    if let Some(f) = fault {
        rb = rb.header(FAULT, f);
    }
    send(rb).await.status
}

/// Runs the reconciler until `done` holds for the job (at most 30 s).
async fn reconcile_until(
    api: &Api,
    token: &str,
    job_id: &str,
    done: impl Fn(&Value) -> bool,
) -> Result<Value, String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        reconcile(api, None).await;
        let job = send(api.get(token, &format!("/v1/jobs/{job_id}")))
            .await
            .json();
        if done(&job) {
            return Ok(job);
        }
        check!(
            std::time::Instant::now() < deadline,
            "job {job_id} never got there: {job}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// A job of `token`'s whose first attempt failed for good (the primary answered 400).
async fn failed_job(api: &Api, mock: &Mock, token: &str, marker: &str, then: Value) -> String {
    mock.script("primary", marker, json!([{"status": 400}, then]))
        .await;
    let job = api
        .create_job(token, "summarize", &text(marker), None)
        .await;
    let job_id = id(&job);
    api.wait_job(token, &job_id, status_is("failed")).await;
    job_id
}

async fn create_or_get_job(api: &Api, mock: &Mock, when: &str) -> Verdict {
    let token = api.token("matrix");
    let (key, marker) = (unique("matrix-key"), unique("matrix-create"));
    let first = send(
        api.create(&token, Some(&key), &body("summarize", &marker))
            .header(FAULT, format!("create_or_get_job:{when}")),
    )
    .await;
    check!(
        first.status == 503 && first.header("retry-after").is_some(),
        "first answer {} {}",
        first.status,
        first.text
    );
    fired("create_or_get_job", when, "/v1/jobs").await?;
    let again = resend(|| api.create(&token, Some(&key), &body("summarize", &marker))).await;
    let expected = if when == "before" { 201 } else { 200 };
    check!(
        again.status == expected,
        "resend answered {} {}",
        again.status,
        again.text
    );
    let rows = db::jobs_with_key(&key);
    check!(rows == 1, "{rows} jobs for one key");
    let job_id = id(&again.json());
    let done = reconcile_until(api, &token, &job_id, |j| j["status"] == "succeeded").await?;
    check!(
        mock.calls(&marker).await.len() == 1,
        "more than one provider call"
    );
    none_in_doubt_without_a_call(mock, &marker, &done).await
}

async fn job(api: &Api, _mock: &Mock, when: &str) -> Verdict {
    let token = api.token("matrix");
    let created = api
        .create_job(&token, "summarize", &text(&unique("matrix-read")), None)
        .await;
    let job_id = id(&created);
    let path = format!("/v1/jobs/{job_id}");
    let first = send(api.get(&token, &path).header(FAULT, format!("job:{when}"))).await;
    check!(first.status == 503, "first read answered {}", first.status);
    fired("job", when, &path).await?;
    let again = resend(|| api.get(&token, &path)).await;
    check!(
        again.status == 200 && id(&again.json()) == job_id,
        "reread answered {}",
        again.status
    );
    Ok(())
}

/// A job whose dispatch carries `fault`; it must still end `succeeded` with one call.
async fn dispatched(api: &Api, mock: &Mock, op: &str, when: &str, streamed: bool) -> Verdict {
    let token = api.token("matrix");
    let marker = unique(&format!("matrix-{op}"));
    let fault = format!("{op}:{when}");
    let reply = match streamed {
        false => {
            api.create_marked(&token, "summarize", &marker, Some(&fault))
                .await
        }
        // The fallback streams its answer, in pieces handed to the job's hub while the
        // fault waits at the claim or the completion.
        true => {
            let summary = "Streamed, piece by piece: the numbers came in above the forecast";
            mock.script(
                "fallback",
                &marker,
                json!([{"summary": summary, "chunk_chars": 4, "chunk_ms": 10}]),
            )
            .await;
            let body = json!({"kind": "summarize", "provider": "fallback",
                              "input": {"text": text(&marker)}});
            send(
                api.create(&token, Some(&unique("key")), &body.to_string())
                    .header(FAULT, &fault),
            )
            .await
        }
    };
    check!(reply.status == 201, "create answered {}", reply.status);
    let job_id = id(&reply.json());
    let done = api.wait_job(&token, &job_id, status_is("succeeded")).await;
    let att = id(&done["attempts"][0]);
    fired(op, when, &att).await?;
    check!(
        done["completed_by"] == att.as_str(),
        "the result is not the attempt's"
    );
    let calls = mock.calls(&marker).await;
    check!(calls.len() == 1, "more than one provider call");
    check!(
        calls[0]["stream"] == streamed,
        "the call streamed: {}, not {streamed}",
        calls[0]["stream"]
    );
    if streamed {
        check!(
            done["result"]["summary"]
                .as_str()
                .is_some_and(|s| s.starts_with("Streamed, piece by piece")),
            "the streamed answer is not the result: {done}"
        );
    }
    none_in_doubt_without_a_call(mock, &marker, &done).await
}

async fn move_attempt(api: &Api, mock: &Mock, when: &str) -> Verdict {
    let token = api.token("matrix");
    let marker = unique("matrix-move");
    mock.script("primary", &marker, json!([{"status": 400}]))
        .await;
    let reply = api
        .create_marked(
            &token,
            "summarize",
            &marker,
            Some(&format!("move_attempt:{when}")),
        )
        .await;
    check!(reply.status == 201, "create answered {}", reply.status);
    let job_id = id(&reply.json());
    let done = api.wait_job(&token, &job_id, status_is("failed")).await;
    let att = id(&done["attempts"][0]);
    fired("move_attempt", when, &att).await?;
    check!(
        done["attempts"][0]["error"]["code"] == "provider_rejected",
        "error: {}",
        done["attempts"][0]["error"]
    );
    check!(
        mock.calls(&marker).await.len() == 1,
        "more than one provider call"
    );
    none_in_doubt_without_a_call(mock, &marker, &done).await
}

async fn insert_attempt(api: &Api, mock: &Mock, when: &str) -> Verdict {
    let token = api.token("matrix");
    let marker = unique("matrix-click");
    let job_id = failed_job(api, mock, &token, &marker, json!({})).await;
    let path = format!("/v1/jobs/{job_id}/attempts");
    let key = unique("click");
    let click = || {
        api.post_json(&token, &path, &json!({"provider": "primary"}))
            .header("Idempotency-Key", &key)
    };
    let first = send(click().header(FAULT, format!("insert_attempt:{when}"))).await;
    check!(
        first.status == 503,
        "first click answered {} {}",
        first.status,
        first.text
    );
    fired("insert_attempt", when, &path).await?;
    let again = resend(click).await;
    let expected = if when == "before" { 201 } else { 200 };
    check!(
        again.status == expected,
        "resent click answered {} {}",
        again.status,
        again.text
    );
    check!(
        db::attempts_of(&job_id) == 2,
        "{} attempts",
        db::attempts_of(&job_id)
    );
    let done = reconcile_until(api, &token, &job_id, |j| j["status"] == "succeeded").await?;
    none_in_doubt_without_a_call(mock, &marker, &done).await
}

async fn insert_hedge(api: &Api, mock: &Mock, when: &str) -> Verdict {
    let token = api.token("matrix");
    let marker = unique("matrix-hedge");
    let gate = format!("{marker}-g");
    mock.script("primary", &marker, json!([{"gate": gate}]))
        .await;
    let reply = api
        .create_marked(
            &token,
            "summarize_hedged",
            &marker,
            Some(&format!("insert_hedge:{when}")),
        )
        .await;
    check!(reply.status == 201, "create answered {}", reply.status);
    let job_id = id(&reply.json());
    let att = id(&reply.json()["attempts"][0]);
    fired("insert_hedge", when, &att).await?;
    mock.release(&gate).await;
    let done = api.wait_job(&token, &job_id, status_is("succeeded")).await;
    check!(
        done["completed_by"] == att.as_str(),
        "the primary's answer was not recorded: {done}"
    );
    let done = api
        .wait_job(&token, &job_id, |j| {
            j["attempts"]
                .as_array()
                .into_iter()
                .flatten()
                .all(|a| a["state"] != "starting")
        })
        .await;
    none_in_doubt_without_a_call(mock, &marker, &done).await
}

async fn insert_failover(api: &Api, mock: &Mock, when: &str) -> Verdict {
    let token = api.token("matrix");
    let marker = unique("matrix-failover");
    mock.script("primary", &marker, json!([{"status": 500}]))
        .await;
    let reply = api
        .create_marked(
            &token,
            "summarize_hedged",
            &marker,
            Some(&format!("insert_failover:{when}")),
        )
        .await;
    check!(reply.status == 201, "create answered {}", reply.status);
    let job_id = id(&reply.json());
    let att = id(&reply.json()["attempts"][0]);
    fired("insert_failover", when, &att).await?;
    // Before: no failover was made, and the job says so (failed, retryable). After: the
    // failover attempt exists; its lost dispatch is sent by the reconciler.
    let done = reconcile_until(api, &token, &job_id, |j| {
        j["status"] == "succeeded"
            || (j["status"] == "failed" && j["attempts"].as_array().is_some_and(|a| a.len() == 1))
    })
    .await?;
    if when == "after" {
        check!(
            done["status"] == "succeeded",
            "the failover never ran: {done}"
        );
    }
    none_in_doubt_without_a_call(mock, &marker, &done).await
}

async fn cancel(api: &Api, mock: &Mock, when: &str) -> Verdict {
    let token = api.token("matrix");
    let marker = unique("matrix-cancel");
    let job_id = failed_job(api, mock, &token, &marker, json!({})).await;
    let path = format!("/v1/jobs/{job_id}/cancel");
    let first = send(
        api.post_json(&token, &path, &json!({}))
            .header(FAULT, format!("cancel:{when}")),
    )
    .await;
    check!(
        first.status == 503,
        "first cancel answered {}",
        first.status
    );
    fired("cancel", when, &path).await?;
    let again = resend(|| api.post_json(&token, &path, &json!({}))).await;
    check!(
        again.status == 200 && again.json()["status"] == "cancelled",
        "resend answered {} {}",
        again.status,
        again.text
    );
    let logged = db::count(
        "SELECT count(*) FROM job_events WHERE job_id = ?1 AND type = 'job_cancelled'",
        &job_id,
    );
    check!(logged == 1, "{logged} job_cancelled events");
    Ok(())
}

async fn resolve(api: &Api, mock: &Mock, when: &str) -> Verdict {
    let token = api.token("matrix");
    let admin = api.admin_token("matrix-ops");
    let marker = unique("matrix-resolve");
    mock.script("primary", &marker, json!([{"delay_ms": 30000}]))
        .await;
    let job = api
        .create_job(&token, "summarize", &text(&marker), None)
        .await;
    let job_id = id(&job);
    let unknown = api.wait_job(&token, &job_id, status_is("unknown")).await;
    let att = id(&unknown["attempts"][0]);
    let path = format!("/v1/attempts/{att}/resolve");
    let outcome = json!({"outcome": "failed"});
    let first = send(
        api.post_json(&admin, &path, &outcome)
            .header(FAULT, format!("move_attempt:{when}")),
    )
    .await;
    check!(
        first.status == 503,
        "first resolve answered {}",
        first.status
    );
    fired("move_attempt", when, &path).await?;
    let again = resend(|| api.post_json(&admin, &path, &outcome)).await;
    // Before: the resend resolves. After: it finds the work done (409, nothing written).
    let expected = if when == "before" { 200 } else { 409 };
    check!(
        again.status == expected,
        "resend answered {} {}",
        again.status,
        again.text
    );
    let now = send(api.get(&token, &format!("/v1/jobs/{job_id}")))
        .await
        .json();
    check!(
        now["attempts"][0]["state"] == "failed" && now["status"] == "failed",
        "job after: {now}"
    );
    Ok(())
}

async fn reconciler(api: &Api, mock: &Mock, op: &str, when: &str) -> Verdict {
    let token = api.token("matrix");
    let marker = unique(&format!("matrix-{op}"));
    let fault = format!("{op}:{when}");
    let (job_id, done): (String, fn(&Value) -> bool) = match op {
        // A dispatcher that died mid-call: the reconciler marks the attempt unknown.
        "reconcile" => {
            let gate = format!("{marker}-g");
            mock.script("primary", &marker, json!([{"gate": gate}]))
                .await;
            let job = api
                .create_job(&token, "summarize", &text(&marker), None)
                .await;
            mock.wait_calls(&marker, 1).await;
            let att = id(&job["attempts"][0]);
            db::execute_with(
                "UPDATE attempts SET dispatched_at = '2000-01-01T00:00:00.000Z' WHERE id = ?1",
                &[&att],
            );
            (id(&job), |j: &Value| j["status"] == "unknown")
        }
        // A failed job past retention: the reconciler purges it.
        "purge" => {
            let job_id = failed_job(api, mock, &token, &marker, json!({})).await;
            db::execute_with(
                "UPDATE jobs SET updated_at = '2000-01-01T00:00:00.000Z' WHERE id = ?1",
                &[&job_id],
            );
            (job_id, |j: &Value| j.is_null())
        }
        // A lost dispatch: the reconciler sends it again.
        _ => {
            let reply = api
                .create_marked(&token, "summarize", &marker, Some("drop-enqueue"))
                .await;
            tokio::time::sleep(std::time::Duration::from_millis(1600)).await;
            (id(&reply.json()), |j: &Value| j["status"] == "succeeded")
        }
    };
    let status = reconcile(api, Some(&fault)).await;
    check!(status == 503, "the faulty pass answered {status}");
    fired(op, when, "/v1/_reconcile").await?;
    // Right after the faulty pass (these cells run alone, so no other pass interferes):
    // a write that failed before it committed changed nothing; one whose reply was lost
    // did its work. `stuck_starting` only reads, so either way nothing was sent yet.
    let reply = send(api.get(&token, &format!("/v1/jobs/{job_id}"))).await;
    let now = if reply.status == 404 {
        Value::Null
    } else {
        reply.json()
    };
    let changed = match op {
        "reconcile" => now["attempts"][0]["state"] == "unknown",
        "purge" => now.is_null(),
        _ => now["attempts"][0]["state"] != "starting",
    };
    let expected = when == "after" && op != "stuck_starting";
    check!(
        changed == expected,
        "after the faulty pass ({when}) the job is {now}"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        reconcile(api, None).await;
        let reply = send(api.get(&token, &format!("/v1/jobs/{job_id}"))).await;
        let job = if reply.status == 404 {
            Value::Null
        } else {
            reply.json()
        };
        if done(&job) {
            if op == "reconcile" {
                mock.release(&format!("{marker}-g")).await;
                let after = api.wait_job(&token, &job_id, status_is("succeeded")).await;
                check!(
                    after["attempts"][0]["state"] == "succeeded",
                    "the late result was lost: {after}"
                );
            }
            if op == "stuck_starting" {
                check!(
                    mock.calls(&marker).await.len() == 1,
                    "more than one provider call"
                );
            }
            return Ok(());
        }
        check!(
            std::time::Instant::now() < deadline,
            "never converged: {job}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// The ETag of `(api, token, job_id)`'s job, if one is named.
async fn etag(job: Option<(&Api, &str, &str)>) -> Option<String> {
    let (api, token, job_id) = job?;
    send(api.get(token, &format!("/v1/jobs/{job_id}")))
        .await
        .header("etag")
        .map(str::to_owned)
}

/// A call that writes nothing (or only what a resend writes again, `save_certification`):
/// with the fault, a retryable 503 and nothing else changes in the job; the resend gets
/// the answer the request gets without a fault. `scope` is what the Worker's log names.
async fn answered_again(
    op: &str,
    when: &str,
    scope: &str,
    make: impl Fn() -> reqwest::RequestBuilder,
    expect: u16,
    unchanged: Option<(&Api, &str, &str)>,
) -> Result<onceclick_tests::client::Reply, String> {
    let before = etag(unchanged).await;
    let first = send(make().header(FAULT, format!("{op}:{when}"))).await;
    check!(
        first.status == 503 && first.header("retry-after").is_some(),
        "first answer {} {}",
        first.status,
        first.text
    );
    fired(op, when, scope).await?;
    check!(etag(unchanged).await == before, "the job changed");
    let again = resend(make).await;
    check!(
        again.status == expect,
        "the resend answered {} {}, not {expect}",
        again.status,
        again.text
    );
    check!(etag(unchanged).await == before, "the job changed");
    Ok(again)
}

/// The reads, and the writes whose only effect a resend repeats.
async fn read(api: &Api, mock: &Mock, op: &str, when: &str) -> Verdict {
    let token = api.token("matrix");
    let admin = api.admin_token("matrix-ops");
    let marker = unique(&format!("matrix-{op}"));
    let job = api
        .create_job(&token, "summarize", &text(&marker), None)
        .await;
    let job_id = id(&job);
    let done = api.wait_job(&token, &job_id, status_is("succeeded")).await;
    let att = id(&done["attempts"][0]);
    let unchanged = Some((api, token.as_str(), job_id.as_str()));
    match op {
        "ping" => {
            let health = || api.request(reqwest::Method::GET, "/v1/health", None);
            answered_again(op, when, "/v1/health", health, 200, None)
                .await
                .map(drop)
        }
        "events" => {
            let path = format!("/v1/jobs/{job_id}/events");
            answered_again(op, when, &path, || api.get(&token, &path), 200, unchanged)
                .await
                .map(drop)
        }
        // A request that no longer validates looks for the job its key names.
        "job_by_key" => {
            let key = unique("matrix-key");
            let retired = json!({"kind": "retired_kind", "input": {"text": "x"}}).to_string();
            let create = || api.create(&token, Some(&key), &retired);
            answered_again(op, when, "/v1/jobs", create, 422, None).await?;
            check!(db::jobs_with_key(&key) == 0, "a job was made");
            Ok(())
        }
        // A fallback click that no longer validates looks for the attempt its key made.
        "attempt_by_request" => {
            let path = format!("/v1/jobs/{job_id}/attempts");
            let click_key = unique("matrix-click");
            let click = || {
                api.post_json(&token, &path, &json!({"provider": "retired"}))
                    .header("Idempotency-Key", &click_key)
            };
            answered_again(op, when, &path, click, 422, unchanged)
                .await
                .map(drop)
        }
        "attempt_job" => {
            let path = format!("/v1/attempts/{att}/resolve");
            let resolve = || api.post_json(&admin, &path, &json!({"outcome": "failed"}));
            answered_again(op, when, &path, resolve, 409, unchanged)
                .await
                .map(drop)
        }
        "certifications" => {
            let providers = || api.get(&token, "/v1/providers");
            answered_again(op, when, "/v1/providers", providers, 200, None)
                .await
                .map(drop)
        }
        "save_certification" => {
            let path = "/v1/providers/fallback/certify";
            let certify = || api.post_json(&admin, path, &json!({}));
            // Certify answers 200 whatever its reports say: every report must pass.
            let again = answered_again(op, when, path, certify, 200, None).await?;
            let reports = again.json()["reports"].clone();
            let passed = reports
                .as_array()
                .is_some_and(|r| !r.is_empty() && r.iter().all(|r| r["passed"] == true));
            check!(passed, "the resent certification did not pass: {reports}");
            Ok(())
        }
        // The log of a redelivered dispatch (`dispatch_ignored`): log-only, so the job's
        // document, its attempt and its one provider call stay as they were.
        _ => {
            let path = format!("/v1/attempts/{att}/dispatch");
            let etag = send(api.get(&token, &format!("/v1/jobs/{job_id}")))
                .await
                .header("etag")
                .map(str::to_owned);
            let reply = send(
                api.post_json(&admin, &path, &json!({}))
                    .header(FAULT, format!("{op}:{when}")),
            )
            .await;
            check!(reply.status == 202, "redispatch answered {}", reply.status);
            fired(op, when, &att).await?;
            let after = send(api.get(&token, &format!("/v1/jobs/{job_id}"))).await;
            check!(
                after.header("etag").map(str::to_owned) == etag,
                "the job changed"
            );
            check!(
                after.json()["attempts"][0]["state"] == "succeeded",
                "the attempt moved"
            );
            check!(
                mock.calls(&marker).await.len() == 1,
                "a redelivery called the provider"
            );
            none_in_doubt_without_a_call(mock, &marker, &after.json()).await
        }
    }
}

async fn cell(api: &Api, mock: &Mock, op: &'static str, when: &'static str) -> Verdict {
    match op {
        "create_or_get_job" => create_or_get_job(api, mock, when).await,
        "job" => job(api, mock, when).await,
        "claim" | "complete" => dispatched(api, mock, op, when, false).await,
        // The same store calls on a streamed answer (the fault's name is the call's).
        "claim (streamed)" => dispatched(api, mock, "claim", when, true).await,
        "complete (streamed)" => dispatched(api, mock, "complete", when, true).await,
        "move_attempt" => move_attempt(api, mock, when).await,
        "insert_attempt" => insert_attempt(api, mock, when).await,
        "insert_hedge" => insert_hedge(api, mock, when).await,
        "insert_failover" => insert_failover(api, mock, when).await,
        "cancel" => cancel(api, mock, when).await,
        "resolve" => resolve(api, mock, when).await,
        "reconcile" | "purge" | "stuck_starting" => reconciler(api, mock, op, when).await,
        _ => read(api, mock, op, when).await,
    }
}

const OPS: [&str; 23] = [
    "create_or_get_job",
    "job",
    "claim",
    "complete",
    "claim (streamed)",
    "complete (streamed)",
    "move_attempt",
    "insert_attempt",
    "insert_hedge",
    "insert_failover",
    "cancel",
    "resolve",
    "reconcile",
    "purge",
    "stuck_starting",
    "ping",
    "events",
    "job_by_key",
    "attempt_by_request",
    "attempt_job",
    "certifications",
    "save_certification",
    "log_event",
];

#[tokio::test]
async fn every_store_call_survives_both_kinds_of_fault() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    api.ensure_certified("fallback").await;
    let started = std::time::Instant::now();
    let cells: Vec<_> = OPS
        .iter()
        .flat_map(|op| WHENS.iter().map(move |when| (*op, *when)))
        .collect();
    // Eight cells at a time: each scenario has its own job, marker and key. (Gated
    // provider calls must be released inside the test Worker's 4 s provider timeout, so
    // the machine must not be swamped.) The reconciler's cells then run one by one:
    // a pass is global, and another cell's pass would do their work for them.
    // `save_certification` too: it certifies `fallback` again, which the hedge and
    // failover cells need certified throughout.
    let runs_alone = |op: &str| {
        matches!(
            op,
            "reconcile" | "purge" | "stuck_starting" | "save_certification"
        )
    };
    let (alone, pooled): (Vec<_>, Vec<_>) = cells.into_iter().partition(|(op, _)| runs_alone(op));
    let mut results: Vec<(&str, &str, Verdict)> = futures::stream::iter(pooled)
        .map(|(op, when)| {
            let (api, mock) = (&api, &mock);
            async move { (op, when, cell(api, mock, op, when).await) }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    for (op, when) in alone {
        results.push((op, when, cell(&api, &mock, op, when).await));
    }
    let matrix: serde_json::Map<String, Value> = OPS
        .iter()
        .map(|op| {
            let row: serde_json::Map<String, Value> = results
                .iter()
                .filter(|(o, _, _)| o == op)
                .map(|(_, when, verdict)| {
                    let cell = match verdict {
                        Ok(()) => json!("held"),
                        Err(why) => json!(format!("broke: {why}")),
                    };
                    (when.to_string(), cell)
                })
                .collect();
            (op.to_string(), Value::Object(row))
        })
        .collect();
    let broke: Vec<String> = results
        .iter()
        .filter_map(|(op, when, v)| v.as_ref().err().map(|why| format!("{op}:{when}: {why}")))
        .collect();
    report::write(
        "faults",
        &json!({
            "cells": results.len(), "held": results.len() - broke.len(), "broke": broke.len(),
            "seconds": started.elapsed().as_secs_f64(), "matrix": matrix,
        }),
    );
    assert!(broke.is_empty(), "{broke:#?}");
}
