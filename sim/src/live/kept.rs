//! Kept text never outlives its job (issue 42): the hub's alarm for what it keeps, which
//! reads its job and empties the storage once the job is settled or gone; and, once
//! the world settles, the checks of what every hub still keeps.

use super::hub::HubObject;
use super::{settled, Live, Read, CHECK_MS, KEEP_EVERY};
use onceclick_protocol::chat::MAX_CHARS;
use onceclick_protocol::live::{Hub, Keeper};

impl Live {
    /// The hub's alarm for its kept text, as `Live::reread` serves it with no stream
    /// open: set with the write that kept text (in the same step: `Live::keep`), gone
    /// with the storage (`deleteAll`); when it comes, the hub reads its job, and the
    /// text goes once the job is settled or gone. While it is not (an `unknown` attempt
    /// waits for its operator) the alarm is set again.
    pub(super) fn kept_alarm(&self, job: &str, object: &mut HubObject, now: u64, read: Read) {
        match (object.storage.is_empty(), object.check_at) {
            (true, _) => object.check_at = None,
            (false, None) => object.check_at = Some(now + CHECK_MS),
            (false, Some(at)) if at <= now => {
                self.count(|f| f.kept_checks += 1);
                match read(job) {
                    Some((seq, doc)) => {
                        self.record(job, seq, &doc, "checked");
                        self.offer(job, object, seq, &doc);
                        // Settled, though not news to the hub: emptied all the same.
                        let latest = object.hub.catch_up(0);
                        if latest.is_some_and(|(_, doc)| settled(doc) == Some(true)) {
                            object.keeper.settle();
                            object.storage.clear();
                            object.whole.clear();
                        }
                    }
                    None => Self::gone(object),
                }
                if object.storage.is_empty() {
                    self.count(|f| f.check_deleted += 1);
                    object.check_at = None;
                } else {
                    object.check_at = Some(now + CHECK_MS);
                }
            }
            (false, Some(_)) => {}
        }
    }

    /// The hub read its job gone (purged): what it kept goes, as `Live::reread` does.
    pub(super) fn gone(object: &mut HubObject) {
        object.keeper.settle();
        object.storage.clear();
        object.whole.clear();
        object.hub = Hub::default();
    }

    /// A hub that heard its job settle keeps none of its text: the storage is emptied,
    /// and no late hand-off writes to it again. What the hub keeps otherwise is the
    /// provider's text, chunk after chunk from 0.
    pub(super) fn check_kept(&self, job: &str, object: &HubObject) {
        let heard_settled = object
            .hub
            .catch_up(0)
            .is_some_and(|(_, doc)| settled(doc) == Some(true));
        if heard_settled && !object.storage.is_empty() {
            self.problem(format!(
                "the hub of settled job {job} still keeps text: {:?}",
                object.storage.keys().collect::<Vec<_>>()
            ));
        }
        let mut fresh = (Hub::default(), Keeper::every(KEEP_EVERY));
        let entries = object
            .storage
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        fresh.1.load(&mut fresh.0, entries, MAX_CHARS);
        for (n, chars) in &object.whole {
            if fresh.0.chars(*n) < *chars {
                self.problem(format!(
                    "the hub of job {job} wrote attempt {n}'s text to {chars} code points when it went unknown, and reads back {}",
                    fresh.0.chars(*n)
                ));
            }
        }
        for (key, value) in &object.storage {
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
    pub(super) fn check_outlived(&self, job: &str, object: &mut HubObject, read: Read) {
        if object.storage.is_empty() {
            return;
        }
        let Some(at) = object.check_at else {
            return self.problem(format!(
                "the hub of job {job} keeps text with no alarm to read its job again: {:?}",
                object.storage.keys().collect::<Vec<_>>()
            ));
        };
        self.kept_alarm(job, object, at, read);
        let left = match read(job) {
            _ if object.storage.is_empty() => None,
            None => Some("gone"),
            Some((_, doc)) if settled(&doc) == Some(true) => Some("settled"),
            Some(_) => None,
        };
        if let Some(how) = left {
            self.problem(format!(
                "the hub of {how} job {job} still keeps text after its alarm: {:?}",
                object.storage.keys().collect::<Vec<_>>()
            ));
        }
    }
}
