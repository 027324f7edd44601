//! The page-wide single flight: concurrent submits of one intent share one request,
//! each with its own signal and `onRetry`.

use crate::error::OnceclickError;
use crate::http::Policy;
use crate::js;
use js_sys::Promise;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use wasm_bindgen::prelude::*;

thread_local! {
    /// In-flight submits of this page, by intent: one request each, shared by every
    /// submit of that intent until it settles. A few at most, so a list (a hash map
    /// costs the SDK a kilobyte).
    static FLIGHTS: RefCell<Vec<(String, Rc<Flight>)>> = const { RefCell::new(Vec::new()) };
}

/// One request, shared by the concurrent submits of one intent. It runs under its own
/// signal, so that one submit's abort does not end it for the others.
pub(crate) struct Flight {
    /// The request's outcome, for every submit waiting on it.
    pub(crate) promise: Promise,
    /// Its `AbortController`: aborted once every submit waiting on it has been aborted.
    controller: JsValue,
    /// Submits still waiting on it.
    waiters: Cell<u32>,
    /// The `onRetry` of every submit still waiting on it.
    on_retry: Callbacks,
}

type Callbacks = Rc<RefCell<Vec<js_sys::Function>>>;

impl Flight {
    /// A submit waits on it: it hears of its retries too.
    pub(crate) fn join(&self, on_retry: Option<&js_sys::Function>) {
        self.waiters.set(self.waiters.get() + 1);
        if let Some(callback) = on_retry {
            self.on_retry.borrow_mut().push(callback.clone());
        }
    }

    /// A waiter was aborted: it stops hearing of retries; the last one ends the request.
    pub(crate) fn leave(flight: &Rc<Flight>, on_retry: Option<&js_sys::Function>) {
        if let Some(callback) = on_retry {
            let mut list = flight.on_retry.borrow_mut();
            let target: &JsValue = callback;
            if let Some(i) = list.iter().position(|f| {
                let f: &JsValue = f;
                f == target
            }) {
                list.remove(i);
            }
        }
        flight.waiters.set(flight.waiters.get().saturating_sub(1));
        if flight.waiters.get() == 0 {
            let _ = js::call(&flight.controller, "abort", &[]);
            land(flight);
        }
    }
}

/// Starts the one request of `intent` on this page, under its own signal: `send` gets
/// that signal in its policy and runs holding the intent's Web Lock.
pub(crate) fn take_off(
    intent: &str,
    send: impl FnOnce(Policy) -> Promise + 'static,
) -> Result<Rc<Flight>, OnceclickError> {
    let (controller, signal) = js::abort_controller()?;
    let policy = Policy {
        signal: Some(signal),
        on_retry: Callbacks::default(),
    };
    let on_retry = policy.on_retry.clone();
    let promise = js::locked(intent, move || send(policy));
    let flight = Rc::new(Flight {
        promise,
        controller,
        waiters: Cell::new(0),
        on_retry,
    });
    FLIGHTS.with(|f| f.borrow_mut().push((intent.to_owned(), flight.clone())));
    Ok(flight)
}

/// The flight of `intent`, if one is in the air.
pub(crate) fn flight_of(intent: &str) -> Option<Rc<Flight>> {
    FLIGHTS.with(|f| {
        f.borrow()
            .iter()
            .find(|(name, _)| name == intent)
            .map(|(_, flight)| flight.clone())
    })
}

/// Takes `flight` off the list (a newer flight of the same intent stays).
pub(crate) fn land(flight: &Rc<Flight>) {
    FLIGHTS.with(|f| f.borrow_mut().retain(|(_, g)| !Rc::ptr_eq(g, flight)));
}
