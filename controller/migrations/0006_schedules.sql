-- Schedules: a run's request (its scenario stored as a version, never an inline body) and
-- a cron expression evaluated in UTC; `skipped` counts fires that fell due while the
-- schedule's previous run was still queued or running.
CREATE TABLE schedules (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    scenario_id TEXT NOT NULL,
    scenario_version TEXT NOT NULL,
    environment TEXT NOT NULL,
    target TEXT NOT NULL,
    executor TEXT NOT NULL,
    change_ref TEXT,
    confirm_within TEXT,
    cron TEXT NOT NULL,
    enabled BIGINT NOT NULL DEFAULT 1,
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    -- fires are counted from here: a due time at or before it is never fired (missed
    -- fires while the controller was down, or before a resume, are skipped)
    fired_through BIGINT NOT NULL,
    skipped BIGINT NOT NULL DEFAULT 0,
    last_skipped_at BIGINT,
    last_run_id TEXT,
    last_fire_at BIGINT
);
CREATE INDEX schedules_by_account ON schedules (account_id, id);

-- One row per fire, its id the schedule's id and the due time: the primary key is what
-- makes a fire happen once across restarts, slow ticks and controllers.
CREATE TABLE schedule_fires (
    id TEXT PRIMARY KEY,
    schedule_id TEXT NOT NULL REFERENCES schedules(id) ON DELETE CASCADE,
    due_at BIGINT NOT NULL,
    -- started, skipped or refused
    outcome TEXT NOT NULL,
    run_id TEXT,
    at BIGINT NOT NULL,
    UNIQUE (schedule_id, due_at)
);

-- The schedule floors of an account's plan, as JSON {"kind": seconds}; NULL keeps the
-- defaults (load, capacity, replay and faults hourly, checks and scenario every minute).
ALTER TABLE accounts ADD COLUMN schedule_floors TEXT;
