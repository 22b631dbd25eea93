-- Triggers: a stored run template (as a schedule's: its scenario a stored version) that
-- a forge's delivery fires instead of a clock. The secret that verifies deliveries is
-- sealed (store/sealed.rs), never in clear. `target` and `base_target` may hold the
-- placeholders {pr}, {sha} and {branch}, substituted with validated values only.
CREATE TABLE triggers (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    -- github, gitlab or generic
    source TEXT NOT NULL,
    secret TEXT NOT NULL,
    kind TEXT NOT NULL,
    scenario_id TEXT NOT NULL,
    scenario_version TEXT NOT NULL,
    environment TEXT NOT NULL,
    target TEXT NOT NULL,
    executor TEXT NOT NULL,
    confirm_within TEXT,
    agents BIGINT,
    -- the baseline rule: where a baseline is looked for besides the target, how far back
    -- (ms), and whether a fresh before-run is started beside each after-run
    base_target TEXT,
    window_ms BIGINT NOT NULL,
    fresh_baseline BIGINT NOT NULL DEFAULT 0,
    enabled BIGINT NOT NULL DEFAULT 1,
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    last_delivery_at BIGINT,
    last_run_id TEXT
);
CREATE INDEX triggers_by_account ON triggers (account_id, id);

-- Each trigger's deliveries, by the forge's delivery id: the primary key is what makes a
-- delivery start its runs at most once. The outcome and why, never the body; the newest
-- 1000 per trigger are kept.
CREATE TABLE trigger_deliveries (
    trigger_id TEXT NOT NULL REFERENCES triggers(id) ON DELETE CASCADE,
    delivery_id TEXT NOT NULL,
    at BIGINT NOT NULL,
    event TEXT NOT NULL,
    -- starting, started, ignored or refused
    outcome TEXT NOT NULL,
    reason TEXT,
    run_id TEXT,
    baseline_run_id TEXT,
    PRIMARY KEY (trigger_id, delivery_id)
);
CREATE INDEX trigger_deliveries_by_time ON trigger_deliveries (trigger_id, at);
