//! Tokens from your identity provider: RS256 and ES256 JWTs verified against the keys it
//! publishes at `JWKS_URL`, with the runtime's WebCrypto (`crypto.subtle`); no crypto is
//! written here.
//!
//! The key set is cached per isolate. A token whose `kid` is not in the cache fetches the
//! set again, at most once a minute (a rotation shows up at once, a flood of made-up
//! `kid`s costs one fetch a minute); the cache is also refreshed after ten minutes, so a
//! key the provider withdrew stops verifying. A key set that cannot be fetched answers
//! 503, never lets a token through. Requests that need keys while a fetch is in flight
//! (a cold isolate's first burst, a rotation) wait for that one fetch and then verify
//! against what it brought.

use crate::error::{ApiResult, AppError};
use futures_util::future::{select, Either};
use onceclick_protocol::ErrorCode;
use std::cell::RefCell;
use wasm_bindgen::{JsCast, JsValue};
use worker::js_sys::{self, Array, Object, Promise, Reflect, Uint8Array};
use worker::wasm_bindgen_futures::JsFuture;

/// No second fetch for an unknown `kid` sooner than this after the last one, unless
/// `JWKS_REFETCH_MS` says otherwise.
pub(crate) const REFETCH_AFTER_MS: f64 = 60_000.0;
/// A cached key set is fetched again this long after it was fetched.
const MAX_AGE_MS: f64 = 600_000.0;
/// How long one fetch of the key set may take.
const FETCH_TIMEOUT_MS: u64 = 5_000;

/// One published key: its id, its `kty`, and the JWK as a JS object for `importKey`.
struct Key {
    kid: Option<String>,
    kty: String,
    jwk: JsValue,
}

struct KeySet {
    url: String,
    fetched_at_ms: f64,
    keys: Vec<Key>,
}

/// The last fetch of the key set this isolate started: of which URL, which one it was
/// (so that only the latest fetch records its outcome), and how it stands.
struct Tried {
    url: String,
    serial: u64,
    outcome: Outcome,
}

enum Outcome {
    /// Started at this time and not finished: requests that need its keys wait for it.
    InFlight { since_ms: f64 },
    /// Finished at this time with the keys in [`CACHE`].
    Fetched { at_ms: f64 },
    /// Finished at this time without keys, for this reason.
    Failed { at_ms: f64, why: String },
}

thread_local! {
    static CACHE: RefCell<Option<KeySet>> = const { RefCell::new(None) };
    static TRIED: RefCell<Option<Tried>> = const { RefCell::new(None) };
    static SERIAL: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How often a request that waits for another's fetch looks whether it has finished.
const WAIT_POLL_MS: u64 = 20;

/// The most bytes a key set may have.
const MAX_BODY_BYTES: usize = 64 * 1024;

fn unavailable(why: impl std::fmt::Display) -> AppError {
    AppError::new(
        ErrorCode::ServiceUnavailable,
        "the identity provider's keys could not be fetched; try again shortly",
    )
    .with_cause(why)
}

fn unauthorized(detail: &str) -> AppError {
    AppError::new(ErrorCode::Unauthorized, detail)
}

/// The `kty` a JWT `alg` needs.
fn kty_of(alg: &str) -> Option<&'static str> {
    match alg {
        "RS256" => Some("RSA"),
        "ES256" => Some("EC"),
        _ => None,
    }
}

/// A token's signature, as [`verify`] checks it.
pub(crate) struct Signature<'a> {
    pub(crate) alg: &'a str,
    pub(crate) kid: Option<&'a str>,
    /// The token's `header.payload`.
    pub(crate) signed: &'a str,
    pub(crate) bytes: &'a [u8],
}

/// Whether the signature over `signed` (the token's `header.payload`) verifies with a key
/// of `url`'s set: the one named `kid`, or, for a token without one, any key of the type
/// `alg` needs.
pub(crate) async fn verify(
    url: &str,
    refetch_after_ms: f64,
    token: &Signature<'_>,
    now_ms: f64,
    background: &worker::Context,
) -> ApiResult<bool> {
    let Signature {
        alg,
        kid,
        signed,
        bytes: signature,
    } = *token;
    let Some(kty) = kty_of(alg) else {
        return Err(unauthorized(
            "only RS256 and ES256 tokens are verified against the JWKS",
        ));
    };
    let fresh = CACHE.with(|c| {
        c.borrow()
            .as_ref()
            .is_some_and(|set| set.url == url && now_ms - set.fetched_at_ms < MAX_AGE_MS)
    });
    if !fresh {
        refresh_at_most(url, refetch_after_ms, background).await?;
    }
    let mut candidates = matching(kid, kty);
    if candidates.is_empty() {
        refresh_at_most(url, refetch_after_ms, background).await?;
        candidates = matching(kid, kty);
    }
    if candidates.is_empty() {
        return Err(unauthorized(
            "the token's kid is not among the identity provider's keys",
        ));
    }
    for jwk in candidates {
        if verify_with(alg, &jwk, signed, signature).await? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The cached keys that may have signed a token with `kid` (or none) and `kty`.
fn matching(kid: Option<&str>, kty: &str) -> Vec<JsValue> {
    CACHE.with(|c| {
        c.borrow().as_ref().map_or_else(Vec::new, |set| {
            set.keys
                .iter()
                .filter(|k| k.kty == kty && (kid.is_none() || k.kid.as_deref() == kid))
                .map(|k| k.jwk.clone())
                .collect()
        })
    })
}

/// Fetches the key set again, unless this isolate's last fetch finished less than
/// `refetch_after_ms` ago: then that fetch stands. A recent failure answers 503 at once,
/// without another fetch, so a provider that is down costs one fetch per interval
/// however many tokens arrive; a recent success keeps the cache as it is (an unknown
/// `kid` is then refused).
///
/// The fetch runs under `wait_until` (`background`, the request's context), so that it
/// finishes even if the request that started it goes away. Every request that needs its
/// keys, that one included, waits for its outcome by polling this isolate's [`TRIED`]
/// slot, never by awaiting a promise of another request's (whose I/O belongs to that
/// request), at most the fetch's own time limit and a second more; then it reads the keys
/// the fetch brought.
async fn refresh_at_most(
    url: &str,
    refetch_after_ms: f64,
    background: &worker::Context,
) -> ApiResult<()> {
    let limit_ms = FETCH_TIMEOUT_MS as f64 + 1_000.0;
    let give_up_at = crate::clock::now_ms() + limit_ms;
    loop {
        let now = crate::clock::now_ms();
        let seen = TRIED.with(|t| {
            t.borrow()
                .as_ref()
                .filter(|t| t.url == url)
                .map(|t| match &t.outcome {
                    Outcome::InFlight { since_ms } => (true, *since_ms, None),
                    Outcome::Fetched { at_ms } => (false, *at_ms, None),
                    Outcome::Failed { at_ms, why } => (false, *at_ms, Some(why.clone())),
                })
        });
        match seen {
            // A fetch is in flight (and has not overrun its own limit): wait for it.
            Some((true, since_ms, _)) if now - since_ms < limit_ms => {
                if now >= give_up_at {
                    return Err(unavailable(
                        "the fetch of the key set in flight did not finish in time",
                    ));
                }
                worker::Delay::from(std::time::Duration::from_millis(WAIT_POLL_MS)).await;
            }
            Some((false, at_ms, failed)) if now - at_ms < refetch_after_ms => {
                return match failed {
                    Some(why) => Err(unavailable(format!("the last fetch failed: {why}"))),
                    None => Ok(()),
                };
            }
            _ => start_fetch(url, background),
        }
    }
}

/// Marks a fetch in flight and starts it under `wait_until`; it records its outcome for
/// the requests waiting (if no later fetch has taken the slot since).
fn start_fetch(url: &str, background: &worker::Context) {
    let serial = SERIAL.with(|s| {
        s.set(s.get() + 1);
        s.get()
    });
    let started = crate::clock::now_ms();
    TRIED.with(|t| {
        *t.borrow_mut() = Some(Tried {
            url: url.to_owned(),
            serial,
            outcome: Outcome::InFlight { since_ms: started },
        });
    });
    let url = url.to_owned();
    background.wait_until(async move {
        let result = refresh(&url, started).await;
        let at_ms = crate::clock::now_ms();
        let outcome = match result {
            Ok(()) => Outcome::Fetched { at_ms },
            Err(e) => Outcome::Failed {
                at_ms,
                why: e.cause_or_detail().to_owned(),
            },
        };
        TRIED.with(|t| {
            let mut tried = t.borrow_mut();
            if tried.as_ref().is_some_and(|t| t.serial == serial) {
                *tried = Some(Tried {
                    url,
                    serial,
                    outcome,
                });
            }
        });
    });
}

/// Fetches the key set at `url` into the cache: headers and body within
/// [`FETCH_TIMEOUT_MS`], the body at most [`MAX_BODY_BYTES`]. Only keys for signatures
/// (`use` absent or `sig`) of a type this module verifies are kept.
async fn refresh(url: &str, now_ms: f64) -> ApiResult<()> {
    // A `Request` from the string, not a parsed `worker::Url`: the `url` crate would link
    // its IDNA tables into the Worker.
    let request = worker::Request::new(url, worker::Method::Get)
        .map_err(|e| unavailable(format!("JWKS_URL: {e}")))?;
    let fetch = async move {
        let mut response = worker::Fetch::Request(request)
            .send()
            .await
            .map_err(unavailable)?;
        if response.status_code() != 200 {
            return Err(unavailable(format!(
                "the JWKS answered {}",
                response.status_code()
            )));
        }
        let body = response.bytes().await.map_err(unavailable)?;
        if body.len() > MAX_BODY_BYTES {
            return Err(unavailable(format!(
                "the JWKS is {} bytes, over {MAX_BODY_BYTES}",
                body.len()
            )));
        }
        Ok(body)
    };
    let timeout = worker::Delay::from(std::time::Duration::from_millis(FETCH_TIMEOUT_MS));
    let text = match select(Box::pin(fetch), Box::pin(timeout)).await {
        Either::Left((body, _)) => body?,
        Either::Right(_) => return Err(unavailable("the JWKS fetch timed out")),
    };
    let parsed: serde_json::Value = serde_json::from_slice(&text)
        .map_err(|e| unavailable(format!("the JWKS is not JSON: {e}")))?;
    let Some(keys) = parsed["keys"].as_array() else {
        return Err(unavailable("the JWKS has no keys array"));
    };
    let keys = keys
        .iter()
        .filter(|k| k["use"].is_null() || k["use"] == "sig")
        .filter_map(|k| {
            let kty = k["kty"].as_str()?;
            let usable = match kty {
                "RSA" => k["n"].is_string() && k["e"].is_string(),
                "EC" => k["crv"] == "P-256" && k["x"].is_string() && k["y"].is_string(),
                _ => false,
            };
            if !usable {
                return None;
            }
            let jwk = js_sys::JSON::parse(&k.to_string()).ok()?;
            Some(Key {
                kid: k["kid"].as_str().map(str::to_owned),
                kty: kty.to_owned(),
                jwk,
            })
        })
        .collect();
    CACHE.with(|c| {
        *c.borrow_mut() = Some(KeySet {
            url: url.to_owned(),
            fetched_at_ms: now_ms,
            keys,
        });
    });
    Ok(())
}

fn object(pairs: &[(&str, JsValue)]) -> JsValue {
    let o = Object::new();
    for (name, value) in pairs {
        let _ = Reflect::set(&o, &JsValue::from_str(name), value);
    }
    o.into()
}

/// `crypto.subtle.importKey("jwk", …)` then `verify`. A key the runtime refuses to import,
/// or a signature it cannot read, verifies nothing.
async fn verify_with(alg: &str, jwk: &JsValue, signed: &str, signature: &[u8]) -> ApiResult<bool> {
    let (import_alg, verify_alg) = match alg {
        "RS256" => {
            let a = object(&[
                ("name", "RSASSA-PKCS1-v1_5".into()),
                ("hash", "SHA-256".into()),
            ]);
            (a.clone(), a)
        }
        _ => (
            object(&[("name", "ECDSA".into()), ("namedCurve", "P-256".into())]),
            object(&[("name", "ECDSA".into()), ("hash", "SHA-256".into())]),
        ),
    };
    let subtle = Reflect::get(&js_sys::global(), &"crypto".into())
        .and_then(|c| Reflect::get(&c, &"subtle".into()))
        .map_err(|_| AppError::internal("crypto.subtle is missing"))?;
    let call = |name: &str, args: &[JsValue]| -> Result<Promise, JsValue> {
        let f: js_sys::Function = Reflect::get(&subtle, &name.into())?.dyn_into()?;
        let array: Array = args.iter().collect();
        f.apply(&subtle, &array)?.dyn_into()
    };
    let usages: Array = [JsValue::from_str("verify")].iter().collect();
    let import = call(
        "importKey",
        &[
            "jwk".into(),
            jwk.clone(),
            import_alg,
            false.into(),
            usages.into(),
        ],
    );
    let Ok(key) = (match import {
        Ok(promise) => JsFuture::from(promise).await,
        Err(e) => Err(e),
    }) else {
        return Ok(false);
    };
    let signature = Uint8Array::from(signature);
    let data = Uint8Array::from(signed.as_bytes());
    // A signature WebCrypto cannot even read (a wrong length) verifies nothing.
    let verified = match call("verify", &[verify_alg, key, signature.into(), data.into()]) {
        Ok(promise) => JsFuture::from(promise).await.unwrap_or(JsValue::FALSE),
        Err(_) => JsValue::FALSE,
    };
    Ok(verified.as_bool() == Some(true))
}
