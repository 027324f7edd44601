//! The D1 seeded with 1,000,000 jobs that `cargo xtask bench` measures create beside:
//! a template built once per schema and seed, then copied for each run.

use crate::tools::{self, Tools};
use crate::wrangler;
use anyhow::Result;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The template D1 with `jobs` seeded jobs: built once per schema and seed, then copied
/// for each run. Written straight into the SQLite file (no Worker running), as
/// succeeded jobs of 100 owners, each with its attempt; the triggers log their events
/// as in real use.
pub(crate) fn seed_template(tools: &Tools, root: &Path, jobs: usize) -> Result<PathBuf> {
    let sql = SEED_SQL.replace("{JOBS}", &jobs.to_string());
    let mut inputs = sql.clone();
    let mut migrations: Vec<_> = std::fs::read_dir(root.join("edge/migrations"))?
        .flatten()
        .map(|e| e.path())
        .collect();
    migrations.sort();
    for path in migrations {
        inputs.push_str(&std::fs::read_to_string(path)?);
    }
    let hash = &tools::sha256_hex(inputs.as_bytes())[..12];
    let dir = root.join(format!("target/xtask/seed-{jobs}-{hash}"));
    if dir.join("done").exists() {
        return Ok(dir);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let started = Instant::now();
    eprintln!("xtask: seeding a D1 with {jobs} jobs (once per schema)");
    wrangler::migrate(tools, &dir, true)?;
    let db = onceclick_tests::db::open_writable_in(&dir);
    db.execute_batch(&sql)?;
    drop(db);
    std::fs::write(dir.join("done"), "")?;
    eprintln!("xtask: seeded in {:.0} s", started.elapsed().as_secs_f64());
    Ok(dir)
}

const SEED_SQL: &str = "
PRAGMA synchronous = OFF;
BEGIN;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {JOBS})
INSERT INTO jobs (id, owner_id, idempotency_key, fingerprint, kind, input, provider, status,
                  version, result, completed_by, created_at, updated_at, seq, doc_seq)
SELECT printf('job_seed_%08d', i), printf('seed-owner-%02d', i % 100), printf('seed-key-%08d', i),
       lower(hex(randomblob(32))), 'summarize',
       '{\"text\":\"A seeded job, one of many, for the bench to create beside.\"}', 'primary',
       'succeeded', 3, '{\"summary\":\"A seeded job.\"}', printf('att_seed_%08d', i),
       strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 day'), strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 day'),
       4, 4
  FROM n;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {JOBS})
INSERT INTO attempts (id, job_id, n, provider, state, started_at, dispatched_at, finished_at,
                      started_seq, running_seq)
SELECT printf('att_seed_%08d', i), printf('job_seed_%08d', i), 1, 'primary', 'succeeded',
       strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 day'), strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 day'),
       strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 day'), 2, 3
  FROM n;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {JOBS})
INSERT INTO job_events (job_id, seq, at, type, attempt_id, details)
SELECT printf('job_seed_%08d', i), 4, strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 day'),
       'attempt_succeeded', printf('att_seed_%08d', i),
       '{\"from\":\"running\",\"to\":\"succeeded\",\"provider\":\"primary\",\"error\":null}'
  FROM n;
COMMIT;
";
