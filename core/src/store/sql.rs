//! Every statement the store sends, as a constant: the SQL text stays in one place, and
//! the schema test (`tests/tests/schema.rs`, which includes this file) runs
//! `EXPLAIN QUERY PLAN` on each of [`ALL`] against the real migrations.
//!
//! Parameters are always bound (`?N`); nothing is ever formatted into a statement at run
//! time. Shared pieces are macros so that each statement is still one `&'static str`.

/// Every timestamp the store writes comes from the database's clock, so that an event's
/// `at` never goes backwards against its `seq` (the Worker's clock differs between
/// isolates and stands still between I/O).
macro_rules! now {
    () => {
        "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
    };
}

/// Attempt states that still hold a job open: a call may be made, is being made, or may
/// have been made. No new attempt while one of these exists.
macro_rules! live_states {
    () => {
        "('starting', 'running', 'unknown')"
    };
}

/// Attempt states whose provider call has not ended.
macro_rules! in_flight_states {
    () => {
        "('starting', 'running')"
    };
}

/// Job statuses after which no attempt may start or be claimed.
macro_rules! closed_statuses {
    () => {
        "('succeeded', 'cancelled')"
    };
}

/// The certification gate: provider `?3` passed for the job's kind at contract version
/// `?4` with its configuration digest `?5` (or it is the job's own first provider).
macro_rules! provider_allowed {
    ($provider:literal, $version:literal, $digest:literal) => {
        concat!(
            "(",
            $provider,
            " = j.provider
              OR EXISTS (SELECT 1 FROM certifications AS c
                          WHERE c.provider = ",
            $provider,
            " AND c.kind = j.kind
                            AND c.contract_version = ",
            $version,
            "               AND c.provider_digest = ",
            $digest,
            " AND c.passed = 1))"
        )
    };
}

/// The one statement behind every attempt after a job's first: insert `?1` as the job
/// `?2`'s next attempt, `starting` on provider `?3`, only while the job has not finished
/// and the provider is allowed; `?6`/`?7` are the fallback button's request key and
/// fingerprint. The guard that follows `AND` is the caller's, with parameters from `?8`;
/// `started_by` names which of the three it is, for the figures.
macro_rules! next_attempt {
    ($started_by:literal, $($guard:tt)*) => {
        concat!(
            "INSERT INTO attempts (id, job_id, n, provider, state, started_at,
                                   request_key, request_fingerprint, started_by, started_seq)
             SELECT ?1, j.id, (SELECT max(n) + 1 FROM attempts WHERE job_id = j.id), ?3,
                    'starting', ", now!(), ", ?6, ?7, '", $started_by, "',
                    (SELECT seq + 1 FROM jobs WHERE id = j.id)
               FROM job_documents AS j
              WHERE j.id = ?2 AND j.status NOT IN ", closed_statuses!(), "
                AND ", provider_allowed!("?3", "?4", "?5"), "
                AND ", $($guard)*, "
             ON CONFLICT DO NOTHING
             RETURNING id"
        )
    };
}

/// Jobs past retention: ended (a `failed` job only with nothing live), last changed
/// before `?1`, at most `?2` of them, in a fixed order so the three statements of a
/// purge see the same rows: one range of `jobs_ended`, the partial index of the ended
/// jobs (its `WHERE` is this one's status list, word for word).
macro_rules! expired_jobs {
    () => {
        concat!(
            "SELECT id FROM jobs
              WHERE status IN ('succeeded', 'cancelled', 'failed') AND updated_at <= ?1
                AND NOT EXISTS (SELECT 1 FROM attempts
                                 WHERE job_id = jobs.id AND state IN ",
            live_states!(),
            ")
              ORDER BY updated_at, id LIMIT ?2"
        )
    };
}

/// The states named by `live_states!`, for the test that compares them with the enum.
#[allow(dead_code)] // read only by tests/tests/schema.rs
pub const LIVE_STATES: &str = live_states!();
/// The states named by `in_flight_states!`.
#[allow(dead_code)] // read only by tests/tests/schema.rs
pub const IN_FLIGHT_STATES: &str = in_flight_states!();

pub const PING: &str = "SELECT 1 AS ok";

/// What D1 still holds during a move (`GET /v1/move`; `cargo xtask move-status` runs the
/// same file): one row of counts, over the whole table, read only by an operator.
pub const MOVE_STATUS: &str = include_str!("move_status.sql");

// --- jobs -------------------------------------------------------------------------

pub const INSERT_JOB: &str = concat!(
    "INSERT INTO jobs (id, owner_id, idempotency_key, fingerprint, kind, input, provider,
                       status, version, created_at, updated_at, seq, doc_seq)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'queued', 1, ",
    now!(),
    ", ",
    now!(),
    ", 2, 2)
     ON CONFLICT (owner_id, idempotency_key) DO NOTHING"
);

/// Selecting from the job by its new id makes this a no-op on a conflict: a row with
/// that id exists only if the insert before it happened. The job's change 1 is its
/// insert, 2 this attempt's: the job's insert counts both.
pub const INSERT_FIRST_ATTEMPT: &str =
    "INSERT INTO attempts (id, job_id, n, provider, state, started_at, started_seq)
     SELECT ?1, id, 1, provider, 'starting', created_at, 2 FROM jobs WHERE id = ?2
     RETURNING id";

pub const JOB_BY_KEY: &str = "SELECT fingerprint, doc, etag FROM job_documents
                                      WHERE owner_id = ?1 AND idempotency_key = ?2";

pub const JOB_BY_ID: &str = "SELECT fingerprint, doc, etag FROM job_documents
                                     WHERE id = ?1 AND (?2 IS NULL OR owner_id = ?2)";

/// The job's whole log (`job_log`: the lines its rows say, and the rows of
/// `job_events`), if owner `?2` owns it.
pub const EVENTS: &str = "SELECT e.seq, e.type, e.at, e.attempt_id, e.details
                                   FROM job_log AS e JOIN jobs AS j ON j.id = e.job_id
                                  WHERE e.job_id = ?1 AND j.id = ?1 AND j.owner_id = ?2
                                  ORDER BY e.seq";

/// A log-only line (`?2`, one of the three that change nothing a client sees) of job
/// `?1`: the job's next number, which `log_line_counted` moves `jobs.seq` to. Any other
/// type writes nothing: its number would not be counted.
pub const LOG_EVENT: &str = concat!(
    "INSERT INTO job_events (job_id, seq, at, type, attempt_id, details)
     SELECT id, seq + 1, ",
    now!(),
    ", ?2, ?3, ?4 FROM jobs
      WHERE id = ?1
        AND ?2 IN ('dispatch_ignored', 'failover_skipped', 'late_result_discarded')"
);

pub const CANCEL_JOB: &str = concat!(
    "UPDATE jobs SET status = 'cancelled', version = version + 1,
                     seq = seq + 1, doc_seq = seq + 1, updated_at = ",
    now!(),
    "
      WHERE id = ?1 AND (?2 IS NULL OR owner_id = ?2) AND status NOT IN ",
    closed_statuses!()
);

pub const LOG_CANCELLED: &str = concat!(
    "INSERT INTO job_events (job_id, seq, at, type, details)
     SELECT id, seq, ",
    now!(),
    ", 'job_cancelled',
            json_object('attempts', (SELECT json_group_array(id) FROM attempts
                WHERE job_id = jobs.id AND state IN ",
    live_states!(),
    "))
       FROM jobs
      WHERE id = ?1 AND status = 'cancelled'
        AND NOT EXISTS (SELECT 1 FROM job_events
                         WHERE job_id = ?1 AND type = 'job_cancelled')"
);

pub const CANCEL_ATTEMPTS: &str = concat!(
    "UPDATE attempts SET state = 'cancelled', finished_at = ",
    now!(),
    "
      WHERE job_id = ?1 AND state IN ",
    live_states!(),
    "
        AND (SELECT status FROM jobs WHERE id = ?1) = 'cancelled'"
);

pub const PURGE_EVENTS: &str = concat!(
    "DELETE FROM job_events WHERE job_id IN (",
    expired_jobs!(),
    ")"
);
pub const PURGE_ATTEMPTS: &str = concat!(
    "DELETE FROM attempts WHERE job_id IN (",
    expired_jobs!(),
    ")"
);
pub const PURGE_JOBS: &str = concat!(
    "DELETE FROM jobs WHERE id IN (",
    expired_jobs!(),
    ") RETURNING id"
);

// --- attempts ---------------------------------------------------------------------

/// Not `attempts AS a`: the view's own subquery of attempts is named `a`, and the query
/// plan would not tell the two apart.
pub const ATTEMPT_BY_REQUEST: &str =
    "SELECT j.fingerprint, j.doc, j.etag, clicked.id AS attempt_id,
            clicked.request_fingerprint
       FROM job_documents AS j JOIN attempts AS clicked ON clicked.job_id = j.id
      WHERE j.id = ?1 AND j.owner_id = ?2 AND clicked.request_key = ?3";

pub const ATTEMPT_JOB: &str = "SELECT job_id, state FROM attempts WHERE id = ?1";

/// What the dispatcher holding attempt `?1`'s call looks at, about once a second: has
/// the attempt been cancelled, or its job won by another? Two reads by primary key.
pub const ATTEMPT_WATCH: &str = "SELECT a.state, j.status AS job_status, j.completed_by
       FROM attempts AS a JOIN jobs AS j ON j.id = a.job_id
      WHERE a.id = ?1";

pub const CLAIM: &str = concat!(
    "UPDATE attempts SET state = 'running', dispatched_at = ",
    now!(),
    ", claim_token = ?2,
            running_seq = (SELECT seq + 1 FROM jobs WHERE id = attempts.job_id)
      WHERE id = ?1 AND state = 'starting'
        AND (SELECT status FROM jobs WHERE id = attempts.job_id) NOT IN ",
    closed_statuses!()
);

/// Also a claim of ours, sent again after a lost reply, that finds the job succeeded
/// meanwhile: it must not call the provider now.
pub const CLAIM_SUPERSEDE: &str = concat!(
    "UPDATE attempts SET state = 'superseded', finished_at = ",
    now!(),
    "
      WHERE id = ?1
        AND (state = 'starting' OR (state = 'running' AND claim_token = ?2))
        AND (SELECT status FROM jobs WHERE id = attempts.job_id) = 'succeeded'"
);

pub const CLAIMED: &str =
    "SELECT a.id, a.n, a.job_id, a.provider, j.provider AS job_provider, a.state,
            a.claim_token, j.kind, j.input
       FROM attempts AS a JOIN jobs AS j ON j.id = a.job_id
      WHERE a.id = ?1";

/// From any state of the JSON array `?2` to `?3`, recording the error `?4` if given.
pub const MOVE_ATTEMPT: &str = concat!(
    "UPDATE attempts SET state = ?3, error = coalesce(?4, error), finished_at = ",
    now!(),
    "
      WHERE id = ?1 AND state IN (SELECT value FROM json_each(?2))
      RETURNING id"
);

/// The compare-and-swap: the job `?1` takes attempt `?2`'s result `?3` only while no
/// attempt has won, the job is not cancelled, and the attempt is the job's and in one of
/// the states of the JSON array `?4`.
pub const COMPLETE_CAS: &str = concat!(
    "UPDATE jobs
        SET status = 'succeeded', result = ?3, completed_by = ?2,
            version = version + 1, seq = seq + 1, doc_seq = seq + 1, updated_at = ",
    now!(),
    "
      WHERE id = ?1 AND completed_by IS NULL AND status <> 'cancelled'
        AND EXISTS (SELECT 1 FROM attempts
                     WHERE id = ?2 AND job_id = ?1
                       AND state IN (SELECT value FROM json_each(?4)))"
);

/// A hedge still `starting` when its job succeeds is never called.
pub const COMPLETE_SUPERSEDE_STARTING: &str = concat!(
    "UPDATE attempts SET state = 'superseded', finished_at = ",
    now!(),
    "
      WHERE job_id = ?1 AND state = 'starting'
        AND (SELECT status FROM jobs WHERE id = ?1) = 'succeeded'"
);

/// The offering attempt becomes `succeeded` if it won, else `superseded`; with `?5 = 1`
/// (an admin's resolution) only when its result equals the job's. A win from `running`
/// keeps the compare-and-swap's number (`won_seq`: its log line is read from the row).
/// `?6` is the tokens its provider stated for the answer, winner's or loser's: both
/// were paid for (NULL for a resolution).
pub const COMPLETE_SETTLE: &str = concat!(
    "UPDATE attempts
        SET state = CASE WHEN (SELECT completed_by FROM jobs WHERE id = ?1) = ?2
                         THEN 'succeeded' ELSE 'superseded' END,
            finished_at = ",
    now!(),
    ",
            won_seq = CASE WHEN state = 'running'
                            AND (SELECT completed_by FROM jobs WHERE id = ?1) = ?2
                           THEN (SELECT seq FROM jobs WHERE id = ?1) END,
            tokens = ?6
      WHERE id = ?2 AND job_id = ?1
        AND state IN (SELECT value FROM json_each(?4))
        AND (SELECT status FROM jobs WHERE id = ?1) = 'succeeded'
        AND (?5 = 0
             OR (SELECT completed_by FROM jobs WHERE id = ?1) = ?2
             OR (SELECT result FROM jobs WHERE id = ?1) = ?3)
     RETURNING id"
);

/// A provider's result (`?2 = 0`) for an attempt that had already ended is logged.
pub const COMPLETE_DISCARD: &str = concat!(
    "INSERT INTO job_events (job_id, seq, at, type, attempt_id, details)
     SELECT job_id, (SELECT seq + 1 FROM jobs WHERE id = attempts.job_id), ",
    now!(),
    ", 'late_result_discarded', id,
            json_object('state', state, 'provider', provider,
                        'job_status', (SELECT status FROM jobs WHERE id = job_id))
       FROM attempts
      WHERE id = ?1 AND ?2 = 0 AND state NOT IN ('succeeded', 'superseded')"
);

pub const COMPLETED: &str =
    "SELECT a.state, j.completed_by FROM attempts AS a JOIN jobs AS j ON j.id = a.job_id
      WHERE a.id = ?1 AND a.job_id = ?2";

/// The fallback button: the owner `?8`'s job, nothing live, unchanged if `?9` (a JSON
/// array of strong ETags) is given, and no attempt made yet for the request key `?6`.
pub const NEXT_ATTEMPT_BY_OWNER: &str = next_attempt!(
    "owner",
    concat!(
        "j.owner_id = ?8
     AND NOT EXISTS (SELECT 1 FROM attempts WHERE job_id = j.id AND state IN ",
        live_states!(),
        ")
     AND (?9 IS NULL OR j.etag IN (SELECT value FROM json_each(?9)))
     AND (?6 IS NULL OR NOT EXISTS (SELECT 1 FROM attempts
                                     WHERE job_id = j.id AND request_key = ?6))"
    )
);

/// A hedge next to `?8`: only while `?8` is still `running` and the only attempt in
/// flight, and no attempt is `unknown`.
pub const NEXT_ATTEMPT_HEDGE: &str = next_attempt!(
    "hedge",
    concat!(
        "(SELECT state FROM attempts WHERE id = ?8) = 'running'
     AND NOT EXISTS (SELECT 1 FROM attempts WHERE job_id = j.id AND state = 'unknown')
     AND (SELECT count(*) FROM attempts WHERE job_id = j.id AND state IN ",
        in_flight_states!(),
        ") = 1"
    )
);

/// The automatic failover after `?8` failed: nothing live, fewer than `?9` attempts.
pub const NEXT_ATTEMPT_FAILOVER: &str = next_attempt!(
    "failover",
    concat!(
        "(SELECT state FROM attempts WHERE id = ?8) = 'failed'
     AND NOT EXISTS (SELECT 1 FROM attempts WHERE job_id = j.id AND state IN ",
        live_states!(),
        ")
     AND (SELECT count(*) FROM attempts WHERE job_id = j.id) < ?9"
    )
);

/// Why the fallback button did or did not insert `?1`, read in the same batch.
pub const NEXT_ATTEMPT_OUTCOME: &str = concat!(
    "SELECT j.fingerprint, j.doc, j.etag, j.status,
            (SELECT count(*) FROM attempts WHERE id = ?1) AS created,
            (SELECT id FROM attempts WHERE job_id = j.id AND request_key = ?6) AS replay_id,
            (SELECT request_fingerprint FROM attempts
              WHERE job_id = j.id AND request_key = ?6) AS replay_fingerprint,
            (SELECT count(*) FROM attempts
              WHERE job_id = j.id AND state IN ",
    in_flight_states!(),
    ") AS in_flight,
            (SELECT count(*) FROM attempts
              WHERE job_id = j.id AND state = 'unknown') AS unresolved,
            ",
    provider_allowed!("?4", "?5", "?7"),
    " AS certified
       FROM job_documents AS j WHERE j.id = ?2 AND j.owner_id = ?3"
);

// --- certifications ---------------------------------------------------------------

pub const SAVE_CERTIFICATION: &str =
    "INSERT INTO certifications (provider, kind, contract_version, passed, failures,
                                 certified_at, provider_digest)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
     ON CONFLICT (provider, kind, contract_version) DO UPDATE
       SET passed = excluded.passed, failures = excluded.failures,
           certified_at = excluded.certified_at,
           provider_digest = excluded.provider_digest
       WHERE excluded.certified_at >= certifications.certified_at";

pub const CERTIFICATIONS: &str =
    "SELECT provider, kind, contract_version, provider_digest, passed, failures, certified_at
       FROM certifications ORDER BY provider, kind, certified_at";

// --- the reconciler ---------------------------------------------------------------

pub const STUCK_STARTING: &str =
    "SELECT id FROM attempts WHERE state = 'starting' AND started_at <= ?1
      ORDER BY id LIMIT ?2";

/// A new shard instance's first read (`handoff.rs`): the attempts its shard holds
/// `starting`, newest first, at most 1,000.
pub const STARTING: &str =
    "SELECT id FROM attempts WHERE state = 'starting' ORDER BY id DESC LIMIT 1000";

/// `unknown → abandoned` for provider `?1`'s attempts called before `?2`: the job of
/// each, for its hub.
pub const ABANDON_UNKNOWN: &str = concat!(
    "UPDATE attempts SET state = 'abandoned', finished_at = ",
    now!(),
    "
      WHERE state = 'unknown' AND provider = ?1 AND dispatched_at <= ?2
     RETURNING job_id AS id"
);

/// `running → unknown` (error `?3`) for provider `?1`'s attempts called before `?2`: their
/// dispatcher died mid-call. The job of each, for its hub.
pub const LOSE_RUNNING: &str = concat!(
    "UPDATE attempts SET state = 'unknown', finished_at = ",
    now!(),
    ", error = ?3
      WHERE state = 'running' AND provider = ?1 AND dispatched_at <= ?2
     RETURNING job_id AS id"
);

/// What a list shows of a job: its document without the attempts (`GET /v1/jobs/{id}`
/// has them), rendered by the database like every job document.
macro_rules! job_summary {
    () => {
        "SELECT id, json_object('id', id, 'owner_id', owner_id, 'kind', kind, 'status', status,
                'provider', provider, 'version', version, 'input', json(input),
                'result', json(result), 'completed_by', completed_by,
                'created_at', created_at, 'updated_at', updated_at) AS item
           FROM jobs"
    };
}

/// A list's filter, shared by its three statements: the page in one read (one
/// database), its ids alone (`_IDS`, each shard's part of a merge), and the documents of
/// the ids a merge picked (`_BY_ID`). Owner `?1`'s jobs before id `?2` (the cursor; from
/// the newest when NULL), in status `?3` when given, newest first, `?4` of them.
macro_rules! jobs_of_owner {
    () => {
        " WHERE owner_id = ?1 AND id < coalesce(?2, 'job_~') AND (?3 IS NULL OR status = ?3)
      ORDER BY id DESC LIMIT ?4"
    };
}

/// Every owner's jobs in status `?1` before id `?2`, newest first, `?3` of them.
macro_rules! jobs_by_status {
    () => {
        " WHERE status = ?1 AND id < coalesce(?2, 'job_~') ORDER BY id DESC LIMIT ?3"
    };
}

/// Every job before id `?1`, newest first, `?2` of them.
macro_rules! every_job {
    () => {
        " WHERE id < coalesce(?1, 'job_~') ORDER BY id DESC LIMIT ?2"
    };
}

/// Attempts in state `?1` after id `?2` (the cursor; from the oldest when NULL), of
/// provider `?3` and started at or before `?4` when given, oldest first, `?5` of them.
macro_rules! attempts_in_state {
    () => {
        " WHERE a.state = ?1 AND a.id > coalesce(?2, '')
       AND (?3 IS NULL OR a.provider = ?3) AND (?4 IS NULL OR a.started_at <= ?4)
     ORDER BY a.id LIMIT ?5"
    };
}

/// What a list shows of an attempt, with its job's owner, kind and status.
macro_rules! attempt_summary {
    () => {
        "SELECT a.id, json_object('id', a.id, 'job_id', a.job_id, 'n', a.n, 'provider', a.provider,
           'state', a.state, 'started_at', a.started_at, 'dispatched_at', a.dispatched_at,
           'finished_at', a.finished_at, 'error', json(a.error), 'owner_id', j.owner_id,
           'kind', j.kind, 'job_status', j.status) AS item
      FROM attempts AS a JOIN jobs AS j ON j.id = a.job_id"
    };
}

pub const LIST_JOBS_OF_OWNER: &str = concat!(job_summary!(), jobs_of_owner!());
pub const LIST_JOB_IDS_OF_OWNER: &str = concat!("SELECT id FROM jobs", jobs_of_owner!());
pub const LIST_JOBS_BY_STATUS: &str = concat!(job_summary!(), jobs_by_status!());
pub const LIST_JOB_IDS_BY_STATUS: &str = concat!("SELECT id FROM jobs", jobs_by_status!());
pub const LIST_JOBS: &str = concat!(job_summary!(), every_job!());
pub const LIST_JOB_IDS: &str = concat!("SELECT id FROM jobs", every_job!());
/// The list items of the jobs whose ids are in the JSON array `?1`, in status `?2` when
/// given (a job that moved on since its id was read is left off).
pub const LIST_JOBS_BY_ID: &str = concat!(
    job_summary!(),
    " WHERE id IN (SELECT value FROM json_each(?1)) AND (?2 IS NULL OR status = ?2)"
);
pub const LIST_ATTEMPTS: &str = concat!(attempt_summary!(), attempts_in_state!());
pub const LIST_ATTEMPT_IDS: &str = concat!("SELECT a.id FROM attempts AS a", attempts_in_state!());
/// The list items of the attempts whose ids are in the JSON array `?1`, still in state
/// `?2`.
pub const LIST_ATTEMPTS_BY_ID: &str = concat!(
    attempt_summary!(),
    " WHERE a.id IN (SELECT value FROM json_each(?1)) AND a.state = ?2"
);

// --- figures (migrations/0006_stats.sql) --------------------------------------------

/// Counts a create whose key `?2` of owner `?1` was already bound: a replay when the
/// request's fingerprint `?3` is the job's, a conflict otherwise. Nothing when the batch
/// has just made the job (`?4`).
pub const COUNT_REPEAT: &str = concat!(
    "INSERT INTO stats (minute, kind, provider, metric, n)
     SELECT substr(",
    now!(),
    ", 1, 16), kind, provider,
            CASE WHEN fingerprint = ?3 THEN 'replays' ELSE 'conflicts' END, 1
       FROM jobs WHERE owner_id = ?1 AND idempotency_key = ?2 AND id <> ?4
     ON CONFLICT DO UPDATE SET n = n + 1"
);

/// Every counter of the minutes from `?1` on, summed by kind, provider and metric.
pub const STATS: &str = "SELECT kind, provider, metric, sum(n) AS n FROM stats
                                 WHERE minute >= ?1 GROUP BY kind, provider, metric";

/// Drops the counters of the minutes before `?1`.
pub const PURGE_STATS: &str = "DELETE FROM stats WHERE minute < ?1";

/// The document of the job that `?1` names (a job's id, or one of its attempts'),
/// read back at the end of every batch that moves a job, in the same transaction: what
/// the job's live streams are told (`live.rs`).
pub const LIVE_DOC: &str = "SELECT id, doc, etag FROM job_documents
    WHERE id = COALESCE((SELECT job_id FROM attempts WHERE id = ?1), ?1)";

/// Every statement above, by name, for the schema test's `EXPLAIN QUERY PLAN`.
#[allow(dead_code)] // read by tests/tests/schema.rs, and natively by the simulator (`sim.rs`)
pub const ALL: &[(&str, &str)] = &[
    ("PING", PING),
    ("MOVE_STATUS", MOVE_STATUS),
    ("INSERT_JOB", INSERT_JOB),
    ("INSERT_FIRST_ATTEMPT", INSERT_FIRST_ATTEMPT),
    ("JOB_BY_KEY", JOB_BY_KEY),
    ("JOB_BY_ID", JOB_BY_ID),
    ("LIVE_DOC", LIVE_DOC),
    ("EVENTS", EVENTS),
    ("LOG_EVENT", LOG_EVENT),
    ("CANCEL_JOB", CANCEL_JOB),
    ("LOG_CANCELLED", LOG_CANCELLED),
    ("CANCEL_ATTEMPTS", CANCEL_ATTEMPTS),
    ("PURGE_EVENTS", PURGE_EVENTS),
    ("PURGE_ATTEMPTS", PURGE_ATTEMPTS),
    ("PURGE_JOBS", PURGE_JOBS),
    ("ATTEMPT_BY_REQUEST", ATTEMPT_BY_REQUEST),
    ("ATTEMPT_JOB", ATTEMPT_JOB),
    ("ATTEMPT_WATCH", ATTEMPT_WATCH),
    ("CLAIM", CLAIM),
    ("CLAIM_SUPERSEDE", CLAIM_SUPERSEDE),
    ("CLAIMED", CLAIMED),
    ("MOVE_ATTEMPT", MOVE_ATTEMPT),
    ("COMPLETE_CAS", COMPLETE_CAS),
    ("COMPLETE_SUPERSEDE_STARTING", COMPLETE_SUPERSEDE_STARTING),
    ("COMPLETE_SETTLE", COMPLETE_SETTLE),
    ("COMPLETE_DISCARD", COMPLETE_DISCARD),
    ("COMPLETED", COMPLETED),
    ("NEXT_ATTEMPT_BY_OWNER", NEXT_ATTEMPT_BY_OWNER),
    ("NEXT_ATTEMPT_HEDGE", NEXT_ATTEMPT_HEDGE),
    ("NEXT_ATTEMPT_FAILOVER", NEXT_ATTEMPT_FAILOVER),
    ("NEXT_ATTEMPT_OUTCOME", NEXT_ATTEMPT_OUTCOME),
    ("SAVE_CERTIFICATION", SAVE_CERTIFICATION),
    ("CERTIFICATIONS", CERTIFICATIONS),
    ("STUCK_STARTING", STUCK_STARTING),
    ("STARTING", STARTING),
    ("ABANDON_UNKNOWN", ABANDON_UNKNOWN),
    ("LOSE_RUNNING", LOSE_RUNNING),
    ("LIST_JOBS_OF_OWNER", LIST_JOBS_OF_OWNER),
    ("LIST_JOB_IDS_OF_OWNER", LIST_JOB_IDS_OF_OWNER),
    ("LIST_JOBS_BY_STATUS", LIST_JOBS_BY_STATUS),
    ("LIST_JOB_IDS_BY_STATUS", LIST_JOB_IDS_BY_STATUS),
    ("LIST_JOBS", LIST_JOBS),
    ("LIST_JOB_IDS", LIST_JOB_IDS),
    ("LIST_JOBS_BY_ID", LIST_JOBS_BY_ID),
    ("LIST_ATTEMPTS", LIST_ATTEMPTS),
    ("LIST_ATTEMPT_IDS", LIST_ATTEMPT_IDS),
    ("LIST_ATTEMPTS_BY_ID", LIST_ATTEMPTS_BY_ID),
    ("COUNT_REPEAT", COUNT_REPEAT),
    ("STATS", STATS),
    ("PURGE_STATS", PURGE_STATS),
];
