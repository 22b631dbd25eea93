//! Bearer tokens and their scopes. 401 without a valid token, 403 with the wrong scope.
//!
//! Authorization comes before anything else a route reads: a handler takes its caller as
//! [`Caller<S>`], the first extractor after the state, and the scope rule `S` is checked
//! inside the extractor, so no body, query or id is looked at for a caller who may not
//! ask. The gRPC `Runs` service is guarded the same way by `api::auth::grpc_guard`, before
//! tonic decodes the request message; a console page by its session, which makes a
//! [`Caller`] of the session's token with [`Caller::checked`].
//!
//! Below the surfaces: the REST API, the console and MCP all authenticate through this
//! module (`crate::api::auth` re-exports it), so none imports another for it.

use std::marker::PhantomData;

use axum::extract::FromRequestParts;
use axum::http::StatusCode;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;

use crate::Shared;
use crate::error::ApiError;
use crate::store::{Scope, TokenInfo};

/// What a route demands of its caller, checked before any other extractor runs.
pub trait Rule: Send + Sync + 'static {
    fn check(token: &TokenInfo) -> Result<(), ApiError>;
}

/// Any live token (the rule for code that checks scopes itself).
#[derive(Debug, Clone, Copy)]
pub struct Authenticated;
/// `reliability:read`: reading runs, frames, compare, findings, agents.
#[derive(Debug, Clone, Copy)]
pub struct ReadScope;
/// `reliability:run`: starting and cancelling runs, scenarios, closing findings.
#[derive(Debug, Clone, Copy)]
pub struct RunScope;
/// `reliability:run` held by a person's token: only a person confirms a production fault.
#[derive(Debug, Clone, Copy)]
pub struct PersonRunScope;
/// `reliability:audit`: reading the audit lines.
#[derive(Debug, Clone, Copy)]
pub struct AuditScope;
/// `reliability:admin` (a person's role): writing the account's secrets.
#[derive(Debug, Clone, Copy)]
pub struct AdminScope;

impl Rule for Authenticated {
    fn check(_: &TokenInfo) -> Result<(), ApiError> {
        Ok(())
    }
}

impl Rule for ReadScope {
    fn check(token: &TokenInfo) -> Result<(), ApiError> {
        require(token, Scope::Read)
    }
}

impl Rule for RunScope {
    fn check(token: &TokenInfo) -> Result<(), ApiError> {
        require(token, Scope::Run)
    }
}

impl Rule for AuditScope {
    fn check(token: &TokenInfo) -> Result<(), ApiError> {
        require(token, Scope::Audit)
    }
}

impl Rule for AdminScope {
    fn check(token: &TokenInfo) -> Result<(), ApiError> {
        require(token, Scope::Admin)
    }
}

impl Rule for PersonRunScope {
    fn check(token: &TokenInfo) -> Result<(), ApiError> {
        require(token, Scope::Run)?;
        if token.person.is_none() {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "person_required",
                "only a person's token confirms a production fault run; this is an API token",
            ));
        }
        Ok(())
    }
}

fn require(token: &TokenInfo, scope: Scope) -> Result<(), ApiError> {
    if token.has(scope) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "insufficient_scope",
            format!("this token lacks the scope {scope}"),
        ))
    }
}

/// The caller of an API route: a live token of an account that passed the rule `S`.
#[derive(Debug, Clone)]
pub struct Caller<S = Authenticated>(pub TokenInfo, PhantomData<S>);

impl<S: Rule> Caller<S> {
    pub fn account_id(&self) -> &str {
        &self.0.account.id
    }

    /// A caller from a token found another way than a bearer header (a console session),
    /// held to the same rule.
    pub fn checked(token: TokenInfo) -> Result<Caller<S>, ApiError> {
        S::check(&token)?;
        Ok(Caller(token, PhantomData))
    }

    /// How audit lines and `started_by` name the caller.
    pub fn actor(&self) -> String {
        match &self.0.person {
            Some(person) => format!("person:{person}"),
            None => format!("token:{}", self.0.id),
        }
    }
}

pub fn bearer(value: Option<&axum::http::HeaderValue>) -> Option<&str> {
    let text = value?.to_str().ok()?;
    let (scheme, token) = text.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// The caller named by an `Authorization` header, checked against the rule `S`.
pub async fn authorize<S: Rule>(
    shared: &Shared,
    header: Option<&axum::http::HeaderValue>,
) -> Result<Caller<S>, ApiError> {
    let unauthorized =
        |message: &str| ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message);
    let token = bearer(header).ok_or_else(|| unauthorized("send Authorization: Bearer <token>"))?;
    let Some(info) = shared.store.token_by_secret(token).await? else {
        return Err(unauthorized("the token is unknown or revoked"));
    };
    S::check(&info)?;
    Ok(Caller(info, PhantomData))
}

impl<S: Rule> FromRequestParts<Shared> for Caller<S> {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        shared: &Shared,
    ) -> Result<Self, Self::Rejection> {
        let caller = authorize(shared, parts.headers.get(AUTHORIZATION)).await?;
        // After the token, before any id or filter is read: a NUL (`%00`, the only way a
        // URL carries one) is refused alike on both stores (PostgreSQL stores none).
        let url = parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("");
        if url.contains("%00") {
            return Err(crate::error::invalid_text("the URL"));
        }
        // The account's share of the requests in flight, once its token is known.
        if let Some(slot) = parts.extensions.get::<crate::in_flight::Slot>() {
            slot.take(&shared.requests, caller.account_id())
                .map_err(crate::in_flight::refusal)?;
        }
        Ok(caller)
    }
}
