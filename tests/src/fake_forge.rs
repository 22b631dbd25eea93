//! A stateful fake forge on loopback: GitHub's issue comments and commit statuses, and
//! GitLab's merge request notes and commit statuses, kept in memory, with every request's
//! method, path and headers recorded. Its GitHub answers follow GitHub's published
//! description (objects with their required fields), so it can stand behind Prism's
//! validating proxy ([`Prism`]), which refuses what GitHub would.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::process::{Child, Command};

/// A request as the fake saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    /// Path and query, as sent (GitLab's project path stays encoded).
    pub path: String,
    /// Header names in lowercase.
    pub headers: BTreeMap<String, String>,
    pub body: Value,
}

/// A comment (GitHub) or note (GitLab).
#[derive(Debug, Clone)]
pub struct Comment {
    pub id: u64,
    /// `owner/repo#N` (GitHub) or `PROJECT!IID` (GitLab, the project as encoded).
    pub on: String,
    pub body: String,
}

/// A commit status as posted.
#[derive(Debug, Clone)]
pub struct Status {
    /// `owner/repo` (GitHub) or the encoded project (GitLab).
    pub repo: String,
    pub sha: String,
    pub body: Value,
}

#[derive(Default)]
struct State {
    next_id: u64,
    comments: Vec<Comment>,
    statuses: Vec<Status>,
    seen: Vec<Seen>,
    fail_next: u32,
}

/// The fake forge: GitHub's API at [`FakeForge::url`], GitLab's under `/api/v4`.
#[derive(Clone)]
pub struct FakeForge {
    pub port: u16,
    state: Arc<Mutex<State>>,
}

fn json_response(status: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        "content-type",
        "application/json; charset=utf-8".parse().expect("header"),
    );
    response
}

const AT: &str = "2026-12-05T10:00:00Z";

fn github_comment(base: &str, comment: &Comment) -> Value {
    let (repo, number) = comment.on.split_once('#').unwrap_or((&comment.on, "0"));
    json!({
        "id": comment.id,
        "node_id": format!("IC_{}", comment.id),
        "url": format!("{base}/repos/{repo}/issues/comments/{}", comment.id),
        "html_url": format!("https://github.com/{repo}/pull/{number}#issuecomment-{}", comment.id),
        "issue_url": format!("{base}/repos/{repo}/issues/{number}"),
        "body": comment.body,
        "user": null,
        "created_at": AT,
        "updated_at": AT,
        "author_association": "OWNER",
    })
}

impl FakeForge {
    pub async fn start() -> FakeForge {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let forge = FakeForge {
            port,
            state: Arc::new(Mutex::new(State {
                next_id: 1000,
                ..State::default()
            })),
        };
        let served = forge.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let forge = served.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request| {
                        let forge = forge.clone();
                        async move { Ok::<_, Infallible>(forge.handle(request).await) }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), service)
                        .await;
                });
            }
        });
        forge
    }

    /// GitHub's API base here (without Prism in front).
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// GitLab's API base here.
    pub fn gitlab_url(&self) -> String {
        format!("http://127.0.0.1:{}/api/v4", self.port)
    }

    /// The next `n` requests are answered 500.
    pub fn fail_next(&self, n: u32) {
        self.state.lock().expect("state").fail_next = n;
    }

    /// Adds a comment as someone else (or an earlier controller) wrote it.
    pub fn seed_comment(&self, on: &str, body: &str) -> u64 {
        let mut state = self.state.lock().expect("state");
        state.next_id += 1;
        let id = state.next_id;
        state.comments.push(Comment {
            id,
            on: on.to_string(),
            body: body.to_string(),
        });
        id
    }

    pub fn comments(&self, on: &str) -> Vec<Comment> {
        let state = self.state.lock().expect("state");
        state
            .comments
            .iter()
            .filter(|c| c.on == on)
            .cloned()
            .collect()
    }

    pub fn statuses(&self, sha: &str) -> Vec<Status> {
        let state = self.state.lock().expect("state");
        state
            .statuses
            .iter()
            .filter(|s| s.sha == sha)
            .cloned()
            .collect()
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.state.lock().expect("state").seen.clone()
    }

    async fn handle(&self, request: Request<Incoming>) -> Response<Full<Bytes>> {
        let method = request.method().clone();
        let path = request
            .uri()
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or_default();
        let headers: BTreeMap<String, String> = request
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_ascii_lowercase(),
                    v.to_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        let bytes = request
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        let mut state = self.state.lock().expect("state");
        state.seen.push(Seen {
            method: method.to_string(),
            path: path.clone(),
            headers,
            body: body.clone(),
        });
        if state.fail_next > 0 {
            state.fail_next -= 1;
            return json_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                &json!({"message": "Server Error"}),
            );
        }
        let (route, query) = path.split_once('?').unwrap_or((&path, ""));
        let parts: Vec<&str> = route.trim_start_matches('/').split('/').collect();
        let base = self.url();
        match (&method, parts.as_slice()) {
            // GitHub
            (&Method::POST, ["repos", owner, repo, "statuses", sha]) => {
                state.next_id += 1;
                let id = state.next_id;
                state.statuses.push(Status {
                    repo: format!("{owner}/{repo}"),
                    sha: sha.to_string(),
                    body: body.clone(),
                });
                json_response(
                    StatusCode::CREATED,
                    &json!({
                        "url": format!("{base}/repos/{owner}/{repo}/statuses/{sha}"),
                        "avatar_url": null,
                        "id": id,
                        "node_id": format!("SC_{id}"),
                        "state": body["state"],
                        "description": body["description"],
                        "target_url": body.get("target_url").cloned().unwrap_or(Value::Null),
                        "context": body["context"],
                        "created_at": AT,
                        "updated_at": AT,
                        "creator": null,
                    }),
                )
            }
            (&Method::GET, ["repos", owner, repo, "issues", number, "comments"]) => {
                let on = format!("{owner}/{repo}#{number}");
                let page_of = |name: &str, default: usize| {
                    form_value(query, name)
                        .and_then(|v| v.parse::<usize>().ok())
                        .unwrap_or(default)
                };
                let (per_page, page) = (
                    page_of("per_page", 30).clamp(1, 100),
                    page_of("page", 1).max(1),
                );
                let all: Vec<&Comment> = state.comments.iter().filter(|c| c.on == on).collect();
                let items: Vec<Value> = all
                    .iter()
                    .skip((page - 1) * per_page)
                    .take(per_page)
                    .map(|c| github_comment(&base, c))
                    .collect();
                let mut response = json_response(StatusCode::OK, &Value::Array(items));
                if page * per_page < all.len() {
                    let link = format!(
                        "<{base}/repositories/1/issues/{number}/comments?per_page={per_page}&page={}>; rel=\"next\"",
                        page + 1
                    );
                    response
                        .headers_mut()
                        .insert("link", link.parse().expect("link"));
                }
                response
            }
            (&Method::POST, ["repos", owner, repo, "issues", number, "comments"]) => {
                state.next_id += 1;
                let comment = Comment {
                    id: state.next_id,
                    on: format!("{owner}/{repo}#{number}"),
                    body: body["body"].as_str().unwrap_or("").to_string(),
                };
                state.comments.push(comment.clone());
                json_response(StatusCode::CREATED, &github_comment(&base, &comment))
            }
            (&Method::PATCH, ["repos", _owner, _repo, "issues", "comments", id]) => {
                let id: u64 = id.parse().unwrap_or(0);
                match state.comments.iter_mut().find(|c| c.id == id) {
                    Some(comment) => {
                        comment.body = body["body"].as_str().unwrap_or("").to_string();
                        let comment = comment.clone();
                        json_response(StatusCode::OK, &github_comment(&base, &comment))
                    }
                    None => json_response(StatusCode::NOT_FOUND, &json!({"message": "Not Found"})),
                }
            }
            // GitLab
            (&Method::POST, ["api", "v4", "projects", project, "statuses", sha]) => {
                state.next_id += 1;
                let id = state.next_id;
                state.statuses.push(Status {
                    repo: project.to_string(),
                    sha: sha.to_string(),
                    body: body.clone(),
                });
                json_response(
                    StatusCode::CREATED,
                    &json!({"id": id, "sha": sha, "status": body["state"], "name": body["name"]}),
                )
            }
            (
                &Method::GET,
                [
                    "api",
                    "v4",
                    "projects",
                    project,
                    "merge_requests",
                    iid,
                    "notes",
                ],
            ) => {
                let on = format!("{project}!{iid}");
                let items: Vec<Value> = state
                    .comments
                    .iter()
                    .filter(|c| c.on == on)
                    .map(|c| json!({"id": c.id, "body": c.body, "system": false}))
                    .collect();
                json_response(StatusCode::OK, &Value::Array(items))
            }
            (
                &Method::POST,
                [
                    "api",
                    "v4",
                    "projects",
                    project,
                    "merge_requests",
                    iid,
                    "notes",
                ],
            ) => {
                state.next_id += 1;
                let note = Comment {
                    id: state.next_id,
                    on: format!("{project}!{iid}"),
                    body: body["body"].as_str().unwrap_or("").to_string(),
                };
                state.comments.push(note.clone());
                json_response(
                    StatusCode::CREATED,
                    &json!({"id": note.id, "body": note.body}),
                )
            }
            (
                &Method::PUT,
                [
                    "api",
                    "v4",
                    "projects",
                    _project,
                    "merge_requests",
                    _iid,
                    "notes",
                    id,
                ],
            ) => {
                let id: u64 = id.parse().unwrap_or(0);
                match state.comments.iter_mut().find(|c| c.id == id) {
                    Some(note) => {
                        note.body = body["body"].as_str().unwrap_or("").to_string();
                        json_response(StatusCode::OK, &json!({"id": note.id, "body": note.body}))
                    }
                    None => {
                        json_response(StatusCode::NOT_FOUND, &json!({"message": "404 Not found"}))
                    }
                }
            }
            _ => json_response(StatusCode::NOT_FOUND, &json!({"message": "Not Found"})),
        }
    }
}

fn form_value(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == name).then(|| v.to_string())
    })
}

/// Prism's validating proxy (`prism proxy api.github.com.json UPSTREAM --errors`) on a
/// free loopback port: a request or answer GitHub's description refuses is answered 422.
pub struct Prism {
    pub port: u16,
    _child: Child,
}

/// Where the forge tests' npm packages are, Prism among them.
pub fn forge_node_modules() -> PathBuf {
    crate::forge::node_modules_with(&[".bin/prism"])
}

impl Prism {
    /// Starts Prism in front of `upstream` and waits (bounded) until it answers.
    pub async fn start(upstream: &str, log: &std::path::Path) -> Prism {
        let modules = forge_node_modules();
        let spec = modules.join("@octokit/openapi/generated/api.github.com.json");
        let port = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            probe.local_addr().expect("addr").port()
        };
        let file = std::fs::File::create(log).expect("prism log");
        let child = Command::new(modules.join(".bin/prism"))
            .arg("proxy")
            .arg(&spec)
            .arg(upstream)
            .args(["--errors", "-h", "127.0.0.1", "-p", &port.to_string()])
            .stdout(file.try_clone().expect("log"))
            .stderr(file)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start prism (node on PATH?)");
        // Bounded: it reads GitHub's whole description first (about 10 s here).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
        loop {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "prism did not listen within 180 s: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Prism {
            port,
            _child: child,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}
