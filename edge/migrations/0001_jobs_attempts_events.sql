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
  started_at  TEXT NOT NULL,                        -- inserted
  dispatched_at TEXT,                               -- claimed by the dispatcher: the provider call
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

-- The reconciler's scans: attempts stuck in one state, and finished jobs past retention.
CREATE INDEX attempts_by_state ON attempts (state, dispatched_at);
CREATE INDEX jobs_by_status ON jobs (status, updated_at);

-- Every change to a job is an event, written by the same statement that makes the change:
-- these triggers run inside it, so the log and the job's status can never disagree with
-- the attempts. (A D1 batch is one transaction; a trigger is part of its statement.)
CREATE TRIGGER job_created AFTER INSERT ON jobs
BEGIN
  INSERT INTO job_events (job_id, at, type, details)
  VALUES (NEW.id, NEW.created_at, 'job_created',
          json_object('kind', NEW.kind, 'provider', NEW.provider,
                      'idempotency_key', NEW.idempotency_key));
END;

CREATE TRIGGER attempt_started AFTER INSERT ON attempts
BEGIN
  INSERT INTO job_events (job_id, at, type, attempt_id, details)
  VALUES (NEW.job_id, NEW.started_at, 'attempt_started', NEW.id,
          json_object('n', NEW.n, 'provider', NEW.provider));
  UPDATE jobs SET status = 'queued', version = version + 1, updated_at = NEW.started_at
   WHERE id = NEW.job_id AND status NOT IN ('queued', 'running', 'succeeded', 'cancelled');
END;

-- One event per move. Moves out of `unknown` are resolutions; a move to `superseded`
-- is a lost race and names both attempts. Cancelling a job logs `job_cancelled` once,
-- so the attempts it cancels out of `starting` or `running` add nothing here.
CREATE TRIGGER attempt_moved AFTER UPDATE OF state ON attempts
WHEN OLD.state <> NEW.state AND NOT (NEW.state = 'cancelled' AND OLD.state <> 'unknown')
BEGIN
  INSERT INTO job_events (job_id, at, type, attempt_id, details)
  VALUES (
    NEW.job_id,
    strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
    CASE
      WHEN NEW.state = 'superseded' THEN 'race_lost'
      WHEN OLD.state = 'unknown' THEN 'attempt_resolved'
      WHEN NEW.state = 'running' THEN 'attempt_running'
      WHEN NEW.state = 'succeeded' THEN 'attempt_succeeded'
      WHEN NEW.state = 'failed' THEN 'attempt_failed'
      WHEN NEW.state = 'unknown' THEN 'attempt_timed_out'
    END,
    NEW.id,
    CASE
      WHEN NEW.state = 'superseded' THEN json_object(
        'winner', (SELECT completed_by FROM jobs WHERE id = NEW.job_id),
        'loser', NEW.id, 'provider', NEW.provider)
      ELSE json_object('from', OLD.state, 'to', NEW.state, 'provider', NEW.provider,
                       'error', json(NEW.error))
    END);
  -- An unfinished job's status follows its attempts: any unknown blocks, then any
  -- running, then any starting; otherwise the last try failed.
  UPDATE jobs
     SET status = (
           SELECT CASE
             WHEN sum(state = 'unknown') > 0 THEN 'unknown'
             WHEN sum(state = 'running') > 0 THEN 'running'
             WHEN sum(state = 'starting') > 0 THEN 'queued'
             ELSE 'failed' END
             FROM attempts WHERE job_id = NEW.job_id),
         version = version + 1,
         updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
   WHERE id = NEW.job_id
     AND status NOT IN ('succeeded', 'cancelled')
     AND status <> (
           SELECT CASE
             WHEN sum(state = 'unknown') > 0 THEN 'unknown'
             WHEN sum(state = 'running') > 0 THEN 'running'
             WHEN sum(state = 'starting') > 0 THEN 'queued'
             ELSE 'failed' END
             FROM attempts WHERE job_id = NEW.job_id);
END;

-- The Job document of the API, built where the data is so that reading a job with all
-- its attempts is one statement. Every read of a Job goes through this view.
-- `etag` is the job's last event: every change writes an event, so it changes exactly
-- when the document does, and SQL can compare it (If-Match) in the statement it guards.
CREATE VIEW job_documents AS
SELECT
  j.id,
  j.owner_id,
  j.idempotency_key,
  j.fingerprint,
  j.kind,
  j.status,
  j.provider,
  (SELECT '"' || max(seq) || '"' FROM job_events WHERE job_id = j.id) AS etag,
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
