//! The load engine (issue 3, in progress): today its arrival schedule.
//!
//! - [`schedule`]: open-model arrival times, constant or ramping (k6's
//!   `ramping-arrival-rate` semantics: each request's intended start time comes from the
//!   integral of the rate, so latency can be measured from the intended time).

pub mod schedule;
