//! A loopback HTTP listener that keeps the head of every request it is sent: what a
//! run's agent really sent a target (headers, secrets), seen from the target's side.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A loopback HTTP listener that keeps every request head it is sent and answers 200.
pub struct Recorder {
    pub port: u16,
    heads: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    pub async fn start() -> Recorder {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let heads = Arc::new(Mutex::new(Vec::new()));
        let kept = heads.clone();
        tokio::spawn(async move {
            while let Ok((mut tcp, _)) = listener.accept().await {
                let kept = kept.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut chunk = [0u8; 4096];
                    let read = async {
                        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65_536 {
                            match tcp.read(&mut chunk).await {
                                Ok(0) | Err(_) => break,
                                Ok(n) => head.extend_from_slice(&chunk[..n]),
                            }
                        }
                    };
                    let _ = tokio::time::timeout(Duration::from_secs(10), read).await;
                    kept.lock()
                        .expect("heads")
                        .push(String::from_utf8_lossy(&head).into_owned());
                    let _ = tcp
                        .write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                        )
                        .await;
                });
            }
        });
        Recorder { port, heads }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn heads(&self) -> Vec<String> {
        self.heads.lock().expect("heads").clone()
    }
}
