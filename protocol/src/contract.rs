//! Kind declarations: what a job kind takes, what it must give back, and who may run it;
//! and the providers that run them.
//!
//! A kind is declared in one JSON file, `edge/kinds/NAME.json` (`decl.rs` lists every
//! field). [`Kind::from_json`] checks the whole declaration and compiles its two JSON
//! Schemas once; the checks after that are pure functions of a value. The build, `cargo
//! xtask kinds` and the Worker all load a kind through it, so a file one accepts the
//! others accept.

use std::fmt;

#[cfg(not(target_arch = "wasm32"))]
mod checks;
mod decl;
#[cfg(not(target_arch = "wasm32"))]
mod example;
#[cfg(not(target_arch = "wasm32"))]
mod files;
mod kind;
mod provider;
mod rules;
pub mod template;

#[cfg(not(target_arch = "wasm32"))]
pub use files::{load_dir, load_file, KindFile};

pub use decl::{Answer, AutoFailover, Golden, KindDecl, Message, Parameters, Prompt, Role, Rule};
pub use kind::Kind;
pub use provider::{JsonForm, ProviderConfig};

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

#[cfg(test)]
#[path = "contract/tests.rs"]
mod tests;
