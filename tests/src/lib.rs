//! What the integration tests (and `cargo xtask`) share: minting tokens, an HTTP client
//! for the real Worker that `cargo xtask test` starts, and a read-only look at its local
//! D1 database, so a test can prove what was, and was not, written.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod auth;
pub mod client;
pub mod db;
pub mod idp;
pub mod log;
pub mod mock;
pub mod probe;
pub mod proxy;
pub mod report;
pub mod sse;
