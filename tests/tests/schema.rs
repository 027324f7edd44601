//! The schema without wrangler: `edge/migrations/*.sql` applied in order to an in-memory
//! SQLite, so that the rules the database keeps can be pinned in milliseconds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use onceclick_protocol::AttemptState;
use rusqlite::Connection;

fn migrated() -> Connection {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../edge/migrations");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "{files:?}");
    let conn = Connection::open_in_memory().unwrap();
    for file in files {
        let sql = std::fs::read_to_string(&file).unwrap();
        conn.execute_batch(&sql)
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    }
    // One job, `job_1`, for the tests to hang attempts and events on.
    conn.execute(
        "INSERT INTO jobs (id, owner_id, idempotency_key, fingerprint, kind, input, provider,
                           status, created_at, updated_at)
         VALUES ('job_1', 'o', 'k', 'f', 'summarize', '{}', 'primary', 'queued', 't', 't')",
        [],
    )
    .unwrap();
    conn
}

#[test]
fn the_database_refuses_every_attempt_move_that_is_not_in_moves() {
    let conn = migrated();
    let mut n = 0;
    for from in AttemptState::ALL {
        for to in AttemptState::ALL {
            if from == to {
                continue;
            }
            n += 1;
            let id = format!("att_{n}");
            conn.execute(
                "INSERT INTO attempts (id, job_id, n, provider, state, started_at)
                 VALUES (?1, 'job_1', ?2, 'primary', ?3, 't')",
                rusqlite::params![id, n, from.as_str()],
            )
            .unwrap();
            let moved = conn.execute(
                "UPDATE attempts SET state = ?2 WHERE id = ?1",
                rusqlite::params![id, to.as_str()],
            );
            assert_eq!(
                moved.is_ok(),
                from.can_move_to(*to),
                "{from:?} -> {to:?}: {moved:?}"
            );
        }
    }
}

#[test]
fn the_etag_ignores_events_that_change_nothing_a_client_sees() {
    let conn = migrated();
    let etag = || -> String {
        conn.query_row(
            "SELECT etag FROM job_documents WHERE id = 'job_1'",
            [],
            |r| r.get(0),
        )
        .unwrap()
    };
    let before = etag();
    for invisible in [
        "dispatch_ignored",
        "failover_skipped",
        "late_result_discarded",
    ] {
        conn.execute(
            "INSERT INTO job_events (job_id, at, type) VALUES ('job_1', 't', ?1)",
            [invisible],
        )
        .unwrap();
        assert_eq!(etag(), before, "{invisible}");
    }
    conn.execute(
        "INSERT INTO attempts (id, job_id, n, provider, state, started_at)
         VALUES ('att_1', 'job_1', 1, 'primary', 'starting', 't')",
        [],
    )
    .unwrap();
    assert_ne!(etag(), before, "attempt_started is a change");
}
