//! A TCP proxy between agents and the controller that can cut every connection through
//! it at once: the agent sees its stream break and reconnects through the proxy.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct CutProxy {
    pub addr: SocketAddr,
    generation: watch::Sender<u64>,
    accepted: Arc<AtomicU64>,
    _task: tokio::task::JoinHandle<()>,
}

impl CutProxy {
    pub async fn start(upstream: SocketAddr) -> CutProxy {
        CutProxy::start_on("127.0.0.1:0".parse().expect("address"), upstream).await
    }

    /// On a given address (one a client was told to dial before the proxy existed).
    pub async fn start_on(listen: SocketAddr, upstream: SocketAddr) -> CutProxy {
        let listener = TcpListener::bind(listen).await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let (generation, _) = watch::channel(0u64);
        let accepted = Arc::new(AtomicU64::new(0));
        let cuts = generation.clone();
        let count = accepted.clone();
        let task = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::Relaxed);
                let mut cut = cuts.subscribe();
                tokio::spawn(async move {
                    let Ok(outbound) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let (mut a, mut b) = (inbound, outbound);
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut a, &mut b) => {}
                        _ = cut.changed() => {}
                    }
                    // Dropping both ends closes the connection on both sides.
                });
            }
        });
        CutProxy {
            addr,
            generation,
            accepted,
            _task: task,
        }
    }

    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// Closes every connection open through the proxy now.
    pub fn cut(&self) {
        self.generation.send_modify(|g| *g += 1);
    }

    /// Connections accepted so far (each reconnect is one).
    pub fn connections(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }
}
