//! The baseline Worker for `cargo xtask bench` (see `bench/PLAN.md`): what a Worker on
//! this machine, these pins and this profile does with no logic of its own.
//!
//! - `GET /ok` answers "ok" without touching D1 (also at `/v1/health`, the path xtask
//!   polls to know a `wrangler dev` is ready).
//! - `POST /insert` reads the body and makes one bare `INSERT` into `jobs`, a table with
//!   the columns, keys and indexes of onceclick's (no triggers, no events, no read
//!   back): one D1 round trip. The `Idempotency-Key` header is the key, as on
//!   `POST /v1/jobs`, so the load generator sends both the same requests.
//! - `POST /insert-object` makes the same bare `INSERT` in the SQLite of one of
//!   [`OBJECTS`] Durable Objects (`Bare`), picked by the key: the Worker → object hop
//!   of onceclick's sharded store (`STORE=durable`, eight shards), with one statement
//!   and nothing else behind it.

use wasm_bindgen::JsValue;
use worker::{
    durable_object, event, Context, DurableObject, Env, Method, Request, Response, Result, State,
};

/// The objects `POST /insert-object` spreads its keys over: as many as the shards of
/// the sharded Worker it is measured against.
const OBJECTS: u64 = 8;

/// The baseline's `jobs` table inside an object (`migrations/0001_jobs.sql`).
const OBJECT_TABLE: &str = include_str!("../migrations/0001_jobs.sql");

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
        (Method::Post, "/insert-object") => insert_object(req, &env).await,
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

/// Passes the request on to the object its key names (FNV-1a of the key).
async fn insert_object(req: Request, env: &Env) -> Result<Response> {
    let key = req.headers().get("Idempotency-Key")?.unwrap_or_default();
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    let name = format!("b{}", hash % OBJECTS);
    env.durable_object("BARE")?
        .id_from_name(&name)?
        .get_stub()?
        .fetch_with_request(req)
        .await
}

/// One object of `POST /insert-object`: its table, made on its first call.
#[durable_object(fetch)]
pub struct Bare {
    state: State,
    made: std::cell::Cell<bool>,
}

impl DurableObject for Bare {
    fn new(state: State, _env: Env) -> Self {
        Self {
            state,
            made: std::cell::Cell::new(false),
        }
    }

    async fn fetch(&self, mut req: Request) -> Result<Response> {
        let key = req.headers().get("Idempotency-Key")?;
        let body = req.text().await?;
        let sql = self.state.storage().sql();
        if !self.made.get() {
            let table = OBJECT_TABLE
                .replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS")
                .replace("CREATE INDEX", "CREATE INDEX IF NOT EXISTS");
            sql.exec(&table, None)?;
            self.made.set(true);
        }
        sql.exec_raw(
            INSERT,
            vec![
                key.map_or(JsValue::NULL, |k| JsValue::from_str(&k)),
                JsValue::from_str(FINGERPRINT),
                JsValue::from_str(&body),
            ],
        )?;
        Ok(Response::ok("inserted")?.with_status(201))
    }
}
