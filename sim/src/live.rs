//! The live channel in the model: what the store tells a job's hub (lost, late, out of
//! order), the hubs themselves (`protocol::live::Hub`, as `edge/src/live.rs` keeps
//! one), and the streams that follow them (`protocol::live::Follower`, as
//! `edge/src/stream.rs` sends), which open, drop and reconnect at any position while
//! the world moves the jobs under them.
//!
//! The promises checked, after every step:
//! - one position, one document: every document told or read at a job's position is
//!   the same document;
//! - a stream sends positions in increasing order, never one twice, each with the
//!   document of that position, and ends only at a settled document, never older than
//!   its own store read;
//! - nothing is lost for good: once the world settles, every stream still open shows
//!   the job's current document (through a notification or the re-read), and every
//!   other one gets it, or `204`, when it reconnects from its last position;
//! - streamed text (issue 25), handed to the hub by the Worker's own pacing
//!   (`handing.rs`: each piece from what the hub last said it has, so a hub that
//!   restarted is sent what it lost; one hand-off in `HAND_LOST_ONE_IN` fails, and is
//!   tried again as `Pacing` says) and taken as the Worker's hub takes it (`keeping.rs`):
//!   what a stream holds of an attempt's text, across reconnects, is always a prefix of
//!   what the provider sent, each piece beginning where the last ended, and no piece of
//!   an attempt comes after a document the stream had that says it ended; a call whose
//!   hand-off ended with its body read has handed its hub all of its text;
//! - kept text (issue 42), some of it long (hundreds of characters of 2 to 4 bytes),
//!   written as the Worker's hub writes it (`keeping::Writes`): every chunk a hub writes
//!   fits what storage takes (`KEEP_BYTES`), and each call's first chunk of an attempt
//!   begins within the text its storage gives back, so a failed write never leaves a
//!   gap; once its writes went through, a hub whose document shows an attempt `unknown`
//!   keeps all it has of that attempt's text;
//! - kept text never outlives its job (issue 42): the reconciler's sweeps tell the hubs
//!   of the jobs they move, and every hub that keeps text, whether or not it heard its
//!   job settle, has an alarm that reads its job at least every `CHECK_MS`; once the
//!   world settles and that alarm has come, no hub keeps text of a settled or gone job.

use crate::rng::Rng;
use futures_util::future::{self, LocalBoxFuture};
use onceclick_core::sim::keeping::{self, Answer, Writes};
use onceclick_core::sim::pacing::Taken;
use onceclick_core::sim::Notify;
use onceclick_protocol::chat::MAX_CHARS;
use onceclick_protocol::live::{EndChunk, Follower, Hub, Keeper, Piece, Place};
use onceclick_protocol::{AttemptState, Job};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

/// How often a hub with streams open re-reads its job (the Worker's `LIVE_REREAD_MS`).
const REREAD_MS: u64 = 5_000;
/// The longest a notification is on its way, in virtual ms.
const LATE_MS: u64 = 400;
/// One notification in this many is lost (an isolate that died after the commit).
const LOST_ONE_IN: u64 = 8;
/// Streams the model opens on one job.
const STREAMS_PER_JOB: usize = 4;
/// One hand-off of text in this many fails (the hub did not answer in time).
const HAND_LOST_ONE_IN: u64 = 16;
/// Before one hand-off in this many the hub is evicted: its memory is gone, and its
/// (hibernatable) sockets stay open.
const EVICTED_ONE_IN: u64 = 6;
/// The model's hubs keep an attempt's text once per this many code points (the
/// Worker's, `KEEP_EVERY_CHARS`, is a kilobyte; the model's texts are short).
const KEEP_EVERY: u64 = 8;
/// One write of kept text in this many fails.
const KEEP_FAILS_ONE_IN: u64 = 6;
/// The most bytes of one chunk of kept text, key and value (the Worker's,
/// `KEEP_MAX_BYTES`, is 512 KiB; here a key and an attempt's id take about 52, so a
/// chunk holds up to 44 bytes of text, and a long text is kept in many).
const KEEP_BYTES: usize = 96;
/// The longest a hub that keeps text goes without reading its job (the Worker's
/// `Live::check_every_ms`: the retention, `JOB_RETENTION_HOURS = 24` in the model).
const CHECK_MS: u64 = 24 * 3_600_000;

/// How far attempt `n`'s text reads back from a hub's `storage` without a gap, as
/// `Keeper::load` reads it: chunk after chunk from 0.
fn stored_chars(storage: &BTreeMap<String, String>, n: u32) -> u64 {
    let mut chars = 0;
    while let Some((_, text)) = storage
        .get(&Keeper::key(n, chars))
        .and_then(|value| value.split_once('\n'))
    {
        if text.is_empty() {
            break;
        }
        chars += text.chars().count() as u64;
    }
    chars
}

/// How far attempt `n`'s text reads back from a hub's `storage`, as a new instance's
/// `Keeper::load` reads it.
fn read_back(storage: &BTreeMap<String, String>, n: u32) -> u64 {
    let (mut hub, mut keeper) = (Hub::default(), Keeper::every(KEEP_EVERY));
    let entries = storage
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    keeper.load(&mut hub, entries, MAX_CHARS);
    hub.chars(n)
}

/// The model's reading of a job from the store: its position and document, as a
/// stream's first read (or the hub's re-read) gets them; `None` once it is gone.
pub(crate) type Read<'a> = &'a dyn Fn(&str) -> Option<(u64, String)>;

/// What the live channel did in a world.
#[derive(Clone, Copy, Debug, Default)]
pub struct LiveFigures {
    /// Notifications the store sent, and those lost on the way.
    pub told: u64,
    pub lost: u64,
    /// Streams opened, reopened from a position, and events they sent.
    pub opens: u64,
    pub reconnects: u64,
    pub events: u64,
    /// Re-reads of a hub, and restarts of one (its memory and sockets gone).
    pub rereads: u64,
    pub restarts: u64,
    /// Hand-offs of text to a hub, those that failed, and pieces streams sent.
    pub handed: u64,
    pub hand_failed: u64,
    pub pieces: u64,
    /// Hubs evicted between hand-offs (memory gone, sockets open).
    pub evictions: u64,
    /// Chunks of text a hub wrote to its storage, and writes that failed.
    pub kept: u64,
    pub keep_failed: u64,
    /// Of those, the chunks written at an attempt's end (its `unknown` document).
    pub kept_at_end: u64,
    /// A hub's alarm for its kept text read its job (issue 42), and those reads that
    /// found the job settled or gone and deleted the text.
    pub kept_checks: u64,
    pub check_deleted: u64,
    /// Hand-offs the hub refused because the attempt had ended: the call then tells its
    /// dispatcher, which reads the store at once (`host::CallNews::ended`).
    pub refused_ended: u64,
}

impl LiveFigures {
    pub fn add(&mut self, o: &LiveFigures) {
        self.told += o.told;
        self.lost += o.lost;
        self.opens += o.opens;
        self.reconnects += o.reconnects;
        self.events += o.events;
        self.rereads += o.rereads;
        self.restarts += o.restarts;
        self.handed += o.handed;
        self.hand_failed += o.hand_failed;
        self.pieces += o.pieces;
        self.evictions += o.evictions;
        self.kept += o.kept;
        self.keep_failed += o.keep_failed;
        self.kept_at_end += o.kept_at_end;
        self.kept_checks += o.kept_checks;
        self.check_deleted += o.check_deleted;
        self.refused_ended += o.refused_ended;
    }
}

/// A notification on its way to `job`'s hub, there at `due`.
struct Note {
    due: u64,
    job: String,
    seq: u64,
    doc: String,
}

/// One stream the model opened: where it stands, and whether it is open.
#[derive(Default)]
struct Watcher {
    sent: Follower,
    /// The text it holds of each attempt (by id), as its client shows it.
    texts: BTreeMap<String, String>,
    /// The attempts that a document it sent shows ended, kept apart from its
    /// `Follower` so that the check does not rest on what it checks.
    finished: BTreeSet<String>,
    /// The position of the last event it sent (its document was checked when sent).
    last: Option<u64>,
    /// The position of its own store read when it last opened: it never ends older.
    read: Option<u64>,
    connected: bool,
    /// It closed after a settled document (or a reconnect got `204`).
    ended: bool,
}

/// One job's hub and its streams.
struct Home {
    hub: Hub,
    /// What the hub knows of its storage, and the storage itself (which outlives an
    /// eviction and a restart).
    keeper: Keeper,
    storage: BTreeMap<String, String>,
    /// How far each attempt's text was written at its `unknown` document, by `n`: what
    /// the storage must give back whole, to any later instance.
    whole: BTreeMap<u32, u64>,
    watchers: Vec<Watcher>,
    read_at: u64,
    /// The hub's alarm for its kept text (`Live::keep` sets it with a write, at most
    /// [`CHECK_MS`] away): storage, so an eviction or a restart keeps it.
    check_at: Option<u64>,
}

impl Default for Home {
    fn default() -> Self {
        Self {
            hub: Hub::default(),
            keeper: Keeper::every(KEEP_EVERY).within(KEEP_BYTES),
            storage: BTreeMap::new(),
            whole: BTreeMap::new(),
            watchers: Vec::new(),
            read_at: 0,
            check_at: None,
        }
    }
}

impl Home {
    /// A new instance of the hub: its memory is gone, its storage not.
    fn forget(&mut self) {
        self.hub = Hub::default();
        self.keeper = Keeper::every(KEEP_EVERY).within(KEEP_BYTES);
    }

    /// Reads the storage back, once per instance, as `Live::load` does.
    fn load(&mut self) {
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

pub(crate) struct Live {
    rng: RefCell<Rng>,
    /// Every document seen at a position of a job, told or read.
    truth: RefCell<BTreeMap<(String, u64), String>>,
    notes: RefCell<Vec<Note>>,
    homes: RefCell<BTreeMap<String, Home>>,
    /// Each streamed attempt's whole text, as its provider sent it.
    contents: RefCell<BTreeMap<String, String>>,
    /// The most of each streamed attempt's text (by id) its hub said it had, in code
    /// points: what its call's hand-offs got there.
    reached: RefCell<BTreeMap<String, u64>>,
    problems: RefCell<Vec<String>>,
    figures: Cell<LiveFigures>,
}

/// The store's side: what `Store::with_live` is given in the model.
struct Teller(Rc<Live>);

impl Notify for Teller {
    fn notify<'a>(
        &'a self,
        job_id: &'a str,
        seq: u64,
        doc: &'a str,
    ) -> LocalBoxFuture<'a, Result<(), String>> {
        let live = &self.0;
        live.record(job_id, seq, doc, "told");
        live.count(|f| f.told += 1);
        let mut rng = live.rng.borrow_mut();
        if rng.below(LOST_ONE_IN) == 0 {
            live.count(|f| f.lost += 1);
            // Half of them the sender hears of (a failed send, logged); half not.
            let answer = if rng.below(2) == 0 {
                Err("the hub did not answer (simulated)".to_owned())
            } else {
                Ok(())
            };
            return Box::pin(future::ready(answer));
        }
        let due = crate::platform::now_ms() as u64 + rng.below(LATE_MS);
        live.notes.borrow_mut().push(Note {
            due,
            job: job_id.to_owned(),
            seq,
            doc: doc.to_owned(),
        });
        Box::pin(future::ready(Ok(())))
    }
}

fn settled(doc: &str) -> Option<bool> {
    serde_json::from_str::<Job>(doc)
        .ok()
        .map(|j| j.is_settled())
}

impl Live {
    pub(crate) fn new(seed: u64) -> Rc<Self> {
        Rc::new(Self {
            rng: RefCell::new(Rng::new(Rng::derive(seed, 0x11FE))),
            truth: RefCell::new(BTreeMap::new()),
            notes: RefCell::new(Vec::new()),
            homes: RefCell::new(BTreeMap::new()),
            contents: RefCell::new(BTreeMap::new()),
            reached: RefCell::new(BTreeMap::new()),
            problems: RefCell::new(Vec::new()),
            figures: Cell::new(LiveFigures::default()),
        })
    }

    /// What the store is to tell of every move it commits.
    pub(crate) fn teller(self: &Rc<Self>) -> Rc<dyn Notify> {
        Rc::new(Teller(self.clone()))
    }

    pub(crate) fn figures(&self) -> LiveFigures {
        self.figures.get()
    }

    fn count(&self, f: impl FnOnce(&mut LiveFigures)) {
        let mut figures = self.figures.get();
        f(&mut figures);
        self.figures.set(figures);
    }

    fn problem(&self, what: String) {
        self.problems.borrow_mut().push(what);
    }

    /// The promises broken since the last call.
    pub(crate) fn take_problems(&self) -> Vec<String> {
        std::mem::take(&mut *self.problems.borrow_mut())
    }

    /// Document `doc` was seen at position `seq` of `job` (`how`: told, read, sent):
    /// a position has one document.
    pub(crate) fn record(&self, job: &str, seq: u64, doc: &str, how: &str) {
        let mut truth = self.truth.borrow_mut();
        match truth.get(&(job.to_owned(), seq)) {
            Some(known) if known != doc => {
                let what = format!(
                    "two documents at position {seq} of job {job} ({how}): {known} and {doc}"
                );
                drop(truth);
                self.problem(what);
            }
            Some(_) => {}
            None => {
                truth.insert((job.to_owned(), seq), doc.to_owned());
            }
        }
    }

    /// Jobs that have a hub with streams.
    fn watched(&self) -> Vec<String> {
        self.homes
            .borrow()
            .iter()
            .filter(|(_, h)| !h.watchers.is_empty())
            .map(|(j, _)| j.clone())
            .collect()
    }

    /// One stream sends change `seq` if it is newer than what it sent: checked.
    fn send(&self, job: &str, w: &mut Watcher, seq: u64, doc: &str) {
        let Ok(parsed) = serde_json::from_str::<Job>(doc) else {
            return self.problem(format!(
                "a stream of job {job} got a document that is not one: {doc}"
            ));
        };
        // Whether sent or not, its ended attempts are the client's to know: a document
        // not sent is one no newer than what the client has, which shows them ended too
        // (the stream's `Follower::take_job` ends them in its place alike).
        for a in parsed.attempts.iter().filter(|a| a.state.is_final()) {
            w.finished.insert(a.id.clone());
        }
        if !w.sent.take_job(seq, &parsed) {
            return;
        }
        if let Some(at) = w.last {
            if at >= seq {
                self.problem(format!(
                    "a stream of job {job} sent position {seq} after {at}"
                ));
            }
        }
        self.record(job, seq, doc, "sent");
        self.count(|f| f.events += 1);
        w.last = Some(seq);
        match settled(doc) {
            Some(true) => {
                if let Some(read) = w.read.filter(|read| *read > seq) {
                    self.problem(format!(
                        "a stream of job {job} ended at position {seq}, older than its own read at {read}"
                    ));
                }
                w.connected = false;
                w.ended = true;
            }
            Some(false) => {}
            None => self.problem(format!(
                "a stream of job {job} sent a document that is not one: {doc}"
            )),
        }
    }

    /// The hub hears of change `seq`: sent on to its streams if it is the newest yet.
    fn offer(&self, job: &str, home: &mut Home, seq: u64, doc: &str) {
        if !home.hub.offer(seq, doc) {
            return;
        }
        for w in home.watchers.iter_mut().filter(|w| w.connected) {
            self.send(job, w, seq, doc);
        }
        // As `Live::offer` does: an attempt gone `unknown` keeps its whole text.
        self.write(job, home, Writes::after_document());
        if settled(doc) == Some(true) && home.keeper.settle() {
            home.storage.clear();
            home.whole.clear();
        }
    }

    /// Writes what `writes` gives, step by step, as `Live::write` does (`keeping.rs`).
    /// How far the rest of each `unknown` attempt's text was written without a gap is
    /// `whole`. Once every write of the last step went through, every attempt the hub's
    /// newest document shows `unknown` reads back all the hub has of its text.
    fn write(&self, job: &str, home: &mut Home, mut writes: Writes) {
        let mut failed = false;
        while let Some(chunks) = writes.next(&mut home.keeper, &home.hub) {
            let at_end = writes.at_unknown();
            let (written, gaps) = self.keep(home, chunks, at_end);
            if at_end {
                home.whole.extend(written);
            }
            failed = gaps;
        }
        if !failed {
            self.check_whole(job, home);
        }
    }

    /// Every attempt the hub's newest document shows `unknown` (its job not settled)
    /// reads back from storage all the hub has of its text: the operator resolves it
    /// with that, maybe after the hub's instance is gone.
    fn check_whole(&self, job: &str, home: &Home) {
        let Some((_, doc)) = home.hub.catch_up(0) else {
            return;
        };
        if !doc.contains("\"unknown\"") {
            return;
        }
        let Ok(parsed) = serde_json::from_str::<Job>(doc) else {
            return;
        };
        if parsed.is_settled() {
            return;
        }
        let unknown = parsed
            .attempts
            .iter()
            .filter(|a| a.state == AttemptState::Unknown)
            .filter_map(|a| u32::try_from(a.n).ok());
        for n in unknown {
            let (back, has) = (read_back(&home.storage, n), home.hub.chars(n));
            if back < has {
                self.problem(format!(
                    "the hub of job {job} reads back {back} of attempt {n}'s {has} code points though its document shows it unknown: its whole text is not kept"
                ));
            }
        }
    }

    /// Writes a keeper's chunks in order as `Live::keep` does, each failing one time in
    /// `KEEP_FAILS_ONE_IN`: how far each attempt's text was written without a gap, by
    /// `n`, and whether any write failed. Every chunk, written or not, fits what storage
    /// takes (`KEEP_BYTES` here), and each attempt's first begins within the text its
    /// storage gives back without a gap (issue 42: a failed write is never counted as
    /// kept).
    fn keep(
        &self,
        home: &mut Home,
        chunks: Vec<EndChunk>,
        at_end: bool,
    ) -> (BTreeMap<u32, u64>, bool) {
        let mut written = BTreeMap::new();
        let mut gaps = BTreeSet::new();
        for chunk in chunks {
            let (n, chars) = (chunk.n, chunk.chars);
            let bytes = chunk.key.len() + chunk.value.len();
            if bytes > KEEP_BYTES {
                self.problem(format!(
                    "a hub wrote chunk {} of {bytes} bytes, past the {KEEP_BYTES} that storage takes",
                    chunk.key
                ));
            }
            let text = chunk.value.split_once('\n').map_or("", |(_, text)| text);
            let from = chars.saturating_sub(text.chars().count() as u64);
            if !written.contains_key(&n) && !gaps.contains(&n) {
                let stored = stored_chars(&home.storage, n);
                if from > stored {
                    self.problem(format!(
                        "a hub wrote attempt {n}'s text from {from}, past the {stored} code points its storage gives back"
                    ));
                }
            }
            if self.rng.borrow_mut().below(KEEP_FAILS_ONE_IN) == 0 {
                self.count(|f| f.keep_failed += 1);
                gaps.insert(n);
                continue;
            }
            self.count(|f| {
                f.kept += 1;
                f.kept_at_end += u64::from(at_end);
            });
            home.storage.insert(chunk.key, chunk.value);
            home.keeper.wrote(n, chars);
            if !gaps.contains(&n) {
                written.insert(n, chars);
            }
        }
        (written, !gaps.is_empty())
    }

    /// A stream of `job` opens (or a watcher reopens) after position `from`, as
    /// `stream.rs` serves it: the store's read; a settled job's document alone; else the
    /// hub's catch-up (the text the client lacks, then a newer document), then the
    /// read's document if the client lacked it and it is still newer, then the hub's
    /// live changes.
    fn open(&self, job: &str, home: &mut Home, w: &mut Watcher, from: Option<Place>, read: Read) {
        w.connected = false;
        w.ended = false;
        w.sent = Follower::after(from);
        let Some((seq, doc)) = read(job) else {
            w.ended = true; // the purge took it: 404
            return;
        };
        self.record(job, seq, &doc, "read");
        w.read = Some(seq);
        let Ok(parsed) = serde_json::from_str::<Job>(&doc) else {
            return self.problem(format!("job {job} read back as no document: {doc}"));
        };
        w.connected = true;
        if parsed.is_settled() {
            if w.sent.at == Some(seq) {
                w.connected = false;
                w.ended = true; // 204: it has the last change
            }
            return self.send(job, w, seq, &doc);
        }
        let held = if w.sent.at.is_some_and(|had| seq <= had) {
            // The client has this document (or a newer one): it has seen what it ended.
            w.sent.take_job(seq, &parsed);
            for a in parsed.attempts.iter().filter(|a| a.state.is_final()) {
                w.finished.insert(a.id.clone());
            }
            None
        } else {
            Some((seq, doc))
        };
        // What the client saw end before this stream sent anything (its place says so,
        // or the document it has): it wants no more of their text.
        let knew_ended = w.finished.clone();
        home.load();
        let since = w.sent.place().clone();
        for piece in home.hub.text_after(&since) {
            self.piece(job, w, &piece);
        }
        // As `stream.rs` does: the hub's document is sent only if newer than the
        // stream's own read, which it then replaces.
        let mut held = held;
        if let Some((seq, doc)) = home.hub.catch_up(since.seq) {
            if held.as_ref().is_none_or(|(read, _)| seq > *read) {
                held = None;
                let doc = doc.to_owned();
                self.send(job, w, seq, &doc);
            }
        }
        if let Some((seq, doc)) = held {
            if w.connected {
                self.send(job, w, seq, &doc);
            }
        }
        if w.connected {
            self.check_caught_up(job, home, w, &knew_ended);
        }
    }

    /// Where a stream stands, to reconnect from.
    fn place_of(w: &Watcher) -> Option<Place> {
        w.sent.at.map(|_| w.sent.place().clone())
    }

    /// A stream gets a piece of text from its hub: what it sends of it is checked.
    fn piece(&self, job: &str, w: &mut Watcher, piece: &Piece<'_>) {
        if !w.connected {
            return;
        }
        let ended = w.finished.contains(piece.attempt_id);
        let (offset, text) = match w.sent.take_text(piece) {
            Ok(Some(taken)) => taken,
            Ok(None) => return,
            Err(_) => {
                w.connected = false; // a gap: the stream ends, the client resumes
                return;
            }
        };
        if ended {
            self.problem(format!(
                "a stream of job {job} sent text of attempt {} after a document that ended it",
                piece.attempt_id
            ));
        }
        self.count(|f| f.pieces += 1);
        let mine = w.texts.entry(piece.attempt_id.to_owned()).or_default();
        let had = mine.chars().count() as u64;
        if offset != had {
            self.problem(format!(
                "a stream of job {job} sent attempt {}'s text at {offset}, its client has {had}",
                piece.attempt_id
            ));
        }
        mine.push_str(text);
        let whole = self.contents.borrow().get(piece.attempt_id).cloned();
        if !whole.is_some_and(|whole| whole.starts_with(mine.as_str())) {
            self.problem(format!(
                "a stream of job {job} holds {mine:?} of attempt {}: not what its provider sent",
                piece.attempt_id
            ));
        }
    }

    /// One hand-off of a streaming call's text, as the hub of `job` serves it (`POST
    /// /text`): the piece of attempt `n`'s text from code point `offset`, of `whole`, the
    /// text its provider sends. The hub may have been evicted since the last (its memory
    /// gone, its storage kept); one hand-off in `HAND_LOST_ONE_IN` fails.
    pub(crate) fn take(
        &self,
        job: &str,
        n: u32,
        attempt_id: &str,
        offset: u64,
        text: &str,
        whole: &str,
    ) -> Result<Taken, String> {
        self.contents
            .borrow_mut()
            .insert(attempt_id.to_owned(), whole.to_owned());
        let mut homes = self.homes.borrow_mut();
        let home = homes.entry(job.to_owned()).or_default();
        if self.rng.borrow_mut().below(EVICTED_ONE_IN) == 0 {
            self.count(|f| f.evictions += 1);
            home.forget();
        }
        home.load();
        self.count(|f| f.handed += 1);
        if self.rng.borrow_mut().below(HAND_LOST_ONE_IN) == 0 {
            self.count(|f| f.hand_failed += 1);
            return Err("the hub did not answer in time (simulated)".to_owned());
        }
        match keeping::take_text(&mut home.hub, n, attempt_id, offset, text) {
            Ok(piece) => {
                for w in &mut home.watchers {
                    self.piece(job, w, &piece);
                }
                self.write(job, home, Writes::after_text(n));
            }
            Err(Answer::Ended) => {
                self.count(|f| f.refused_ended += 1);
                return Ok(Taken::Stop);
            }
            Err(Answer::HasAll | Answer::Gap) => {}
        }
        let have = home.hub.chars(n);
        let mut reached = self.reached.borrow_mut();
        let most = reached.entry(attempt_id.to_owned()).or_default();
        *most = (*most).max(have);
        Ok(Taken::Have(have))
    }

    /// The hand-off of attempt `attempt_id`'s text (of `job`) ended with the body read,
    /// `chars` code points of it: its hub was handed all of them.
    pub(crate) fn check_handed(&self, job: &str, attempt_id: &str, chars: u64) {
        let reached = self.reached.borrow().get(attempt_id).copied().unwrap_or(0);
        if reached < chars {
            self.problem(format!(
                "the call of attempt {attempt_id} (job {job}) ended its hand-off with its body read and its hub handed {reached} of its {chars} code points: the rest of its text never reached the hub"
            ));
        }
    }

    /// What a client does to the live channel: open a stream on `job`, from the start
    /// or from a position up to `now_at` (the job's), drop one and reconnect it from
    /// its last position, or a hub restarts with streams open.
    pub(crate) fn act(&self, rng: &mut Rng, job: Option<String>, read: Read) {
        let watched = self.watched();
        match rng.below(8) {
            0..=3 => {
                let Some(job) = job else { return };
                let mut homes = self.homes.borrow_mut();
                let home = homes.entry(job.clone()).or_default();
                if home.watchers.len() >= STREAMS_PER_JOB {
                    return;
                }
                let from = match (rng.below(3), read(&job)) {
                    (0, Some((at, _))) => Some(Place::at(rng.below(at + 1))),
                    _ => None,
                };
                self.count(|f| f.opens += 1);
                let mut w = Watcher::default();
                self.open(&job, home, &mut w, from, read);
                home.watchers.push(w);
            }
            4..=6 if !watched.is_empty() => {
                let job = &watched[rng.below(watched.len() as u64) as usize];
                let mut homes = self.homes.borrow_mut();
                let Some(home) = homes.get_mut(job) else {
                    return;
                };
                let i = rng.below(home.watchers.len() as u64) as usize;
                let mut w = std::mem::take(&mut home.watchers[i]);
                self.count(|f| f.reconnects += 1);
                let from = Self::place_of(&w);
                self.open(job, home, &mut w, from, read);
                home.watchers[i] = w;
            }
            7 if !watched.is_empty() => {
                let job = &watched[rng.below(watched.len() as u64) as usize];
                self.restart(job);
            }
            _ => {}
        }
    }

    /// `job`'s hub restarts: what it heard, its sockets and what was on its way are gone.
    fn restart(&self, job: &str) {
        self.count(|f| f.restarts += 1);
        self.notes.borrow_mut().retain(|n| n.job != job);
        if let Some(home) = self.homes.borrow_mut().get_mut(job) {
            home.forget();
            home.read_at = 0;
            for w in &mut home.watchers {
                w.connected = false;
            }
        }
    }

    /// Time has passed: the notifications due arrive (in the order they come due), and
    /// each hub with a stream open re-reads its job every `REREAD_MS`.
    pub(crate) fn tick(&self, now: u64, read: Read) {
        let mut due: Vec<Note> = {
            let mut notes = self.notes.borrow_mut();
            let (due, later) = std::mem::take(&mut *notes)
                .into_iter()
                .partition(|n| n.due <= now);
            *notes = later;
            due
        };
        due.sort_by_key(|n| n.due);
        let mut homes = self.homes.borrow_mut();
        for note in due {
            let home = homes.entry(note.job.clone()).or_default();
            self.offer(&note.job, home, note.seq, &note.doc);
        }
        for (job, home) in homes.iter_mut() {
            if !home.watchers.iter().any(|w| w.connected) || home.read_at + REREAD_MS > now {
                continue;
            }
            home.read_at = now;
            self.count(|f| f.rereads += 1);
            match read(job) {
                Some((seq, doc)) => {
                    self.record(job, seq, &doc, "re-read");
                    self.offer(job, home, seq, &doc);
                }
                None => Self::gone(home),
            }
            // A read of the job: the next check of kept text is a period from it.
            if home.check_at.is_some() {
                home.check_at = Some(now + CHECK_MS);
            }
        }
        for (job, home) in homes.iter_mut() {
            self.kept_alarm(job, home, now, read);
        }
    }

    /// The hub's alarm for its kept text, as `Live::reread` serves it with no stream
    /// open: set with the write that kept text (in the same step: `Live::keep`), gone
    /// with the storage (`deleteAll`); when it comes, the hub reads its job, and the
    /// text goes once the job is settled or gone. While it is not (an `unknown` attempt
    /// waits for its operator) the alarm is set again.
    fn kept_alarm(&self, job: &str, home: &mut Home, now: u64, read: Read) {
        match (home.storage.is_empty(), home.check_at) {
            (true, _) => home.check_at = None,
            (false, None) => home.check_at = Some(now + CHECK_MS),
            (false, Some(at)) if at <= now => {
                self.count(|f| f.kept_checks += 1);
                match read(job) {
                    Some((seq, doc)) => {
                        self.record(job, seq, &doc, "checked");
                        self.offer(job, home, seq, &doc);
                        // Settled, though not news to the hub: emptied all the same.
                        let latest = home.hub.catch_up(0);
                        if latest.is_some_and(|(_, doc)| settled(doc) == Some(true)) {
                            home.keeper.settle();
                            home.storage.clear();
                            home.whole.clear();
                        }
                    }
                    None => Self::gone(home),
                }
                if home.storage.is_empty() {
                    self.count(|f| f.check_deleted += 1);
                    home.check_at = None;
                } else {
                    home.check_at = Some(now + CHECK_MS);
                }
            }
            (false, Some(_)) => {}
        }
    }

    /// The hub read its job gone (purged): what it kept goes, as `Live::reread` does.
    fn gone(home: &mut Home) {
        home.keeper.settle();
        home.storage.clear();
        home.whole.clear();
        home.hub = Hub::default();
    }

    /// The world has settled: every stream still open shows the job's current document,
    /// and every other one, reconnecting from where it stands, gets it or `204`.
    pub(crate) fn settle(&self, read: Read) {
        let mut homes = self.homes.borrow_mut();
        for (job, home) in homes.iter_mut() {
            self.check_outlived(job, home, read);
            let Some((seq, _)) = read(job) else { continue };
            self.check_kept(job, home);
            let mut watchers = std::mem::take(&mut home.watchers);
            for w in &mut watchers {
                if w.connected {
                    self.check_current(job, w, seq, "an open stream");
                }
                let from = Self::place_of(w);
                self.open(job, home, w, from, read);
                self.check_current(job, w, seq, "a reconnected stream");
            }
            home.watchers = watchers;
        }
    }

    /// A stream open on a job still moving has all the text its hub has (the hub may
    /// have lost some, which the stream still holds): a reconnect after an attempt
    /// ended still got what that attempt sent before it ended, unless the client had
    /// seen it end before (`knew_ended`), and wants no more of it.
    fn check_caught_up(&self, job: &str, home: &Home, w: &Watcher, knew_ended: &BTreeSet<String>) {
        for piece in home.hub.text_after(&Place::default()) {
            if knew_ended.contains(piece.attempt_id) {
                continue;
            }
            let mine = w.texts.get(piece.attempt_id).map_or("", String::as_str);
            if !mine.starts_with(piece.text) {
                self.problem(format!(
                    "a stream of job {job} holds {mine:?} of attempt {}, its hub {:?}: text lost on the way",
                    piece.attempt_id, piece.text
                ));
            }
        }
    }

    /// A hub that heard its job settle keeps none of its text: the storage is emptied,
    /// and no late hand-off writes to it again. What the hub keeps otherwise is the
    /// provider's text, chunk after chunk from 0.
    fn check_kept(&self, job: &str, home: &Home) {
        let heard_settled = home
            .hub
            .catch_up(0)
            .is_some_and(|(_, doc)| settled(doc) == Some(true));
        if heard_settled && !home.storage.is_empty() {
            self.problem(format!(
                "the hub of settled job {job} still keeps text: {:?}",
                home.storage.keys().collect::<Vec<_>>()
            ));
        }
        let mut fresh = (Hub::default(), Keeper::every(KEEP_EVERY));
        let entries = home
            .storage
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        fresh.1.load(&mut fresh.0, entries, MAX_CHARS);
        for (n, chars) in &home.whole {
            if fresh.0.chars(*n) < *chars {
                self.problem(format!(
                    "the hub of job {job} wrote attempt {n}'s text to {chars} code points when it went unknown, and reads back {}",
                    fresh.0.chars(*n)
                ));
            }
        }
        for (key, value) in &home.storage {
            let Some((attempt_id, _)) = value.split_once('\n') else {
                continue;
            };
            let n = key
                .split('/')
                .nth(1)
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            let back = fresh.0.text_of(n).unwrap_or_default();
            let whole = self.contents.borrow().get(attempt_id).cloned();
            if !whole.is_some_and(|whole| whole.starts_with(back)) {
                self.problem(format!(
                    "the hub of job {job} keeps {back:?} of attempt {attempt_id}: not what its provider sent"
                ));
            }
        }
    }

    /// Kept text never outlives its job (issue 42): every hub that keeps text, whether
    /// or not it heard its job settle, has its alarm set, and once that alarm has come
    /// (the world has settled, and time passes), keeps none of a job that is settled or
    /// gone. The hub of a job still `unknown` keeps its attempt's text.
    fn check_outlived(&self, job: &str, home: &mut Home, read: Read) {
        if home.storage.is_empty() {
            return;
        }
        let Some(at) = home.check_at else {
            return self.problem(format!(
                "the hub of job {job} keeps text with no alarm to read its job again: {:?}",
                home.storage.keys().collect::<Vec<_>>()
            ));
        };
        self.kept_alarm(job, home, at, read);
        let left = match read(job) {
            _ if home.storage.is_empty() => None,
            None => Some("gone"),
            Some((_, doc)) if settled(&doc) == Some(true) => Some("settled"),
            Some(_) => None,
        };
        if let Some(how) = left {
            self.problem(format!(
                "the hub of {how} job {job} still keeps text after its alarm: {:?}",
                home.storage.keys().collect::<Vec<_>>()
            ));
        }
    }

    /// A stream stands at the store's position `seq` (the document it sent there was
    /// checked against every other seen at that position when it was sent).
    fn check_current(&self, job: &str, w: &Watcher, seq: u64, who: &str) {
        if w.sent.at != Some(seq) {
            self.problem(format!(
                "{who} of job {job} stands at position {:?}, the store is at {seq}: a change lost",
                w.sent.at
            ));
        }
    }
}
