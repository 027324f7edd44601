//! `GET /v1/stats` against the real Worker: the figures move as the jobs do. One test in
//! its own binary, so that no test beside it moves the same counters; background work
//! left by earlier binaries (the reconciler, held calls ending) can only add, so each
//! figure is checked to have grown by at least what this test did.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use onceclick_tests::client::{id, marked_text, send, status_is, unique, Api, Mock};
use serde_json::{json, Value};

async fn stats(api: &Api, admin: &str) -> Value {
    let reply = send(api.get(admin, "/v1/stats?window_s=3600")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    reply.json()
}

fn at(v: &Value, path: &str) -> i64 {
    path.split('.')
        .fold(v, |v, k| &v[k])
        .as_i64()
        .unwrap_or_else(|| panic!("{path} is not a count in {v}"))
}

#[tokio::test]
async fn the_figures_follow_what_jobs_and_attempts_do() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    api.ensure_certified("fallback").await;
    let admin = api.admin_token("ops");
    let token = api.token(&unique("figures"));
    let before = stats(&api, &admin).await;

    // A job that succeeds, its replay, and a conflict on its key.
    let text = marked_text(&unique("figures-ok"));
    let body = json!({"kind": "summarize", "input": {"text": text}}).to_string();
    let key = unique("figures-key");
    let created = send(api.create(&token, Some(&key), &body)).await;
    assert_eq!(created.status, 201);
    let succeeded = api
        .wait_job(&token, &id(&created.json()), status_is("succeeded"))
        .await;
    assert_eq!(
        send(api.create(&token, Some(&key), &body)).await.status,
        200
    );
    let other =
        json!({"kind": "summarize", "input": {"text": format!("{text} (edited)")}}).to_string();
    assert_eq!(
        send(api.create(&token, Some(&key), &other)).await.status,
        409
    );

    // A job whose provider fails, then the fallback button: a retry that succeeds.
    let marker = unique("figures-fail");
    mock.script("primary", &marker, json!([{"status": 400}]))
        .await;
    let failing = api
        .create_job(&token, "summarize", &marked_text(&marker), None)
        .await;
    api.wait_job(&token, &id(&failing), status_is("failed"))
        .await;
    let retry = send(api.post_json(
        &token,
        &format!("/v1/jobs/{}/attempts", id(&failing)),
        &json!({"provider": "fallback"}),
    ))
    .await;
    assert_eq!(retry.status, 201, "{}", retry.text);
    let retried = api
        .wait_job(&token, &id(&failing), status_is("succeeded"))
        .await;
    // Each answer's attempt carries the tokens its provider stated (the mock: a token
    // per four characters), the whole answer's (primary) and the streamed one's
    // (fallback, from its usage chunk); the failed attempt, none.
    let stated = |job: &Value, n: usize| -> i64 {
        let tokens = &job["attempts"][n]["tokens"];
        let (p, c) = (at(tokens, "prompt"), at(tokens, "completion"));
        assert!(p > 0 && c > 0, "{job}");
        p + c
    };
    let paid = stated(&succeeded, 0) + stated(&retried, 1);
    assert_eq!(retried["attempts"][0]["tokens"], Value::Null, "{retried}");

    // A job whose provider hangs past its timeout: unknown.
    let marker = unique("figures-hang");
    mock.script("primary", &marker, json!([{"delay_ms": 30000}]))
        .await;
    let hung = api
        .create_job(&token, "summarize", &marked_text(&marker), None)
        .await;
    api.wait_job(&token, &id(&hung), status_is("unknown")).await;

    let after = stats(&api, &admin).await;
    let grew = |path: &str| at(&after["totals"], path) - at(&before["totals"], path);
    for (path, least) in [
        ("jobs_created", 3),
        ("replays", 1),
        ("conflicts", 1),
        ("attempts.succeeded", 2),
        ("attempts.failed", 1),
        ("attempts.unknown", 1),
        ("retries_started", 1),
        ("latency_ms.answered", 3),
        ("tokens", paid),
    ] {
        assert!(
            grew(path) >= least,
            "{path} grew by {}, not {least}: {after}",
            grew(path)
        );
    }
    assert!(
        after["totals"]["latency_ms"]["p50"].is_u64(),
        "a p50 from the histogram: {after}"
    );
    assert!(after["totals"]["latency_ms"]["p99"].is_u64());

    // By kind and provider: the fallback's success is the fallback's.
    let fallback = after["by_kind_and_provider"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "summarize" && f["provider"] == "fallback")
        .expect("summarize on fallback");
    assert!(at(fallback, "attempts.succeeded") >= 1);
    assert!(at(fallback, "retries_started") >= 1);

    // Only for admins, and only a window the counters can answer.
    assert_eq!(send(api.get(&token, "/v1/stats")).await.status, 403);
    for bad in [
        "/v1/stats?window_s=5",
        "/v1/stats?window_s=99999999",
        "/v1/stats?since=1",
    ] {
        let reply = send(api.get(&admin, bad)).await;
        assert_eq!(
            (reply.status, reply.problem_code().as_str()),
            (400, "invalid_query"),
            "{bad}"
        );
    }
}
