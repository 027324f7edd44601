//! The live job stream (`GET /v1/stream?job=…`), read with `fetch` and a body reader
//! so that `Authorization` is sent: `Events` turns the bytes into server-sent
//! events as the HTML standard parses them, `Stream` reads a response's body through it.

use crate::js;
use wasm_bindgen::JsValue;
use wasm_bindgen_futures::JsFuture;

/// One thing a stream said.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Item {
    /// A comment line (`: live`, `: keep-alive`): the stream is alive.
    Comment,
    /// An event, dispatched at its blank line.
    Event {
        event: String,
        id: String,
        data: String,
    },
}

/// The event-stream parser: text in, items out. Lines end at `\n` (a `\r` before it is
/// dropped); a line is only read once it is whole. The text comes from a streaming
/// `TextDecoder`, which never cuts a character in two.
#[derive(Default)]
pub(crate) struct Events {
    pending: String,
    event: String,
    data: String,
    /// Set by an `id` field and kept from event to event, as EventSource keeps it.
    id: String,
    has_data: bool,
}

impl Events {
    /// Reads `text`, pushing every item it completes onto `out`.
    pub(crate) fn feed(&mut self, text: &str, out: &mut Vec<Item>) {
        self.pending.push_str(text);
        let pending = std::mem::take(&mut self.pending);
        let mut rest = pending.as_str();
        while let Some((line, more)) = rest.split_once('\n') {
            self.line(line.strip_suffix('\r').unwrap_or(line), out);
            rest = more;
        }
        self.pending = rest.to_owned();
    }

    fn line(&mut self, line: &str, out: &mut Vec<Item>) {
        if line.is_empty() {
            if std::mem::take(&mut self.has_data) {
                out.push(Item::Event {
                    event: match std::mem::take(&mut self.event) {
                        e if e.is_empty() => "message".to_owned(),
                        e => e,
                    },
                    id: self.id.clone(),
                    data: std::mem::take(&mut self.data),
                });
            }
            self.event.clear();
            return;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "" => out.push(Item::Comment),
            "event" => self.event = value.to_owned(),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "id" if !value.contains('\0') => self.id = value.to_owned(),
            _ => {}
        }
    }
}

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

    fn items(chunks: &[&str]) -> Vec<Item> {
        let mut events = Events::default();
        let mut out = Vec::new();
        for chunk in chunks {
            events.feed(chunk, &mut out);
        }
        out
    }

    fn job(id: &str, data: &str) -> Item {
        Item::Event {
            event: "job".into(),
            id: id.into(),
            data: data.into(),
        }
    }

    #[test]
    fn events_split_anywhere_read_the_same() {
        let text = "id: 1\nevent: job\ndata: {\"a\":\"é😀\"}\n\n: live\n\nid: 2\r\nevent: job\r\ndata: x\r\n\r\n";
        let whole = items(&[text]);
        assert_eq!(
            whole,
            vec![job("1", "{\"a\":\"é😀\"}"), Item::Comment, job("2", "x")]
        );
        for (cut, _) in text.char_indices() {
            assert_eq!(items(&[&text[..cut], &text[cut..]]), whole, "cut at {cut}");
        }
    }

    #[test]
    fn data_lines_join_ids_persist_and_an_event_without_data_is_nothing() {
        let out =
            items(&["id: 7\nevent: job\n\ndata: a\ndata:b\n\nevent: other\ndata\n\nunknown: x\n"]);
        assert_eq!(
            out,
            vec![
                Item::Event {
                    event: "message".into(),
                    id: "7".into(),
                    data: "a\nb".into()
                },
                Item::Event {
                    event: "other".into(),
                    id: "7".into(),
                    data: "".into()
                },
            ]
        );
        // An event not yet ended by its blank line is not dispatched.
        assert_eq!(items(&["id: 1\nevent: job\ndata: x\n"]), vec![]);
    }

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
