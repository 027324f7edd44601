-- Migration number: 0001 	 jobs, attempts and the job event log

-- A job is the durable record of one intent. The database, not the Worker, decides
-- whether an (owner, key) pair is new: UNIQUE(owner_id, idempotency_key).
CREATE TABLE jobs (
  id              TEXT PRIMARY KEY,                 -- job_<uuidv7>
  owner_id        TEXT NOT NULL,                    -- the token's sub, never the body's
  idempotency_key TEXT NOT NULL,
  fingerprint     TEXT NOT NULL,                    -- sha256(JCS({kind, input, provider}))
  kind            TEXT NOT NULL,
  input           TEXT NOT NULL,                    -- JSON
  provider        TEXT NOT NULL,                    -- the first attempt's provider
  status          TEXT NOT NULL
    CHECK (status IN ('queued', 'running', 'unknown', 'failed', 'succeeded', 'cancelled')),
  version         INTEGER NOT NULL DEFAULT 1,       -- bumped by every change to this row
  result          TEXT,                             -- JSON; set once, by the winner
  completed_by    TEXT,                             -- the winning attempt's id
  created_at      TEXT NOT NULL,
  updated_at      TEXT NOT NULL,
  UNIQUE (owner_id, idempotency_key)
);

-- An attempt is one try of a job against one provider.
CREATE TABLE attempts (
  id          TEXT PRIMARY KEY,                     -- att_<uuidv7>; the provider's Idempotency-Key
  job_id      TEXT NOT NULL REFERENCES jobs (id),
  n           INTEGER NOT NULL,                     -- 1, 2, 3 … within the job
  provider    TEXT NOT NULL,
  state       TEXT NOT NULL
    CHECK (state IN ('starting', 'running', 'succeeded', 'failed', 'unknown',
                     'abandoned', 'cancelled', 'superseded')),
  started_at  TEXT NOT NULL,
  finished_at TEXT,
  error       TEXT,                                 -- JSON {code, message, retryable}
  UNIQUE (job_id, n)                                -- also serves "the attempts of a job"
);

-- Append-only: rows are inserted, never updated or deleted while the job is kept.
CREATE TABLE job_events (
  seq        INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id     TEXT NOT NULL REFERENCES jobs (id),
  at         TEXT NOT NULL,
  type       TEXT NOT NULL,
  attempt_id TEXT,
  details    TEXT NOT NULL DEFAULT '{}'             -- JSON
);
CREATE INDEX job_events_by_job ON job_events (job_id, seq);

-- The Job document of the API, built where the data is so that reading a job with all
-- its attempts is one statement. Every read of a Job goes through this view.
CREATE VIEW job_documents AS
SELECT
  j.id,
  j.owner_id,
  j.idempotency_key,
  j.fingerprint,
  json_object(
    'id', j.id,
    'kind', j.kind,
    'status', j.status,
    'version', j.version,
    'input', json(j.input),
    'provider', j.provider,
    'result', json(j.result),
    'completed_by', j.completed_by,
    'created_at', j.created_at,
    'updated_at', j.updated_at,
    'attempts', (
      SELECT json_group_array(json_object(
        'id', a.id,
        'n', a.n,
        'provider', a.provider,
        'state', a.state,
        'started_at', a.started_at,
        'finished_at', a.finished_at,
        'error', json(a.error)))
      FROM (SELECT * FROM attempts WHERE job_id = j.id ORDER BY n) AS a)
  ) AS doc
FROM jobs AS j;
