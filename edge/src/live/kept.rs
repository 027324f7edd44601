//! What a hub keeps in its storage: each streaming attempt's text, in the chunks
//! `keeping.rs` decides, and the job's id beside it ([`JOB_KEY`]). Read back once per
//! instance, and deleted whole once the job is settled or gone.

use super::{Live, JOB_KEY};
use crate::keeping::Writes;
use onceclick_protocol::chat::MAX_CHARS;
use onceclick_protocol::live::EndChunk;
use wasm_bindgen::{JsCast, JsValue};
use worker::js_sys::{Function, Object, Promise, Reflect};
use worker::wasm_bindgen_futures::JsFuture;
use worker::{Result, WebSocket};

impl Live {
    /// Reads back the text kept in storage, once per instance (after a restart, the
    /// hub's memory is empty).
    pub(super) async fn load(&self) -> Result<()> {
        if !self.keeper.borrow().to_load() {
            return Ok(());
        }
        let stored = self.state.storage().list().await?;
        if !self.keeper.borrow().to_load() {
            return Ok(()); // another request read it back meanwhile
        }
        let entries = stored
            .entries()
            .into_iter()
            .filter_map(|entry| {
                let pair = worker::js_sys::Array::from(&entry.ok()?);
                Some((pair.get(0).as_string()?, pair.get(1).as_string()?))
            })
            .collect();
        self.keeper
            .borrow_mut()
            .load(&mut self.latest.borrow_mut(), entries, MAX_CHARS);
        Ok(())
    }

    /// Writes what `writes` gives, step by step (`keeping.rs`). (Each step's chunks are
    /// taken in one borrow, written after it.)
    pub(super) async fn write(&self, mut writes: Writes) {
        loop {
            let chunks = writes.next(&mut self.keeper.borrow_mut(), &self.latest.borrow());
            let Some(chunks) = chunks else { return };
            for chunk in chunks {
                self.keep(chunk).await;
            }
        }
    }

    /// Writes a chunk of an attempt's text to storage. A write that fails costs a
    /// restart's read-back, not the stream: said in the log, and tried again with more
    /// text (a kilobyte later, or at the next document that shows it `unknown`).
    async fn keep(&self, chunk: EndChunk) {
        // The attempt the chunk is of, for the log line that counts the hub's writes.
        let attempt = chunk
            .value
            .split('\n')
            .next()
            .unwrap_or_default()
            .to_owned();
        // The job's id beside the text, once per instance: an alarm that wakes a cold
        // instance with no stream may not be told its own name, and must still find the
        // job it reads.
        let storage = self.state.storage();
        if !self.job_kept.get() {
            if let Some(job) = self.job_id(&[]) {
                self.job_kept
                    .set(storage.put_raw(JOB_KEY, job).await.is_ok());
            }
        }
        match storage.put_raw(&chunk.key, chunk.value).await {
            Ok(()) => {
                self.keeper.borrow_mut().wrote(chunk.n, chunk.chars);
                crate::log::info(serde_json::json!({"event": "live_text_kept",
                    "attempt_id": attempt, "key": chunk.key}));
                self.arm(self.check_every_ms()).await;
            }
            Err(e) => crate::log::error(serde_json::json!({"event": "live_text_unkept",
                "key": chunk.key, "cause": e.to_string()})),
        }
    }

    /// Empties the hub's storage: every chunk of text it kept, and its alarm too (since
    /// the 2026-02-24 compatibility date: a settled job's streams close, and the next
    /// stream to subscribe sets it again). `by` says what told the hub (`notify`, or its
    /// own `alarm`), `job` what it learnt (`settled`, or `gone`: purged).
    pub(super) async fn delete_kept(
        storage: worker::Storage,
        job_id: &str,
        by: &str,
        job: &str,
    ) -> Result<()> {
        let deleted = storage.delete_all().await;
        match &deleted {
            Ok(()) => crate::log::info(serde_json::json!({"event": "live_text_deleted",
                "job_id": job_id, "by": by, "job": job})),
            Err(e) => crate::log::error(serde_json::json!({"event": "live_text_unkept",
                "job_id": job_id, "cause": e.to_string()})),
        }
        deleted
    }

    /// Whether the hub's storage keeps anything (text: it keeps nothing else). Asked of
    /// the storage itself: after a restart, memory knows nothing of it.
    pub(super) async fn keeps(&self) -> Result<bool> {
        // `list({limit: 1})` on the binding itself: `worker`'s `ListOptions` would bring
        // its serializer into the Worker.
        let storage = self.state.storage();
        let raw: &JsValue = storage.as_raw().unchecked_ref();
        let options = Object::new();
        Reflect::set(&options, &"limit".into(), &1.into())?;
        let list: Function = Reflect::get(raw, &"list".into())?.dyn_into()?;
        let found: Promise = list.call1(raw, &options)?.dyn_into()?;
        let found: worker::js_sys::Map = JsFuture::from(found).await?.dyn_into()?;
        Ok(found.size() > 0)
    }

    /// [`Live::job_id`], or the id kept beside the text ([`JOB_KEY`]).
    pub(super) async fn job_of(&self, sockets: &[WebSocket]) -> Option<String> {
        match self.job_id(sockets) {
            Some(job) => Some(job),
            None => self
                .state
                .storage()
                .get::<String>(JOB_KEY)
                .await
                .ok()
                .flatten(),
        }
    }
}
