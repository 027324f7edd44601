-- Migration number: 0006 	 figures kept as they happen, for GET /v1/stats

-- One counter per minute, kind, provider and metric. Triggers bump them inside the very
-- statement that makes the move they count, so a figure can never disagree with the
-- rows (and costs no round trip); `GET /v1/stats` sums the minutes of its window through
-- the primary key, and never reads job_events. The reconciler drops minutes older than
-- the retention.
--
-- Metrics: jobs_created; replays and conflicts (a create's key already bound, to the same
-- or to another request: counted by the create's own batch, which compares fingerprints
-- as of today's providers); attempts_<state> for every move into succeeded, failed,
-- unknown, abandoned, superseded (a race lost) or cancelled (moves, not attempts: an
-- attempt that went unknown and was resolved is counted in both states);
-- retries_started (the fallback button), failovers_started, hedges_started;
-- failovers_skipped, hedges_skipped; latency_le_<ms>, a histogram of the provider call's
-- time (claim to answer) of the attempts that got an answer (succeeded or failed).
CREATE TABLE stats (
  minute   TEXT NOT NULL,                             -- UTC, 'YYYY-MM-DDTHH:MM'
  kind     TEXT NOT NULL,
  provider TEXT NOT NULL,
  metric   TEXT NOT NULL,
  n        INTEGER NOT NULL,
  PRIMARY KEY (minute, kind, provider, metric)
) WITHOUT ROWID;

CREATE TRIGGER stats_job_created AFTER INSERT ON jobs
BEGIN
  INSERT INTO stats (minute, kind, provider, metric, n)
  VALUES (substr(NEW.created_at, 1, 16), NEW.kind, NEW.provider, 'jobs_created', 1)
  ON CONFLICT DO UPDATE SET n = n + 1;
END;

-- Which of the three kinds of "next attempt" made an attempt after a job's first: the
-- fallback button (`owner`), a `hedge` or a `failover` (NULL for a job's first).
ALTER TABLE attempts ADD COLUMN started_by TEXT;

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
  -- The provider answered: how long its call took, in the histogram's bucket.
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
     -- `dispatch_failed`: the Worker failed between the claim and the call, no provider
     -- was called, so there is no latency to count.
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
