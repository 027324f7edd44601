//! onceclick's core: the decisions that keep one intent to one job, with no platform in
//! them. The Worker (`onceclick-edge`) and the deterministic simulator (`onceclick-sim`)
//! are its two shells: each implements its ports ([`host::Host`], [`host::Notify`],
//! [`store::Places`], [`platform::Platform`]) and calls the same decisions
//! ([`jobs`], [`attempts`], [`dispatch`], [`reconcile`], [`certification`]) and the
//! store's SQL ([`store`]). See docs/two-shells.md.

pub mod alarm;
pub mod answer;
pub mod attempts;
pub mod certification;
pub mod clock;
pub mod config;
pub mod dispatch;
pub mod error;
pub mod fault;
pub mod hand_on;
pub mod handoff;
pub mod host;
pub mod jobs;
pub mod keeping;
pub mod kinds;
pub mod log;
pub mod message;
pub mod mutant;
pub mod outcome;
pub mod pacing;
pub mod platform;
pub mod providers;
pub mod reconcile;
pub mod retention;
pub mod store;
pub mod together;
