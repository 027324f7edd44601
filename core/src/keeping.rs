//! A job's hub taking a piece of streamed text, and what it then writes to its storage,
//! decided: the Worker's hub (`live.rs`, `Live::text` and `Live::offer`) and the
//! simulator's hubs do as these say. What each chunk holds is `protocol::live::Keeper`'s
//! to say; when the chunks are written, and in what order, is said here.

use onceclick_protocol::chat::MAX_CHARS;
use onceclick_protocol::live::{EndChunk, Hub, Keeper, Piece, Refused};

/// What a hub answers a piece of text it took nothing of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// It has all of the piece already (200, with what it has).
    HasAll,
    /// The piece begins past what it has, or would pass its bound (409, with what it
    /// has: send from there).
    Gap,
    /// The attempt may stream no more: its newest document says it ended (410).
    Ended,
}

impl Answer {
    /// The HTTP status that says it.
    pub fn status(self) -> u16 {
        match self {
            Answer::HasAll => 200,
            Answer::Gap => 409,
            Answer::Ended => 410,
        }
    }
}

/// Takes the piece of attempt `n`'s text that begins at code point `offset`, from the
/// call that streams it: the part that is new, to send to every stream and then keep
/// ([`Writes::after_text`]), or why it took nothing.
pub fn take_text<'h>(
    hub: &'h mut Hub,
    n: u32,
    attempt_id: &str,
    offset: u64,
    text: &str,
) -> Result<Piece<'h>, Answer> {
    match hub.text(n, attempt_id, offset, text, MAX_CHARS) {
        Ok(Some(piece)) => Ok(piece),
        Ok(None) => Err(Answer::HasAll),
        Err(Refused::Gap(_)) => Err(Answer::Gap),
        Err(Refused::Ended) => Err(Answer::Ended),
    }
}

/// The writes a hub owes after it took a piece of text or a newer document, step by
/// step: each step's chunks are written in order, and [`Keeper::wrote`] told of each
/// written, before the next step is asked for (each step cuts from what is kept).
#[derive(Clone, Debug)]
pub struct Writes {
    /// The attempt whose text is to be kept about once per kilobyte.
    due: Option<u32>,
    /// The rest of each `unknown` attempt's text is still to be given.
    unknown: bool,
    /// The last chunks given were the `unknown` attempts'.
    at_unknown: bool,
}

impl Writes {
    /// After a piece of attempt `n`'s text: about once per kilobyte, the text since the
    /// last write (a restart loses at most that much); then the rest of each attempt
    /// the newest document shows `unknown`, at once (its call read on after it).
    pub fn after_text(n: u32) -> Self {
        Self {
            due: Some(n),
            unknown: true,
            at_unknown: false,
        }
    }

    /// After a newer document: the rest of each attempt it shows `unknown`. Such an
    /// attempt keeps its whole text, not only its whole kilobytes: the operator reads it
    /// to resolve the attempt, maybe after the hub's instance is gone.
    pub fn after_document() -> Self {
        Self {
            due: None,
            unknown: true,
            at_unknown: false,
        }
    }

    /// The next chunks to write, in order; `None` once every step was given. A write
    /// that fails is said in the log and given again at the next piece or document.
    pub fn next(&mut self, keeper: &mut Keeper, hub: &Hub) -> Option<Vec<EndChunk>> {
        if let Some(n) = self.due.take() {
            return Some(keeper.due(hub, n));
        }
        let unknown = std::mem::take(&mut self.unknown)
            && !crate::mutant::on(crate::mutant::Mutant::UnknownTextNotKeptWhole);
        self.at_unknown = unknown;
        unknown.then(|| keeper.at_unknown(hub))
    }

    /// Whether the chunks [`Writes::next`] last gave keep the rest of `unknown`
    /// attempts' text.
    pub fn at_unknown(&self) -> bool {
        self.at_unknown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job whose one attempt is in `state` (the job's status too).
    fn doc(state: &str) -> String {
        serde_json::json!({"id": "job_1", "kind": "summarize", "status": state,
            "version": 1, "input": {}, "provider": "p", "result": null,
            "completed_by": null, "created_at": "t", "updated_at": "t",
            "attempts": [{"id": "att_1", "n": 1, "provider": "p", "state": state,
                "started_at": "t", "finished_at": null, "error": null}]})
        .to_string()
    }

    fn written(writes: &mut Writes, keeper: &mut Keeper, hub: &Hub) -> Vec<u64> {
        let mut ends = Vec::new();
        while let Some(chunks) = writes.next(keeper, hub) {
            for chunk in chunks {
                keeper.wrote(chunk.n, chunk.chars);
                ends.push(chunk.chars);
            }
        }
        ends
    }

    #[test]
    fn a_piece_is_answered_by_what_the_hub_has() {
        let mut hub = Hub::default();
        let piece = take_text(&mut hub, 1, "att_1", 0, "abc");
        assert_eq!(piece.map(|p| p.text), Ok("abc"));
        assert_eq!(
            take_text(&mut hub, 1, "att_1", 0, "ab"),
            Err(Answer::HasAll)
        );
        assert_eq!(take_text(&mut hub, 1, "att_1", 9, "x"), Err(Answer::Gap));
    }

    #[test]
    fn text_is_kept_by_the_stretch_and_an_unknown_attempt_s_whole() {
        let mut hub = Hub::default();
        let mut keeper = Keeper::every(4);
        let _ = take_text(&mut hub, 1, "att_1", 0, "ab");
        assert!(written(&mut Writes::after_text(1), &mut keeper, &hub).is_empty());
        let _ = take_text(&mut hub, 1, "att_1", 2, "cde");
        assert_eq!(written(&mut Writes::after_text(1), &mut keeper, &hub), [5]);
        let _ = take_text(&mut hub, 1, "att_1", 5, "f");
        assert!(written(&mut Writes::after_text(1), &mut keeper, &hub).is_empty());
        // The attempt goes `unknown`: the rest is written at once.
        assert!(hub.offer(1, &doc("unknown")));
        assert_eq!(
            written(&mut Writes::after_document(), &mut keeper, &hub),
            [6]
        );
        let _ = take_text(&mut hub, 1, "att_1", 6, "g");
        assert_eq!(written(&mut Writes::after_text(1), &mut keeper, &hub), [7]);
    }
}
