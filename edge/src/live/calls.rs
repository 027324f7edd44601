//! A streaming call's connection to its hub ([`super::line::HAND`]): a plain WebSocket,
//! accepted and listened to by the hub, not a hibernatable one.
//!
//! Why not hibernatable, as the streams' are: each message to a hibernatable socket is
//! an event of its own for the object, dispatched as a request is, and a call sends one
//! every 50 ms while its provider writes. Measured side by side (2,048 code points,
//! `cargo xtask bench --streamed`), that dispatch was most of what a streamed job cost
//! above the floor; a listener on an accepted socket takes the same message for a
//! fraction of it. Nothing is lost by not hibernating: an object that takes a message
//! every 50 ms stays in memory anyway, and a call's connection lasts one call.
//!
//! The listeners hold the hub's state weakly, and the hub holds them ([`Calls`]) until
//! their socket closes, so that neither keeps the other alive.

use super::HubState;
use crate::stream::relay::{listen, unlisten, Listener};
use std::rc::Rc;
use wasm_bindgen::closure::Closure;
use worker::wasm_bindgen_futures::spawn_local;
use worker::web_sys::MessageEvent;
use worker::{Result, WebSocket};

/// The calls' connections open to a hub, each with its listeners.
#[derive(Default)]
pub(crate) struct Calls {
    next: u64,
    open: Vec<(u64, WebSocket, [Listener; 2])>,
}

/// Accepts a call's connection on `server`: each text message is a piece the hub takes
/// and answers (`HubState::hand`), one after the other as they come (a call sends the
/// next only once this one is answered).
pub(super) fn accept(hub: &Rc<HubState>, server: &WebSocket) -> Result<()> {
    server.accept()?;
    let id = {
        let mut calls = hub.calls.borrow_mut();
        calls.next += 1;
        calls.next
    };
    let (weak, socket) = (Rc::downgrade(hub), server.clone());
    let on_message: Listener = Closure::new(move |event: MessageEvent| {
        let (Some(hub), Some(text)) = (weak.upgrade(), event.data().as_string()) else {
            return;
        };
        let socket = socket.clone();
        spawn_local(async move {
            // `hand` answers, or closes the socket, itself.
            let _ = hub.hand(&socket, &text).await;
        });
    });
    let weak = Rc::downgrade(hub);
    let on_close: Listener = Closure::new(move |_: MessageEvent| {
        let weak = weak.clone();
        // Not in the listener's own call: dropping it there would free it as it runs.
        spawn_local(async move {
            if let Some(hub) = weak.upgrade() {
                forget(&hub, id);
            }
        });
    });
    listen(server, &on_message, &on_close);
    hub.calls
        .borrow_mut()
        .open
        .push((id, server.clone(), [on_message, on_close]));
    Ok(())
}

/// Takes connection `id`'s listeners off it and drops them: it has closed.
fn forget(hub: &HubState, id: u64) {
    let mut calls = hub.calls.borrow_mut();
    if let Some(i) = calls.open.iter().position(|(n, ..)| *n == id) {
        let (_, socket, _listeners) = calls.open.swap_remove(i);
        unlisten(&socket);
    }
}
