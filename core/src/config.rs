//! The core's configuration, typed and read once: every var the decisions read, parsed
//! from the shell's vars when the shell makes it (the Worker once per isolate, the
//! simulator once per world), instead of a string lookup at each use.
//!
//! A value that does not parse takes its default, as before, except `PROVIDERS`: a
//! list that does not parse is a deployment error, kept here and answered (as an
//! internal error) by each decision that needs the providers, so that the rest of the
//! API still answers.

use crate::dispatch::MAX_WATCH_READS;
use crate::error::{ApiResult, AppError};
use crate::kinds::Kinds;
use onceclick_protocol::contract::ProviderConfig;
use std::rc::Rc;

/// The watch over a running call reads its attempt this often by default
/// (`CANCEL_POLL_MS`).
const DEFAULT_CANCEL_POLL_MS: u64 = 1_000;
/// The watch never reads more often than this: each read is two rows by primary key
/// (on the sharded store, one Durable Object request each).
const MIN_CANCEL_POLL_MS: u64 = 100;
/// An attempt `starting` for this long has probably lost its dispatch message.
const DEFAULT_STARTING_AFTER_MS: f64 = 30_000.0;
/// A `running` attempt this long past its provider's timeout has lost its dispatcher.
const DEFAULT_LOST_GRACE_MS: f64 = 60_000.0;
/// Jobs deleted per purge batch, so that a backlog never makes one statement too big
/// for D1.
const DEFAULT_PURGE_CHUNK: f64 = 200.0;

/// What the core's decisions are configured with.
#[derive(Clone, Debug)]
pub struct Config {
    /// `PROVIDERS`: the providers, in the order the deployment lists them (or why the
    /// list does not parse).
    providers: Result<Rc<Vec<ProviderConfig>>, String>,
    /// `CANCEL_POLL_MS`: how often the watch over a running call reads its attempt.
    pub cancel_poll_ms: u64,
    /// `MAX_WATCH_READS`: the watch's reads in one delivery at most, 1 to
    /// [`crate::dispatch::MAX_WATCH_READS`] (the default, which the subrequest bound
    /// counts; a smaller one lets the simulation reach it).
    pub max_watch_reads: u32,
    /// `RECONCILE_STARTING_AFTER_MS`: an attempt `starting` this long is sent again.
    pub starting_after_ms: f64,
    /// `RECONCILE_LOST_GRACE_MS`: a `running` attempt this long past its provider's
    /// timeout has lost its dispatcher.
    pub lost_grace_ms: f64,
    /// `JOB_RETENTION_HOURS`: how long an ended job keeps its key (`retention.rs`).
    pub retention_hours: f64,
    /// `PURGE_CHUNK`: jobs deleted per purge batch, 1 to 1,000.
    pub purge_chunk: u32,
    /// `RECONCILE_EVERY_MS`: how often a shard with jobs reconciles itself
    /// (`alarm::every_ms`).
    pub reconcile_every_ms: f64,
    /// The kinds: the build's, unless the shell gives its own ([`Config::with_kinds`]).
    pub kinds: &'static Kinds,
}

impl Config {
    /// The configuration that `var` gives (a var's value by its name, if set).
    pub fn read(var: &dyn Fn(&str) -> Option<String>) -> Self {
        let number = |name: &str| var(name).and_then(|v| v.parse::<f64>().ok());
        let text = var("PROVIDERS").unwrap_or_else(|| "[]".to_owned());
        Self {
            providers: ProviderConfig::parse_list(&text).map(Rc::new),
            cancel_poll_ms: cancel_poll_ms(var("CANCEL_POLL_MS")),
            max_watch_reads: number("MAX_WATCH_READS")
                .filter(|n| !n.is_nan())
                .map_or(MAX_WATCH_READS, |n| {
                    n.clamp(1.0, f64::from(MAX_WATCH_READS)) as u32
                }),
            starting_after_ms: number("RECONCILE_STARTING_AFTER_MS")
                .unwrap_or(DEFAULT_STARTING_AFTER_MS),
            lost_grace_ms: number("RECONCILE_LOST_GRACE_MS").unwrap_or(DEFAULT_LOST_GRACE_MS),
            retention_hours: crate::retention::hours(number("JOB_RETENTION_HOURS")),
            purge_chunk: number("PURGE_CHUNK")
                .unwrap_or(DEFAULT_PURGE_CHUNK)
                .clamp(1.0, 1_000.0) as u32,
            reconcile_every_ms: crate::alarm::every_ms(var("RECONCILE_EVERY_MS").as_deref()),
            kinds: Kinds::built(),
        }
    }

    /// The same configuration, declaring `kinds` instead of the build's.
    pub fn with_kinds(self, kinds: &'static Kinds) -> Self {
        Self { kinds, ..self }
    }

    /// The providers this deployment configures. A `PROVIDERS` that does not parse is
    /// a deployment error, not a client's: reported as internal.
    pub fn providers(&self) -> ApiResult<Rc<Vec<ProviderConfig>>> {
        self.providers.clone().map_err(AppError::internal)
    }
}

/// The watch's interval from `CANCEL_POLL_MS`: the default when unset or not a whole
/// number, never below [`MIN_CANCEL_POLL_MS`].
fn cancel_poll_ms(var: Option<String>) -> u64 {
    var.and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(DEFAULT_CANCEL_POLL_MS)
        .max(MIN_CANCEL_POLL_MS)
}

#[cfg(test)]
mod tests {
    use super::Config;
    use std::collections::BTreeMap;

    fn read(vars: &[(&str, &str)]) -> Config {
        let vars: BTreeMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::read(&|name| vars.get(name).cloned())
    }

    #[test]
    fn the_watch_cap_can_only_be_lowered_and_is_never_zero() {
        for (var, most) in [
            (None, 300),
            (Some("7"), 7),
            (Some("0"), 1),
            (Some("-5"), 1),
            (Some("1000"), 300),
            (Some("inf"), 300),
            (Some("nan"), 300),
            (Some("many"), 300),
        ] {
            let vars: Vec<(&str, &str)> = var.map(|v| ("MAX_WATCH_READS", v)).into_iter().collect();
            assert_eq!(read(&vars).max_watch_reads, most, "{var:?}");
        }
    }

    #[test]
    fn the_watch_reads_at_most_every_100_ms() {
        for (var, every) in [
            (None, 1_000),
            (Some("250"), 250),
            (Some("20"), 100),
            (Some("0"), 100),
            (Some("soon"), 1_000),
            (Some("-5"), 1_000),
        ] {
            let config = match var {
                Some(v) => read(&[("CANCEL_POLL_MS", v)]),
                None => read(&[]),
            };
            assert_eq!(config.cancel_poll_ms, every, "{var:?}");
        }
    }

    #[test]
    fn numbers_that_do_not_parse_take_their_defaults() {
        let config = read(&[
            ("RECONCILE_STARTING_AFTER_MS", "later"),
            ("RECONCILE_LOST_GRACE_MS", "5000"),
            ("JOB_RETENTION_HOURS", "1"),
            ("PURGE_CHUNK", "100000"),
        ]);
        assert_eq!(config.starting_after_ms, 30_000.0);
        assert_eq!(config.lost_grace_ms, 5_000.0);
        assert_eq!(config.retention_hours, 24.0, "never below a day");
        assert_eq!(config.purge_chunk, 1_000);
        assert_eq!(read(&[("PURGE_CHUNK", "0")]).purge_chunk, 1);
    }

    #[test]
    fn providers_that_do_not_parse_fail_only_where_they_are_needed() {
        assert_eq!(read(&[]).providers().map(|p| p.len()).ok(), Some(0));
        let broken = read(&[("PROVIDERS", "[{")]);
        let err = broken.providers().err().map(|e| e.code);
        assert_eq!(err, Some(onceclick_protocol::ErrorCode::Internal));
        assert_eq!(broken.cancel_poll_ms, 1_000, "the rest still reads");
    }
}
