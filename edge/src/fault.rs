//! Test-only fault injection, so that tests can prove what happens when a D1 call fails.
//!
//! Only with `ALLOW_FAULT_INJECTION=true` (never set in `wrangler.toml`; `cargo xtask
//! test` sets it for its own Worker) a request may carry `X-Onceclick-Fault`, a
//! comma-separated list of `<operation>:<when>`:
//!
//! - `<operation>` names a store call (`create_or_get_job`, `claim`, `complete`,
//!   `move_attempt`, `insert_attempt`, `insert_hedge`, …, see `Store`), or
//!   `dispatch_prepare` (the dispatcher's work between the claim and the provider call);
//! - `<when>` is `before` (the call fails before it reaches D1: nothing commits) or
//!   `after` (the call commits, then its reply is lost).
//!
//! Two name the live hubs instead: `subscribe:before` fails a stream's first hub
//! subscription; `hand_off:before` makes the job's hub refuse a streamed call's first
//! hand-off of text (503), and `hand_off:after` makes it answer every hand-off of that
//! call late (it keeps the text, and answers 100 ms inside the call's bound).
//!
//! Each fault fires once, at the first matching call, and says so in one structured log
//! line (`{"event": "fault_fired", "op", "when", "scope"}`) that tests read to prove it
//! fired. A request that creates an attempt hands its faults on to that attempt's
//! dispatch message, so the dispatcher's calls can fail too. The older `drop-enqueue`
//! (the dispatch message is never sent) still works. A name that is no store call is
//! refused (400), so a renamed call cannot turn a fault test into a silent no-op.

use worker::{Env, Request};

/// When a faulty call fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum When {
    /// Before it reaches D1: nothing was written.
    Before,
    /// After D1 committed it: the write happened, its reply is lost.
    After,
}

/// One armed fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Fault {
    pub(crate) op: String,
    pub(crate) when: When,
}

/// The header that arms faults.
pub(crate) const HEADER: &str = "X-Onceclick-Fault";

/// Whether this deployment lets requests arm faults.
pub(crate) fn allowed(env: &Env) -> bool {
    env.var("ALLOW_FAULT_INJECTION")
        .is_ok_and(|v| v.to_string() == "true")
}

/// The raw header value, when faults are allowed and the request names any.
pub(crate) fn header(req: &Request, env: &Env) -> Option<String> {
    if !allowed(env) {
        return None;
    }
    req.headers().get(HEADER).ok().flatten()
}

/// Every operation a fault may name: the store's calls, and the dispatcher's work
/// between its claim and the provider call.
pub(crate) const OPS: &[&str] = &[
    "attempt_by_request",
    "attempt_job",
    "cancel",
    "certifications",
    "claim",
    "complete",
    "create_or_get_job",
    "dispatch_prepare",
    "events",
    "hand_off",
    "insert_attempt",
    "insert_failover",
    "insert_hedge",
    "job",
    "job_by_key",
    "log_event",
    "move_attempt",
    "notify",
    "ping",
    "purge",
    "reconcile",
    "save_certification",
    "stuck_starting",
    "subscribe",
    "watch",
];

/// Parses `op:when,op:when` (and `drop-enqueue`); `Err` names the part that is neither.
pub(crate) fn parse(spec: &str) -> Result<Vec<Fault>, String> {
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
            OPS.contains(&op).then(|| Fault {
                op: op.to_owned(),
                when,
            })
        });
        faults.push(parsed.ok_or_else(|| {
            format!("{HEADER}: {part:?} is not <store call>:<before|after> nor drop-enqueue")
        })?);
    }
    Ok(faults)
}

/// Whether `spec` asks that the dispatch message be lost (`drop-enqueue`).
pub(crate) fn drops_enqueue(spec: Option<&str>) -> bool {
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
                    op: "claim".into(),
                    when: When::After
                },
                Fault {
                    op: "complete".into(),
                    when: When::Before
                },
            ]
        );
        assert!(parse("claim:sometimes").is_err());
        assert!(
            parse("clam:after").is_err(),
            "a misspelt call is not ignored"
        );
        assert!(drops_enqueue(Some("claim:after,drop-enqueue")));
        assert!(!drops_enqueue(Some("claim:after")));
    }
}
