//! Signing in and out, and the guard of every page.
//!
//! A person signs in with their own token (`token create --person`); an API token cannot.
//! The session is a random cookie (HttpOnly, SameSite=Strict, Secure over TLS) whose hash
//! the store keeps. Every form carries a CSRF token derived from the session's cookie, so
//! nothing about it is stored and a page from another origin cannot know it; the sign-in
//! form, before any session exists, is guarded by a cookie it must repeat (double submit).
//!
//! Until the account's owner opens the console (`account open-console`), only its admins
//! (people whose token holds `reliability:admin`) get past the guard; the flag is read on
//! every request, so closing it again takes effect at once.

use axum::Form;
use axum::extract::rejection::FormRejection;
use axum::extract::{FromRequestParts, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Redirect, Response};
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};
use maud::html;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::ConsoleState;
use super::layout::{Extras, PageError, PageResult, page};
use crate::auth::{Caller, Rule};
use crate::error::ApiError;
use crate::store::{Scope, TokenInfo};

pub const SESSION_COOKIE: &str = "iohr_session";
/// The sign-in form's own cookie (double submit), before a session exists.
const SIGN_IN_COOKIE: &str = "iohr_sign_in";
/// A token secret is far shorter; longer input is refused before it is hashed.
const MAX_TOKEN_CHARS: usize = 200;

/// A signed-in person who may see the console.
#[derive(Debug, Clone)]
pub struct Viewer {
    token: TokenInfo,
    csrf: String,
}

impl Viewer {
    /// The viewer as an API caller held to the route's rule: a page shows what the API
    /// would answer this person's token.
    pub fn caller<S: Rule>(&self) -> Result<Caller<S>, ApiError> {
        Caller::checked(self.token.clone())
    }

    pub fn csrf(&self) -> &str {
        &self.csrf
    }

    pub fn person(&self) -> &str {
        self.token.person.as_deref().unwrap_or("")
    }

    pub fn account_name(&self) -> &str {
        &self.token.account.name
    }

    /// Refuses a form whose CSRF token is not this session's.
    pub fn check_csrf(&self, given: &str) -> Result<(), PageError> {
        if same(given.as_bytes(), self.csrf.as_bytes()) {
            Ok(())
        } else {
            Err(csrf_mismatch())
        }
    }
}

fn csrf_mismatch() -> PageError {
    PageError(ApiError::new(
        StatusCode::FORBIDDEN,
        "csrf_mismatch",
        "this form is not from this session's page; reload the page and try again",
    ))
}

/// The CSRF token of a session: a hash of its cookie under a label of its own.
fn csrf_of(cookie: &str) -> String {
    hex::encode(Sha256::digest(
        format!("iohr console csrf\0{cookie}").as_bytes(),
    ))
}

/// Equal without an early exit, so the time taken says nothing of where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// Whether this person may use the console now.
fn admitted(token: &TokenInfo, console_open: bool) -> Result<(), ApiError> {
    if console_open || token.has(Scope::Admin) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "console_admin_only",
            format!(
                "the console of {} is open to its admins only until its owner opens it \
                 (iohr-controller account open-console {})",
                token.account.name, token.account.name
            ),
        ))
    }
}

impl FromRequestParts<ConsoleState> for Viewer {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &ConsoleState,
    ) -> Result<Self, Self::Rejection> {
        let jar = CookieJar::from_headers(&parts.headers);
        let Some(cookie) = jar.get(SESSION_COOKIE).map(|c| c.value().to_string()) else {
            return Err(Redirect::to("/sign-in").into_response());
        };
        let session = state
            .shared
            .store
            .console_session(&cookie)
            .await
            .map_err(|e| PageError::from(e).into_response())?;
        let Some(session) = session else {
            // Ended, expired or revoked: sign in again.
            return Err(Redirect::to("/sign-in").into_response());
        };
        admitted(&session.token, session.console_open).map_err(|e| PageError(e).into_response())?;
        if let Some(slot) = parts.extensions.get::<crate::in_flight::Slot>() {
            slot.take(&state.shared.requests, &session.token.account.id)
                .map_err(|full| PageError(crate::in_flight::refusal(full)).into_response())?;
        }
        Ok(Viewer {
            token: session.token,
            csrf: csrf_of(&cookie),
        })
    }
}

fn cookie(name: &'static str, value: String, secure: bool) -> Cookie<'static> {
    Cookie::build((name, value))
        .path("/")
        .http_only(true)
        .secure(secure)
        .same_site(SameSite::Strict)
        .build()
}

/// `/`: the runs for a signed-in person, the sign-in page for anyone else.
pub async fn home(viewer: Result<Viewer, Response>) -> Response {
    match viewer {
        Ok(_) => Redirect::to("/runs").into_response(),
        Err(refused) => refused,
    }
}

pub async fn sign_in_page(State(state): State<ConsoleState>, jar: CookieJar) -> Response {
    sign_in_form(&state, jar, StatusCode::OK, None)
}

/// The form, with a fresh double-submit value; `refused` shows why the last try failed.
fn sign_in_form(
    state: &ConsoleState,
    jar: CookieJar,
    status: StatusCode,
    refused: Option<&ApiError>,
) -> Response {
    let mut random = [0u8; 16];
    rand::fill(&mut random);
    let check = hex::encode(random);
    let body = html! {
        @if let Some(error) = refused {
            p #refusal data-code=(error.code) { (error.message) }
        }
        form #sign-in method="post" action="/sign-in" {
            input type="hidden" name="csrf" value=(check);
            label {
                "Your personal token (iohr-controller token create --person ...)"
                input type="password" name="token" autocomplete="current-password" required;
            }
            button type="submit" { "Sign in" }
        }
        p.hint { "API tokens for automation cannot sign in." }
    };
    let jar = jar.add(cookie(SIGN_IN_COOKIE, check, state.secure));
    (
        status,
        jar,
        page(None, "sign-in", "Sign in", Extras::default(), body),
    )
        .into_response()
}

#[derive(Debug, Deserialize)]
pub struct SignIn {
    token: String,
    csrf: String,
}

pub async fn sign_in(
    State(state): State<ConsoleState>,
    jar: CookieJar,
    form: Result<Form<SignIn>, FormRejection>,
) -> Response {
    let refuse = |jar: CookieJar, error: ApiError| {
        let status = error.status;
        sign_in_form(&state, jar, status, Some(&error))
    };
    let Ok(Form(form)) = form else {
        return refuse(
            jar,
            ApiError::bad_request("invalid_form", "send the form's token and csrf fields"),
        );
    };
    let expected = jar.get(SIGN_IN_COOKIE).map(|c| c.value().to_string());
    if !expected.is_some_and(|e| same(e.as_bytes(), form.csrf.as_bytes())) {
        return refuse(jar, csrf_mismatch().0);
    }
    let secret = form.token.trim();
    if secret.is_empty() || secret.chars().count() > MAX_TOKEN_CHARS {
        return refuse(jar, unknown_token());
    }
    let token = match state.shared.store.token_by_secret(secret).await {
        Ok(Some(token)) => token,
        Ok(None) => return refuse(jar, unknown_token()),
        Err(error) => return PageError::from(error).into_response(),
    };
    if token.person.is_none() {
        return refuse(
            jar,
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                "person_required",
                "this is an API token; sign in with a person's own token",
            ),
        );
    }
    let open = match state.shared.store.console_open(&token.account.id).await {
        Ok(open) => open,
        Err(error) => return PageError::from(error).into_response(),
    };
    if let Err(error) = admitted(&token, open) {
        return refuse(jar, error);
    }
    let session = match state.shared.store.create_console_session(&token).await {
        Ok(session) => session,
        Err(error) => return PageError::from(error).into_response(),
    };
    tracing::info!(account = %token.account.name, token = %token.id, "console sign-in");
    let jar = jar
        .remove(Cookie::build(SIGN_IN_COOKIE).path("/"))
        .add(cookie(SESSION_COOKIE, session, state.secure));
    (jar, Redirect::to("/runs")).into_response()
}

fn unknown_token() -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "the token is unknown or revoked",
    )
}

#[derive(Debug, Deserialize)]
pub struct CsrfOnly {
    #[serde(default)]
    pub csrf: String,
}

pub async fn sign_out(
    State(state): State<ConsoleState>,
    viewer: Result<Viewer, Response>,
    jar: CookieJar,
    form: Result<Form<CsrfOnly>, FormRejection>,
) -> PageResult {
    let Ok(viewer) = viewer else {
        return Ok(Redirect::to("/sign-in").into_response());
    };
    let csrf = form.map(|Form(f)| f.csrf).unwrap_or_default();
    viewer.check_csrf(&csrf)?;
    if let Some(cookie) = jar.get(SESSION_COOKIE) {
        state
            .shared
            .store
            .end_console_session(cookie.value())
            .await?;
    }
    let jar = jar.remove(Cookie::build(SESSION_COOKIE).path("/"));
    Ok((jar, Redirect::to("/sign-in")).into_response())
}

/// The CSRF token of a form posted by a signed-in person, or the refusal.
pub fn form_csrf<T>(
    viewer: &Viewer,
    form: Result<Form<T>, FormRejection>,
    csrf: impl Fn(&T) -> &str,
) -> Result<T, PageError> {
    match form {
        Ok(Form(form)) => {
            viewer.check_csrf(csrf(&form))?;
            Ok(form)
        }
        Err(_) => Err(csrf_mismatch()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csrf_tokens_differ_per_session_and_compare_whole() {
        assert_ne!(csrf_of("a"), csrf_of("b"));
        assert_eq!(csrf_of("a").len(), 64);
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"ab"));
        assert!(!same(b"", b"a"));
    }
}
