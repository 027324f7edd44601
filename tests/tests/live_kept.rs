//! Issue 42, item 3: the text a job's hub keeps for an `unknown` attempt never outlives
//! the job. A streamed answer cut off leaves its attempt `unknown`, and the hub writes
//! the attempt's text to its own storage (`Keeper::at_unknown`). That text goes once the
//! job settles or is purged, however the hub learns of it: the reconciler's sweep tells
//! it, or, when every notification is lost, its own alarm reads the job (every
//! `LIVE_KEPT_CHECK_MS`, 3 s in the test Worker; a retention period by default).
//!
//! The hub's storage is read where the local runtime keeps it: every Durable Object's
//! SQLite file under the Worker's persisted state, its key-value table (`_cf_KV`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use onceclick_tests::client::{id, marked_text, send, status_is, unique, Api, Mock};
use onceclick_tests::{db, log};
use rusqlite::{Connection, OpenFlags};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

const FAULT: &str = "X-Onceclick-Fault";

/// One test at a time: a reconciler pass abandons every `unknown` attempt of
/// `fallback`, another test's too.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Every SQLite file of a Durable Object under `dir`.
fn object_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            object_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "sqlite")
            && path.file_name().is_some_and(|n| n != "metadata.sqlite")
        {
            found.push(path);
        }
    }
}

/// How many entries of the hubs' storage hold text of attempt `attempt_id`: a kept
/// chunk's value begins with its attempt's id. The runtime stores each value in V8's
/// serialization, a string as one-byte or as two-byte (UTF-16) characters, so the id
/// is looked for in both.
fn kept_entries(attempt_id: &str) -> usize {
    let dir = std::env::var("ONCECLICK_D1_DIR").expect("ONCECLICK_D1_DIR is not set");
    let mut files = Vec::new();
    object_files(&Path::new(&dir).join("v3/do"), &mut files);
    let narrow = attempt_id.as_bytes().to_vec();
    let wide: Vec<u8> = attempt_id
        .encode_utf16()
        .flat_map(u16::to_le_bytes)
        .collect();
    let mut entries = 0;
    for file in files {
        // A hub's `deleteAll` may take its file away while this reads.
        let Ok(conn) = Connection::open_with_flags(&file, OpenFlags::SQLITE_OPEN_READ_ONLY) else {
            continue;
        };
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .unwrap();
        let has_kv: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '_cf_KV'",
                [],
                |r| r.get(0),
            )
            .unwrap_or(0);
        if has_kv == 0 {
            continue;
        }
        let n: i64 = conn
            .query_row(
                "SELECT count(*) FROM _cf_KV WHERE instr(value, ?1) > 0 OR instr(value, ?2) > 0",
                rusqlite::params![narrow, wide],
                |r| r.get(0),
            )
            .unwrap_or_else(|e| panic!("the hub storage in {}: {e}", file.display()));
        entries += n as usize;
    }
    entries
}

/// A streamed answer on `fallback` cut off after its first chunks: the attempt is
/// `unknown`, and its hub has written its text. The job, and its attempt's id.
async fn cut_off(api: &Api, mock: &Mock, token: &str) -> (Value, String) {
    let marker = unique("kept");
    let step = json!({"summary": "the meeting ran long and the numbers held",
                      "chunk_chars": 4, "chunk_ms": 20, "stream_fault": "cut", "fault_after": 12});
    mock.script("fallback", &marker, json!([step])).await;
    let job = api
        .create_job(token, "summarize", &marked_text(&marker), Some("fallback"))
        .await;
    let job_id = id(&job);
    let unknown = api.wait_job(token, &job_id, status_is("unknown")).await;
    let attempt = id(&unknown["attempts"][0]);
    assert_eq!(unknown["attempts"][0]["state"], "unknown", "{unknown}");
    let kept = log::wait_event("live_text_kept", 15, |l| l["attempt_id"] == attempt).await;
    assert!(
        kept.is_some(),
        "the hub of {job_id} kept no text of {attempt}"
    );
    assert!(
        kept_entries(&attempt) > 0,
        "the hub's storage holds the text of {attempt}: the check below can see it"
    );
    (unknown, attempt)
}

/// Waits (at most `seconds`) for the hub of `job_id` to say it emptied its storage.
async fn deleted(job_id: &str, seconds: u64) -> Value {
    log::wait_event("live_text_deleted", seconds, |l| l["job_id"] == job_id)
        .await
        .unwrap_or_else(|| panic!("the hub of {job_id} never deleted its text"))
}

/// Resolves the `unknown` attempt `attempt` as failed, with the hub's notification of
/// it lost: the hub hears nothing of it.
async fn resolve_unheard(api: &Api, attempt: &str) {
    let path = format!("/v1/attempts/{attempt}/resolve");
    let resolved = send(
        api.post_json(
            &api.admin_token("ops"),
            &path,
            &json!({"outcome": "failed"}),
        )
        .header(FAULT, "notify:before"),
    )
    .await;
    assert_eq!(resolved.status, 200, "{}", resolved.text);
    assert_eq!(resolved.json()["status"], "failed");
    assert!(
        log::wait_fault_fired("notify", "before", &path).await,
        "the resolve's notification was not dropped"
    );
}

// The reconciler abandons the attempt (`fallback`'s `abandon_after_ms`) and tells the
// job's hub, which deletes the text as it hears: not at its own later check. (Before:
// the sweep told no hub, and the hub, with no stream and no alarm, kept it forever.)
#[tokio::test]
async fn an_abandoned_attempts_text_goes_when_the_sweep_tells_its_hub() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    let _alone = ONE_AT_A_TIME.lock().await;
    let token = api.token("kept-abandon");
    let (unknown, attempt) = cut_off(&api, &mock, &token).await;
    let job_id = id(&unknown);
    api.run_cron().await;
    let job = api.wait_job(&token, &job_id, status_is("failed")).await;
    assert_eq!(job["attempts"][0]["state"], "abandoned", "{job}");
    let line = deleted(&job_id, 10).await;
    assert_eq!(
        (line["by"].as_str(), line["job"].as_str()),
        (Some("notify"), Some("settled")),
        "the sweep told the hub: {line}"
    );
    assert_eq!(kept_entries(&attempt), 0, "the hub keeps none of its text");
}

// The job settles behind its hub's back (the resolve's notification lost), then the
// purge takes it. The hub's own alarm reads the job (settled, or gone if the purge came
// first) and deletes the text. (Before: it was kept past the job, forever.)
#[tokio::test]
async fn a_purged_jobs_text_goes_though_its_hub_heard_nothing() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    let _alone = ONE_AT_A_TIME.lock().await;
    let token = api.token("kept-purge");
    let (unknown, attempt) = cut_off(&api, &mock, &token).await;
    let job_id = id(&unknown);
    resolve_unheard(&api, &attempt).await;
    db::execute_with(
        "UPDATE jobs SET updated_at = '2000-01-01T00:00:00.000Z' WHERE id = ?1",
        &[&job_id],
    );
    api.run_cron().await;
    assert_eq!(
        db::count("SELECT count(*) FROM jobs WHERE id = ?1", &job_id),
        0,
        "the purge took the job"
    );
    let line = deleted(&job_id, 15).await;
    assert_eq!(line["by"], "alarm", "no notification came: {line}");
    assert_eq!(kept_entries(&attempt), 0, "the hub keeps none of its text");
}

// No notification at all: the hub's alarm, set when it first kept the text, reads the
// job. While the attempt is `unknown` the text stays (the operator resolves with it)
// and the alarm is set again; once the job settles unheard, the next one deletes it.
#[tokio::test]
async fn a_hub_checks_its_kept_text_at_its_alarm_and_keeps_it_while_unknown() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    let _alone = ONE_AT_A_TIME.lock().await;
    let token = api.token("kept-check");
    let (unknown, attempt) = cut_off(&api, &mock, &token).await;
    let job_id = id(&unknown);
    let checked = log::wait_event("live_text_checked", 15, |l| l["job_id"] == job_id).await;
    assert!(checked.is_some(), "the hub of {job_id} never read its job");
    assert!(
        kept_entries(&attempt) > 0,
        "an unknown attempt's text is kept"
    );
    let still = send(api.get(&token, &format!("/v1/jobs/{job_id}"))).await;
    assert_eq!(still.json()["status"], "unknown", "nothing moved the job");
    assert!(
        log::events("live_text_deleted")
            .iter()
            .all(|l| l["job_id"] != job_id.as_str()),
        "nothing deleted while the job is unknown"
    );
    resolve_unheard(&api, &attempt).await;
    let line = deleted(&job_id, 15).await;
    assert_eq!(
        (line["by"].as_str(), line["job"].as_str()),
        (Some("alarm"), Some("settled")),
        "{line}"
    );
    assert_eq!(kept_entries(&attempt), 0, "the hub keeps none of its text");
}
