-- Forge credentials: a token per account and forge (github, gitlab) and the API's base
-- URL (GitHub Enterprise, a self-hosted GitLab). The token is sealed with the data dir's
-- key (store/sealed.rs, the account and the forge as associated data), written through
-- the API and never read back by it: only the forge reporter opens it.
CREATE TABLE forge_credentials (
    account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    forge TEXT NOT NULL,
    token TEXT NOT NULL,
    api_url TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_by TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (account_id, forge)
);
-- One report per change (a pull request, a merge request, a branch): what the reporter
-- must say on the forge. `wanted` moves when something about the change's runs changed,
-- `done` when the forge has heard of it; the comment's id is kept once known so later
-- edits skip the listing. The retry schedule lives here, not in a task, so a restart keeps it.
CREATE TABLE forge_reports (
    account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    forge TEXT NOT NULL,
    change_ref TEXT NOT NULL,
    seen_run TEXT,
    wanted BIGINT NOT NULL,
    done BIGINT NOT NULL,
    comment_id TEXT,
    attempts BIGINT NOT NULL,
    next_attempt_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (account_id, forge, change_ref)
);
CREATE INDEX forge_reports_due ON forge_reports (next_attempt_at);
-- What the reporter did, per account (bounded: the oldest lines go): never a body, a
-- token or a forge's answer, only the state sent, the outcome and its class.
CREATE TABLE forge_report_log (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    at BIGINT NOT NULL,
    forge TEXT NOT NULL,
    change_ref TEXT NOT NULL,
    run_id TEXT,
    commit_sha TEXT,
    state TEXT,
    outcome TEXT NOT NULL,
    detail TEXT,
    status_code BIGINT,
    attempt BIGINT NOT NULL
);
CREATE INDEX forge_report_log_account ON forge_report_log (account_id, at);
-- The reporter looks up a change's newest run, and the run a before-run stands beside.
CREATE INDEX runs_by_change ON runs (account_id, change_ref, created_at);
CREATE INDEX runs_by_baseline_run ON runs (baseline_run);
