//! D1 round trips per operation, counted by the Worker itself (issue 11): a create, a
//! replay and a 304 read each make exactly one, and so do the dispatcher's claim and the
//! completion after it. A second round trip on any of these paths is a regression that
//! no timing on a shared machine would show reliably, so it is asserted here, where it
//! is deterministic. `cargo xtask bench` reports the same figures beside its rates.

use onceclick_tests::probe::{round_trips, RoundTrips};
use std::path::PathBuf;

#[tokio::test]
async fn every_hot_path_makes_one_d1_round_trip() {
    let base = std::env::var("ONCECLICK_URL").expect("run with `cargo xtask test`");
    let secret = std::env::var("ONCECLICK_AUTH_SECRET").expect("run with `cargo xtask test`");
    let log = PathBuf::from(std::env::var("ONCECLICK_WRANGLER_LOG").expect("the Worker's log"));
    let measured = round_trips(&base, &secret, &log)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(
        measured,
        RoundTrips {
            create: 1,
            replay: 1,
            read_304: 1,
            claim: 1,
            complete: 1,
        }
    );
}
