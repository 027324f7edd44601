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

/// A job's hub: the newest change heard of, which it alone sends on. Notifications
/// come from several writers (a request's store, the queue consumer's, the re-read)
/// and may arrive in any order; an older one after a newer one is dropped, never sent.
#[derive(Clone, Debug, Default)]
pub struct Hub {
    latest: Option<(u64, String)>,
    /// The text of each attempt that streams, as far as it came without a gap.
    texts: Vec<Streamed>,
    /// Their lengths in code points, by `n`.
    have: Place,
    /// The attempts the newest document says have ended (a final state: an `unknown`
    /// one may yet succeed, and its call may still be streaming), or all of its
    /// attempts once it is settled.
    ended: Vec<String>,
    /// The attempts (by `n`) the newest document shows `unknown`, while the job is not
    /// settled: their calls broke off, so their text may grow no more, and is kept
    /// whole ([`Keeper::at_unknown`]).
    unknown: Vec<u32>,
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
struct Streamed {
    n: u32,
    attempt_id: String,
    text: String,
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

/// How often a hub writes an attempt's text to its storage, in code points: at most one
/// row per this much text (about a kilobyte), so that a hub that restarted can tell a
/// stream what came before, and the operator what an `unknown` attempt said.
pub const KEEP_EVERY_CHARS: u64 = 1_024;

/// The most bytes one chunk of kept text takes in storage, its key and its value
/// together, each counted in UTF-8. A Durable Object's storage takes at most 2 MB for a
/// key and its value together, and holds the value as a serialized JS string: Latin-1 or
/// UTF-16, so up to twice its UTF-8 bytes (ASCII in a text that also holds a character
/// past U+00FF takes two bytes each). A chunk of 512 KiB is therefore at most 1 MiB and a
/// few bytes there, half the limit, however the text is spelled.
pub const KEEP_MAX_BYTES: usize = 512 * 1024;

/// What a hub keeps of each attempt's text in its storage, and when it writes: the
/// decisions of `edge/src/live.rs`, apart from the storage itself.
///
/// Each write is the text from where the last written chunk ended, at key
/// `text/N/OFFSET` (value `<attempt_id>\n<text>`), cut into chunks of at most
/// [`KEEP_MAX_BYTES`] each: the rows grow with the text, not with its square, and none
/// outgrows what storage takes, however many writes failed before. A write that fails is
/// tried again a kilobyte later, from the same offset (the same keys, so a write that
/// failed but landed is overwritten). Only a chunk that begins where the kept text ends
/// counts as kept ([`wrote`](Self::wrote)), so what is read back runs on without a gap.
#[derive(Clone, Debug)]
pub struct Keeper {
    /// Code points between two writes ([`KEEP_EVERY_CHARS`]).
    every: u64,
    /// The most bytes of one chunk, key and value ([`KEEP_MAX_BYTES`]).
    max_bytes: usize,
    /// How far each attempt's text is written, by `n`.
    kept: Place,
    /// How far it was when a write was last tried.
    tried: Place,
    /// The chunks the last call gave to write, as `(n, from, to)` in code points.
    given: Vec<(u32, u64, u64)>,
    /// Storage may hold text: something was read back, or a write was tried.
    stored: bool,
    /// Storage has been read back since this instance began.
    loaded: bool,
}

/// A chunk to write ([`Keeper::due`]'s and [`Keeper::at_unknown`]'s), for attempt `n` up
/// to `chars`, at `key`: the key and the value together at most [`KEEP_MAX_BYTES`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndChunk {
    /// The attempt's `n`.
    pub n: u32,
    /// The code points of its text the chunk keeps it up to.
    pub chars: u64,
    /// Its storage key ([`Keeper::key`]).
    pub key: String,
    /// Its value: the attempt's id, a newline, the text.
    pub value: String,
}

/// One chunk of kept text, as [`Keeper::key`] names it.
struct Chunk {
    n: u32,
    offset: u64,
    attempt_id: String,
    text: String,
}

impl Default for Keeper {
    fn default() -> Self {
        Self::every(KEEP_EVERY_CHARS)
    }
}

impl Keeper {
    /// A keeper that writes once per `chars` code points (the model's texts are short).
    pub fn every(chars: u64) -> Self {
        Self {
            every: chars.max(1),
            max_bytes: KEEP_MAX_BYTES,
            kept: Place::default(),
            tried: Place::default(),
            given: Vec::new(),
            stored: false,
            loaded: false,
        }
    }

    /// This keeper with chunks of at most `bytes` (the model's are small). A chunk holds
    /// at least one code point, even past a bound too small for its key.
    pub fn within(mut self, bytes: usize) -> Self {
        self.max_bytes = bytes;
        self
    }

    /// The key of attempt `n`'s chunk that begins at code point `offset`.
    pub fn key(n: u32, offset: u64) -> String {
        format!("text/{n}/{offset}")
    }

    /// The chunks to write now that `hub` holds more of attempt `n`'s text: none until
    /// [`every`](Self::every) code points more than when a write was last tried, then
    /// the text since the last write, in order, taken as tried. Say
    /// [`wrote`](Self::wrote)`(n, chars)` of each that was written.
    pub fn due(&mut self, hub: &Hub, n: u32) -> Vec<EndChunk> {
        let chars = hub.chars(n);
        if chars < self.tried.chars(n).saturating_add(self.every) {
            return Vec::new();
        }
        self.tried.set(n, chars);
        self.stored = true;
        self.given.clear();
        let mut chunks = Vec::new();
        self.cut(hub, n, &mut chunks);
        chunks
    }

    /// The chunk of attempt `n`'s text ending at code point `chars`, of those the last
    /// call gave, was written: kept if it begins within the kept text. One that follows
    /// a chunk whose write failed does not, and is written again from there with the
    /// rest, so the kept text runs on without a gap. (Each call's chunks are written in
    /// order, before the next call; one counted late is written again.)
    pub fn wrote(&mut self, n: u32, chars: u64) {
        let kept = self.kept.chars(n);
        let joins = |&(m, from, to): &(u32, u64, u64)| m == n && to == chars && from <= kept;
        if chars > kept && self.given.iter().any(joins) {
            self.kept.set(n, chars);
        }
    }

    /// The text of attempt `n` from where its kept text ends to all `hub` has, cut into
    /// chunks of at most `max_bytes` (key and value), each on a code point's boundary,
    /// added to `chunks`.
    fn cut(&mut self, hub: &Hub, n: u32, chunks: &mut Vec<EndChunk>) {
        let Some(streamed) = hub.texts.iter().find(|t| t.n == n) else {
            return;
        };
        let mut from = self.kept.chars(n);
        let mut rest = after_chars(&streamed.text, from);
        while let Some(first) = rest.chars().next() {
            let key = Self::key(n, from);
            let room = self
                .max_bytes
                .saturating_sub(key.len() + streamed.attempt_id.len() + 1);
            let mut end = room.min(rest.len());
            while !rest.is_char_boundary(end) {
                end -= 1;
            }
            let (text, after) = rest.split_at(end.max(first.len_utf8()));
            let to = from + text.chars().count() as u64;
            self.given.push((n, from, to));
            chunks.push(EndChunk {
                n,
                chars: to,
                key,
                value: format!("{}\n{text}", streamed.attempt_id),
            });
            (from, rest) = (to, after);
        }
    }

    /// Whether storage is still to be read back.
    pub fn to_load(&self) -> bool {
        !self.loaded
    }

    /// Storage read back (`entries`: every key with its value): each attempt's chunks
    /// given to `hub` in order, as far as they run on without a gap. A value that is not
    /// a chunk is skipped.
    pub fn load(&mut self, hub: &mut Hub, entries: Vec<(String, String)>, max_chars: u64) {
        self.loaded = true;
        let mut chunks: Vec<Chunk> = entries
            .into_iter()
            .filter_map(|(key, value)| Self::chunk(&key, &value))
            .collect();
        self.stored |= !chunks.is_empty();
        // Each next chunk is the one that begins where its attempt's kept text ends
        // (whatever order storage lists them in); one past a gap is left, and deleted
        // with the rest when the job settles.
        while let Some(at) = chunks
            .iter()
            .position(|c| !c.text.is_empty() && c.offset == self.kept.chars(c.n))
        {
            let c = chunks.swap_remove(at);
            let end = c.offset + c.text.chars().count() as u64;
            if !self.kept.set(c.n, end) {
                continue;
            }
            self.tried.set(c.n, end);
            // An attempt the hub knows has ended is refused; its chunks stay kept (and
            // are deleted when the job settles).
            let _ = hub.text(c.n, &c.attempt_id, c.offset, &c.text, max_chars);
        }
    }

    fn chunk(key: &str, value: &str) -> Option<Chunk> {
        let (n, offset) = key.strip_prefix("text/")?.split_once('/')?;
        let (attempt_id, text) = value.split_once('\n')?;
        Some(Chunk {
            n: u32::try_from(Position::parse(n)?.0).ok()?,
            offset: Position::parse(offset)?.0,
            attempt_id: attempt_id.to_owned(),
            text: text.to_owned(),
        })
    }

    /// The chunks to write now that `hub`'s newest document shows attempts `unknown`:
    /// of each, the text since its last write, if any is not written yet (the write "at
    /// the end": a hub evicted or restarted after it still has the whole text for the
    /// operator, not only its whole kilobytes), in chunks as [`due`](Self::due) cuts
    /// them. A write that failed is given again at the next call. Each is taken as
    /// tried; say [`wrote`](Self::wrote)`(n, chars)` of each that was written.
    pub fn at_unknown(&mut self, hub: &Hub) -> Vec<EndChunk> {
        let mut chunks = Vec::new();
        self.given.clear();
        for &n in &hub.unknown {
            let chars = hub.chars(n);
            if chars <= self.kept.chars(n) {
                continue;
            }
            self.tried.set(n, chars);
            self.stored = true;
            self.cut(hub, n, &mut chunks);
        }
        chunks
    }

    /// The job settled: whether its storage is to be emptied (it may hold text, or this
    /// instance has not read it back). What was kept is forgotten.
    pub fn settle(&mut self) -> bool {
        let clear = self.stored || !self.loaded;
        self.kept = Place::default();
        self.tried = Place::default();
        self.given.clear();
        self.stored = false;
        self.loaded = true;
        clear
    }
}

/// One stream's view of one job: the position it last sent. A change is sent only if
/// it is newer, so a stream never sends an older document after a newer one, nor one
/// change twice, whatever order its sources (its own read, the hub) deliver in.
///
/// Of each attempt's text it sends only what the client lacks, and nothing of an
/// attempt that a document it has seen says has ended: the hub refuses such text once
/// it has heard of that document, but a stream may have read it from the store first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Follower {
    /// The position of the last document sent, or the client's own.
    pub at: Option<u64>,
    /// Each attempt's text as far as sent, or as the client has it.
    pub text: Place,
    /// The attempts that a document seen has ended (an ended attempt never runs again).
    pub ended: Vec<String>,
}

impl Follower {
    /// A stream that resumes after `at` (the client's place), or from the start.
    pub fn after(at: Option<Place>) -> Self {
        Self {
            at: at.as_ref().map(|p| p.seq),
            text: at.unwrap_or_default(),
            ended: Vec::new(),
        }
    }

    /// Whether change `seq` is to be sent; if so, it becomes the stream's position.
    pub fn take(&mut self, seq: u64) -> bool {
        if self.at.is_some_and(|at| seq <= at) {
            return false;
        }
        self.at = Some(seq);
        self.text.seq = seq;
        true
    }

    /// [`take`](Self::take) for `job`'s document at `seq`; whether sent or not, the
    /// attempts it shows ended are remembered.
    pub fn take_job(&mut self, seq: u64, job: &Job) -> bool {
        for a in job.attempts.iter().filter(|a| a.state.is_final()) {
            if !self.ended.contains(&a.id) {
                self.ended.push(a.id.clone());
            }
            // Carried in the place, so that a reconnect sends none of its text either
            // (a place with no part left carries no more: this stream still holds back).
            if let Ok(n) = u32::try_from(a.n) {
                self.text.end(n);
            }
        }
        self.take(seq)
    }

    /// The part of `piece` to send, with its offset (`Ok(None)`: nothing, the client
    /// has it or its attempt has ended); `Err` for a gap ([`Place::take`]).
    pub fn take_text<'t>(&mut self, piece: &Piece<'t>) -> Result<Option<(u64, &'t str)>, u64> {
        if self.ended.iter().any(|id| id == piece.attempt_id) {
            return Ok(None);
        }
        self.text.take(piece.n, piece.offset, piece.text)
    }

    /// The place to write as the next event's id.
    pub fn place(&self) -> &Place {
        &self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hub_sends_only_what_is_newer_than_all_it_heard() {
        let mut hub = Hub::default();
        assert_eq!(hub.catch_up(0), None);
        assert!(hub.offer(3, "three"));
        assert!(!hub.offer(2, "two"), "older: dropped");
        assert!(!hub.offer(3, "three again"), "the same change: dropped");
        assert_eq!(hub.catch_up(2), Some((3, "three")));
        assert_eq!(hub.catch_up(3), None);
        assert!(hub.offer(5, "five"));
        assert_eq!(hub.catch_up(0), Some((5, "five")));
    }

    #[test]
    fn a_follower_takes_each_change_once_in_order() {
        let mut f = Follower::after(None);
        assert!(f.take(1));
        assert!(!f.take(1));
        assert!(f.take(4));
        assert!(!f.take(2), "older after newer");
        let mut resumed = Follower::after(Some(Place::at(4)));
        assert!(!resumed.take(4), "the client has it");
        assert!(resumed.take(5));
        assert_eq!(resumed.at, Some(5));
    }

    #[test]
    fn a_position_is_plain_decimal() {
        assert_eq!(Position::parse("0"), Some(Position(0)));
        assert_eq!(Position::parse("7"), Some(Position(7)));
        assert_eq!(
            Position::parse("18446744073709551615"),
            Some(Position(u64::MAX))
        );
        for bad in [
            "",
            " 7",
            "7 ",
            "+7",
            "-7",
            "07",
            "7.0",
            "0x7",
            "18446744073709551616",
            "١",
        ] {
            assert_eq!(Position::parse(bad), None, "{bad:?}");
        }
        assert_eq!(Position::of_etag("\"12\""), Some(Position(12)));
        assert_eq!(Position::of_etag("12"), None);
        assert_eq!(Position::of_etag("W/\"12\""), None);
    }

    #[test]
    fn a_place_is_a_position_and_each_attempts_text_in_code_points() {
        let place = Place::parse("7/1:1024/3:40").unwrap();
        assert_eq!(place.seq, 7);
        assert_eq!(
            (place.chars(1), place.chars(2), place.chars(3)),
            (1024, 0, 40)
        );
        assert_eq!(place.to_string(), "7/1:1024/3:40");
        assert_eq!(Place::parse("7"), Some(Place::at(7)));
        assert_eq!(Place::at(7).to_string(), "7");
        let most = (1..=MAX_TEXTS)
            .map(|n| format!("/{n}:1"))
            .collect::<String>();
        assert!(Place::parse(&format!("1{most}")).is_some());
        for bad in [
            "",
            "7/",
            "/1:2",
            "7/1",
            "7/1:0",
            "7/0:3",
            "7/2:1/1:1",
            "7/1:1/1:2",
            "7/1:01",
            "7/1:-1",
            "7/4294967296:1",
            &format!("1{most}/99:1"),
        ] {
            assert_eq!(Place::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_place_carries_the_attempts_its_holder_saw_end() {
        let place = Place::parse("9/~1-2/3:40/~5").unwrap();
        assert_eq!(place.ended, vec![(1, 2), (5, 5)]);
        assert!(place.is_ended(2) && !place.is_ended(3) && !place.is_ended(4));
        assert_eq!(place.to_string(), "9/~1-2/3:40/~5");
        let mut place = Place::parse("4/1:7/2:3").unwrap();
        assert!(place.end(2));
        assert_eq!(place.to_string(), "4/1:7/~2", "its count goes");
        assert_eq!(place.take(2, 3, "more"), Ok(None), "no more of its text");
        assert!(place.end(4) && place.end(3));
        assert_eq!(place.to_string(), "4/1:7/~2-4", "runs join");
        assert!(place.end(1));
        assert_eq!(place.to_string(), "4/~1-4");
        assert_eq!(Place::parse(&place.to_string()), Some(place.clone()));
        let mut top = Place::at(1);
        assert!(top.end(u32::MAX) && top.end(u32::MAX - 1));
        assert_eq!(top.to_string(), format!("1/~{}-{}", u32::MAX - 1, u32::MAX));

        // A place of `MAX_TEXTS` parts ends an attempt only where no part is added.
        let mut full = Place::at(1);
        for n in (1..=MAX_TEXTS as u32).map(|n| n * 2) {
            assert!(full.end(n));
        }
        assert!(!full.end(99), "a 17th part");
        assert!(full.end(3), "joins two runs: one part fewer");
        assert!(full.end(99));
        assert!(Place::parse(&full.to_string()).is_some());
        for bad in [
            "9/~",
            "9/~0",
            "9/~2-1",
            "9/~2-2",
            "9/~1-",
            "9/~-1",
            "9/~1/~2",
            "9/~1-3/2:5",
            "9/2:5/~2",
            "9/~3/1:5",
        ] {
            assert_eq!(Place::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_stream_resumed_from_its_place_sends_nothing_of_an_attempt_it_saw_end() {
        let doc = |state: &str| {
            serde_json::json!({"id": "job_1", "kind": "summarize", "status": "failed",
                "version": 1, "input": {}, "provider": "p", "result": null,
                "completed_by": null, "created_at": "t", "updated_at": "t",
                "attempts": [{"id": "att_1", "n": 1, "provider": "p", "state": state,
                    "started_at": "t", "finished_at": null, "error": null}]})
        };
        let mut hub = Hub::default();
        hub.text(1, "att_1", 0, "partial", 100).unwrap();
        // The client read the failed job (the hub never heard of it) without its text.
        let failed: Job = serde_json::from_value(doc("abandoned")).unwrap();
        let mut first = Follower::after(None);
        assert!(first.take_job(5, &failed));
        assert_eq!(first.place().to_string(), "5/~1");
        // A fallback revives the job; the client resumes from its place.
        let place = Place::parse(&first.place().to_string()).unwrap();
        assert_eq!(hub.text_after(&place).count(), 0, "the hub holds it back");
        let mut resumed = Follower::after(Some(place));
        let piece = hub.text_after(&Place::at(0)).next().unwrap();
        assert_eq!(
            resumed.take_text(&piece),
            Ok(None),
            "and so does the stream"
        );
        let running: Job = serde_json::from_value(doc("running")).unwrap();
        let mut earlier = Follower::after(Some(Place::at(2)));
        earlier.take_job(2, &running);
        assert_eq!(earlier.take_text(&piece), Ok(Some((0, "partial"))));
    }

    #[test]
    fn a_place_takes_only_the_text_it_lacks() {
        let mut place = Place::at(3);
        assert_eq!(place.take(2, 0, "Café"), Ok(Some((0, "Café"))));
        assert_eq!(place.take(2, 2, "fé 😀"), Ok(Some((4, " 😀"))), "overlap");
        assert_eq!(place.take(2, 0, "Ca"), Ok(None), "had it");
        assert_eq!(place.take(2, 9, "x"), Err(6), "a gap");
        assert_eq!(place.take(1, 0, "a"), Ok(Some((0, "a"))));
        assert_eq!(place.to_string(), "3/1:1/2:6");
        assert_eq!(after_chars("😀ab", 1), "ab");
        assert_eq!(after_chars("ab", 5), "");
    }

    #[test]
    fn a_hub_keeps_each_attempts_text_and_catches_a_stream_up() {
        let mut hub = Hub::default();
        let piece = hub.text(1, "att_a", 0, "{\"sum", 100).unwrap().unwrap();
        assert_eq!(
            (piece.offset, piece.text, piece.attempt_id),
            (0, "{\"sum", "att_a")
        );
        assert_eq!(
            hub.text(1, "att_a", 9, "x", 100),
            Err(Refused::Gap(5)),
            "a gap: send from 5"
        );
        assert_eq!(
            hub.text(1, "att_a", 3, "um\": \"", 100)
                .unwrap()
                .unwrap()
                .text,
            "\": \""
        );
        assert_eq!(hub.text(1, "att_a", 0, "{\"s", 100), Ok(None));
        assert_eq!(
            hub.text(1, "att_a", 8, &"x".repeat(93), 100),
            Err(Refused::Gap(9)),
            "too long"
        );
        hub.text(2, "att_b", 0, "ab", 100).unwrap();
        let all: Vec<_> = hub
            .text_after(&Place::at(0))
            .map(|p| (p.n, p.offset, p.text.to_owned()))
            .collect();
        assert_eq!(
            all,
            [(1, 0, "{\"sum\": \"".to_owned()), (2, 0, "ab".to_owned())]
        );
        let rest: Vec<_> = hub
            .text_after(&Place::parse("4/1:8/2:2").unwrap())
            .map(|p| (p.n, p.offset, p.text.to_owned()))
            .collect();
        assert_eq!(rest, [(1, 8, "\"".to_owned())]);
        // A client ahead of the hub (its text was lost) is sent nothing it has.
        assert_eq!(
            hub.text_after(&Place::parse("4/1:50").unwrap())
                .filter(|p| p.n == 1)
                .count(),
            0
        );
        hub.drop_text();
        assert_eq!(hub.text_after(&Place::at(0)).count(), 0);
        assert_eq!(hub.chars(1), 0);
    }

    /// A document of job `job_1` in `status`, with attempts 1 and 2 in `first` and
    /// `second`.
    fn doc(status: &str, first: &str, second: &str) -> String {
        let attempt = |n: u32, state: &str| {
            serde_json::json!({"id": format!("att_{n}"), "n": n, "provider": "p",
                "state": state, "started_at": "t", "finished_at": null, "error": null})
        };
        serde_json::json!({"id": "job_1", "kind": "summarize", "status": status,
            "version": 1, "input": {}, "provider": "p", "result": null,
            "completed_by": null, "created_at": "t", "updated_at": "t",
            "attempts": [attempt(1, first), attempt(2, second)]})
        .to_string()
    }

    #[test]
    fn a_hub_refuses_an_ended_attempts_text_and_drops_a_settled_jobs() {
        let mut hub = Hub::default();
        assert!(hub.offer(2, &doc("running", "running", "running")));
        hub.text(1, "att_1", 0, "ab", 100).unwrap();
        hub.text(2, "att_2", 0, "cd", 100).unwrap();
        assert!(hub.offer(5, &doc("succeeded", "succeeded", "running")));
        assert_eq!(hub.text(1, "att_1", 2, "x", 100), Err(Refused::Ended));
        assert_eq!(hub.chars(2), 2, "the loser still runs: its text stays");
        assert!(hub.text(2, "att_2", 2, "e", 100).unwrap().is_some());
        assert!(hub.offer(6, &doc("succeeded", "succeeded", "superseded")));
        assert_eq!(hub.text_after(&Place::at(0)).count(), 0, "settled: dropped");
        assert_eq!(hub.text(2, "att_2", 3, "f", 100), Err(Refused::Ended));

        // A settled job's `unknown` loser streams no more either: its late hand-off
        // would start again from 0 and outlive the job. An attempt added later may.
        let mut hub = Hub::default();
        assert!(hub.offer(2, &doc("succeeded", "succeeded", "unknown")));
        assert_eq!(hub.text(2, "att_2", 0, "late", 100), Err(Refused::Ended));
        assert!(hub.text(3, "att_3", 0, "new", 100).unwrap().is_some());
        let mut hub = Hub::default();
        assert!(hub.offer(2, &doc("unknown", "unknown", "running")));
        assert!(hub.text(1, "att_1", 0, "may win", 100).unwrap().is_some());
    }

    #[test]
    fn a_piece_cuts_into_parts_between_code_points() {
        let piece = Piece {
            n: 2,
            attempt_id: "att",
            offset: 10,
            text: "aé😀bc",
        };
        let parts: Vec<_> = piece.parts(2).map(|p| (p.offset, p.text)).collect();
        assert_eq!(parts, [(10, "aé"), (12, "😀b"), (14, "c")]);
        assert_eq!(piece.parts(FRAME_CHARS).count(), 1);
        assert!(piece.parts(0).all(|p| p.text.chars().count() == 1));
    }

    #[test]
    fn a_keeper_writes_a_chunk_a_kilobyte_and_reads_them_back_in_order() {
        let k = KEEP_EVERY_CHARS;
        let (mut keeper, mut hub) = (Keeper::default(), Hub::default());
        // The hub's text of attempt `n` grown to `chars` code points; the chunks due then
        // (here never more than one), as (key, chars).
        let mut due = |keeper: &mut Keeper, n: u32, chars: u64| {
            let have = hub.chars(n);
            let more = "a".repeat((chars - have) as usize);
            hub.text(n, &format!("att_{n}"), have, &more, 1 << 20)
                .unwrap();
            let chunks = keeper.due(&hub, n);
            assert!(chunks.len() <= 1, "{chunks:?}");
            chunks.into_iter().next().map(|c| (c.key, c.chars))
        };
        assert_eq!(due(&mut keeper, 1, k - 1), None);
        assert_eq!(due(&mut keeper, 1, k), Some((Keeper::key(1, 0), k)));
        keeper.wrote(1, k);
        assert_eq!(due(&mut keeper, 1, 2 * k - 1), None);
        assert_eq!(
            due(&mut keeper, 1, 2 * k + 5),
            Some((Keeper::key(1, k), 2 * k + 5)),
            "from where the last ended"
        );
        // That write failed: tried again a kilobyte later, from the same offset.
        assert_eq!(due(&mut keeper, 1, 2 * k + 6), None, "not on every piece");
        assert_eq!(
            due(&mut keeper, 1, 3 * k + 5),
            Some((Keeper::key(1, k), 3 * k + 5))
        );
        keeper.wrote(1, 3 * k + 5);
        assert_eq!(
            due(&mut keeper, 2, k),
            Some((Keeper::key(2, 0), k)),
            "each attempt on its own"
        );
        assert!(keeper.settle(), "something was written");
        assert!(!keeper.settle(), "nothing since");
        assert_eq!(
            due(&mut keeper, 1, 3 * k + 5),
            Some((Keeper::key(1, 0), 3 * k + 5)),
            "forgotten"
        );

        // A fresh instance reads the chunks back, in order whatever order they are
        // listed in, up to a gap; one that is not a chunk is skipped.
        let (a, b, c) = ("é".repeat(4), "b".repeat(3), "c".repeat(2));
        let entries = vec![
            (Keeper::key(1, 4), format!("att_1\n{b}")),
            (Keeper::key(1, 0), format!("att_1\n{a}")),
            (Keeper::key(1, 9), format!("att_1\n{c}")),
            (Keeper::key(2, 0), "att_2\nxy".to_owned()),
            ("text/x/0".to_owned(), "att_9\nz".to_owned()),
            (Keeper::key(3, 0), "no newline".to_owned()),
        ];
        let (mut fresh, mut hub) = (Keeper::default(), Hub::default());
        assert!(fresh.to_load());
        fresh.load(&mut hub, entries, 100);
        assert!(!fresh.to_load());
        assert_eq!(
            hub.text_of(1),
            Some(format!("{a}{b}").as_str()),
            "up to the gap at 7"
        );
        assert_eq!(hub.text_of(2), Some("xy"));
        assert_eq!(hub.text_of(3), None);
        let more = "d".repeat(k as usize - 1);
        hub.text(1, "att_1", 7, &more, 100 + k).unwrap();
        assert!(fresh.due(&hub, 1).is_empty(), "tried as far as read back");
        hub.text(1, "att_1", 7 + k - 1, "d", 100 + k).unwrap();
        let chunks = fresh.due(&hub, 1);
        assert_eq!(
            chunks
                .iter()
                .map(|c| (c.key.as_str(), c.chars))
                .collect::<Vec<_>>(),
            [(Keeper::key(1, 7).as_str(), 7 + k)]
        );
        // An instance that never read its storage back empties it when the job settles.
        assert!(Keeper::default().settle());
        let mut empty = Keeper::default();
        empty.load(&mut Hub::default(), Vec::new(), 100);
        assert!(!empty.settle(), "read back, nothing there");
    }

    #[test]
    fn a_keeper_keeps_an_unknown_attempts_whole_text_once() {
        let (mut hub, mut keeper) = (Hub::default(), Keeper::every(4));
        assert!(hub.offer(2, &doc("running", "running", "running")));
        hub.text(1, "att_1", 0, "abcdé😀", 100).unwrap();
        hub.text(2, "att_2", 0, "xy", 100).unwrap();
        // A kilobyte (here 4 code points) was written while it streamed.
        let chunks = keeper.due(&hub, 1);
        assert_eq!(
            chunks,
            [EndChunk {
                n: 1,
                chars: 6,
                key: Keeper::key(1, 0),
                value: "att_1\nabcdé😀".to_owned(),
            }]
        );
        keeper.wrote(1, 6);
        hub.text(1, "att_1", 6, "fg", 100).unwrap();
        assert!(keeper.at_unknown(&hub).is_empty(), "nothing unknown yet");
        // Attempt 1 went unknown: the rest of its text, from its last write; attempt 2
        // still runs and keeps its pace.
        assert!(hub.offer(3, &doc("unknown", "unknown", "running")));
        let chunks = keeper.at_unknown(&hub);
        assert_eq!(
            chunks,
            [EndChunk {
                n: 1,
                chars: 8,
                key: Keeper::key(1, 6),
                value: "att_1\nfg".to_owned(),
            }]
        );
        keeper.wrote(1, 8);
        assert!(keeper.at_unknown(&hub).is_empty(), "once");
        // Its call still read a piece (it may yet win): kept at the next document.
        hub.text(1, "att_1", 8, "h", 100).unwrap();
        assert!(hub.offer(4, &doc("unknown", "unknown", "failed")));
        let chunks = keeper.at_unknown(&hub);
        assert_eq!(chunks.len(), 1);
        assert_eq!(
            (chunks[0].key.as_str(), chunks[0].value.as_str()),
            ("text/1/8", "att_1\nh")
        );
        // A failed write is given again at the next call (the next document or piece).
        assert_eq!(keeper.at_unknown(&hub), chunks);
        // A fresh hub reads the whole text back from the three chunks.
        let entries = vec![
            (Keeper::key(1, 0), "att_1\nabcdé😀".to_owned()),
            (Keeper::key(1, 6), "att_1\nfg".to_owned()),
            (chunks[0].key.clone(), chunks[0].value.clone()),
        ];
        let (mut fresh, mut back) = (Keeper::default(), Hub::default());
        fresh.load(&mut back, entries, 100);
        assert_eq!(back.text_of(1), Some("abcdé😀fgh"));
        // A settled job keeps nothing, its unknown attempt's included.
        assert!(hub.offer(5, &doc("cancelled", "unknown", "failed")));
        assert!(keeper.at_unknown(&hub).is_empty());
    }

    #[test]
    fn a_keeper_keeps_a_long_text_in_chunks_that_storage_takes_whatever_failed_before() {
        // The longest text a hub takes, in characters of 2 to 4 bytes (3.4 MiB): one
        // chunk of all of it, or of all since a write that failed, storage would refuse.
        let id = "att_0192f0c4-7b1e-7c3d-9a4b-0123456789ab";
        let max = crate::chat::MAX_CHARS;
        let whole: String = "😀😀😀会é".chars().cycle().take(max as usize).collect();
        assert!(whole.len() > 3 << 20);
        let (mut hub, mut keeper) = (Hub::default(), Keeper::default());
        assert!(hub.offer(2, &doc("running", "running", "running")));
        let mut storage = std::collections::BTreeMap::new();
        // Writes each chunk, in order, unless `fails(i)` says its write fails. Each fits
        // the bound, and its key names where it begins.
        let mut keep =
            |keeper: &mut Keeper, chunks: Vec<EndChunk>, fails: &dyn Fn(usize) -> bool| {
                for (i, chunk) in chunks.into_iter().enumerate() {
                    let (key, value) = (&chunk.key, &chunk.value);
                    let bytes = key.len() + value.len();
                    assert!(bytes <= KEEP_MAX_BYTES, "{key}: {bytes} bytes");
                    let text = value.strip_prefix(&format!("{id}\n")).unwrap();
                    let from = chunk.chars - text.chars().count() as u64;
                    assert_eq!(*key, Keeper::key(1, from), "named where it begins");
                    if !fails(i) {
                        storage.insert(chunk.key.clone(), chunk.value.clone());
                        keeper.wrote(chunk.n, chunk.chars);
                    }
                }
            };
        let (piece, mut at, mut most) = (1 << 16, 0, 0);
        while at < max {
            let text = after_chars(&whole, at);
            let cut = text
                .char_indices()
                .nth(piece)
                .map_or(text.len(), |(i, _)| i);
            hub.text(1, id, at, &text[..cut], max).unwrap();
            at = hub.chars(1);
            let chunks = keeper.due(&hub, 1);
            most = most.max(chunks.len());
            // Every write fails until the text is past 2 MB (11 pieces, 2.4 MB); then,
            // of that call's chunks, the second fails and the others are written; then
            // every write fails again.
            let round = at / piece as u64;
            keep(&mut keeper, chunks, &|i| round != 11 || i == 1);
        }
        assert!(most > 4, "a call gave {most} chunks at most");
        // The attempt goes `unknown`: the rest of its text, in chunks, failing once.
        assert!(hub.offer(3, &doc("unknown", "unknown", "running")));
        let chunks = keeper.at_unknown(&hub);
        assert!(chunks.len() > 1, "{} chunks", chunks.len());
        keep(&mut keeper, chunks, &|_| true);
        let chunks = keeper.at_unknown(&hub);
        keep(&mut keeper, chunks, &|_| false);
        assert!(keeper.at_unknown(&hub).is_empty(), "all of it kept");

        let entries = storage.into_iter().collect();
        let (mut fresh, mut back) = (Keeper::default(), Hub::default());
        fresh.load(&mut back, entries, max);
        assert_eq!(back.chars(1), max, "the whole text is read back");
        assert!(back.text_of(1) == Some(whole.as_str()));
    }

    #[test]
    fn a_followed_job_is_its_id_and_maybe_its_position() {
        assert_eq!(parse_followed("job_1"), Some(("job_1", None)));
        assert_eq!(
            parse_followed("job_1:17"),
            Some(("job_1", Some(Place::at(17))))
        );
        assert_eq!(
            parse_followed("job_1:0"),
            Some(("job_1", Some(Place::at(0))))
        );
        assert_eq!(
            parse_followed("job_1:7/2:40"),
            Some(("job_1", Place::parse("7/2:40")))
        );
        for bad in [
            "",
            ":7",
            "job_1:",
            "job_1:07",
            "job_1:x",
            "job_1:7:8",
            "job_1:7/2",
        ] {
            assert_eq!(parse_followed(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_stream_ends_only_when_nothing_is_in_flight() {
        use AttemptState as A;
        use JobStatus as J;
        assert!(settled(J::Succeeded, [A::Succeeded].into_iter()));
        assert!(settled(
            J::Succeeded,
            [A::Succeeded, A::Superseded].into_iter()
        ));
        assert!(!settled(
            J::Succeeded,
            [A::Succeeded, A::Running].into_iter()
        ));
        assert!(!settled(
            J::Succeeded,
            [A::Starting, A::Succeeded].into_iter()
        ));
        assert!(settled(J::Cancelled, [A::Cancelled].into_iter()));
        assert!(settled(J::Failed, [A::Failed].into_iter()));
        assert!(!settled(J::Failed, [A::Failed, A::Starting].into_iter()));
        for open in [J::Queued, J::Running, J::Unknown] {
            assert!(!settled(open, [A::Failed].into_iter()), "{open:?}");
        }
    }
}
