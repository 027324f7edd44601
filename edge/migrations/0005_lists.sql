-- Migration number: 0005 	 indexes for the list endpoints

-- Ids are a prefix and a UUIDv7, whose first 48 bits are the creation time in ms: ordered
-- by id is ordered by creation, and the last id seen is the cursor. Each list is then one
-- range read of one index, with no sort (tests/tests/schema.rs checks the plans).

-- An owner's jobs, newest first (`GET /v1/jobs`; an admin's `?owner=`).
CREATE INDEX jobs_by_owner ON jobs (owner_id, id);
-- Every owner's jobs in one status, newest first (an admin's `GET /v1/jobs?status=`).
CREATE INDEX jobs_by_status_id ON jobs (status, id);
-- Attempts in one state, oldest first (`GET /v1/attempts?state=unknown`).
CREATE INDEX attempts_by_state_id ON attempts (state, id);
