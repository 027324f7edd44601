//! Ten streamed calls in one consumer batch (issue 49), in a file of its own: it holds
//! the local queue's consumer with one call while ten more messages queue up behind it,
//! which would hold back every other test's dispatch if it ran beside them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use onceclick_core::dispatch::{MAX_SUBREQUESTS_BESIDE_WATCH, MAX_WATCH_READS};
use onceclick_tests::client::{Api, Mock};

// Every answer of a batch of ten long streams is recorded, each on one connection to
// its hub, and the consumer's count of its invocation's subrequests stays under the
// bound that holds whatever the answers' lengths: the watch's reads (which grow with a
// call's duration, up to `MAX_WATCH_READS` a delivery) said apart from the rest
// (constant). Ten streams of 2,400 code points, 8 every 10 ms (about 3 s).
#[tokio::test]
async fn ten_long_streams_in_one_batch_are_all_recorded_within_the_subrequest_bound() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    let log = std::env::var("ONCECLICK_WRANGLER_LOG").expect("the Worker's log");
    let batch = onceclick_tests::probe::batch(&api, &mock, log.as_ref(), 10, (2_400, 8, 10))
        .await
        .unwrap();
    assert_eq!(
        batch.hub_opens,
        vec![1; 10],
        "one connection each: {batch:?}"
    );
    assert!(batch.hand_offs.iter().all(|&n| n > 3), "{batch:?}");
    let (messages, made, watched) = (batch.messages, batch.subrequests, batch.watch_reads);
    // Each message: at least its claim, its provider call and its hub's connection.
    assert!(made >= 3 * messages + watched, "{batch:?}");
    assert!(
        watched <= messages * u64::from(MAX_WATCH_READS),
        "{batch:?}"
    );
    assert!(
        made - watched <= messages * u64::from(MAX_SUBREQUESTS_BESIDE_WATCH),
        "{batch:?}"
    );
}
