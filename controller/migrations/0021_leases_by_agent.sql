-- Replicas: before a replica offers a run to an agent it counts the agent's leases as the
-- store has them (another replica may have leased a split run's share to it, see
-- store/pooled.rs); this keeps that count to the agent's own rows.
CREATE INDEX runs_leased_by_agent ON runs (agent_id) WHERE lease_state IS NOT NULL;
