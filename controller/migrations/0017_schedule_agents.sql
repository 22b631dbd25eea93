-- A schedule's runs may be split over several agents (`"agents": N`, as a POSTed run's):
-- NULL (or 1) fires whole runs.
ALTER TABLE schedules ADD COLUMN agents BIGINT;
