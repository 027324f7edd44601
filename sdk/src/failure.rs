//! Why a job ended badly, as the SDK's `Job` says it (`failure`): derived from its
//! attempts here, so that the job document stays the server's, on both stores.

use crate::js;
use crate::watch::status_of;
use onceclick_protocol::AttemptState;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

/// Sets `job.failure`: `{ code, message, attempt_id }` of the attempt that decided a
/// `failed` or `unknown` job (`JobStatus::decided_by`), else `null`. An attempt that
/// ended without an error of its own is named by its state.
pub(crate) fn annotate(job: &JsValue) {
    let attempts: js_sys::Array = js::get(job, "attempts").dyn_into().unwrap_or_default();
    let states: Vec<AttemptState> = attempts
        .iter()
        .map(|a| {
            let state = js::get_string(&a, "state").unwrap_or_default();
            AttemptState::from_wire(&state).unwrap_or(AttemptState::Running)
        })
        .collect();
    let decided = status_of(job).and_then(|status| status.decided_by(&states));
    let failure = match decided {
        None => JsValue::NULL,
        Some(at) => {
            let attempt = attempts.get(at as u32);
            let error = js::get(&attempt, "error");
            let said = |name| js::get_string(&error, name);
            let state = states[at].as_str();
            js::object(&[
                (
                    "code",
                    said("code").unwrap_or_else(|| state.to_owned()).into(),
                ),
                (
                    "message",
                    said("message")
                        .unwrap_or_else(|| ["its attempt ended ", state].concat())
                        .into(),
                ),
                ("attempt_id", js::get(&attempt, "id")),
            ])
        }
    };
    let _ = js_sys::Reflect::set(job, &JsValue::from_str("failure"), &failure);
}
