//! The live job stream's rules that the server and the SDK share: where a client
//! stands in a job's stream (its position), and when a job's stream has ended.
//!
//! A position is the job's change counter as the document shows it (`doc_seq`, the
//! number inside the `ETag`), written in decimal: `7` means "I have the document as of
//! change 7". It is opaque to clients: nothing may be read into it but order.

use crate::{AttemptState, Job, JobStatus};

/// The longest position text: `u64::MAX` has 20 digits.
const MAX_DIGITS: usize = 20;

/// A position in one job's stream: the change counter of the document last sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Position(pub u64);

impl Position {
    /// Reads a position as a stream's event id writes it (and as `Last-Event-ID`
    /// returns it): decimal digits only, no sign, no spaces, no leading zero.
    /// `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        let digits = text.as_bytes();
        let plain = !digits.is_empty()
            && digits.len() <= MAX_DIGITS
            && digits.iter().all(u8::is_ascii_digit)
            && (digits.len() == 1 || digits[0] != b'0');
        if !plain {
            return None;
        }
        text.parse().ok().map(Self)
    }

    /// The position of a document whose `ETag` is `etag` (`"7"`, quoted).
    pub fn of_etag(etag: &str) -> Option<Self> {
        Self::parse(etag.strip_prefix('"')?.strip_suffix('"')?)
    }
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The most parts a [`Place`] holds after its `SEQ` (attempts with text, and runs of
/// ended attempts): a job's hedges and failovers are far fewer.
pub const MAX_TEXTS: usize = 16;

/// Where a client stands in a job's stream once text has come: the document's change
/// counter; for each attempt that streamed, how many code points of its text the
/// client has; and which attempts a document it has says have ended, so that no later
/// stream sends it more of their text. Written `SEQ/PART/PART…` (`7/1:1024/2:40`: the
/// document as of change 7, the first 1,024 code points of attempt 1's text and 40 of
/// attempt 2's; `9/~1-2/3:40`: change 9, attempts 1 and 2 ended, 40 code points of
/// attempt 3's), each part `N:CHARS` (`CHARS` > 0) or `~N` or `~N-M` (attempts `N`
/// through `M` ended), in ascending `n`, none at 0, an ended attempt without its
/// count; a place with neither is its `SEQ` alone, as [`Position`] writes it. Opaque
/// to clients, like a position.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Place {
    /// The document's change counter ([`Position`]).
    pub seq: u64,
    /// `(n, chars)` by ascending `n`, each `chars > 0`, none of them ended.
    pub texts: Vec<(u32, u64)>,
    /// The ended attempts as runs `(first, last)` of `n`, ascending, neither
    /// overlapping nor touching.
    pub ended: Vec<(u32, u32)>,
}

impl Place {
    /// The place of a document at change `seq`, with no text.
    pub fn at(seq: u64) -> Self {
        Self {
            seq,
            texts: Vec::new(),
            ended: Vec::new(),
        }
    }

    /// Reads a place as [`Display`](std::fmt::Display) writes it; `None` for anything
    /// else (a part that is no [`Position`], an `n` of 0 or out of order, `chars` of 0,
    /// a run that is empty or touches the one before, more than [`MAX_TEXTS`] parts).
    pub fn parse(text: &str) -> Option<Self> {
        let mut parts = text.split('/');
        let mut place = Self::at(Position::parse(parts.next()?)?.0);
        // The highest `n` so far, and whether a run ended there.
        let mut last: Option<(u32, bool)> = None;
        let attempt = |n: &str| {
            let n = Position::parse(n)?.0;
            u32::try_from(n).ok().filter(|n| *n > 0)
        };
        for (i, part) in parts.enumerate() {
            let (first, n, run) = match part.strip_prefix('~') {
                Some(run) => {
                    let (first, end) = run.split_once('-').unwrap_or((run, run));
                    let (first, end) = (attempt(first)?, attempt(end)?);
                    if end < first || (run.contains('-') && end == first) {
                        return None;
                    }
                    place.ended.push((first, end));
                    (first, end, true)
                }
                None => {
                    let (n, chars) = part.split_once(':')?;
                    let (n, chars) = (attempt(n)?, Position::parse(chars)?.0);
                    if chars == 0 {
                        return None;
                    }
                    place.texts.push((n, chars));
                    (n, n, false)
                }
            };
            let after =
                last.is_none_or(|(at, was_run)| at < first && !(run && was_run && at + 1 == first));
            if !after || i == MAX_TEXTS {
                return None;
            }
            last = Some((n, run));
        }
        Some(place)
    }

    /// Whether the holder has seen attempt `n` end.
    pub fn is_ended(&self, n: u32) -> bool {
        self.ended
            .iter()
            .any(|(first, last)| (*first..=*last).contains(&n))
    }

    /// Says the holder has seen attempt `n` end: its count goes, and its text is
    /// taken no more. `false` (and nothing changed) when that would take a part more
    /// than [`MAX_TEXTS`].
    pub fn end(&mut self, n: u32) -> bool {
        if self.is_ended(n) {
            return true;
        }
        let mut ended = self.ended.clone();
        let at = ended.partition_point(|(_, last)| *last < n);
        let joins_before = at > 0 && ended[at - 1].1 + 1 == n;
        let joins_after = ended
            .get(at)
            .is_some_and(|(first, _)| n.checked_add(1) == Some(*first));
        match (joins_before, joins_after) {
            (true, true) => {
                ended[at - 1].1 = ended[at].1;
                ended.remove(at);
            }
            (true, false) => ended[at - 1].1 = n,
            (false, true) => ended[at].0 = n,
            (false, false) => ended.insert(at, (n, n)),
        }
        let texts = self.texts.iter().filter(|(m, _)| *m != n).count();
        if texts + ended.len() > MAX_TEXTS {
            return false;
        }
        self.texts.retain(|(m, _)| *m != n);
        self.ended = ended;
        true
    }

    fn parts(&self) -> usize {
        self.texts.len() + self.ended.len()
    }

    /// The code points of attempt `n`'s text the holder has.
    pub fn chars(&self, n: u32) -> u64 {
        self.texts
            .iter()
            .find(|(m, _)| *m == n)
            .map_or(0, |(_, chars)| *chars)
    }

    /// Takes the piece of attempt `n`'s text that begins at code point `offset`: the
    /// part of it the holder lacks, with its offset, which the holder now has; `Ok(None)`
    /// when it has all of it; `Err(chars)` when the piece begins past the holder's
    /// `chars` (a gap: nothing is taken).
    pub fn take<'t>(
        &mut self,
        n: u32,
        offset: u64,
        text: &'t str,
    ) -> Result<Option<(u64, &'t str)>, u64> {
        if self.is_ended(n) {
            return Ok(None);
        }
        let have = self.chars(n);
        if offset > have {
            return Err(have);
        }
        let new = after_chars(text, have - offset);
        if new.is_empty() {
            return Ok(None);
        }
        // A place holds the text of at most `MAX_TEXTS` attempts: of more, nothing is
        // taken (a resume would meet the same piece again).
        if !self.set(n, have + new.chars().count() as u64) {
            return Ok(None);
        }
        Ok(Some((have, new)))
    }

    /// Says the holder has `chars` code points of attempt `n`'s text; `false` (and
    /// nothing changed) when that is a new attempt and the place holds [`MAX_TEXTS`]
    /// parts.
    pub fn set(&mut self, n: u32, chars: u64) -> bool {
        let (at, full) = (
            self.texts.partition_point(|(m, _)| *m < n),
            self.parts() == MAX_TEXTS,
        );
        match self.texts.get_mut(at) {
            Some(entry) if entry.0 == n => entry.1 = chars,
            _ if full => return false,
            _ => self.texts.insert(at, (n, chars)),
        }
        true
    }
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.seq)?;
        let (mut texts, mut ended) = (self.texts.iter().peekable(), self.ended.iter().peekable());
        loop {
            let text_first = match (texts.peek(), ended.peek()) {
                (Some((n, _)), Some((first, _))) => n < first,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => return Ok(()),
            };
            if text_first {
                if let Some((n, chars)) = texts.next() {
                    write!(f, "/{n}:{chars}")?;
                }
            } else if let Some((first, last)) = ended.next() {
                match first == last {
                    true => write!(f, "/~{first}")?,
                    false => write!(f, "/~{first}-{last}")?,
                }
            }
        }
    }
}

/// `text` less its first `chars` code points. (`str::get`, not slicing: the SDK uses it
/// too, and a slice's panic path would link `core::fmt`'s escaping tables into it.)
pub fn after_chars(text: &str, chars: u64) -> &str {
    let skip = usize::try_from(chars).unwrap_or(usize::MAX);
    text.char_indices()
        .nth(skip)
        .and_then(|(at, _)| text.get(at..))
        .unwrap_or_default()
}

/// The most jobs one stream (`GET /v1/stream?job=…`) may follow.
pub const MAX_STREAM_JOBS: usize = 20;

/// One `job` parameter of `GET /v1/stream`: a job's id, alone or followed by `:` and
/// the place the client has (`job_…:7`, `job_…:7/1:40`), since one `Last-Event-ID` cannot hold the
/// positions of several jobs. `None` when the id is empty or the position is not one.
pub fn parse_followed(text: &str) -> Option<(&str, Option<Place>)> {
    let (id, position) = match text.split_once(':') {
        Some((id, position)) => (id, Some(Place::parse(position)?)),
        None => (text, None),
    };
    (!id.is_empty()).then_some((id, position))
}

/// Whether a job's stream has ended at this document: the job is final for now
/// (`succeeded`, `cancelled`, or `failed`) and no attempt is `starting` or `running`,
/// so nothing the service does on its own will change it. A hedge's loser still
/// running keeps a succeeded job's stream open until it settles. A `failed` job may
/// still change by the owner's hand (the fallback button): a client that asks for a
/// new attempt opens a new stream.
pub fn settled(status: JobStatus, mut attempts: impl Iterator<Item = AttemptState>) -> bool {
    matches!(
        status,
        JobStatus::Succeeded | JobStatus::Cancelled | JobStatus::Failed
    ) && !attempts.any(AttemptState::is_in_flight)
}

impl Job {
    /// [`settled`], for this document.
    pub fn is_settled(&self) -> bool {
        settled(self.status, self.attempts.iter().map(|a| a.state))
    }
}

mod follower;
mod hub;
mod keeper;
#[cfg(test)]
mod tests;

pub use follower::*;
pub use hub::*;
pub use keeper::*;
