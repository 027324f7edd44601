//! Store round trips and rows written per operation, counted by the Worker itself
//! (issues 11 and 23): a create, a replay and a 304 read each make exactly one round
//! trip, and so do the dispatcher's claim and the completion after it; a job that
//! succeeds at once writes at most [`ROWS_WRITTEN_PER_JOB`] rows as the store bills them.
//! A second round trip or an extra index on any of these paths is a regression that no
//! timing on a shared machine would show reliably, so it is asserted here, where it is
//! deterministic. `cargo xtask bench` reports the same figures beside its rates.

use onceclick_tests::probe::{probe, RoundTrips};
use std::path::PathBuf;

/// Rows written by a job that succeeds on its first attempt (create, claim, completion),
/// as D1 and Durable Object SQLite bill them: each row and each index entry an insert or
/// update touches. The schema's figure is 20 on both stores (19 in `0007_one_position.sql`,
/// and the tokens counter of `0008_attempt_tokens.sql`); the budget 20.
const ROWS_WRITTEN_PER_JOB: u64 = 20;

#[tokio::test]
async fn every_hot_path_makes_one_d1_round_trip() {
    let base = std::env::var("ONCECLICK_URL").expect("run with `cargo xtask test`");
    let secret = std::env::var("ONCECLICK_AUTH_SECRET").expect("run with `cargo xtask test`");
    let log = PathBuf::from(std::env::var("ONCECLICK_WRANGLER_LOG").expect("the Worker's log"));
    let measured = probe(&base, &secret, &log)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    println!(
        "a first-try job: rows written {:?} = {}, rows read {:?} = {}",
        measured.rows_written,
        measured.rows_written.total(),
        measured.rows_read,
        measured.rows_read.total()
    );
    assert!(
        measured.rows_written.total() <= ROWS_WRITTEN_PER_JOB,
        "a first-try job wrote {} rows ({:?}); the budget is {ROWS_WRITTEN_PER_JOB}",
        measured.rows_written.total(),
        measured.rows_written
    );
    // Every step writes: a count of 0 would be a place that reports none.
    let w = measured.rows_written;
    assert!(w.create > 0 && w.claim > 0 && w.complete > 0, "{w:?}");
    // The mock's answer says what it billed (`usage`): the consumer reports it, for the
    // bench's tokens per job.
    let tokens = measured
        .tokens
        .unwrap_or_else(|| panic!("no call_tokens line for the probe's job"));
    assert!(tokens.prompt > 0 && tokens.completion > 0, "{tokens:?}");
    assert_eq!(
        measured.round_trips,
        RoundTrips {
            create: 1,
            replay: 1,
            read_304: 1,
            claim: 1,
            complete: 1,
        }
    );
}
