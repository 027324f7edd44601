//! How long an ended job keeps its key (`JOB_RETENTION_HOURS`): what the reconciler's
//! purge waits for, and the longest a job's hub keeps text without reading its job.

/// A key stays bound at least this long after its job ends, whatever the config says.
const MIN_RETENTION_HOURS: f64 = 24.0;
const DEFAULT_RETENTION_HOURS: f64 = 168.0;

/// The retention in hours, from `JOB_RETENTION_HOURS` as given (`var`): the purge's
/// idle time, and the longest a hub keeps text without reading its job (`live.rs`).
pub fn hours(var: Option<f64>) -> f64 {
    var.unwrap_or(DEFAULT_RETENTION_HOURS)
        .max(MIN_RETENTION_HOURS)
}
