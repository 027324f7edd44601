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
//!   world settles and that alarm has come, no hub keeps text of a settled or gone job;
//! - a claim's notification is not on the way to the first text (issue 49): the store's
//!   requests to hubs take virtual time (`SENT_IN_MS`), and no provider call begins
//!   after the request that tells its hub of its attempt's claim came back.
//!
//! Its parts:
//! - `figures.rs` — what the live channel did in a world.
//! - `notifier.rs` — what the store tells the hubs: lost, late, out of order.
//! - `hub.rs` — one job's hub object: its memory, its storage, its alarm, the streams
//!   on it; and the changes it hears.
//! - `streams.rs` — the streams a client opens, drops and reconnects, and what each
//!   sends.
//! - `text.rs` — a streaming call's text handed to the hub, and what the hub keeps of
//!   it.
//! - `kept.rs` — kept text never outlives its job: the hub's alarm, and the checks once
//!   the world settles.

mod figures;
mod hub;
mod kept;
mod notifier;
mod streams;
mod text;

pub use figures::LiveFigures;
pub(crate) use text::CallSide;

use crate::exec::Exec;
use crate::rng::Rng;
use hub::HubObject;
use hub::Stream;
use notifier::{Notification, Notifier};
use onceclick_core::host::Notify;
use onceclick_protocol::live::Place;
use onceclick_protocol::{AttemptState, Job};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

/// How often a hub with streams open re-reads its job (the Worker's `LIVE_REREAD_MS`).
const REREAD_MS: u64 = 5_000;
/// The longest a notification is on its way, in virtual ms.
const LATE_MS: u64 = 400;
/// One notification in this many is lost (an isolate that died after the commit).
const LOST_ONE_IN: u64 = 8;
/// The longest the store's request to a hub takes to come back, in virtual ms (at least
/// 1): what a sender that awaits it waits.
const SENT_IN_MS: u64 = 8;
/// Streams the model opens on one job.
const STREAMS_PER_JOB: usize = 4;
/// One hand-off of text in this many fails (the hub did not answer in time).
const HAND_LOST_ONE_IN: u64 = 16;
/// One connection of a call to its hub in this many cannot be opened, and one in this
/// many drops before a piece (a network cut; a hub's restart closes it too).
const OPEN_FAILS_ONE_IN: u64 = 24;
const DROPPED_ONE_IN: u64 = 24;
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

/// The model's reading of a job from the store: its position and document, as a
/// stream's first read (or the hub's re-read) gets them; `None` once it is gone.
pub(crate) type Read<'a> = &'a dyn Fn(&str) -> Option<(u64, String)>;

/// The live channel of one world: every job's hub object, the notifications on their
/// way to them, and what the checks know (each position's document, each streamed
/// attempt's text).
pub(crate) struct Live {
    rng: RefCell<Rng>,
    /// Every document seen at a position of a job, told or read.
    truth: RefCell<BTreeMap<(String, u64), String>>,
    notifications: RefCell<Vec<Notification>>,
    objects: RefCell<BTreeMap<String, HubObject>>,
    /// Each streamed attempt's whole text, as its provider sent it.
    contents: RefCell<BTreeMap<String, String>>,
    /// The most of each streamed attempt's text (by id) its hub said it had, in code
    /// points: what its call's hand-offs got there.
    reached: RefCell<BTreeMap<String, u64>>,
    problems: RefCell<Vec<String>>,
    figures: Cell<LiveFigures>,
    /// By a store's notifier and an attempt: where that store's telling of the claim
    /// stands (the first document it sent that showed the attempt running) against the
    /// attempt's provider call.
    claims_told: RefCell<BTreeMap<(u64, String), ClaimTold>>,
    /// The followed notifiers made so far (each one's name is its number).
    senders: Cell<u64>,
}

/// Where a store's telling of a claim stands, against its provider call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ClaimTold {
    /// Sent, not come back: the call may begin.
    OnItsWay,
    /// Come back: a call that begins now waited for it.
    Back,
    /// The call began, and the store has not told the claim yet.
    CallFirst,
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
            notifications: RefCell::new(Vec::new()),
            objects: RefCell::new(BTreeMap::new()),
            contents: RefCell::new(BTreeMap::new()),
            reached: RefCell::new(BTreeMap::new()),
            problems: RefCell::new(Vec::new()),
            figures: Cell::new(LiveFigures::default()),
            claims_told: RefCell::new(BTreeMap::new()),
            senders: Cell::new(0),
        })
    }

    /// What a store is to tell of every move it commits, and its name (0 for a store
    /// whose claims are not `followed`: no provider call of it is checked); its
    /// requests take virtual time on `exec`.
    pub(crate) fn notifier(
        self: &Rc<Self>,
        exec: &Rc<Exec>,
        followed: bool,
    ) -> (Rc<dyn Notify>, u64) {
        let sender = match followed {
            true => {
                self.senders.set(self.senders.get() + 1);
                self.senders.get()
            }
            false => 0,
        };
        let notifier = Notifier {
            live: self.clone(),
            exec: exec.clone(),
            sender,
        };
        (Rc::new(notifier), sender)
    }

    /// The attempts `doc` is the first document from `sender` to show running: their
    /// claims' (an attempt runs only once claimed), now on their way; a claim whose call
    /// began already is counted and followed no further.
    fn claims_in(&self, sender: u64, doc: &str) -> Vec<(u64, String)> {
        if sender == 0 {
            return Vec::new();
        }
        let Ok(job) = serde_json::from_str::<Job>(doc) else {
            return Vec::new();
        };
        let mut told = self.claims_told.borrow_mut();
        let mut claims = Vec::new();
        for attempt in job.attempts {
            if attempt.state != AttemptState::Running {
                continue;
            }
            let key = (sender, attempt.id);
            match told.get(&key) {
                None => {
                    told.insert(key.clone(), ClaimTold::OnItsWay);
                    claims.push(key);
                }
                Some(ClaimTold::CallFirst) => {
                    told.remove(&key);
                    self.count(|f| f.calls_beside += 1);
                }
                Some(_) => {}
            }
        }
        claims
    }

    /// The store's requests that told these claims came back.
    fn claims_back(&self, claims: &[(u64, String)]) {
        let mut told = self.claims_told.borrow_mut();
        for claim in claims {
            if let Some(state @ ClaimTold::OnItsWay) = told.get_mut(claim) {
                *state = ClaimTold::Back;
            }
        }
    }

    /// Attempt `attempt_id`'s provider call begins, made by the delivery whose store is
    /// `sender`: that store's request that tells the hub of the claim must not have come
    /// back, since the dispatcher sends it beside the call, as the call's watch begins
    /// (`dispatch::call_and_record`).
    pub(crate) fn call_begins(&self, sender: u64, attempt_id: &str) {
        let key = (sender, attempt_id.to_owned());
        let mut told = self.claims_told.borrow_mut();
        match told.get(&key) {
            Some(ClaimTold::Back) => {
                told.remove(&key);
                drop(told);
                self.problem(format!(
                    "the provider call of {attempt_id} began after its claim's notification \
                     came back from the hub: a request to the hub on the way to its first text"
                ));
            }
            Some(ClaimTold::OnItsWay) => {
                told.remove(&key);
            }
            Some(ClaimTold::CallFirst) => {}
            None => {
                told.insert(key, ClaimTold::CallFirst);
            }
        }
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
        self.objects
            .borrow()
            .iter()
            .filter(|(_, h)| !h.streams.is_empty())
            .map(|(j, _)| j.clone())
            .collect()
    }

    /// What a client does to the live channel: open a stream on `job`, from the start
    /// or from a position up to `now_at` (the job's), drop one and reconnect it from
    /// its last position, or a hub restarts with streams open.
    pub(crate) fn act(&self, rng: &mut Rng, job: Option<String>, read: Read) {
        let watched = self.watched();
        match rng.below(8) {
            0..=3 => {
                let Some(job) = job else { return };
                let mut objects = self.objects.borrow_mut();
                let object = objects.entry(job.clone()).or_default();
                if object.streams.len() >= STREAMS_PER_JOB {
                    return;
                }
                let from = match (rng.below(3), read(&job)) {
                    (0, Some((at, _))) => Some(Place::at(rng.below(at + 1))),
                    _ => None,
                };
                self.count(|f| f.opens += 1);
                let mut w = Stream::default();
                self.open(&job, object, &mut w, from, read);
                object.streams.push(w);
            }
            4..=6 if !watched.is_empty() => {
                let job = &watched[rng.below(watched.len() as u64) as usize];
                let mut objects = self.objects.borrow_mut();
                let Some(object) = objects.get_mut(job) else {
                    return;
                };
                let i = rng.below(object.streams.len() as u64) as usize;
                let mut w = std::mem::take(&mut object.streams[i]);
                self.count(|f| f.reconnects += 1);
                let from = Self::place_of(&w);
                self.open(job, object, &mut w, from, read);
                object.streams[i] = w;
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
        self.notifications.borrow_mut().retain(|n| n.job != job);
        if let Some(object) = self.objects.borrow_mut().get_mut(job) {
            object.forget();
            object.restarts += 1;
            object.calls.clear();
            object.read_at = 0;
            for w in &mut object.streams {
                w.connected = false;
            }
        }
    }

    /// Time has passed: the notifications due arrive (in the order they come due), and
    /// each hub with a stream open re-reads its job every `REREAD_MS`.
    pub(crate) fn tick(&self, now: u64, read: Read) {
        let mut due: Vec<Notification> = {
            let mut notifications = self.notifications.borrow_mut();
            let (due, later) = std::mem::take(&mut *notifications)
                .into_iter()
                .partition(|n| n.due <= now);
            *notifications = later;
            due
        };
        due.sort_by_key(|n| n.due);
        let mut objects = self.objects.borrow_mut();
        for note in due {
            let object = objects.entry(note.job.clone()).or_default();
            self.offer(&note.job, object, note.seq, &note.doc);
        }
        for (job, object) in objects.iter_mut() {
            if !object.streams.iter().any(|w| w.connected) || object.read_at + REREAD_MS > now {
                continue;
            }
            object.read_at = now;
            self.count(|f| f.rereads += 1);
            match read(job) {
                Some((seq, doc)) => {
                    self.record(job, seq, &doc, "re-read");
                    self.offer(job, object, seq, &doc);
                }
                None => Self::gone(object),
            }
            // A read of the job: the next check of kept text is a period from it.
            if object.check_at.is_some() {
                object.check_at = Some(now + CHECK_MS);
            }
        }
        for (job, object) in objects.iter_mut() {
            self.kept_alarm(job, object, now, read);
        }
    }

    /// The world has settled: every stream still open shows the job's current document,
    /// and every other one, reconnecting from where it stands, gets it or `204`.
    pub(crate) fn settle(&self, read: Read) {
        let mut objects = self.objects.borrow_mut();
        for (job, object) in objects.iter_mut() {
            self.check_outlived(job, object, read);
            let Some((seq, _)) = read(job) else { continue };
            self.check_kept(job, object);
            let mut streams = std::mem::take(&mut object.streams);
            for w in &mut streams {
                if w.connected {
                    self.check_current(job, w, seq, "an open stream");
                }
                let from = Self::place_of(w);
                self.open(job, object, w, from, read);
                self.check_current(job, w, seq, "a reconnected stream");
            }
            object.streams = streams;
        }
    }
}
