//! The streams a client opens on a job's hub, from the start or from a position, drops
//! and reconnects, as `stream.rs` serves them; and what each one sends, checked as it
//! sends it.

use super::hub::{HubObject, Stream};
use super::{settled, Live, Read};
use onceclick_protocol::live::{Follower, Piece, Place};
use onceclick_protocol::Job;
use std::collections::BTreeSet;

impl Live {
    /// One stream sends change `seq` if it is newer than what it sent: checked.
    pub(super) fn send(&self, job: &str, w: &mut Stream, seq: u64, doc: &str) {
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

    /// A stream of `job` opens (or a stream reopens) after position `from`, as
    /// `stream.rs` serves it: the store's read; a settled job's document alone; else the
    /// hub's catch-up (the text the client lacks, then a newer document), then the
    /// read's document if the client lacked it and it is still newer, then the hub's
    /// live changes.
    pub(super) fn open(
        &self,
        job: &str,
        object: &mut HubObject,
        w: &mut Stream,
        from: Option<Place>,
        read: Read,
    ) {
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
        object.load();
        let since = w.sent.place().clone();
        for piece in object.hub.text_after(&since) {
            self.piece(job, w, &piece);
        }
        // As `stream.rs` does: the hub's document is sent only if newer than the
        // stream's own read, which it then replaces.
        let mut held = held;
        if let Some((seq, doc)) = object.hub.catch_up(since.seq) {
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
            self.check_caught_up(job, object, w, &knew_ended);
            // As `Live::subscribe` does: a call at the slow pace hands on now.
            self.poke(object);
        }
    }

    /// Where a stream stands, to reconnect from.
    pub(super) fn place_of(w: &Stream) -> Option<Place> {
        w.sent.at.map(|_| w.sent.place().clone())
    }

    /// A stream gets a piece of text from its hub: what it sends of it is checked.
    pub(super) fn piece(&self, job: &str, w: &mut Stream, piece: &Piece<'_>) {
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

    /// A stream open on a job still moving has all the text its hub has (the hub may
    /// have lost some, which the stream still holds): a reconnect after an attempt
    /// ended still got what that attempt sent before it ended, unless the client had
    /// seen it end before (`knew_ended`), and wants no more of it.
    fn check_caught_up(
        &self,
        job: &str,
        object: &HubObject,
        w: &Stream,
        knew_ended: &BTreeSet<String>,
    ) {
        for piece in object.hub.text_after(&Place::default()) {
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

    /// A stream stands at the store's position `seq` (the document it sent there was
    /// checked against every other seen at that position when it was sent).
    pub(super) fn check_current(&self, job: &str, w: &Stream, seq: u64, who: &str) {
        if w.sent.at != Some(seq) {
            self.problem(format!(
                "{who} of job {job} stands at position {:?}, the store is at {seq}: a change lost",
                w.sent.at
            ));
        }
    }
}
