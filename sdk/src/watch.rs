//! The jobs this client follows live, and who waits on each: one connection
//! (`GET /v1/stream?job=…`) carries them all, however many `wait`s are open, and
//! reopens with each job's position when a job joins.
//!
//! This module holds only the bookkeeping; the connection itself is the client's
//! (`Client::run_stream`), and the tabs that share it meet in `share.rs`. Each `wait`
//! gets a [`Mailbox`] that the connection fills: every newer document of its job, in
//! order, or word to poll instead. While this client leads, it also follows the jobs
//! other tabs want ([`Watching::want`]) and posts what it hears to them.

use crate::js;
use onceclick_protocol::JobStatus;
use std::cell::RefCell;
use std::rc::Rc;
use wasm_bindgen::JsValue;
use wasm_bindgen_futures::JsFuture;

/// The most jobs one stream follows (`onceclick_protocol::live::MAX_STREAM_JOBS`); a
/// job beyond them is polled.
pub(crate) const MAX_JOBS: usize = onceclick_protocol::live::MAX_STREAM_JOBS;

/// What a wait hears.
pub(crate) enum Update {
    /// A newer document of its job.
    Job(JsValue),
    /// A piece of an attempt's text that the wait lacks: the attempt, the code points
    /// before it, the piece.
    Text(String, f64, String),
    /// The stream cannot be had: poll, starting after this position.
    Poll(Option<String>),
}

/// One wait's queue of updates, and the promise resolver of a wait asleep on it.
#[derive(Default)]
pub(crate) struct Mailbox {
    /// Oldest first; a wait takes them as fast as they come, so this stays short.
    items: Vec<Update>,
    wake: Option<js_sys::Function>,
}

pub(crate) type Shared = Rc<RefCell<Mailbox>>;

/// Queues `update` and wakes whoever sleeps on `mailbox`.
pub(crate) fn put(mailbox: &Shared, update: Update) {
    let wake = {
        let mut m = mailbox.borrow_mut();
        m.items.push(update);
        m.wake.take()
    };
    if let Some(wake) = wake {
        let _ = wake.call0(&JsValue::NULL);
    }
}

/// A promise that `wake` (stored by the caller) resolves, and the resolver.
pub(crate) fn signal() -> (js_sys::Promise, js_sys::Function) {
    let mut resolver = None;
    let promise = js_sys::Promise::new(&mut |resolve, _| resolver = Some(resolve));
    // The executor runs at once, so the resolver is always set.
    (promise, resolver.unwrap_or_else(js_sys::Function::default))
}

/// The next update in `mailbox`, waiting for one.
pub(crate) async fn take(mailbox: &Shared) -> Update {
    loop {
        {
            let mut m = mailbox.borrow_mut();
            if !m.items.is_empty() {
                return m.items.remove(0);
            }
        }
        let (promise, wake) = signal();
        mailbox.borrow_mut().wake = Some(wake);
        let _ = JsFuture::from(promise).await;
    }
}

struct Watched {
    id: String,
    /// The position of the last document the stream gave, and that document.
    last: Option<(String, JsValue)>,
    /// Where the stream stands for this job (`7/1:40`): the last document's counter
    /// and the code points of each attempt's text had, as the last event's id said.
    /// The next connection resumes from it.
    at: Option<String>,
    /// Whether a piece came that began past the text held (dropped: it cannot be
    /// placed): until the next connection `at` keeps only the counter, so that
    /// connection sends each attempt's text from its start, and the part missed is
    /// filled in rather than skipped for good.
    gap: bool,
    /// Each attempt's text so far, until the job is final: what a wait or tab that
    /// joins late is given first, and what each piece is trimmed against.
    texts: Vec<(String, String)>,
    waiters: Vec<(u32, Shared)>,
    /// The other tabs that follow this job through this one's connection, while it
    /// leads.
    tabs: Vec<f64>,
}

/// The jobs followed, and the connection's state.
pub(crate) struct Watching {
    jobs: Vec<Watched>,
    next_waiter: u32,
    /// Whether a connection loop runs.
    pub(crate) running: bool,
    /// Resolves the open connection's interrupt: the set of jobs changed.
    interrupt: Option<js_sys::Function>,
    /// Aborts the open connection's fetch, so that an interrupt also ends a request
    /// whose answer has not come.
    abort: Option<JsValue>,
    /// This client's name among the tabs (`share.rs`), and its part: `None` alone or
    /// following, the channel to the other tabs while it leads.
    pub(crate) tab: f64,
    pub(crate) leading: Option<JsValue>,
    /// Whether another tab's connection serves this client: then every change of the
    /// set of jobs is announced, a job that leaves included.
    pub(crate) following: bool,
}

impl Default for Watching {
    fn default() -> Watching {
        Watching {
            jobs: Vec::new(),
            next_waiter: 0,
            running: false,
            interrupt: None,
            abort: None,
            tab: js_sys::Math::random(),
            leading: None,
            following: false,
        }
    }
}

impl Watching {
    /// Adds a wait on `job_id`: its mailbox (holding the job's last document if the
    /// stream already gave one), its number, and whether a connection must be started.
    pub(crate) fn watch(&mut self, job_id: &str) -> (u32, Shared, bool) {
        let number = self.next_waiter;
        self.next_waiter = self.next_waiter.wrapping_add(1);
        let mailbox = Shared::default();
        let full = self.jobs.len() >= MAX_JOBS;
        match self.jobs.iter_mut().find(|j| j.id == job_id) {
            Some(job) => {
                for (attempt, text) in &job.texts {
                    put(&mailbox, Update::Text(attempt.clone(), 0.0, text.clone()));
                }
                if let Some((_, doc)) = &job.last {
                    put(&mailbox, Update::Job(doc.clone()));
                }
                job.waiters.push((number, mailbox.clone()));
            }
            // A stream is full: this job is polled, and the stream left as it is.
            None if full => put(&mailbox, Update::Poll(None)),
            None => {
                self.jobs.push(Watched::new(
                    job_id.to_owned(),
                    vec![(number, mailbox.clone())],
                    Vec::new(),
                ));
                self.interrupt();
            }
        }
        let start = !std::mem::replace(&mut self.running, true);
        (number, mailbox, start)
    }

    /// Removes wait `number` on `job_id`; a job nobody waits on (here or in a tab this
    /// one leads) is dropped at the next connection, and the connection closes when no
    /// job is left.
    pub(crate) fn unwatch(&mut self, job_id: &str, number: u32) {
        if let Some(job) = self.jobs.iter_mut().find(|j| j.id == job_id) {
            job.waiters.retain(|(n, _)| *n != number);
        }
        self.prune();
    }

    /// Drops the jobs nobody follows; interrupts when none is left, or, following,
    /// when any left (the leader hears of it).
    fn prune(&mut self) {
        let before = self.jobs.len();
        self.jobs
            .retain(|j| !j.waiters.is_empty() || !j.tabs.is_empty());
        if self.jobs.is_empty() || (self.following && self.jobs.len() < before) {
            self.interrupt();
        }
    }

    /// Leading: tab `tab` now follows exactly `ids`. A job already followed is posted
    /// to it at once (its last document; the tab stays on it unless that document ends
    /// its wait); a new one joins the connection, or is told to poll when the stream is
    /// full, counted after the jobs the tab left are gone.
    pub(crate) fn want(&mut self, tab: f64, ids: &js_sys::Array) {
        let Some(channel) = self.leading.clone() else {
            return;
        };
        if !tab.is_finite() {
            return;
        }
        for job in &mut self.jobs {
            let wants = ids.includes(&JsValue::from_str(&job.id), 0);
            job.tabs.retain(|t| *t != tab);
            if !wants {
                continue;
            }
            // The text so far first (a stream's catch-up may bring it before the job's
            // first document), then the document. Without a place of its own (text heard
            // while following, before any document), the text goes at place `0`.
            let place = job.at.as_deref().unwrap_or("0");
            for (attempt, text) in &job.texts {
                post_text(&channel, place, &job.id, attempt, 0.0, text);
            }
            match &job.last {
                Some((at, doc)) => {
                    post_job(&channel, at, doc);
                    if !waits_end(doc) {
                        job.tabs.push(tab);
                    }
                }
                None => job.tabs.push(tab),
            }
        }
        self.jobs
            .retain(|j| !j.waiters.is_empty() || !j.tabs.is_empty());
        let mut joined = false;
        for id in ids.iter().filter_map(|id| id.as_string()) {
            if self.jobs.iter().any(|j| j.id == id) {
                continue;
            }
            if self.jobs.len() >= MAX_JOBS {
                post_poll(&channel, &id);
                continue;
            }
            self.jobs.push(Watched::new(id, Vec::new(), vec![tab]));
            joined = true;
        }
        // A job joined, or none is left: the connection reopens, or closes. A job that
        // left is dropped at the next reopen.
        if joined || self.jobs.is_empty() {
            self.interrupt();
        }
    }

    /// The jobs this client's own waits follow, as a following tab announces them.
    pub(crate) fn own(&self) -> js_sys::Array {
        self.jobs
            .iter()
            .filter(|j| !j.waiters.is_empty())
            .map(|j| JsValue::from_str(&j.id))
            .collect()
    }

    /// Following: a promise that says the set of jobs changed, as `connect` gives one.
    pub(crate) fn next_change(&mut self) -> js_sys::Promise {
        let (promise, wake) = signal();
        self.interrupt = Some(wake);
        promise
    }

    pub(crate) fn interrupt(&mut self) {
        if let Some(wake) = self.interrupt.take() {
            // `true`, which `live::Stream::next` tells from its timer's `undefined`.
            let _ = wake.call1(&JsValue::NULL, &JsValue::TRUE);
        }
        if let Some(abort) = self.abort.take() {
            let _ = crate::js::call(&abort, "abort", &[]);
        }
    }

    /// Whether the open connection was interrupted (so its failure is no failure).
    pub(crate) fn interrupted(&self) -> bool {
        self.interrupt.is_none()
    }

    /// The next connection's query (`job=ID:POSITION&…`), and the promise that says the
    /// set of jobs changed since (which also aborts `abort`, the connection's
    /// `AbortController`); `None` when no job is left (the loop ends). Jobs beyond
    /// [`MAX_JOBS`] are told to poll.
    pub(crate) fn connect(&mut self, abort: JsValue) -> Option<(String, js_sys::Promise)> {
        if self.jobs.len() > MAX_JOBS {
            for job in self.jobs.drain(MAX_JOBS..) {
                tell_poll(job, self.leading.as_ref());
            }
        }
        if self.jobs.is_empty() {
            self.running = false;
            return None;
        }
        let mut query = String::new();
        for job in &mut self.jobs {
            // This connection sends each attempt's text from its start where a piece
            // was missed: the gap is filled.
            job.gap = false;
            if !query.is_empty() {
                query.push('&');
            }
            query.push_str("job=");
            query.push_str(&String::from(js_sys::encode_uri_component(&job.id)));
            if let Some(at) = &job.at {
                query.push(':');
                query.push_str(at);
            }
        }
        let (promise, wake) = signal();
        self.interrupt = Some(wake);
        self.abort = Some(abort);
        Some((query, promise))
    }

    /// A `job` event (from the stream, or from the tab that leads): hands the document
    /// to its job's waits if it is newer than the last they had, and, leading, to the
    /// other tabs. Returns whether it was newer. Once the document ends a wait, the
    /// other tabs have what they waited for, and the job follows on only for them if
    /// they ask again.
    pub(crate) fn deliver(&mut self, id: &str, job_id: &str, doc: &JsValue) -> bool {
        let Some(job) = self.jobs.iter_mut().find(|j| j.id == job_id) else {
            return false; // a job nobody waits on any more
        };
        if job
            .last
            .as_ref()
            .is_some_and(|(seen, _)| !crate::live::after(seq(id), seq(seen)))
        {
            return false;
        }
        job.last = Some((id.to_owned(), doc.clone()));
        job.stand(id, self.following);
        if status_of(doc).is_some_and(JobStatus::is_final) {
            job.texts = Vec::new();
        }
        for (_, mailbox) in &job.waiters {
            put(mailbox, Update::Job(doc.clone()));
        }
        // Posted only where another tab follows the job: a tab learns only of the jobs
        // it asked for.
        if let (Some(channel), false) = (&self.leading, job.tabs.is_empty()) {
            post_job(channel, id, doc);
            if waits_end(doc) {
                job.tabs.clear();
                self.prune();
            }
        }
        true
    }

    /// A piece of `attempt`'s text at `offset` code points (a `delta` event, or the tab
    /// that leads), at place `id`: hands what is new of it to the job's waits and,
    /// leading, to the other tabs that follow the job. What they already have is cut
    /// off (a reconnect from a place that counts less text, a restarted hub that sends
    /// its kept text from the start), so each text only grows; a piece that begins past
    /// the text's end cannot be placed, and is dropped. Returns whether it was new.
    pub(crate) fn deliver_text(
        &mut self,
        id: &str,
        job_id: &str,
        attempt: &str,
        offset: f64,
        text: &str,
    ) -> bool {
        let Some(job) = self.jobs.iter_mut().find(|j| j.id == job_id) else {
            return false;
        };
        if job
            .last
            .as_ref()
            .is_some_and(|(_, doc)| status_of(doc).is_some_and(JobStatus::is_final))
        {
            return false;
        }
        let at = match job.texts.iter().position(|(a, _)| a == attempt) {
            Some(at) => at,
            None => {
                job.texts.push((attempt.to_owned(), String::new()));
                job.texts.len() - 1
            }
        };
        let have = &mut job.texts[at].1;
        let count = have.chars().count() as u64;
        let new = match (0.0..=count as f64).contains(&offset) {
            true => onceclick_protocol::live::after_chars(text, count - offset as u64),
            false => {
                job.gap = true;
                job.at = job.at.as_deref().map(|at| seq(at).to_owned());
                ""
            }
        };
        if new.is_empty() {
            // Nothing of it is kept: a text that stays empty is no text.
            job.texts.retain(|(_, t)| !t.is_empty());
            return false;
        }
        have.push_str(new);
        job.stand(id, self.following);
        let count = count as f64;
        for (_, mailbox) in &job.waiters {
            put(
                mailbox,
                Update::Text(attempt.to_owned(), count, new.to_owned()),
            );
        }
        if let (Some(channel), false) = (&self.leading, job.tabs.is_empty()) {
            post_text(channel, id, job_id, attempt, count, new);
        }
        true
    }

    /// `job_id` cannot be followed live (the tab that leads says so, or the stream's
    /// refusal names it): its waits poll, and so do the tabs this one leads for it.
    /// Returns whether this client followed it.
    pub(crate) fn poll_one(&mut self, job_id: &str) -> bool {
        let Some(at) = self.jobs.iter().position(|j| j.id == job_id) else {
            return false;
        };
        tell_poll(self.jobs.remove(at), self.leading.as_ref());
        true
    }

    /// The stream cannot be had: every wait polls from its job's position, and the loop
    /// ends. With `everyone`, the tabs this one leads for are told to poll too: the
    /// failure is the stream's (a server without it, a proxy that buffers it, a rate
    /// limit, a network that keeps failing), and would be the next leader's as well.
    /// Without it (this client's token, its request), their jobs are let go without a
    /// word: the next tab to lead takes them up when they announce them again.
    pub(crate) fn fall_back(&mut self, everyone: bool) {
        let channel = self.leading.clone().filter(|_| everyone);
        for job in self.jobs.drain(..) {
            tell_poll(job, channel.as_ref());
        }
        self.running = false;
    }
}

impl Watched {
    /// Job `id`, followed by `waiters` here and by the tabs `tabs`, before the stream
    /// has said anything of it.
    fn new(id: String, waiters: Vec<(u32, Shared)>, tabs: Vec<f64>) -> Watched {
        Watched {
            id,
            last: None,
            at: None,
            gap: false,
            texts: Vec::new(),
            waiters,
            tabs,
        }
    }

    /// The stream stands at place `id` for this job: all of it, or, when the place may
    /// count text this client lacks, only the counter of the last document it has (none
    /// without one): a piece was missed (`gap`), or the place is the leading tab's
    /// (`following`), whose messages this tab may hear before the leader answers its
    /// `want` with the text and the document so far. A tab that then leads reconnects
    /// from that counter, and is sent the documents it lacks and each attempt's text
    /// from its start.
    fn stand(&mut self, id: &str, following: bool) {
        self.at = match self.gap || following {
            true => self.last.as_ref().map(|(at, _)| seq(at).to_owned()),
            false => Some(id.to_owned()),
        };
    }
}

/// Tells the waits on `job` to poll, from its position, and the tabs that follow it
/// through `channel` to poll from theirs.
fn tell_poll(job: Watched, channel: Option<&JsValue>) {
    if let (Some(channel), false) = (channel, job.tabs.is_empty()) {
        post_poll(channel, &job.id);
    }
    let at = job.last.map(|(at, _)| seq(&at).to_owned());
    for (_, mailbox) in job.waiters {
        put(&mailbox, Update::Poll(at.clone()));
    }
}

/// The job's `status`, read off the server's JSON.
pub(crate) fn status_of(job: &JsValue) -> Option<JobStatus> {
    JobStatus::from_wire(&js::get_string(job, "status")?)
}

/// Whether `wait` resolves at `job`: finished, or waiting for a decision.
pub(crate) fn waits_end(job: &JsValue) -> bool {
    matches!(
        status_of(job),
        Some(JobStatus::Succeeded | JobStatus::Cancelled | JobStatus::Failed | JobStatus::Unknown)
    )
}

/// Leading: posts the document `doc`, at position `at`, to the other tabs.
pub(crate) fn post_job(channel: &JsValue, at: &str, doc: &JsValue) {
    post(
        channel,
        &[("t", "job".into()), ("id", at.into()), ("job", doc.clone())],
    );
}

/// The document counter of place `id` (`7` of `7/1:40`).
pub(crate) fn seq(id: &str) -> &str {
    id.split('/').next().unwrap_or_default()
}

/// Leading: posts a piece of `attempt`'s text in job `job_id`, at place `at`, to the
/// other tabs.
fn post_text(channel: &JsValue, at: &str, job_id: &str, attempt: &str, offset: f64, text: &str) {
    post(
        channel,
        &[
            ("t", "text".into()),
            ("id", at.into()),
            ("of", job_id.into()),
            ("attempt", attempt.into()),
            ("offset", offset.into()),
            ("text", text.into()),
        ],
    );
}

/// Leading: tells the other tabs to follow `job_id` by polling.
fn post_poll(channel: &JsValue, job_id: &str) {
    post(channel, &[("t", "poll".into()), ("job", job_id.into())]);
}

/// Posts the message `members` on `channel` (a `BroadcastChannel`).
pub(crate) fn post(channel: &JsValue, members: &[(&str, JsValue)]) {
    let _ = js::call(channel, "postMessage", &[js::object(members)]);
}

#[cfg(all(test, target_arch = "wasm32"))]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    /// The query of the next connection.
    fn query(w: &mut Watching) -> String {
        w.connect(JsValue::NULL).map(|(q, _)| q).unwrap_or_default()
    }

    /// The texts in `mailbox`, as (attempt, offset, text).
    fn texts(mailbox: &Shared) -> Vec<(String, f64, String)> {
        mailbox
            .borrow()
            .items
            .iter()
            .filter_map(|u| match u {
                Update::Text(a, o, t) => Some((a.clone(), *o, t.clone())),
                _ => None,
            })
            .collect()
    }

    #[wasm_bindgen_test]
    fn a_piece_past_the_text_held_makes_the_next_connection_resend_the_text_from_its_start() {
        let mut w = Watching::default();
        let (_, mailbox, _) = w.watch("job_1");
        assert_eq!(query(&mut w), "job=job_1");
        assert!(w.deliver("3", "job_1", &JsValue::from(js_sys::Object::new())));
        assert!(w.deliver_text("3/1:5", "job_1", "att_a", 0.0, "hello"));
        assert_eq!(query(&mut w), "job=job_1:3/1:5");
        // Code points 5 to 9 were missed: the piece cannot be placed.
        assert!(!w.deliver_text("3/1:12", "job_1", "att_a", 9.0, "xyz"));
        // Another attempt's piece that fits, at a place that still counts 12 of the
        // first's: resuming after it would skip the missed part for good, so only the
        // counter is kept until the next connection.
        assert!(w.deliver_text("3/1:12/2:2", "job_1", "att_b", 0.0, "ok"));
        assert_eq!(query(&mut w), "job=job_1:3");
        // That connection sends the text from its start; what is held is cut off.
        assert!(w.deliver_text("3/1:12/2:2", "job_1", "att_a", 0.0, "hello, world"));
        assert_eq!(query(&mut w), "job=job_1:3/1:12/2:2");
        assert_eq!(
            texts(&mailbox),
            vec![
                ("att_a".to_owned(), 0.0, "hello".to_owned()),
                ("att_b".to_owned(), 0.0, "ok".to_owned()),
                ("att_a".to_owned(), 5.0, ", world".to_owned()),
            ]
        );
    }

    #[wasm_bindgen_test]
    fn a_tab_that_leads_gives_a_tab_that_joins_the_text_it_heard_before_any_document() {
        let mut w = Watching::default();
        w.watch("job_1");
        w.following = true;
        assert!(w.deliver_text("4/1:2", "job_1", "att_a", 0.0, "xx"));
        // It leads now; a tab announces the job. (A channel that keeps what is posted.)
        w.following = false;
        let channel = js_sys::Object::new();
        let sent = js_sys::Array::new();
        let _ = js_sys::Reflect::set(&channel, &"sent".into(), &sent);
        let post = js_sys::Function::new_with_args("m", "this.sent.push(m)");
        let _ = js_sys::Reflect::set(&channel, &"postMessage".into(), &post);
        w.leading = Some(channel.into());
        w.want(1.0, &js_sys::Array::of1(&"job_1".into()));
        let texts: Vec<String> = sent
            .iter()
            .filter(|m| js::get_string(m, "t").as_deref() == Some("text"))
            .filter_map(|m| js::get_string(&m, "text"))
            .collect();
        assert_eq!(texts, vec!["xx".to_owned()]);
    }

    #[wasm_bindgen_test]
    fn a_following_tab_keeps_only_the_counter_of_the_leaders_places() {
        let mut w = Watching::default();
        let (_, mailbox, _) = w.watch("job_1");
        w.following = true;
        // A piece heard before this tab has any document of the job: the leader's
        // place names a document this tab lacks, so it claims none.
        assert!(w.deliver_text("4/1:2", "job_1", "att_a", 0.0, "xx"));
        assert_eq!(query(&mut w), "job=job_1");
        assert!(w.deliver("4/1:2", "job_1", &JsValue::from(js_sys::Object::new())));
        // The leader's place counts its text, which this tab may hear before the
        // leader answers its `want` with the text so far: so it may lack some of it.
        assert!(w.deliver_text("4/1:40", "job_1", "att_a", 2.0, &"x".repeat(38)));
        assert_eq!(texts(&mailbox).len(), 2);
        // Leading next, it reconnects from the counter and is sent each text whole.
        w.following = false;
        assert_eq!(query(&mut w), "job=job_1:4");
        assert!(w.deliver_text("4/1:42", "job_1", "att_a", 40.0, "yy"));
        assert_eq!(query(&mut w), "job=job_1:4/1:42");
    }
}
