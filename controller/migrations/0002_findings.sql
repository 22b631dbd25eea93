-- Findings: problems runs found, one row per (account, signature), seen again by later
-- runs instead of duplicated. Kept until 90 days after they close (no expiry job yet).
-- first_run_id and last_run_id are plain text: a finding outlives its runs' records.

CREATE TABLE findings (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    signature TEXT NOT NULL,
    kind TEXT NOT NULL,
    subject TEXT NOT NULL,
    title TEXT NOT NULL,
    -- what the last run that saw it observed
    detail TEXT NOT NULL,
    scenario_id TEXT NOT NULL,
    environment TEXT NOT NULL,
    target TEXT NOT NULL,
    -- open or closed
    status TEXT NOT NULL,
    first_run_id TEXT NOT NULL,
    last_run_id TEXT NOT NULL,
    times_seen BIGINT NOT NULL,
    first_seen_at BIGINT NOT NULL,
    last_seen_at BIGINT NOT NULL,
    closed_at BIGINT,
    closed_by TEXT,
    UNIQUE (account_id, signature)
);
CREATE INDEX findings_by_account ON findings (account_id, id);

-- Which runs saw which findings, and how: new, seen_again or reopened.
CREATE TABLE run_findings (
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    finding_id TEXT NOT NULL REFERENCES findings(id) ON DELETE CASCADE,
    seen TEXT NOT NULL,
    PRIMARY KEY (run_id, finding_id)
);
CREATE INDEX run_findings_by_finding ON run_findings (finding_id, run_id);
