//! A TCP relay that delays what it carries (issue 34, scenario 5): these kernels have no
//! `sch_netem`, so delay and jitter on a link come from a userspace relay in its path. The
//! client dials the relay, which dials the upstream; each chunk read from either side is
//! held for a delay drawn from `[min, max]` by a seeded generator (the same seed, the
//! same delays in the same order per direction) before it is written on, in order: a
//! chunk never overtakes the one before it, as on a real link whose delay varies.
//!
//! Bounded: at most [`IN_FLIGHT`] chunks of at most [`CHUNK`] bytes wait per direction;
//! a full queue stops the reads, so a fast sender is slowed by TCP's own flow control.

use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Bytes read at once.
pub const CHUNK: usize = 16 * 1024;
/// Chunks waiting per direction of one connection.
pub const IN_FLIGHT: usize = 64;

pub struct DelayRelay {
    pub addr: SocketAddr,
    accepted: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl DelayRelay {
    /// Listens on `listen`, relays to `upstream`, each chunk held `delay` (drawn per chunk
    /// from the range with a generator seeded from `seed`, one per direction of each
    /// connection).
    pub async fn start(
        listen: SocketAddr,
        upstream: SocketAddr,
        delay: RangeInclusive<Duration>,
        seed: u64,
    ) -> DelayRelay {
        let listener = TcpListener::bind(listen).await.expect("bind the relay");
        let addr = listener.local_addr().expect("relay address");
        let accepted = Arc::new(AtomicU64::new(0));
        let count = accepted.clone();
        let task = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let n = count.fetch_add(1, Ordering::Relaxed);
                let delay = delay.clone();
                tokio::spawn(async move {
                    let Ok(outbound) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let _ = inbound.set_nodelay(true);
                    let _ = outbound.set_nodelay(true);
                    let (in_read, in_write) = inbound.into_split();
                    let (out_read, out_write) = outbound.into_split();
                    let seed = seed.wrapping_add(n.wrapping_mul(2));
                    let up = carry(in_read, out_write, delay.clone(), seed);
                    let down = carry(out_read, in_write, delay, seed.wrapping_add(1));
                    // Either side's end ends the connection, as a proxy's would.
                    tokio::select! {
                        _ = up => {}
                        _ = down => {}
                    }
                });
            }
        });
        DelayRelay {
            addr,
            accepted,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for DelayRelay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One direction: reads chunks, stamps each with when it may leave, writes it then.
async fn carry(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    delay: RangeInclusive<Duration>,
    seed: u64,
) {
    let (send, mut receive) = mpsc::channel::<(Instant, Vec<u8>)>(IN_FLIGHT);
    let reader = async move {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut last = Instant::now();
        loop {
            let mut buf = vec![0u8; CHUNK];
            match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    buf.truncate(n);
                    let held = rng.random_range(delay.clone());
                    // In order: never before the chunk ahead of it.
                    last = last.max(Instant::now() + held);
                    if send.send((last, buf)).await.is_err() {
                        return;
                    }
                }
            }
        }
    };
    let writer = async move {
        while let Some((at, buf)) = receive.recv().await {
            tokio::time::sleep_until(at).await;
            if to.write_all(&buf).await.is_err() {
                return;
            }
        }
        // The reader ended (its side closed): pass the close on once all is written.
        let _ = to.shutdown().await;
    };
    // The writer finishes what the reader queued before the direction ends.
    let (_, _) = tokio::join!(reader, writer);
}
