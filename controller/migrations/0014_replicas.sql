-- Controller replicas on one PostgreSQL store (`serve --replica`). `replica` is the number
-- of the replica whose dispatcher tracks a run's lease (0 when no replicas serve, or no
-- lease); that replica's lease writes are fenced by it, so a lease another replica took
-- over (its agent reconnected there, or its replica died) is never ended twice.
-- `cancel_requested` holds a cancel's reason asked on a replica that does not track the
-- lease, until the one that does tells the agent.
ALTER TABLE runs ADD COLUMN replica BIGINT NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN cancel_requested TEXT;
CREATE INDEX runs_by_replica ON runs (replica, status);
