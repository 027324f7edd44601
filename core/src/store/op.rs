//! The store's operations, as a type: every round trip the store makes is one [`Op`],
//! and what an operation does to jobs ([`Op::moves`]) decides whether their hubs are
//! told. That decision is an exhaustive `match`: an operation cannot be added without
//! it.

/// Declares [`Op`] with each operation's name (the `store_call` log line's `op`, and
/// what a test fault names, `fault.rs`), and [`Op::ALL`].
macro_rules! ops {
    ($($(#[$doc:meta])* $op:ident = $name:literal,)*) => {
        /// One store operation.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Op {
            $($(#[$doc])* $op,)*
        }

        impl Op {
            /// Every operation, in the order declared.
            pub const ALL: &'static [Op] = &[$(Op::$op,)*];

            /// The operation's name.
            pub fn name(self) -> &'static str {
                match self {
                    $(Op::$op => $name,)*
                }
            }
        }
    };
}

ops! {
    /// The attempt an attempt request's key already made, if any.
    AttemptByRequest = "attempt_by_request",
    /// An attempt's job and state.
    AttemptJob = "attempt_job",
    /// Cancels a job and its open attempts.
    Cancel = "cancel",
    /// The certifications of a provider.
    Certifications = "certifications",
    /// A dispatcher claims an attempt (`starting → running`), superseding losers.
    Claim = "claim",
    /// An attempt's answer: the compare-and-swap completion, or its failure.
    Complete = "complete",
    /// A create: binds (owner, key) to a new job, or reads the one bound.
    CreateOrGetJob = "create_or_get_job",
    /// A job's events.
    Events = "events",
    /// The fallback button's new attempt.
    InsertAttempt = "insert_attempt",
    /// A failover's new attempt.
    InsertFailover = "insert_failover",
    /// A hedge's new attempt.
    InsertHedge = "insert_hedge",
    /// Reads jobs by id (one, or the documents a sweep moved).
    Job = "job",
    /// The job a key is bound to.
    JobByKey = "job_by_key",
    /// The job a key is bound to in the previous layout (a move between stores).
    JobByKeyBefore = "job_by_key_before",
    /// Appends one event to a job's log.
    LogEvent = "log_event",
    /// A page of attempts.
    ListAttempts = "list_attempts",
    /// A page of jobs.
    ListJobs = "list_jobs",
    /// An attempt's move that is not its answer (`unknown`, `failed`, `abandoned` …).
    MoveAttempt = "move_attempt",
    /// How many keys the previous layout still holds.
    MoveStatus = "move_status",
    /// The store answers at all.
    Ping = "ping",
    /// Deletes ended jobs past retention.
    Purge = "purge",
    /// Deletes figures past retention.
    PurgeStats = "purge_stats",
    /// The reconciler's sweep: `unknown → abandoned`, lost `running → unknown`.
    Reconcile = "reconcile",
    /// Keeps a certification, in every place.
    SaveCertification = "save_certification",
    /// The figures, from every place.
    Stats = "stats",
    /// Attempts still `starting` long after they were made.
    StuckStarting = "stuck_starting",
    /// The dispatcher's watch over a call in flight (counted apart).
    Watch = "watch",
}

/// What an operation does to jobs, and so how their hubs are told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Moves {
    /// It moves no job (a read, a create, a log line, a purge of jobs that ended).
    Nothing,
    /// It may move the one job its route names: its batch reads the job's document
    /// back, and the store hands it to the job's hub.
    OneJob,
    /// The same, but the document waits in the store until its caller hands it on
    /// ([`super::Store::tell_claim`]): the claim's, which the dispatcher sends beside the
    /// provider's call rather than before it.
    OneJobByCaller,
    /// It may move many jobs at once: each of its statements returns the jobs it moved
    /// (as `id`), and the store reads their documents back after, and tells each hub.
    Many,
}

impl Op {
    /// What this operation does to jobs. A create moves none that anyone follows yet (a
    /// stream opens on a job that exists), and a purge deletes only jobs that ended,
    /// whose hubs were told when they did.
    pub fn moves(self) -> Moves {
        match self {
            Op::Claim => Moves::OneJobByCaller,
            Op::MoveAttempt
            | Op::Complete
            | Op::Cancel
            | Op::InsertAttempt
            | Op::InsertHedge
            | Op::InsertFailover => Moves::OneJob,
            Op::Reconcile => Moves::Many,
            Op::AttemptByRequest
            | Op::AttemptJob
            | Op::Certifications
            | Op::CreateOrGetJob
            | Op::Events
            | Op::Job
            | Op::JobByKey
            | Op::JobByKeyBefore
            | Op::LogEvent
            | Op::ListAttempts
            | Op::ListJobs
            | Op::MoveStatus
            | Op::Ping
            | Op::Purge
            | Op::PurgeStats
            | Op::SaveCertification
            | Op::Stats
            | Op::StuckStarting
            | Op::Watch => Moves::Nothing,
        }
    }

    /// The operation of this name.
    pub fn named(name: &str) -> Option<Op> {
        Op::ALL.iter().copied().find(|op| op.name() == name)
    }
}

#[cfg(test)]
mod tests {
    use crate::store::op::Op;

    #[test]
    fn names_are_distinct_and_read_back() {
        for op in Op::ALL {
            assert_eq!(Op::named(op.name()), Some(*op));
        }
        let mut names: Vec<_> = Op::ALL.iter().map(|op| op.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Op::ALL.len());
    }
}
