-- One schema for SQLite and PostgreSQL: text ids, BIGINT times in milliseconds since the
-- Unix epoch (UTC), BIGINT 0/1 flags, JSON as TEXT. No request or response body is stored.

CREATE TABLE accounts (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    max_running BIGINT NOT NULL,
    units_per_month BIGINT NOT NULL,
    is_platform BIGINT NOT NULL DEFAULT 0,
    created_at BIGINT NOT NULL
);

CREATE TABLE environments (
    account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    production BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (account_id, name)
);

CREATE TABLE tokens (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    hash TEXT NOT NULL UNIQUE,
    scopes TEXT NOT NULL,
    person TEXT,
    created_at BIGINT NOT NULL,
    revoked_at BIGINT
);

CREATE TABLE agents (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    removed_at BIGINT,
    last_seen_at BIGINT,
    version TEXT,
    kinds TEXT NOT NULL DEFAULT '[]',
    environments TEXT NOT NULL DEFAULT '[]',
    labels TEXT NOT NULL DEFAULT '{}',
    max_concurrent_jobs BIGINT NOT NULL DEFAULT 0,
    UNIQUE (account_id, name)
);

CREATE TABLE agent_certs (
    fingerprint TEXT PRIMARY KEY,
    agent_id TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    created_at BIGINT NOT NULL
);

CREATE TABLE scenarios (
    account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    version TEXT NOT NULL,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    spec TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (account_id, version)
);

CREATE TABLE runs (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    kind TEXT NOT NULL,
    scenario_id TEXT NOT NULL,
    scenario_version TEXT NOT NULL,
    environment TEXT NOT NULL,
    target TEXT NOT NULL,
    executor TEXT NOT NULL,
    started_by_type TEXT NOT NULL,
    started_by_id TEXT NOT NULL,
    change_ref TEXT,
    status TEXT NOT NULL,
    reason TEXT,
    result TEXT,
    findings TEXT NOT NULL DEFAULT '[]',
    units_reserved BIGINT NOT NULL DEFAULT 0,
    units_spent BIGINT NOT NULL DEFAULT 0,
    agent_id TEXT,
    lease_id TEXT,
    lease_epoch BIGINT NOT NULL DEFAULT 0,
    -- offered, accepted, or NULL when no agent holds the run
    lease_state TEXT,
    -- the highest frame number stored with no gap before it
    frames_through BIGINT NOT NULL DEFAULT 0,
    created_at BIGINT NOT NULL,
    started_at BIGINT,
    ended_at BIGINT
);
CREATE INDEX runs_by_account ON runs (account_id, id);
CREATE INDEX runs_by_status ON runs (status);

CREATE TABLE frames (
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    number BIGINT NOT NULL,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    at BIGINT NOT NULL,
    PRIMARY KEY (run_id, number)
);

CREATE TABLE audit (
    id TEXT PRIMARY KEY,
    at BIGINT NOT NULL,
    account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    run_id TEXT,
    targets TEXT,
    outcome TEXT NOT NULL
);
CREATE INDEX audit_by_account ON audit (account_id, at);
