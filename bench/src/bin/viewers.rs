//! `iohr-bench-viewers`: the controller under one live load run watched by many SSE
//! viewers while other clients poll `GET /v1/reliability/runs`.
//!
//! One fresh installation (`init`, a token, one agent certificate), the real
//! `iohr-controller serve` as a child process, and in this process: a simulated agent on
//! the real agent link that accepts the run and streams its frames at a steady rate for
//! the duration, `--viewers` SSE clients of that run (each its own connection, each
//! checking it gets every frame, in order, ending with `finished`), and `--pollers`
//! clients each sending `GET /runs` back to back. Reported: the controller's CPU seconds
//! over the streaming window (from /proc/PID/stat), its RSS at start and end, the GETs'
//! latency, and what every viewer received. See docs/benchmarks.md.

// Protocol messages are built with `..Default::default()` even when every field is set
// today, so a field the protocol gains later does not break the bench.
#![allow(clippy::needless_update)]

#[path = "../controller.rs"]
#[allow(dead_code)]
mod controller;
#[path = "../stats.rs"]
#[allow(dead_code)]
mod stats;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use iohr_certs::AgentIdentityFiles;
use iohr_proto::link::agent_link_client::AgentLinkClient;
use iohr_proto::link::{
    AgentMessage, Completion, ControllerMessage, Frame, FrameBatch, Heartbeat, Hello, LeaseAnswer,
    LeaseOffer, agent_message, controller_message,
};
use iohr_sse::{SseEvent, SseParser};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

use controller::{Backend, Environment};
use stats::Phase;

#[derive(Parser, Debug)]
#[command(
    name = "iohr-bench-viewers",
    about = "The iohr controller under one live run, many SSE viewers and GET /runs pollers"
)]
struct Opts {
    /// The `iohr-controller` binary under test (build it with --release).
    #[arg(long, default_value = "target/release/iohr-controller")]
    controller_bin: PathBuf,
    /// Where the installation goes (a fresh directory under it).
    #[arg(long, default_value = "/tmp/iohr-bench-viewers")]
    work_dir: PathBuf,
    /// SSE viewers of the live run.
    #[arg(long, default_value_t = 1000)]
    viewers: usize,
    /// Clients polling `GET /v1/reliability/runs`, each back to back.
    #[arg(long, default_value_t = 64)]
    pollers: usize,
    /// How long the run streams frames (and the pollers poll), in seconds.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Frames per second the run sends (a real load run sends one `load` frame a second;
    /// more stresses the fan-out).
    #[arg(long, default_value_t = 10)]
    frames_per_second: u32,
    /// Extra arguments for `serve`, e.g. `--serve-arg=--max-viewers-per-run=1000`.
    #[arg(long = "serve-arg", allow_hyphen_values = true)]
    serve_args: Vec<String>,
    /// Write the figures as JSON here too.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// Frames of one run the bench posts: a load run no request of which is ever sent (the
/// simulated agent only streams its frames).
const RUN_BODY: &str = r#"{"kind":"load","environment":"staging","target":"http://127.0.0.1:9","spec":{"operations":[{"method":"GET","path":"/"}],"model":"open","rate":1,"duration":"20m"}}"#;

/// Any one step's limit (connecting, a response, the end of a stream).
const STEP: Duration = Duration::from_secs(120);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let opts = Opts::parse();
    if opts.frames_per_second == 0 || opts.seconds == 0 {
        bail!("--frames-per-second and --seconds must be above 0");
    }
    let dir = opts.work_dir.join(format!("run-{}", std::process::id()));
    let mut env = Environment::create(&opts.controller_bin, &Backend::Sqlite, dir, "viewers")
        .await
        .context("creating the installation")?;
    env.serve_args = opts.serve_args.clone();
    let token = env.set_up(10).await?;
    let agent_dir = env
        .issue_agents(1)
        .await?
        .pop()
        .context("no agent identity")?;
    let controller = env.serve().await?;
    let rss_idle = controller.rss_mib();
    let http = client();
    let base = controller.api_url.trim_end_matches('/').to_string();
    let auth = format!("Bearer {token}");

    let (status, body) = call(
        &http,
        &base,
        &auth,
        Method::POST,
        "/v1/reliability/runs",
        Some(RUN_BODY),
    )
    .await?;
    if status != 201 {
        bail!("creating the run: {status} {body}");
    }
    let run_id = body["id"].as_str().context("run id")?.to_string();

    // Every viewer connected (its 200 received) before the agent starts the run.
    let expected = 1 + u64::from(opts.frames_per_second) * opts.seconds + 1;
    let mut viewers = Vec::with_capacity(opts.viewers);
    let (connected_tx, mut connected_rx) = mpsc::channel::<anyhow::Result<()>>(opts.viewers.max(1));
    for _ in 0..opts.viewers {
        let (http, base, auth, run_id, connected) = (
            http.clone(),
            base.clone(),
            auth.clone(),
            run_id.clone(),
            connected_tx.clone(),
        );
        viewers.push(tokio::spawn(async move {
            view(&http, &base, &auth, &run_id, connected).await
        }));
    }
    drop(connected_tx);
    for _ in 0..opts.viewers {
        match tokio::time::timeout(STEP, connected_rx.recv()).await {
            Ok(Some(Ok(()))) => {}
            Ok(Some(Err(error))) => bail!("a viewer could not connect: {error:#}"),
            Ok(None) | Err(_) => bail!("viewers did not connect in time"),
        }
    }
    let rss_start = controller.rss_mib();
    let cpu_start = controller.cpu_seconds().context("controller CPU")?;

    // The pollers, until the agent is done streaming.
    let streaming = Arc::new(AtomicBool::new(true));
    let mut pollers = Vec::with_capacity(opts.pollers);
    for _ in 0..opts.pollers {
        let (http, base, auth, streaming) =
            (http.clone(), base.clone(), auth.clone(), streaming.clone());
        pollers.push(tokio::spawn(async move {
            poll(&http, &base, &auth, &streaming).await
        }));
    }

    let window = Instant::now();
    let agent = Agent::load(&agent_dir.0, &agent_dir.1)?;
    let (done_tx, mut done_rx) = watch::channel(false);
    let plan = Streaming {
        frames_per_second: opts.frames_per_second,
        seconds: opts.seconds,
    };
    let agent_task = tokio::spawn(agent.run(controller.agent_url.clone(), plan, done_tx));
    let streamed_for = tokio::time::timeout(
        Duration::from_secs(opts.seconds) + STEP,
        done_rx.wait_for(|done| *done),
    )
    .await
    .map(|_| window.elapsed())
    .context("the run's completion was not acknowledged in time")?;
    streaming.store(false, Ordering::Relaxed);
    let cpu_end = controller.cpu_seconds().context("controller CPU")?;

    let mut gets = Phase::new("GET /runs")?;
    let mut get_errors = 0u64;
    for poller in pollers {
        let (phase, errors) = poller.await??;
        gets.merge(&phase)?;
        get_errors += errors;
    }
    let mut complete = 0usize;
    let mut shortfalls: HashMap<String, usize> = HashMap::new();
    let (mut least, mut most) = (u64::MAX, 0u64);
    for viewer in viewers {
        match tokio::time::timeout(STEP, viewer).await {
            Ok(Ok(Ok(seen))) => {
                least = least.min(seen.frames);
                most = most.max(seen.frames);
                if seen.in_order && seen.finished && seen.frames == expected {
                    complete += 1;
                } else {
                    *shortfalls
                        .entry(format!(
                            "frames {} in order {} finished {}",
                            seen.frames, seen.in_order, seen.finished
                        ))
                        .or_default() += 1;
                }
            }
            Ok(Ok(Err(error))) => *shortfalls.entry(format!("{error:#}")).or_default() += 1,
            Ok(Err(error)) => *shortfalls.entry(format!("task: {error}")).or_default() += 1,
            Err(_) => *shortfalls.entry("no end in time".into()).or_default() += 1,
        }
    }
    let rss_end = controller.rss_mib();
    agent_task.abort();
    controller.stop().await?;

    let cpu = cpu_end - cpu_start;
    let window_s = streamed_for.as_secs_f64();
    let figures = json!({
        "controller_bin": opts.controller_bin.display().to_string(),
        "serve_args": opts.serve_args,
        "viewers": opts.viewers,
        "pollers": opts.pollers,
        "frames_per_second": opts.frames_per_second,
        "seconds": opts.seconds,
        "frames_per_viewer_expected": expected,
        "window_s": round(window_s),
        "controller_cpu_s": round(cpu),
        "controller_cpu_share_of_one_core": round(cpu / window_s),
        "rss_mib": {"idle": rss_idle.map(round), "start": rss_start.map(round), "end": rss_end.map(round)},
        "gets": gets.to_json(),
        "gets_per_s": round(gets.count() as f64 / window_s),
        "get_errors": get_errors,
        "viewers_complete": complete,
        "viewer_frames_min": if least == u64::MAX { 0 } else { least },
        "viewer_frames_max": most,
        "viewer_shortfalls": shortfalls,
    });
    println!("{}", serde_json::to_string_pretty(&figures)?);
    if let Some(path) = &opts.json {
        std::fs::write(path, serde_json::to_string_pretty(&figures)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let _ = std::fs::remove_dir_all(&env.data_dir);
    if complete != opts.viewers {
        bail!(
            "{} of {} viewers did not get every frame in order",
            opts.viewers - complete,
            opts.viewers
        );
    }
    Ok(())
}

fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

type Http = Client<HttpConnector, Full<Bytes>>;

fn client() -> Http {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .build(connector)
}

fn request(
    base: &str,
    auth: &str,
    method: Method,
    path: &str,
    body: Option<&'static str>,
) -> anyhow::Result<Request<Full<Bytes>>> {
    Ok(Request::builder()
        .method(method)
        .uri(format!("{base}{path}"))
        .header("authorization", auth)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(
            body.unwrap_or_default().as_bytes(),
        )))?)
}

async fn call(
    http: &Http,
    base: &str,
    auth: &str,
    method: Method,
    path: &str,
    body: Option<&'static str>,
) -> anyhow::Result<(u16, Value)> {
    let response =
        tokio::time::timeout(STEP, http.request(request(base, auth, method, path, body)?))
            .await
            .context("request timed out")??;
    let status = response.status().as_u16();
    let bytes = tokio::time::timeout(STEP, response.into_body().collect())
        .await
        .context("body timed out")??
        .to_bytes();
    Ok((
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    ))
}

/// What one viewer received.
struct Seen {
    frames: u64,
    /// Every event's id was the one before plus one, from 1.
    in_order: bool,
    finished: bool,
}

async fn view(
    http: &Http,
    base: &str,
    auth: &str,
    run_id: &str,
    connected: mpsc::Sender<anyhow::Result<()>>,
) -> anyhow::Result<Seen> {
    let path = format!("/v1/reliability/runs/{run_id}/events");
    let answer = tokio::time::timeout(
        STEP,
        http.request(request(base, auth, Method::GET, &path, None)?),
    )
    .await;
    let response = match answer {
        Ok(Ok(response)) if response.status() == 200 => {
            let _ = connected.send(Ok(())).await;
            response
        }
        Ok(Ok(response)) => {
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let error = anyhow::anyhow!("events: {status} {}", String::from_utf8_lossy(&body));
            let _ = connected.send(Err(anyhow::anyhow!("{error}"))).await;
            return Err(error);
        }
        Ok(Err(error)) => {
            let _ = connected.send(Err(anyhow::anyhow!("{error}"))).await;
            return Err(error.into());
        }
        Err(_) => {
            let _ = connected
                .send(Err(anyhow::anyhow!("no answer in time")))
                .await;
            bail!("no answer in time");
        }
    };
    drop(connected);
    let mut body = response.into_body();
    let mut parser = SseParser::new();
    let mut seen = Seen {
        frames: 0,
        in_order: true,
        finished: false,
    };
    loop {
        let events = match tokio::time::timeout(STEP, body.frame()).await {
            Ok(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => parser.push(&data)?,
                Err(_) => continue,
            },
            Ok(None) => {
                seen.count(parser.finish());
                return Ok(seen);
            }
            Ok(Some(Err(error))) => {
                bail!("the stream failed after {} frames: {error}", seen.frames)
            }
            Err(_) => bail!(
                "no event for {} s after {} frames",
                STEP.as_secs(),
                seen.frames
            ),
        };
        seen.count(events);
    }
}

impl Seen {
    /// Counts the frames among `events` (a frame carries its number as the event id).
    fn count(&mut self, events: Vec<SseEvent>) {
        for event in events {
            let Some(id) = event.id.and_then(|id| id.trim().parse::<u64>().ok()) else {
                continue;
            };
            self.frames += 1;
            if id != self.frames {
                self.in_order = false;
            }
            if event.event == "finished" {
                self.finished = true;
            }
        }
    }
}

/// `GET /runs` back to back while the run streams; the latencies and the failures.
async fn poll(
    http: &Http,
    base: &str,
    auth: &str,
    streaming: &AtomicBool,
) -> anyhow::Result<(Phase, u64)> {
    let mut phase = Phase::new("GET /runs")?;
    let mut errors = 0;
    while streaming.load(Ordering::Relaxed) {
        let sent = Instant::now();
        match call(http, base, auth, Method::GET, "/v1/reliability/runs", None).await {
            Ok((200, _)) => phase.record(sent.elapsed()),
            _ => errors += 1,
        }
    }
    Ok((phase, errors))
}

/// How the simulated agent streams the run.
#[derive(Debug, Clone, Copy)]
struct Streaming {
    frames_per_second: u32,
    seconds: u64,
}

/// The one simulated agent: its identity files, read once.
struct Agent {
    name: String,
    cert: Vec<u8>,
    key: Vec<u8>,
    ca: Vec<u8>,
}

/// Messages the agent may queue towards the controller (as the real agent).
const OUTBOUND: usize = 1024;

impl Agent {
    fn load(name: &str, dir: &std::path::Path) -> anyhow::Result<Agent> {
        let files = AgentIdentityFiles::in_dir(dir);
        let read = |p: PathBuf| std::fs::read(&p).with_context(|| format!("{}", p.display()));
        Ok(Agent {
            name: name.to_string(),
            cert: read(files.cert())?,
            key: read(files.key())?,
            ca: read(files.ca_cert())?,
        })
    }

    /// Connects, accepts the first offer, streams its frames and completes it; sets
    /// `done` once the completion is acknowledged.
    async fn run(
        self,
        url: String,
        plan: Streaming,
        done: watch::Sender<bool>,
    ) -> anyhow::Result<()> {
        let tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca))
            .identity(Identity::from_pem(&self.cert, &self.key));
        let channel = Channel::from_shared(url)?
            .tls_config(tls)?
            .connect()
            .await?;
        let mut client = AgentLinkClient::new(channel);
        let (tx, rx) = mpsc::channel::<AgentMessage>(OUTBOUND);
        let hello = Hello {
            agent_id: self.name.clone(),
            version: "bench".to_string(),
            kinds: vec!["load".to_string()],
            environments: vec!["staging".to_string()],
            max_concurrent_jobs: 1,
            incarnation: format!("bench-viewers-{}", std::process::id()),
            ..Default::default()
        };
        send(&tx, agent_message::Body::Hello(hello)).await;
        let mut inbound = client.session(ReceiverStream::new(rx)).await?.into_inner();
        let mut beat = tokio::time::interval(Duration::from_millis(1000));
        let sequence = AtomicU64::new(0);
        loop {
            tokio::select! {
                _ = beat.tick() => {
                    let sequence = sequence.fetch_add(1, Ordering::Relaxed) + 1;
                    send(&tx, agent_message::Body::Heartbeat(Heartbeat { sequence })).await;
                }
                message = inbound.message() => match message? {
                    Some(ControllerMessage { body: Some(body) }) => match body {
                        controller_message::Body::Welcome(welcome) => {
                            let ms = u64::from(welcome.heartbeat_interval_ms.max(10));
                            beat = tokio::time::interval(Duration::from_millis(ms));
                        }
                        controller_message::Body::Offer(offer) => {
                            let answer = LeaseAnswer {
                                lease_id: offer.lease_id.clone(),
                                epoch: offer.epoch,
                                accepted: true,
                                ..Default::default()
                            };
                            send(&tx, agent_message::Body::LeaseAnswer(answer)).await;
                            tokio::spawn(stream_run(offer, plan, tx.clone()));
                        }
                        controller_message::Body::CompletionAck(ack) if ack.accepted => {
                            let _ = done.send(true);
                        }
                        _ => {}
                    },
                    Some(_) => {}
                    None => bail!("the agent link closed"),
                },
            }
        }
    }
}

async fn send(tx: &mpsc::Sender<AgentMessage>, body: agent_message::Body) {
    let _ = tx.send(AgentMessage { body: Some(body) }).await;
}

/// A `started` frame, `load` frames at the planned rate, then the completion.
async fn stream_run(offer: LeaseOffer, plan: Streaming, tx: mpsc::Sender<AgentMessage>) {
    let batch = |number: u64, kind: &str, payload: Value| FrameBatch {
        lease_id: offer.lease_id.clone(),
        epoch: offer.epoch,
        run_id: offer.run_id.clone(),
        frames: vec![Frame {
            number,
            kind: kind.to_string(),
            payload_json: payload.to_string(),
            ..Default::default()
        }],
        ..Default::default()
    };
    send(
        &tx,
        agent_message::Body::Frames(batch(1, "started", json!({"agent": "bench"}))),
    )
    .await;
    let total = u64::from(plan.frames_per_second) * plan.seconds;
    let mut tick = tokio::time::interval(Duration::from_secs(1) / plan.frames_per_second);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    // About the size of a real `load` second (counts and an encoded histogram).
    let histogram = "HISTFAAAA".repeat(60);
    for i in 1..=total {
        tick.tick().await;
        let payload = json!({
            "second": i,
            "phase": "measure",
            "counts": {"sent": 10 * i, "ok": 10 * i, "errors": 0},
            "intended": 10, "sent": 10, "late": 0, "dropped": 0,
            "histogram": histogram,
        });
        send(
            &tx,
            agent_message::Body::Frames(batch(1 + i, "load", payload)),
        )
        .await;
    }
    let completion = Completion {
        lease_id: offer.lease_id.clone(),
        epoch: offer.epoch,
        run_id: offer.run_id.clone(),
        status: "passed".to_string(),
        last_frame: 1 + total,
        ..Default::default()
    };
    send(&tx, agent_message::Body::Completion(completion)).await;
}
