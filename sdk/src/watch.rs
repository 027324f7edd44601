//! The jobs this client follows live, and who waits on each: one connection
//! (`GET /v1/stream?job=…`) carries them all, however many `wait`s are open, and
//! reopens with each job's position when a job joins.
//!
//! This module holds only the bookkeeping; the connection itself is the client's
//! (`Client::run_stream`). Each `wait` gets a [`Mailbox`] that the connection fills:
//! every newer document of its job, in order, or word to poll instead.

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
    waiters: Vec<(u32, Shared)>,
}

/// The jobs followed, and the connection's state.
#[derive(Default)]
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
                if let Some((_, doc)) = &job.last {
                    put(&mailbox, Update::Job(doc.clone()));
                }
                job.waiters.push((number, mailbox.clone()));
            }
            // A stream is full: this job is polled, and the stream left as it is.
            None if full => put(&mailbox, Update::Poll(None)),
            None => {
                self.jobs.push(Watched {
                    id: job_id.to_owned(),
                    last: None,
                    waiters: vec![(number, mailbox.clone())],
                });
                self.interrupt();
            }
        }
        let start = !std::mem::replace(&mut self.running, true);
        (number, mailbox, start)
    }

    /// Removes wait `number` on `job_id`; a job nobody waits on is dropped at the next
    /// connection, and the connection closes when no job is left.
    pub(crate) fn unwatch(&mut self, job_id: &str, number: u32) {
        if let Some(job) = self.jobs.iter_mut().find(|j| j.id == job_id) {
            job.waiters.retain(|(n, _)| *n != number);
        }
        self.jobs.retain(|j| !j.waiters.is_empty());
        if self.jobs.is_empty() {
            self.interrupt();
        }
    }

    fn interrupt(&mut self) {
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
                tell_poll(job);
            }
        }
        if self.jobs.is_empty() {
            self.running = false;
            return None;
        }
        let mut query = String::new();
        for job in &self.jobs {
            if !query.is_empty() {
                query.push('&');
            }
            query.push_str("job=");
            query.push_str(&String::from(js_sys::encode_uri_component(&job.id)));
            if let Some((at, _)) = &job.last {
                query.push(':');
                query.push_str(at);
            }
        }
        let (promise, wake) = signal();
        self.interrupt = Some(wake);
        self.abort = Some(abort);
        Some((query, promise))
    }

    /// A `job` event: hands the document to its job's waits if it is newer than the
    /// last they had. Returns whether it was.
    pub(crate) fn deliver(&mut self, id: &str, job_id: &str, doc: &JsValue) -> bool {
        let Some(job) = self.jobs.iter_mut().find(|j| j.id == job_id) else {
            return false; // a job nobody waits on any more
        };
        if job
            .last
            .as_ref()
            .is_some_and(|(seen, _)| !crate::live::after(id, seen))
        {
            return false;
        }
        job.last = Some((id.to_owned(), doc.clone()));
        for (_, mailbox) in &job.waiters {
            put(mailbox, Update::Job(doc.clone()));
        }
        true
    }

    /// The stream was refused (a 400, a 404, a 429…). When some job has not yet been
    /// seen on it, the refusal is taken for theirs: they poll (where the poll reports
    /// what is wrong with them, a `not_found` say), and `true` says the others go on
    /// live. Otherwise `false`: the stream itself is refused.
    pub(crate) fn drop_unseen(&mut self) -> bool {
        if self.jobs.iter().all(|j| j.last.is_none()) {
            return false;
        }
        let (unseen, seen): (Vec<Watched>, Vec<Watched>) =
            self.jobs.drain(..).partition(|j| j.last.is_none());
        self.jobs = seen;
        let any = !unseen.is_empty();
        unseen.into_iter().for_each(tell_poll);
        any
    }

    /// The stream cannot be had: every wait polls from its job's position, and the loop
    /// ends.
    pub(crate) fn fall_back(&mut self) {
        for job in self.jobs.drain(..) {
            tell_poll(job);
        }
        self.running = false;
    }
}

fn tell_poll(job: Watched) {
    let at = job.last.map(|(at, _)| at);
    for (_, mailbox) in job.waiters {
        put(&mailbox, Update::Poll(at.clone()));
    }
}
