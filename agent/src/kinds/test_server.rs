//! A real HTTP/1.1 responder on loopback for the kinds' tests: a few fixed routes, and
//! every request head it reads sent on a channel.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// A real HTTP/1.1 responder on loopback. Every request head it reads is sent on the
/// returned channel, which is also how tests learn that a request has arrived.
pub async fn start_server() -> (String, mpsc::UnboundedReceiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr: SocketAddr = listener.local_addr().expect("addr");
    let (seen_tx, seen_rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let seen = seen_tx.clone();
            tokio::spawn(async move {
                let _ = respond(stream, seen).await;
            });
        }
    });
    (format!("http://{addr}"), seen_rx)
}

async fn respond(
    mut stream: TcpStream,
    seen: mpsc::UnboundedSender<String>,
) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let length: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().to_string())
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
    let _ = seen.send(head);
    let (status, body) = match path.strip_prefix("/api").unwrap_or(&path) {
        "/ok" => (200, "hello, world".to_string()),
        "/echo-length" => (200, format!("got {length} bytes")),
        "/status/503" => (503, "down".to_string()),
        "/slow" => {
            tokio::time::sleep(Duration::from_millis(300)).await;
            (200, "tardy-reply".to_string())
        }
        // Never answers: the test decides when to give up.
        "/hang" => std::future::pending().await,
        // Closes the connection without a response.
        "/close" => return Ok(()),
        _ => (404, "not found".to_string()),
    };
    let response = format!(
        "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}
