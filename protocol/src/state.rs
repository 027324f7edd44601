use serde::{Deserialize, Serialize};

/// Where a job stands. `succeeded` and `cancelled` are final.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    /// Its attempt is `starting`: inserted, not yet picked up by the dispatcher.
    Queued,
    /// An attempt is talking to a provider.
    Running,
    /// An attempt timed out: the provider may still be working. Blocks new attempts.
    Unknown,
    /// The last attempt failed; a new attempt may be asked for.
    Failed,
    /// An attempt won; `result` holds its output for good.
    Succeeded,
    /// The owner gave up; every later result is discarded.
    Cancelled,
}

impl JobStatus {
    /// Every status.
    pub const ALL: &'static [JobStatus] = &[
        Self::Queued,
        Self::Running,
        Self::Unknown,
        Self::Failed,
        Self::Succeeded,
        Self::Cancelled,
    ];

    /// The wire and database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Unknown => "unknown",
            Self::Failed => "failed",
            Self::Succeeded => "succeeded",
            Self::Cancelled => "cancelled",
        }
    }

    /// The status `text` spells on the wire and in the database, if it is one.
    pub fn from_wire(text: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|s| s.as_str() == text)
    }

    /// Nothing more can happen to a job in a final status.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Succeeded | Self::Cancelled)
    }

    /// The status of a job that is not final, from its attempts' states: any `unknown`
    /// blocks it, then any `running`, then any `starting`; otherwise its last try
    /// failed. The database keeps the same rule in one place, the `job_rollup` view.
    pub fn rollup(attempts: &[AttemptState]) -> JobStatus {
        let any = |s: AttemptState| attempts.contains(&s);
        if any(AttemptState::Unknown) {
            Self::Unknown
        } else if any(AttemptState::Running) {
            Self::Running
        } else if any(AttemptState::Starting) {
            Self::Queued
        } else {
            Self::Failed
        }
    }

    /// The attempt that says why a job in this status ended badly, by its index in
    /// `attempts` (oldest first, by number): for `unknown`, the newest attempt whose
    /// outcome is not known; for `failed`, the newest attempt that ended without an
    /// answer (failed, abandoned, or resolved as cancelled). With a hedge, whose two
    /// attempts may end in either order, that is the newer one, not the one that ended
    /// last. `None` for every other status (the job did
    /// not end badly) and for a job with no such attempt.
    pub fn decided_by(self, attempts: &[AttemptState]) -> Option<usize> {
        use AttemptState as A;
        let last = |ended: &dyn Fn(AttemptState) -> bool| attempts.iter().rposition(|&s| ended(s));
        match self {
            Self::Unknown => last(&|s| s == A::Unknown),
            Self::Failed => last(&|s| matches!(s, A::Failed | A::Abandoned | A::Cancelled)),
            _ => None,
        }
    }
}

/// Where one attempt against one provider stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptState {
    /// Inserted with its job (or by a retry); waiting for the dispatcher.
    Starting,
    /// The dispatcher claimed it and is calling the provider.
    Running,
    /// It finished first and its output is the job's result.
    Succeeded,
    /// It failed; its `error` says whether trying again may help.
    Failed,
    /// The provider did not answer in time; it may still be working.
    Unknown,
    /// An `unknown` attempt whose provider has certainly stopped (`abandon_after_ms`).
    Abandoned,
    /// The job was cancelled, or an admin resolved the attempt so.
    Cancelled,
    /// It finished, but another attempt had already won; its output was dropped.
    Superseded,
}

impl AttemptState {
    /// Every state.
    pub const ALL: &'static [AttemptState] = &[
        Self::Starting,
        Self::Running,
        Self::Succeeded,
        Self::Failed,
        Self::Unknown,
        Self::Abandoned,
        Self::Cancelled,
        Self::Superseded,
    ];

    /// The only moves that exist. Each is made by one conditional UPDATE that names the
    /// state it leaves (`… WHERE id = ? AND state = 'running'`).
    pub const MOVES: &'static [(AttemptState, AttemptState)] = &[
        (Self::Starting, Self::Running),
        (Self::Running, Self::Succeeded),
        (Self::Running, Self::Failed),
        (Self::Running, Self::Unknown),
        (Self::Unknown, Self::Succeeded),
        (Self::Unknown, Self::Failed),
        (Self::Unknown, Self::Abandoned),
        (Self::Starting, Self::Cancelled),
        (Self::Running, Self::Cancelled),
        (Self::Unknown, Self::Cancelled),
        (Self::Running, Self::Superseded),
        (Self::Unknown, Self::Superseded),
        // A hedge inserted just before another attempt won: it never reaches a provider.
        (Self::Starting, Self::Superseded),
    ];

    /// The wire and database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Unknown => "unknown",
            Self::Abandoned => "abandoned",
            Self::Cancelled => "cancelled",
            Self::Superseded => "superseded",
        }
    }

    /// The state `text` spells on the wire and in the database, if it is one.
    pub fn from_wire(text: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|s| s.as_str() == text)
    }

    /// Whether `self → to` is one of [`Self::MOVES`].
    pub fn can_move_to(self, to: AttemptState) -> bool {
        Self::MOVES.contains(&(self, to))
    }

    /// No move leaves a final state.
    pub fn is_final(self) -> bool {
        !Self::MOVES.iter().any(|(from, _)| *from == self)
    }

    /// `starting` or `running`: a new attempt must wait (`attempt_in_flight`).
    pub fn is_in_flight(self) -> bool {
        matches!(self, Self::Starting | Self::Running)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_that_ended_badly_names_the_attempt_that_decided_it() {
        use AttemptState as A;
        // Every job of up to three attempts whose rollup ends it badly names one, of the
        // state that made the rollup; every other status names none.
        let mut jobs: Vec<Vec<AttemptState>> = vec![vec![]];
        for _ in 0..3 {
            let longer: Vec<_> = jobs
                .iter()
                .flat_map(|j| {
                    A::ALL.iter().map(move |&s| {
                        let mut j = j.clone();
                        j.push(s);
                        j
                    })
                })
                .collect();
            jobs.extend(longer);
        }
        for attempts in jobs.iter().filter(|a| !a.is_empty()) {
            let won = attempts
                .iter()
                .any(|&s| matches!(s, A::Succeeded | A::Superseded));
            let status = JobStatus::rollup(attempts);
            let decided = status.decided_by(attempts);
            match status {
                JobStatus::Unknown => assert_eq!(decided.map(|i| attempts[i]), Some(A::Unknown)),
                JobStatus::Failed if !won => {
                    let i = decided.unwrap_or_else(|| panic!("{attempts:?} names no attempt"));
                    assert!(matches!(
                        attempts[i],
                        A::Failed | A::Abandoned | A::Cancelled
                    ));
                    assert!(attempts[i + 1..]
                        .iter()
                        .all(|s| !matches!(s, A::Failed | A::Abandoned | A::Cancelled)));
                }
                _ => {}
            }
        }
        assert_eq!(
            JobStatus::Succeeded.decided_by(&[A::Failed, A::Succeeded]),
            None
        );
        assert_eq!(JobStatus::Cancelled.decided_by(&[A::Cancelled]), None);
        assert_eq!(
            JobStatus::Failed.decided_by(&[A::Failed, A::Abandoned, A::Superseded]),
            Some(1)
        );
        assert_eq!(
            JobStatus::Unknown.decided_by(&[A::Unknown, A::Failed, A::Unknown]),
            Some(2)
        );
    }

    #[test]
    fn final_states_are_exactly_the_contracts() {
        let finals: Vec<_> = AttemptState::ALL
            .iter()
            .copied()
            .filter(|s| s.is_final())
            .collect();
        assert_eq!(
            finals,
            [
                AttemptState::Succeeded,
                AttemptState::Failed,
                AttemptState::Abandoned,
                AttemptState::Cancelled,
                AttemptState::Superseded
            ]
        );
    }

    #[test]
    fn timeout_never_becomes_failed_directly_from_starting() {
        assert!(!AttemptState::Starting.can_move_to(AttemptState::Unknown));
        assert!(!AttemptState::Starting.can_move_to(AttemptState::Failed));
        assert!(AttemptState::Running.can_move_to(AttemptState::Unknown));
        assert!(AttemptState::Unknown.can_move_to(AttemptState::Abandoned));
        assert!(!AttemptState::Running.can_move_to(AttemptState::Abandoned));
        assert!(!AttemptState::Succeeded.can_move_to(AttemptState::Superseded));
    }

    #[test]
    fn spellings_match_serde() {
        for s in AttemptState::ALL {
            assert_eq!(
                serde_json::to_value(s).unwrap(),
                serde_json::Value::from(s.as_str())
            );
        }
        for s in JobStatus::ALL {
            assert_eq!(
                serde_json::to_value(s).unwrap(),
                serde_json::Value::from(s.as_str())
            );
        }
        assert!(JobStatus::Succeeded.is_final() && JobStatus::Cancelled.is_final());
        assert!(!JobStatus::Failed.is_final() && !JobStatus::Unknown.is_final());
    }
}
