//! One proxied connection: a reader and a writer per direction, joined by a bounded channel
//! of chunks stamped with the time they were read (latency is measured from it, as
//! Toxiproxy does). The writer applies the toxics that hit the connection in its direction,
//! re-reading them whenever the proxy's faults change; the client's reader also frames
//! HTTP/1.1 requests for the HTTP faults.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use iohr_domain::faults::fault::{Direction, HttpEffect, HttpFault, NetworkFault, Toxic};
use rand::{Rng, SeedableRng};
// A seeded stream that rand_chacha keeps across releases (StdRng's may change).
use rand_chacha::ChaCha8Rng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use super::Picks;
use super::http::{Framer, Segment, status_response};

/// Bytes read at once from either side.
const READ_CHUNK: usize = 32 * 1024;
/// Chunks in flight per direction between its reader and its writer.
const CHANNEL_CHUNKS: usize = 16;
/// How long the proxy waits for the target to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a closed connection's unread input is drained, so that the close is a FIN the
/// peer reads after the data it was sent, not an RST that may discard it.
const DRAIN_LIMIT: Duration = Duration::from_millis(500);
/// Bandwidth pacing writes at most this much time's worth of bytes at once.
const PACING_STEP: Duration = Duration::from_millis(100);

/// What one connection sees of the proxy's faults: the network faults that hit it (by
/// toxicity, in the order they were added) and every HTTP fault. Replaced whenever a fault is
/// added or removed.
#[derive(Debug, Default)]
pub(super) struct View {
    pub network: Vec<(u64, NetworkFault)>,
    pub http: Vec<(u64, HttpFault)>,
}

impl View {
    /// A `down` toxic hits the connection: it is closed.
    pub(super) fn down(&self) -> bool {
        self.network
            .iter()
            .any(|(_, n)| matches!(n.toxic, Toxic::Down {}))
    }

    fn toxics(&self, way: Way) -> impl Iterator<Item = (u64, &Toxic)> {
        self.network
            .iter()
            .filter(move |(_, n)| way.is(n.direction))
            .map(|(id, n)| (*id, &n.toxic))
    }
}

/// The direction a writer carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Way {
    /// Client to target.
    Upstream,
    /// Target to client.
    Downstream,
}

impl Way {
    fn is(self, direction: Direction) -> bool {
        matches!(
            (self, direction),
            (_, Direction::Both)
                | (Way::Upstream, Direction::Upstream)
                | (Way::Downstream, Direction::Downstream)
        )
    }
}

/// How a connection (or one of its halves) ended; the strongest of its parts' endings wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ending {
    /// Its source ended; the end was passed on.
    Eof,
    /// Closed by the proxy (a toxic, an HTTP fault, an error, a shutdown).
    Close,
    /// Reset: SO_LINGER 0, then close, so both peers get an RST.
    Reset,
}

enum Piece {
    Data {
        read_at: Instant,
        bytes: Vec<u8>,
    },
    /// Pass on what came before, then close the connection (after an injected answer).
    Finish,
}

/// What a connection task is given by the proxy.
pub(super) struct Conn {
    pub upstream: SocketAddr,
    pub view: watch::Receiver<Arc<View>>,
    /// Cancelled when the proxy shuts down.
    pub stop: CancellationToken,
    /// The proxy's draws for HTTP fault rates, shared by its connections.
    pub http_picks: Arc<Mutex<Picks>>,
    /// Seeds this connection's jitter.
    pub jitter_seed: u64,
}

/// Proxies one accepted connection until it ends.
pub(super) async fn serve(mut client: TcpStream, conn: Conn) {
    if conn.view.borrow().down() {
        return;
    }
    let mut upstream = tokio::select! {
        _ = conn.stop.cancelled() => return,
        connected = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(conn.upstream)) => match connected {
            Ok(Ok(stream)) => stream,
            Ok(Err(error)) => {
                tracing::debug!(upstream = %conn.upstream, %error, "fault proxy: target refused");
                return;
            }
            Err(_) => {
                tracing::debug!(upstream = %conn.upstream, "fault proxy: target did not accept in time");
                return;
            }
        },
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let end = conn.stop.child_token();
    let ending = {
        let (client_read, client_write) = client.split();
        let (target_read, target_write) = upstream.split();
        let (to_target, for_target) = mpsc::channel(CHANNEL_CHUNKS);
        let (to_client, for_client) = mpsc::channel(CHANNEL_CHUNKS);
        let client_side = ClientReader {
            framer: Framer::default(),
            to_target,
            to_client: to_client.downgrade(),
            view: conn.view.clone(),
            picks: conn.http_picks.clone(),
            end: &end,
        };
        let upstream_writer = Writer::new(Way::Upstream, &conn, &end);
        let downstream_writer = Writer::new(Way::Downstream, &conn, &end);
        let writers = async {
            let endings = tokio::join!(
                ending_ends(&end, upstream_writer.run(for_target, target_write)),
                ending_ends(&end, downstream_writer.run(for_client, client_write)),
            );
            // Both directions are done: readers still waiting for bytes stop.
            end.cancel();
            endings
        };
        let (a, b, (c, d)) = tokio::join!(
            ending_ends(&end, client_side.run(client_read)),
            ending_ends(&end, read_target(target_read, to_client, &end)),
            writers,
        );
        a.max(b).max(c).max(d)
    };
    match ending {
        Ending::Eof => {}
        Ending::Close => close_gracefully(&mut client, &mut upstream).await,
        Ending::Reset => {
            let _ = client.set_zero_linger();
            let _ = upstream.set_zero_linger();
        }
    }
}

/// Any part that ends the connection ends all its parts.
async fn ending_ends(end: &CancellationToken, part: impl Future<Output = Ending>) -> Ending {
    let ending = part.await;
    if ending != Ending::Eof {
        end.cancel();
    }
    ending
}

/// FIN both ways, then read and drop what the peers still send, for a bounded time.
async fn close_gracefully(client: &mut TcpStream, upstream: &mut TcpStream) {
    let _ = client.shutdown().await;
    let _ = upstream.shutdown().await;
    let _ = tokio::time::timeout(DRAIN_LIMIT, async {
        tokio::join!(drain(client), drain(upstream));
    })
    .await;
}

async fn drain(stream: &mut TcpStream) {
    let mut sink = [0u8; 4096];
    while let Ok(n) = stream.read(&mut sink).await {
        if n == 0 {
            break;
        }
    }
}

/// Reads the target's bytes into the downstream channel.
async fn read_target(
    mut from: ReadHalf<'_>,
    to: mpsc::Sender<Piece>,
    end: &CancellationToken,
) -> Ending {
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        let n = tokio::select! {
            _ = end.cancelled() => return Ending::Close,
            read = from.read(&mut buf) => match read {
                Ok(0) => return Ending::Eof,
                Ok(n) => n,
                Err(_) => return Ending::Close,
            },
        };
        let piece = Piece::Data {
            read_at: Instant::now(),
            bytes: buf[..n].to_vec(),
        };
        if !send(&to, piece, end).await {
            // The writer has ended; its ending is the connection's.
            return Ending::Eof;
        }
    }
}

async fn send(to: &mpsc::Sender<Piece>, piece: Piece, end: &CancellationToken) -> bool {
    tokio::select! {
        _ = end.cancelled() => false,
        sent = to.send(piece) => sent.is_ok(),
    }
}

/// Reads the client's bytes into the upstream channel, framing HTTP/1.1 requests so that the
/// HTTP faults can act on each.
struct ClientReader<'a> {
    framer: Framer,
    to_target: mpsc::Sender<Piece>,
    /// For an injected answer; weak, so that the downstream channel still closes when the
    /// target's side ends.
    to_client: mpsc::WeakSender<Piece>,
    view: watch::Receiver<Arc<View>>,
    picks: Arc<Mutex<Picks>>,
    end: &'a CancellationToken,
}

impl ClientReader<'_> {
    async fn run(mut self, mut from: ReadHalf<'_>) -> Ending {
        let mut buf = vec![0u8; READ_CHUNK];
        loop {
            let n = tokio::select! {
                _ = self.end.cancelled() => return Ending::Close,
                read = from.read(&mut buf) => match read {
                    Ok(0) => return Ending::Eof,
                    Ok(n) => n,
                    Err(_) => return Ending::Close,
                },
            };
            let read_at = Instant::now();
            for segment in self.framer.feed(&buf[..n]) {
                let bytes = match segment {
                    Segment::Pass(bytes) => bytes,
                    Segment::Head { bytes, path } => match self.pick(&path) {
                        None => bytes,
                        Some((id, HttpEffect::Delay { delay_ms })) => {
                            if let Err(ending) = self.delay(id, delay_ms).await {
                                return ending;
                            }
                            bytes
                        }
                        Some((id, HttpEffect::Abort {})) => {
                            tracing::debug!(fault_id = id, "fault proxy: request aborted");
                            return Ending::Close;
                        }
                        Some((id, HttpEffect::Status { status })) => {
                            tracing::debug!(fault_id = id, status, "fault proxy: request answered");
                            return self.answer(status).await;
                        }
                    },
                };
                if !send(&self.to_target, Piece::Data { read_at, bytes }, self.end).await {
                    return Ending::Eof;
                }
            }
        }
    }

    /// The first HTTP fault whose path is a prefix of the request's and whose rate picks it.
    fn pick(&self, path: &str) -> Option<(u64, HttpEffect)> {
        let view = self.view.borrow().clone();
        let mut picks = self.picks.lock().unwrap_or_else(PoisonError::into_inner);
        view.http
            .iter()
            .filter(|(_, f)| f.path.as_deref().is_none_or(|p| path.starts_with(p)))
            .find(|(_, f)| picks.pick(f.rate))
            .map(|(id, f)| (*id, f.effect.clone()))
    }

    /// Holds the request `delay_ms`, or until its fault is removed.
    async fn delay(&mut self, id: u64, delay_ms: u64) -> Result<(), Ending> {
        let until = Instant::now() + Duration::from_millis(delay_ms);
        loop {
            tokio::select! {
                _ = self.end.cancelled() => return Err(Ending::Close),
                _ = sleep_until(until) => return Ok(()),
                changed = self.view.changed() => {
                    if changed.is_err() || !self.view.borrow().http.iter().any(|(i, _)| *i == id) {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Sends the status answer to the client through the downstream writer (after what the
    /// target already sent), which then closes the connection.
    async fn answer(self, status: u16) -> Ending {
        let Some(to_client) = self.to_client.upgrade() else {
            return Ending::Close;
        };
        let answer = Piece::Data {
            read_at: Instant::now(),
            bytes: status_response(status),
        };
        if send(&to_client, answer, self.end).await
            && send(&to_client, Piece::Finish, self.end).await
        {
            // The downstream writer closes the connection once the answer is written.
            Ending::Eof
        } else {
            Ending::Close
        }
    }
}

/// Writes one direction's chunks, applying the toxics that hit it.
struct Writer<'a> {
    way: Way,
    view: watch::Receiver<Arc<View>>,
    current: Arc<View>,
    /// When each toxic began acting on this direction: a timeout counts from it.
    started: Vec<(u64, Instant)>,
    /// Bytes passed under each limit_data toxic.
    passed: Vec<(u64, u64)>,
    /// Armed by the first chunk under reset_peer: when the connection is reset.
    reset_at: Option<Instant>,
    /// When bandwidth pacing lets the next bytes go.
    paced_until: Option<Instant>,
    rng: ChaCha8Rng,
    end: &'a CancellationToken,
}

/// What a wait ended with, when it did not end the connection.
enum Waited {
    Elapsed,
    /// The faults changed; the writer has read them again.
    Changed,
}

impl<'a> Writer<'a> {
    fn new(way: Way, conn: &Conn, end: &'a CancellationToken) -> Self {
        let way_seed = match way {
            Way::Upstream => 0x5eed_0001,
            Way::Downstream => 0x5eed_0002,
        };
        Writer {
            way,
            view: conn.view.clone(),
            current: Arc::new(View::default()),
            started: Vec::new(),
            passed: Vec::new(),
            reset_at: None,
            paced_until: None,
            rng: ChaCha8Rng::seed_from_u64(conn.jitter_seed ^ way_seed),
            end,
        }
    }

    async fn run(mut self, mut from: mpsc::Receiver<Piece>, mut to: WriteHalf<'_>) -> Ending {
        if let Some(ending) = self.refresh() {
            return ending;
        }
        loop {
            let fatal = self.deadline();
            let piece = tokio::select! {
                biased;
                _ = self.end.cancelled() => return Ending::Close,
                changed = self.view.changed() => {
                    if changed.is_err() {
                        return Ending::Close;
                    }
                    if let Some(ending) = self.refresh() {
                        return ending;
                    }
                    continue;
                }
                _ = sleep_opt(fatal.map(|(at, _)| at)) => {
                    return fatal.map_or(Ending::Close, |(_, ending)| ending);
                }
                piece = from.recv() => piece,
            };
            let ending = match piece {
                None => Some(self.finish(&mut to).await),
                Some(Piece::Finish) => Some(Ending::Close),
                Some(Piece::Data { read_at, bytes }) => self.pass(read_at, bytes, &mut to).await,
            };
            if let Some(ending) = ending {
                return ending;
            }
        }
    }

    /// Reads the faults again. A `down` ends the connection, and so does the removal of a
    /// timeout that was holding it (Toxiproxy's cleanup closes it: its data was dropped).
    fn refresh(&mut self) -> Option<Ending> {
        let next = self.view.borrow_and_update().clone();
        if next.down() {
            return Some(Ending::Close);
        }
        let still = |id: u64| next.toxics(self.way).any(|(i, _)| i == id);
        let timeout_removed = self
            .current
            .toxics(self.way)
            .any(|(id, t)| matches!(t, Toxic::Timeout { .. }) && !still(id));
        if timeout_removed {
            return Some(Ending::Close);
        }
        let now = Instant::now();
        self.started.retain(|(id, _)| still(*id));
        self.passed.retain(|(id, _)| still(*id));
        for (id, _) in next.toxics(self.way) {
            if !self.started.iter().any(|(i, _)| *i == id) {
                self.started.push((id, now));
            }
        }
        if !next
            .toxics(self.way)
            .any(|(_, t)| matches!(t, Toxic::ResetPeer { .. }))
        {
            self.reset_at = None;
        }
        self.current = next;
        None
    }

    /// The next moment the connection ends by itself: a timeout elapsing or a reset.
    fn deadline(&self) -> Option<(Instant, Ending)> {
        let timeouts = self.current.toxics(self.way).filter_map(|(id, t)| match t {
            Toxic::Timeout { timeout_ms } if *timeout_ms > 0 => {
                let started = self.started.iter().find(|(i, _)| *i == id)?.1;
                Some((started + Duration::from_millis(*timeout_ms), Ending::Close))
            }
            _ => None,
        });
        timeouts
            .chain(self.reset_at.map(|at| (at, Ending::Reset)))
            .min()
    }

    /// Waits until `until` (forever when None), a change of the faults, or the end.
    async fn wait(&mut self, until: Option<Instant>) -> Result<Waited, Ending> {
        let fatal = self.deadline();
        tokio::select! {
            biased;
            _ = self.end.cancelled() => Err(Ending::Close),
            changed = self.view.changed() => {
                if changed.is_err() {
                    return Err(Ending::Close);
                }
                match self.refresh() {
                    Some(ending) => Err(ending),
                    None => Ok(Waited::Changed),
                }
            }
            _ = sleep_opt(fatal.map(|(at, _)| at)) => Err(fatal.map_or(Ending::Close, |(_, e)| e)),
            _ = sleep_opt(until) => Ok(Waited::Elapsed),
        }
    }

    fn blackholed(&self) -> bool {
        self.current
            .toxics(self.way)
            .any(|(_, t)| matches!(t, Toxic::Timeout { .. }))
    }

    /// The source ended: held while blackholed or before a reset, by slow_close, then passed on.
    async fn finish(&mut self, to: &mut WriteHalf<'_>) -> Ending {
        while self.blackholed() || self.reset_at.is_some() {
            if let Err(ending) = self.wait(None).await {
                return ending;
            }
        }
        let at = Instant::now();
        loop {
            let delay = self
                .current
                .toxics(self.way)
                .filter_map(|(_, t)| match t {
                    Toxic::SlowClose { delay_ms } => Some(Duration::from_millis(*delay_ms)),
                    _ => None,
                })
                .max();
            let Some(delay) = delay else { break };
            match self.wait(Some(at + delay)).await {
                Ok(Waited::Elapsed) => break,
                Ok(Waited::Changed) => continue,
                Err(ending) => return ending,
            }
        }
        match to.shutdown().await {
            Ok(()) => Ending::Eof,
            Err(_) => Ending::Close,
        }
    }

    /// One chunk through the toxics, in Toxiproxy's order of effect: held for latency,
    /// dropped while blackholed or before a reset, cut at a data limit, sliced, paced.
    async fn pass(
        &mut self,
        read_at: Instant,
        mut bytes: Vec<u8>,
        to: &mut WriteHalf<'_>,
    ) -> Option<Ending> {
        loop {
            let delay = self.latency();
            if delay.is_zero() || Instant::now() >= read_at + delay {
                break;
            }
            match self.wait(Some(read_at + delay)).await {
                Ok(Waited::Elapsed) => break,
                Ok(Waited::Changed) => continue,
                Err(ending) => return Some(ending),
            }
        }
        if self.blackholed() {
            return None;
        }
        let reset_after = self
            .current
            .toxics(self.way)
            .filter_map(|(_, t)| match t {
                Toxic::ResetPeer { timeout_ms } => Some(Duration::from_millis(*timeout_ms)),
                _ => None,
            })
            .min();
        if let Some(after) = reset_after {
            if self.reset_at.is_none() {
                self.reset_at = Some(Instant::now() + after);
            }
            return None;
        }
        let limited = self.limit(&mut bytes);
        for slice in self.slices(bytes) {
            if let Err(ending) = self.slice_pause().await {
                return Some(ending);
            }
            if let Err(ending) = self.paced_write(&slice, to).await {
                return Some(ending);
            }
        }
        limited.then_some(Ending::Close)
    }

    /// The latency of every latency toxic, each with its jitter drawn for this chunk.
    fn latency(&mut self) -> Duration {
        let current = self.current.clone();
        let mut total = Duration::ZERO;
        for (_, toxic) in current.toxics(self.way) {
            if let Toxic::Latency {
                latency_ms,
                jitter_ms,
            } = toxic
            {
                let ms = if *jitter_ms == 0 {
                    *latency_ms
                } else {
                    self.rng.random_range(
                        latency_ms.saturating_sub(*jitter_ms)
                            ..=latency_ms.saturating_add(*jitter_ms),
                    )
                };
                total += Duration::from_millis(ms);
            }
        }
        total
    }

    /// Cuts `bytes` at the tightest data limit; true when a limit is reached.
    fn limit(&mut self, bytes: &mut Vec<u8>) -> bool {
        let limits: Vec<(u64, u64)> = self
            .current
            .toxics(self.way)
            .filter_map(|(id, t)| match t {
                Toxic::LimitData { bytes } => Some((id, *bytes)),
                _ => None,
            })
            .collect();
        let mut reached = false;
        for (id, limit) in &limits {
            let passed = self
                .passed
                .iter()
                .find(|(i, _)| i == id)
                .map_or(0, |(_, n)| *n);
            let left = limit.saturating_sub(passed);
            if bytes.len() as u64 >= left {
                bytes.truncate(usize::try_from(left).unwrap_or(usize::MAX));
                reached = true;
            }
        }
        for (id, _) in &limits {
            match self.passed.iter_mut().find(|(i, _)| i == id) {
                Some((_, n)) => *n += bytes.len() as u64,
                None => self.passed.push((*id, bytes.len() as u64)),
            }
        }
        reached
    }

    /// The first slicer's slices of `bytes`, or `bytes` whole.
    fn slices(&mut self, bytes: Vec<u8>) -> Vec<Vec<u8>> {
        let slicer = self.current.toxics(self.way).find_map(|(_, t)| match t {
            Toxic::Slicer {
                average_size,
                size_variation,
                ..
            } => Some((*average_size, *size_variation)),
            _ => None,
        });
        let Some((average, variation)) = slicer else {
            return vec![bytes];
        };
        let mut slices = Vec::new();
        let mut rest = bytes.as_slice();
        while !rest.is_empty() {
            let size = if variation == 0 {
                average
            } else {
                self.rng.random_range(
                    average.saturating_sub(variation)..=average.saturating_add(variation),
                )
            }
            .max(1);
            let take = usize::try_from(size).unwrap_or(usize::MAX).min(rest.len());
            slices.push(rest[..take].to_vec());
            rest = &rest[take..];
        }
        slices
    }

    /// The slicer's pause before each slice.
    async fn slice_pause(&mut self) -> Result<(), Ending> {
        let pause = self.current.toxics(self.way).find_map(|(_, t)| match t {
            Toxic::Slicer { delay_us, .. } if *delay_us > 0 => {
                Some(Duration::from_micros(*delay_us))
            }
            _ => None,
        });
        if let Some(pause) = pause {
            self.wait(Some(Instant::now() + pause)).await?;
        }
        Ok(())
    }

    /// The tightest bandwidth toxic's rate in bytes a second (its `rate_kbps` is KB/s).
    fn rate(&self) -> Option<u64> {
        self.current
            .toxics(self.way)
            .filter_map(|(_, t)| match t {
                Toxic::Bandwidth { rate_kbps } => Some(rate_kbps.saturating_mul(1000).max(1)),
                _ => None,
            })
            .min()
    }

    /// Writes `bytes`, paced by the bandwidth toxic in steps of at most `PACING_STEP`.
    async fn paced_write(&mut self, bytes: &[u8], to: &mut WriteHalf<'_>) -> Result<(), Ending> {
        let mut rest = bytes;
        while !rest.is_empty() {
            let Some(rate) = self.rate() else {
                self.paced_until = None;
                return write(to, rest, self.end).await;
            };
            let step = usize::try_from(rate / (1000 / PACING_STEP.as_millis() as u64))
                .unwrap_or(usize::MAX)
                .max(1);
            let take = step.min(rest.len());
            let now = Instant::now();
            let start = self.paced_until.filter(|at| *at > now).unwrap_or(now);
            // Whole nanoseconds: `take` is at most a pacing step's worth of `rate` (>= 1).
            let nanos = (take as u128).saturating_mul(1_000_000_000) / u128::from(rate);
            let until = start + Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX));
            self.paced_until = Some(until);
            loop {
                match self.wait(Some(until)).await? {
                    Waited::Elapsed => break,
                    // A removed bandwidth toxic stops pacing at once.
                    Waited::Changed if self.rate().is_none() => break,
                    Waited::Changed => continue,
                }
            }
            write(to, &rest[..take], self.end).await?;
            rest = &rest[take..];
        }
        Ok(())
    }
}

async fn write(
    to: &mut WriteHalf<'_>,
    bytes: &[u8],
    end: &CancellationToken,
) -> Result<(), Ending> {
    tokio::select! {
        _ = end.cancelled() => Err(Ending::Close),
        written = to.write_all(bytes) => written.map_err(|_| Ending::Close),
    }
}

async fn sleep_opt(until: Option<Instant>) {
    match until {
        Some(at) => sleep_until(at).await,
        None => std::future::pending().await,
    }
}
