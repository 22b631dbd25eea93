-- When a token last authorised a request (to the minute: it is written at most once a
-- minute per token, so reading the API does not become a stream of writes).
ALTER TABLE tokens ADD COLUMN last_used_at BIGINT;
