//! Where a store call goes: the seam between the store's calls and its two backends.
//!
//! - **D1** (`STORE` unset or `d1`): every call is one D1 batch on the `DB` database.
//! - **Durable Objects** (`STORE=durable`): `SHARDS` objects of the class `Shard`
//!   (binding `SHARD`), each with its own SQLite. A call goes to the one shard its
//!   [`Route`] names (see `onceclick_protocol::shard`) and runs there as one synchronous
//!   transaction (`transactionSync`), which is what a D1 batch is on the other side: the
//!   same statements, the same atomicity, one round trip. Reads that span jobs (lists,
//!   figures) and the certifications (a copy in every shard, so each shard's failover
//!   guard reads its own) go everywhere.
//! - **Local**: inside a shard, its own SQLite (the shard's reconciler).
//!
//! A sharded deployment may keep the D1 database it moved from (`PREVIOUS_STORE=d1`):
//! its jobs (UUIDv7 ids) are still routed there, and a create first asks it whether
//! the key is already bound (see `Store::create_or_get_job`).

use super::route::{sharded_place, Place, Route};
use super::rows::{storage_error, Cost, HandOff, Rows, Stmt};
use crate::error::{ApiResult, AppError};
use onceclick_protocol::shard::{self, IdRoute, Shard, ShardCount};
use serde::Deserialize;
use serde_json::{json, Value};
use wasm_bindgen::{closure::Closure, JsCast, JsValue};
use worker::js_sys::{Array, Function, Object, Promise, Reflect, JSON};
use worker::wasm_bindgen_futures::JsFuture;
use worker::{D1Database, Env, ObjectNamespace, SqlStorage};

/// The shard count when `SHARDS` is not set.
const DEFAULT_SHARDS: u32 = 256;

/// The shards of a sharded deployment.
pub(crate) struct Shards {
    namespace: ObjectNamespace,
    count: ShardCount,
    /// The D1 database of the layout before, still answering its keys and jobs.
    pub(super) previous: Option<D1Database>,
}

impl Shards {
    /// Every shard of the current layout.
    pub(crate) fn all(&self) -> impl Iterator<Item = Shard> + '_ {
        (0..self.count.get()).map(|index| Shard {
            count: self.count,
            index,
        })
    }

    /// Sends `body` to the shard's object at `path`; its JSON answer, parsed by the
    /// runtime (`JSON.parse`), so that rows reach their types through the same
    /// `serde_wasm_bindgen` code as D1's. The call is made on the stub's own `fetch` with
    /// a plain init object: `worker`'s `RequestInit` would bring its `cf` serializer
    /// into the Worker for nothing.
    pub(crate) async fn send(&self, shard: Shard, path: &str, body: &Value) -> ApiResult<JsValue> {
        let name = shard.object_name();
        let unavailable =
            |e: JsValue| AppError::unavailable(format!("shard {name}: {}", js_text(&e)));
        let stub: JsValue = self.namespace.id_from_name(&name)?.get_stub()?.into_rpc();
        let init = Object::new();
        Reflect::set(&init, &"method".into(), &"POST".into()).map_err(unavailable)?;
        Reflect::set(&init, &"body".into(), &JsValue::from_str(&body.to_string()))
            .map_err(unavailable)?;
        let answer = async {
            let fetch: Function = Reflect::get(&stub, &"fetch".into())?.dyn_into()?;
            let url = JsValue::from_str(&format!("https://shard{path}"));
            let promise: Promise = fetch.call2(&stub, &url, &init)?.dyn_into()?;
            let reply = JsFuture::from(promise).await?;
            let text: Function = Reflect::get(&reply, &"text".into())?.dyn_into()?;
            let promise: Promise = text.call0(&reply)?.dyn_into()?;
            let text = JsFuture::from(promise).await?;
            JSON::parse(&text.as_string().unwrap_or_default())
        }
        .await
        .map_err(unavailable)?;
        match Reflect::get(&answer, &"error".into())
            .ok()
            .and_then(|e| e.as_string())
        {
            Some(error) => Err(storage_error(format!("shard {name}: {error}"))),
            None => Ok(answer),
        }
    }
}

pub(super) enum Backend {
    D1(D1Database),
    Local(Local),
    Shards(Shards),
    /// The native shell's places (the simulator's): not compiled into the Worker.
    #[cfg(not(target_arch = "wasm32"))]
    Native(super::native::Native),
}

/// One place a call runs.
pub(super) enum Target<'a> {
    D1(&'a D1Database),
    Local(&'a Local),
    Object(&'a Shards, Shard),
    /// An id no backend made: it names no row anywhere.
    Nowhere,
    /// A place of the native shell, by name (`d1`, or a shard's object name).
    #[cfg(not(target_arch = "wasm32"))]
    Native(&'a super::native::Native, String),
}

fn var(env: &Env, name: &str) -> Option<String> {
    env.var(name).ok().map(|v| v.to_string())
}

impl Backend {
    pub(super) fn from_env(env: &Env) -> ApiResult<Self> {
        match var(env, "STORE").as_deref() {
            None | Some("d1") => Ok(Backend::D1(env.d1("DB")?)),
            Some("durable") => {
                let count = match var(env, "SHARDS") {
                    None => DEFAULT_SHARDS,
                    Some(text) => text.parse().map_err(|_| bad_shards(&text))?,
                };
                let count = ShardCount::new(count).ok_or_else(|| bad_shards(&count.to_string()))?;
                let previous = match var(env, "PREVIOUS_STORE").as_deref() {
                    None | Some("") => None,
                    Some("d1") => Some(env.d1("DB")?),
                    Some(other) => {
                        return Err(AppError::internal(format!(
                            "PREVIOUS_STORE is {other:?}; the one known is \"d1\""
                        )))
                    }
                };
                Ok(Backend::Shards(Shards {
                    namespace: env.durable_object("SHARD")?,
                    count,
                    previous,
                }))
            }
            Some(other) => Err(AppError::internal(format!(
                "STORE is {other:?}; use \"d1\" or \"durable\""
            ))),
        }
    }

    pub(super) fn target(&self, route: Route<'_>) -> ApiResult<Target<'_>> {
        let shards = match self {
            Backend::D1(_) | Backend::Local(_) if matches!(route, Route::Before) => {
                return Ok(Target::Nowhere)
            }
            Backend::D1(db) => return Ok(Target::D1(db)),
            Backend::Local(local) => return Ok(Target::Local(local)),
            #[cfg(not(target_arch = "wasm32"))]
            Backend::Native(native) => {
                return Ok(native
                    .place(route)?
                    .map_or(Target::Nowhere, |name| Target::Native(native, name)))
            }
            Backend::Shards(shards) => shards,
        };
        Ok(
            match sharded_place(shards.count, shards.previous.is_some(), route)? {
                Place::Shard(shard) => Target::Object(shards, shard),
                Place::Previous => shards.previous.as_ref().map_or(Target::Nowhere, Target::D1),
                Place::Nowhere => Target::Nowhere,
            },
        )
    }

    /// Every place: each shard and the previous layout's D1, or the one database.
    pub(super) fn everywhere(&self) -> Vec<Target<'_>> {
        match self {
            Backend::D1(db) => vec![Target::D1(db)],
            Backend::Local(local) => vec![Target::Local(local)],
            #[cfg(not(target_arch = "wasm32"))]
            Backend::Native(native) => native
                .everywhere()
                .into_iter()
                .map(|name| Target::Native(native, name))
                .collect(),
            Backend::Shards(shards) => shards
                .all()
                .map(|shard| Target::Object(shards, shard))
                .chain(shards.previous.as_ref().map(Target::D1))
                .collect(),
        }
    }

    /// A job id and an attempt id for the place `route` names.
    pub(super) fn new_ids(&self, route: Route<'_>) -> (String, String) {
        let count = match self {
            Backend::Shards(shards) => Some(shards.count),
            #[cfg(not(target_arch = "wasm32"))]
            Backend::Native(native) => native.count(),
            _ => None,
        };
        let shard = match (count, route) {
            (Some(count), Route::Key { owner, key }) => {
                Some(shard::shard_for_key(owner, key, count))
            }
            (Some(count), Route::Id(id)) => match shard::route_of_id(id) {
                IdRoute::Shard(shard) if shard.count == count => Some(shard),
                _ => None,
            },
            _ => None,
        };
        let id = |prefix: &str| {
            let v7 = crate::clock::uuid_v7();
            shard
                .and_then(|s| shard::sharded_id(prefix, &v7, s))
                .unwrap_or_else(|| format!("{prefix}_{v7}"))
        };
        (id("job"), id("att"))
    }
}

fn bad_shards(text: &str) -> AppError {
    AppError::internal(format!(
        "SHARDS is {text}; it must be a power of two from 1 to {}",
        shard::MAX_SHARDS
    ))
}

impl Target<'_> {
    /// The name `Server-Timing` reports this place under.
    pub(super) fn name(&self) -> String {
        match self {
            Target::D1(_) => "d1".to_owned(),
            Target::Local(local) => local.name.clone(),
            Target::Object(_, shard) => shard.object_name(),
            Target::Nowhere => "none".to_owned(),
            #[cfg(not(target_arch = "wasm32"))]
            Target::Native(_, name) => name.clone(),
        }
    }

    /// Runs `statements` here as one transaction; their rows, and the rows the place
    /// wrote and read for them as it bills them (D1's `meta`, a cursor's counts).
    pub(super) async fn run(&self, statements: Vec<Stmt>) -> ApiResult<(Vec<Rows>, Cost)> {
        match self {
            // Through the binding itself, as a shard's SQLite is: each result's rows
            // and its `meta`, read with the same code as a shard's.
            Target::D1(db) => {
                let db: &JsValue = db.as_ref();
                let results = async {
                    let prepare: Function = Reflect::get(db, &"prepare".into())?.dyn_into()?;
                    let list = Array::new();
                    for s in &statements {
                        let stmt = prepare.call1(db, &JsValue::from_str(s.sql))?;
                        let bind: Function = Reflect::get(&stmt, &"bind".into())?.dyn_into()?;
                        let params: Array = s.params.iter().map(param_js).collect();
                        list.push(&bind.apply(&stmt, &params)?);
                    }
                    let batch: Function = Reflect::get(db, &"batch".into())?.dyn_into()?;
                    let promise: Promise = batch.call1(db, &list)?.dyn_into()?;
                    JsFuture::from(promise).await?.dyn_into::<Array>()
                }
                .await
                .map_err(|e| storage_error(d1_text(&e)))?;
                let mut cost = Cost::default();
                let sets = Array::new();
                for result in results.iter() {
                    let meta = Reflect::get(&result, &"meta".into()).unwrap_or_default();
                    cost.add(count(&meta, "rows_written"), count(&meta, "rows_read"));
                    sets.push(&Reflect::get(&result, &"results".into()).unwrap_or_default());
                }
                Ok((rows_of(sets), cost))
            }
            Target::Local(local) => local
                .run_counted(
                    statements
                        .into_iter()
                        .map(|s| (s.sql.to_owned(), s.params.iter().map(param_js).collect()))
                        .collect(),
                )
                .map(|(sets, cost)| (rows_of(sets), cost))
                .map_err(storage_error),
            Target::Object(shards, shard) => {
                let body = json!({
                    "shard": shard.object_name(),
                    "statements": statements.iter().map(|s| match &s.hand_off {
                        None => json!({"sql": s.sql, "params": s.params}),
                        Some(hand_off) => json!({"sql": s.sql, "params": s.params,
                                                 "hand_off": true, "fault": hand_off.fault}),
                    }).collect::<Vec<_>>(),
                });
                let answer = shards.send(*shard, "/batch", &body).await?;
                let results = Reflect::get(&answer, &"results".into())
                    .ok()
                    .and_then(|r| r.dyn_into::<Array>().ok())
                    .ok_or_else(|| AppError::internal("a shard answered without results"))?;
                let mut cost = Cost::default();
                cost.add(count(&answer, "rows_written"), count(&answer, "rows_read"));
                Ok((rows_of(results), cost))
            }
            Target::Nowhere => Ok((
                statements.iter().map(|_| Rows::none()).collect(),
                Cost::default(),
            )),
            #[cfg(not(target_arch = "wasm32"))]
            Target::Native(native, name) => native.run(name, statements).await,
        }
    }
}

/// The result sets of a batch (an array of arrays of row objects), one [`Rows`] each.
fn rows_of(sets: Array) -> Vec<Rows> {
    sets.iter()
        .map(|set| Rows::Js(set.dyn_into::<Array>().unwrap_or_default()))
        .collect()
}

/// A count the runtime reports (`meta.rows_written`, a cursor's `rowsRead`): 0 where
/// it reports none.
fn count(object: &JsValue, name: &str) -> u64 {
    Reflect::get(object, &name.into())
        .ok()
        .and_then(|v| v.as_f64())
        .map_or(0, |n| n as u64)
}

/// A D1 failure's text: its message, and its cause's (where SQLite's own words are).
fn d1_text(error: &JsValue) -> String {
    let message = js_text(error);
    match Reflect::get(error, &"cause".into()) {
        Ok(cause) if !cause.is_undefined() && !cause.is_null() => {
            format!("{message}: {}", js_text(&cause))
        }
        _ => message,
    }
}

/// A JSON parameter back as the JS value SQLite binds.
fn param_js(value: &Value) -> JsValue {
    match value {
        Value::String(text) => JsValue::from_str(text),
        Value::Number(n) => n.as_f64().map_or(JsValue::NULL, JsValue::from_f64),
        Value::Bool(b) => JsValue::from_f64(f64::from(u8::from(*b))),
        _ => JsValue::NULL,
    }
}

/// One shard's own SQLite, as the shard object (and its reconciler) uses it.
pub(crate) struct Local {
    sql: SqlStorage,
    storage: JsValue,
    pub(super) name: String,
}

/// A batch as it travels to a shard.
#[derive(Deserialize)]
pub(crate) struct WireBatch {
    pub(crate) shard: String,
    statements: Vec<WireStmt>,
}

#[derive(Deserialize)]
struct WireStmt {
    sql: String,
    params: Vec<Value>,
    /// The statement is marked for hand-off ([`HandOff`]), with these faults.
    #[serde(default)]
    hand_off: bool,
    #[serde(default)]
    fault: Option<String>,
}

/// What a committed batch asks its shard to hand on (`handoff.rs`): the attempts its
/// marked statements returned, each with the faults for its dispatcher.
pub(crate) type Handed = Vec<crate::message::Dispatch>;

/// A committed batch of the front Worker's, in its shard.
pub(crate) struct Ran {
    sets: Array,
    cost: Cost,
    /// The attempts its marked statements returned.
    pub(crate) handed: Handed,
}

impl Ran {
    /// The JSON text of the shard's answer, `{"results": [[row, …], …],
    /// "rows_written": N, "rows_read": N}`.
    pub(crate) fn answer(&self) -> Result<String, String> {
        let sets = JSON::stringify(&self.sets)
            .map(String::from)
            .map_err(|e| js_text(&e))?;
        Ok(format!(
            "{{\"results\":{sets},\"rows_written\":{},\"rows_read\":{}}}",
            self.cost.written, self.cost.read
        ))
    }
}

/// The attempts a statement marked for hand-off returned (its rows' `id`s).
pub(crate) fn handed_of(hand_off: &HandOff, ids: impl Iterator<Item = String>) -> Handed {
    ids.map(|id| crate::message::Dispatch::run(&id, hand_off.fault.as_deref()))
        .collect()
}

impl Local {
    pub(crate) fn new(storage: &worker::Storage, name: &str) -> Self {
        Self {
            sql: storage.sql(),
            storage: storage.as_raw().unchecked_ref::<JsValue>().clone(),
            name: name.to_owned(),
        }
    }

    /// Runs a batch that came from the front Worker, in one transaction: its rows and
    /// counts, and the attempts its marked statements returned, for the shard to keep
    /// before anything else can fail.
    pub(crate) fn run_wire(&self, mut batch: WireBatch) -> Result<Ran, String> {
        let marks: Vec<Option<HandOff>> = batch
            .statements
            .iter_mut()
            .map(|s| match s.hand_off {
                true => Some(HandOff {
                    fault: s.fault.take(),
                }),
                false => None,
            })
            .collect();
        let (sets, cost) = self.run_counted(
            batch
                .statements
                .into_iter()
                .map(|s| (s.sql, s.params.iter().map(param_js).collect()))
                .collect(),
        )?;
        let mut handed = Handed::new();
        for (i, mark) in marks.iter().enumerate() {
            if let (Some(mark), Ok(rows)) = (mark, sets.get(i as u32).dyn_into::<Array>()) {
                let ids = rows
                    .iter()
                    .filter_map(|row| Reflect::get(&row, &"id".into()).ok()?.as_string());
                handed.extend(handed_of(mark, ids));
            }
        }
        Ok(Ran { sets, cost, handed })
    }

    /// The ids a statement with no parameters returns in its `id` column.
    pub(crate) fn ids(&self, sql: &str) -> Result<Vec<String>, String> {
        let sets = self.run(vec![(sql.to_owned(), Vec::new())])?;
        let rows: Array = sets.get(0).dyn_into().unwrap_or_default();
        Ok(rows
            .iter()
            .filter_map(|row| Reflect::get(&row, &"id".into()).ok()?.as_string())
            .collect())
    }

    /// [`Local::run_counted`] without the counts.
    pub(crate) fn run(&self, statements: Vec<(String, Vec<JsValue>)>) -> Result<Array, String> {
        self.run_counted(statements).map(|(sets, _)| sets)
    }

    /// Runs `statements` in one synchronous transaction (`transactionSync`): all of them
    /// commit, or (on any error) none. The rows of each statement (each cursor's
    /// `toArray()`), as the runtime made them, and the rows the cursors wrote and read
    /// (`rowsWritten`, `rowsRead`: what the object is billed for).
    pub(crate) fn run_counted(
        &self,
        statements: Vec<(String, Vec<JsValue>)>,
    ) -> Result<(Array, Cost), String> {
        let sql: JsValue = self.sql.as_ref().clone();
        let results = Array::new();
        let sink = results.clone();
        let counts = std::rc::Rc::new(std::cell::Cell::new(Cost::default()));
        let tally = counts.clone();
        let body = Closure::once(move || -> Result<(), JsValue> {
            let exec: Function = Reflect::get(&sql, &"exec".into())?.dyn_into()?;
            for (text, params) in statements {
                let args = Array::new();
                args.push(&JsValue::from_str(&text));
                for param in params {
                    args.push(&param);
                }
                let cursor = exec.apply(&sql, &args)?;
                let to_array: Function = Reflect::get(&cursor, &"toArray".into())?.dyn_into()?;
                sink.push(&to_array.call0(&cursor)?);
                let mut cost = tally.get();
                cost.add(count(&cursor, "rowsWritten"), count(&cursor, "rowsRead"));
                tally.set(cost);
            }
            Ok(())
        });
        let transaction: Function = Reflect::get(&self.storage, &"transactionSync".into())
            .map_err(|e| js_text(&e))?
            .dyn_into()
            .map_err(|_| "storage.transactionSync is not a function".to_owned())?;
        transaction
            .call1(&self.storage, body.as_ref().unchecked_ref())
            .map_err(|e| js_text(&e))?;
        Ok((results, counts.get()))
    }

    /// Runs a script of several statements with no parameters (a migration file) and
    /// the statement that records it, in one transaction.
    pub(crate) fn migrate(&self, script: &str, record: &str, name: &str) -> Result<(), String> {
        self.run(vec![
            (script.to_owned(), Vec::new()),
            (record.to_owned(), vec![JsValue::from_str(name)]),
        ])
        .map(drop)
    }
}

/// The text of a thrown JS value: an `Error`'s message, or the value itself.
pub(crate) fn js_text(value: &JsValue) -> String {
    Reflect::get(value, &"message".into())
        .ok()
        .and_then(|m| m.as_string())
        .or_else(|| value.as_string())
        .unwrap_or_else(|| format!("{value:?}"))
}
