//! The agent link, controller side: the gRPC `AgentLink` service over mTLS.
//!
//! An agent is known by its client certificate: the TLS layer refuses a certificate not
//! signed by the controller's CA (or expired), and [`server::LinkService`] refuses one the
//! store does not know or whose agent was removed, before reading any message.
//! [`enroll::EnrollmentService`] on the same port takes callers without a certificate:
//! an agent exchanging a one-time token and a certificate request for its certificate.
//! `AgentLink.Renew` ([`renew`]) gives a connected agent its next certificate.

pub mod accept;
pub mod enroll;
mod renew;
pub mod server;
pub mod session;

pub use server::{LinkService, tls_config};
