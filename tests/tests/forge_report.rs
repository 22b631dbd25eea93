//! The answer back on the pull request (issue 33, item 3), on real processes: the
//! controller's GitHub API is Prism's validating proxy with GitHub's published
//! description (`@octokit/openapi`) in front of a stateful fake forge, so a request GitHub
//! would refuse fails the test; GitLab's calls go to the same fake (no description to
//! check them against: the documented paths and fields are asserted).
//!
//! Runs are started through the API with a `change`; until triggers start them, the
//! forge and head commit a trigger's delivery would give a run are set in the same
//! insert by a test-only SQLite trigger on `runs` (`forge_pushes` names the forge and
//! commit of the change's next run), so no agent can lease the run before it has them.
//! The baseline rule (runs/baseline.rs) finds nothing yet: these runs report "no
//! baseline" (a success that says it compared nothing); comparisons with a baseline are
//! the report's unit tests (forge/report.rs) until the full loop's test.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::Duration;

use iohr_tests::fake_forge::{FakeForge, Prism};
use iohr_tests::process::AgentOptions;
use iohr_tests::{Agent, Api, Backend, Controller, Installation, Target};
use serde_json::{Value, json};
use sqlx::AnyPool;

const LIMIT: Duration = Duration::from_secs(60);
const GITHUB_TOKEN: &str = "ghp_only-for-the-forge-7f3a9c";
const GITLAB_TOKEN: &str = "glpat-only-for-the-forge-2b8e";

/// Polls `check` until it holds (bounded): the reporter works on its own poll.
async fn until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + LIMIT;
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The test-only path that gives runs what a trigger's delivery would.
async fn trigger_stand_in(install: &Installation) -> AnyPool {
    sqlx::any::install_default_drivers();
    let url = format!("sqlite://{}", install.data_dir.join("iohr.db").display());
    let pool = AnyPool::connect(&url).await.expect("the store");
    for statement in [
        "CREATE TABLE forge_pushes (change_ref TEXT PRIMARY KEY, forge TEXT NOT NULL, commit_sha TEXT NOT NULL)",
        "CREATE TRIGGER forge_pushes_runs AFTER INSERT ON runs
             WHEN NEW.change_ref IN (SELECT change_ref FROM forge_pushes)
         BEGIN
             UPDATE runs SET
                 change_forge = (SELECT forge FROM forge_pushes WHERE change_ref = NEW.change_ref),
                 change_commit = (SELECT commit_sha FROM forge_pushes WHERE change_ref = NEW.change_ref)
             WHERE id = NEW.id;
         END",
    ] {
        sqlx::query(statement).execute(&pool).await.expect(statement);
    }
    pool
}

/// A push: the change's next run is for `commit` on `forge`.
async fn push(pool: &AnyPool, change: &str, forge: &str, commit: &str) {
    sqlx::query(
        "INSERT INTO forge_pushes (change_ref, forge, commit_sha) VALUES ($1, $2, $3)
         ON CONFLICT (change_ref) DO UPDATE SET forge = $2, commit_sha = $3",
    )
    .bind(change)
    .bind(forge)
    .bind(commit)
    .execute(pool)
    .await
    .expect("push");
}

fn checks(target: &str, environment: &str, change: &str) -> Value {
    json!({"kind": "checks", "environment": environment, "target": target, "change": change,
           "spec": {"checks": [{"path": "/"}]}})
}

async fn put_forge(api: &Api, forge: &str, body: &Value) -> (u16, Value) {
    api.call(
        hyper::Method::PUT,
        &format!("/v1/reliability/forges/{forge}"),
        Some((body.to_string().into(), "application/json")),
    )
    .await
}

fn sha(c: char) -> String {
    c.to_string().repeat(40)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_requests_get_one_comment_edited_in_place_and_a_commit_status() {
    let forge = FakeForge::start().await;
    let install = Installation::new(Backend::Sqlite).await;
    let prism = Prism::start(&forge.url(), &install.logs_dir().join("prism.log")).await;
    let controller = Controller::start_with(
        &install,
        200,
        None,
        &[
            "--forge-retry-schedule",
            "0s,300ms,300ms,300ms",
            "--public-url",
            "https://iohr.example",
        ],
    )
    .await;
    let pool = trigger_stand_in(&install).await;
    let runner = Api::new(&controller.api_url(), &install.full_token());
    let admin = Api::new(
        &controller.api_url(),
        &install.token(
            "default",
            &["reliability:read", "reliability:run", "reliability:admin"],
            Some("ada"),
        ),
    );

    // Credentials: an admin's, checked, never shown again.
    let github = json!({"token": GITHUB_TOKEN, "api_url": prism.url()});
    let (status, body) = put_forge(&runner, "github", &github).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("insufficient_scope"))
    );
    let (status, body) = put_forge(&admin, "bitbucket", &github).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_forge"))
    );
    let (status, body) = put_forge(&admin, "github", &json!({"token": "a b"})).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_token"))
    );
    let (status, body) = put_forge(
        &admin,
        "github",
        &json!({"token": "t", "api_url": "ftp://x"}),
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_api_url"))
    );
    let (status, body) = put_forge(
        &admin,
        "github",
        &json!({"token": "t", "api_url": "http://169.254.169.254/api/v3"}),
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (422, Some("target_not_allowed"))
    );
    let (status, body) = put_forge(&admin, "github", &github).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["api_url"], prism.url().as_str());
    let (status, body) = put_forge(
        &admin,
        "gitlab",
        &json!({"token": GITLAB_TOKEN, "api_url": forge.gitlab_url()}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (status, listed) = runner.get("/v1/reliability/forges").await;
    assert_eq!(status, 200);
    let forges: Vec<&str> = listed["forges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["forge"].as_str().unwrap())
        .collect();
    assert_eq!(forges, ["github", "gitlab"]);

    // Pull request #7 already has 120 comments of others: the listing pages through.
    for i in 0..120 {
        forge.seed_comment("octo/hello#7", &format!("a review comment {i}"));
    }

    // Pending while the run waits (no agent serves production yet).
    let target = Target::start().await;
    push(&pool, "octo/hello#7", "github", &sha('a')).await;
    let waiting = runner
        .create_run(&checks(&target.url(), "production", "octo/hello#7"))
        .await;
    let waiting = waiting["id"].as_str().unwrap().to_string();
    until("a pending status on the first commit", || {
        forge
            .statuses(&sha('a'))
            .iter()
            .any(|s| s.body["state"] == "pending")
    })
    .await;
    let ours = |forge: &FakeForge| -> Vec<String> {
        forge
            .comments("octo/hello#7")
            .into_iter()
            .filter(|c| c.body.contains("<!-- iohr-reliability:octo/hello#7 -->"))
            .map(|c| c.body)
            .collect()
    };
    until("the comment, written once", || ours(&forge).len() == 1).await;
    assert!(
        ours(&forge)[0].contains("**running**"),
        "{:?}",
        ours(&forge)
    );
    let status = &forge.statuses(&sha('a'))[0].body;
    assert_eq!(status["context"], "iohr/reliability");
    assert_eq!(
        status["target_url"],
        format!("https://iohr.example/console/runs/{waiting}")
    );

    // A run that ends without a measure: `error`, the same comment edited.
    let (code, _) = runner
        .post(
            &format!("/v1/reliability/runs/{waiting}/cancel"),
            &json!({}),
        )
        .await;
    assert_eq!(code, 200);
    until("an error status on the first commit", || {
        forge
            .statuses(&sha('a'))
            .iter()
            .any(|s| s.body["state"] == "error")
    })
    .await;
    until("the comment says the run ended", || {
        ours(&forge)
            .first()
            .is_some_and(|c| c.contains("**cancelled**"))
    })
    .await;

    // A new push, a finished run, no baseline yet: the same comment, a success that says
    // it compared nothing.
    let _agent = Agent::enrol(
        &install,
        &runner,
        "edge-1",
        &controller.link_url(),
        AgentOptions::default(),
    )
    .await;
    push(&pool, "octo/hello#7", "github", &sha('b')).await;
    let second = runner
        .create_run(&checks(&target.url(), "staging", "octo/hello#7"))
        .await;
    let second = second["id"].as_str().unwrap().to_string();
    runner.wait_ended(&second, LIMIT).await;
    until("a final status on the second commit", || {
        forge
            .statuses(&sha('b'))
            .iter()
            .any(|s| s.body["state"] == "success")
    })
    .await;
    let last = forge.statuses(&sha('b')).last().unwrap().body.clone();
    assert!(
        last["description"]
            .as_str()
            .unwrap()
            .starts_with("No baseline, not compared"),
        "{last}"
    );
    until("the comment names the second run", || {
        ours(&forge).first().is_some_and(|c| c.contains(&second))
    })
    .await;
    assert_eq!(ours(&forge).len(), 1, "still one comment");
    assert!(ours(&forge)[0].contains("**no baseline**"));

    // A forge error (500 once) is retried, then the report goes through.
    forge.fail_next(1);
    push(&pool, "octo/hello#7", "github", &sha('c')).await;
    let third = runner
        .create_run(&checks(&target.url(), "staging", "octo/hello#7"))
        .await;
    let third = third["id"].as_str().unwrap().to_string();
    runner.wait_ended(&third, LIMIT).await;
    until("a final status on the third commit", || {
        forge
            .statuses(&sha('c'))
            .iter()
            .any(|s| s.body["state"] == "success")
    })
    .await;
    until("the comment names the third run", || {
        ours(&forge).first().is_some_and(|c| c.contains(&third))
    })
    .await;
    assert_eq!(ours(&forge).len(), 1, "still one comment");
    // The attempt's log line is written after the forge has its answer: polled for.
    let log = iohr_tests::wait_for("the third run's reported line", LIMIT, || async {
        let (status, log) = runner.get("/v1/reliability/forges/reports?limit=500").await;
        assert_eq!(status, 200, "{log}");
        let lines = log["reports"].as_array().cloned().unwrap_or_default();
        lines
            .iter()
            .any(|l| l["outcome"] == "reported" && l["run_id"] == third.as_str())
            .then_some(log)
    })
    .await;
    let lines = log["reports"].as_array().unwrap();
    assert!(
        lines.iter().any(|l| l["outcome"] == "failed"
            && l["status_code"] == 500
            && l["detail"] == "http_status"),
        "{log}"
    );

    // A comment an earlier controller wrote on page 2 of #8 is found and edited, not
    // written again.
    for i in 0..130 {
        forge.seed_comment("octo/hello#8", &format!("someone else {i}"));
        if i == 110 {
            forge.seed_comment(
                "octo/hello#8",
                "<!-- iohr-reliability:octo/hello#8 -->\nan older report",
            );
        }
    }
    push(&pool, "octo/hello#8", "github", &sha('d')).await;
    let fourth = runner
        .create_run(&checks(&target.url(), "staging", "octo/hello#8"))
        .await;
    let fourth = fourth["id"].as_str().unwrap().to_string();
    runner.wait_ended(&fourth, LIMIT).await;
    until("the older comment edited", || {
        forge
            .comments("octo/hello#8")
            .iter()
            .any(|c| c.body.contains(&fourth))
    })
    .await;
    let marked: Vec<_> = forge
        .comments("octo/hello#8")
        .into_iter()
        .filter(|c| c.body.contains("iohr-reliability:octo/hello#8"))
        .collect();
    assert_eq!(marked.len(), 1, "{marked:?}");

    // Every GitHub request went through Prism with GitHub's headers; Prism refused none.
    let seen = forge.seen();
    let github_seen: Vec<_> = seen
        .iter()
        .filter(|s| s.path.starts_with("/repos/"))
        .collect();
    assert!(github_seen.len() >= 8, "{github_seen:?}");
    for request in &github_seen {
        assert_eq!(request.headers["accept"], "application/vnd.github+json");
        assert_eq!(request.headers["x-github-api-version"], "2022-11-28");
        assert_eq!(
            request.headers["authorization"],
            format!("Bearer {GITHUB_TOKEN}")
        );
        assert!(request.headers["user-agent"].starts_with("iohr-controller/"));
    }
    // #7 was listed once, pages 1 and 2 (120 comments), before its comment was written;
    // every later edit went to the kept id.
    let listings: Vec<&str> = github_seen
        .iter()
        .filter(|s| s.method == "GET" && s.path.starts_with("/repos/octo/hello/issues/7/comments"))
        .map(|s| s.path.as_str())
        .collect();
    assert_eq!(
        listings,
        [
            "/repos/octo/hello/issues/7/comments?per_page=100&page=1",
            "/repos/octo/hello/issues/7/comments?per_page=100&page=2"
        ]
    );
    assert!(
        github_seen.iter().filter(|s| s.method == "PATCH").count() >= 3,
        "later reports edit the comment"
    );
    assert!(
        !lines.iter().any(|l| l["status_code"] == 422),
        "Prism refused a request: {log}"
    );

    // GitLab: a merge request note edited in place and a commit status.
    push(&pool, "grp/sub/proj#3", "gitlab", &sha('e')).await;
    let gl1 = runner
        .create_run(&checks(&target.url(), "staging", "grp/sub/proj#3"))
        .await;
    runner.wait_ended(gl1["id"].as_str().unwrap(), LIMIT).await;
    until("a GitLab status", || {
        forge
            .statuses(&sha('e'))
            .iter()
            .any(|s| s.body["state"] == "success")
    })
    .await;
    push(&pool, "grp/sub/proj#3", "gitlab", &sha('f')).await;
    let gl2 = runner
        .create_run(&checks(&target.url(), "staging", "grp/sub/proj#3"))
        .await;
    let gl2 = gl2["id"].as_str().unwrap().to_string();
    runner.wait_ended(&gl2, LIMIT).await;
    until("the GitLab note edited", || {
        forge
            .comments("grp%2Fsub%2Fproj!3")
            .first()
            .is_some_and(|n| n.body.contains(&gl2))
    })
    .await;
    assert_eq!(forge.comments("grp%2Fsub%2Fproj!3").len(), 1, "one note");
    let status = forge.statuses(&sha('f')).last().unwrap().clone();
    assert_eq!(status.repo, "grp%2Fsub%2Fproj");
    assert_eq!(status.body["name"], "iohr/reliability");
    let gitlab_seen: Vec<_> = forge
        .seen()
        .into_iter()
        .filter(|s| s.path.starts_with("/api/v4/"))
        .collect();
    assert!(gitlab_seen.iter().any(|s| {
        s.method == "PUT"
            && s.path
                .starts_with("/api/v4/projects/grp%2Fsub%2Fproj/merge_requests/3/notes/")
    }));
    for request in &gitlab_seen {
        assert_eq!(request.headers["private-token"], GITLAB_TOKEN);
        assert!(!request.headers.contains_key("authorization"));
    }

    // The tokens are in no answer, audit line, log, or the store's bytes in clear.
    let audit_token = install.token("default", &["reliability:audit"], None);
    let (_, audit) = Api::new(&controller.api_url(), &audit_token)
        .get("/v1/reliability/audit")
        .await;
    assert!(
        audit.to_string().contains("forge.set"),
        "the audit names the change: {audit}"
    );
    let (_, listed) = runner.get("/v1/reliability/forges").await;
    let (_, log) = runner.get("/v1/reliability/forges/reports?limit=500").await;
    for token in [GITHUB_TOKEN, GITLAB_TOKEN] {
        for text in [audit.to_string(), listed.to_string(), log.to_string()] {
            assert!(!text.contains(token), "{text}");
        }
        let controller_log = std::fs::read_to_string(&controller.log).unwrap_or_default();
        assert!(!controller_log.contains(token), "the controller's log");
        for file in ["iohr.db", "iohr.db-wal"] {
            let bytes = std::fs::read(install.data_dir.join(file)).unwrap_or_default();
            assert!(
                !bytes.windows(token.len()).any(|w| w == token.as_bytes()),
                "{file} holds a token in clear"
            );
        }
    }

    // Deleting the credentials: no longer listed.
    let (status, _) = admin
        .call(hyper::Method::DELETE, "/v1/reliability/forges/gitlab", None)
        .await;
    assert_eq!(status, 204);
    let (status, body) = admin
        .call(hyper::Method::DELETE, "/v1/reliability/forges/gitlab", None)
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("not_found"))
    );
}
