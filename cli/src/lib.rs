//! The parts of the CLI that other crates reuse. The event-stream parser is the
//! workspace's one, `iohr-sse`, kept here under its old name for the end-to-end tests.

pub use iohr_sse as sse;
