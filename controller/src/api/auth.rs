//! Bearer tokens and their scopes. 401 without a valid token, 403 with the wrong scope.

use axum::extract::FromRequestParts;
use axum::http::StatusCode;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;

use super::error::ApiError;
use crate::Shared;
use crate::store::{Scope, TokenInfo};

/// The caller of an API route: a live token of an account.
#[derive(Debug, Clone)]
pub struct Caller(pub TokenInfo);

impl Caller {
    pub fn require(&self, scope: Scope) -> Result<(), ApiError> {
        if self.0.has(scope) {
            Ok(())
        } else {
            Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "insufficient_scope",
                format!("this token lacks the scope {scope}"),
            ))
        }
    }

    pub fn account_id(&self) -> &str {
        &self.0.account.id
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

pub async fn authenticate(shared: &Shared, token: Option<&str>) -> Result<Caller, ApiError> {
    let unauthorized =
        |message: &str| ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message);
    let token = token.ok_or_else(|| unauthorized("send Authorization: Bearer <token>"))?;
    match shared.store.token_by_secret(token).await? {
        Some(info) => Ok(Caller(info)),
        None => Err(unauthorized("the token is unknown or revoked")),
    }
}

impl FromRequestParts<Shared> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        shared: &Shared,
    ) -> Result<Self, Self::Rejection> {
        authenticate(shared, bearer(parts.headers.get(AUTHORIZATION))).await
    }
}
