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

/// The most jobs one stream (`GET /v1/stream?job=…`) may follow.
pub const MAX_STREAM_JOBS: usize = 20;

/// One `job` parameter of `GET /v1/stream`: a job's id, alone or followed by `:` and
/// the position the client has (`job_…:7`), since one `Last-Event-ID` cannot hold the
/// positions of several jobs. `None` when the id is empty or the position is not one.
pub fn parse_followed(text: &str) -> Option<(&str, Option<Position>)> {
    let (id, position) = match text.split_once(':') {
        Some((id, position)) => (id, Some(Position::parse(position)?)),
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
}

impl Hub {
    /// Takes change `seq` with its document if it is newer than any heard of: `true`
    /// means "send it to every stream", `false` that it is dropped.
    pub fn offer(&mut self, seq: u64, doc: &str) -> bool {
        if self.latest.as_ref().is_some_and(|(heard, _)| *heard >= seq) {
            return false;
        }
        self.latest = Some((seq, doc.to_owned()));
        true
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

/// One stream's view of one job: the position it last sent. A change is sent only if
/// it is newer, so a stream never sends an older document after a newer one, nor one
/// change twice, whatever order its sources (its own read, the hub) deliver in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Follower {
    /// The position of the last document sent, or the client's own.
    pub at: Option<u64>,
}

impl Follower {
    /// A stream that resumes after `at` (the client's position), or from the start.
    pub fn after(at: Option<Position>) -> Self {
        Self {
            at: at.map(|p| p.0),
        }
    }

    /// Whether change `seq` is to be sent; if so, it becomes the stream's position.
    pub fn take(&mut self, seq: u64) -> bool {
        if self.at.is_some_and(|at| seq <= at) {
            return false;
        }
        self.at = Some(seq);
        true
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
        let mut resumed = Follower::after(Some(Position(4)));
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
    fn a_followed_job_is_its_id_and_maybe_its_position() {
        assert_eq!(parse_followed("job_1"), Some(("job_1", None)));
        assert_eq!(
            parse_followed("job_1:17"),
            Some(("job_1", Some(Position(17))))
        );
        assert_eq!(
            parse_followed("job_1:0"),
            Some(("job_1", Some(Position(0))))
        );
        for bad in ["", ":7", "job_1:", "job_1:07", "job_1:x", "job_1:7:8"] {
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
