//! One job's hub object (the Worker's `Live` Durable Object): its memory (`Hub`, what
//! its `Keeper` knows), its storage and its alarm, which outlive an eviction and a
//! restart, and the streams open on it; and what it does with a change it hears.

use super::text::CallSide;
use super::{settled, Live, KEEP_BYTES, KEEP_EVERY};
use futures_channel::mpsc::UnboundedSender;
use onceclick_core::keeping::Writes;
use onceclick_protocol::chat::MAX_CHARS;
use onceclick_protocol::live::{Follower, Hub, Keeper};
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

/// One job's hub object: its memory, its storage, its alarm, and the streams open on it.
pub(super) struct HubObject {
    pub(super) hub: Hub,
    /// What the hub knows of its storage, and the storage itself (which outlives an
    /// eviction and a restart).
    pub(super) keeper: Keeper,
    pub(super) storage: BTreeMap<String, String>,
    /// How far each attempt's text was written at its `unknown` document, by `n`: what
    /// the storage must give back whole, to any later instance.
    pub(super) whole: BTreeMap<u32, u64>,
    pub(super) streams: Vec<Stream>,
    pub(super) read_at: u64,
    /// The hub's alarm for its kept text (`Live::keep` sets it with a write, at most
    /// `CHECK_MS` away): storage, so an eviction or a restart keeps it.
    pub(super) check_at: Option<u64>,
    /// Restarts so far: a call's connection opened before the last one is closed.
    pub(super) restarts: u64,
    /// The calls' connections open on it, as it pokes them (a restart closes them).
    pub(super) calls: Vec<(UnboundedSender<()>, Rc<CallSide>)>,
}

/// One stream the model opened: where it stands, and whether it is open.
#[derive(Default)]
pub(super) struct Stream {
    pub(super) sent: Follower,
    /// The text it holds of each attempt (by id), as its client shows it.
    pub(super) texts: BTreeMap<String, String>,
    /// The attempts that a document it sent shows ended, kept apart from its
    /// `Follower` so that the check does not rest on what it checks.
    pub(super) finished: BTreeSet<String>,
    /// The position of the last event it sent (its document was checked when sent).
    pub(super) last: Option<u64>,
    /// The position of its own store read when it last opened: it never ends older.
    pub(super) read: Option<u64>,
    pub(super) connected: bool,
    /// It closed after a settled document (or a reconnect got `204`).
    pub(super) ended: bool,
}

impl Default for HubObject {
    fn default() -> Self {
        Self {
            hub: Hub::default(),
            keeper: Keeper::every(KEEP_EVERY).within(KEEP_BYTES),
            storage: BTreeMap::new(),
            whole: BTreeMap::new(),
            streams: Vec::new(),
            read_at: 0,
            check_at: None,
            restarts: 0,
            calls: Vec::new(),
        }
    }
}

impl HubObject {
    /// A new instance of the hub: its memory is gone, its storage not.
    pub(super) fn forget(&mut self) {
        self.hub = Hub::default();
        self.keeper = Keeper::every(KEEP_EVERY).within(KEEP_BYTES);
    }

    /// Reads the storage back, once per instance, as `Live::load` does.
    pub(super) fn load(&mut self) {
        if self.keeper.to_load() {
            let entries = self
                .storage
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            self.keeper.load(&mut self.hub, entries, MAX_CHARS);
        }
    }
}

impl Live {
    /// The hub hears of change `seq`: sent on to its streams if it is the newest yet.
    pub(super) fn offer(&self, job: &str, object: &mut HubObject, seq: u64, doc: &str) {
        if !object.hub.offer(seq, doc) {
            return;
        }
        for w in object.streams.iter_mut().filter(|w| w.connected) {
            self.send(job, w, seq, doc);
        }
        // As `Live::offer` does: the document may end an attempt.
        self.poke(object);
        // As `Live::offer` does: an attempt gone `unknown` keeps its whole text.
        self.write(job, object, Writes::after_document());
        if settled(doc) == Some(true) && object.keeper.settle() {
            object.storage.clear();
            object.whole.clear();
        }
    }
}
