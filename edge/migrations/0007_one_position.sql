-- Migration number: 0007 	 one position per job, and a lean schema

-- Two changes, made together because both rebuild the three tables of a job.
--
-- 1. One position per job. `jobs.seq` counts the job's changes: every change to the job
--    or to any of its attempts takes the next number, in the very statement that makes
--    it, and so does every line of its log. `jobs.doc_seq` is the number of the last
--    change a client can see in the document, and the job's ETag. An attempt keeps the
--    numbers of its start and of its claim. The log (`job_log`) is ordered by them, and
--    the live stream will name its place in a job by them.
--
-- 2. Rows written per job, as D1 and Durable Object SQLite bill them (each row and each
--    index entry an insert or update touches): the tables are WITHOUT ROWID, so that
--    their primary key is their only copy of the id; one index per need (the admin's
--    list reads `jobs_by_status`, the purge the ended jobs alone, `jobs_ended`; every
--    sweep of attempts reads `attempts_by_state`); the fallback button's request index
--    holds only the attempts it made; and the log stores only what no row says. Its
--    `job_created`, `attempt_started`, `attempt_running` and a first try's
--    `attempt_succeeded` are read from the job's and the attempts' own columns: a job
--    that succeeds at once stores no log row. A job's attempts and log rows are deleted
--    with it.
--
-- Existing jobs keep their ids, keys, documents and logs; each job's log is numbered
-- again from 1 in its order (before, the numbers were one sequence for every job), so
-- its ETag changes once, here: a client's next conditional request reads it afresh.

DROP VIEW job_documents;
DROP VIEW job_rollup;
DROP TRIGGER job_created;
DROP TRIGGER attempt_started;
DROP TRIGGER attempt_moved;
DROP TRIGGER attempt_move_allowed;
DROP TRIGGER stats_job_created;
DROP TRIGGER stats_attempt_started;
DROP TRIGGER stats_attempt_moved;
DROP TRIGGER stats_skipped;

ALTER TABLE job_events RENAME TO job_events_0006;
ALTER TABLE attempts RENAME TO attempts_0006;
ALTER TABLE jobs RENAME TO jobs_0006;

CREATE TABLE jobs (
  id              TEXT PRIMARY KEY,                 -- job_<uuid>: its first 48 bits are its creation ms
  owner_id        TEXT NOT NULL,                    -- the token's sub, never the body's
  idempotency_key TEXT NOT NULL,
  fingerprint     TEXT NOT NULL,                    -- sha256(JCS({kind, input, provider}))
  kind            TEXT NOT NULL,
  input           TEXT NOT NULL,                    -- JSON
  provider        TEXT NOT NULL,                    -- the first attempt's provider
  status          TEXT NOT NULL
    CHECK (status IN ('queued', 'running', 'unknown', 'failed', 'succeeded', 'cancelled')),
  version         INTEGER NOT NULL DEFAULT 1,       -- bumped by every change to status or result
  result          TEXT,                             -- JSON; set once, by the winner
  completed_by    TEXT,                             -- the winning attempt's id
  created_at      TEXT NOT NULL,
  updated_at      TEXT NOT NULL,                    -- the last change of status or result
  seq             INTEGER NOT NULL,                 -- the job's last change, log line included
  doc_seq         INTEGER NOT NULL,                 -- the last change the document shows: the ETag
  UNIQUE (owner_id, idempotency_key)
) WITHOUT ROWID;

CREATE TABLE attempts (
  id            TEXT PRIMARY KEY,                   -- att_<uuid>; the provider's Idempotency-Key
  job_id        TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
  n             INTEGER NOT NULL,                   -- 1, 2, 3 … within the job
  provider      TEXT NOT NULL,
  state         TEXT NOT NULL
    CHECK (state IN ('starting', 'running', 'succeeded', 'failed', 'unknown',
                     'abandoned', 'cancelled', 'superseded')),
  started_at    TEXT NOT NULL,                      -- inserted
  dispatched_at TEXT,                               -- claimed by the dispatcher: the provider call
  finished_at   TEXT,
  error         TEXT,                               -- JSON {code, message, retryable}
  claim_token   TEXT,
  request_key   TEXT,                               -- the fallback button's Idempotency-Key
  request_fingerprint TEXT,
  started_by    TEXT,                               -- owner, hedge or failover; NULL for a job's first
  started_seq   INTEGER NOT NULL,                   -- the job's change that inserted it
  running_seq   INTEGER,                            -- the job's change that claimed it
  won_seq       INTEGER,                            -- the compare-and-swap it won from running
  UNIQUE (job_id, n)                                -- also serves "the attempts of a job"
) WITHOUT ROWID;

-- What no job or attempt row says: moves after a claim, cancels, lost races, results
-- discarded, failovers skipped, deliveries ignored. Never updated; deleted with the job.
CREATE TABLE job_events (
  job_id     TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
  seq        INTEGER NOT NULL,
  at         TEXT NOT NULL,
  type       TEXT NOT NULL,
  attempt_id TEXT,
  details    TEXT NOT NULL DEFAULT '{}',            -- JSON
  PRIMARY KEY (job_id, seq)
) WITHOUT ROWID;

-- The data of 0001-0006, moved. Each job's log lines are numbered again, 1, 2, … in
-- their order; the lines now read from the jobs' and the attempts' columns give those
-- columns their numbers, and are not copied. Every lookup below is by an index.
CREATE TABLE seq_map_0007 (
  job_id     TEXT NOT NULL,
  old_seq    INTEGER NOT NULL,
  new_seq    INTEGER NOT NULL,
  type       TEXT NOT NULL,
  attempt_id TEXT,
  PRIMARY KEY (job_id, old_seq)
) WITHOUT ROWID;
INSERT INTO seq_map_0007 (job_id, old_seq, new_seq, type, attempt_id)
SELECT job_id, seq, row_number() OVER (PARTITION BY job_id ORDER BY seq), type, attempt_id
  FROM job_events_0006;
CREATE INDEX seq_map_0007_by_attempt ON seq_map_0007 (attempt_id, type);

INSERT INTO jobs (id, owner_id, idempotency_key, fingerprint, kind, input, provider, status,
                  version, result, completed_by, created_at, updated_at, seq, doc_seq)
SELECT j.id, j.owner_id, j.idempotency_key, j.fingerprint, j.kind, j.input, j.provider,
       j.status, j.version, j.result, j.completed_by, j.created_at, j.updated_at,
       coalesce((SELECT max(new_seq) FROM seq_map_0007 WHERE job_id = j.id), 1),
       coalesce((SELECT max(new_seq) FROM seq_map_0007
                  WHERE job_id = j.id
                    AND type NOT IN ('dispatch_ignored', 'failover_skipped',
                                     'late_result_discarded')), 1)
  FROM jobs_0006 AS j;

INSERT INTO attempts (id, job_id, n, provider, state, started_at, dispatched_at, finished_at,
                      error, claim_token, request_key, request_fingerprint, started_by,
                      started_seq, running_seq, won_seq)
SELECT a.id, a.job_id, a.n, a.provider, a.state, a.started_at, a.dispatched_at,
       a.finished_at, a.error, a.claim_token, a.request_key, a.request_fingerprint,
       a.started_by,
       coalesce((SELECT min(new_seq) FROM seq_map_0007
                  WHERE attempt_id = a.id AND type = 'attempt_started'), 1),
       (SELECT min(new_seq) FROM seq_map_0007
         WHERE attempt_id = a.id AND type = 'attempt_running'),
       (SELECT min(new_seq) FROM seq_map_0007
         WHERE attempt_id = a.id AND type = 'attempt_succeeded')
  FROM attempts_0006 AS a;

INSERT INTO job_events (job_id, seq, at, type, attempt_id, details)
SELECT e.job_id, m.new_seq, e.at, e.type, e.attempt_id, e.details
  FROM job_events_0006 AS e
  JOIN seq_map_0007 AS m ON m.job_id = e.job_id AND m.old_seq = e.seq
 WHERE e.type NOT IN ('job_created', 'attempt_started', 'attempt_running',
                      'attempt_succeeded');

DROP TABLE seq_map_0007;
DROP TABLE job_events_0006;
DROP TABLE attempts_0006;
DROP TABLE jobs_0006;

-- The admin's list by status, newest first.
CREATE INDEX jobs_by_status ON jobs (status, id);
-- The purge: ended jobs by their last change. A job enters it once, when it ends.
CREATE INDEX jobs_ended ON jobs (updated_at, id)
  WHERE status IN ('succeeded', 'cancelled', 'failed');
-- An owner's jobs, newest first.
CREATE INDEX jobs_by_owner ON jobs (owner_id, id);
-- Attempts in one state, oldest first: the list, and every sweep of the reconciler
-- (the attempts in `starting`, `running` or `unknown` are few at any time).
CREATE INDEX attempts_by_state ON attempts (state, id);
-- The fallback button's request identity: only the attempts it made have one.
CREATE UNIQUE INDEX attempts_by_request ON attempts (job_id, request_key)
  WHERE request_key IS NOT NULL;

-- The status of a job that is not final follows its attempts (as in 0004).
CREATE VIEW job_rollup AS
SELECT job_id,
       CASE
         WHEN sum(state = 'unknown') > 0 THEN 'unknown'
         WHEN sum(state = 'running') > 0 THEN 'running'
         WHEN sum(state = 'starting') > 0 THEN 'queued'
         ELSE 'failed'
       END AS status
  FROM attempts
 GROUP BY job_id;

-- Defence in depth, as in 0003: the database refuses any attempt move that is not one of
-- `AttemptState::MOVES`.
CREATE TRIGGER attempt_move_allowed BEFORE UPDATE OF state ON attempts
WHEN OLD.state <> NEW.state AND OLD.state || '>' || NEW.state NOT IN (
  'starting>running',
  'running>succeeded',
  'running>failed',
  'running>unknown',
  'unknown>succeeded',
  'unknown>failed',
  'unknown>abandoned',
  'starting>cancelled',
  'running>cancelled',
  'unknown>cancelled',
  'running>superseded',
  'unknown>superseded',
  'starting>superseded')
BEGIN
  SELECT RAISE(ABORT, 'this attempt move is not one of AttemptState::MOVES');
END;

-- A job's first attempt is inserted with the job (its change 2, which the job's insert
-- already counts); a later one is the job's next change, and reopens a failed job.
CREATE TRIGGER attempt_started AFTER INSERT ON attempts
WHEN NEW.n > 1
BEGIN
  UPDATE jobs
     SET seq = NEW.started_seq, doc_seq = NEW.started_seq,
         status = CASE WHEN status IN ('queued', 'running', 'succeeded', 'cancelled')
                       THEN status ELSE 'queued' END,
         version = version + (status NOT IN ('queued', 'running', 'succeeded', 'cancelled')),
         updated_at = CASE WHEN status IN ('queued', 'running', 'succeeded', 'cancelled')
                           THEN updated_at ELSE NEW.started_at END
   WHERE id = NEW.job_id;
END;

-- Every move is the job's next change, apart from two that share the change that caused
-- them: the winner's `succeeded` is the compare-and-swap's (the job took its result, and
-- named the attempt, in the same batch), and a cancel's moves out of `starting` or
-- `running` are the cancel's (`job_cancelled` names them). A claim (`running`) and a win
-- from `running` are read from the attempt's own columns (`running_seq`, `won_seq`);
-- every other move is a log row. An unfinished job's status follows its attempts.
CREATE TRIGGER attempt_moved AFTER UPDATE OF state ON attempts
WHEN OLD.state <> NEW.state
BEGIN
  INSERT INTO job_events (job_id, seq, at, type, attempt_id, details)
  SELECT NEW.job_id,
         j.seq + NOT (NEW.state = 'succeeded' AND j.completed_by IS NEW.id),
         strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
         CASE
           WHEN NEW.state = 'superseded' THEN 'race_lost'
           WHEN OLD.state = 'unknown' THEN 'attempt_resolved'
           WHEN NEW.state = 'succeeded' THEN 'attempt_succeeded'
           WHEN NEW.state = 'failed' THEN 'attempt_failed'
           WHEN NEW.state = 'unknown' THEN 'attempt_timed_out'
         END,
         NEW.id,
         CASE
           WHEN NEW.state = 'superseded' THEN json_object(
             'winner', j.completed_by, 'loser', NEW.id, 'provider', NEW.provider)
           ELSE json_object('from', OLD.state, 'to', NEW.state, 'provider', NEW.provider,
                            'error', json(NEW.error))
         END
    FROM jobs AS j
   WHERE j.id = NEW.job_id
     AND NEW.state <> 'running'
     AND NOT (NEW.state = 'cancelled' AND OLD.state <> 'unknown')
     AND NEW.won_seq IS NULL;
  UPDATE jobs
     SET seq = seq + 1, doc_seq = seq + 1,
         status = CASE WHEN status IN ('succeeded', 'cancelled') THEN status
                       ELSE (SELECT status FROM job_rollup WHERE job_id = NEW.job_id) END,
         version = version + (status NOT IN ('succeeded', 'cancelled')
                              AND status <> (SELECT status FROM job_rollup
                                              WHERE job_id = NEW.job_id)),
         updated_at = CASE
           WHEN status NOT IN ('succeeded', 'cancelled')
            AND status <> (SELECT status FROM job_rollup WHERE job_id = NEW.job_id)
           THEN strftime('%Y-%m-%dT%H:%M:%fZ', 'now') ELSE updated_at END
   WHERE id = NEW.job_id
     AND NOT (NEW.state = 'succeeded' AND completed_by IS NEW.id)
     AND NOT (NEW.state = 'cancelled' AND OLD.state <> 'unknown');
END;

-- A log line that changes nothing a client sees (`dispatch_ignored`, `failover_skipped`,
-- `late_result_discarded`) is the job's next change too, and leaves its ETag.
CREATE TRIGGER log_line_counted AFTER INSERT ON job_events
WHEN NEW.type IN ('dispatch_ignored', 'failover_skipped', 'late_result_discarded')
BEGIN
  UPDATE jobs SET seq = NEW.seq WHERE id = NEW.job_id;
END;

-- A job's whole log, oldest first by `seq`: the lines read from its row and its
-- attempts', and the rows of `job_events`.
CREATE VIEW job_log AS
SELECT id AS job_id, 1 AS seq, created_at AS at, 'job_created' AS type, NULL AS attempt_id,
       json_object('kind', kind, 'provider', provider,
                   'idempotency_key', idempotency_key) AS details
  FROM jobs
UNION ALL
SELECT job_id, started_seq, started_at, 'attempt_started', id,
       json_object('n', n, 'provider', provider)
  FROM attempts
UNION ALL
SELECT job_id, running_seq, dispatched_at, 'attempt_running', id,
       json_object('from', 'starting', 'to', 'running', 'provider', provider, 'error', NULL)
  FROM attempts WHERE running_seq IS NOT NULL
UNION ALL
SELECT job_id, won_seq, finished_at, 'attempt_succeeded', id,
       json_object('from', 'running', 'to', 'succeeded', 'provider', provider,
                   'error', json(error))
  FROM attempts WHERE won_seq IS NOT NULL
UNION ALL
SELECT job_id, seq, at, type, attempt_id, details FROM job_events;

-- The Job document of the API (as in 0003); its ETag is the job's `doc_seq`.
CREATE VIEW job_documents AS
SELECT
  j.id,
  j.owner_id,
  j.idempotency_key,
  j.fingerprint,
  j.kind,
  j.status,
  j.provider,
  '"' || j.doc_seq || '"' AS etag,
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

-- The figures' triggers of 0006, on the new tables.
CREATE TRIGGER stats_job_created AFTER INSERT ON jobs
BEGIN
  INSERT INTO stats (minute, kind, provider, metric, n)
  VALUES (substr(NEW.created_at, 1, 16), NEW.kind, NEW.provider, 'jobs_created', 1)
  ON CONFLICT DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER stats_attempt_started AFTER INSERT ON attempts
WHEN NEW.started_by IS NOT NULL
BEGIN
  INSERT INTO stats (minute, kind, provider, metric, n)
  SELECT substr(NEW.started_at, 1, 16), j.kind, NEW.provider,
         CASE NEW.started_by WHEN 'owner' THEN 'retries_started'
                             WHEN 'hedge' THEN 'hedges_started'
                             ELSE 'failovers_started' END,
         1
    FROM jobs AS j WHERE j.id = NEW.job_id
  ON CONFLICT DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER stats_attempt_moved AFTER UPDATE OF state ON attempts
WHEN OLD.state <> NEW.state
 AND NEW.state IN ('succeeded', 'failed', 'unknown', 'abandoned', 'superseded', 'cancelled')
BEGIN
  INSERT INTO stats (minute, kind, provider, metric, n)
  SELECT strftime('%Y-%m-%dT%H:%M', 'now'), j.kind, NEW.provider, 'attempts_' || NEW.state, 1
    FROM jobs AS j WHERE j.id = NEW.job_id
  ON CONFLICT DO UPDATE SET n = n + 1;
  INSERT INTO stats (minute, kind, provider, metric, n)
  SELECT strftime('%Y-%m-%dT%H:%M', 'now'), j.kind, NEW.provider,
         'latency_le_' || (
           SELECT CASE
             WHEN ms <= 100 THEN '100' WHEN ms <= 250 THEN '250' WHEN ms <= 500 THEN '500'
             WHEN ms <= 1000 THEN '1000' WHEN ms <= 2500 THEN '2500' WHEN ms <= 5000 THEN '5000'
             WHEN ms <= 10000 THEN '10000' WHEN ms <= 30000 THEN '30000'
             WHEN ms <= 60000 THEN '60000' ELSE 'inf' END
             FROM (SELECT round((julianday(NEW.finished_at) - julianday(NEW.dispatched_at)) * 86400000.0) AS ms)),
         1
    FROM jobs AS j
   WHERE j.id = NEW.job_id AND NEW.state IN ('succeeded', 'failed')
     AND OLD.state = 'running' AND NEW.dispatched_at IS NOT NULL AND NEW.finished_at IS NOT NULL
     AND coalesce(json_extract(NEW.error, '$.code'), '') <> 'dispatch_failed'
  ON CONFLICT DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER stats_skipped AFTER INSERT ON job_events
WHEN NEW.type = 'failover_skipped'
BEGIN
  INSERT INTO stats (minute, kind, provider, metric, n)
  SELECT substr(NEW.at, 1, 16), j.kind, coalesce(a.provider, j.provider),
         CASE json_extract(NEW.details, '$.for') WHEN 'hedge' THEN 'hedges_skipped'
                                                 ELSE 'failovers_skipped' END,
         1
    FROM jobs AS j LEFT JOIN attempts AS a ON a.id = NEW.attempt_id
   WHERE j.id = NEW.job_id
  ON CONFLICT DO UPDATE SET n = n + 1;
END;
