-- A capacity run split over agents: each step is judged on the whole, every share's part
-- merged (see store/steps.rs). `split_step_points`: a share's point of a step (its
-- counts, rates and latency histogram) that not every share has sent yet.
-- `split_steps`: the verdict on a step once every share has, which each share's agent
-- asks for before the sweep's next step, and the instant the shares start that step.
-- Both hold measures only (never a request or a body), and go with the run's ending.
CREATE TABLE split_step_points (
    run_id TEXT NOT NULL,
    step BIGINT NOT NULL,
    share_index BIGINT NOT NULL,
    point TEXT NOT NULL,
    PRIMARY KEY (run_id, step, share_index)
);
CREATE TABLE split_steps (
    run_id TEXT NOT NULL,
    step BIGINT NOT NULL,
    meets_slo BIGINT NOT NULL,
    reason TEXT NOT NULL,
    starts_at BIGINT NOT NULL,
    PRIMARY KEY (run_id, step)
);
