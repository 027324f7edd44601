//! A read-only look at the local store behind `wrangler dev` (SQLite files that miniflare
//! keeps under `--persist-to`), so tests can count rows directly: the one D1 database,
//! or, when the Worker runs sharded (`STORE=durable`), every shard's SQLite at once,
//! attached to one connection under views that union them (`jobs`, `attempts`, …), so
//! the same queries read the whole store either way.

use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};

fn find_sqlite(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            find_sqlite(&path, found);
        } else if path.extension().is_some_and(|e| e == "sqlite")
            && path.file_name().is_some_and(|n| n != "metadata.sqlite")
        {
            found.push(path);
        }
    }
}

/// Opens the D1 database under `ONCECLICK_D1_DIR` read-only.
pub fn open() -> Connection {
    let dir = std::env::var("ONCECLICK_D1_DIR")
        .expect("ONCECLICK_D1_DIR is not set: run with `cargo xtask test`");
    open_in(Path::new(&dir))
}

/// The shards' SQLite files under `dir` (Durable Objects whose database has `jobs`),
/// in a stable order.
fn shard_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    find_sqlite(&dir.join("v3/do"), &mut found);
    found.sort();
    found.retain(|path| {
        Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)
            .and_then(|c| {
                c.query_row(
                    "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'jobs'",
                    [],
                    |r| r.get::<_, i64>(0),
                )
            })
            .is_ok_and(|n| n == 1)
    });
    found
}

/// Each shard's SQLite file under `dir`, with the name its object gave itself
/// (`s<count>.<index>`, its `onceclick_shard` row; `None` if it has none yet).
pub fn shard_names_in(dir: &Path) -> Vec<(PathBuf, Option<String>)> {
    shard_files(dir)
        .into_iter()
        .map(|path| {
            let name = Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_ONLY)
                .and_then(|c| {
                    c.query_row("SELECT name FROM onceclick_shard", [], |r| {
                        r.get::<_, String>(0)
                    })
                })
                .ok();
            (path, name)
        })
        .collect()
}

/// The shards' SQLite files under `dir` of the layout of `count` shards: those whose
/// object named itself `s<count>.<index>`, in a stable order.
pub fn shard_files_of(dir: &Path, count: u32) -> Vec<PathBuf> {
    let prefix = format!("s{count}.");
    shard_names_in(dir)
        .into_iter()
        .filter(|(_, name)| name.as_ref().is_some_and(|n| n.starts_with(&prefix)))
        .map(|(path, _)| path)
        .collect()
}

/// One connection over the shards of the layout of `count` shards under `dir`, read-only
/// (the union views of [`open_shards_in`]).
pub fn open_shards_of(dir: &Path, count: u32) -> Connection {
    open_shards(&shard_files_of(dir, count))
}

/// Opens one shard's SQLite file read-only.
pub fn open_file(path: &Path) -> Connection {
    opened(Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY,
    ))
}

/// Opens one shard's SQLite file for writing: for state the API cannot reach (a job
/// idle for years).
pub fn open_file_writable(path: &Path) -> Connection {
    opened(Connection::open(path))
}

/// The tables the Worker writes (and the view of a job's whole log), as the union views
/// of a sharded store name them. The certifications are a copy per shard: their view
/// keeps one of each.
const SHARDED_TABLES: [(&str, &str); 6] = [
    ("jobs", "UNION ALL"),
    ("attempts", "UNION ALL"),
    ("job_events", "UNION ALL"),
    ("job_log", "UNION ALL"),
    ("stats", "UNION ALL"),
    ("certifications", "UNION"),
];

/// One connection over every shard of a sharded store, read-only.
fn open_shards(files: &[PathBuf]) -> Connection {
    let conn = opened(Connection::open_with_flags(
        ":memory:",
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_URI,
    ));
    for (i, file) in files.iter().enumerate() {
        let uri = format!("file:{}?mode=ro", file.display());
        conn.execute("ATTACH DATABASE ?1 AS ?2", [uri, format!("s{i}")])
            .unwrap_or_else(|e| panic!("attach {}: {e}", file.display()));
    }
    for (table, union) in SHARDED_TABLES {
        let selects: Vec<String> = (0..files.len())
            .map(|i| format!("SELECT * FROM s{i}.{table}"))
            .collect();
        conn.execute_batch(&format!(
            "CREATE TEMP VIEW {table} AS {}",
            selects.join(&format!(" {union} "))
        ))
        .unwrap_or_else(|e| panic!("the view {table}: {e}"));
    }
    conn
}

/// The one D1 database file that `wrangler dev --persist-to dir` keeps.
fn sqlite_in(dir: &Path) -> PathBuf {
    let mut found = Vec::new();
    find_sqlite(&dir.join("v3/d1"), &mut found);
    assert_eq!(
        found.len(),
        1,
        "expected one D1 database under {}: {found:?}",
        dir.display()
    );
    found.remove(0)
}

/// Opens the store that `wrangler dev --persist-to dir` keeps, read-only: its shards if
/// it has any, else its D1 database.
pub fn open_in(dir: &Path) -> Connection {
    let shards = shard_files(dir);
    if !shards.is_empty() {
        return open_shards(&shards);
    }
    opened(Connection::open_with_flags(
        sqlite_in(dir),
        OpenFlags::SQLITE_OPEN_READ_ONLY,
    ))
}

/// Opens the D1 database under `dir` read-only, even when shards are there too (a
/// deployment that moved and keeps its D1).
pub fn open_d1_in(dir: &Path) -> Connection {
    opened(Connection::open_with_flags(
        sqlite_in(dir),
        OpenFlags::SQLITE_OPEN_READ_ONLY,
    ))
}

/// Opens every shard under `dir` at once, read-only (no shard yet: an error on use).
pub fn open_shards_in(dir: &Path) -> Connection {
    open_shards(&shard_files(dir))
}

/// Opens the D1 database for writing: for state the API cannot reach, and for the
/// bench's seed.
pub fn open_writable_in(dir: &Path) -> Connection {
    opened(Connection::open(sqlite_in(dir)))
}

fn opened(conn: rusqlite::Result<Connection>) -> Connection {
    let conn = conn.expect("open local D1");
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .expect("busy timeout");
    conn
}

/// `SELECT count(*) …` with one text parameter.
pub fn count(sql: &str, param: &str) -> i64 {
    open()
        .query_row(sql, [param], |row| row.get(0))
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Writes to the local D1 behind the Worker's back, for tests that must set up a state
/// the API cannot reach (a certification stored under an older contract version).
pub fn execute(sql: &str, param: &str) -> usize {
    execute_with(sql, &[param])
}

/// Like [`execute`], with any number of text parameters.
///
/// On a sharded store the statement runs in every shard (a certification is a copy in
/// each; a row named by id is in one), and the rows changed are summed.
pub fn execute_with(sql: &str, params: &[&str]) -> usize {
    let dir = std::env::var("ONCECLICK_D1_DIR").expect("ONCECLICK_D1_DIR is not set");
    execute_in(Path::new(&dir), sql, params)
}

/// Like [`execute_with`], on the store persisted under `dir`.
pub fn execute_in(dir: &Path, sql: &str, params: &[&str]) -> usize {
    let shards = shard_files(dir);
    let conns = if shards.is_empty() {
        vec![open_writable_in(dir)]
    } else {
        shards.iter().map(|f| opened(Connection::open(f))).collect()
    };
    conns
        .iter()
        .map(|conn| {
            conn.execute(sql, rusqlite::params_from_iter(params.iter()))
                .unwrap_or_else(|e| panic!("{sql}: {e}"))
        })
        .sum()
}

/// The `at` of every event of `job_id`, in `seq` order.
pub fn event_times(job_id: &str) -> Vec<String> {
    let conn = open();
    let mut stmt = conn
        .prepare("SELECT at FROM job_log WHERE job_id = ?1 ORDER BY seq")
        .expect("prepare");
    stmt.query_map([job_id], |row| row.get(0))
        .expect("query")
        .collect::<Result<Vec<String>, _>>()
        .expect("rows")
}

/// How many attempts job `job_id` has.
pub fn attempts_of(job_id: &str) -> i64 {
    count("SELECT count(*) FROM attempts WHERE job_id = ?1", job_id)
}

/// The id of every job in the store (D1's, or every shard's).
pub fn job_ids() -> std::collections::HashSet<String> {
    let conn = open();
    let mut stmt = conn
        .prepare("SELECT id FROM jobs")
        .unwrap_or_else(|e| panic!("the jobs' ids: {e}"));
    stmt.query_map([], |r| r.get::<_, String>(0))
        .and_then(Iterator::collect)
        .unwrap_or_else(|e| panic!("the jobs' ids: {e}"))
}

/// Whether the text of a row (a [`snapshot`] line) names one of the jobs `ids`: any
/// `job_` followed by a UUID (`8-4-4-4-12` hex digits) in it that is one of them.
pub fn names_any(line: &str, ids: &std::collections::HashSet<String>) -> bool {
    line.match_indices("job_").any(|(at, _)| {
        line.get(at..at + 40).is_some_and(|id| {
            id.bytes().skip(4).enumerate().all(|(i, b)| match i {
                8 | 13 | 18 | 23 => b == b'-',
                _ => b.is_ascii_hexdigit(),
            }) && ids.contains(id)
        })
    })
}

/// How many jobs the key `key` names (over every owner).
pub fn jobs_with_key(key: &str) -> i64 {
    count("SELECT count(*) FROM jobs WHERE idempotency_key = ?1", key)
}

/// The tables the Worker writes, each with its primary key.
/// The one table a refused request may write: the figures' counters (`GET /v1/stats`
/// counts replays and conflicts, which are answered after the create's batch). Every
/// "wrote nothing" check compares everything else.
pub const FIGURES_TABLE: &str = "stats";

/// The rows of [`FIGURES_TABLE`], one line each, sorted: what [`snapshot`] leaves out.
pub fn figures() -> Vec<String> {
    let conn = open();
    let sql = format!("SELECT minute, kind, provider, metric, n FROM {FIGURES_TABLE}");
    let mut stmt = conn.prepare(&sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    let mut lines: Vec<String> = stmt
        .query_map([], |row| {
            Ok(format!(
                "{} {} {} {} {}",
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, String>(3)?,
                row.get::<_, i64>(4)?
            ))
        })
        .and_then(Iterator::collect)
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    lines.sort();
    lines
}

/// A logical snapshot of the whole store: every row of every table in every database
/// (D1's, or each shard's), but [`FIGURES_TABLE`] and the runtime's own `_cf_` tables,
/// one line of text per row, sorted, all read in one read transaction. Two snapshots are
/// equal exactly when nothing but the figures was written between them.
pub fn snapshot() -> Vec<String> {
    let conn = open();
    let tx = conn
        .unchecked_transaction()
        .expect("a read transaction on the local store");
    let databases: Vec<String> = tx
        .prepare("SELECT name FROM pragma_database_list WHERE name <> 'temp'")
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .expect("the databases");
    let mut lines = Vec::new();
    for db in databases {
        let tables: Vec<String> = tx
            .prepare(&format!(
                "SELECT name FROM \"{db}\".sqlite_master WHERE type = 'table'
                   AND name <> ?1 AND name NOT LIKE '\\_cf\\_%' ESCAPE '\\' ORDER BY name"
            ))
            .and_then(|mut s| s.query_map([FIGURES_TABLE], |r| r.get(0))?.collect())
            .unwrap_or_else(|e| panic!("the tables of {db}: {e}"));
        for table in tables {
            let sql = format!("SELECT * FROM \"{db}\".\"{table}\"");
            let mut stmt = tx.prepare(&sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
            let columns = stmt.column_count();
            let rows = stmt
                .query_map([], |row| {
                    (0..columns)
                        .map(|i| row.get::<_, rusqlite::types::Value>(i))
                        .collect::<Result<Vec<_>, _>>()
                })
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
            for row in rows {
                let row = row.unwrap_or_else(|e| panic!("{sql}: {e}"));
                lines.push(format!("{db}.{table} {row:?}"));
            }
        }
    }
    lines.sort();
    lines
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_row_names_a_job_by_its_whole_id() {
        let id = "job_0192f3a4-5b6c-7d8e-9f00-112233445566";
        let ids = std::collections::HashSet::from([id.to_owned()]);
        let row = format!(r#"s3.attempts [Text("att_1"), Text("{id}"), Text("starting")]"#);
        assert!(super::names_any(&row, &ids));
        // The same UUID under another prefix, a cut-short id, another job: not it.
        let bare = id.trim_start_matches("job_");
        assert!(!super::names_any(&format!("Text(\"att_{bare}\")"), &ids));
        assert!(!super::names_any(&row[..row.find(id).unwrap() + 30], &ids));
        assert!(!super::names_any(&row.replace("5566", "5567"), &ids));
    }
}
