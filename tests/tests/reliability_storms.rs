//! Storms: many identical requests at once, again and again. 50 rounds of 100
//! concurrent creates with one key per round (100 until CI had to come back under 45
//! minutes: each round checks the same, and the crash suite and the simulation race
//! creates far more); then 100 concurrent fallback clicks on
//! one job (each click its own key), and 100 concurrent resends of one click (one key).
//! Everything must come out as exactly one job per key and one attempt per click, with
//! no 5xx.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use onceclick_tests::client::{id, send, status_is, unique, Api, Mock, Reply};
use onceclick_tests::{db, report};
use serde_json::json;
use std::collections::HashSet;

const ROUNDS: usize = 50;
const PER_ROUND: usize = 100;
const CLICKS: usize = 100;

/// Sends every request at once (each a spawned task, all started before any is
/// awaited) and collects the answers.
async fn all_at_once(requests: Vec<reqwest::RequestBuilder>) -> Vec<Reply> {
    let tasks: Vec<_> = requests
        .into_iter()
        .map(|rb| tokio::spawn(send(rb)))
        .collect();
    let mut replies = Vec::with_capacity(tasks.len());
    for task in tasks {
        replies.push(task.await.expect("request task"));
    }
    replies
}

#[tokio::test]
async fn storms_of_identical_requests_make_one_job_and_one_attempt_each() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    let token = api.token("storm");
    let started = std::time::Instant::now();
    let (mut requests, mut server_errors, mut duplicates) = (0usize, 0usize, 0usize);

    for round in 0..ROUNDS {
        let key = unique("storm-key");
        let body = json!({"kind": "summarize", "input": {"text": format!("storm round {round}: one intent.")}})
            .to_string();
        let replies = all_at_once(
            (0..PER_ROUND)
                .map(|_| api.create(&token, Some(&key), &body))
                .collect(),
        )
        .await;
        requests += replies.len();
        server_errors += replies.iter().filter(|r| r.status >= 500).count();
        let ids: HashSet<String> = replies
            .iter()
            .filter(|r| r.status < 300)
            .map(|r| id(&r.json()))
            .collect();
        let created = replies.iter().filter(|r| r.status == 201).count();
        let rows = db::jobs_with_key(&key);
        if ids.len() != 1 || created != 1 || rows != 1 {
            duplicates += 1;
            eprintln!(
                "round {round}: {} ids, {created} created, {rows} rows",
                ids.len()
            );
        }
    }

    // The fallback button, clicked 100 times at once on one failed job (each click its
    // own key), and one click resent 100 times at once on another (one key).
    let marker = unique("storm-clicks");
    // Each job's own marker (a script's steps are shared by every call that matches it):
    // the first call fails for good, the fallback's is held until its storm is counted
    // (well inside the provider's 4 s timeout).
    let failed_job = || async {
        let job_marker = format!("{marker} {}", unique("j"));
        let gate = format!("{job_marker}-g");
        mock.script(
            "primary",
            &job_marker,
            json!([{"status": 400}, {"gate": gate}]),
        )
        .await;
        let job = api
            .create_job(
                &token,
                "summarize",
                &format!("{job_marker}: clicked a hundred times."),
                None,
            )
            .await;
        let job_id = id(&job);
        api.wait_job(&token, &job_id, status_is("failed")).await;
        (job_id, gate)
    };
    let ((clicked, clicked_gate), (resent, resent_gate)) = (failed_job().await, failed_job().await);
    let click = |job_id: &str, key: String| {
        api.post_json(
            &token,
            &format!("/v1/jobs/{job_id}/attempts"),
            &json!({"provider": "primary"}),
        )
        .header("Idempotency-Key", key)
    };
    let clicks = all_at_once(
        (0..CLICKS)
            .map(|_| click(&clicked, unique("click")))
            .collect(),
    )
    .await;
    let clicked_attempts = db::attempts_of(&clicked);
    mock.release(&clicked_gate).await;
    let one_key = unique("click");
    let resends = all_at_once(
        (0..CLICKS)
            .map(|_| click(&resent, one_key.clone()))
            .collect(),
    )
    .await;
    let resent_attempts = db::attempts_of(&resent);
    mock.release(&resent_gate).await;
    requests += clicks.len() + resends.len();
    server_errors += clicks
        .iter()
        .chain(&resends)
        .filter(|r| r.status >= 500)
        .count();
    let made = clicks.iter().filter(|r| r.status == 201).count();
    let refused = clicks
        .iter()
        .filter(|r| r.status == 409 && r.problem_code() == "attempt_in_flight")
        .count();
    let first = resends.iter().filter(|r| r.status == 201).count();
    let replayed: HashSet<String> = resends
        .iter()
        .filter(|r| r.status == 200 && r.header("idempotent-replayed") == Some("true"))
        .map(|r| id(&r.json()))
        .collect();
    let replays = resends.iter().filter(|r| r.status == 200).count();
    for job_id in [&clicked, &resent] {
        api.wait_job(&token, job_id, status_is("succeeded")).await;
    }
    let calls = mock.calls(&marker).await;
    let keys: HashSet<&str> = calls
        .iter()
        .filter_map(|c| c["idempotency_key"].as_str())
        .collect();

    let double_attempts = usize::from(clicked_attempts != 2) + usize::from(resent_attempts != 2);
    report::write(
        "storms",
        &json!({
            "rounds": ROUNDS, "per_round": PER_ROUND, "clicks": CLICKS, "requests": requests,
            "server_errors": server_errors, "duplicate_jobs": duplicates,
            "double_attempts": double_attempts, "seconds": started.elapsed().as_secs_f64(),
        }),
    );
    assert_eq!(server_errors, 0, "no 5xx");
    assert_eq!(duplicates, 0, "one job per key in every round");
    assert_eq!(
        (made, refused),
        (1, CLICKS - 1),
        "one click made the attempt"
    );
    assert_eq!(
        (first, replays),
        (1, CLICKS - 1),
        "one click, resent, is one attempt"
    );
    assert_eq!(replayed.len(), 1, "every resend got the same attempt");
    assert_eq!(double_attempts, 0);
    assert_eq!(calls.len(), keys.len(), "one provider call per attempt");
}
