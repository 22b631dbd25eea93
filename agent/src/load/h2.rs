//! The load engine's HTTP/2 connection: the `h2` crate directly, not hyper's client.
//! hyper's client puts a dispatch channel and a task of its own between the worker and
//! the connection, one more hop per request; with `h2` the worker queues its stream on
//! the connection's shared state and awaits the answer itself. (Driving the connection
//! from the worker itself when it is the only one measured no better: every poll of the
//! worker then polled the socket too.) Measured with
//! `bench/load-tools.sh --protocol h2c` in docs/benchmarks.md ("HTTP/2 and TLS").

use std::future::poll_fn;
use std::io;

use h2::client::SendRequest;
use hyper::body::Bytes;
use hyper::{HeaderMap, Request};

use super::client::Failure;
use super::h1::Stream;

/// The headers HTTP/2 forbids (RFC 9113, 8.2.2); hyper drops them too.
const CONNECTION_SPECIFIC: [&str; 5] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
];

/// Removes what may not go on an HTTP/2 stream (`te` only as `trailers`).
pub fn strip_connection_headers(headers: &mut HeaderMap) {
    for name in CONNECTION_SPECIFIC {
        headers.remove(name);
    }
    if headers.get("te").is_some_and(|v| v != "trailers") {
        headers.remove("te");
    }
}

/// One worker's handle on an HTTP/2 connection; clones share it.
#[derive(Debug, Clone)]
pub struct H2Conn {
    sender: SendRequest<Bytes>,
}

impl H2Conn {
    /// The client preface and SETTINGS over `io`; the connection is driven by a task of
    /// its own until every handle is gone or the peer closes it.
    pub async fn handshake(io: Stream) -> Result<H2Conn, Failure> {
        let (sender, connection) = h2::client::handshake(io).await.map_err(|e| classify(&e))?;
        tokio::spawn(async move {
            // Its end is seen by the handles as an error at their next request.
            let _ = connection.await;
        });
        Ok(H2Conn { sender })
    }

    /// Sends one request (`body` after the head, when not empty) and reads the answer's
    /// body to its end, counted and never kept. Returns the status.
    pub async fn send(&mut self, head: Request<()>, body: &Bytes) -> Result<u16, Failure> {
        exchange(&mut self.sender, head, body).await
    }
}

async fn exchange(
    sender: &mut SendRequest<Bytes>,
    head: Request<()>,
    body: &Bytes,
) -> Result<u16, Failure> {
    // Waits while the peer's SETTINGS_MAX_CONCURRENT_STREAMS are all open.
    poll_fn(|cx| sender.poll_ready(cx))
        .await
        .map_err(|e| classify(&e))?;
    let end_of_stream = body.is_empty();
    let (response, mut stream) = sender
        .send_request(head, end_of_stream)
        .map_err(|e| classify(&e))?;
    if !end_of_stream {
        // Buffered by h2 until the peer's window takes it.
        stream
            .send_data(body.clone(), true)
            .map_err(|e| classify(&e))?;
    }
    let response = response.await.map_err(|e| classify(&e))?;
    let status = response.status().as_u16();
    let mut body = response.into_body();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(|e| classify(&e))?;
        // Read and dropped: give the window back, or a long body would stall.
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    Ok(status)
}

/// Maps h2's errors onto the failure kinds.
fn classify(error: &h2::Error) -> Failure {
    if let Some(io) = error.get_io() {
        return match io.kind() {
            io::ErrorKind::TimedOut => Failure::Timeout,
            _ => Failure::Reset,
        };
    }
    if error.is_go_away() || error.is_reset() || error.is_io() {
        Failure::Reset
    } else {
        Failure::Protocol
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_specific_headers_are_stripped_and_te_trailers_kept() {
        let mut headers = HeaderMap::new();
        headers.insert("connection", "keep-alive".parse().unwrap());
        headers.insert("transfer-encoding", "chunked".parse().unwrap());
        headers.insert("x-kept", "1".parse().unwrap());
        headers.insert("te", "trailers".parse().unwrap());
        strip_connection_headers(&mut headers);
        assert_eq!(headers.len(), 2, "{headers:?}");
        assert!(headers.contains_key("x-kept") && headers.contains_key("te"));
        headers.insert("te", "gzip".parse().unwrap());
        strip_connection_headers(&mut headers);
        assert!(!headers.contains_key("te"));
    }
}
