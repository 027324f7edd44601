//! Ten streamed calls in one consumer batch (issue 49), in a file of its own: it holds
//! the local queue's consumer with one call while ten more messages queue up behind it,
//! which would hold back every other test's dispatch if it ran beside them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use onceclick_core::dispatch::{MAX_SUBREQUESTS_BESIDE_WATCH, MAX_WATCH_READS};
use onceclick_tests::client::{id, marked_text, send, status_is, unique, Api, Mock};
use serde_json::json;

const STREAMS: usize = 10;

// Every answer of a batch of ten long streams is recorded, each on one connection to
// its hub, and the consumer's count of its invocation's subrequests stays under the
// bound that holds whatever the answers' lengths: the watch's reads (which grow with a
// call's duration, up to `MAX_WATCH_READS` a call) said apart from the rest (constant).
#[tokio::test]
async fn ten_long_streams_in_one_batch_are_all_recorded_within_the_subrequest_bound() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    let token = api.token("batch");
    // The blocker: its call holds the consumer until its gate opens.
    let (gate, blocker) = (unique("gate"), unique("blocker"));
    mock.script("primary", &blocker, json!([{"gate": gate}]))
        .await;
    let body = json!({"kind": "summarize", "input": {"text": marked_text(&blocker)}});
    let reply = send(api.create(&token, Some(&unique("key")), &body.to_string())).await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    let blocked = id(&reply.json());
    mock.wait_calls(&blocker, 1).await;
    // Ten streams of 2,400 code points each, 8 every 10 ms (about 3 s): their messages
    // wait behind the blocker, and go in its consumer's next batch.
    let summary = "the numbers came in above the forecast";
    let mut jobs = Vec::new();
    for _ in 0..STREAMS {
        let marker = unique("batch");
        let step = json!({"summary": summary, "chunk_chars": 8, "chunk_ms": 10, "pad_to": 2_400});
        mock.script("fallback", &marker, json!([step])).await;
        let body = json!({"kind": "summarize", "input": {"text": marked_text(&marker)},
                          "provider": "fallback"});
        let reply = send(api.create(&token, Some(&unique("key")), &body.to_string())).await;
        assert_eq!(reply.status, 201, "{}", reply.text);
        jobs.push(reply.json());
    }
    mock.release(&gate).await;
    api.wait_job(&token, &blocked, status_is("succeeded")).await;
    for job in &jobs {
        let done = api.wait_job(&token, &id(job), status_is("succeeded")).await;
        assert_eq!(done["result"]["summary"], summary, "{done}");
        let attempt = id(&job["attempts"][0]);
        let line = onceclick_tests::log::wait_event("call_streamed", 5, |l| {
            l["attempt_id"] == attempt.as_str()
        })
        .await
        .expect("the call's line");
        assert_eq!(line["hub_opens"], 1, "one connection to the hub: {line}");
    }
    let batches = onceclick_tests::log::events("batch_consumed");
    let batch = batches
        .iter()
        .find(|b| b["messages"].as_u64() == Some(STREAMS as u64))
        .unwrap_or_else(|| panic!("no batch of {STREAMS} messages: {batches:?}"));
    let (messages, made, watched) = (
        batch["messages"].as_u64().unwrap(),
        batch["subrequests"].as_u64().unwrap(),
        batch["watch_reads"].as_u64().unwrap(),
    );
    // Each message: at least its claim, its provider call and its hub's connection.
    assert!(made >= 3 * messages + watched, "{batch}");
    assert!(watched <= messages * u64::from(MAX_WATCH_READS), "{batch}");
    assert!(
        made - watched <= messages * u64::from(MAX_SUBREQUESTS_BESIDE_WATCH),
        "{batch}"
    );
}
