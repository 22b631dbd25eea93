//! `iohr-bench-h1-floor`: the least a closed-model HTTP/1.1 client can spend per request,
//! to size what the load engine could still gain (issue 19's "1.25x wrk").
//!
//! C connections to a loopback target, one request in flight on each; an answer is taken
//! as whole once its head's end and `Content-Length` bytes after it have arrived. Nothing
//! else: no timing, no histogram, no frames, no timeouts, no other header looked at. So
//! its requests/s at a CPU quota is an upper bound for any client that uses the same
//! kernel interface, and the gap between it and the engine is all the engine could win.
//!
//! Two interfaces (`--io`):
//! - `epoll`: one `send` per request and `recv`s until the answer is whole, woken by an
//!   edge-triggered epoll: the system calls the engine makes (tokio is epoll underneath);
//! - `uring`: io_uring, each request's send linked to its answer's first receive, every
//!   ready connection's next pair submitted in one `io_uring_enter` (registered files,
//!   poll-first receives, task work deferred to that call): what io_uring could give.
//!
//! `--record` adds the work the engine does per request on any interface: the clock read
//! when a request goes and when its answer is whole, the answer's head parsed (httparse,
//! as the engine's first answer on a connection) and its latency recorded in a histogram.
//! With it, `--io uring` sizes an engine on io_uring without tokio's readiness round trip.
//!
//! Prints one JSON object: `{"io":..,"record":..,"connections":..,"seconds":..,"requests":..,
//! "rps":..,"p99_us":..}` (`p99_us` only with `--record`).

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsFd, AsRawFd};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Parser, ValueEnum};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use serde_json::json;

#[derive(Clone, Copy, ValueEnum)]
enum Io {
    Epoll,
    Uring,
}

#[derive(Parser)]
struct Args {
    /// The target, a loopback address such as 127.0.0.1:18190.
    #[arg(long)]
    target: SocketAddr,
    #[arg(long, value_enum, default_value_t = Io::Epoll)]
    io: Io,
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// Seconds to run.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Time, parse and record every answer, as the engine does.
    #[arg(long)]
    record: bool,
}

/// An answer's bytes are read into a buffer this big; the bench page's answer is ~850.
const BUFFER: usize = 16 * 1024;

struct Connection {
    stream: TcpStream,
    buffer: Box<[u8]>,
    filled: usize,
    /// When its request went (only with `--record`).
    sent_at: Instant,
}

/// What `--record` keeps: every answer's latency, in microseconds.
struct Recorder(Option<hdrhistogram::Histogram<u64>>);

impl Recorder {
    fn new(record: bool) -> anyhow::Result<Recorder> {
        let histogram = hdrhistogram::Histogram::new_with_bounds(1, 60_000_000, 3);
        Ok(Recorder(if record { Some(histogram?) } else { None }))
    }

    /// The request on `connection` goes now.
    fn sending(&self, connection: &mut Connection) {
        if self.0.is_some() {
            connection.sent_at = Instant::now();
        }
    }

    /// `head` (an answer's, whole) came for `connection`'s request: parsed and timed.
    fn answer(&mut self, connection: &Connection, head: &[u8]) -> anyhow::Result<()> {
        let Some(histogram) = &mut self.0 else {
            return Ok(());
        };
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut response = httparse::Response::new(&mut headers);
        if !response.parse(head)?.is_complete() || response.code != Some(200) {
            bail!("not a whole 200 answer: {:?}", response.code);
        }
        let micros = u64::try_from(connection.sent_at.elapsed().as_micros())?;
        histogram.saturating_record(micros.max(1));
        Ok(())
    }

    fn p99(&self) -> Option<u64> {
        self.0.as_ref().map(|h| h.value_at_quantile(0.99))
    }
}

/// The length of the whole answer at the start of `bytes`, once it has all arrived.
fn whole_answer(bytes: &[u8]) -> anyhow::Result<Option<usize>> {
    let Some(end) = memchr::memmem::find(bytes, b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = &bytes[..end];
    let Some(at) = memchr::memmem::find(head, b"\r\nContent-Length: ") else {
        bail!("an answer without Content-Length (the floor reads only those)");
    };
    let digits = &head[at + 18..];
    let length = digits
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .try_fold(0usize, |n, d| {
            n.checked_mul(10)?.checked_add(usize::from(d - b'0'))
        })
        .context("Content-Length too large")?;
    let whole = end + 4 + length;
    if whole > BUFFER {
        bail!("an answer of {whole} bytes, over the floor's {BUFFER}-byte buffer");
    }
    Ok((bytes.len() >= whole).then_some(whole))
}

/// Takes `connection`'s received bytes; true when they make a whole answer, which is then
/// recorded and dropped. An answer's bytes never run past it: one request is in flight.
fn answered(connection: &mut Connection, recorder: &mut Recorder) -> anyhow::Result<bool> {
    match whole_answer(&connection.buffer[..connection.filled])? {
        Some(whole) if whole == connection.filled => {
            recorder.answer(connection, &connection.buffer[..whole])?;
            connection.filled = 0;
            Ok(true)
        }
        Some(_) => bail!("bytes past the answer with one request in flight"),
        None if connection.filled == BUFFER => bail!("an answer's head over {BUFFER} bytes"),
        None => Ok(false),
    }
}

fn connect(target: SocketAddr, connections: usize) -> anyhow::Result<Vec<Connection>> {
    (0..connections)
        .map(|_| {
            let stream = TcpStream::connect(target).context("connect")?;
            stream.set_nodelay(true)?;
            stream.set_nonblocking(true)?;
            Ok(Connection {
                stream,
                buffer: vec![0; BUFFER].into_boxed_slice(),
                filled: 0,
                sent_at: Instant::now(),
            })
        })
        .collect()
}

fn send(stream: &mut TcpStream, request: &[u8]) -> anyhow::Result<()> {
    // A 70-byte request into an empty socket buffer goes out whole or not at all.
    let sent = stream.write(request).context("send")?;
    if sent != request.len() {
        bail!("a short send ({sent} of {} bytes)", request.len());
    }
    Ok(())
}

fn run_epoll(args: &Args, request: &[u8], recorder: &mut Recorder) -> anyhow::Result<u64> {
    let mut connections = connect(args.target, args.connections)?;
    let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
    for (index, connection) in connections.iter().enumerate() {
        let event = EpollEvent::new(EpollFlags::EPOLLIN | EpollFlags::EPOLLET, index as u64);
        epoll.add(connection.stream.as_fd(), event)?;
    }
    for connection in &mut connections {
        recorder.sending(connection);
        send(&mut connection.stream, request)?;
    }
    let until = Instant::now() + Duration::from_secs(args.seconds);
    let mut answers = 0u64;
    let mut events = vec![EpollEvent::empty(); 256];
    while Instant::now() < until {
        let ready = epoll.wait(&mut events, EpollTimeout::from(100u16))?;
        for event in &events[..ready] {
            let connection = usize::try_from(event.data())
                .ok()
                .and_then(|index| connections.get_mut(index))
                .context("an event for no connection")?;
            // Edge-triggered: read until the answer is whole or the socket is empty. After
            // a whole answer the next cannot be there yet, so no read that would say EAGAIN.
            loop {
                let free = &mut connection.buffer[connection.filled..];
                match connection.stream.read(free) {
                    Ok(0) => bail!("the target closed a connection"),
                    Ok(read) => connection.filled += read,
                    Err(error) if error.kind() == ErrorKind::WouldBlock => break,
                    Err(error) => return Err(error).context("recv"),
                }
                if answered(connection, recorder)? {
                    answers += 1;
                    recorder.sending(connection);
                    send(&mut connection.stream, request)?;
                    break;
                }
            }
        }
    }
    Ok(answers)
}

fn run_uring(args: &Args, request: &[u8], recorder: &mut Recorder) -> anyhow::Result<u64> {
    use io_uring::{IoUring, opcode, squeue, types};
    /// io_uring's IORING_RECVSEND_POLL_FIRST: right after its request the answer is not
    /// there, so wait for it instead of trying a receive that would say EAGAIN.
    const POLL_FIRST: u16 = 1;
    /// The user data of sends, whose success is not reported (SKIP_SUCCESS).
    const SEND: u64 = u64::MAX;

    let mut connections = connect(args.target, args.connections)?;
    let entries = u32::try_from(2 * args.connections.next_power_of_two()).context("entries")?;
    let mut ring: IoUring = IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_submit_all()
        .build(entries)
        .context("io_uring_setup")?;
    let descriptors: Vec<i32> = connections.iter().map(|c| c.stream.as_raw_fd()).collect();
    ring.submitter()
        .register_files(&descriptors)
        .context("register files")?;
    let request_length = u32::try_from(request.len()).context("request length")?;

    // Queues connection `index`'s receive, after its request when `with_request`.
    let queue = |ring: &mut IoUring,
                 connection: &mut Connection,
                 recorder: &Recorder,
                 index: usize,
                 with_request: bool|
     -> anyhow::Result<()> {
        if with_request {
            recorder.sending(connection);
        }
        let file = types::Fixed(u32::try_from(index)?);
        let free = &mut connection.buffer[connection.filled..];
        let receive = opcode::Recv::new(file, free.as_mut_ptr(), u32::try_from(free.len())?)
            .ioprio(POLL_FIRST)
            .build()
            .user_data(index as u64);
        let mut submission = ring.submission();
        // SAFETY: the request and every connection's buffer outlive the ring (both are
        // dropped after it returns below), and a buffer has one receive queued at a time.
        unsafe {
            if with_request {
                let send = opcode::Send::new(file, request.as_ptr(), request_length)
                    .build()
                    .flags(squeue::Flags::IO_LINK | squeue::Flags::SKIP_SUCCESS)
                    .user_data(SEND);
                submission.push(&send).context("submission queue full")?;
            }
            submission.push(&receive).context("submission queue full")?;
        }
        Ok(())
    };

    for (index, connection) in connections.iter_mut().enumerate() {
        queue(&mut ring, connection, recorder, index, true)?;
    }
    let until = Instant::now() + Duration::from_secs(args.seconds);
    let mut answers = 0u64;
    let mut next = Vec::with_capacity(args.connections);
    while Instant::now() < until {
        ring.submit_and_wait(1).context("io_uring_enter")?;
        for completion in ring.completion() {
            let result = completion.result();
            if completion.user_data() == SEND {
                bail!("send: {}", std::io::Error::from_raw_os_error(-result));
            }
            let index = usize::try_from(completion.user_data())?;
            let connection = connections
                .get_mut(index)
                .context("a completion for no connection")?;
            match result {
                0 => bail!("the target closed a connection"),
                read if read < 0 => bail!("recv: {}", std::io::Error::from_raw_os_error(-read)),
                read => connection.filled += usize::try_from(read)?,
            }
            let whole = answered(connection, recorder)?;
            answers += u64::from(whole);
            next.push((index, whole));
        }
        for (index, with_request) in next.drain(..) {
            let connection = connections.get_mut(index).context("no connection")?;
            queue(&mut ring, connection, recorder, index, with_request)?;
        }
    }
    // The ring goes first: its queued receives point into the connections' buffers.
    drop(ring);
    drop(connections);
    Ok(answers)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if !args.target.ip().is_loopback() {
        bail!("--target must be a loopback address");
    }
    if args.connections == 0 || args.connections > 4096 {
        bail!("--connections must be 1..=4096");
    }
    // The bytes the engine sends for `GET /` (agent/src/load/h1.rs).
    let request = format!(
        "GET / HTTP/1.1\r\nhost: {}\r\nuser-agent: iohr-load/0.1.0\r\n\r\n",
        args.target
    );
    let mut recorder = Recorder::new(args.record)?;
    let started = Instant::now();
    let requests = match args.io {
        Io::Epoll => run_epoll(&args, request.as_bytes(), &mut recorder)?,
        Io::Uring => run_uring(&args, request.as_bytes(), &mut recorder)?,
    };
    let seconds = started.elapsed().as_secs_f64();
    let io = match args.io {
        Io::Epoll => "epoll",
        Io::Uring => "uring",
    };
    println!(
        "{}",
        json!({"io": io, "record": args.record, "connections": args.connections,
               "seconds": seconds, "requests": requests, "rps": requests as f64 / seconds,
               "p99_us": recorder.p99()})
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use proptest::prelude::*;
    use proptest::test_runner::RngSeed;

    use super::*;

    const ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\nServer: t\r\nContent-Length: 5\r\n\r\nhello";

    #[test]
    fn an_answer_is_whole_at_its_heads_end_plus_its_length() {
        for cut in 0..ANSWER.len() {
            assert_eq!(whole_answer(&ANSWER[..cut]).expect("answer"), None, "{cut}");
        }
        assert_eq!(whole_answer(ANSWER).expect("answer"), Some(ANSWER.len()));
        assert!(whole_answer(b"HTTP/1.1 204 No Content\r\n\r\n").is_err());
        let huge = b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n";
        assert!(whole_answer(huge).is_err());
        let over = b"HTTP/1.1 200 OK\r\nContent-Length: 16385\r\n\r\n";
        assert!(whole_answer(over).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 512,
            rng_seed: RngSeed::Fixed(0x1012_f100_0123),
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        /// Whatever the target sends, the floor answers whole, not yet, or an error; a
        /// whole answer never ends past the bytes there are.
        #[test]
        fn any_bytes_give_an_answer_or_an_error(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            if let Ok(Some(whole)) = whole_answer(&bytes) {
                prop_assert!(whole <= bytes.len());
            }
        }
    }

    /// A loopback server that answers every request head with [`ANSWER`].
    fn serve() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                std::thread::spawn(move || {
                    let mut read = Vec::new();
                    let mut buffer = [0u8; 4096];
                    while let Ok(n @ 1..) = stream.read(&mut buffer) {
                        read.extend_from_slice(&buffer[..n]);
                        while let Some(end) = memchr::memmem::find(&read, b"\r\n\r\n") {
                            read.drain(..end + 4);
                            if stream.write_all(ANSWER).is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        addr
    }

    /// The answers of a 1 s run, and how many were recorded.
    fn run(io: Io, record: bool) -> (u64, u64) {
        let args = Args {
            target: serve(),
            io,
            connections: 4,
            seconds: 1,
            record,
        };
        let request = format!("GET / HTTP/1.1\r\nhost: {}\r\n\r\n", args.target);
        let mut recorder = Recorder::new(record).expect("recorder");
        let answers = match io {
            Io::Epoll => run_epoll(&args, request.as_bytes(), &mut recorder),
            Io::Uring => run_uring(&args, request.as_bytes(), &mut recorder),
        }
        .expect("the run");
        (answers, recorder.0.map_or(0, |h| h.len()))
    }

    /// Runs on `io` read answers, and with `--record` recorded each of them.
    fn reads_and_records(io: Io) {
        let (answers, recorded) = run(io, false);
        assert!(answers > 100 && recorded == 0, "{answers} {recorded}");
        let (answers, recorded) = run(io, true);
        assert!(answers > 100 && recorded == answers, "{answers} {recorded}");
    }

    #[test]
    fn the_epoll_floor_reads_answers_from_a_real_server() {
        reads_and_records(Io::Epoll);
    }

    #[test]
    fn the_io_uring_floor_reads_answers_from_a_real_server() {
        reads_and_records(Io::Uring);
    }
}
