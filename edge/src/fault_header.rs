//! The test-only fault switch on the Worker (`fault.rs` says what a fault is): whether
//! this deployment lets requests arm faults, and the header that arms them.

use crate::fault::HEADER;
use worker::{Env, Request};

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
