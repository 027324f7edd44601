//! The Worker's places (`route::Places`): what carries a store call to D1 or to a
//! shard, and the stores a deployment's configuration makes.
//!
//! - **D1** (`STORE` unset or `d1`): every call is one D1 batch on the `DB` database.
//! - **Durable Objects** (`STORE=durable`): `SHARDS` objects of the class `Shard`
//!   (binding `SHARD`), each with its own SQLite. A call goes to the one shard its
//!   route names (`route.rs`, `onceclick_protocol::shard`) and runs there as one
//!   synchronous transaction (`transactionSync`), which is what a D1 batch is on the
//!   other side: the same statements, the same atomicity, one round trip.
//! - **Local**: inside a shard, its own SQLite (the shard's reconciler).
//!
//! Rows come back as JSON (`rows_of`, or a shard's answer read as it came), so that
//! the store's code above never sees a JS value.
//!
//! During a move a deployment keeps the layout it moves from (`PREVIOUS_STORE`: `d1`,
//! or `durable:N`): its jobs are still routed there by their ids, and a create first
//! asks it whether the key is already bound (see `Store::create_or_get_job`).

use futures_util::future::LocalBoxFuture;
use onceclick_core::error::{ApiResult, AppError};
use onceclick_core::handoff::{to_hand_on, ToHandOn};
use onceclick_core::store::{
    storage_error, Cost, HandOff, Layout, Places, Rows, Stmt, Store, Target,
};
use onceclick_protocol::moving::{self, StoreLayout};
use onceclick_protocol::shard::{self, Shard, ShardCount};
use serde::Deserialize;
use serde_json::{json, Value};
use std::rc::Rc;
use wasm_bindgen::{closure::Closure, JsCast, JsValue};
use worker::js_sys::{Array, Function, Object, Promise, Reflect, JSON};
use worker::wasm_bindgen_futures::JsFuture;
use worker::{D1Database, Env, ObjectNamespace, SqlStorage};

/// The shard count when `SHARDS` is not set.
const DEFAULT_SHARDS: u32 = 256;

/// The shards' objects (binding `SHARD`), of whatever count: a shard's object is named
/// with its count (`s8.3`), so two counts' objects live side by side during a move.
pub(crate) struct Shards {
    namespace: ObjectNamespace,
}

impl Shards {
    /// The shards' objects.
    pub(crate) fn from_env(env: &Env) -> ApiResult<Self> {
        Ok(Shards {
            namespace: env
                .durable_object("SHARD")
                .map_err(crate::problem::runtime)?,
        })
    }

    /// Sends `body` to the shard's object at `path`; its JSON answer, or the error it
    /// says it ran into (`{"error": …}`). The call is made on the stub's own `fetch` with
    /// a plain init object: `worker`'s `RequestInit` would bring its `cf` serializer
    /// into the Worker for nothing.
    pub(crate) async fn send(&self, shard: Shard, path: &str, body: &Value) -> ApiResult<Value> {
        let name = shard.object_name();
        let unavailable =
            |e: JsValue| AppError::unavailable(format!("shard {name}: {}", js_text(&e)));
        let stub: JsValue = self
            .namespace
            .id_from_name(&name)
            .map_err(crate::problem::runtime)?
            .get_stub()
            .map_err(crate::problem::runtime)?
            .into_rpc();
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
            JsFuture::from(promise).await
        }
        .await
        .map_err(unavailable)?
        .as_string()
        .unwrap_or_default();
        // An answer that is not JSON is a shard that did not answer (503), as before.
        let answer: Value = serde_json::from_str(&answer)
            .map_err(|e| AppError::unavailable(format!("shard {name}: {e}")))?;
        match answer.get("error").and_then(Value::as_str) {
            Some(error) => Err(storage_error(format!("shard {name}: {error}"))),
            None => Ok(answer),
        }
    }

    /// One batch in the shard's object, as one transaction there.
    async fn batch(&self, shard: Shard, statements: Vec<Stmt>) -> ApiResult<(Vec<Rows>, Cost)> {
        let body = json!({
            "shard": shard.object_name(),
            "statements": statements.iter().map(|s| match &s.hand_off {
                None => json!({"sql": s.sql, "params": s.params}),
                Some(hand_off) => json!({"sql": s.sql, "params": s.params,
                                         "hand_off": true, "fault": hand_off.fault}),
            }).collect::<Vec<_>>(),
        });
        let mut answer = self.send(shard, "/batch", &body).await?;
        let count = |name: &str| answer.get(name).and_then(Value::as_u64).unwrap_or(0);
        let mut cost = Cost::default();
        cost.add(count("rows_written"), count("rows_read"));
        let Some(Value::Array(results)) = answer.get_mut("results").map(Value::take) else {
            return Err(AppError::internal("a shard answered without results"));
        };
        Ok((results.into_iter().map(rows).collect(), cost))
    }
}

/// One result set as JSON: its rows (none if it is not a list).
fn rows(set: Value) -> Rows {
    match set {
        Value::Array(rows) => Rows(rows),
        _ => Rows::none(),
    }
}

/// The Worker's places: the D1 database (the one, or the previous layout's), the
/// shards' objects, or (inside a shard) its own SQLite.
struct WorkerPlaces {
    db: Option<D1Database>,
    shards: Option<Shards>,
    local: Option<Local>,
}

/// A var as the runtime gives it (a text, or a TOML number or boolean); `None` if unset.
fn raw_var(env: &Env, name: &str) -> Option<JsValue> {
    Reflect::get(env.as_ref(), &name.into())
        .ok()
        .filter(|raw| !raw.is_undefined() && !raw.is_null())
}

/// A var that decides where keys bind, read strictly: unset is `None`, a text is itself,
/// a whole number (`SHARDS = 16` in TOML) its digits; anything else is a configuration
/// error (500, logged), never read as unset, which would silently change the layout.
fn var(env: &Env, name: &str) -> ApiResult<Option<String>> {
    let Some(raw) = raw_var(env, name) else {
        return Ok(None);
    };
    if let Some(text) = raw.as_string() {
        return Ok(Some(text));
    }
    match raw.as_f64() {
        Some(n) if n.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(&n) => {
            Ok(Some((n as u32).to_string()))
        }
        _ => Err(AppError::internal(format!(
            "{name} is {raw:?}; write it as a string"
        ))),
    }
}

/// The layout `STORE` and `SHARDS` name: where new keys bind.
fn layout_now(env: &Env) -> ApiResult<StoreLayout> {
    match var(env, "STORE")?.as_deref() {
        None | Some("d1") => Ok(StoreLayout::D1),
        Some("durable") => {
            let count = match var(env, "SHARDS")? {
                None => DEFAULT_SHARDS,
                Some(text) => text.parse().map_err(|_| bad_shards(&text))?,
            };
            ShardCount::new(count)
                .map(StoreLayout::Shards)
                .ok_or_else(|| bad_shards(&count.to_string()))
        }
        Some(other) => Err(AppError::internal(format!(
            "STORE is {other:?}; use \"d1\" or \"durable\""
        ))),
    }
}

/// The store this deployment is configured with: its layout now (`STORE`, `SHARDS`), the
/// one it moves from (`PREVIOUS_STORE`: `d1` or `durable:N`), its `REFUSE_NEW_KEYS` and
/// `LOG_STORE_CALLS`. A configuration no move can keep its promise in is refused here
/// (`moving::check_move`), before any call.
pub(crate) fn from_env(env: &Env) -> ApiResult<Store> {
    let now = layout_now(env)?;
    let previous = match var(env, "PREVIOUS_STORE")?.as_deref() {
        None | Some("") => None,
        Some(text) => Some(
            StoreLayout::parse(text)
                .map_err(|e| AppError::internal(format!("PREVIOUS_STORE is {e}")))?,
        ),
    };
    let refusing = refuse_new_keys(env)?;
    moving::check_move(now, previous, refusing).map_err(AppError::internal)?;
    let uses = |kind: fn(&StoreLayout) -> bool| kind(&now) || previous.as_ref().is_some_and(kind);
    let places = WorkerPlaces {
        db: match uses(|l| *l == StoreLayout::D1) {
            true => Some(env.d1("DB").map_err(crate::problem::runtime)?),
            false => None,
        },
        shards: match uses(|l| matches!(l, StoreLayout::Shards(_))) {
            true => Some(Shards::from_env(env)?),
            false => None,
        },
        local: None,
    };
    let layout = Layout::Deployed { now, previous };
    Ok(Store::new(Rc::new(places), layout)
        .refusing_new_keys(refusing)
        .logging_calls(var(env, "LOG_STORE_CALLS")?.as_deref() == Some("true")))
}

/// The store of one D1 database (a sharded deployment's previous layout's).
pub(crate) fn d1(db: D1Database) -> Store {
    let places = WorkerPlaces {
        db: Some(db),
        shards: None,
        local: None,
    };
    Store::new(Rc::new(places), Layout::one())
}

/// Inside a shard: its own SQLite, for the shard's reconciler.
pub(crate) fn local(local: Local) -> Store {
    let layout = Layout::Inside(local.name.clone());
    let places = WorkerPlaces {
        db: None,
        shards: None,
        local: Some(local),
    };
    Store::new(Rc::new(places), layout)
}

fn bad_shards(text: &str) -> AppError {
    AppError::internal(format!(
        "SHARDS is {text}; it must be a power of two from 1 to {}",
        shard::MAX_SHARDS
    ))
}

impl Places for WorkerPlaces {
    fn run<'a>(
        &'a self,
        target: &'a Target,
        statements: Vec<Stmt>,
    ) -> LocalBoxFuture<'a, ApiResult<(Vec<Rows>, Cost)>> {
        Box::pin(async move {
            match (target, &self.db, &self.shards, &self.local) {
                (Target::Database, Some(db), _, _) => d1_batch(db, statements).await,
                (Target::Shard(shard), _, Some(shards), _) => {
                    shards.batch(*shard, statements).await
                }
                (Target::Here(_), _, _, Some(local)) => local
                    .run_counted(
                        statements
                            .into_iter()
                            .map(|s| (s.sql.to_owned(), s.params.iter().map(param_js).collect()))
                            .collect(),
                    )
                    .map_err(storage_error)
                    .and_then(|(sets, cost)| Ok((rows_of(&sets)?, cost))),
                // A layout names no place its store was not given: our bug, never rows.
                (target, ..) => Err(AppError::internal(format!(
                    "no place for {} in this store",
                    target.name()
                ))),
            }
        })
    }
}

/// One D1 batch, through the binding itself, as a shard's SQLite is: each result's
/// rows and its `meta`.
async fn d1_batch(db: &D1Database, statements: Vec<Stmt>) -> ApiResult<(Vec<Rows>, Cost)> {
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
    Ok((rows_of(&sets)?, cost))
}

/// The result sets of a batch (an array of arrays of row objects), one [`Rows`] each:
/// through the runtime's `JSON.stringify`, read back as JSON, so that numbers keep
/// their integer form.
fn rows_of(sets: &Array) -> ApiResult<Vec<Rows>> {
    let text = JSON::stringify(sets)
        .map(String::from)
        .map_err(|e| AppError::internal(js_text(&e)))?;
    match serde_json::from_str(&text).map_err(AppError::internal)? {
        Value::Array(sets) => Ok(sets.into_iter().map(rows).collect()),
        _ => Err(AppError::internal("a batch answered no list of results")),
    }
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

/// A committed batch of the front Worker's, in its shard.
pub(crate) struct Committed {
    sets: Array,
    cost: Cost,
    /// The attempts its marked statements returned.
    pub(crate) handed: ToHandOn,
}

impl Committed {
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
    pub(crate) fn run_wire(&self, mut batch: WireBatch) -> Result<Committed, String> {
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
        let mut handed = ToHandOn::new();
        for (i, mark) in marks.iter().enumerate() {
            if let (Some(mark), Ok(rows)) = (mark, sets.get(i as u32).dyn_into::<Array>()) {
                let ids = rows
                    .iter()
                    .filter_map(|row| Reflect::get(&row, &"id".into()).ok()?.as_string());
                handed.extend(to_hand_on(mark, ids));
            }
        }
        Ok(Committed { sets, cost, handed })
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

/// `REFUSE_NEW_KEYS`: `"true"` (or the TOML boolean `true`) refuses new keys; unset,
/// `""`, `"false"` or `false` does not. Anything else is a configuration error (500,
/// logged): a value that was meant to protect a move must never pass for "off".
fn refuse_new_keys(env: &Env) -> ApiResult<bool> {
    let Some(raw) = raw_var(env, "REFUSE_NEW_KEYS") else {
        return Ok(false);
    };
    match (raw.as_bool(), raw.as_string().as_deref()) {
        (Some(on), _) => Ok(on),
        (_, Some("true")) => Ok(true),
        (_, Some("false" | "")) => Ok(false),
        _ => Err(AppError::internal(format!(
            "REFUSE_NEW_KEYS is {raw:?}; use \"true\" or \"false\""
        ))),
    }
}
