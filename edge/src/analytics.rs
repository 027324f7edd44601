//! Workers Analytics Engine, where the deployment binds a dataset as `ANALYTICS`
//! (`[[analytics_engine_datasets]]` in wrangler.toml): one data point per create outcome
//! and per provider call, for dashboards over months and every location. `GET /v1/stats`
//! does not read it (it reads D1's counters); this is the production-scale copy. Writing
//! is fire-and-forget and never fails a request: without the binding nothing is written.
//!
//! Every data point: `index1` = what it is about (the owner for creates, the kind for
//! calls), `blob1` = the event, `blob2` = the kind, `blob3` = the provider, `double1` = 1
//! (a count), `double2` = milliseconds (for calls).

use worker::{AnalyticsEngineDataPointBuilder, Env};

/// The binding's name.
const BINDING: &str = "ANALYTICS";

/// Writes one data point; a missing binding or a refused write is ignored.
fn write(env: &Env, index: &str, event: &str, kind: &str, provider: &str, ms: f64) {
    let Ok(dataset) = env.analytics_engine(BINDING) else {
        return;
    };
    if worker::js_sys::Reflect::get(dataset.as_ref(), &"writeDataPoint".into())
        .map_or(true, |f| !f.is_function())
    {
        return;
    }
    let point = AnalyticsEngineDataPointBuilder::new()
        .indexes([index])
        .add_blob(event)
        .add_blob(kind)
        .add_blob(provider)
        .add_double(1.0)
        .add_double(ms)
        .build();
    let _ = dataset.write_data_point(&point);
}

/// Analytics Engine keeps at most 96 bytes of an index: the owner's first 96, cut on a
/// character boundary (owners may be 128 characters).
fn index_of(owner: &str) -> &str {
    let mut end = owner.len().min(96);
    while !owner.is_char_boundary(end) {
        end -= 1;
    }
    &owner[..end]
}

/// A create's outcome: `job_created`, `job_replayed` or `job_conflict`.
pub(crate) fn create(env: &Env, owner: &str, event: &str, kind: &str, provider: &str) {
    write(env, index_of(owner), event, kind, provider, 0.0);
}

/// A provider call's outcome (`call_answered`, `call_failed`, `call_unknown`) and time.
pub(crate) fn call(env: &Env, event: &str, kind: &str, provider: &str, ms: f64) {
    write(env, kind, event, kind, provider, ms);
}
