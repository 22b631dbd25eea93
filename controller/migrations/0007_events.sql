-- Product events (an outbox): written in the transaction that finishes a run, ids only,
-- never a body. `seq` counts up per account without gaps, in commit order (the counter
-- row is locked until the writing transaction commits), so a reader resuming "after N"
-- never misses one; `id` is unique everywhere (the webhook-id of a delivery).
CREATE TABLE events (
    account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    seq BIGINT NOT NULL,
    id TEXT NOT NULL UNIQUE,
    type TEXT NOT NULL,
    at BIGINT NOT NULL,
    -- JSON: the ids and words of the event's `data`
    data TEXT NOT NULL,
    PRIMARY KEY (account_id, seq)
);

CREATE TABLE event_counters (
    account_id TEXT PRIMARY KEY REFERENCES accounts(id) ON DELETE CASCADE,
    last BIGINT NOT NULL
);

-- How far a consumer (the MQTT publisher) has published each account's events.
CREATE TABLE event_cursors (
    consumer TEXT NOT NULL,
    account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    last BIGINT NOT NULL,
    PRIMARY KEY (consumer, account_id)
);

-- Webhook subscriptions. `secret` signs deliveries (whsec_...); shown once at creation,
-- never again. `cursor`: the last event seq fanned out into deliveries.
CREATE TABLE webhooks (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    url TEXT NOT NULL,
    -- JSON list of event types
    events TEXT NOT NULL,
    -- standard or slack
    format TEXT NOT NULL,
    secret TEXT NOT NULL,
    -- active or disabled (a 410 answer)
    state TEXT NOT NULL,
    disabled_reason TEXT,
    cursor BIGINT NOT NULL,
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX webhooks_by_account ON webhooks (account_id, id);

-- One row per (subscription, event): its delivery's state, never a body.
CREATE TABLE webhook_deliveries (
    webhook_id TEXT NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,
    event_seq BIGINT NOT NULL,
    event_id TEXT NOT NULL,
    event_type TEXT NOT NULL,
    -- pending, delivered or failed (retries used up, or the subscription disabled)
    status TEXT NOT NULL,
    attempts BIGINT NOT NULL,
    -- attempts made before the last redelivery: the retry schedule starts again there
    schedule_from BIGINT NOT NULL,
    last_status_code BIGINT,
    last_error TEXT,
    next_attempt_at BIGINT,
    created_at BIGINT NOT NULL,
    last_attempt_at BIGINT,
    delivered_at BIGINT,
    PRIMARY KEY (webhook_id, event_seq)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (status, next_attempt_at);
