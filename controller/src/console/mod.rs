//! The console: pages for people at `/` on the API address.
//!
//! Server-rendered HTML (maud) with a little JavaScript for what moves: the live plots and
//! the status of live runs. Server-rendered because every page is a view of an API answer
//! (the handlers are called in process, so the console has the API's semantics and scopes
//! by construction) and because it needs no build step beyond cargo. The assets are
//! embedded in the binary ([`assets`]); nothing is fetched at run time.
//!
//! One file per page: [`runs`] (the list), [`run_page`] (one run), [`live`] (the plots'
//! feed), [`compare`], [`scenarios`], [`findings`], [`schedules`], [`agents`];
//! [`start`] starts a run (again); [`session`] signs people in and out and guards every
//! page, [`layout`] is the frame of every page and of every refusal. A finished run's
//! plots are SVG drawn here ([`charts`] reads what they show, [`op_plots`] each
//! operation's seconds, [`plot`] draws it).

mod agents;
pub mod assets;
mod charts;
mod compare;
mod findings;
mod layout;
mod live;
mod op_plots;
mod operations;
mod plot;
mod run_page;
mod runs;
mod scenarios;
mod schedules;
mod session;
mod start;
pub mod traces;
mod value;

use axum::Router;
use axum::http::HeaderValue;
use axum::http::header::{CACHE_CONTROL, CONTENT_SECURITY_POLICY, REFERRER_POLICY};
use axum::routing::{get, post};

use crate::Shared;

/// What the console's handlers share: the controller, and whether cookies must be
/// `Secure` (the API is served over TLS).
#[derive(Clone)]
pub struct ConsoleState {
    pub shared: Shared,
    pub secure: bool,
    /// The operator's tracing UI (`--trace-url-template`): trace ids become its links.
    pub trace_url: Option<traces::TraceUrl>,
}

/// The API's router with the console's pages beside it.
pub fn mount(
    api: Router,
    shared: Shared,
    secure: bool,
    trace_url: Option<traces::TraceUrl>,
) -> Router {
    let console = Router::new()
        .route("/", get(session::home))
        .route(
            "/sign-in",
            get(session::sign_in_page).post(session::sign_in),
        )
        .route("/sign-out", post(session::sign_out))
        .route("/runs", get(runs::list_page))
        .route("/runs/start", post(start::start))
        .route("/runs/{id}", get(run_page::show))
        .route("/runs/{id}/live", get(live::feed))
        .route("/compare", get(compare::show))
        .route("/scenarios", get(scenarios::list_page))
        .route("/scenarios/{id}", get(scenarios::show))
        .route("/findings", get(findings::list_page))
        .route("/findings/{id}/close", post(findings::close))
        .route("/schedules", get(schedules::list_page))
        .route("/schedules/{id}/pause", post(schedules::pause))
        .route("/schedules/{id}/resume", post(schedules::resume))
        .route("/agents", get(agents::list_page))
        .route("/assets/{file}", get(assets::serve))
        // Browsers ask for it on every first visit; there is none.
        .route(
            "/favicon.ico",
            get(|| async { axum::http::StatusCode::NO_CONTENT }),
        )
        .layer(axum::middleware::map_response(headers))
        // A page counts in its account's share of the requests in flight, as the API's.
        .layer(axum::middleware::from_fn(crate::in_flight::hold))
        .with_state(ConsoleState {
            shared,
            secure,
            trace_url,
        });
    api.merge(console)
}

/// Every console answer: scripts and styles from this origin only, never framed, never
/// cached (pages show live state and carry the CSRF token), no referrer sent away.
async fn headers(mut response: axum::response::Response) -> axum::response::Response {
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
             frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
        ),
    );
    headers.insert(REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    if !headers.contains_key(CACHE_CONTROL) {
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

#[cfg(test)]
mod tests;
