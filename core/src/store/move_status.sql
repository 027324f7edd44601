SELECT count(*) AS jobs,
       coalesce(sum(status = 'unknown'), 0) AS unknown,
       coalesce(sum(status IN ('queued', 'running')), 0) AS open,
       max(updated_at) AS last_updated_at
  FROM jobs
