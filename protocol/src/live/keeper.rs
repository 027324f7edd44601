//! What a hub keeps of each attempt's text in its storage, and when it writes.

use super::*;

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
