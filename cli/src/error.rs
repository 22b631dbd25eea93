//! The one error type of the CLI: a short code and a message, printed as
//! `error: <code>: <message>` with exit status 2. API errors keep the server's code.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub code: String,
    pub message: String,
    /// Whether trying again may succeed (a dropped connection, a 503): only the event
    /// stream's reconnect loop looks at it.
    pub retryable: bool,
}

pub type Result<T, E = Failure> = std::result::Result<T, E>;

impl Failure {
    fn new(code: impl Into<String>, message: impl Into<String>, retryable: bool) -> Failure {
        Failure {
            code: code.into(),
            message: message.into(),
            retryable,
        }
    }

    /// A missing or malformed flag, file or environment variable.
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure::new("usage", message, false)
    }

    /// The server could not be reached or the connection broke.
    pub fn transport(message: impl Into<String>) -> Failure {
        Failure::new("transport", message, true)
    }

    /// The server answered something this CLI does not understand.
    pub fn protocol(message: impl Into<String>) -> Failure {
        Failure::new("protocol", message, false)
    }

    /// Writing our own output failed (a closed pipe).
    pub fn output(message: impl Into<String>) -> Failure {
        Failure::new("output", message, false)
    }

    /// The API answered with an error; gateways' 502-504 are worth another try.
    pub fn api(status: u16, code: impl Into<String>, message: impl Into<String>) -> Failure {
        Failure::new(code, message, matches!(status, 502..=504))
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for Failure {}

/// An error and its sources on one line: hyper's own messages ("client error
/// (Connect)") say little without the io error underneath.
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let part = cause.to_string();
        if !text.ends_with(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = cause.source();
    }
    text
}
