//! A streamed chat completion (`"stream": true` on `POST /chat/completions`), read
//! completely: server-sent events whose `data` is a chunk of JSON, ended by
//! `data: [DONE]`.
//!
//! - A chunk's `choices[0].delta.content` is the next piece of the text; its
//!   `choices[0].finish_reason` says the text is complete (`stop`) or is not (`length`,
//!   `content_filter`).
//! - With `stream_options: {"include_usage": true}`, one more chunk before `[DONE]`
//!   has empty `choices` and the `usage` of the whole answer.
//! - `delta.refusal` is a refusal instead of content; an `error` object in the midst of
//!   the stream is the provider's failure.
//! - Comment lines (`: …`) keep the connection alive and say nothing.
//!
//! [`ChatStream::feed`] takes the body's text as it comes, cut anywhere between
//! characters, and gives each new piece of the text as a [`Delta`] whose `offset`
//! counts the Unicode code points before it. [`ChatStream::end`] says how it ended.

use crate::sse::{Events, Item};
use serde_json::Value;

/// The largest token count taken from a provider's `usage`: 2^32 - 1.
pub const MAX_TOKENS: u64 = u32::MAX as u64;

/// What a provider says it billed for one answer (a chat completion's `usage`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tokens {
    /// The prompt's tokens.
    pub prompt: u64,
    /// The answer's tokens.
    pub completion: u64,
}

impl Tokens {
    /// A chat completion's `usage` object, if both counts in it are whole numbers of at
    /// most [`MAX_TOKENS`] (a larger one is no count a provider bills: taken as none,
    /// so that the figures' sums stay whole numbers).
    pub fn of_usage(usage: &Value) -> Option<Tokens> {
        let count = |name: &str| usage.get(name)?.as_u64().filter(|n| *n <= MAX_TOKENS);
        Some(Tokens {
            prompt: count("prompt_tokens")?,
            completion: count("completion_tokens")?,
        })
    }
}

/// One new piece of the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delta {
    /// The Unicode code points of the text before this piece.
    pub offset: u64,
    /// The piece.
    pub text: String,
}

/// How a streamed answer ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// `finish_reason: stop`: the text is whole.
    Complete,
    /// Another `finish_reason` (`length`, `content_filter`…): the text is not whole.
    Incomplete(String),
    /// The provider refused, with this reason.
    Refused(String),
    /// The provider reported an error in the stream, with this message.
    Error(String),
    /// A chunk that is not a chat-completion chunk (this says why): whatever sent it
    /// does not speak the format.
    Malformed(String),
    /// The body ended before any `finish_reason`: cut off, so the provider may have
    /// done (and billed) more than was received.
    CutOff,
}

/// The longest answer read, in code points: past it the answer ends as
/// [`Ending::Malformed`] (no kind's output comes near it, and the Worker's memory is
/// bounded).
pub const MAX_CHARS: u64 = 1 << 20;

/// The longest event of the stream read, in bytes, and the longest refusal.
pub const MAX_LINE: usize = 1 << 20;

/// The reader of one streamed answer.
#[derive(Debug, Default)]
pub struct ChatStream {
    events: Events,
    text: String,
    chars: u64,
    refusal: String,
    finish: Option<String>,
    tokens: Option<Tokens>,
    chunks: u64,
    /// Set by `[DONE]`, an error, or a malformed chunk: nothing after it is read.
    over: Option<Ending>,
    done: bool,
}

impl ChatStream {
    /// Reads the next `text` of the body, and gives the pieces of the answer's text it
    /// completed, in order.
    pub fn feed(&mut self, text: &str) -> Vec<Delta> {
        let mut items = Vec::new();
        self.events.feed(text, &mut items);
        let mut deltas = Vec::new();
        for item in items {
            if self.is_over() {
                break;
            }
            // Events of another name are not chat chunks (a gateway's own): ignored, as
            // EventSource leaves an event nobody listens for.
            if let Item::Event { event, data, .. } = item {
                if event != "message" {
                    continue;
                }
                if let Some(delta) = self.chunk(&data) {
                    deltas.push(delta);
                }
            }
        }
        if self.chars > MAX_CHARS || self.refusal.len() > MAX_LINE {
            self.over = Some(Ending::Malformed(format!(
                "the answer is longer than {MAX_CHARS} characters"
            )));
        }
        if self.events.buffered() > MAX_LINE {
            self.over = Some(Ending::Malformed(format!(
                "an event of the stream is longer than {MAX_LINE} bytes"
            )));
        }
        deltas
    }

    fn chunk(&mut self, data: &str) -> Option<Delta> {
        self.chunks += 1;
        if data.trim() == "[DONE]" {
            self.done = true;
            return None;
        }
        let chunk: Value = match serde_json::from_str(data) {
            Ok(chunk) => chunk,
            Err(e) => {
                self.over = Some(Ending::Malformed(format!("a chunk is not JSON: {e}")));
                return None;
            }
        };
        if let Some(error) = chunk.get("error").filter(|e| !e.is_null()) {
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .map_or_else(|| error.to_string(), str::to_owned);
            self.over = Some(Ending::Error(message));
            return None;
        }
        if let Some(tokens) = chunk.get("usage").and_then(Tokens::of_usage) {
            self.tokens = Some(tokens);
        }
        let Some(choices) = chunk.get("choices").and_then(Value::as_array) else {
            // A usage chunk, or an empty ping, may come without `choices`.
            let empty = chunk.as_object().is_some_and(|o| o.is_empty());
            if !empty && chunk.get("usage").is_none() {
                self.over = Some(Ending::Malformed("a chunk has no choices array".to_owned()));
            }
            return None;
        };
        // One answer is asked for (no `n`): choice 0 is the answer.
        let choice = choices
            .iter()
            .find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)?;
        let delta = choice.get("delta");
        if let Some(refusal) = delta.and_then(|d| d.get("refusal")).and_then(Value::as_str) {
            self.refusal.push_str(refusal);
        }
        // Once the provider has said the text is at its end, it is: content in a later
        // chunk is none of the answer (the chunk that says so may still carry some).
        if self.finish.is_some() {
            return None;
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish = Some(reason.to_owned());
        }
        let content = delta
            .and_then(|d| d.get("content"))
            .and_then(Value::as_str)
            .filter(|c| !c.is_empty())?;
        let offset = self.chars;
        self.chars += content.chars().count() as u64;
        self.text.push_str(content);
        Some(Delta {
            offset,
            text: content.to_owned(),
        })
    }

    /// The text so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The text's length in Unicode code points.
    pub fn chars(&self) -> u64 {
        self.chars
    }

    /// How many chunks (events with data, `[DONE]` included) came: comments are not
    /// chunks, so a provider that only keeps its connection alive says nothing.
    pub fn chunks(&self) -> u64 {
        self.chunks
    }

    /// The tokens the usage chunk reported, if one came.
    pub fn tokens(&self) -> Option<Tokens> {
        self.tokens
    }

    /// Whether nothing more is to be read: `[DONE]`, an error or a malformed chunk came.
    pub fn is_over(&self) -> bool {
        self.done || self.over.is_some()
    }

    /// Whether a finish reason came: the text is all there (or all there will be), and
    /// only the usage chunk and `[DONE]` may follow.
    pub fn finished(&self) -> bool {
        self.finish.is_some()
    }

    /// How the answer ended, once the body has (or [`is_over`](Self::is_over)). A
    /// finish reason decides, whether `[DONE]` followed or not, and whatever came after
    /// it: it is the provider's word that the text is complete, or is not.
    pub fn end(&self) -> Ending {
        if !self.refusal.is_empty() {
            return Ending::Refused(self.refusal.clone());
        }
        match (self.finish.as_deref(), &self.over) {
            (Some("stop"), _) => Ending::Complete,
            (Some(reason), _) => Ending::Incomplete(reason.to_owned()),
            (None, Some(over)) => over.clone(),
            (None, None) => Ending::CutOff,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(content: &str) -> String {
        let chunk = serde_json::json!({"id": "c", "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": null}]});
        format!("data: {chunk}\n\n")
    }

    fn finish(reason: &str) -> String {
        format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"{reason}\"}}]}}\n\n")
    }

    const USAGE: &str = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":5,\"total_tokens\":17}}\n\n";

    /// A whole answer whose text is `pieces` joined, with a role chunk, a comment, the
    /// finish, the usage and `[DONE]`.
    fn answer(pieces: &[&str]) -> String {
        let mut body = String::from(
            ": OPENROUTER PROCESSING\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
        );
        for piece in pieces {
            body.push_str(&chunk(piece));
        }
        body.push_str(&finish("stop"));
        body.push_str(USAGE);
        body.push_str("data: [DONE]\n\n");
        body
    }

    fn read(cuts: &[&str]) -> (ChatStream, Vec<Delta>) {
        let mut stream = ChatStream::default();
        let mut deltas = Vec::new();
        for cut in cuts {
            deltas.extend(stream.feed(cut));
        }
        (stream, deltas)
    }

    #[test]
    fn the_deltas_join_to_the_text_cut_anywhere_and_offsets_count_code_points() {
        let pieces = ["{\"summary\": \"", "Café ", "会议", " 😀 ran", " long\"}"];
        let body = answer(&pieces);
        let (whole, deltas) = read(&[&body]);
        assert_eq!(whole.end(), Ending::Complete);
        assert_eq!(whole.text(), pieces.concat());
        assert_eq!(
            whole.tokens(),
            Some(Tokens {
                prompt: 12,
                completion: 5
            })
        );
        let offsets: Vec<u64> = deltas.iter().map(|d| d.offset).collect();
        assert_eq!(offsets, vec![0, 13, 18, 20, 26]);
        assert_eq!(whole.chars(), 33);
        // Every cut between characters, as a body arrives in reads, reads the same.
        for (cut, _) in body.char_indices() {
            let (stream, again) = read(&[&body[..cut], &body[cut..]]);
            assert_eq!(again, deltas, "cut at {cut}");
            assert_eq!(stream.end(), Ending::Complete);
        }
    }

    #[test]
    fn a_finish_reason_decides_how_it_ended() {
        let (stream, _) = read(&[&chunk("{\"summ"), &finish("length"), "data: [DONE]\n\n"]);
        assert_eq!(stream.end(), Ending::Incomplete("length".into()));
        let (stream, _) = read(&[&chunk("{"), &finish("content_filter")]);
        assert_eq!(stream.end(), Ending::Incomplete("content_filter".into()));
        // The provider's word that the text is whole, even if `[DONE]` never came.
        let (stream, _) = read(&[&chunk("{}"), &finish("stop")]);
        assert_eq!(stream.end(), Ending::Complete);
        // No finish reason: cut off, whatever came before.
        let (stream, _) = read(&[&chunk("{\"summary\": \"half")]);
        assert_eq!(stream.end(), Ending::CutOff);
        let (stream, _) = read(&[""]);
        assert_eq!(stream.end(), Ending::CutOff);
        let (stream, _) = read(&[&chunk("{}"), "data: [DONE]\n\n"]);
        assert_eq!(stream.end(), Ending::CutOff, "[DONE] with no finish reason");
    }

    #[test]
    fn a_refusal_an_error_and_a_malformed_chunk_each_end_it() {
        let refusal = "data: {\"choices\":[{\"index\":0,\"delta\":{\"refusal\":\"I can't\"}}]}\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"refusal\":\" help.\"},\"finish_reason\":\"stop\"}]}\n\n";
        let (stream, deltas) = read(&[refusal]);
        assert_eq!(stream.end(), Ending::Refused("I can't help.".into()));
        assert!(deltas.is_empty());

        let error = "data: {\"error\":{\"message\":\"overloaded\",\"code\":502}}\n\n";
        let (stream, deltas) = read(&[&chunk("{\"su"), error, &chunk("mmary")]);
        assert_eq!(stream.end(), Ending::Error("overloaded".into()));
        assert_eq!(deltas.len(), 1, "nothing after the error is read");
        assert!(stream.is_over());

        // After the finish, the answer stands whatever follows.
        let (stream, _) = read(&[&chunk("{}"), &finish("stop"), error]);
        assert_eq!(stream.end(), Ending::Complete);
        // A usage chunk or a ping without choices, and another event's name, are not
        // malformed.
        let ping = "data: {}\n\nevent: gateway\ndata: nonsense\n\n";
        let (stream, _) = read(&[
            ping,
            &chunk("{}"),
            "data: {\"usage\": {}}\n\n",
            &finish("stop"),
        ]);
        assert_eq!(stream.end(), Ending::Complete);
        for bad in ["data: {\"choices\": [\n\n", "data: {\"output\": 1}\n\n"] {
            let (stream, _) = read(&[&chunk("{"), bad, &finish("stop")]);
            assert!(
                matches!(stream.end(), Ending::Malformed(_)),
                "{bad:?}: {:?}",
                stream.end()
            );
        }
    }

    #[test]
    fn the_finishing_chunk_may_carry_text_and_nothing_after_it_is_text() {
        let last = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"}\"},\"finish_reason\":\"stop\"}]}\n\n";
        let (stream, _) = read(&[&chunk("{\"a\": 1"), last, &chunk(" and more")]);
        assert_eq!(stream.text(), "{\"a\": 1}");
        assert_eq!(stream.end(), Ending::Complete);
        // Data lines that never end their event are bounded too.
        let mut stream = ChatStream::default();
        let line = format!("data: {}\n", "x".repeat(MAX_LINE / 4));
        for _ in 0..5 {
            stream.feed(&line);
        }
        assert!(
            matches!(stream.end(), Ending::Malformed(_)),
            "{:?}",
            stream.end()
        );
    }

    #[test]
    fn nothing_after_done_is_read_and_comments_say_nothing() {
        let body = format!(
            "{}: keep-alive\n\n{}data: [DONE]\n\n{}",
            chunk("{}"),
            finish("stop"),
            chunk("late")
        );
        let (stream, deltas) = read(&[&body]);
        assert_eq!(stream.text(), "{}");
        assert_eq!(deltas.len(), 1);
        assert_eq!(stream.chunks(), 3, "the content, the finish and [DONE]");
        assert!(stream.is_over());
        assert_eq!(stream.end(), Ending::Complete);
    }

    #[test]
    fn a_line_or_an_answer_past_its_bound_ends_it() {
        let mut stream = ChatStream::default();
        let long = "x".repeat(MAX_LINE / 4);
        stream.feed("data: ");
        for _ in 0..5 {
            stream.feed(&long);
        }
        assert!(
            matches!(stream.end(), Ending::Malformed(_)),
            "{:?}",
            stream.end()
        );
        assert!(stream.is_over());
    }
}
