-- Account secrets: values a run's headers name as `${secret:NAME}`, sealed with the data
-- dir's key (store/sealed.rs, the row's account and name as associated data), written
-- through the API and never read back by it; the controller opens only the ones a leased
-- run names, for its agent's offer.
CREATE TABLE account_secrets (
    account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    value TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_by TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (account_id, name)
);
