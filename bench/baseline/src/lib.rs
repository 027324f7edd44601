//! The baseline Worker for `cargo xtask bench` (see `bench/PLAN.md`): what a Worker on
//! this machine, these pins and this profile does with no logic of its own.
//!
//! - `GET /ok` answers "ok" without touching D1 (also at `/v1/health`, the path xtask
//!   polls to know a `wrangler dev` is ready).
//! - `POST /insert` reads the body and makes one bare `INSERT` into `jobs`, a table with
//!   the columns, keys and indexes of onceclick's (no triggers, no events, no read
//!   back): one D1 round trip. The `Idempotency-Key` header is the key, as on
//!   `POST /v1/jobs`, so the load generator sends both the same requests.

use wasm_bindgen::JsValue;
use worker::{event, Context, Env, Method, Request, Response, Result};

const INSERT: &str = "INSERT INTO jobs (id, owner_id, idempotency_key, fingerprint, kind, input,
                                       provider, status, version, created_at, updated_at)
     VALUES ('job_' || lower(hex(randomblob(16))), 'bench',
             coalesce(?1, lower(hex(randomblob(16)))), ?2, 'summarize', ?3, 'primary',
             'queued', 1, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
             strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))";

/// A SHA-256 in hex, the length of a real fingerprint.
const FINGERPRINT: &str = "0000000000000000000000000000000000000000000000000000000000000000";

#[event(fetch)]
async fn fetch(mut req: Request, env: Env, _ctx: Context) -> Result<Response> {
    match (req.method(), req.path().as_str()) {
        (Method::Get, "/ok" | "/v1/health") => Response::ok("ok"),
        (Method::Post, "/insert") => insert(&mut req, &env).await,
        _ => Response::error("not found", 404),
    }
}

async fn insert(req: &mut Request, env: &Env) -> Result<Response> {
    let key = req.headers().get("Idempotency-Key")?;
    let body = req.text().await?;
    env.d1("DB")?
        .prepare(INSERT)
        .bind(&[
            key.map_or(JsValue::NULL, |k| JsValue::from_str(&k)),
            JsValue::from_str(FINGERPRINT),
            JsValue::from_str(&body),
        ])?
        .run()
        .await?;
    Ok(Response::ok("inserted")?.with_status(201))
}
