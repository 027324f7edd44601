//! Test-only fault injection, so that tests can prove what happens when a D1 call fails.
//!
//! Only with `ALLOW_FAULT_INJECTION=true` (never set in `wrangler.toml`; `cargo xtask
//! test` sets it for its own Worker) a request may carry `X-Onceclick-Fault`, a
//! comma-separated list of `<operation>:<when>`:
//!
//! - `<operation>` names a store call (`create_or_get_job`, `claim`, `complete`,
//!   `move_attempt`, `insert_attempt`, `insert_hedge`, …: every `store::Op`), or
//!   `dispatch_prepare` (the dispatcher's work between the claim and the provider call);
//! - `<when>` is `before` (the call fails before it reaches D1: nothing commits) or
//!   `after` (the call commits, then its reply is lost).
//!
//! Three name the live hubs instead: `subscribe:before` fails a stream's first hub
//! subscription; `hand_off:before` makes the job's hub cut a streamed call's connection
//! at its first piece of text past the first (mid-answer), and `hand_off:after` makes it
//! answer every piece of that call late (it keeps the text, and answers 100 ms inside
//! the call's bound); `hub_reset:before` (or `after`) empties the hub's memory at that
//! piece, as an eviction would, so that it reads its storage back (`wrangler dev`
//! cannot evict an object). `no_hand_off:before` hands none of a streamed call's text to
//! its hub (`cargo xtask bench --streamed`'s floor).
//!
//! Each fault fires once, at the first matching call, and says so in one structured log
//! line (`{"event": "fault_fired", "op", "when", "scope"}`) that tests read to prove it
//! fired. A request that creates an attempt hands its faults on to that attempt's
//! dispatch message, so the dispatcher's calls can fail too. The older `drop-enqueue`
//! (the dispatch message is never sent) still works. A name that is no store call is
//! refused (400), so a renamed call cannot turn a fault test into a silent no-op.

use crate::store::op::Op;

/// When a faulty call fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    /// Before it reaches D1: nothing was written.
    Before,
    /// After D1 committed it: the write happened, its reply is lost.
    After,
}

/// Where a fault fires: a store operation, or a step that is not one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Point {
    /// A store call.
    Store(Op),
    /// The dispatcher's work between its claim and the provider call.
    DispatchPrepare,
    /// A streamed call's hand-offs of text to its job's hub.
    HandOff,
    /// The job's hub's memory, as a streamed call hands it its text.
    HubReset,
    /// A streamed call's text, handed to no hub (the bench's floor: what reading the
    /// provider's chunks costs alone).
    NoHandOff,
    /// A stream's first hub subscription.
    Subscribe,
    /// The store's notification of a move to the job's hub.
    Notify,
}

/// The points that are not store calls, by name.
const STEPS: &[(Point, &str)] = &[
    (Point::DispatchPrepare, "dispatch_prepare"),
    (Point::HandOff, "hand_off"),
    (Point::HubReset, "hub_reset"),
    (Point::NoHandOff, "no_hand_off"),
    (Point::Subscribe, "subscribe"),
    (Point::Notify, "notify"),
];

impl Point {
    /// The point's name, as `X-Onceclick-Fault` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Point::Store(op) => op.name(),
            step => STEPS
                .iter()
                .find(|(p, _)| *p == step)
                .map_or("", |(_, name)| name),
        }
    }

    fn named(name: &str) -> Option<Point> {
        Op::named(name).map(Point::Store).or_else(|| {
            STEPS
                .iter()
                .find(|(_, n)| *n == name)
                .map(|(point, _)| *point)
        })
    }
}

/// One armed fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    pub at: Point,
    pub when: When,
}

/// The header that arms faults (read by the Worker, `fault_header.rs`).
pub const HEADER: &str = "X-Onceclick-Fault";

/// Every name a fault may give: the store's operations, and the steps that are not.
#[cfg(test)]
fn names() -> Vec<&'static str> {
    Op::ALL
        .iter()
        .map(|op| op.name())
        .chain(STEPS.iter().map(|(_, name)| *name))
        .collect()
}

/// Parses `op:when,op:when` (and `drop-enqueue`); `Err` names the part that is neither.
pub fn parse(spec: &str) -> Result<Vec<Fault>, String> {
    let mut faults = Vec::new();
    for part in spec.split(',').map(str::trim) {
        if part == "drop-enqueue" {
            continue;
        }
        let parsed = part.split_once(':').and_then(|(op, when)| {
            let when = match when {
                "before" => When::Before,
                "after" => When::After,
                _ => return None,
            };
            Point::named(op).map(|at| Fault { at, when })
        });
        faults.push(parsed.ok_or_else(|| {
            format!("{HEADER}: {part:?} is not <store call>:<before|after> nor drop-enqueue")
        })?);
    }
    Ok(faults)
}

/// Whether `spec` asks that the dispatch message be lost (`drop-enqueue`).
pub fn drops_enqueue(spec: Option<&str>) -> bool {
    spec.is_some_and(|s| s.split(',').any(|p| p.trim() == "drop-enqueue"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_list_and_refuses_what_it_does_not_know() {
        let faults = parse("claim:after, complete:before,drop-enqueue").unwrap();
        assert_eq!(
            faults,
            vec![
                Fault {
                    at: Point::Store(Op::Claim),
                    when: When::After
                },
                Fault {
                    at: Point::Store(Op::Complete),
                    when: When::Before
                },
            ]
        );
        assert!(parse("claim:sometimes").is_err());
        assert!(
            parse("clam:after").is_err(),
            "a misspelt call is not ignored"
        );
        assert_eq!(parse("hand_off:before").unwrap()[0].at, Point::HandOff);
        for name in names() {
            assert_eq!(Point::named(name).map(Point::name), Some(name));
        }
        assert!(drops_enqueue(Some("claim:after,drop-enqueue")));
        assert!(!drops_enqueue(Some("claim:after")));
    }
}
