-- Migration number: 0004 	 the job status rollup in one place

-- The status of a job that is not final follows its attempts: any unknown blocks it,
-- then any running, then any starting; otherwise its last try failed.
-- (`JobStatus::rollup` in protocol/src/state.rs says the same; tests/tests/schema.rs
-- checks that the two agree.)
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

-- The same trigger as in 0001, with the rollup read from the view instead of two
-- copies of it.
DROP TRIGGER attempt_moved;
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
  UPDATE jobs
     SET status = (SELECT status FROM job_rollup WHERE job_id = NEW.job_id),
         version = version + 1,
         updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
   WHERE id = NEW.job_id
     AND status NOT IN ('succeeded', 'cancelled')
     AND status <> (SELECT status FROM job_rollup WHERE job_id = NEW.job_id);
END;
