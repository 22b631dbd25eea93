//! The frame of every page (head, navigation, sign-out) and the page of every refusal.

use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};

use super::session::Viewer;
use crate::error::ApiError;

/// The pages in the navigation: (data-nav name, address, label).
const NAV: &[(&str, &str, &str)] = &[
    ("runs", "/runs", "Runs"),
    ("compare", "/compare", "Compare"),
    ("scenarios", "/scenarios", "Scenarios"),
    ("findings", "/findings", "Findings"),
    ("schedules", "/schedules", "Schedules"),
    ("agents", "/agents", "Agents"),
];

/// What a page needs beyond its body.
#[derive(Default)]
pub struct Extras {
    /// Loads uPlot (the run page's plots).
    pub plots: bool,
}

/// A whole page: `name` is its `data-page` and the navigation entry it highlights.
pub fn page(
    viewer: Option<&Viewer>,
    name: &str,
    title: &str,
    extras: Extras,
    body: Markup,
) -> Html<String> {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · iohr reliability" }
                link rel="stylesheet" href="/assets/console.css";
                @if extras.plots {
                    link rel="stylesheet" href="/assets/uPlot.min.css";
                    script src="/assets/uPlot.iife.min.js" defer {}
                }
                script src="/assets/console.js" defer {}
            }
            body data-page=(name) {
                header {
                    a.brand href="/runs" { "iohr reliability" }
                    @if let Some(viewer) = viewer {
                        nav {
                            @for (nav, href, label) in NAV {
                                a data-nav=(nav) href=(href) class=[(*nav == name).then_some("current")] { (label) }
                            }
                        }
                        span.who { (viewer.person()) " · " (viewer.account_name()) }
                        form #sign-out method="post" action="/sign-out" {
                            input type="hidden" name="csrf" value=(viewer.csrf());
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main {
                    h1 { (title) }
                    (body)
                }
            }
        }
    };
    Html(markup.into_string())
}

/// An API error shown to a person: its status, its code for machines (`data-code`) and
/// its message.
#[derive(Debug)]
pub struct PageError(pub ApiError);

impl From<ApiError> for PageError {
    fn from(error: ApiError) -> PageError {
        PageError(error)
    }
}

impl From<crate::store::StoreError> for PageError {
    fn from(error: crate::store::StoreError) -> PageError {
        PageError(error.into())
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let PageError(error) = self;
        refusal(error.status, error.code, &error.message)
    }
}

/// The page of a refusal. Signing in again is always offered: most refusals here are a
/// session that ended or a person who may not see the console yet.
pub fn refusal(status: StatusCode, code: &str, message: &str) -> Response {
    let body = html! {
        p #refusal data-code=(code) { (message) }
        p { a href="/runs" { "Back to the runs" } " · " a href="/sign-in" { "Sign in" } }
    };
    let title = status.canonical_reason().unwrap_or("Refused");
    (
        status,
        page(None, "refusal", title, Extras::default(), body),
    )
        .into_response()
}

pub type PageResult = Result<Response, PageError>;
