//! The `text/event-stream` format, read as the HTML standard's EventSource reads it:
//! text in, comments and events out. The browser SDK reads the job stream with it, and
//! the Worker a provider's streamed answer.

/// One thing a stream said.
#[derive(Debug, PartialEq, Eq)]
pub enum Item {
    /// A comment line (`: live`, `: keep-alive`): the stream is alive.
    Comment,
    /// An event, dispatched at its blank line.
    Event {
        /// Its `event` field (`message` when it has none).
        event: String,
        /// The last `id` the stream set, this event's or an earlier one's.
        id: String,
        /// Its `data` lines, joined by `\n`.
        data: String,
    },
}

/// The event-stream parser: text in, items out. Lines end at `\n` (a `\r` before it is
/// dropped); a line is only read once it is whole, so text may come cut anywhere
/// between characters (a streaming UTF-8 decoder's output).
#[derive(Debug, Default)]
pub struct Events {
    pending: String,
    event: String,
    data: String,
    /// Set by an `id` field and kept from event to event, as EventSource keeps it.
    id: String,
    has_data: bool,
}

impl Events {
    /// Reads `text`, pushing every item it completes onto `out`.
    pub fn feed(&mut self, text: &str, out: &mut Vec<Item>) {
        self.pending.push_str(text);
        // Only text that ends a line is read: a long line that comes in many reads is
        // read once, not once a read.
        if !text.contains('\n') {
            return;
        }
        let pending = std::mem::take(&mut self.pending);
        let mut rest = pending.as_str();
        while let Some((line, more)) = rest.split_once('\n') {
            self.line(line.strip_suffix('\r').unwrap_or(line), out);
            rest = more;
        }
        self.pending = rest.to_owned();
    }

    /// The bytes held for the event not yet dispatched (its data lines so far, and the
    /// line not yet ended): a reader bounds it, since a stream that never ends its line,
    /// or its event, would grow it without end.
    pub fn buffered(&self) -> usize {
        self.pending.len() + self.data.len()
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
}
