//! Bearer tokens the way a real identity provider would sign them (HS256).

use anyhow::Result;
use jwt_compact::alg::{Hs256, Hs256Key};
use jwt_compact::{AlgorithmExt, Claims, Header, TimeOptions};
use serde::Serialize;

#[derive(Serialize)]
struct Custom<'a> {
    sub: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'a str>,
}

/// A token for `owner` that expires `ttl_secs` from now, with `role: "admin"` if asked.
pub fn mint(secret: &str, owner: &str, admin: bool, ttl_secs: u64) -> Result<String> {
    mint_with(secret, owner, admin, ttl_secs as i64)
}

/// Like [`mint`], but `exp` may lie in the past (a negative `ttl_secs`).
pub fn mint_with(secret: &str, owner: &str, admin: bool, ttl_secs: i64) -> Result<String> {
    let custom = Custom {
        sub: owner,
        role: admin.then_some("admin"),
    };
    // Without jwt-compact's `clock` feature the clock is passed in.
    let now = || chrono::Utc::now();
    let claims = Claims::new(custom).set_duration(
        &TimeOptions::new(chrono::Duration::zero(), now),
        chrono::Duration::seconds(ttl_secs),
    );
    let key = Hs256Key::new(secret.as_bytes());
    Ok(Hs256.token(&Header::empty(), &claims, &key)?)
}
