-- Migration number: 0002 	 provider certification reports

-- The latest certification of a provider for one contract version of a kind. A new
-- contract version (any change to a kind's prompt, schemas or rules) has no row until
-- the provider is certified again, so failover to it stops at once.
CREATE TABLE certifications (
  provider         TEXT NOT NULL,
  kind             TEXT NOT NULL,
  contract_version TEXT NOT NULL,
  passed           INTEGER NOT NULL CHECK (passed IN (0, 1)),
  failures         TEXT NOT NULL DEFAULT '[]',   -- JSON [{input, code, message}]
  certified_at     TEXT NOT NULL,
  PRIMARY KEY (provider, kind, contract_version)
);
