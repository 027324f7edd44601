//! A local identity provider: a real HTTP server on 127.0.0.1 that publishes a JWKS and
//! signs tokens with its current keys, one RS256 (RSA 2048) and one ES256 (P-256).
//!
//! - `GET /jwks.json` — the published key set (what the Worker's `JWKS_URL` names).
//! - `POST /_sign` `{"alg": "RS256"|"ES256", "claims": {…}, "key": "current"|"previous"|"unpublished", "kid": "…"?}`
//!   → `{"token"}`. `previous` signs with the keys the last rotation withdrew;
//!   `unpublished` with keys that were never in the set. `kid` overrides the header's;
//!   `"no_kid": true` leaves it out.
//! - `POST /_rotate` — new keys; the old ones leave the set (and become `previous`).
//! - `POST /_fail` `{"on": bool}` — the JWKS answers 500 while on.
//! - `POST /_hang` `{"on": bool}` — the JWKS sends nothing for 30 s while on.
//! - `POST /_delay` `{"ms": n}` — the JWKS answers only after `n` ms (0: at once).
//! - `GET /_fetches` — `{"count"}`: how often the JWKS was fetched.
//!
//! The tests sign through it, so the private keys never leave this server.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use jwt_compact::alg::{Es256, ModulusBits, Rsa, RsaPrivateKey, RsaPublicKey, StrongKey};
use jwt_compact::jwk::JsonWebKey;
use jwt_compact::{AlgorithmExt, Claims, Header};
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

/// One generation of keys, with the `kid`s they are published under.
struct Keys {
    rsa: StrongKey<RsaPrivateKey>,
    rsa_public: StrongKey<RsaPublicKey>,
    ec: p256::ecdsa::SigningKey,
    generation: u32,
}

impl Keys {
    fn generate(generation: u32) -> Self {
        let mut rng = rand_core::OsRng;
        // A 2048-bit key is what RS256 requires (RFC 7518); built with opt-level 3 (see
        // the workspace's dev profile), it takes a fraction of a second.
        let (rsa, rsa_public) = Rsa::generate(&mut rng, ModulusBits::TwoKibibytes)
            .unwrap_or_else(|e| panic!("generating an RSA key: {e}"));
        Self {
            rsa,
            rsa_public,
            ec: p256::ecdsa::SigningKey::random(&mut rng),
            generation,
        }
    }

    fn kid(&self, alg: &str) -> String {
        format!("{}-{}", alg.to_lowercase(), self.generation)
    }

    /// The public half as JWKs, with `kid`, `alg` and `use`.
    fn published(&self) -> Vec<Value> {
        let rsa = JsonWebKey::from(self.rsa_public.as_ref());
        let ec = JsonWebKey::from(self.ec.verifying_key());
        let mut out = Vec::new();
        for (jwk, alg) in [(rsa, "RS256"), (ec, "ES256")] {
            let mut v = serde_json::to_value(&jwk).unwrap_or(Value::Null);
            v["kid"] = json!(self.kid(alg));
            v["alg"] = json!(alg);
            v["use"] = json!("sig");
            out.push(v);
        }
        out
    }

    fn sign(
        &self,
        alg: &str,
        claims: Value,
        kid: Option<String>,
        no_kid: bool,
    ) -> Result<String, String> {
        let header = if no_kid {
            Header::empty()
        } else {
            Header::empty().with_key_id(kid.unwrap_or_else(|| self.kid(alg)))
        };
        let claims = Claims::new(claims);
        match alg {
            "RS256" => Rsa::rs256()
                .token(&header, &claims, self.rsa.as_ref())
                .map_err(|e| e.to_string()),
            "ES256" => Es256
                .token(&header, &claims, &self.ec)
                .map_err(|e| e.to_string()),
            other => Err(format!("no key for {other}")),
        }
    }
}

struct Idp {
    current: Keys,
    previous: Option<Keys>,
    unpublished: Keys,
    failing: bool,
    hanging: bool,
    delay_ms: u64,
    fetches: u64,
}

type Shared = Arc<Mutex<Idp>>;

/// Serves the identity provider on 127.0.0.1:`port` from a thread of its own.
pub fn spawn(port: u16) -> std::io::Result<()> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", port))?;
    listener.set_nonblocking(true)?;
    let idp = Idp {
        current: Keys::generate(1),
        previous: None,
        unpublished: Keys::generate(0),
        failing: false,
        hanging: false,
        delay_ms: 0,
        fetches: 0,
    };
    let state: Shared = Arc::new(Mutex::new(idp));
    std::thread::Builder::new()
        .name("identity-provider".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            let Ok(runtime) = runtime else { return };
            runtime.block_on(async move {
                if let Ok(listener) = tokio::net::TcpListener::from_std(listener) {
                    let _ = axum::serve(listener, router(state)).await;
                }
            });
        })?;
    Ok(())
}

fn router(state: Shared) -> Router {
    Router::new()
        .route("/jwks.json", get(jwks))
        .route("/_sign", post(sign))
        .route("/_rotate", post(rotate))
        .route("/_fail", post(fail))
        .route("/_hang", post(hang))
        .route("/_delay", post(delay))
        .route("/_fetches", get(fetches))
        .with_state(state)
}

fn locked(state: &Shared) -> std::sync::MutexGuard<'_, Idp> {
    state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn jwks(State(state): State<Shared>) -> Response {
    let (hanging, delay_ms) = {
        let mut idp = locked(&state);
        idp.fetches += 1;
        (idp.hanging, idp.delay_ms)
    };
    if hanging {
        tokio::time::sleep(std::time::Duration::from_secs(30)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(delay_ms)).await;
    let idp = locked(&state);
    if idp.failing {
        return (StatusCode::INTERNAL_SERVER_ERROR, "the key store is down").into_response();
    }
    Json(json!({"keys": idp.current.published()})).into_response()
}

#[derive(Deserialize)]
struct SignRequest {
    alg: String,
    claims: Value,
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    kid: Option<String>,
    #[serde(default)]
    no_kid: bool,
}

async fn sign(State(state): State<Shared>, Json(req): Json<SignRequest>) -> Response {
    let idp = locked(&state);
    let keys = match req.key.as_deref() {
        None | Some("current") => Some(&idp.current),
        Some("previous") => idp.previous.as_ref(),
        Some("unpublished") => Some(&idp.unpublished),
        Some(_) => None,
    };
    let Some(keys) = keys else {
        return (StatusCode::BAD_REQUEST, "no such key").into_response();
    };
    match keys.sign(&req.alg, req.claims, req.kid, req.no_kid) {
        Ok(token) => Json(json!({"token": token})).into_response(),
        Err(e) => (StatusCode::BAD_REQUEST, e).into_response(),
    }
}

async fn rotate(State(state): State<Shared>) -> Response {
    let generation = locked(&state).current.generation + 1;
    let fresh = tokio::task::spawn_blocking(move || Keys::generate(generation)).await;
    let Ok(fresh) = fresh else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let mut idp = locked(&state);
    let old = std::mem::replace(&mut idp.current, fresh);
    idp.previous = Some(old);
    Json(json!({"generation": generation})).into_response()
}

#[derive(Deserialize)]
struct FailRequest {
    on: bool,
}

async fn fail(State(state): State<Shared>, Json(req): Json<FailRequest>) -> Response {
    locked(&state).failing = req.on;
    StatusCode::NO_CONTENT.into_response()
}

async fn hang(State(state): State<Shared>, Json(req): Json<FailRequest>) -> Response {
    locked(&state).hanging = req.on;
    StatusCode::NO_CONTENT.into_response()
}

#[derive(Deserialize)]
struct DelayRequest {
    ms: u64,
}

async fn delay(State(state): State<Shared>, Json(req): Json<DelayRequest>) -> Response {
    locked(&state).delay_ms = req.ms;
    StatusCode::NO_CONTENT.into_response()
}

async fn fetches(State(state): State<Shared>) -> Response {
    Json(json!({"count": locked(&state).fetches})).into_response()
}
