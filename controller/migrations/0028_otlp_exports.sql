-- An account's OpenTelemetry export (controller/src/otlp): the OTLP/HTTP endpoint its
-- runs' per-second figures are sent to, and the headers sent with them, each value sealed
-- with the data dir's key (store/sealed.rs; the account and the header's name are the
-- associated data) and never read back by the API. The counts are of load frames: sent
-- and accepted, or dropped (the buffer was full, or the collector failed or refused).
CREATE TABLE otlp_exports (
    account_id TEXT PRIMARY KEY REFERENCES accounts(id) ON DELETE CASCADE,
    endpoint TEXT NOT NULL,
    headers TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_by TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    exported_frames BIGINT NOT NULL DEFAULT 0,
    dropped_frames BIGINT NOT NULL DEFAULT 0,
    last_error TEXT,
    last_error_at BIGINT,
    last_exported_at BIGINT
);
