//! The pacing of a streamed call's text on its way to the job's hub, decided: when a
//! piece goes, how long the call waits between two, how a failed one is tried again,
//! and when the call stops handing on. No I/O and no clock: the core's hand-off loop
//! (`hand_on.rs`, which the Worker's call and the simulator's both run) waits, reads and
//! sends as [`Pacing::next`] says, and tells it what came of each hand-off.
//!
//! Each piece is what the hub lacks: the first at once (the time to first text), then
//! at most one per interval, carrying all that came meanwhile, and the last as soon as
//! the body is read. The interval is [`HAND_OFF_EVERY_MS`] while a stream watches the
//! job, and [`ALONE_EVERY_MS`] while the hub says none does ([`HubAnswer::Alone`]); the
//! hub pokes the call when a stream subscribes ([`Pacing::poked`]), so a late viewer
//! gets the text at once and then at the watched pace. So a stream costs a hand-off (a
//! message on the call's connection to its hub, `hand_on::Connected`) per interval, not
//! per chunk, and a hub that restarted and lost text is sent it again.

/// How long one hand-off of text to the hub may take before it counts as failed (the
/// answer is still read, and recorded, whatever the hub does).
pub const HAND_OFF_MS: u64 = 2_000;

/// The tries of a hand-off that fails (the hub answers an error, or not within
/// [`HAND_OFF_MS`]) before the call stops handing its text on; one piece that goes
/// through starts the count again. Between two tries a pause, doubling from
/// [`HAND_OFF_RETRY_MS`], while the body is read on. Once the body is read, a failed
/// hand-off is tried once more at most: the answer waits for it.
const HAND_OFF_TRIES: u32 = 4;
const HAND_OFF_RETRY_MS: u64 = 100;

/// The shortest interval between two hand-offs of a call's text to the hub after the
/// first, while a stream watches the job: text that comes meanwhile goes in one piece.
/// Twenty a second shows text as smoothly as a page draws it, and keeps a streamed job's
/// messages to its hub (an object bills 20 of them as a request) in proportion to its
/// duration, not to its chunks (`cargo xtask bench`, "Per streamed job"). The price: a
/// chunk reaches the browser up to this much later.
pub const HAND_OFF_EVERY_MS: u64 = 50;

/// The interval while no stream watches the job (the hub answered the last piece
/// [`HubAnswer::Alone`]): nobody shows the text, so it goes to the hub only to be kept
/// (for a stream that comes later, and an operator's `unknown`) and to hear the hub's
/// word that the attempt ended. Each message is an event the hub's object runs, a few
/// ms of server CPU under `wrangler dev`: ten times fewer of them bring a streamed job
/// close to what reading its provider costs (`cargo xtask bench --streamed`). A stream
/// that subscribes, and a document that may end the attempt, poke the call
/// ([`Pacing::poked`]), so neither waits out this interval.
pub const ALONE_EVERY_MS: u64 = 500;

/// What a hub answered a piece of text.
#[derive(Debug, PartialEq, Eq)]
pub enum HubAnswer {
    /// It has this many code points of the attempt's text: send on from there.
    Have(u64),
    /// The same, and no stream watches the job: send at the slower pace
    /// ([`ALONE_EVERY_MS`]) until the hub pokes the call.
    Alone(u64),
    /// The attempt may stream no more (the job's document says it ended): send nothing.
    Stop,
}

/// What the call does next ([`Pacing::next`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Wait for more text while the body is read; then say [`Pacing::read`] whether it
    /// still is.
    Text,
    /// Wait this many ms while the body is read on (text that comes joins the next
    /// piece); then say [`Pacing::read`] whether it still is (`false`: it ended first,
    /// and the rest goes at once).
    ReadOn(u64),
    /// Wait this many ms: the rest of the pause after a failed hand-off, the body read.
    Sleep(u64),
    /// Hand the hub the text from this code point on; then say what came of it
    /// ([`Pacing::took`], [`Pacing::failed`]).
    Hand(u64),
    /// Done: the body is read and the hub has all of its text.
    Done,
}

/// Where a round of [`Pacing::next`] stands: each waits out the interval since the last
/// hand-off, then a failed hand-off's pause, then hands.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Step {
    Top,
    Pause,
    /// The pause ends at this time (the clock's ms).
    PauseRest(f64),
    Hand,
}

/// One call's hand-off of its text (see the module's docs).
#[derive(Clone, Debug)]
pub struct Pacing {
    /// The code points the hub has, as it last said.
    sent: u64,
    /// Hand-offs in a row that the hub took nothing of.
    idle: u32,
    /// The body is still being read.
    reading: bool,
    /// When the last hand-off began.
    began: Option<f64>,
    /// Hand-offs that failed in a row.
    failed: u32,
    /// The hub said no stream watches, and has not poked the call since.
    alone: bool,
    step: Step,
}

impl Default for Pacing {
    fn default() -> Self {
        Self {
            sent: 0,
            idle: 0,
            reading: true,
            began: None,
            failed: 0,
            alone: false,
            step: Step::Top,
        }
    }
}

impl Pacing {
    /// What the call does next, with `chars` code points of text read and the clock at
    /// `now`.
    pub fn next(&mut self, chars: u64, now: f64) -> Next {
        loop {
            match self.step {
                Step::Top => {
                    let ended = !self.reading
                        && crate::mutant::on(crate::mutant::Mutant::TextHandOffEndsWithBody);
                    if chars <= self.sent || ended {
                        return if self.reading { Next::Text } else { Next::Done };
                    }
                    self.step = Step::Pause;
                    if let (true, Some(began)) = (self.reading, self.began) {
                        let wait = began + self.every() as f64 - now;
                        if wait >= 1.0 {
                            return Next::ReadOn(wait as u64);
                        }
                    }
                }
                Step::Pause => {
                    if self.failed == 0 {
                        self.step = Step::Hand;
                        continue;
                    }
                    // The pause is the hub's, whether the body is read meanwhile or not.
                    let pause = HAND_OFF_RETRY_MS << (self.failed - 1).min(4);
                    self.step = Step::PauseRest(now + pause as f64);
                    if self.reading {
                        return Next::ReadOn(pause);
                    }
                }
                Step::PauseRest(until) => {
                    self.step = Step::Hand;
                    let left = until - now;
                    if left >= 1.0 {
                        return Next::Sleep(left as u64);
                    }
                }
                Step::Hand => {
                    self.step = Step::Top;
                    self.began = Some(now);
                    return Next::Hand(self.sent);
                }
            }
        }
    }

    /// Whether the body is still being read, after [`Next::Text`] or [`Next::ReadOn`].
    pub fn read(&mut self, reading: bool) {
        self.reading = reading;
    }

    /// The interval between two hand-offs now.
    fn every(&self) -> u64 {
        match self.alone {
            true => ALONE_EVERY_MS,
            false => HAND_OFF_EVERY_MS,
        }
    }

    /// The hub answered: it has `have` code points of the text, and a stream watches
    /// the job or none does (`alone`). Whether to hand on: a hub that takes nothing twice
    /// in a row holds no more, so stop.
    pub fn took(&mut self, have: u64, alone: bool) -> bool {
        self.failed = 0;
        self.alone = alone;
        self.idle = if have != self.sent { 0 } else { self.idle + 1 };
        self.sent = have;
        self.idle < 2
    }

    /// The hub poked the call while it waited out the interval: a stream subscribed, or
    /// the job's document changed. The piece goes at once (the wait it was in ended), and
    /// the watched pace holds until the hub answers [`HubAnswer::Alone`] again (if that
    /// piece fails, its retry comes at the watched pace). A failed hand-off's pause is
    /// not cut short.
    pub fn poked(&mut self) {
        self.alone = false;
    }

    /// The hand-off failed (the hub answered an error, or not within [`HAND_OFF_MS`]):
    /// whether to try again, or stop handing on.
    pub fn failed(&mut self) -> bool {
        // The hub's word that nobody watches went with the connection: until it says so
        // again, the watched pace (a stream that subscribed meanwhile is not held back).
        self.alone = false;
        self.failed += 1;
        self.failed < HAND_OFF_TRIES && (self.reading || self.failed < 2)
    }

    /// The code points the hub has, as it last said.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// The hand-offs that failed in a row.
    pub fn tries(&self) -> u32 {
        self.failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_piece_goes_at_once_and_the_next_waits_out_the_interval() {
        let mut pace = Pacing::default();
        assert_eq!(pace.next(0, 0.0), Next::Text);
        pace.read(true);
        assert_eq!(pace.next(3, 10.0), Next::Hand(0));
        assert!(pace.took(3, false));
        assert_eq!(pace.next(5, 20.0), Next::ReadOn(40));
        pace.read(true);
        assert_eq!(pace.next(9, 60.0), Next::Hand(3));
    }

    #[test]
    fn the_last_piece_goes_as_soon_as_the_body_is_read() {
        let mut pace = Pacing::default();
        assert_eq!(pace.next(3, 0.0), Next::Hand(0));
        assert!(pace.took(3, false));
        assert_eq!(pace.next(5, 10.0), Next::ReadOn(40));
        pace.read(false);
        assert_eq!(pace.next(7, 12.0), Next::Hand(3));
        assert!(pace.took(7, false));
        assert_eq!(pace.next(7, 13.0), Next::Done);
    }

    #[test]
    fn a_failed_hand_off_pauses_doubling_and_gives_up() {
        let mut pace = Pacing::default();
        assert_eq!(pace.next(3, 0.0), Next::Hand(0));
        assert!(pace.failed());
        // The interval first, then the pause.
        assert_eq!(pace.next(3, 10.0), Next::ReadOn(40));
        pace.read(true);
        assert_eq!(pace.next(3, 50.0), Next::ReadOn(100));
        pace.read(true);
        assert_eq!(pace.next(3, 150.0), Next::Hand(0));
        assert!(pace.failed());
        assert_eq!(pace.next(3, 200.0), Next::ReadOn(200));
        // The body ends during the pause: the rest of the pause, then the last try.
        pace.read(false);
        assert_eq!(pace.next(3, 250.0), Next::Sleep(150));
        assert_eq!(pace.next(3, 400.0), Next::Hand(0));
        assert!(!pace.failed(), "once the body is read, no third try");
    }

    #[test]
    fn alone_the_pieces_go_at_the_slower_pace_until_the_hub_pokes() {
        let mut pace = Pacing::default();
        assert_eq!(pace.next(3, 0.0), Next::Hand(0));
        assert!(pace.took(3, true));
        assert_eq!(pace.next(5, 10.0), Next::ReadOn(490));
        // A stream subscribed: the hub poked the call during the wait; the piece goes now.
        pace.read(true);
        pace.poked();
        assert_eq!(pace.next(9, 120.0), Next::Hand(3));
        assert!(pace.took(9, false));
        assert_eq!(pace.next(12, 130.0), Next::ReadOn(40));
        pace.read(true);
        assert_eq!(pace.next(12, 170.0), Next::Hand(9));
        // The stream left: alone again.
        assert!(pace.took(12, true));
        assert_eq!(pace.next(14, 180.0), Next::ReadOn(490));
    }

    #[test]
    fn a_failed_hand_off_is_tried_again_at_the_watched_pace() {
        let mut pace = Pacing::default();
        assert_eq!(pace.next(3, 0.0), Next::Hand(0));
        assert!(pace.took(3, true));
        assert_eq!(pace.next(5, 500.0), Next::Hand(3));
        assert!(pace.failed());
        assert_eq!(pace.next(5, 510.0), Next::ReadOn(40));
    }

    #[test]
    fn a_poke_does_not_cut_a_failed_hand_offs_pause() {
        let mut pace = Pacing::default();
        assert_eq!(pace.next(3, 0.0), Next::Hand(0));
        assert!(pace.failed());
        assert_eq!(pace.next(3, 10.0), Next::ReadOn(40));
        pace.read(true);
        assert_eq!(pace.next(3, 50.0), Next::ReadOn(100));
        pace.read(true);
        pace.poked();
        assert_eq!(pace.next(3, 60.0), Next::Sleep(90));
        assert_eq!(pace.next(3, 150.0), Next::Hand(0));
    }

    #[test]
    fn a_hub_that_takes_nothing_twice_stops_the_hand_off() {
        let mut pace = Pacing::default();
        assert_eq!(pace.next(3, 0.0), Next::Hand(0));
        assert!(pace.took(0, false));
        assert!(!pace.took(0, false));
    }
}
