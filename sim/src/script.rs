//! The scripts of the simulator's providers, and the record of each call: shared by the
//! host (`host.rs`), which plays a call's script, and the world (`world/calls.rs`),
//! which draws it and checks what came of the call.

/// What a scripted provider does with one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Script {
    /// Answers a valid output after the delay.
    Answer,
    /// Answers after the delay with an output that breaks the kind's contract (a key
    /// its schema does not name; a blank text): paid for, and a non-retryable failure
    /// once the answer is classified as the Worker's is.
    BreaksContract,
    /// Fails at once, retryably (a 500 or 429): no work done.
    FailRetryable,
    /// Fails for good (a 400): no work done.
    FailForGood,
    /// Never answers: the call times out (`unknown`); no work done, as it happens.
    Hang,
    /// Does the work and answers after the call timed out: paid for, and the answer lost.
    Late,
    /// Answers with its status, then the body is cut off (`unknown`): paid for.
    CutOff,
    /// Streams its answer (after the delay, within the timeout), ending as this says;
    /// read through the protocol's reader and classified as the Worker's call does.
    Streamed(StreamEnd),
}

/// How a streamed answer ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StreamEnd {
    /// `finish_reason: stop`: an output.
    Stop,
    /// `finish_reason: length` after some text: failed, and paid for.
    Length,
    /// An error object after some text: failed, paid for, never retryable.
    ErrorAfterText,
    /// An error object before any text: failed retryably, no work done.
    ErrorBeforeText,
    /// Cut off after some text, before its finish reason: `unknown`, paid for.
    Cut,
    /// A refusal: failed, and paid for.
    Refusal,
}

impl Script {
    /// Whether the provider did (and bills) the work.
    pub(crate) fn paid(self) -> bool {
        match self {
            Script::Answer | Script::BreaksContract | Script::Late | Script::CutOff => true,
            Script::Streamed(end) => end != StreamEnd::ErrorBeforeText,
            Script::FailRetryable | Script::FailForGood | Script::Hang => false,
        }
    }
}

/// One provider call, as the world remembers it.
#[derive(Clone, Debug)]
pub(crate) struct CallRecord {
    pub(crate) script: Script,
    /// The provider answered an output within the timeout.
    pub(crate) output: bool,
    /// The dispatcher's task that made the call.
    pub(crate) task: u64,
    /// Its answer reached the dispatcher (the dispatcher's task lived that long).
    pub(crate) delivered: bool,
    /// The dispatcher's task was dropped by a crash before it finished.
    pub(crate) orphaned: bool,
    /// The dispatcher dropped the call before its answer (a stop): when, virtual ms.
    pub(crate) stopped_at: Option<u64>,
    /// The call failed for good on its own record: a streamed answer classified as a
    /// failure that is not retryable, whose attempt's error says what was paid for.
    pub(crate) failed_on_record: bool,
    /// When the call began, and when its first streamed text reached the dispatcher
    /// (virtual ms): a call that spoke within a kind's `hedge_after_ms` is never hedged.
    pub(crate) began: u64,
    pub(crate) first_text: Option<u64>,
}
