//! A stream's follower: what one client has of a job, so that it is sent only what it
//! lacks.

use super::*;

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
