//! Where intent keys live: `localStorage` (or any object with its methods), falling
//! back to memory when storage is missing or throws (private mode, quota). It never
//! throws at the caller; it says so once on the console.

use crate::js;
use crate::json;
use onceclick_protocol::fingerprint_canonical;
use std::cell::RefCell;

use std::rc::Rc;
use wasm_bindgen::JsValue;

/// Every entry's name starts with this (and the format's version).
const PREFIX: &str = "onceclick:v1:";

/// A user intent, as far as its key goes.
pub(crate) enum Intent<'a> {
    /// A `Client` submit. The provider is `None` when it is the kind's primary (see
    /// `Client::as_named`), so both spellings find one key.
    Job {
        /// The bearer token, whose `sub` scopes the key to its owner.
        token: &'a str,
        kind: &'a str,
        /// The input as sent, in its canonical text (see `json::canonical`).
        input: &'a str,
        provider: Option<&'a str>,
    },
    /// An `idempotentFetch`, named by its caller's `intent`.
    Fetch(&'a str),
}

impl Intent<'_> {
    /// The name its key is stored under. Built only here, so that a submit, a forget, a
    /// reload and another tab all find the same entry.
    pub(crate) fn name(&self) -> String {
        match self {
            Intent::Job {
                token,
                kind,
                input,
                provider,
            } => {
                let print = fingerprint_canonical(kind, input, provider.unwrap_or(""));
                format!("{PREFIX}intent:{}:{kind}:{print}", owner_of(token))
            }
            Intent::Fetch(intent) => format!("{PREFIX}fetch:{intent}"),
        }
    }
}

/// The owner a token names (its `sub`), read without verifying: it only scopes keys.
fn owner_of(token: &str) -> String {
    sub_of(token).unwrap_or_else(|| "anonymous".to_owned())
}

/// Who the tabs that share one live connection must all be (`share.rs`): the token's
/// `sub`, or, for a token without one, the token itself.
pub(crate) fn sharing_owner(token: &str) -> String {
    sub_of(token).unwrap_or_else(|| token.to_owned())
}

fn sub_of(token: &str) -> Option<String> {
    let payload = token.split('.').nth(1).unwrap_or_default();
    let mut b64: String = payload
        .chars()
        .map(|c| match c {
            '-' => '+',
            '_' => '/',
            c => c,
        })
        .collect();
    while b64.len() % 4 != 0 {
        b64.push('=');
    }
    js::call(&js::global(), "atob", &[b64.into()])
        .ok()
        .and_then(|s| s.as_string())
        .and_then(|text| json::parse(&text))
        .and_then(|claims| js::get_string(&claims, "sub"))
}

/// One stored intent key: `{"key", "created_at", "job_id", "provider"}` as JSON
/// (`provider` is absent from entries written before it existed).
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    /// The `Idempotency-Key`.
    pub(crate) key: String,
    /// When it was made, in ms since the epoch. Only `idempotentFetch` lets a key expire
    /// by age; a `Client` key lives until its job is seen final.
    pub(crate) created_at: f64,
    /// The job it created, once known.
    pub(crate) job_id: Option<String>,
    /// The provider its job runs on, once an answer said so (before that, the provider
    /// the submit that made it named, if any): how a later submit that names a provider
    /// finds this key after the kind's primary changed (see `Client::stored_name`).
    pub(crate) provider: Option<String>,
}

impl Entry {
    fn from_json(text: &str) -> Option<Entry> {
        let v = json::parse(text)?;
        Some(Entry {
            key: js::get_string(&v, "key")?,
            created_at: js::get(&v, "created_at").as_f64()?,
            job_id: js::get_string(&v, "job_id"),
            provider: js::get_string(&v, "provider"),
        })
    }

    fn to_json(&self) -> Option<String> {
        let o = js_sys::Object::new();
        let set = |k: &str, v: JsValue| js_sys::Reflect::set(&o, &k.into(), &v).ok();
        set("key", self.key.as_str().into())?;
        set("created_at", self.created_at.into())?;
        set(
            "job_id",
            self.job_id
                .as_deref()
                .map_or(JsValue::NULL, JsValue::from_str),
        )?;
        if let Some(provider) = &self.provider {
            set("provider", provider.as_str().into())?;
        }
        json::stringify(&o)
    }
}

/// A UUIDv7: the time from `Date.now()` (std's clock does not exist on wasm32), the
/// randomness from getrandom's `wasm_js` backend (`crypto.getRandomValues`), laid out
/// and written by the uuid crate without its formatting machinery.
pub(crate) fn new_key() -> String {
    let ms = js_sys::Date::now().max(0.0) as u64;
    let mut random = [0u8; 10];
    if getrandom::fill(&mut random).is_err() {
        // No Web Crypto at all (uuid's own generator would trap here): a key still has
        // to be unique, not secret.
        for byte in &mut random {
            *byte = (js_sys::Math::random() * 256.0) as u8;
        }
    }
    let uuid = uuid::Builder::from_unix_timestamp_millis(ms, &random).into_uuid();
    uuid.hyphenated()
        .encode_lower(&mut uuid::Uuid::encode_buffer())
        .to_owned()
}

/// The key store of one client.
#[derive(Clone)]
pub(crate) struct Keys {
    storage: Rc<RefCell<Option<JsValue>>>,
    /// Every entry written, kept also in memory: a few dozen at most, so a list.
    memory: Rc<RefCell<Vec<(String, String)>>>,
    /// How long an entry is reused, for `idempotentFetch` (a generic backend has no job
    /// the SDK could watch); `None` for a `Client`, whose keys live as long as their job.
    retention_ms: Option<f64>,
}

impl Keys {
    /// `storage`: `undefined` for `globalThis.localStorage`, `null` for memory only, or
    /// any object with `getItem`, `setItem`, `removeItem`, `key` and `length`.
    /// `retention_hours`: `None` keeps every entry until it is removed.
    pub(crate) fn new(storage: JsValue, retention_hours: Option<f64>) -> Self {
        let storage = if storage.is_undefined() {
            // Reading `localStorage` itself throws in some private modes.
            js_sys::Reflect::get(&js::global(), &"localStorage".into()).ok()
        } else {
            Some(storage)
        };
        let storage = storage.filter(|s| !s.is_null() && !s.is_undefined());
        Self {
            storage: Rc::new(RefCell::new(storage)),
            memory: Rc::new(RefCell::new(Vec::new())),
            retention_ms: retention_hours.map(|h| h * 3_600_000.0),
        }
    }

    /// Runs `op` against storage; on a throw, switches this store to memory for good.
    fn with_storage<T>(&self, op: impl FnOnce(&JsValue) -> Result<T, JsValue>) -> Option<T> {
        let storage = self.storage.borrow().clone()?;
        match op(&storage) {
            Ok(v) => Some(v),
            Err(e) => {
                self.fall_back(&js::describe(&e));
                None
            }
        }
    }

    fn fall_back(&self, why: &str) {
        if self.storage.borrow_mut().take().is_some() {
            web_sys::console::warn_1(
                &format!("onceclick: storage failed ({why}); keeping idempotency keys in memory for this page").into(),
            );
        }
    }

    fn read(&self, name: &str) -> Option<String> {
        let stored =
            self.with_storage(|s| js::call(s, "getItem", &[name.into()]).map(|v| v.as_string()));
        match stored {
            Some(found) => found,
            None => self
                .memory
                .borrow()
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone()),
        }
    }

    fn write(&self, name: &str, value: &str) {
        {
            let mut memory = self.memory.borrow_mut();
            memory.retain(|(n, _)| n != name);
            memory.push((name.to_owned(), value.to_owned()));
        }
        self.with_storage(|s| js::call(s, "setItem", &[name.into(), value.into()]));
    }

    pub(crate) fn remove(&self, name: &str) {
        self.memory.borrow_mut().retain(|(n, _)| n != name);
        self.with_storage(|s| js::call(s, "removeItem", &[name.into()]));
    }

    /// The live entry for `name`, if there is one (that has not expired, where entries
    /// expire).
    pub(crate) fn get(&self, name: &str) -> Option<Entry> {
        let entry = Entry::from_json(&self.read(name)?)?;
        let live = self
            .retention_ms
            .is_none_or(|ms| js_sys::Date::now() - entry.created_at < ms);
        live.then_some(entry)
    }

    /// The entry for `name`, made and **stored before it is returned** when missing (or
    /// expired), so that no request ever goes out with a key that a reload would lose.
    /// `provider`: the provider the intent names, kept in a new entry.
    pub(crate) fn get_or_create(&self, name: &str, provider: Option<&str>) -> Entry {
        if let Some(entry) = self.get(name) {
            return entry;
        }
        let entry = Entry {
            key: new_key(),
            created_at: js_sys::Date::now(),
            job_id: None,
            provider: provider.map(str::to_owned),
        };
        self.put(name, &entry);
        entry
    }

    pub(crate) fn put(&self, name: &str, entry: &Entry) {
        if let Some(text) = entry.to_json() {
            self.write(name, &text);
        }
    }

    /// Frees every key bound to `job_id` (the job ended: the next intent is a new one).
    pub(crate) fn free_job(&self, job_id: &str) {
        for name in self.names() {
            if self.get(&name).and_then(|e| e.job_id).as_deref() == Some(job_id) {
                self.remove(&name);
            }
        }
    }

    /// Every entry name of this SDK, in storage and in memory.
    fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .memory
            .borrow()
            .iter()
            .map(|(n, _)| n.clone())
            .collect();
        let stored = self.with_storage(|s| {
            let len = js::get(s, "length").as_f64().unwrap_or(0.0) as u32;
            let mut found = Vec::new();
            for i in 0..len {
                if let Some(name) = js::call(s, "key", &[i.into()])?.as_string() {
                    found.push(name);
                }
            }
            Ok(found)
        });
        for name in stored.unwrap_or_default() {
            if !names.contains(&name) {
                names.push(name);
            }
        }
        names.retain(|n| n.starts_with(PREFIX));
        names
    }
}
