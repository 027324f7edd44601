//! Who is calling: the owner comes from a verified HS256 JWT, and from nowhere else.

use crate::error::{ApiResult, AppError};
use jwt_compact::alg::{Hs256, Hs256Key};
use jwt_compact::{AlgorithmExt, TimeOptions, UntrustedToken};
use onceclick_protocol::ErrorCode;
use serde::Deserialize;

/// The verified caller of a request.
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    pub(crate) owner: String,
    pub(crate) admin: bool,
}

#[derive(Debug, Deserialize)]
struct Custom {
    sub: String,
    #[serde(default)]
    role: Option<String>,
}

fn unauthorized(detail: &str) -> AppError {
    AppError::new(ErrorCode::Unauthorized, detail)
}

/// Verifies `Authorization: Bearer <jwt>` against `secret`.
///
/// Refused: a missing header, any `alg` but HS256 (`none` included), a bad signature, a
/// missing or past `exp`, a `sub` outside 1–128 characters.
pub(crate) fn authenticate(header: Option<String>, secret: &str, now_ms: f64) -> ApiResult<Caller> {
    let header =
        header.ok_or_else(|| unauthorized("an Authorization: Bearer token is required"))?;
    let raw = header
        .strip_prefix("Bearer ")
        .or_else(|| header.strip_prefix("bearer "))
        .ok_or_else(|| unauthorized("the Authorization header must use the Bearer scheme"))?
        .trim();
    let untrusted = UntrustedToken::new(raw).map_err(|_| unauthorized("the token is not a JWT"))?;
    if untrusted.algorithm() != "HS256" {
        return Err(unauthorized("only HS256 tokens are accepted"));
    }
    let key = Hs256Key::new(secret.as_bytes());
    let token = Hs256
        .validator::<Custom>(&key)
        .validate(&untrusted)
        .map_err(|_| unauthorized("the token's signature or claims do not verify"))?;
    let clock = move || chrono::DateTime::from_timestamp_millis(now_ms as i64).unwrap_or_default();
    token
        .claims()
        .validate_expiration(&TimeOptions::new(chrono::Duration::seconds(0), clock))
        .map_err(|_| unauthorized("the token has no exp claim, or it has passed"))?;
    let custom = &token.claims().custom;
    let len = custom.sub.chars().count();
    if !(1..=128).contains(&len) {
        return Err(unauthorized("the token's sub must be 1 to 128 characters"));
    }
    Ok(Caller {
        owner: custom.sub.clone(),
        admin: custom.role.as_deref() == Some("admin"),
    })
}

impl Caller {
    /// Refuses a caller without the admin role.
    pub(crate) fn require_admin(&self) -> ApiResult<()> {
        if self.admin {
            Ok(())
        } else {
            Err(AppError::new(
                ErrorCode::Forbidden,
                "this call needs a token with role \"admin\"",
            ))
        }
    }
}
