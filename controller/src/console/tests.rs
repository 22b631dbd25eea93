//! The console as a browser meets it, through the whole router on a real SQLite store:
//! sign-in with its double-submit check, the session cookie's flags, who may sign in
//! (people, admins until the console is opened), CSRF on every form, refusals as pages.
//! The pages in a real browser are tests/tests/console.rs.

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use tower::ServiceExt;

use crate::Shared;
use crate::store::Scope;

/// A run's record as the layers give it: `kind` and `status`, the rest fixed; a test
/// changes what it is about.
pub(super) fn run_record(
    kind: iohr_domain::RunKind,
    status: iohr_domain::RunStatus,
) -> iohr_domain::RunRecord {
    serde_json::from_value(serde_json::json!({
        "id": "r1", "kind": kind, "scenario": {"id": "s1", "version": "sha256:ab"},
        "environment": "staging", "target": "http://127.0.0.1:9", "executor": "any",
        "agent": null, "started_by": {"type": "token", "id": "t1"},
        "status": status, "reason": null, "result": null, "findings": [],
        "units": {"reserved": 0, "spent": 0}, "created_at": "2026-10-07T10:00:00Z",
        "started_at": null, "ended_at": null
    }))
    .expect("record")
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

impl Answer {
    /// `name=value` of the cookie this answer sets, and the whole Set-Cookie line.
    fn cookie(&self, name: &str) -> Option<(String, String)> {
        self.headers
            .get_all(header::SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find(|line| line.starts_with(&format!("{name}=")))
            .map(|line| {
                let pair = line.split(';').next().unwrap_or("").to_string();
                (pair, line.to_string())
            })
    }

    fn location(&self) -> &str {
        self.headers
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// The value of the first `name="csrf" value="..."` input.
    fn csrf(&self) -> String {
        let at = self
            .body
            .find("name=\"csrf\" value=\"")
            .expect("a csrf field")
            + 19;
        self.body[at..at + self.body[at..].find('"').expect("quote")].to_string()
    }

    fn code(&self) -> String {
        let at = self.body.find("data-code=\"").expect("a refusal") + 11;
        self.body[at..at + self.body[at..].find('"').expect("quote")].to_string()
    }
}

async fn send(
    router: &Router,
    method: &str,
    uri: &str,
    cookies: &[&str],
    form: &[(&str, &str)],
) -> Answer {
    let mut request = Request::builder().method(method).uri(uri);
    if !cookies.is_empty() {
        request = request.header(header::COOKIE, cookies.join("; "));
    }
    let body = if method == "POST" {
        request = request.header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
        let mut encoded = form_urlencoded::Serializer::new(String::new());
        for (k, v) in form {
            encoded.append_pair(k, v);
        }
        Body::from(encoded.finish())
    } else {
        Body::empty()
    };
    let response = router
        .clone()
        .oneshot(request.body(body).expect("request"))
        .await
        .expect("answer");
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), 4 << 20)
        .await
        .expect("body");
    Answer {
        status,
        headers,
        body: String::from_utf8_lossy(&bytes).to_string(),
    }
}

async fn console(secure: bool) -> (Router, Shared, String) {
    let (shared, run_id) = crate::runs::frames::tests::shared_with_a_live_run().await;
    // The console's pages alone: they call the layers, not the API's routes.
    let router = super::mount(Router::new(), shared.clone(), secure, None);
    (router, shared, run_id)
}

async fn token(shared: &Shared, scopes: &[Scope], person: Option<&str>) -> String {
    let account = shared
        .store
        .account_by_name("acme")
        .await
        .expect("read")
        .expect("seeded");
    shared
        .store
        .create_token(&account, scopes, person)
        .await
        .expect("token")
        .1
}

/// Signs in with `secret` as a browser does: the form's page first, then the POST with
/// the form's cookie.
async fn sign_in(router: &Router, secret: &str) -> Answer {
    let form = send(router, "GET", "/sign-in", &[], &[]).await;
    assert_eq!(form.status, StatusCode::OK);
    let (check, _) = form.cookie("iohr_sign_in").expect("the form's cookie");
    let csrf = form.csrf();
    send(
        router,
        "POST",
        "/sign-in",
        &[&check],
        &[("token", secret), ("csrf", &csrf)],
    )
    .await
}

fn session(answer: &Answer) -> String {
    assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
    assert_eq!(answer.location(), "/runs");
    answer.cookie("iohr_session").expect("a session").0
}

#[tokio::test]
async fn an_admin_signs_in_sees_the_pages_and_signs_out() {
    let (router, shared, run_id) = console(false).await;
    let admin = token(
        &shared,
        &[Scope::Read, Scope::Run, Scope::Admin],
        Some("ada"),
    )
    .await;

    let home = send(&router, "GET", "/", &[], &[]).await;
    assert_eq!(
        (home.status, home.location()),
        (StatusCode::SEE_OTHER, "/sign-in")
    );
    let runs = send(&router, "GET", "/runs", &[], &[]).await;
    assert_eq!(
        (runs.status, runs.location()),
        (StatusCode::SEE_OTHER, "/sign-in")
    );

    let answer = sign_in(&router, &admin).await;
    let cookie = session(&answer);
    let (_, line) = answer.cookie("iohr_session").expect("session");
    assert!(line.contains("HttpOnly"), "{line}");
    assert!(line.contains("SameSite=Strict"), "{line}");
    assert!(!line.contains("Secure"), "plain HTTP: {line}");
    assert!(!line.contains(&admin), "the cookie is not the token");

    let runs = send(&router, "GET", "/runs", &[&cookie], &[]).await;
    assert_eq!(runs.status, StatusCode::OK);
    assert!(runs.body.contains("data-page=\"runs\""));
    assert!(
        runs.body.contains(&format!("data-run-id=\"{run_id}\"")),
        "the seeded run is listed"
    );
    assert!(
        runs.body.contains("data-live"),
        "a queued run follows its stream"
    );
    let csp = runs
        .headers
        .get(header::CONTENT_SECURITY_POLICY)
        .expect("csp");
    assert!(csp.to_str().expect("text").contains("script-src 'self'"));
    assert_eq!(
        runs.headers.get(header::CACHE_CONTROL).expect("cache"),
        "no-store"
    );

    let filtered = send(&router, "GET", "/runs?status=passed", &[&cookie], &[]).await;
    assert!(
        !filtered.body.contains(&format!("data-run-id=\"{run_id}\"")),
        "the queued run is filtered out"
    );
    let by_scenario = send(&router, "GET", "/runs?scenario=home", &[&cookie], &[]).await;
    assert!(
        by_scenario
            .body
            .contains(&format!("data-run-id=\"{run_id}\""))
    );
    let other = send(&router, "GET", "/runs?scenario=other", &[&cookie], &[]).await;
    assert!(!other.body.contains(&format!("data-run-id=\"{run_id}\"")));
    let bad = send(&router, "GET", "/runs?status=sleeping", &[&cookie], &[]).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(bad.code(), "invalid_query");

    let run = send(&router, "GET", &format!("/runs/{run_id}"), &[&cookie], &[]).await;
    assert_eq!(run.status, StatusCode::OK);
    assert!(run.body.contains("id=\"rerun\""));
    assert!(
        run.body
            .contains("iohr reliability run --kind checks --environment staging")
    );
    assert!(run.body.contains("--change core#212") || run.body.contains("--change 'core#212'"));
    let missing = send(&router, "GET", "/runs/nope", &[&cookie], &[]).await;
    assert_eq!(
        (missing.status, missing.code().as_str()),
        (StatusCode::NOT_FOUND, "not_found")
    );

    for page in [
        "/compare",
        "/scenarios",
        "/scenarios/home",
        "/findings",
        "/schedules",
        "/agents",
    ] {
        let answer = send(&router, "GET", page, &[&cookie], &[]).await;
        assert_eq!(answer.status, StatusCode::OK, "{page}: {}", answer.body);
        assert!(answer.body.contains("form id=\"sign-out\""), "{page}");
    }
    let refused = send(
        &router,
        "GET",
        &format!("/compare?before={run_id}&after=nope"),
        &[&cookie],
        &[],
    )
    .await;
    assert_eq!(refused.status, StatusCode::NOT_FOUND, "{}", refused.body);

    let script = send(&router, "GET", "/assets/console.js", &[], &[]).await;
    assert_eq!(script.status, StatusCode::OK);
    assert!(
        script.headers[header::CONTENT_TYPE]
            .to_str()
            .expect("type")
            .starts_with("text/javascript")
    );
    assert_eq!(
        send(&router, "GET", "/assets/nope.js", &[], &[])
            .await
            .status,
        StatusCode::NOT_FOUND
    );

    // Sign-out needs the session's CSRF token, then ends the session for good.
    let page = send(&router, "GET", "/runs", &[&cookie], &[]).await;
    let forged = send(
        &router,
        "POST",
        "/sign-out",
        &[&cookie],
        &[("csrf", "forged")],
    )
    .await;
    assert_eq!(
        (forged.status, forged.code().as_str()),
        (StatusCode::FORBIDDEN, "csrf_mismatch")
    );
    let out = send(
        &router,
        "POST",
        "/sign-out",
        &[&cookie],
        &[("csrf", &page.csrf())],
    )
    .await;
    assert_eq!(
        (out.status, out.location()),
        (StatusCode::SEE_OTHER, "/sign-in")
    );
    let after = send(&router, "GET", "/runs", &[&cookie], &[]).await;
    assert_eq!(
        (after.status, after.location()),
        (StatusCode::SEE_OTHER, "/sign-in")
    );
}

#[tokio::test]
async fn api_tokens_unknown_tokens_and_forged_forms_cannot_sign_in() {
    let (router, shared, _) = console(true).await;
    let api = token(&shared, &[Scope::Read, Scope::Run], None).await;
    let refused = sign_in(&router, &api).await;
    assert_eq!(
        (refused.status, refused.code().as_str()),
        (StatusCode::UNAUTHORIZED, "person_required")
    );
    assert!(refused.cookie("iohr_session").is_none());

    let unknown = sign_in(&router, "iohr_000").await;
    assert_eq!(
        (unknown.status, unknown.code().as_str()),
        (StatusCode::UNAUTHORIZED, "unauthorized")
    );
    let long = "x".repeat(10_000);
    assert_eq!(
        sign_in(&router, &long).await.status,
        StatusCode::UNAUTHORIZED
    );

    // A form posted from elsewhere has neither the form's cookie nor its value.
    let person = token(&shared, &[Scope::Read, Scope::Admin], Some("ada")).await;
    let forged = send(
        &router,
        "POST",
        "/sign-in",
        &[],
        &[("token", &person), ("csrf", "x")],
    )
    .await;
    assert_eq!(
        (forged.status, forged.code().as_str()),
        (StatusCode::FORBIDDEN, "csrf_mismatch")
    );
    let malformed = send(&router, "POST", "/sign-in", &[], &[("nothing", "")]).await;
    assert_eq!(
        (malformed.status, malformed.code().as_str()),
        (StatusCode::BAD_REQUEST, "invalid_form")
    );

    // Over TLS the session cookie is Secure.
    let answer = sign_in(&router, &person).await;
    session(&answer);
    let (_, line) = answer.cookie("iohr_session").expect("session");
    assert!(line.contains("Secure"), "{line}");
}

#[tokio::test]
async fn the_console_is_admin_only_until_the_owner_opens_it() {
    let (router, shared, _) = console(false).await;
    let person = token(&shared, &[Scope::Read], Some("bo")).await;
    let admin = token(&shared, &[Scope::Read, Scope::Admin], Some("ada")).await;
    let refused = sign_in(&router, &person).await;
    assert_eq!(
        (refused.status, refused.code().as_str()),
        (StatusCode::FORBIDDEN, "console_admin_only")
    );

    let account = shared
        .store
        .account_by_name("acme")
        .await
        .expect("read")
        .expect("acme");
    shared
        .store
        .set_console_open(&account.id, true)
        .await
        .expect("open");
    let cookie = session(&sign_in(&router, &person).await);
    assert_eq!(
        send(&router, "GET", "/runs", &[&cookie], &[]).await.status,
        StatusCode::OK
    );

    // Closing it again refuses the person's next page at once; the admin keeps theirs.
    let admin_cookie = session(&sign_in(&router, &admin).await);
    shared
        .store
        .set_console_open(&account.id, false)
        .await
        .expect("close");
    let page = send(&router, "GET", "/runs", &[&cookie], &[]).await;
    assert_eq!(
        (page.status, page.code().as_str()),
        (StatusCode::FORBIDDEN, "console_admin_only")
    );
    assert_eq!(
        send(&router, "GET", "/runs", &[&admin_cookie], &[])
            .await
            .status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn forms_need_the_csrf_token_and_the_scope() {
    let (router, shared, _) = console(false).await;
    // A reader (no reliability:run) who is an admin: sees pages, cannot close findings.
    let reader = token(&shared, &[Scope::Read, Scope::Admin], Some("ada")).await;
    let cookie = session(&sign_in(&router, &reader).await);
    let page = send(&router, "GET", "/findings", &[&cookie], &[]).await;
    let csrf = page.csrf();

    let forged = send(&router, "POST", "/findings/f1/close", &[&cookie], &[]).await;
    assert_eq!(
        (forged.status, forged.code().as_str()),
        (StatusCode::FORBIDDEN, "csrf_mismatch")
    );
    let scope = send(
        &router,
        "POST",
        "/findings/f1/close",
        &[&cookie],
        &[("csrf", &csrf)],
    )
    .await;
    assert_eq!(
        (scope.status, scope.code().as_str()),
        (StatusCode::FORBIDDEN, "insufficient_scope")
    );
    let pause = send(
        &router,
        "POST",
        "/schedules/s1/pause",
        &[&cookie],
        &[("csrf", &csrf)],
    )
    .await;
    assert_eq!(pause.code(), "insufficient_scope");

    let runner = token(
        &shared,
        &[Scope::Read, Scope::Run, Scope::Admin],
        Some("bo"),
    )
    .await;
    let cookie = session(&sign_in(&router, &runner).await);
    let csrf = send(&router, "GET", "/findings", &[&cookie], &[])
        .await
        .csrf();
    let missing = send(
        &router,
        "POST",
        "/findings/f1/close",
        &[&cookie],
        &[("csrf", &csrf)],
    )
    .await;
    assert_eq!(
        (missing.status, missing.code().as_str()),
        (StatusCode::NOT_FOUND, "not_found")
    );
    // One session's token does not pass for another's.
    let other = send(
        &router,
        "POST",
        "/findings/f1/close",
        &[&cookie],
        &[("csrf", &page.csrf())],
    )
    .await;
    assert_eq!(other.code(), "csrf_mismatch");
}

#[tokio::test]
async fn a_run_whose_generator_saturated_says_so_before_its_figures() {
    let (router, shared, run_id) = console(false).await;
    let admin = token(&shared, &[Scope::Read, Scope::Admin], Some("ada")).await;
    let cookie = session(&sign_in(&router, &admin).await);
    let result = serde_json::json!({
        "passed": true,
        "generator_saturated": {"seconds": [2, 3], "count": 2, "basis": "measure",
            "reasons": [{"cause": "cpu", "seconds": 2, "worst": 1.0, "bound": 0.8,
                         "text": "agent CPU at 100% of 0.05 CPUs in 2 s"}]}
    });
    let template = shared
        .store
        .run(&run_id)
        .await
        .expect("read")
        .expect("seeded");
    let (run, _) = crate::store::tests::run_to_end(
        &shared.store,
        &template,
        iohr_domain::RunStatus::Passed,
        result,
    )
    .await;
    let run_id = run.id;
    let page = send(&router, "GET", &format!("/runs/{run_id}"), &[&cookie], &[]).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body.contains("id=\"saturated\" data-seconds=\"2\""),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains("generator saturated for 2 s (agent CPU at 100%")
    );
}

#[tokio::test]
async fn a_person_with_the_run_scope_starts_a_run_again_through_a_form() {
    let (router, shared, run_id) = console(false).await;
    let reader = token(&shared, &[Scope::Read, Scope::Admin], Some("ada")).await;
    let runner = token(
        &shared,
        &[Scope::Read, Scope::Run, Scope::Admin],
        Some("bo"),
    )
    .await;
    let run = stored_record(&shared, &run_id).await;
    let fields = |csrf: &str| {
        vec![
            ("csrf".to_string(), csrf.to_string()),
            ("kind".to_string(), run.kind.as_str().to_string()),
            ("scenario".to_string(), run.scenario.id.clone()),
            ("version".to_string(), run.scenario.version.clone()),
            ("environment".to_string(), run.environment.clone()),
            ("target".to_string(), run.target.clone()),
            ("executor".to_string(), "any".to_string()),
            ("change".to_string(), "core#213".to_string()),
        ]
    };
    let post = async |cookie: &str, form: Vec<(String, String)>| {
        let form: Vec<(&str, &str)> = form.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        send(&router, "POST", "/runs/start", &[cookie], &form).await
    };

    // The run page offers the form with the run's own request.
    let cookie = session(&sign_in(&router, &runner).await);
    let page = send(&router, "GET", &format!("/runs/{run_id}"), &[&cookie], &[]).await;
    assert!(
        page.body
            .contains("id=\"again\" method=\"post\" action=\"/runs/start\""),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains(&format!("value=\"{}\"", run.scenario.version))
    );
    let csrf = page.csrf();

    // Without this session's token: refused, nothing started.
    let before = count_runs(&shared).await;
    let forged = post(&cookie, fields("forged")).await;
    assert_eq!(
        (forged.status, forged.code().as_str()),
        (StatusCode::FORBIDDEN, "csrf_mismatch")
    );

    // A reader: refused for the scope.
    let reader_cookie = session(&sign_in(&router, &reader).await);
    let reader_csrf = send(&router, "GET", "/runs", &[&reader_cookie], &[])
        .await
        .csrf();
    let refused = post(&reader_cookie, fields(&reader_csrf)).await;
    assert_eq!(
        (refused.status, refused.code().as_str()),
        (StatusCode::FORBIDDEN, "insufficient_scope")
    );

    // The layer's own refusals, with their codes.
    let mut unknown = fields(&csrf);
    unknown[4].1 = "nowhere".into();
    let answer = post(&cookie, unknown).await;
    assert_eq!(
        (answer.status, answer.code().as_str()),
        (StatusCode::BAD_REQUEST, "unknown_environment")
    );
    let mut no_version = fields(&csrf);
    no_version[3].1 = String::new();
    assert_eq!(post(&cookie, no_version).await.code(), "invalid_form");
    let after = count_runs(&shared).await;
    assert_eq!(before, after, "nothing was started by a refused form");

    // With it: a new run of the same scenario version, started by the person, and its page.
    let started = post(&cookie, fields(&csrf)).await;
    assert_eq!(started.status, StatusCode::SEE_OTHER, "{}", started.body);
    let new_id = started
        .location()
        .strip_prefix("/runs/")
        .expect("the new run's page")
        .to_string();
    assert_ne!(new_id, run_id);
    let new = stored_record(&shared, &new_id).await;
    assert_eq!(
        (new.kind, &new.scenario, &new.target),
        (run.kind, &run.scenario, &run.target)
    );
    assert_eq!(
        (new.started_by.kind.as_str(), new.started_by.id.as_str()),
        ("person", "bo")
    );
    assert_eq!(new.started_by.change.as_deref(), Some("core#213"));

    // The scenario's page offers the same start and draws its trend.
    let scenario = send(
        &router,
        "GET",
        &format!("/scenarios/{}", run.scenario.id),
        &[&cookie],
        &[],
    )
    .await;
    assert!(
        scenario.body.contains("id=\"start\" method=\"post\""),
        "{}",
        scenario.body
    );
    assert!(
        scenario.body.contains("data-plot=\"trend-plot\"")
            || scenario.body.contains("id=\"trend-plot\"")
    );
}

async fn stored_record(shared: &Shared, id: &str) -> iohr_domain::RunRecord {
    let run = shared.store.run(id).await.expect("read").expect("stored");
    run.to_record()
}

async fn count_runs(shared: &Shared) -> usize {
    let account = shared
        .store
        .account_by_name("acme")
        .await
        .expect("read")
        .expect("seeded");
    let filter = crate::store::RunFilter {
        limit: 100,
        ..Default::default()
    };
    shared
        .store
        .list_runs(&account.id, &filter)
        .await
        .expect("list")
        .0
        .len()
}

/// A second's slowest request, named by its frame's exemplars, is a point on the seconds
/// plot at its latency: a link to the operator's tracing UI with the template, its trace
/// id as the point's text without one.
#[test]
fn a_slow_second_links_to_its_trace_in_the_tracing_ui() {
    use super::charts::{align, seconds_plot};
    use iohr_domain::load::SecondSummary;
    let id = iohr_domain::load::trace_id(0xba78_16bf_8f01_cfea, 0x2a);
    let frame = |second: u64, slow: bool| {
        let mut data = serde_json::json!({"second": second, "phase": "measure", "sent": 10});
        if slow {
            data["exemplars"] = serde_json::json!({"slowest": [
                {"trace_id": id, "latency_us": 812_345, "operation": "GET /"},
                {"trace_id": "not a trace id", "latency_us": 999_999_999}]});
        }
        SecondSummary::of(&data)
    };
    let seconds = align(&[frame(1, false), frame(2, true)]);
    let url: super::traces::TraceUrl = "https://grafana.example/explore?traceId={trace_id}"
        .parse()
        .expect("template");
    let linked = seconds_plot(
        "seconds-plot".into(),
        &[("run", &seconds)],
        vec![],
        Some(&url),
    )
    .render()
    .into_string();
    assert!(
        linked.contains(&format!(
            "<a href=\"https://grafana.example/explore?traceId={id}\" target=\"_blank\" rel=\"noopener noreferrer\" data-trace-link=\"{id}\">"
        )),
        "{linked}"
    );
    assert!(linked.contains(&format!("second 2: slowest request 812.3 ms, trace {id}")));
    assert_eq!(
        linked.matches("data-trace=").count(),
        1,
        "one second has exemplars"
    );
    let plain = seconds_plot("seconds-plot".into(), &[("run", &seconds)], vec![], None)
        .render()
        .into_string();
    assert!(!plain.contains("<a "), "{plain}");
    assert!(
        plain.contains(&format!("data-trace=\"{id}\"")) && plain.contains(&format!("trace {id}"))
    );
}
