-- Names label scenario versions: one version (one spec) may carry several names, and a
-- name given by a user is kept, never replaced by the name the version was first stored
-- under. Runs and findings are grouped by the name they were started with.
CREATE TABLE scenario_names (
    account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    version TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    -- Time-ordered (UUID v7): the order names were given in, within one millisecond too.
    seq TEXT NOT NULL,
    PRIMARY KEY (account_id, name, version)
);
CREATE INDEX scenario_names_by_version ON scenario_names (account_id, version);
INSERT INTO scenario_names (account_id, name, version, created_at, seq)
    SELECT account_id, name, version, created_at, '0-' || version FROM scenarios;
CREATE INDEX runs_by_account_scenario ON runs (account_id, scenario_id, scenario_version);
