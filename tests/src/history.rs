//! What each side of a partition test saw and did (issue 34), for [`crate::checker`]:
//!
//! - the **target**: each request as the target itself logged it on arrival
//!   (`iohr-sample-target --request-log`), with the agent that sent it (told apart by
//!   source address: each agent sits in a namespace of its own) and the run (each run's
//!   operations carry a tag of their own in the query, `/?h=TAG`);
//! - the **store**: each run's status as the API answered it, polled, every change kept;
//! - **viewers**: every frame each stream of each replica delivered;
//! - the **network**: each cut, when it began and healed, and whom it kept from hearing
//!   its controller;
//! - **faults**: when each was applied, its deadline, and when it was seen undone.
//!
//! Every time is the wall clock in ms since the epoch, the one clock of this machine that
//! the target's log, the poller and the test share. A [`Recorder`] gathers it while the
//! test runs; [`History::verify`] runs the checker and, on a violation, writes the history
//! to `target/partition-histories/TEST.json` and fails naming the file.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::Api;

/// The wall clock in ms since the epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Longer than any test: a stream reader's own limit, never reached.
const LONG: Duration = Duration::from_secs(3600);

/// The statuses a run ends in.
pub const TERMINAL: &[&str] = &["passed", "failed", "error", "cancelled", "refused"];

/// The documented bounds the checker holds the history to (docs/guarantees.md).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Bounds {
    /// An agent that cannot hear its controller stops its exclusive runs within this of
    /// the cut: one lease TTL after the last message it heard, which came at most one
    /// heartbeat before the cut. The controller neither ends such a run (`agent lost`) nor
    /// lets another agent run it before this has passed.
    pub stop_ms: u64,
    /// What the agent's side is allowed on top of `stop_ms`: its requests in flight, the
    /// fence's tick, a loaded machine.
    pub slack_ms: u64,
    /// A fault is undone at most this long after its deadline.
    pub fault_ms: u64,
}

impl Bounds {
    /// The cut agent's last request of an exclusive run comes no later than this after
    /// the cut.
    pub fn agent_stop_ms(&self) -> u64 {
        self.stop_ms + self.slack_ms
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct History {
    pub test: String,
    pub bounds: Bounds,
    /// Agent name by its address, as the target sees it.
    pub agents: BTreeMap<String, String>,
    pub requests: Vec<Request>,
    pub runs: Vec<Run>,
    pub cuts: Vec<CutSpan>,
    pub faults: Vec<Fault>,
    /// The runs each agent held by the controller's agents listing, each change (when the
    /// test records it: [`Recorder::leases`]).
    #[serde(default)]
    pub leases: Vec<Leases>,
    /// Every answer of the API's run reads that was not 200 (status, run, body): the API
    /// itself is never cut here, so a test expects none.
    pub api_errors: Vec<(u64, u16, String, String)>,
    /// The controller's link to its store loses packets (scenario 5): a read may wait out
    /// the store's bound and be answered 503 `store_unavailable`, as promised.
    #[serde(default)]
    pub store_lossy: bool,
}

/// One request the target logged.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Request {
    pub at_ms: u64,
    /// The sending agent's name, or its address when no agent has it.
    pub agent: String,
    /// The run whose tag the request carried, if any.
    pub run: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Run {
    pub id: String,
    /// Load, faults, capacity and replay runs: at most one per agent, on one agent at once.
    pub exclusive: bool,
    /// The API answered its creation 201.
    pub acknowledged: bool,
    /// Whether the API still had it at the end of the test.
    pub exists_after: bool,
    /// Every status change the poller saw, in order.
    pub statuses: Vec<Seen>,
    /// Each viewer's stream, one per replica watched.
    pub streams: Vec<Stream>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Seen {
    pub at_ms: u64,
    pub status: String,
    pub reason: Option<String>,
    /// Whether the run's confirmation (production faults) named a person.
    pub confirmed: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Stream {
    pub replica: String,
    /// Every event delivered, in order: its id and name.
    pub frames: Vec<(Option<u64>, String)>,
}

/// One look at the agents listing: each agent's name and the runs it held (`running`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Leases {
    pub at_ms: u64,
    pub held: Vec<(String, Vec<String>)>,
}

/// A cut of the network: from when it began to its heal (`None`: never healed).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct CutSpan {
    pub agent: String,
    /// How, for the reader (`Port(4242)`, `PortOut(4242)`).
    pub what: String,
    pub from_ms: u64,
    pub to_ms: Option<u64>,
    /// Whether it keeps the agent from hearing its controller (so that its dead man's
    /// switch must stop its exclusive runs).
    pub silences_controller: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Fault {
    pub run: String,
    pub agent: String,
    pub applied_ms: u64,
    pub deadline_ms: u64,
    /// When it was seen undone; `None`: never, while the test watched.
    pub undone_ms: Option<u64>,
}

impl History {
    /// Runs the checker; on a violation writes the history as an artifact and fails the
    /// test with the violations and the artifact's path.
    /// The API is never cut by these tests, so an answer of its that was not 200 fails it
    /// too; but where the store's own link is lossy ([`History::store_lossy`]) a 503
    /// `store_unavailable` is the answer promised within the store's bound, and counted
    /// only.
    pub fn verify(&self) {
        let violations = crate::checker::check(self);
        let unavailable = |body: &str| body.contains("\"store_unavailable\"");
        let api_errors: Vec<_> = self
            .api_errors
            .iter()
            .filter(|(_, status, _, body)| {
                !(self.store_lossy && *status == 503 && unavailable(body))
            })
            .collect();
        if self.api_errors.len() > api_errors.len() {
            eprintln!(
                "{}: {} reads answered 503 store_unavailable (the store's link is lossy)",
                self.test,
                self.api_errors.len() - api_errors.len()
            );
        }
        if violations.is_empty() && api_errors.is_empty() {
            return;
        }
        let path = self.write_artifact();
        let mut list: Vec<String> = violations.iter().map(ToString::to_string).collect();
        list.extend(api_errors.iter().map(|(at, status, run, body)| {
            format!("the API answered {status} reading run {run} at {at}: {body}")
        }));
        panic!(
            "the history of {} breaks the promises:\n  {}\nhistory: {}",
            self.test,
            list.join("\n  "),
            path.display()
        );
    }

    /// `target/partition-histories/TEST.json`, next to the test binaries.
    pub fn write_artifact(&self) -> PathBuf {
        let exe = std::env::current_exe().expect("test executable path");
        // target/debug/deps/TEST-HASH: three levels up is target/.
        let target = exe
            .ancestors()
            .nth(3)
            .map_or_else(std::env::temp_dir, PathBuf::from);
        let dir = target.join("partition-histories");
        std::fs::create_dir_all(&dir).expect("the histories' directory");
        let path = dir.join(format!("{}.json", self.test.replace("::", "-")));
        std::fs::write(
            &path,
            serde_json::to_string_pretty(self).expect("a history serialises"),
        )
        .expect("write the history");
        path
    }

    pub fn run(&self, id: &str) -> Option<&Run> {
        self.runs.iter().find(|r| r.id == id)
    }
}

/// Every frame of run `id`, read through `api` from the first, held to the checker's
/// promise on a stream (1..n once each, in order, one `finished` last); the frames.
pub async fn assert_gapless(api: &Api, id: &str, limit: Duration) -> Vec<crate::api::Event> {
    let events = api.events(id, None).await.collect(limit).await;
    let stream = Stream {
        replica: api.base.clone(),
        frames: events.iter().map(|e| (e.id, e.event.clone())).collect(),
    };
    let faults = crate::checker::stream_faults(id, &stream);
    assert!(faults.is_empty(), "{}", faults.join("\n"));
    events
}

/// The operations' path of a run tagged `tag`: `/?h=TAG` (the target answers `/`).
pub fn tagged_path(tag: &str) -> String {
    format!("/?h={tag}")
}

/// Gathers a [`History`] while a test runs: pollers of run statuses and stream readers in
/// tasks of their own, cuts and faults as the test reports them.
pub struct Recorder {
    history: Arc<Mutex<History>>,
    /// Run id by the tag its requests carry.
    tags: BTreeMap<String, String>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    api: Option<Api>,
}

impl Recorder {
    pub fn new(test: &str, bounds: Bounds) -> Recorder {
        Recorder {
            history: Arc::new(Mutex::new(History {
                test: test.to_string(),
                bounds,
                ..History::default()
            })),
            tags: BTreeMap::new(),
            tasks: Vec::new(),
            stop: Arc::new(AtomicBool::new(false)),
            api: None,
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut History) -> T) -> T {
        f(&mut self.history.lock().expect("the history's lock"))
    }

    pub fn agent(&self, name: &str, address: impl ToString) {
        self.with(|h| h.agents.insert(address.to_string(), name.to_string()));
    }

    /// The controller's link to its store loses packets: see [`History::store_lossy`].
    pub fn store_lossy(&self) {
        self.with(|h| h.store_lossy = true);
    }

    /// Creates a run through `api` (expecting 201), its requests tagged `tag`, and starts
    /// polling its status and reading its stream on `api` (the replica named `replica`).
    pub async fn create_run(
        &mut self,
        api: &Api,
        replica: &str,
        tag: &str,
        exclusive: bool,
        body: &serde_json::Value,
    ) -> String {
        let record = api.create_run(body).await;
        let id = record["id"].as_str().expect("a run id").to_string();
        self.adopt(api, replica, tag, exclusive, &id);
        id
    }

    /// Records run `id`, which `api` (the replica named `replica`) acknowledged 201 with
    /// its requests tagged `tag`, from now on: polls its status and reads its stream
    /// there. For a run created while the recording could not read (its replicas down).
    pub fn adopt(&mut self, api: &Api, replica: &str, tag: &str, exclusive: bool, id: &str) {
        assert!(
            self.tags.insert(tag.to_string(), id.to_string()).is_none(),
            "tag {tag} is taken: each run of a history needs its own"
        );
        self.with(|h| {
            h.runs.push(Run {
                id: id.to_string(),
                exclusive,
                acknowledged: true,
                ..Run::default()
            })
        });
        self.api.get_or_insert_with(|| api.clone());
        self.poll(api, id);
        self.watch(api, replica, id);
    }

    /// Polls the agents listing on `api` every 100 ms until the recording ends, keeping
    /// each change of the runs the agents hold: the controller's own view of its leases,
    /// which the checker holds to exclusivity besides the target's log.
    pub fn leases(&mut self, api: &Api) {
        let (api, history, stop) = (api.clone(), self.history.clone(), self.stop.clone());
        self.tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let (status, body) = api.get("/v1/reliability/agents").await;
                let held: Vec<(String, Vec<String>)> = body["agents"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|a| {
                        let runs = a["running"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|l| l["run_id"].as_str().map(str::to_string))
                            .collect();
                        (a["name"].as_str().unwrap_or_default().to_string(), runs)
                    })
                    .collect();
                {
                    let mut h = history.lock().expect("the history's lock");
                    if status != 200 {
                        let body = body.to_string();
                        h.api_errors
                            .push((now_ms(), status, "(agents)".to_string(), body));
                    } else if h.leases.last().is_none_or(|last| last.held != held) {
                        h.leases.push(Leases {
                            at_ms: now_ms(),
                            held,
                        });
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }));
    }

    /// Polls the run's status every 50 ms until the recording ends, keeping each change.
    fn poll(&mut self, api: &Api, id: &str) {
        let (api, id, history, stop) = (
            api.clone(),
            id.to_string(),
            self.history.clone(),
            self.stop.clone(),
        );
        self.tasks.push(tokio::spawn(async move {
            loop {
                // One more read after the stop, so the last state is in.
                let last = stop.load(Ordering::Relaxed);
                let (status, record) = api.get(&format!("/v1/reliability/runs/{id}")).await;
                if status != 200 {
                    let mut h = history.lock().expect("the history's lock");
                    h.api_errors
                        .push((now_ms(), status, id.clone(), record.to_string()));
                } else {
                    let status_text = record["status"].as_str().unwrap_or_default();
                    // An ending at the store's own time, when it says it; else when seen.
                    let ended = record["ended_at"]
                        .as_str()
                        .filter(|_| TERMINAL.contains(&status_text))
                        .map(|t| crate::records::rfc3339_ms(t) as u64);
                    let seen = Seen {
                        at_ms: ended.unwrap_or_else(now_ms),
                        status: record["status"].as_str().unwrap_or_default().to_string(),
                        reason: record["reason"].as_str().map(str::to_string),
                        confirmed: record["confirmation"]["confirmed_by"].is_string(),
                    };
                    let mut h = history.lock().expect("the history's lock");
                    let run = h.runs.iter_mut().find(|r| r.id == id).expect("the run");
                    let changed = run.statuses.last().is_none_or(|s| {
                        (&s.status, &s.reason, s.confirmed)
                            != (&seen.status, &seen.reason, seen.confirmed)
                    });
                    if changed {
                        run.statuses.push(seen);
                    }
                }
                if last {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }));
    }

    /// Reads the run's event stream on `api` as a viewer does: on an end before
    /// `finished` it comes back with `Last-Event-ID`, until `finished` or the recording's
    /// end.
    pub fn watch(&mut self, api: &Api, replica: &str, id: &str) {
        let (api, id, history, stop) = (
            api.clone(),
            id.to_string(),
            self.history.clone(),
            self.stop.clone(),
        );
        let index = self.with(|h| {
            let run = h.runs.iter_mut().find(|r| r.id == id).expect("the run");
            run.streams.push(Stream {
                replica: replica.to_string(),
                frames: Vec::new(),
            });
            run.streams.len() - 1
        });
        self.tasks.push(tokio::spawn(async move {
            let mut last_id = None;
            while !stop.load(Ordering::Relaxed) {
                let (status, _) = api.get(&format!("/v1/reliability/runs/{id}")).await;
                if status != 200 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                let mut sse = api.events(&id, last_id).await;
                loop {
                    // Looked in on every 500 ms, to see the recording's end.
                    let event = match tokio::time::timeout(
                        Duration::from_millis(500),
                        sse.next(LONG),
                    )
                    .await
                    {
                        Ok(Some(event)) => event,
                        Ok(None) => break,
                        Err(_) if stop.load(Ordering::Relaxed) => return,
                        Err(_) => continue,
                    };
                    last_id = event.id.or(last_id);
                    let finished = event.event == "finished";
                    {
                        let mut h = history.lock().expect("the history's lock");
                        let run = h.runs.iter_mut().find(|r| r.id == id).expect("the run");
                        run.streams[index].frames.push((event.id, event.event));
                    }
                    if finished {
                        return;
                    }
                }
                if stop.load(Ordering::Relaxed) {
                    return;
                }
            }
        }));
    }

    /// A cut began now; returns its index for [`Recorder::healed`].
    pub fn cut(&self, agent: &str, what: impl std::fmt::Debug, silences_controller: bool) -> usize {
        self.with(|h| {
            h.cuts.push(CutSpan {
                agent: agent.to_string(),
                what: format!("{what:?}"),
                from_ms: now_ms(),
                to_ms: None,
                silences_controller,
            });
            h.cuts.len() - 1
        })
    }

    pub fn healed(&self, cut: usize) {
        self.with(|h| h.cuts[cut].to_ms = Some(now_ms()));
    }

    pub fn fault(&self, fault: Fault) {
        self.with(|h| h.faults.push(fault));
    }

    /// Ends the recording: waits (at most `limit`) until every run has ended and each
    /// stream has its `finished`, reads the target's log, checks each acknowledged run is
    /// still there, and gives the history. A run that has not ended by then is left to
    /// the checker, so that its history is kept.
    pub async fn finish(mut self, target_log: &std::path::Path, limit: Duration) -> History {
        let deadline = tokio::time::Instant::now() + limit;
        while tokio::time::Instant::now() < deadline {
            let done = self.with(|h| {
                h.runs.iter().all(|r| {
                    r.statuses
                        .last()
                        .is_some_and(|s| TERMINAL.contains(&s.status.as_str()))
                        && r.streams
                            .iter()
                            .all(|s| s.frames.last().is_some_and(|f| f.1 == "finished"))
                })
            });
            if done {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks.drain(..) {
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
        let requests = read_target_log(target_log, &self.history, &self.tags);
        let ids: Vec<String> = self.with(|h| h.runs.iter().map(|r| r.id.clone()).collect());
        let mut exists = Vec::new();
        if let Some(api) = &self.api {
            for id in &ids {
                let (status, _) = api.get(&format!("/v1/reliability/runs/{id}")).await;
                exists.push(status == 200);
            }
        }
        self.with(|h| {
            h.requests = requests;
            for (run, exists) in h.runs.iter_mut().zip(exists) {
                run.exists_after = exists;
            }
            h.clone()
        })
    }
}

/// The target's `--request-log`, each line resolved to its agent (by address) and run (by
/// tag).
fn read_target_log(
    path: &std::path::Path,
    history: &Mutex<History>,
    tags: &BTreeMap<String, String>,
) -> Vec<Request> {
    let agents = history.lock().expect("the history's lock").agents.clone();
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("the target's request log {}: {e}", path.display()));
    text.lines()
        .map(|line| {
            let entry: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("a request log line ({e}): {line}"));
            let from = entry["from"].as_str().unwrap_or_default();
            let tag = entry["path"]
                .as_str()
                .and_then(|p| p.split_once("h="))
                .map(|(_, tag)| tag.split('&').next().unwrap_or_default());
            Request {
                at_ms: entry["at_ms"].as_u64().unwrap_or_default(),
                agent: agents
                    .get(from)
                    .cloned()
                    .unwrap_or_else(|| from.to_string()),
                run: tag.and_then(|t| tags.get(t).cloned()),
            }
        })
        .collect()
}
