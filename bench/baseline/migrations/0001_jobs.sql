-- Migration number: 0001 	 the baseline's jobs table

-- The columns, keys, CHECK and index of onceclick's `jobs` (edge/migrations/0001), so a
-- bare insert here touches the same B-trees as the job row of a real create. None of
-- the rest: no attempts, no job_events, no triggers, no views.
CREATE TABLE jobs (
  id              TEXT PRIMARY KEY,
  owner_id        TEXT NOT NULL,
  idempotency_key TEXT NOT NULL,
  fingerprint     TEXT NOT NULL,
  kind            TEXT NOT NULL,
  input           TEXT NOT NULL,
  provider        TEXT NOT NULL,
  status          TEXT NOT NULL
    CHECK (status IN ('queued', 'running', 'unknown', 'failed', 'succeeded', 'cancelled')),
  version         INTEGER NOT NULL DEFAULT 1,
  result          TEXT,
  completed_by    TEXT,
  created_at      TEXT NOT NULL,
  updated_at      TEXT NOT NULL,
  UNIQUE (owner_id, idempotency_key)
);

CREATE INDEX jobs_by_status ON jobs (status, updated_at);
