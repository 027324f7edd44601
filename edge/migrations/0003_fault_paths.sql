-- Migration number: 0003 	 fault paths: claim tokens, attempt request keys, bound certifications, guarded moves

-- The dispatcher's claim writes a fresh token. A claim whose reply was lost is known as
-- its own when it is sent again (the attempt is `running` with this token), so the
-- attempt is neither stranded in `running` nor claimed twice.
ALTER TABLE attempts ADD COLUMN claim_token TEXT;

-- The request identity of `POST /v1/jobs/{id}/attempts` (its Idempotency-Key) and the
-- fingerprint of what it asked for: a resend gets the attempt the first send made.
ALTER TABLE attempts ADD COLUMN request_key TEXT;
ALTER TABLE attempts ADD COLUMN request_fingerprint TEXT;
CREATE UNIQUE INDEX attempts_by_request ON attempts (job_id, request_key);

-- What was certified: a digest of the provider's model and base URL. Changing either
-- voids the certification, since another model is another provider.
ALTER TABLE certifications ADD COLUMN provider_digest TEXT NOT NULL DEFAULT '';

-- Defence in depth: the database refuses any attempt move that is not one of
-- `AttemptState::MOVES` (protocol/src/state.rs; a test keeps the two lists equal).
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

-- The ETag is the job's last event that a client can see. `dispatch_ignored`,
-- `failover_skipped` and `late_result_discarded` change nothing in the document, so they
-- must not move it (a spurious 412 on If-Match, a lost 304 on If-None-Match).
DROP VIEW job_documents;
CREATE VIEW job_documents AS
SELECT
  j.id,
  j.owner_id,
  j.idempotency_key,
  j.fingerprint,
  j.kind,
  j.status,
  j.provider,
  (SELECT '"' || max(seq) || '"' FROM job_events
    WHERE job_id = j.id
      AND type NOT IN ('dispatch_ignored', 'failover_skipped', 'late_result_discarded')) AS etag,
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
