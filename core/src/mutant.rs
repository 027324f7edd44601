//! Planted defects, for proving that the simulation catches them (`sim/`): each breaks
//! one rule of the core behind a switch that only the native shell has. In the Worker
//! [`on`] is a constant `false`, so no mutant is compiled in. The defects that live in
//! SQL (the compare-and-swap, the reconciler's and the purge's conditions) are planted
//! by the simulator's SQLite instead, on the statement's text.

/// One planted defect in Rust.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutant {
    /// A refused resolve writes a log line anyway (one that numbers itself as the job's
    /// next change, so only the check that a refusal writes nothing can catch it).
    RefusedResolveWritesEvent,
    /// A create answers a key bound to another request as a replay.
    CreateSkipsFingerprint,
    /// A sharded create does not ask the previous layout's database for its key.
    ShardedCreateSkipsBefore,
    /// The dispatcher holding a call does not stop it when its attempt is cancelled.
    CallOutlivesCancel,
    /// A new shard instance hands on only what it holds in memory, not every
    /// `starting` attempt its shard's rows hold: a create committed by an instance that
    /// died before its alarm is never dispatched by the alarm.
    HandOffSkipsSweep,
    /// A shard's alarm that runs while a create's hand-off is still sending does not
    /// come again: what that hand-off loses (refused, or the instance gone) waits for
    /// the reconciler.
    AlarmIgnoresHandOff,
    /// The store tells a job's live streams its document under the next position, not
    /// its own: a stream would show one change under two positions.
    NotifyUnderTheNextPosition,
    /// A streamed answer that reported an error after some text fails retryably: a
    /// failover would pay for the work twice.
    StreamErrorAfterTextRetries,
    /// The dispatcher hedges a primary whose streamed text has begun (it hedges on time
    /// alone, not on silence): every streamed job of a hedged kind pays for two calls.
    HedgeAfterText,
    /// A shard's alarm with no attempt to hand on sets no next alarm, though the shard
    /// still holds jobs (`alarm::next_in_ms`): its reconciler pass waits for its next
    /// write, which may never come.
    AlarmForgetsPass,
    /// A call's hand-off of its text ends when its body is read (`pacing.rs`): the text
    /// read since the last hand-off never reaches the hub, and its streams see it only
    /// in the result.
    TextHandOffEndsWithBody,
    /// A hub keeps an `unknown` attempt's text only by the kilobyte, never its rest at
    /// once (`keeping::Writes`): what an operator reads after a restart is cut short.
    UnknownTextNotKeptWhole,
    /// A call's hand-off gives up after its hub took the first piece, as if the hub took
    /// no more (`hand_on.rs`): its streams see the rest of the text only in the result.
    HandOffQuitsAfterFirstPiece,
    /// A provider's answer is taken as an output without the kind's contract checked
    /// (`answer::offer`): a job succeeds with a result its kind refuses.
    OfferSkipsContract,
    /// A call handing its text on at the pace for a job no stream watches does not
    /// hear the hub's poke (`hand_on.rs`): a stream that subscribes meanwhile waits out
    /// the slow interval for the text the call already has.
    PokeIgnored,
    /// The dispatcher tells the job's hub of its claim before it calls the provider,
    /// not beside the call (`dispatch::call_and_record`): a request to the hub on the
    /// way to every first text.
    ClaimNoticeFirst,
}

#[cfg(not(feature = "mutants"))]
#[inline(always)]
pub fn on(_: Mutant) -> bool {
    false
}

#[cfg(feature = "mutants")]
thread_local! {
    static ACTIVE: std::cell::Cell<Option<Mutant>> = const { std::cell::Cell::new(None) };
}

#[cfg(feature = "mutants")]
pub fn on(mutant: Mutant) -> bool {
    ACTIVE.with(|active| active.get() == Some(mutant))
}

/// Plants `mutant` (or none) for this thread.
#[cfg(feature = "mutants")]
pub fn plant(mutant: Option<Mutant>) {
    ACTIVE.with(|active| active.set(mutant));
}
