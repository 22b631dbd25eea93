//! The controller of iohr reliability.
//!
//! - [`store`]: the durable record (SQLite or PostgreSQL).
pub mod store;
pub mod hub;
pub mod queue;
pub mod timing;
