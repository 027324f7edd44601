//! The schema without wrangler: `edge/migrations/*.sql` applied in order to an in-memory
//! SQLite, so that the rules the database keeps can be pinned in milliseconds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use onceclick_protocol::{AttemptState, EventType, Job, JobStatus};
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
                           status, created_at, updated_at, seq, doc_seq)
         VALUES ('job_1', 'o', 'k', 'f', 'summarize', '{}', 'primary', 'queued', 't', 't', 1, 1)",
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
                "INSERT INTO attempts (id, job_id, n, provider, state, started_at, started_seq)
                 VALUES (?1, 'job_1', ?2, 'primary', ?3, 't', (SELECT seq + 1 FROM jobs WHERE id = 'job_1'))",
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
            "INSERT INTO job_events (job_id, seq, at, type)
             VALUES ('job_1', (SELECT seq + 1 FROM jobs WHERE id = 'job_1'), 't', ?1)",
            [invisible],
        )
        .unwrap();
        assert_eq!(etag(), before, "{invisible}");
    }
    conn.execute(
        "INSERT INTO attempts (id, job_id, n, provider, state, started_at, started_seq)
         VALUES ('att_2', 'job_1', 2, 'primary', 'starting', 't', (SELECT seq + 1 FROM jobs WHERE id = 'job_1'))",
        [],
    )
    .unwrap();
    assert_ne!(etag(), before, "a later attempt_started is a change");
}

/// The state of every attempt of `job_1`, in order.
fn states(conn: &Connection) -> Vec<AttemptState> {
    let mut stmt = conn
        .prepare("SELECT state FROM attempts WHERE job_id = 'job_1' ORDER BY n")
        .unwrap();
    stmt.query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(|s| {
            let s = s.unwrap();
            *AttemptState::ALL.iter().find(|a| a.as_str() == s).unwrap()
        })
        .collect()
}

#[test]
fn every_move_rolls_the_job_status_up_as_the_protocol_says() {
    for &(from, to) in AttemptState::MOVES {
        for sibling in [
            None,
            Some(AttemptState::Failed),
            Some(AttemptState::Running),
        ] {
            let conn = migrated();
            let mut n = 0;
            if let Some(s) = sibling {
                n += 1;
                conn.execute(
                    "INSERT INTO attempts (id, job_id, n, provider, state, started_at, started_seq)
                     VALUES ('att_sibling', 'job_1', ?1, 'primary', ?2, 't', (SELECT seq + 1 FROM jobs WHERE id = 'job_1'))",
                    rusqlite::params![n, s.as_str()],
                )
                .unwrap();
            }
            conn.execute(
                "INSERT INTO attempts (id, job_id, n, provider, state, started_at, started_seq)
                 VALUES ('att_moved', 'job_1', ?1, 'primary', ?2, 't', (SELECT seq + 1 FROM jobs WHERE id = 'job_1'))",
                rusqlite::params![n + 1, from.as_str()],
            )
            .unwrap();
            // A `starting` or `running` attempt is cancelled only with its job (one
            // batch: the job first), so the trigger leaves that move to the cancel.
            let with_job = to == AttemptState::Cancelled && from != AttemptState::Unknown;
            if with_job {
                conn.execute(
                    "UPDATE jobs SET status = 'cancelled' WHERE id = 'job_1'",
                    [],
                )
                .unwrap();
            }
            conn.execute(
                "UPDATE attempts SET state = ?1 WHERE id = 'att_moved'",
                [to.as_str()],
            )
            .unwrap();
            let status: String = conn
                .query_row("SELECT status FROM jobs WHERE id = 'job_1'", [], |r| {
                    r.get(0)
                })
                .unwrap();
            let expected = if with_job {
                JobStatus::Cancelled
            } else {
                JobStatus::rollup(&states(&conn))
            };
            assert_eq!(
                status,
                expected.as_str(),
                "{from:?} -> {to:?} next to {sibling:?}"
            );
        }
    }
}

#[test]
fn every_event_the_triggers_write_is_a_protocol_event_and_the_document_a_job() {
    let conn = migrated();
    // Every move, each on its own attempt, writes what the triggers write.
    for (i, &(from, to)) in AttemptState::MOVES.iter().enumerate() {
        let id = format!("att_{i}");
        conn.execute(
            "INSERT INTO attempts (id, job_id, n, provider, state, started_at, started_seq)
             VALUES (?1, 'job_1', ?2, 'primary', ?3, '2026-11-30T00:00:00.000Z', (SELECT seq + 1 FROM jobs WHERE id = 'job_1'))",
            rusqlite::params![id, i + 1, from.as_str()],
        )
        .unwrap();
        conn.execute(
            "UPDATE attempts SET state = ?2 WHERE id = ?1",
            [id.as_str(), to.as_str()],
        )
        .unwrap();
    }
    let mut stmt = conn.prepare("SELECT DISTINCT type FROM job_log").unwrap();
    let types: Vec<String> = stmt
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(types.len() >= 6, "{types:?}");
    for t in &types {
        serde_json::from_value::<EventType>(serde_json::Value::String(t.clone()))
            .unwrap_or_else(|e| panic!("the triggers write {t:?}, which is no EventType: {e}"));
    }
    let doc: String = conn
        .query_row(
            "SELECT doc FROM job_documents WHERE id = 'job_1'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let job: Job = serde_json::from_str(&doc)
        .unwrap_or_else(|e| panic!("job_documents renders no Job ({e}): {doc}"));
    assert_eq!(job.attempts.len(), AttemptState::MOVES.len());
    // `Job` reads tolerantly (an upgrade's new member is passed over), so that the view
    // and the type name the same members is checked here: written again, the document
    // is the same JSON, no member lost or added.
    let rendered: serde_json::Value = serde_json::from_str(&doc).unwrap();
    assert_eq!(
        serde_json::to_value(&job).unwrap(),
        rendered,
        "job_documents and Job name different members"
    );
}

#[test]
fn the_check_lists_name_exactly_the_protocols_states() {
    let conn = migrated();
    let table_sql = |name: &str| -> String {
        conn.query_row(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?1",
            [name],
            |r| r.get(0),
        )
        .unwrap()
    };
    let listed = |sql: &str, column: &str| -> Vec<String> {
        let start = sql
            .find(&format!("CHECK ({column} IN ("))
            .unwrap_or_else(|| panic!("no CHECK on {column}"));
        let rest = &sql[start..];
        let list = &rest[rest.find("IN (").unwrap() + 4..rest.find(")").unwrap()];
        let mut names: Vec<String> = list
            .split(',')
            .map(|s| s.trim().trim_matches('\'').to_owned())
            .collect();
        names.sort();
        names
    };
    let mut statuses: Vec<String> = JobStatus::ALL
        .iter()
        .map(|s| s.as_str().to_owned())
        .collect();
    statuses.sort();
    let mut states: Vec<String> = AttemptState::ALL
        .iter()
        .map(|s| s.as_str().to_owned())
        .collect();
    states.sort();
    assert_eq!(listed(&table_sql("jobs"), "status"), statuses);
    assert_eq!(listed(&table_sql("attempts"), "state"), states);
}

#[test]
fn the_rollup_reads_one_job_by_its_index() {
    let conn = migrated();
    let mut stmt = conn
        .prepare("EXPLAIN QUERY PLAN SELECT status FROM job_rollup WHERE job_id = 'job_1'")
        .unwrap();
    let plan: Vec<String> = stmt
        .query_map([], |r| r.get::<_, String>(3))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(
        plan.iter().all(|step| !step.starts_with("SCAN attempts")),
        "the rollup scans every attempt: {plan:?}"
    );
}

/// The store's statements, exactly as the Worker sends them.
#[allow(dead_code, unused_macros, unreachable_pub)]
#[path = "../../core/src/store/sql.rs"]
mod sql;

/// The tables whose rows grow with traffic: no statement may read one of them whole.
const GROWING: [&str; 3] = ["jobs", "attempts", "job_events"];

/// The table each view reads row for row: scanning the view scans it.
const VIEWS: [(&str, &str); 2] = [("job_documents", "jobs"), ("job_rollup", "attempts")];

/// `alias → table` for every `FROM t AS x` and `JOIN t AS x` in `sql` (a view counts as
/// the table it reads).
fn aliases_in(sql: &str) -> Vec<(String, String)> {
    let words: Vec<&str> = sql
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect();
    words
        .windows(4)
        .filter(|w| {
            (w[0].eq_ignore_ascii_case("FROM") || w[0].eq_ignore_ascii_case("JOIN"))
                && w[2].eq_ignore_ascii_case("AS")
        })
        .map(|w| {
            let table = VIEWS
                .iter()
                .find(|(view, _)| *view == w[1])
                .map_or(w[1], |(_, table)| table);
            (w[3].to_owned(), table.to_owned())
        })
        .collect()
}

/// Every statement a trigger runs, with `NEW.x` and `OLD.x` made parameters.
fn trigger_statements(conn: &Connection) -> Vec<(String, String)> {
    let mut stmt = conn
        .prepare("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' ORDER BY name")
        .unwrap();
    let triggers: Vec<(String, String)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut out = Vec::new();
    for (name, sql) in triggers {
        let begin = sql.find("BEGIN").expect("a trigger body") + "BEGIN".len();
        let body = &sql[begin..sql.rfind("END").expect("a trigger end")];
        let mut params = String::new();
        let mut rest = body;
        while let Some(at) = rest.find("NEW.").into_iter().chain(rest.find("OLD.")).min() {
            params.push_str(&rest[..at]);
            params.push('?');
            let tail = &rest[at + 4..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            rest = &tail[end..];
        }
        params.push_str(rest);
        // A bare `SELECT RAISE(…)` reads nothing (and runs only inside a trigger).
        let statements = params
            .split(';')
            .filter(|s| !s.trim().is_empty() && !s.contains("RAISE("));
        for (i, statement) in statements.enumerate() {
            out.push((format!("trigger {name} #{}", i + 1), statement.to_owned()));
        }
    }
    out
}

/// The lines of `statement`'s query plan that read a growing table whole: a `SCAN`, an
/// automatic index (built from a full read on every run) or a Bloom filter over it.
/// `aliases` maps every alias the statements and views use to its table.
fn full_scans(conn: &Connection, statement: &str, aliases: &[(String, String)]) -> Vec<String> {
    let table_of = |name: &str| -> String {
        aliases
            .iter()
            .find(|(alias, _)| alias == name)
            .map_or(name, |(_, table)| table.as_str())
            .to_owned()
    };
    let details = plan(conn, statement);
    // A subquery SQLite runs as a co-routine or materializes is scanned by its own name;
    // that scan reads what the subquery found, not a table. A statement must not give a
    // growing table the same alias, or the two scans could not be told apart.
    let own: Vec<String> = aliases_in(statement).into_iter().map(|(a, _)| a).collect();
    let subqueries: Vec<&str> = details
        .iter()
        .filter_map(|d| {
            d.strip_prefix("CO-ROUTINE ")
                .or_else(|| d.strip_prefix("MATERIALIZE "))
        })
        .collect();
    let mut found = Vec::new();
    for detail in &details {
        let first = |rest: &str| {
            rest.split_whitespace()
                .next()
                .unwrap_or_default()
                .to_owned()
        };
        let read = if let Some(rest) = detail.strip_prefix("SCAN ") {
            let name = first(rest);
            if subqueries.contains(&name.as_str()) {
                if own.contains(&name) {
                    found.push(format!("ambiguous alias {name}: {detail}"));
                }
                continue;
            }
            name
        } else if let Some(rest) = detail.strip_prefix("BLOOM FILTER ON ") {
            first(rest)
        } else if detail.contains("USING AUTOMATIC") {
            first(detail.split_once(' ').map_or("", |(_, rest)| rest))
        } else {
            continue;
        };
        if GROWING.contains(&table_of(&read).as_str()) {
            found.push(detail.clone());
        }
    }
    found
}

#[test]
fn no_store_statement_scans_a_table_that_grows() {
    let conn = migrated();
    let views: Vec<String> = conn
        .prepare("SELECT sql FROM sqlite_master WHERE type IN ('view', 'trigger')")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let aliases: Vec<(String, String)> = sql::ALL
        .iter()
        .map(|(_, s)| s.to_string())
        .chain(views)
        .flat_map(|s| aliases_in(&s))
        .collect();
    // One alias, one table: otherwise the plan's names would be ambiguous.
    for (alias, table) in &aliases {
        assert!(
            aliases.iter().all(|(a, t)| a != alias || t == table),
            "the alias {alias} names two tables"
        );
    }
    // The check itself: a lookup by a column without an index is caught, and so is a
    // growing table under an alias that a view's subquery also uses.
    assert_eq!(
        full_scans(
            &conn,
            "SELECT id FROM attempts AS a WHERE a.provider = ?1",
            &aliases
        ),
        ["SCAN a"]
    );
    assert_eq!(
        full_scans(
            &conn,
            "SELECT a.id FROM job_documents AS j JOIN attempts AS a ON a.job_id = j.id",
            &aliases
        )
        .len(),
        1
    );
    // Read whole on purpose, and of a table that no longer grows: the move's count of the
    // jobs left in the D1 it moved from, where no key has been written since its first
    // step (`GET /v1/move`, `cargo xtask move-status`).
    const WHOLE_ON_PURPOSE: [&str; 1] = ["MOVE_STATUS"];
    let statements = sql::ALL
        .iter()
        .filter(|(name, _)| !WHOLE_ON_PURPOSE.contains(name))
        .map(|(name, s)| (name.to_string(), s.to_string()))
        .chain(trigger_statements(&conn));
    let mut checked = 0;
    let mut scans = Vec::new();
    for (name, statement) in statements {
        checked += 1;
        scans.extend(
            full_scans(&conn, &statement, &aliases)
                .into_iter()
                .map(|scan| format!("{name}: {scan}")),
        );
    }
    assert!(
        checked > sql::ALL.len() - WHOLE_ON_PURPOSE.len(),
        "the triggers' statements were read"
    );
    assert!(scans.is_empty(), "full scans:\n{}", scans.join("\n"));
}

#[test]
fn the_sql_state_lists_are_the_protocols() {
    let listed = |sql: &str| -> Vec<AttemptState> {
        let mut states: Vec<AttemptState> = sql
            .trim_matches(|c| c == '(' || c == ')')
            .split(',')
            .map(|s| serde_json::from_value(s.trim().trim_matches('\'').into()).unwrap())
            .collect();
        states.sort_by_key(|s| s.as_str());
        states
    };
    let by = |keep: fn(&AttemptState) -> bool| -> Vec<AttemptState> {
        let mut states: Vec<AttemptState> =
            AttemptState::ALL.iter().copied().filter(keep).collect();
        states.sort_by_key(|s| s.as_str());
        states
    };
    assert_eq!(listed(sql::LIVE_STATES), by(|s| !s.is_final()));
    assert_eq!(listed(sql::IN_FLIGHT_STATES), by(|s| s.is_in_flight()));
}

/// The plan of `statement`, one line per step. Unbound parameters are NULL: the plan does
/// not depend on their values.
fn plan(conn: &Connection, statement: &str) -> Vec<String> {
    let mut plan = conn
        .prepare(&format!("EXPLAIN QUERY PLAN {statement}"))
        .unwrap_or_else(|e| panic!("{statement}: {e}"));
    let mut rows = plan.raw_query();
    let mut details = Vec::new();
    while let Some(row) = rows.next().unwrap() {
        details.push(row.get::<_, String>(3).unwrap());
    }
    details
}

#[test]
fn each_list_is_one_range_read_of_one_index_with_no_sort() {
    let conn = migrated();
    let cases = [
        (
            "LIST_JOBS_OF_OWNER",
            sql::LIST_JOBS_OF_OWNER,
            "SEARCH jobs USING INDEX jobs_by_owner (owner_id=? AND id<?)",
        ),
        (
            "LIST_JOBS_BY_STATUS",
            sql::LIST_JOBS_BY_STATUS,
            "SEARCH jobs USING INDEX jobs_by_status (status=? AND id<?)",
        ),
        (
            "LIST_JOBS",
            sql::LIST_JOBS,
            "SEARCH jobs USING PRIMARY KEY (id<?)",
        ),
        (
            "LIST_ATTEMPTS",
            sql::LIST_ATTEMPTS,
            "SEARCH a USING INDEX attempts_by_state (state=? AND id>?)",
        ),
    ];
    // Each list's ids alone (a shard's part of a merge) read the same range of the same
    // index, from the index alone where it holds every column the filter names.
    let ids = [
        (
            "LIST_JOB_IDS_OF_OWNER",
            sql::LIST_JOB_IDS_OF_OWNER,
            cases[0].2,
        ),
        (
            "LIST_JOB_IDS_BY_STATUS",
            sql::LIST_JOB_IDS_BY_STATUS,
            cases[1].2,
        ),
        ("LIST_JOB_IDS", sql::LIST_JOB_IDS, cases[2].2),
        ("LIST_ATTEMPT_IDS", sql::LIST_ATTEMPT_IDS, cases[3].2),
    ];
    for (name, statement, read) in cases.into_iter().chain(ids) {
        let steps = plan(&conn, statement);
        let covering = read.replacen("USING INDEX", "USING COVERING INDEX", 1);
        assert!(
            steps.first().is_some_and(|s| *s == read || *s == covering),
            "{name}: {steps:?}"
        );
        assert!(
            steps.iter().all(|s| !s.contains("TEMP B-TREE")),
            "{name} sorts: {steps:?}"
        );
        // Anything else it reads is by primary key (an attempt's job).
        for step in &steps[1..] {
            assert!(step.contains("USING PRIMARY KEY (id=?)"), "{name}: {step}");
        }
    }
}

#[test]
fn a_merges_documents_are_read_by_primary_key_for_the_ids_it_names() {
    let conn = migrated();
    for (name, statement) in [
        ("LIST_JOBS_BY_ID", sql::LIST_JOBS_BY_ID),
        ("LIST_ATTEMPTS_BY_ID", sql::LIST_ATTEMPTS_BY_ID),
    ] {
        let steps = plan(&conn, statement);
        // The JSON array of ids is scanned; every table is read by id (the primary key,
        // or an index that ends in it, after an equality).
        let by_id = |step: &str| step.ends_with("(id=?)") || step.ends_with(" AND id=?)");
        for step in &steps {
            assert!(
                step.contains("json_each")
                    || by_id(step)
                    || step.starts_with("LIST SUBQUERY")
                    || step == "CREATE BLOOM FILTER",
                "{name}: {step} in {steps:?}"
            );
        }
        assert!(
            steps.iter().any(|s| s.contains("(id=?)")),
            "{name}: {steps:?}"
        );
    }
}

#[test]
fn a_list_pages_by_cursor_without_gaps_or_repeats() {
    let conn = migrated();
    for i in 0..7 {
        conn.execute(
            "INSERT INTO jobs (id, owner_id, idempotency_key, fingerprint, kind, input, provider,
                               status, created_at, updated_at, seq, doc_seq)
             VALUES (?1, 'pager', ?2, 'f', 'summarize', '{\"text\":\"t\"}', 'primary', ?3, 't', 't', 1, 1)",
            rusqlite::params![
                format!("job_0000000{i}"),
                format!("k{i}"),
                if i % 2 == 0 { "succeeded" } else { "failed" }
            ],
        )
        .unwrap();
    }
    let page = |cursor: Option<&str>, status: Option<&str>| -> Vec<String> {
        conn.prepare(sql::LIST_JOBS_OF_OWNER)
            .unwrap()
            .query_map(rusqlite::params!["pager", cursor, status, 3], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let first = page(None, None);
    assert_eq!(first, ["job_00000006", "job_00000005", "job_00000004"]);
    let second = page(first.last().map(String::as_str), None);
    assert_eq!(second, ["job_00000003", "job_00000002", "job_00000001"]);
    assert_eq!(
        page(second.last().map(String::as_str), None),
        ["job_00000000"]
    );
    assert_eq!(
        page(None, Some("failed")),
        ["job_00000005", "job_00000003", "job_00000001"]
    );
    // The item is the job's summary, its input and result as JSON, not as text.
    let item: String = conn
        .query_row(
            &format!("SELECT item FROM ({})", sql::LIST_JOBS_OF_OWNER),
            rusqlite::params!["pager", None::<String>, None::<String>, 1],
            |r| r.get(0),
        )
        .unwrap();
    let item: serde_json::Value = serde_json::from_str(&item).unwrap();
    assert_eq!(item["input"]["text"], "t");
    assert_eq!(item["owner_id"], "pager");
}

/// The counters of `GET /v1/stats` for job_1's kind (`summarize`), by provider and
/// metric, over every minute.
fn counters(conn: &Connection) -> std::collections::BTreeMap<String, i64> {
    let mut stmt = conn
        .prepare("SELECT provider || ' ' || metric, sum(n) FROM stats WHERE kind = 'summarize' GROUP BY 1")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[test]
fn the_figures_count_each_move_once_where_it_is_made() {
    let conn = migrated();
    let run = |sql: &str| {
        conn.execute_batch(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    };
    // job_1 itself: one job created, on primary.
    assert_eq!(counters(&conn).get("primary jobs_created"), Some(&1));

    // An attempt answered in exactly 100 ms, another in 101 ms: the histogram's edges.
    run("INSERT INTO attempts (id, job_id, n, provider, state, started_at, started_seq)
         VALUES ('att_1', 'job_1', 1, 'primary', 'starting', 't', (SELECT seq + 1 FROM jobs WHERE id = 'job_1'));
         UPDATE attempts SET state = 'running', dispatched_at = '2026-01-01T00:00:00.000Z' WHERE id = 'att_1';
         UPDATE attempts SET state = 'failed', finished_at = '2026-01-01T00:00:00.100Z',
                error = '{\"code\":\"provider_unavailable\",\"message\":\"503\",\"retryable\":true}'
          WHERE id = 'att_1';");
    // The three kinds of next attempt, each named by the statement that inserts it.
    run("INSERT INTO attempts (id, job_id, n, provider, state, started_at, started_by, started_seq)
         VALUES ('att_2', 'job_1', 2, 'fallback', 'starting', 't', 'owner', (SELECT seq + 1 FROM jobs WHERE id = 'job_1'));
         UPDATE attempts SET state = 'running', dispatched_at = '2026-01-01T00:00:01.000Z' WHERE id = 'att_2';
         INSERT INTO attempts (id, job_id, n, provider, state, started_at, started_by, started_seq)
         VALUES ('att_3', 'job_1', 3, 'primary', 'starting', 't', 'hedge', (SELECT seq + 1 FROM jobs WHERE id = 'job_1'));
         UPDATE attempts SET state = 'running', dispatched_at = '2026-01-01T00:00:01.000Z' WHERE id = 'att_3';
         UPDATE attempts SET state = 'succeeded', finished_at = '2026-01-01T00:00:01.101Z' WHERE id = 'att_2';
         UPDATE attempts SET state = 'superseded', finished_at = '2026-01-01T00:00:02.000Z' WHERE id = 'att_3';");
    // A call that timed out, then resolved: two moves, counted as such.
    run("INSERT INTO jobs (id, owner_id, idempotency_key, fingerprint, kind, input, provider,
                           status, created_at, updated_at, seq, doc_seq)
         VALUES ('job_2', 'o', 'k2', 'f', 'summarize', '{}', 'primary', 'queued', 't', 't', 1, 1);
         INSERT INTO attempts (id, job_id, n, provider, state, started_at, started_seq)
         VALUES ('att_4', 'job_2', 1, 'primary', 'starting', 't', (SELECT seq + 1 FROM jobs WHERE id = 'job_2'));
         UPDATE attempts SET state = 'running', dispatched_at = '2026-01-01T00:00:00.000Z' WHERE id = 'att_4';
         UPDATE attempts SET state = 'unknown', finished_at = '2026-01-01T00:00:09.000Z' WHERE id = 'att_4';
         UPDATE attempts SET state = 'failed' WHERE id = 'att_4';");
    // A claim whose call never happened (dispatch_failed): an outcome, not a latency.
    run("INSERT INTO jobs (id, owner_id, idempotency_key, fingerprint, kind, input, provider,
                           status, created_at, updated_at, seq, doc_seq)
         VALUES ('job_3', 'o', 'k3', 'f', 'summarize', '{}', 'primary', 'queued', 't', 't', 1, 1);
         INSERT INTO attempts (id, job_id, n, provider, state, started_at, started_seq)
         VALUES ('att_5', 'job_3', 1, 'primary', 'starting', 't', (SELECT seq + 1 FROM jobs WHERE id = 'job_3'));
         UPDATE attempts SET state = 'running', dispatched_at = '2026-01-01T00:00:00.000Z' WHERE id = 'att_5';
         UPDATE attempts SET state = 'failed', finished_at = '2026-01-01T00:00:00.002Z',
                error = '{\"code\":\"dispatch_failed\",\"message\":\"x\",\"retryable\":true}'
          WHERE id = 'att_5';
         INSERT INTO job_events (job_id, seq, at, type, attempt_id, details)
         VALUES ('job_3', (SELECT seq + 1 FROM jobs WHERE id = 'job_3'), 't', 'failover_skipped', 'att_5', '{\"for\":\"failover\",\"reason\":\"none\"}'),
                ('job_1', (SELECT seq + 1 FROM jobs WHERE id = 'job_1'), 't', 'failover_skipped', 'att_3', '{\"for\":\"hedge\",\"reason\":\"none\"}');");

    let got = counters(&conn);
    let want: std::collections::BTreeMap<String, i64> = [
        ("primary jobs_created", 3),
        ("primary attempts_failed", 3),
        ("primary latency_le_100", 1),
        ("fallback retries_started", 1),
        ("fallback attempts_succeeded", 1),
        ("fallback latency_le_250", 1),
        ("primary hedges_started", 1),
        ("primary attempts_superseded", 1),
        ("primary attempts_unknown", 1),
        ("primary failovers_skipped", 1),
        ("primary hedges_skipped", 1),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(got, want);
}

/// Every shard keeps a copy of the certifications, written one place after another: a
/// report replaces a copy only if it is as new or newer, so two certification runs that
/// overlap (or a retry behind a slow run) leave every copy with the newest report.
#[test]
fn a_certification_copy_is_replaced_only_by_a_newer_report() {
    let conn = migrated();
    let save = |passed: u32, at: &str, digest: &str| {
        conn.execute(
            sql::SAVE_CERTIFICATION,
            rusqlite::params!["fallback", "summarize", "v1", passed, "[]", at, digest],
        )
        .unwrap();
    };
    let stored = || -> (u32, String, String) {
        conn.query_row(
            "SELECT passed, certified_at, provider_digest FROM certifications
              WHERE provider = 'fallback' AND kind = 'summarize' AND contract_version = 'v1'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap()
    };
    save(1, "2026-11-30T10:00:00.000Z", "d-new");
    // An older run's report, arriving late: ignored.
    save(0, "2026-11-30T09:59:59.999Z", "d-old");
    assert_eq!(
        stored(),
        (1, "2026-11-30T10:00:00.000Z".into(), "d-new".into())
    );
    // The same report again (a retry): the same row.
    save(1, "2026-11-30T10:00:00.000Z", "d-new");
    assert_eq!(
        stored(),
        (1, "2026-11-30T10:00:00.000Z".into(), "d-new".into())
    );
    // A newer run: replaces it.
    save(0, "2026-11-30T10:00:00.001Z", "d-newer");
    assert_eq!(
        stored(),
        (0, "2026-11-30T10:00:00.001Z".into(), "d-newer".into())
    );
}

/// 0007 rebuilds the tables of a job: a deployment keeps every job, key and document it
/// had, and each job's log reads as it did, line for line, numbered again 1, 2, … with
/// its ETag the last line a client sees.
#[test]
fn the_lean_schema_keeps_every_job_its_document_etag_and_log() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../edge/migrations");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .collect();
    files.sort();
    let name = |p: &std::path::PathBuf| p.file_name().unwrap().to_string_lossy().into_owned();
    let (before, rest): (Vec<_>, Vec<_>) =
        files.into_iter().partition(|p| name(p).as_str() < "0007");
    // 0007 alone; the ones after it are checked at the end.
    let (after, later): (Vec<_>, Vec<_>) =
        rest.into_iter().partition(|p| name(p).starts_with("0007"));
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch("PRAGMA foreign_keys = ON").unwrap();
    for file in &before {
        conn.execute_batch(&std::fs::read_to_string(file).unwrap())
            .unwrap();
    }
    // Three jobs as 0006 kept them: one that succeeded after a lost race, one with an
    // unknown attempt resolved, one cancelled with a line that changes nothing.
    conn.execute_batch(
        "INSERT INTO jobs (id, owner_id, idempotency_key, fingerprint, kind, input, provider,
                           status, created_at, updated_at)
         VALUES ('job_a', 'o', 'ka', 'f', 'summarize', '{}', 'primary', 'queued',
                 '2026-11-01T00:00:00.000Z', '2026-11-01T00:00:00.000Z'),
                ('job_b', 'o', 'kb', 'f', 'summarize', '{}', 'primary', 'queued',
                 '2026-11-01T00:00:00.000Z', '2026-11-01T00:00:00.000Z'),
                ('job_c', 'p', 'kc', 'f', 'summarize', '{}', 'primary', 'queued',
                 '2026-11-01T00:00:00.000Z', '2026-11-01T00:00:00.000Z');
         INSERT INTO attempts (id, job_id, n, provider, state, started_at)
         VALUES ('att_a1', 'job_a', 1, 'primary', 'starting', '2026-11-01T00:00:00.000Z'),
                ('att_b1', 'job_b', 1, 'primary', 'starting', '2026-11-01T00:00:00.000Z'),
                ('att_c1', 'job_c', 1, 'primary', 'starting', '2026-11-01T00:00:00.000Z');
         UPDATE attempts SET state = 'running',
                             dispatched_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now');
         INSERT INTO attempts (id, job_id, n, provider, state, started_at, started_by)
         VALUES ('att_a2', 'job_a', 2, 'fallback', 'starting', '2026-11-01T00:00:02.000Z', 'hedge');
         UPDATE attempts SET state = 'running',
                             dispatched_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
          WHERE id = 'att_a2';
         UPDATE jobs SET status = 'succeeded', result = '{\"summary\":\"s\"}',
                         completed_by = 'att_a2', version = version + 1 WHERE id = 'job_a';
         UPDATE attempts SET state = 'succeeded',
                             finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
          WHERE id = 'att_a2';
         UPDATE attempts SET state = 'superseded' WHERE id = 'att_a1';
         UPDATE attempts SET state = 'unknown' WHERE id = 'att_b1';
         UPDATE attempts SET state = 'failed', error = '{\"code\":\"resolved_failed\",\"message\":\"m\",\"retryable\":true}'
          WHERE id = 'att_b1';
         UPDATE jobs SET status = 'cancelled', version = version + 1 WHERE id = 'job_c';
         INSERT INTO job_events (job_id, at, type, details)
         VALUES ('job_c', '2026-11-01T00:00:03.000Z', 'job_cancelled', '{\"attempts\":[\"att_c1\"]}');
         UPDATE attempts SET state = 'cancelled' WHERE id = 'att_c1';
         INSERT INTO job_events (job_id, at, type, attempt_id, details)
         VALUES ('job_c', '2026-11-01T00:00:04.000Z', 'dispatch_ignored', 'att_c1', '{}');",
    )
    .unwrap();
    type Seen = Vec<(String, String, String, Vec<String>)>;
    let seen = |conn: &Connection, log: &str| -> Seen {
        let mut jobs = conn
            .prepare("SELECT id, doc, etag FROM job_documents ORDER BY id")
            .unwrap();
        jobs.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .map(Result::unwrap)
            .map(|(id, doc, etag): (String, String, String)| {
                let lines = conn
                    .prepare(&format!(
                        "SELECT json_array(type, at, attempt_id, json(details)) FROM {log}
                          WHERE job_id = ?1 ORDER BY seq"
                    ))
                    .unwrap()
                    .query_map([&id], |r| r.get(0))
                    .unwrap()
                    .map(Result::unwrap)
                    .collect();
                (id, doc, etag, lines)
            })
            .collect()
    };
    let old = seen(&conn, "job_events");
    assert_eq!(old.len(), 3);
    assert!(
        old.iter().all(|(_, _, _, lines)| lines.len() >= 4),
        "{old:?}"
    );
    for file in &after {
        conn.execute_batch(&std::fs::read_to_string(file).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    }
    let new = seen(&conn, "job_log");
    let without_etags = |jobs: &Seen| -> Vec<(String, String, Vec<String>)> {
        jobs.iter()
            .map(|(id, doc, _, lines)| (id.clone(), doc.clone(), lines.clone()))
            .collect()
    };
    assert_eq!(without_etags(&new), without_etags(&old));
    for (id, _, etag, _) in &new {
        let numbers: Vec<i64> = conn
            .prepare("SELECT seq FROM job_log WHERE job_id = ?1 ORDER BY seq")
            .unwrap()
            .query_map([id], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(
            numbers,
            (1..=numbers.len() as i64).collect::<Vec<_>>(),
            "{id}"
        );
        let shown: i64 = conn
            .query_row(
                "SELECT max(seq) FROM job_log WHERE job_id = ?1
                    AND type NOT IN ('dispatch_ignored', 'failover_skipped',
                                     'late_result_discarded')",
                [id],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(*etag, format!("\"{shown}\""), "{id}");
    }
    let kept: i64 = conn
        .query_row(
            "SELECT count(*) FROM jobs WHERE (owner_id, idempotency_key) IN
               (VALUES ('o', 'ka'), ('o', 'kb'), ('p', 'kc'))",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(kept, 3);
    // The next change of a moved job numbers on from its last.
    let last: i64 = conn
        .query_row(
            "SELECT max(seq) FROM job_log WHERE job_id = 'job_c'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let seq: i64 = conn
        .query_row("SELECT seq FROM jobs WHERE id = 'job_c'", [], |r| r.get(0))
        .unwrap();
    assert_eq!(seq, last);
    let fk: i64 = conn
        .query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(fk, 0);

    // 0008 adds each attempt's tokens: the same documents, every attempt with
    // `tokens: null` (none was stated before it).
    assert!(
        later.iter().any(|p| name(p).starts_with("0008")),
        "{later:?}"
    );
    for file in &later {
        conn.execute_batch(&std::fs::read_to_string(file).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    }
    let newest = seen(&conn, "job_log");
    assert_eq!(newest.len(), new.len());
    for ((id, doc, _, _), (_, was, _, _)) in newest.iter().zip(&new) {
        let mut expected: serde_json::Value = serde_json::from_str(was).unwrap();
        for attempt in expected["attempts"].as_array_mut().unwrap() {
            attempt["tokens"] = serde_json::Value::Null;
        }
        let doc: serde_json::Value = serde_json::from_str(doc).unwrap();
        assert_eq!(doc, expected, "{id}");
    }
}
