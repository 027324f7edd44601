//! Creating, replaying and reading jobs against the real Worker on local D1.
//! Run with `cargo xtask test`, which starts `wrangler dev` and sets the environment.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use onceclick_tests::client::{send, status_is, unique, Api};
use onceclick_tests::db;
use serde_json::{json, Value};

fn body(text: &str) -> String {
    json!({"kind": "summarize", "input": {"text": text}}).to_string()
}

/// "round trips=N" out of the Server-Timing header: on D1 its one `d1` metric; sharded,
/// the sum over its metrics, one per shard called, each named after its shard (`s8.3`).
fn round_trips(reply: &onceclick_tests::client::Reply) -> u32 {
    let timing = reply.header("server-timing").expect("Server-Timing header");
    let sharded = std::env::var("ONCECLICK_STORE").is_ok_and(|s| s == "durable");
    for metric in timing.split(", ") {
        let named = if sharded {
            metric.starts_with("s8.")
        } else {
            metric.starts_with("d1;dur=")
        };
        assert!(named, "{timing}");
    }
    onceclick_tests::probe::server_timing_round_trips(timing)
        .unwrap_or_else(|| panic!("no round trips in {timing}"))
}

#[tokio::test]
async fn create_then_replay_returns_the_same_job() {
    let api = Api::from_env();
    let token = api.token("alice");
    let key = unique("replay");

    let created = send(api.create(
        &token,
        Some(&key),
        &body("The meeting ran long but ended with a plan."),
    ))
    .await;
    assert_eq!(created.status, 201, "{}", created.text);
    let job = created.json();
    let id = job["id"].as_str().unwrap();
    assert!(id.starts_with("job_"), "{id}");
    assert_eq!(
        created.header("location"),
        Some(format!("/v1/jobs/{id}").as_str())
    );
    assert_eq!(created.header("idempotent-replayed"), None);
    assert!(created.header("etag").is_some());
    assert_eq!(job["kind"], "summarize");
    assert_eq!(job["provider"], "primary");
    assert_eq!(job["version"], 1);
    assert_eq!(job["result"], Value::Null);
    let attempts = job["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0]["n"], 1);
    assert!(attempts[0]["id"].as_str().unwrap().starts_with("att_"));
    assert_eq!(round_trips(&created), 1);

    let replay = send(api.create(
        &token,
        Some(&key),
        &body("The meeting ran long but ended with a plan."),
    ))
    .await;
    assert_eq!(replay.status, 200, "{}", replay.text);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.json()["id"], id);
    assert_eq!(replay.json()["attempts"].as_array().unwrap().len(), 1);
    assert_eq!(round_trips(&replay), 1);

    assert_eq!(db::jobs_with_key(&key), 1);
    assert_eq!(db::attempts_of(id), 1);
}

#[tokio::test]
async fn fifty_simultaneous_posts_with_one_key_make_one_job() {
    let api = Api::from_env();
    let token = api.token("racer");
    let key = unique("fifty");
    let text = body("Fifty clicks, one intention.");
    // All fifty are in flight at once: each is a spawned task started before any is awaited.
    let tasks: Vec<_> = (0..50)
        .map(|_| tokio::spawn(send(api.create(&token, Some(&key), &text))))
        .collect();
    let mut replies = Vec::new();
    for t in tasks {
        replies.push(t.await.unwrap());
    }
    let ids: std::collections::HashSet<String> = replies
        .iter()
        .map(|r| r.json()["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 1, "one job id in every response: {ids:?}");
    let created = replies.iter().filter(|r| r.status == 201).count();
    let replayed = replies
        .iter()
        .filter(|r| r.status == 200 && r.header("idempotent-replayed") == Some("true"))
        .count();
    assert_eq!((created, replayed), (1, 49));
    assert_eq!(db::jobs_with_key(&key), 1);
    let id = ids.into_iter().next().unwrap();
    assert_eq!(db::attempts_of(&id), 1);
}

#[tokio::test]
async fn same_key_other_input_is_a_conflict_and_changes_nothing() {
    let api = Api::from_env();
    let token = api.token("bob");
    let key = unique("reuse");
    let first = send(api.create(&token, Some(&key), &body("The original text."))).await;
    assert_eq!(first.status, 201);
    let id = first.json()["id"].as_str().unwrap().to_owned();
    // Let the dispatcher finish first, so that any change below could only be the 409's.
    api.wait_job(&token, &id, status_is("succeeded")).await;
    let before = snapshot(&id);

    let other = send(api.create(&token, Some(&key), &body("A different text."))).await;
    assert_eq!(other.status, 409, "{}", other.text);
    assert_eq!(other.problem_code(), "idempotency_key_reused");
    assert_eq!(other.json()["job_id"], id.as_str());
    assert_eq!(other.header("retry-after"), None, "not retryable");

    let other_provider = send(api.create(
        &token,
        Some(&key),
        &json!({"kind": "summarize", "input": {"text": "The original text."}, "provider": "fallback"}).to_string(),
    ))
    .await;
    assert_eq!(other_provider.problem_code(), "idempotency_key_reused");

    let after = snapshot(&id);
    assert_eq!(before, after, "the row and its children are unchanged");
    assert_eq!(db::jobs_with_key(&key), 1);
}

/// The job row, its events and its attempts, as one comparable text.
fn snapshot(id: &str) -> String {
    db::open()
        .query_row(
            "SELECT json_object(
               'j', (SELECT json_group_array(json_array(id, fingerprint, input, version, updated_at))
                       FROM jobs WHERE id = ?1),
               'e', (SELECT count(*) FROM job_log WHERE job_id = ?1),
               'a', (SELECT count(*) FROM attempts WHERE job_id = ?1))",
            [id],
            |r| r.get(0),
        )
        .unwrap()
}

#[tokio::test]
async fn reordered_keys_and_whitespace_are_a_replay() {
    let api = Api::from_env();
    let token = api.token("carol");
    let key = unique("jcs");
    let compact =
        r#"{"kind":"summarize","input":{"text":"Order does not matter."},"provider":"primary"}"#;
    let shuffled = "{\n  \"provider\" : \"primary\",\n  \"input\" : { \"text\" : \"Order does not matter.\" },\n  \"kind\":\"summarize\"\n}";
    let implicit = r#"{"input":{"text":"Order does not matter."},"kind":"summarize"}"#;
    let first = send(api.create(&token, Some(&key), compact)).await;
    assert_eq!(first.status, 201, "{}", first.text);
    for text in [shuffled, implicit] {
        let again = send(api.create(&token, Some(&key), text)).await;
        assert_eq!(again.status, 200, "{}", again.text);
        assert_eq!(again.json()["id"], first.json()["id"]);
    }
}

#[tokio::test]
async fn two_owners_with_one_key_get_two_jobs_and_cannot_see_each_other() {
    let api = Api::from_env();
    let (dave, erin) = (api.token("dave"), api.token("erin"));
    let key = unique("shared");
    let a = send(api.create(&dave, Some(&key), &body("Same key, two owners."))).await;
    let b = send(api.create(&erin, Some(&key), &body("Same key, two owners."))).await;
    assert_eq!((a.status, b.status), (201, 201));
    let (a_id, b_id) = (a.json()["id"].clone(), b.json()["id"].clone());
    assert_ne!(a_id, b_id);
    assert_eq!(db::jobs_with_key(&key), 2);

    let own = send(api.get(&dave, &format!("/v1/jobs/{}", a_id.as_str().unwrap()))).await;
    assert_eq!(own.status, 200);
    assert_eq!(own.json()["id"], a_id);
    assert_eq!(round_trips(&own), 1);
    for path in [
        format!("/v1/jobs/{}", a_id.as_str().unwrap()),
        format!("/v1/jobs/{}/events", a_id.as_str().unwrap()),
    ] {
        let theirs = send(api.get(&erin, &path)).await;
        assert_eq!(theirs.status, 404, "{path}: {}", theirs.text);
        assert_eq!(theirs.problem_code(), "not_found");
    }
}

#[tokio::test]
async fn etag_answers_304_until_the_job_changes() {
    let api = Api::from_env();
    let token = api.token("frank");
    let created =
        send(api.create(&token, Some(&unique("etag")), &body("Cache me if you can."))).await;
    let id = created.json()["id"].as_str().unwrap().to_owned();
    api.wait_job(&token, &id, status_is("succeeded")).await;
    let first = send(api.get(&token, &format!("/v1/jobs/{id}"))).await;
    let etag = first.header("etag").unwrap().to_owned();
    let again = send(
        api.get(&token, &format!("/v1/jobs/{id}"))
            .header("If-None-Match", &etag),
    )
    .await;
    assert_eq!(again.status, 304);
    assert_eq!(again.text, "");
    let stale = send(
        api.get(&token, &format!("/v1/jobs/{id}"))
            .header("If-None-Match", "\"stale\""),
    )
    .await;
    assert_eq!(stale.status, 200);
}

#[tokio::test]
async fn events_tell_the_story_so_far() {
    let api = Api::from_env();
    let token = api.token("grace");
    let created = send(api.create(&token, Some(&unique("events")), &body("Log everything."))).await;
    let job = created.json();
    let id = job["id"].as_str().unwrap();
    let reply = send(api.get(&token, &format!("/v1/jobs/{id}/events"))).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let events = reply.json()["events"].as_array().unwrap().clone();
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(&types[..2], ["job_created", "attempt_started"]);
    assert_eq!(events[1]["attempt_id"], job["attempts"][0]["id"]);
    assert!(events
        .iter()
        .all(|e| e["at"].as_str().unwrap().ends_with('Z')));
}

#[tokio::test]
async fn health_answers_when_d1_does() {
    let api = Api::from_env();
    let reply = send(api.request(reqwest::Method::GET, "/v1/health", None)).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json(), json!({"status": "ok"}));
    assert_eq!(round_trips(&reply), 1);
}
