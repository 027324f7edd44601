//! A streaming call's text on its way to the job's hub (a message on the call's
//! connection, which may fail to open, drop, or be closed by a restart), taken as the
//! Worker's hub takes it (`keeping.rs`), and what the hub writes of it to its storage
//! (`keeping::Writes`), each write failing now and then.

use super::hub::HubObject;
use super::{
    Live, DROPPED_ONE_IN, EVICTED_ONE_IN, HAND_LOST_ONE_IN, KEEP_BYTES, KEEP_EVERY,
    KEEP_FAILS_ONE_IN, OPEN_FAILS_ONE_IN,
};
use futures_channel::mpsc::UnboundedReceiver;
use onceclick_core::keeping::{self, Answer, Writes};
use onceclick_core::pacing::HubAnswer;
use onceclick_protocol::chat::MAX_CHARS;
use onceclick_protocol::live::{EndChunk, Hub, Keeper};
use onceclick_protocol::{AttemptState, Job};
use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

/// What the hub's poke check knows of a streaming call (`handing.rs` keeps it). A poke
/// that finds the call with text the hub lacks finds it waiting out its interval (it
/// hands on at once otherwise, with no wait between): the call must hear the poke and
/// end that wait, rather than hand on when the interval for a job nobody watches is out.
/// Said in order, not in time, so that the model's scheduling cannot make it fail.
#[derive(Default)]
pub(crate) struct CallSide {
    /// The code points the call has read, as its hand-off last saw.
    pub(crate) read: Cell<u64>,
    /// The code points the hub last told it it has.
    pub(crate) believed: Cell<u64>,
    /// Its last open or hand-off failed: it waits out a pause, which a poke does not cut.
    pub(crate) pausing: Cell<bool>,
    /// A poke found it with text to hand on, and it has not handed on since.
    due: Cell<bool>,
    /// It has heard a poke since then.
    pub(crate) heard: Cell<bool>,
    /// Its body is read: it hands the rest on at once, poke or none.
    pub(crate) body_read: Cell<bool>,
}

/// A call's connection to its hub, opened: the hub's restarts then (a later one closes
/// it), and the pokes it hears.
pub(crate) struct Connection {
    pub(crate) restarts: u64,
    pub(crate) pokes: UnboundedReceiver<()>,
}

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

impl Live {
    /// A call (`call`) opens a connection to the hub of `job`, or says why it could not
    /// be opened.
    pub(crate) fn connect(&self, job: &str, call: &Rc<CallSide>) -> Result<Connection, String> {
        self.count(|f| f.connections += 1);
        if self.rng.borrow_mut().below(OPEN_FAILS_ONE_IN) == 0 {
            self.count(|f| f.open_failed += 1);
            return Err("the hub's connection could not be opened (simulated)".to_owned());
        }
        let mut objects = self.objects.borrow_mut();
        let object = objects.entry(job.to_owned()).or_default();
        let (poke, pokes) = futures_channel::mpsc::unbounded();
        object.calls.push((poke, call.clone()));
        Ok(Connection {
            restarts: object.restarts,
            pokes,
        })
    }

    /// The hub tells each call on it to hand on now (a stream subscribed, or a document
    /// came), as `Live::poke` does; a call that then has text to hand on is due to.
    pub(super) fn poke(&self, object: &mut HubObject) {
        object.calls.retain(|(poke, call)| {
            if poke.unbounded_send(()).is_err() {
                return false; // the call closed it
            }
            self.count(|f| f.pokes += 1);
            let lacks = call.read.get() > call.believed.get() && !call.pausing.get();
            if lacks && !call.due.get() {
                self.count(|f| f.pokes_due += 1);
                call.due.set(true);
                call.heard.set(false);
            }
            true
        });
    }

    /// A call (`call`, of attempt `attempt_id`) hands on a piece: if a poke found it
    /// with text to hand on, it heard that poke first (see [`CallSide`]).
    pub(crate) fn check_poked(&self, call: &CallSide, attempt_id: &str) {
        if call.due.take() && !call.heard.get() && !call.body_read.get() {
            self.problem(format!(
                "the call of attempt {attempt_id} held back its text after its hub poked it (a stream subscribed, or a document came): it waited out its interval, and a late viewer waits out the pace for a job nobody watches"
            ));
        }
    }

    /// Whether a call's connection to the hub of `job`, opened after `restarts`
    /// restarts, is still open as the call sends a piece on it: a restart since closed
    /// it, and a cut drops one now and then.
    pub(crate) fn still_open(&self, job: &str, restarts: u64) -> bool {
        let now = self.objects.borrow().get(job).map_or(0, |o| o.restarts);
        let open = now == restarts && self.rng.borrow_mut().below(DROPPED_ONE_IN) != 0;
        if !open {
            self.count(|f| f.dropped += 1);
        }
        open
    }

    /// One hand-off of a streaming call's text, as the hub of `job` serves it (a message
    /// on the call's connection): the piece of attempt `n`'s text from code point `offset`, of `whole`, the
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
    ) -> Result<HubAnswer, String> {
        self.contents
            .borrow_mut()
            .insert(attempt_id.to_owned(), whole.to_owned());
        let mut objects = self.objects.borrow_mut();
        let object = objects.entry(job.to_owned()).or_default();
        if self.rng.borrow_mut().below(EVICTED_ONE_IN) == 0 {
            self.count(|f| f.evictions += 1);
            object.forget();
        }
        object.load();
        self.count(|f| f.handed += 1);
        if self.rng.borrow_mut().below(HAND_LOST_ONE_IN) == 0 {
            self.count(|f| f.hand_failed += 1);
            return Err("the hub did not answer in time (simulated)".to_owned());
        }
        match keeping::take_text(&mut object.hub, n, attempt_id, offset, text) {
            Ok(piece) => {
                for w in &mut object.streams {
                    self.piece(job, w, &piece);
                }
                self.write(job, object, Writes::after_text(n));
            }
            Err(Answer::Ended) => {
                self.count(|f| f.refused_ended += 1);
                return Ok(HubAnswer::Stop);
            }
            Err(Answer::HasAll | Answer::Gap) => {}
        }
        let have = object.hub.chars(n);
        let mut reached = self.reached.borrow_mut();
        let most = reached.entry(attempt_id.to_owned()).or_default();
        *most = (*most).max(have);
        // As `Live::hand` answers: alone when no stream watches.
        if object.streams.iter().any(|w| w.connected) {
            return Ok(HubAnswer::Have(have));
        }
        self.count(|f| f.alone += 1);
        Ok(HubAnswer::Alone(have))
    }

    /// A call's hand-off ended having opened `opens` connections to its hub, `failed`
    /// of its opens and sends having failed: one, and one more only after a failure,
    /// within the core's bound.
    pub(crate) fn check_opens(&self, attempt_id: &str, opens: u32, failed: u32) {
        if opens > 1 + failed || opens > onceclick_core::hand_on::MAX_OPENS {
            self.problem(format!(
                "the call of attempt {attempt_id} opened {opens} connections to its hub with {failed} failures (at most {} a call)",
                onceclick_core::hand_on::MAX_OPENS
            ));
        }
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

    /// The call of `attempt_id` gave up its hand-off though its hub had taken every
    /// piece whole: nothing failed, so its streams should have had all of its text.
    pub(crate) fn gave_up_though_taken(&self, job: &str, attempt_id: &str) {
        self.problem(format!(
            "the call of attempt {attempt_id} (job {job}) gave up its hand-off though its hub took every piece it was handed: its streams see the rest of its text only in the result"
        ));
    }

    /// Writes what `writes` gives, step by step, as `Live::write` does (`keeping.rs`).
    /// How far the rest of each `unknown` attempt's text was written without a gap is
    /// `whole`. Once every write of the last step went through, every attempt the hub's
    /// newest document shows `unknown` reads back all the hub has of its text.
    pub(super) fn write(&self, job: &str, object: &mut HubObject, mut writes: Writes) {
        let mut failed = false;
        while let Some(chunks) = writes.next(&mut object.keeper, &object.hub) {
            let at_end = writes.at_unknown();
            let (written, gaps) = self.keep(object, chunks, at_end);
            if at_end {
                object.whole.extend(written);
            }
            failed = gaps;
        }
        if !failed {
            self.check_whole(job, object);
        }
    }

    /// Every attempt the hub's newest document shows `unknown` (its job not settled)
    /// reads back from storage all the hub has of its text: the operator resolves it
    /// with that, maybe after the hub's instance is gone.
    fn check_whole(&self, job: &str, object: &HubObject) {
        let Some((_, doc)) = object.hub.catch_up(0) else {
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
            let (back, has) = (read_back(&object.storage, n), object.hub.chars(n));
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
        object: &mut HubObject,
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
                let stored = stored_chars(&object.storage, n);
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
            object.storage.insert(chunk.key, chunk.value);
            object.keeper.wrote(n, chars);
            if !gaps.contains(&n) {
                written.insert(n, chars);
            }
        }
        (written, !gaps.is_empty())
    }
}
