-- Controller replicas: which replica an agent's stream is on (set when it connects, and
-- cleared when that replica sees it go), so `GET /agents` on any replica shows it online
-- while that replica is live. NULL: not connected, or a single controller.
ALTER TABLE agents ADD COLUMN connected_replica BIGINT;
