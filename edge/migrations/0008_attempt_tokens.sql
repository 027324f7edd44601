-- Migration number: 0008 	 the tokens each attempt's provider stated, in the job document and the figures
--
-- A provider's answer states what it billed (`usage`: the prompt's tokens and the
-- answer's). The completion that offers the answer writes them on its attempt, winner
-- or loser (both were paid for): in the same UPDATE that settles the attempt, so no
-- row more. The figures count their sum per minute, kind and provider (`tokens`): one
-- row per job, the first-try job's 20th (tests/budgets.rs).

ALTER TABLE attempts ADD COLUMN tokens TEXT;  -- JSON {prompt, completion}, or NULL: none stated

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
        'error', json(a.error),
        'tokens', json(a.tokens)))
      FROM (SELECT * FROM attempts WHERE job_id = j.id ORDER BY n) AS a)
  ) AS doc
FROM jobs AS j;

CREATE TRIGGER stats_tokens AFTER UPDATE OF tokens ON attempts
WHEN OLD.tokens IS NULL AND NEW.tokens IS NOT NULL
BEGIN
  INSERT INTO stats (minute, kind, provider, metric, n)
  SELECT strftime('%Y-%m-%dT%H:%M', 'now'), j.kind, NEW.provider, 'tokens',
         coalesce(json_extract(NEW.tokens, '$.prompt'), 0)
           + coalesce(json_extract(NEW.tokens, '$.completion'), 0)
    FROM jobs AS j WHERE j.id = NEW.job_id
  ON CONFLICT DO UPDATE SET n = n + excluded.n;
END;
