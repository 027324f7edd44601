//! A streaming call's connection to its job's hub (the core's `HubLink`): one WebSocket
//! (`GET /hand`, the call's own, tagged apart from the streams'), each piece of text a
//! message on it (a text frame, `frame.rs`), each answered on it with the code points
//! the hub has (`<offset> <have>`) or that the attempt ended (`<offset> stop`). An
//! answer that [`ALONE`] comes just before says no stream watches the job; [`POKE`],
//! between answers, says a stream subscribed or the job's document changed (the core's
//! `HubAnswer::Alone` and `HubLine::poked`). A call of an earlier version reads neither
//! as an answer, so a hub of this one serves it as before.
//!
//! The first connection is asked for when the link is made, beside the provider's
//! fetch, so that it adds no round trip before the first piece. (A provider that then
//! answers whole, or refuses, leaves it unused: the hub closes it when the invocation
//! ends.)

use super::frame::text_frame;
use super::hubs::{socket_of, Hubs};
use crate::pacing::HubAnswer;
use crate::stream::relay::{listen, unlisten, Listener};
use futures_channel::mpsc::UnboundedReceiver;
use futures_util::future::LocalBoxFuture;
use futures_util::StreamExt;
use onceclick_core::hand_on::{next_poke, HubLine, HubLink};
use onceclick_protocol::live::{Piece, Position};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use worker::wasm_bindgen_futures::JsFuture;
use worker::web_sys::MessageEvent;
use worker::WebSocket;

/// The path of a call's connection on the hub.
pub(crate) const HAND: &str = "/hand";

/// What the hub sends a call just before an answer when no stream watches the job.
pub(crate) const ALONE: &str = "alone";

/// What the hub sends its calls when a stream subscribes or the job's document changes:
/// hand on now.
pub(crate) const POKE: &str = "now";

/// A streaming call's way to its job's hub.
pub(crate) struct SocketLink<'a> {
    hubs: Hubs,
    pub(crate) job_id: &'a str,
    n: u32,
    attempt_id: &'a str,
    /// The first connection, asked for when the link was made.
    first: RefCell<Option<Result<JsFuture, String>>>,
    /// The invocation's count of subrequests, which each connection adds to.
    made: &'a Cell<u32>,
    /// Test-only (`fault.rs`): `cut` closes the connection at the first piece past the
    /// first, `reset` empties the hub's memory there (as an eviction would), `late`
    /// answers every piece late.
    fault: Cell<Option<&'static str>>,
}

impl<'a> SocketLink<'a> {
    /// The link to the hub of `job_id` for attempt `n` (`attempt_id`), asking for its
    /// first connection now.
    pub(crate) fn new(
        hubs: Hubs,
        (job_id, n, attempt_id): (&'a str, u32, &'a str),
        made: &'a Cell<u32>,
        fault: Option<&'static str>,
    ) -> Self {
        let first = RefCell::new(Some(hubs.upgrade(job_id, HAND)));
        made.set(made.get() + 1);
        Self {
            hubs,
            job_id,
            n,
            attempt_id,
            first,
            made,
            fault: Cell::new(fault),
        }
    }

    /// The fault the piece from code point `sent` carries: `late` every time, the
    /// others once, past the first piece (mid-answer).
    fn fault(&self, sent: u64) -> Option<&'static str> {
        let fault = self.fault.get();
        match fault {
            Some("late") => fault,
            Some(_) if sent > 0 => self.fault.take(),
            _ => None,
        }
    }
}

impl HubLink for SocketLink<'_> {
    fn open(&self) -> LocalBoxFuture<'_, Result<Rc<dyn HubLine + '_>, String>> {
        Box::pin(async move {
            let asked = match self.first.take() {
                Some(first) => first,
                None => {
                    self.made.set(self.made.get() + 1);
                    self.hubs.upgrade(self.job_id, HAND)
                }
            };
            let reply = asked?.await.map_err(|e| format!("{e:?}"))?;
            let socket = socket_of(&reply)?;
            // The hub's newest answer waits in `last` until a piece reads it (one piece is
            // on a connection at a time), `alone` if [`ALONE`] came before it; `closed`
            // once the socket closed. Pokes wait in `pokes` for the call's next wait.
            let (tell, heard) = futures_channel::mpsc::unbounded();
            let (poke, pokes) = futures_channel::mpsc::unbounded();
            let last = Rc::new(RefCell::new(String::new()));
            let alone = Rc::new(Cell::new(false));
            let closed = Rc::new(Cell::new(false));
            let on_message = {
                let (tell, last, alone, poke) =
                    (tell.clone(), last.clone(), alone.clone(), poke.clone());
                Listener::new(move |e: MessageEvent| {
                    match e.data().as_string() {
                        Some(text) if text == ALONE => return alone.set(true),
                        Some(text) if text == POKE => {
                            alone.set(false);
                            let _ = poke.unbounded_send(());
                            return;
                        }
                        Some(text) => *last.borrow_mut() = text,
                        None => {}
                    }
                    let _ = tell.unbounded_send(());
                })
            };
            let on_close = {
                let (closed, poke) = (closed.clone(), poke.clone());
                Listener::new(move |_: MessageEvent| {
                    closed.set(true);
                    let _ = tell.unbounded_send(());
                    // A call waiting out its interval hands on now, and the piece's
                    // failure opens another connection at once.
                    let _ = poke.unbounded_send(());
                })
            };
            listen(&socket, &on_message, &on_close);
            let line = SocketLine {
                socket,
                link: self,
                heard: RefCell::new(heard),
                pokes: RefCell::new(pokes),
                last,
                alone,
                closed,
                _listeners: [on_message, on_close],
            };
            line.socket.accept().map_err(|e| e.to_string())?;
            Ok(Rc::new(line) as Rc<dyn HubLine>)
        })
    }
}

/// One open connection of a [`SocketLink`]; closed when dropped.
struct SocketLine<'a> {
    socket: WebSocket,
    link: &'a SocketLink<'a>,
    /// Says that `last` changed.
    heard: RefCell<UnboundedReceiver<()>>,
    /// Says the hub poked the call.
    pokes: RefCell<UnboundedReceiver<()>>,
    last: Rc<RefCell<String>>,
    alone: Rc<Cell<bool>>,
    closed: Rc<Cell<bool>>,
    _listeners: [Listener; 2],
}

impl Drop for SocketLine<'_> {
    fn drop(&mut self) {
        unlisten(&self.socket);
        let _ = self.socket.close(Some(1000), Some("done"));
    }
}

impl HubLine for SocketLine<'_> {
    fn poked(&self) -> LocalBoxFuture<'_, ()> {
        Box::pin(next_poke(&self.pokes))
    }

    fn send<'a>(
        &'a self,
        sent: u64,
        piece: &'a str,
    ) -> LocalBoxFuture<'a, Result<HubAnswer, String>> {
        Box::pin(async move {
            let link = self.link;
            let mut message = text_frame(&Piece {
                n: link.n,
                offset: sent,
                attempt_id: link.attempt_id,
                text: piece,
            });
            if let Some(fault) = link.fault(sent) {
                message.insert_str(0, &format!("!{fault}\n"));
            }
            // An answer to an earlier piece of the same offset (the hub took nothing of
            // it) must not stand for this one's.
            self.last.borrow_mut().clear();
            self.alone.set(false);
            self.socket
                .send_with_str(message)
                .map_err(|e| e.to_string())?;
            let heard = || std::future::poll_fn(|cx| self.heard.borrow_mut().poll_next_unpin(cx));
            // An answer to an earlier piece (it came late) is passed over; one that came
            // before the socket closed still counts.
            while heard().await.is_some() {
                if let Some(answer) = answer(&self.last.borrow(), sent, self.alone.get()) {
                    return Ok(answer);
                }
                if self.closed.get() {
                    break;
                }
            }
            Err("the hub closed the connection".to_owned())
        })
    }
}

/// The hub's answer to the piece from code point `sent`, if `text` is one (`alone`:
/// [`ALONE`] came before it).
fn answer(text: &str, sent: u64, alone: bool) -> Option<HubAnswer> {
    let (offset, have) = text.split_once(' ')?;
    if Position::parse(offset)?.0 != sent {
        return None;
    }
    match (have, alone) {
        ("stop", _) => Some(HubAnswer::Stop),
        (have, false) => Some(HubAnswer::Have(Position::parse(have)?.0)),
        (have, true) => Some(HubAnswer::Alone(Position::parse(have)?.0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_the_pieces_own_and_says_whether_a_stream_watches() {
        assert_eq!(answer("40 52", 40, false), Some(HubAnswer::Have(52)));
        assert_eq!(answer("40 52", 40, true), Some(HubAnswer::Alone(52)));
        assert_eq!(answer("40 stop", 40, true), Some(HubAnswer::Stop));
        // Another piece's answer, and what is no answer: a poke, the word alone, junk.
        for other in ["12 52", POKE, ALONE, "40", "40 x", "40 -1", ""] {
            assert_eq!(answer(other, 40, false), None, "{other:?}");
        }
    }
}
