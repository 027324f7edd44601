//! A streamed answer against a slow hub (issue 42, 2), in a file of its own: its call
//! holds the local queue's consumer for about 10 s, which would hold back every other
//! test's dispatch if it ran beside them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use onceclick_tests::client::{id, marked_text, send, unique, Api, Mock};
use serde_json::{json, Value};

const FAULT: &str = "X-Onceclick-Fault";

// Issue 42, 2: a streamed answer that finishes near the provider's total limit while
// the job's hub answers every hand-off late (1.9 s, inside the call's 2 s bound). The
// provider is done in time; our own hub is not the provider's timeout: the job succeeds
// with the answer. (It went `unknown`: the backstop, 2 s past the total limit, counted
// the hand-off in flight when the body ended, and the last one after it, against the
// provider.)
#[tokio::test]
async fn a_finished_streamed_answer_stands_however_slowly_the_hub_answers() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    let token = api.token("slow-hub");
    let marker = unique("slow-hub");
    let summary = "the numbers came in above the forecast";
    // The fallback's total limit is two timeouts (8 s here), its backstop 2 s later.
    // Comments until about 3.1 s, then a code point every 56 ms to about 7.2 s: the
    // hand-offs begin about 3.1, 5.0 and 6.9 s, so the third is in flight when the body
    // ends, and the last one (the text that came meanwhile) ends about 10.7 s.
    let content = json!({"summary": summary, "sentiment": "neutral"}).to_string();
    let chunks = content.chars().count() as u64;
    let chunk_ms = 4_100 / chunks;
    let step = json!({"summary": summary, "chunk_chars": 1, "chunk_ms": chunk_ms,
                      "hold_open_ms": 3_100 - chunk_ms});
    mock.script("fallback", &marker, json!([step])).await;
    let body = json!({"kind": "summarize", "input": {"text": marked_text(&marker)},
                      "provider": "fallback"});
    let reply = send(
        api.create(&token, Some(&unique("key")), &body.to_string())
            .header(FAULT, "hand_off:after"),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    let job_id = id(&reply.json());
    let attempt = id(&reply.json()["attempts"][0]);
    let done = api
        .wait_job(&token, &job_id, |job| {
            job["status"] != "queued" && job["status"] != "running"
        })
        .await;
    assert!(
        onceclick_tests::log::fault_fired("hand_off", "after", &attempt),
        "the hub was not made slow"
    );
    assert_eq!(done["status"], "succeeded", "{done}");
    // The path the test is for: a hand-off in flight when the body ended, and one after.
    let line = onceclick_tests::log::wait_event("call_streamed", 5, |l| {
        l["attempt_id"] == attempt.as_str()
    })
    .await
    .expect("the call's line");
    assert!(line["hand_offs"].as_u64().unwrap() >= 4, "{line}");
    assert_eq!(
        done["result"],
        serde_json::from_str::<Value>(&content).unwrap()
    );
}
