//! The agent-link port's accept loop, bounded: it takes TLS without a client certificate
//! (enrollment), so anyone who reaches it can open connections. At most `max` are held at
//! once; past that the next ones wait in the listen backlog until one closes, as the API
//! listener's do. (The TLS handshake's own time limit is the link's `ServerTlsConfig`.)

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::transport::server::{Connected, TcpConnectInfo};

/// One accepted connection, holding its place until it is dropped.
#[derive(Debug)]
pub struct Bounded {
    stream: TcpStream,
    _place: OwnedSemaphorePermit,
}

/// The connections of `listener`, at most `max` held at once.
pub fn bounded(listener: TcpListener, max: usize) -> impl Stream<Item = io::Result<Bounded>> {
    let places = Arc::new(Semaphore::new(max));
    futures_util::stream::unfold((listener, places), |(listener, places)| async move {
        // Closed only with the semaphore, which is never closed: the arm cannot end.
        let place = places.clone().acquire_owned().await.ok()?;
        let accepted = listener.accept().await.map(|(stream, _)| {
            // Small messages (acks, offers) must not wait for Nagle's algorithm.
            let _ = stream.set_nodelay(true);
            Bounded {
                stream,
                _place: place,
            }
        });
        Some((accepted, (listener, places)))
    })
}

impl Connected for Bounded {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.stream.connect_info()
    }
}

impl AsyncRead for Bounded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Bounded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}
