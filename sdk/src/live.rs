//! The live job stream (`GET /v1/stream?job=…`), read with `fetch` and a body reader
//! so that `Authorization` is sent: `Stream` reads a response's body through the
//! protocol's event-stream parser (`onceclick_protocol::sse`).

use crate::js;
use onceclick_protocol::sse::Events;
pub(crate) use onceclick_protocol::sse::Item;
use wasm_bindgen::JsValue;
use wasm_bindgen_futures::JsFuture;

/// A response body read item by item. Dropping it cancels the body, which closes the
/// connection: a `wait` that returns, times out or is aborted leaves no stream open.
pub(crate) struct Stream {
    reader: JsValue,
    /// A `TextDecoder` used with `{stream: true}`.
    decoder: JsValue,
    events: Events,
    /// Items read and not yet taken, the next one last.
    ready: Vec<Item>,
}

/// What `Stream::next` found.
pub(crate) enum Next {
    Item(Item),
    /// The body ended or failed (a dropped connection).
    End,
    /// Nothing came within the time given.
    Quiet,
    /// The interrupt resolved: the jobs to follow changed.
    Woken,
}

impl Stream {
    /// The body of `response`, if it has one.
    pub(crate) fn of(response: &web_sys::Response) -> Option<Stream> {
        let body = js::get(response.as_ref(), "body");
        let reader = js::call(&body, "getReader", &[]).ok()?;
        let decoder = js::construct("TextDecoder").ok()?;
        Some(Stream {
            reader,
            decoder,
            events: Events::default(),
            ready: Vec::new(),
        })
    }

    /// The next item, waiting at most `quiet_ms` for it, or until `interrupt` resolves
    /// (to `true`). The wait is a `Promise.race` of the read, a timer and the
    /// interrupt, so one future type serves all three.
    pub(crate) async fn next(&mut self, quiet_ms: f64, interrupt: &js_sys::Promise) -> Next {
        loop {
            if let Some(item) = self.ready.pop() {
                return Next::Item(item);
            }
            let Ok(read) = js::call(&self.reader, "read", &[]) else {
                return Next::End;
            };
            let (timer, timer_id) = js::timer_id(quiet_ms);
            let read = js_sys::Promise::race(&js_sys::Array::of3(&read, &timer, interrupt));
            let read = JsFuture::from(read).await;
            let _ = js::call(&js::global(), "clearTimeout", &[timer_id]);
            let Ok(chunk) = read else {
                return Next::End;
            };
            if chunk.is_undefined() {
                return Next::Quiet;
            }
            if chunk == JsValue::TRUE {
                return Next::Woken;
            }
            if js::get(&chunk, "done").is_truthy() {
                return Next::End;
            }
            let streaming = js_sys::Object::new();
            let _ = js_sys::Reflect::set(&streaming, &"stream".into(), &JsValue::TRUE);
            let value = js::get(&chunk, "value");
            let text = js::call(&self.decoder, "decode", &[value, streaming.into()])
                .ok()
                .and_then(|t| t.as_string())
                .unwrap_or_default();
            let mut out = Vec::new();
            self.events.feed(&text, &mut out);
            out.reverse();
            self.ready = out;
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if let Ok(done) = js::call(&self.reader, "cancel", &[]) {
            // A cancel of a body that already failed rejects: nothing to report.
            let ignore = wasm_bindgen::closure::Closure::once_into_js(|_: JsValue| {});
            let _ = js::call(&done, "catch", &[ignore]);
        }
    }
}

/// Whether `id` is a position as the stream writes it: decimal digits, no leading zero
/// (`onceclick_protocol::live::Position`). Positions are kept as that text: no number
/// is needed to order them.
pub(crate) fn is_position(id: &str) -> bool {
    let b = id.as_bytes();
    !b.is_empty()
        && b.len() <= 20
        && b.iter().all(u8::is_ascii_digit)
        && (b.len() == 1 || b[0] != b'0')
        && (b.len() < 20 || id <= "18446744073709551615")
}

/// Whether position `a` comes after position `b`: the longer is the greater, else the
/// one later in order.
pub(crate) fn after(a: &str, b: &str) -> bool {
    (a.len(), a) > (b.len(), b)
}

/// The `ETag` of the document at `position`: a poll that takes over from the stream
/// starts from what the stream already showed.
pub(crate) fn etag(position: &str) -> String {
    format!("\"{position}\"")
}

/// Says once per page, in the console, that a wait follows its job by polling.
pub(crate) fn note_polling(why: &str) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        web_sys::console::info_1(&JsValue::from_str(&format!(
            "onceclick: {why}; following jobs by polling GET /v1/jobs/{{id}} instead of the live stream"
        )));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_the_protocols_and_order_as_numbers() {
        use onceclick_protocol::live::Position;
        for id in [
            "0",
            "7",
            "12",
            "18446744073709551615",
            "18446744073709551616",
            "99999999999999999999",
            "",
            "-1",
            "01",
            " 1",
            "x",
            "1.5",
            "123456789012345678901",
        ] {
            assert_eq!(is_position(id), Position::parse(id).is_some(), "{id:?}");
        }
        for (a, b) in [("2", "1"), ("10", "9"), ("100", "99"), ("21", "12")] {
            assert!(after(a, b), "{a} after {b}");
            assert!(!after(b, a), "{b} not after {a}");
        }
        assert!(!after("5", "5"));
        assert_eq!(etag("7"), "\"7\"");
    }
}
