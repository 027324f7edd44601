//! Who is calling: the owner comes from a verified JWT, and from nowhere else.
//!
//! Two kinds of token are accepted, each only where it is configured:
//! - **HS256**, signed with the deployment's own `AUTH_SECRET` (what `cargo xtask token`
//!   mints): the owner is `sub`, an admin has `role: "admin"`.
//! - **RS256 and ES256** from your identity provider, verified against its key set at
//!   `JWKS_URL` (see `jwks.rs`). `iss` must be `JWT_ISSUER` and `aud` must name
//!   `JWT_AUDIENCE`; both are required with `JWKS_URL` (without them, any token the
//!   provider signs for any other application would pass), and a deployment that sets
//!   `JWKS_URL` alone answers its tokens with a 500 until they are set. The owner is the claim `JWT_OWNER_CLAIM` (`sub`
//!   by default); an admin is a token whose claim `JWT_ADMIN_CLAIM` (`role` by default)
//!   is, or is a list holding, `JWT_ADMIN_VALUE` (`admin` by default). `JWKS_REFETCH_MS`
//!   (60000 by default, at least 1000) is the least time between two fetches of the key
//!   set for a `kid` it does not hold.
//!
//! Both check `exp` (required) and `nbf` (when present) with [`SKEW_S`] of allowance for
//! clocks that disagree. Any other `alg`, `none` included, is refused.

use crate::error::{ApiResult, AppError};
use crate::jwks;
use jwt_compact::alg::{Hs256, Hs256Key};
use jwt_compact::{AlgorithmExt, Claims, TimeOptions, UntrustedToken};
use onceclick_protocol::ErrorCode;
use serde::Deserialize;
use serde_json::Value;
use worker::Env;

/// Seconds by which `exp` and `nbf` may be off: the issuer's clock and ours disagree.
pub(crate) const SKEW_S: i64 = 60;

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

/// How tokens are checked, from the Worker's configuration.
pub(crate) struct AuthConfig {
    /// `AUTH_SECRET`: HS256 tokens are accepted when it is set.
    pub(crate) secret: Option<String>,
    /// `JWKS_URL`: RS256 and ES256 tokens are accepted when it is set.
    pub(crate) jwks_url: Option<String>,
    /// `JWKS_REFETCH_MS`: the least time between two fetches for an unknown `kid`.
    pub(crate) jwks_refetch_ms: f64,
    pub(crate) issuer: Option<String>,
    pub(crate) audience: Option<String>,
    pub(crate) owner_claim: String,
    pub(crate) admin_claim: String,
    pub(crate) admin_value: String,
}

impl AuthConfig {
    pub(crate) fn from_env(env: &Env) -> Self {
        let var = |name: &str| {
            env.secret(name)
                .map(|s| s.to_string())
                .or_else(|_| env.var(name).map(|v| v.to_string()))
                .ok()
                .filter(|v| !v.is_empty())
        };
        Self {
            secret: var("AUTH_SECRET"),
            jwks_url: var("JWKS_URL"),
            jwks_refetch_ms: var("JWKS_REFETCH_MS")
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|ms| *ms >= 1000.0)
                .unwrap_or(jwks::REFETCH_AFTER_MS),
            issuer: var("JWT_ISSUER"),
            audience: var("JWT_AUDIENCE"),
            owner_claim: var("JWT_OWNER_CLAIM").unwrap_or_else(|| "sub".to_owned()),
            admin_claim: var("JWT_ADMIN_CLAIM").unwrap_or_else(|| "role".to_owned()),
            admin_value: var("JWT_ADMIN_VALUE").unwrap_or_else(|| "admin".to_owned()),
        }
    }
}

/// The token of `Authorization: Bearer <jwt>`.
fn bearer(header: Option<&str>) -> ApiResult<&str> {
    let header =
        header.ok_or_else(|| unauthorized("an Authorization: Bearer token is required"))?;
    Ok(header
        .strip_prefix("Bearer ")
        .or_else(|| header.strip_prefix("bearer "))
        .ok_or_else(|| unauthorized("the Authorization header must use the Bearer scheme"))?
        .trim())
}

fn time_options(now_ms: f64) -> TimeOptions<impl Fn() -> chrono::DateTime<chrono::Utc>> {
    let clock = move || chrono::DateTime::from_timestamp_millis(now_ms as i64).unwrap_or_default();
    TimeOptions::new(chrono::Duration::seconds(SKEW_S), clock)
}

/// Checks `exp` (required) and `nbf` (when present), with [`SKEW_S`] of leeway.
fn check_times<T>(claims: &Claims<T>, now_ms: f64) -> ApiResult<()> {
    let options = time_options(now_ms);
    claims
        .validate_expiration(&options)
        .map_err(|_| unauthorized("the token has no exp claim, or it has passed"))?;
    if claims.not_before.is_some() {
        claims
            .validate_maturity(&options)
            .map_err(|_| unauthorized("the token is not valid yet (nbf)"))?;
    }
    Ok(())
}

/// Owner names the API keeps for itself: `*` is the list's every-owner view
/// (`GET /v1/jobs?owner=*`), so no token may name it as its owner.
const RESERVED_OWNERS: &[&str] = &["*"];

fn owner_of(owner: &str) -> ApiResult<String> {
    let len = owner.chars().count();
    if !(1..=128).contains(&len) {
        return Err(unauthorized(
            "the token's owner claim must be 1 to 128 characters",
        ));
    }
    if RESERVED_OWNERS.contains(&owner) {
        return Err(unauthorized(
            "the token's owner claim is \"*\", which the API reserves for every owner",
        ));
    }
    Ok(owner.to_owned())
}

/// Verifies the request's bearer token as `config` allows.
/// `background`: the request's context, under which a fetch of the identity provider's
/// key set runs (see `jwks.rs`).
pub(crate) async fn authenticate(
    header: Option<&str>,
    config: &AuthConfig,
    now_ms: f64,
    background: &worker::Context,
) -> ApiResult<Caller> {
    let raw = bearer(header)?;
    let untrusted = UntrustedToken::new(raw).map_err(|_| unauthorized("the token is not a JWT"))?;
    match (untrusted.algorithm(), &config.secret, &config.jwks_url) {
        ("HS256", Some(secret), _) => hs256(&untrusted, secret, now_ms),
        ("RS256" | "ES256", _, Some(url)) => {
            from_provider(raw, &untrusted, url, config, now_ms, background).await
        }
        _ => Err(unauthorized(match (&config.secret, &config.jwks_url) {
            (Some(_), Some(_)) => "only HS256, RS256 and ES256 tokens are accepted",
            (None, Some(_)) => {
                "only RS256 and ES256 tokens from the identity provider are accepted"
            }
            _ => "only HS256 tokens are accepted",
        })),
    }
}

/// A token signed with the deployment's own secret.
fn hs256(untrusted: &UntrustedToken<'_>, secret: &str, now_ms: f64) -> ApiResult<Caller> {
    let key = Hs256Key::new(secret.as_bytes());
    let token = Hs256
        .validator::<Custom>(&key)
        .validate(untrusted)
        .map_err(|_| unauthorized("the token's signature or claims do not verify"))?;
    check_times(token.claims(), now_ms)?;
    let custom = &token.claims().custom;
    Ok(Caller {
        owner: owner_of(&custom.sub)?,
        admin: custom.role.as_deref() == Some("admin"),
    })
}

/// A token from the identity provider: signature against its key set, then the claims.
async fn from_provider(
    raw: &str,
    untrusted: &UntrustedToken<'_>,
    url: &str,
    config: &AuthConfig,
    now_ms: f64,
    background: &worker::Context,
) -> ApiResult<Caller> {
    let (Some(issuer), Some(audience)) = (&config.issuer, &config.audience) else {
        return Err(AppError::internal(
            "JWKS_URL is set without JWT_ISSUER and JWT_AUDIENCE: provider tokens are refused until both are",
        ));
    };
    let claims = untrusted
        .deserialize_claims_unchecked::<serde_json::Map<String, Value>>()
        .map_err(|_| unauthorized("the token's claims are not a JSON object"))?;
    let Some((signed, _)) = raw.rsplit_once('.') else {
        return Err(unauthorized("the token is not a JWT"));
    };
    let signature = jwks::Signature {
        alg: untrusted.algorithm(),
        kid: untrusted.header().key_id.as_deref(),
        signed,
        bytes: untrusted.signature_bytes(),
    };
    let verified =
        jwks::verify(url, config.jwks_refetch_ms, &signature, now_ms, background).await?;
    if !verified {
        return Err(unauthorized("the token's signature does not verify"));
    }
    check_times(&claims, now_ms)?;
    let custom = &claims.custom;
    if custom.get("iss").and_then(Value::as_str) != Some(issuer.as_str()) {
        return Err(unauthorized("the token's iss is not the configured issuer"));
    }
    let named = match custom.get("aud") {
        Some(Value::String(aud)) => aud == audience,
        Some(Value::Array(auds)) => auds.iter().any(|a| a.as_str() == Some(audience.as_str())),
        _ => false,
    };
    if !named {
        return Err(unauthorized("the token's aud does not name this API"));
    }
    let owner = custom
        .get(&config.owner_claim)
        .and_then(Value::as_str)
        .ok_or_else(|| unauthorized("the token has no owner claim (JWT_OWNER_CLAIM)"))?;
    let admin = match custom.get(&config.admin_claim) {
        Some(Value::String(v)) => v == &config.admin_value,
        Some(Value::Array(vs)) => vs.iter().any(|v| v.as_str() == Some(&config.admin_value)),
        _ => false,
    };
    Ok(Caller {
        owner: owner_of(owner)?,
        admin,
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
                "this call needs an admin token",
            ))
        }
    }
}
