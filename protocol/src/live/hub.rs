//! A job's hub: the newest change it heard of, and the text of each attempt that
//! streams, which it alone sends on.

use super::*;

/// A job's hub: the newest change heard of, which it alone sends on. Notifications
/// come from several writers (a request's store, the queue consumer's, the re-read)
/// and may arrive in any order; an older one after a newer one is dropped, never sent.
#[derive(Clone, Debug, Default)]
pub struct Hub {
    latest: Option<(u64, String)>,
    /// The text of each attempt that streams, as far as it came without a gap.
    pub(super) texts: Vec<Streamed>,
    /// Their lengths in code points, by `n`.
    have: Place,
    /// The attempts the newest document says have ended (a final state: an `unknown`
    /// one may yet succeed, and its call may still be streaming), or all of its
    /// attempts once it is settled.
    ended: Vec<String>,
    /// The attempts (by `n`) the newest document shows `unknown`, while the job is not
    /// settled: their calls broke off, so their text may grow no more, and is kept
    /// whole ([`Keeper::at_unknown`]).
    pub(super) unknown: Vec<u32>,
}

/// Why a hub took nothing of a piece of text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// It begins past the code points the hub has (these: send from there), or the
    /// text would pass its bound.
    Gap(u64),
    /// The newest document says the attempt has ended: a stop publishes nothing after
    /// the document that says `cancelled`, nor a loser after its `superseded`.
    Ended,
}

/// One attempt's text in a hub.
#[derive(Clone, Debug)]
pub(super) struct Streamed {
    pub(super) n: u32,
    pub(super) attempt_id: String,
    pub(super) text: String,
}

/// One piece of an attempt's text, as a hub sends it on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece<'a> {
    /// The attempt's `n`.
    pub n: u32,
    /// The attempt's id.
    pub attempt_id: &'a str,
    /// The code points of the attempt's text before it.
    pub offset: u64,
    /// The piece itself.
    pub text: &'a str,
}

/// The most code points of text in one frame a hub sends (at most 4 bytes each, so a
/// frame stays well within a WebSocket message's 1 MiB).
pub const FRAME_CHARS: usize = 16_384;

impl<'a> Piece<'a> {
    /// This piece cut into pieces of at most `max` code points, in order.
    pub fn parts(&self, max: usize) -> impl Iterator<Item = Piece<'a>> + '_ {
        let max = max.max(1);
        let mut rest = self.text;
        let mut offset = self.offset;
        std::iter::from_fn(move || {
            if rest.is_empty() {
                return None;
            }
            let cut = rest
                .char_indices()
                .nth(max)
                .map_or(rest.len(), |(at, _)| at);
            let (text, after) = rest.split_at(cut);
            let part = Piece {
                n: self.n,
                attempt_id: self.attempt_id,
                offset,
                text,
            };
            offset += text.chars().count() as u64;
            rest = after;
            Some(part)
        })
    }
}

impl Hub {
    /// Takes change `seq` with its document if it is newer than any heard of: `true`
    /// means "send it to every stream", `false` that it is dropped. The document also
    /// says which attempts have ended (their text is refused from now on), and a
    /// settled one that the text is done with (dropped).
    pub fn offer(&mut self, seq: u64, doc: &str) -> bool {
        if self.latest.as_ref().is_some_and(|(heard, _)| *heard >= seq) {
            return false;
        }
        self.latest = Some((seq, doc.to_owned()));
        if let Ok(job) = serde_json::from_str::<Job>(doc) {
            // A settled job's attempts stream no more, an `unknown` one included: its
            // late text would outlive the job in the hub. (An attempt the owner adds
            // later is not among them.)
            let settled = job.is_settled();
            self.ended = job
                .attempts
                .iter()
                .filter(|a| settled || a.state.is_final())
                .map(|a| a.id.clone())
                .collect();
            self.unknown = job
                .attempts
                .iter()
                .filter(|a| !settled && a.state == AttemptState::Unknown)
                .filter_map(|a| u32::try_from(a.n).ok())
                .collect();
            if settled {
                self.drop_text();
            }
        }
        true
    }

    /// Takes the piece of attempt `n`'s text that begins at code point `offset`: the
    /// part that is new, to send to every stream (`Ok(None)` when the hub has it all),
    /// or why it took nothing ([`Refused`]).
    pub fn text(
        &mut self,
        n: u32,
        attempt_id: &str,
        offset: u64,
        text: &str,
        max_chars: u64,
    ) -> Result<Option<Piece<'_>>, Refused> {
        if self.ended.iter().any(|id| id == attempt_id) {
            return Err(Refused::Ended);
        }
        let have = self.have.chars(n);
        if offset.saturating_add(text.chars().count() as u64) > max_chars {
            return Err(Refused::Gap(have));
        }
        let Some((offset, new)) = self.have.take(n, offset, text).map_err(Refused::Gap)? else {
            return Ok(None);
        };
        let at = match self.texts.iter().position(|t| t.n == n) {
            Some(at) => at,
            None => {
                self.texts.push(Streamed {
                    n,
                    attempt_id: attempt_id.to_owned(),
                    text: String::new(),
                });
                self.texts.len() - 1
            }
        };
        let streamed = &mut self.texts[at];
        let start = streamed.text.len();
        streamed.text.push_str(new);
        Ok(Some(Piece {
            n,
            attempt_id: &streamed.attempt_id,
            offset,
            text: &streamed.text[start..],
        }))
    }

    /// The text a stream at `place` lacks, attempt by attempt: each text after the
    /// code points the place has of it.
    pub fn text_after<'a>(&'a self, place: &Place) -> impl Iterator<Item = Piece<'a>> + 'a {
        let place = place.clone();
        self.texts.iter().filter_map(move |t| {
            if place.is_ended(t.n) {
                return None;
            }
            let offset = place.chars(t.n).min(self.have.chars(t.n));
            let text = after_chars(&t.text, offset);
            (!text.is_empty()).then_some(Piece {
                n: t.n,
                attempt_id: &t.attempt_id,
                offset,
                text,
            })
        })
    }

    /// The code points of attempt `n`'s text the hub has.
    pub fn chars(&self, n: u32) -> u64 {
        self.have.chars(n)
    }

    /// Attempt `n`'s text as far as the hub has it, if any came.
    pub fn text_of(&self, n: u32) -> Option<&str> {
        self.texts
            .iter()
            .find(|t| t.n == n)
            .map(|t| t.text.as_str())
    }

    /// Forgets the text: the job's result is stored, or its stream has ended.
    pub fn drop_text(&mut self) {
        self.texts.clear();
        self.have.texts.clear();
    }

    /// What a stream subscribing after change `since` is sent at once: the newest
    /// change heard of, if it is newer.
    pub fn catch_up(&self, since: u64) -> Option<(u64, &str)> {
        self.latest
            .as_ref()
            .filter(|(seq, _)| *seq > since)
            .map(|(seq, doc)| (*seq, doc.as_str()))
    }
}
