-- An account's plan beyond runs at once: how many runs it may have queued, and how long a
-- load, replay or capacity run may last (ms). Its monthly unit budget is units_per_month
-- (0: unlimited), enforced since this migration.
ALTER TABLE accounts ADD COLUMN max_queued BIGINT NOT NULL DEFAULT 1000;
ALTER TABLE accounts ADD COLUMN max_run_duration_ms BIGINT NOT NULL DEFAULT 3600000;
-- The month's use sums ended runs by when they ended.
CREATE INDEX runs_by_account_ended ON runs (account_id, ended_at);
CREATE INDEX runs_by_account_status ON runs (account_id, status);
