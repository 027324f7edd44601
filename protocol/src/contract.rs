//! Kind declarations: what a job kind takes, what it must give back, and who may run it;
//! and the providers that run them.
//!
//! A kind is declared in one JSON file, `edge/kinds/NAME.json` (`decl.rs` lists every
//! field). [`Kind::from_json`] checks the whole declaration and compiles its two JSON
//! Schemas once; the checks after that are pure functions of a value. The build, `cargo
//! xtask kinds` and the Worker all load a kind through it, so a file one accepts the
//! others accept.

use crate::fingerprint::canonical_sha256;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;

#[cfg(not(target_arch = "wasm32"))]
mod checks;
mod decl;
#[cfg(not(target_arch = "wasm32"))]
mod example;
#[cfg(not(target_arch = "wasm32"))]
mod files;
mod kind;
mod rules;
pub mod template;

#[cfg(not(target_arch = "wasm32"))]
pub use files::{load_dir, load_file, KindFile};

pub use decl::{Answer, AutoFailover, Golden, KindDecl, Message, Parameters, Prompt, Role, Rule};
pub use kind::Kind;

// The JSON Schema validator: boon natively (xtask, tests), @cfworker/json-schema in the
// Worker. Both offer `Schema::compile(url, schema)` and `Schema::check(value)`, whose
// error lists the innermost failures, each as `at '<instance path>': <what>`.
#[cfg(not(target_arch = "wasm32"))]
#[path = "contract/boon_schema.rs"]
mod schema;
#[cfg(target_arch = "wasm32")]
#[path = "contract/js_schema.rs"]
mod schema;

/// How an output broke the contract. The message names the key, path or rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation(pub String);

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Parses a kind file. Natively (the build, `cargo xtask kinds`) an error names the
/// JSON path where the file went wrong; the Worker loads only files the build passed,
/// and keeps the path-tracking parser out of its wasm.
#[cfg(not(target_arch = "wasm32"))]
fn parse_decl(text: &str) -> Result<KindDecl, String> {
    let mut reader = serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(&mut reader).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." {
            "the top".to_owned()
        } else {
            path
        };
        format!("at {path}: {}", e.into_inner())
    })
}

#[cfg(target_arch = "wasm32")]
fn parse_decl(text: &str) -> Result<KindDecl, String> {
    serde_json::from_str(text).map_err(|e| format!("the kind file does not parse: {e}"))
}

/// One OpenAI-compatible provider, as the `PROVIDERS` var declares it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// The name kinds use in their failover order.
    pub name: String,
    /// `POST {base_url}/chat/completions` is called.
    pub base_url: String,
    /// The model asked for.
    pub model: String,
    /// The name of the wrangler secret holding the API key, if the provider needs one.
    #[serde(default)]
    pub api_key_secret: Option<String>,
    /// How long one call may take before the attempt becomes `unknown`; for a provider
    /// that streams, how long it may stay silent (before its answer's head, or between
    /// two chunks).
    pub timeout_ms: u64,
    /// The provider streams its answers: its calls send `"stream": true` (and ask for
    /// the usage chunk), and their text is read as it comes.
    #[serde(default)]
    pub stream: bool,
    /// With `stream`: how long one streamed call may take in all, however often it
    /// speaks (default: [`ProviderConfig::DEFAULT_STREAM_TOTAL_TIMEOUTS`] times
    /// `timeout_ms`).
    #[serde(default)]
    pub total_timeout_ms: Option<u64>,
    /// The provider promises to stop all work this long after a call.
    #[serde(default)]
    pub abandon_after_ms: Option<u64>,
    /// The largest prompt the provider takes, in its own tokens.
    #[serde(default)]
    pub max_prompt_tokens: Option<u64>,
}

impl ProviderConfig {
    /// A streamed call's total limit, in `timeout_ms`, when `total_timeout_ms` is unset.
    pub const DEFAULT_STREAM_TOTAL_TIMEOUTS: u64 = 10;

    /// How long one call may take in all: `timeout_ms`, or for a provider that streams,
    /// `total_timeout_ms`.
    pub fn total_ms(&self) -> u64 {
        match self.stream {
            false => self.timeout_ms,
            true => self.total_timeout_ms.unwrap_or(
                self.timeout_ms
                    .saturating_mul(Self::DEFAULT_STREAM_TOTAL_TIMEOUTS),
            ),
        }
    }

    /// Parses the `PROVIDERS` var: a JSON array of providers.
    pub fn parse_list(text: &str) -> Result<Vec<ProviderConfig>, String> {
        serde_json::from_str(text).map_err(|e| format!("PROVIDERS does not parse: {e}"))
    }

    /// What a certification is bound to: SHA-256 of the canonical `{base_url, model}`.
    /// Another model, or the same name at another address, is another provider.
    pub fn digest(&self) -> String {
        let mut what = serde_json::Map::new();
        what.insert("base_url".to_owned(), Value::String(self.base_url.clone()));
        what.insert("model".to_owned(), Value::String(self.model.clone()));
        canonical_sha256(&Value::Object(what))
    }
}

#[cfg(test)]
#[path = "contract/tests.rs"]
mod tests;
