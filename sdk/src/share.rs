//! One live connection per browser, not one per tab. The clients of one API and one
//! owner in the tabs of one origin queue for the Web Lock
//! `onceclick-stream/2:<baseUrl>:<owner>`, and meet on the `BroadcastChannel` of the
//! same name. The owner is the token's `sub`, or the token itself when it has none: a
//! tab never hears of another owner's jobs, nor streams them. Version 2 since the
//! messages' ids became places (`7/1:40`): a tab on an older SDK, which reads them as
//! positions, queues apart rather than drop every document.
//!
//! - The client that holds the lock **leads**. It runs the connection for its own jobs
//!   and for every job the others want, and posts each document it hears to them.
//! - The others **follow**. Each announces the whole set of jobs its waits follow, at
//!   every change, and takes the documents the leader posts, filtered by position as
//!   the stream's own are: never an older one, never one twice.
//! - A tab that closes releases the lock, and says it follows nothing any more (on
//!   `pagehide`); one restored from the back/forward cache announces its set again
//!   (on `pageshow`). The next in line leads: it asks the others
//!   for their jobs, and reconnects from its own positions. A job another tab announces
//!   joins from no position, so its first event is the current document, which the
//!   tab's filter drops if it already had it.
//!
//! The messages: `{t: "want", tab, jobs: [id…]}`, a follower's whole set;
//! `{t: "who"}`, a new leader asking for those; `{t: "job", id, job}`, a document at
//! its place; `{t: "text", id, of, attempt, offset, text}`, a piece of an attempt's
//! text in job `of` (a tab that joins is first given each attempt's text so far, at
//! offset 0, then the document); `{t: "poll", job}`, follow that job by polling.
//!
//! Where the browser lacks either API (Web Locks needs a secure context; `localhost`
//! is one), each client runs its own connection.

use crate::js;
use crate::live;
use crate::watch::{self, Watching};
use std::cell::RefCell;
use std::future::Future;
use std::rc::Rc;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

/// Runs the connection of `watching`'s jobs: `lead` (the connection itself), once this
/// client leads the tabs of `base_url` and `owner`, or at once where tabs cannot share.
pub(crate) async fn run(
    watching: Rc<RefCell<Watching>>,
    base_url: &str,
    owner: Option<&str>,
    lead: impl Future<Output = ()>,
) {
    let name = [
        "onceclick-stream/2:",
        base_url,
        ":",
        owner.unwrap_or_default(),
    ]
    .concat();
    let Some(tabs) = Tabs::meet(&name, owner, &watching) else {
        return lead.await;
    };
    // The lock is held until `release` is called. A request the browser refuses (a
    // sandboxed frame) counts as granted: this client then leads alone.
    let (granted, grant) = watch::signal();
    let (held, release) = watch::signal();
    let request = js::locked(&name, move || {
        let _ = grant.call0(&JsValue::NULL);
        held
    });
    // `request` settles only once the lock is released, or rejects at once.
    let granted = js_sys::Promise::race(&js_sys::Array::of2(&granted, &request));
    // Follows the tab that leads until this client holds the lock: announces the whole
    // set of jobs its waits follow, again at every change. (Here, not in an `async fn`
    // of its own, for the package's size: see `Client::run_stream`.)
    watching.borrow_mut().following = true;
    loop {
        let (jobs, change) = {
            let mut w = watching.borrow_mut();
            (w.own(), w.next_change())
        };
        want(&tabs.channel, tabs.tab, jobs);
        let raced = js_sys::Promise::race(&js_sys::Array::of2(&granted, &change));
        // The change resolves to `true`; the lock, to anything else (a refusal rejects).
        if JsFuture::from(raced).await.ok() != Some(JsValue::TRUE) {
            break;
        }
    }
    // Leads: runs the connection for this client's jobs and the other tabs', until no
    // job is left.
    tabs.lead(&watching);
    lead.await;
    watching.borrow_mut().leading = None;
    tabs.leave();
    let _ = release.call0(&JsValue::NULL);
}

/// The `BroadcastChannel` where this client meets the other tabs, and what it listens
/// to while it is there: the channel's messages, and the page's `pagehide` and
/// `pageshow`.
struct Tabs {
    channel: JsValue,
    /// This client's name among the tabs.
    tab: f64,
    hear: Closure<dyn FnMut(JsValue)>,
    gone: Closure<dyn FnMut(JsValue)>,
    back: Closure<dyn FnMut(JsValue)>,
}

impl Tabs {
    /// Opens the channel `name` and listens, where tabs can share: the browser has Web
    /// Locks and `BroadcastChannel`, and the owner is known.
    fn meet(name: &str, owner: Option<&str>, watching: &Rc<RefCell<Watching>>) -> Option<Tabs> {
        let locks = js::get(&js::get(&js::global(), "navigator"), "locks");
        let channel = match locks.is_object() && owner.is_some() {
            true => js::construct_with("BroadcastChannel", &[JsValue::from_str(name)]).ok(),
            false => None,
        }?;
        let hear = {
            let watching = watching.clone();
            Closure::<dyn FnMut(JsValue)>::new(move |event: JsValue| {
                if let Ok(mut watching) = watching.try_borrow_mut() {
                    heard(&mut watching, &js::get(&event, "data"));
                }
            })
        };
        let _ = js_sys::Reflect::set(&channel, &"onmessage".into(), hear.as_ref());
        let tab = watching.borrow().tab;
        // A tab that goes says so, so that the leader stops following its jobs.
        let gone = {
            let channel = channel.clone();
            Closure::<dyn FnMut(JsValue)>::new(move |_: JsValue| {
                want(&channel, tab, js_sys::Array::new());
            })
        };
        // A tab restored from the back/forward cache announces its jobs again: the
        // leader heard it go on `pagehide`, and may be another tab by now.
        let back = {
            let watching = watching.clone();
            Closure::<dyn FnMut(JsValue)>::new(move |event: JsValue| {
                if js::get(&event, "persisted").is_truthy() {
                    if let Ok(mut watching) = watching.try_borrow_mut() {
                        watching.interrupt();
                    }
                }
            })
        };
        let tabs = Tabs {
            channel,
            tab,
            hear,
            gone,
            back,
        };
        tabs.listen("addEventListener");
        Some(tabs)
    }

    /// Adds (or removes) the page's listeners, by `method`.
    fn listen(&self, method: &str) {
        for (event, listener) in [("pagehide", &self.gone), ("pageshow", &self.back)] {
            let _ = js::call(
                &js::global(),
                method,
                &[event.into(), listener.as_ref().clone()],
            );
        }
    }

    /// Takes the lead of the tabs: the connection now serves the jobs they want, and
    /// posts them what it hears. Asks them for those jobs.
    fn lead(&self, watching: &RefCell<Watching>) {
        {
            let mut w = watching.borrow_mut();
            w.following = false;
            w.leading = Some(self.channel.clone());
        }
        watch::post(&self.channel, &[("t", "who".into())]);
    }

    /// Stops listening and closes the channel.
    fn leave(self) {
        self.listen("removeEventListener");
        let _ = js_sys::Reflect::set(&self.channel, &"onmessage".into(), &JsValue::NULL);
        let _ = js::call(&self.channel, "close", &[]);
        drop((self.hear, self.gone, self.back));
    }
}

/// Posts this tab's whole set of jobs (`{t: "want", tab, jobs}`) on `channel`.
fn want(channel: &JsValue, tab: f64, jobs: js_sys::Array) {
    watch::post(
        channel,
        &[
            ("t", "want".into()),
            ("tab", tab.into()),
            ("jobs", jobs.into()),
        ],
    );
}

/// The place (`id`) a message from the tab that leads names, if it is one.
fn place(message: &JsValue) -> Option<String> {
    js::get_string(message, "id").filter(|id| live::is_position(watch::seq(id)))
}

/// A message from another tab. Only a follower takes documents; only the leader takes
/// announcements (`Watching::want` ignores them otherwise).
fn heard(watching: &mut Watching, message: &JsValue) {
    match js::get_string(message, "t").as_deref() {
        Some("want") => {
            let Some(tab) = js::get(message, "tab").as_f64() else {
                return;
            };
            if let Ok(jobs) = js::get(message, "jobs").dyn_into() {
                watching.want(tab, &jobs);
            }
        }
        Some("who") if watching.following => watching.interrupt(),
        Some("job") if watching.following => {
            let job = js::get(message, "job");
            if let (Some(id), Some(job_id)) = (place(message), js::get_string(&job, "id")) {
                // Already said by a leading tab of this version; said again for a tab of
                // an older one, which does not.
                crate::failure::annotate(&job);
                watching.deliver(&id, &job_id, &job);
            }
        }
        Some("text") if watching.following => {
            let text = |name| js::get_string(message, name);
            if let (Some(id), Some(job_id), Some(attempt), Some(offset), Some(piece)) = (
                place(message),
                text("of"),
                text("attempt"),
                js::get(message, "offset").as_f64(),
                text("text"),
            ) {
                watching.deliver_text(&id, &job_id, &attempt, offset, &piece);
            }
        }
        // Taken leading too: word from the tab that led before this one, which the lock
        // may reach first.
        Some("poll") => {
            if let Some(job_id) = js::get_string(message, "job") {
                // Leading, the connection reopens without it (or closes, if it was the
                // last): it may have been sent with it already.
                if watching.poll_one(&job_id) && watching.leading.is_some() {
                    watching.interrupt();
                }
            }
        }
        _ => {}
    }
}
