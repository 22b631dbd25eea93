//! The parts of the CLI that other crates reuse: the event-stream parser, which the
//! end-to-end tests read a run's live stream with too (one parser, one set of bugs).

pub mod sse;
