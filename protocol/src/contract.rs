//! Kind declarations: what a job kind takes, what it must give back, and who may run it.
//!
//! A kind is declared in one JSON file under `edge/kinds/`. [`Kind::from_json`] compiles
//! its two JSON Schemas once; the checks after that are pure functions of a value.

use crate::fingerprint::canonical_sha256;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;

/// A kind as written in its file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KindDecl {
    /// The name clients send as `kind`.
    pub kind: String,
    /// What the kind is for, for humans.
    #[serde(default)]
    pub description: String,
    /// JSON Schema (2020-12) the input must pass.
    pub input_schema: Value,
    /// The prompt; `{{name}}` is replaced by the input's top-level member `name`.
    pub prompt: Prompt,
    /// JSON Schema (2020-12) the provider's output must pass.
    pub output_schema: Value,
    /// Rules on output (and input) that a schema cannot say.
    #[serde(default)]
    pub rules: Vec<Rule>,
    /// Provider names in failover order; the first is the primary.
    pub providers: Vec<String>,
    /// Start one hedge attempt after the running one's call has been silent this long
    /// (no answer, no streamed text); never once its text has begun.
    #[serde(default)]
    pub hedge_after_ms: Option<u64>,
    /// After a retryable failure (never after `unknown`), try the next certified
    /// provider, up to `max_attempts` attempts in all.
    #[serde(default)]
    pub auto_failover: Option<AutoFailover>,
    /// Inputs used to certify a provider for this kind.
    #[serde(default)]
    pub golden_inputs: Vec<Value>,
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

/// Automatic failover after a retryable failure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AutoFailover {
    /// The most attempts a job may have, the first included.
    pub max_attempts: u32,
}

/// The two messages sent to a chat-completions provider.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prompt {
    /// The system message.
    pub system: String,
    /// The user message template.
    pub user: String,
}

/// A business rule on an output.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "rule", rename_all = "snake_case", deny_unknown_fields)]
pub enum Rule {
    /// The string at `output` (a JSON Pointer into the output) has fewer characters than
    /// the string at `input` (a JSON Pointer into the input).
    ShorterThan {
        /// Pointer into the output.
        output: String,
        /// Pointer into the input.
        input: String,
    },
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::ShorterThan { output, input } => {
                write!(f, "output {output} must be shorter than input {input}")
            }
        }
    }
}

// The JSON Schema validator: boon natively (xtask, tests), @cfworker/json-schema in the
// Worker. Both offer `Schema::compile(url, schema)` and `Schema::check(value)`, whose
// error lists the innermost failures, each as `at '<instance path>': <what>`.
#[cfg(not(target_arch = "wasm32"))]
#[path = "contract/boon_schema.rs"]
mod schema;
#[cfg(target_arch = "wasm32")]
#[path = "contract/js_schema.rs"]
mod schema;

/// A compiled kind, ready to check inputs and outputs.
pub struct Kind {
    decl: KindDecl,
    input: schema::Schema,
    output: schema::Schema,
    contract_version: String,
}

impl fmt::Debug for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kind")
            .field("kind", &self.decl.kind)
            .field("contract_version", &self.contract_version)
            .finish_non_exhaustive()
    }
}

/// How an output broke the contract. The message names the key, path or rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation(pub String);

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Kind {
    /// Parses and compiles a kind file. Errors name what is wrong with the declaration.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let decl: KindDecl =
            serde_json::from_str(text).map_err(|e| format!("kind file does not parse: {e}"))?;
        if decl.providers.is_empty() {
            return Err(format!("kind {} names no providers", decl.kind));
        }
        let compile = |name: &str, schema: &Value| {
            let url = format!("urn:onceclick:{}:{name}", decl.kind);
            schema::Schema::compile(&url, schema)
                .map_err(|e| format!("kind {}: {name} schema does not compile: {e}", decl.kind))
        };
        let input = compile("input", &decl.input_schema)?;
        let output = compile("output", &decl.output_schema)?;
        let contract_version = contract_version(&decl);
        Ok(Self {
            decl,
            input,
            output,
            contract_version,
        })
    }

    /// The declaration as written.
    pub fn decl(&self) -> &KindDecl {
        &self.decl
    }

    /// The kind's name.
    pub fn name(&self) -> &str {
        &self.decl.kind
    }

    /// The primary provider: the first in failover order.
    pub fn primary(&self) -> &str {
        // `from_json` refuses a kind without providers.
        self.decl.providers.first().map_or("", String::as_str)
    }

    /// The provider after `after` in failover order that `usable` accepts, wrapping
    /// around (the primary when `after` is `None`). `None` when no provider is usable.
    pub fn next_provider(
        &self,
        after: Option<&str>,
        usable: impl Fn(&str) -> bool,
    ) -> Option<&str> {
        let order = &self.decl.providers;
        let start = after
            .and_then(|a| order.iter().position(|p| p == a))
            .map_or(0, |i| i + 1);
        (0..order.len())
            .map(|k| order[(start + k) % order.len()].as_str())
            .find(|p| usable(p))
    }

    /// Whether the kind names `provider` at all.
    pub fn names_provider(&self, provider: &str) -> bool {
        self.decl.providers.iter().any(|p| p == provider)
    }

    /// A hash of everything that defines the contract: prompt, both schemas and the
    /// rules. Any change to one of them makes a new version and voids certifications.
    pub fn contract_version(&self) -> &str {
        &self.contract_version
    }

    /// Checks an input against the input schema.
    pub fn check_input(&self, input: &Value) -> Result<(), String> {
        self.input.check(input)
    }

    /// Checks a provider's output against the whole contract: the output schema, no
    /// top-level key the schema does not name, and every business rule.
    pub fn check_output(&self, input: &Value, output: &Value) -> Result<(), Violation> {
        if let (Some(members), Some(named)) = (
            output.as_object(),
            self.decl
                .output_schema
                .get("properties")
                .and_then(Value::as_object),
        ) {
            if let Some(extra) = members.keys().find(|k| !named.contains_key(*k)) {
                return Err(Violation(format!(
                    "top-level key {extra:?} is not named by the output schema"
                )));
            }
        }
        self.output
            .check(output)
            .map_err(|e| Violation(format!("output schema: {e}")))?;
        for rule in &self.decl.rules {
            check_rule(rule, input, output)?;
        }
        Ok(())
    }

    /// Renders the prompt for `input`: `(system, user)`.
    pub fn render_prompt(&self, input: &Value) -> (String, String) {
        (
            render(&self.decl.prompt.system, input),
            render(&self.decl.prompt.user, input),
        )
    }
}

fn check_rule(rule: &Rule, input: &Value, output: &Value) -> Result<(), Violation> {
    match rule {
        Rule::ShorterThan {
            output: out_ptr,
            input: in_ptr,
        } => {
            let chars = |v: &Value, ptr: &str| {
                v.pointer(ptr)
                    .and_then(Value::as_str)
                    .map(|s| s.chars().count())
            };
            match (chars(output, out_ptr), chars(input, in_ptr)) {
                (Some(o), Some(i)) if o < i => Ok(()),
                (Some(o), Some(i)) => Err(Violation(format!(
                    "rule shorter_than: output {out_ptr} has {o} characters, input {in_ptr} has {i}"
                ))),
                _ => Err(Violation(format!(
                    "rule shorter_than: {out_ptr} or {in_ptr} is not a string"
                ))),
            }
        }
    }
}

fn render(template: &str, input: &Value) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        match after.find("}}") {
            Some(end) => {
                let name = after[..end].trim();
                match input.get(name) {
                    Some(Value::String(s)) => out.push_str(s),
                    Some(other) => out.push_str(&other.to_string()),
                    None => {}
                }
                rest = &after[end + 2..];
            }
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

fn contract_version(decl: &KindDecl) -> String {
    let defining = serde_json::json!({
        "kind": decl.kind,
        "input_schema": decl.input_schema,
        "prompt": decl.prompt,
        "output_schema": decl.output_schema,
        "rules": decl.rules,
    });
    let mut hex = canonical_sha256(&defining);
    hex.truncate(16);
    hex
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SUMMARIZE: &str = include_str!("../../edge/kinds/summarize.json");

    fn kind() -> Kind {
        Kind::from_json(SUMMARIZE).unwrap()
    }

    #[test]
    fn summarize_input_is_text_of_1_to_20000_chars() {
        let k = kind();
        assert!(k.check_input(&json!({"text": "hello"})).is_ok());
        assert!(k.check_input(&json!({"text": "é".repeat(20000)})).is_ok());
        let e = k.check_input(&json!({"text": ""})).unwrap_err();
        assert!(e.contains("/text"), "{e}");
        assert!(k.check_input(&json!({"text": "x".repeat(20001)})).is_err());
        assert!(k.check_input(&json!({})).is_err());
        assert!(k.check_input(&json!({"text": 5})).is_err());
        assert!(k.check_input(&json!({"text": "a", "extra": 1})).is_err());
        assert!(k.check_input(&json!("text")).is_err());
    }

    #[test]
    fn output_must_keep_schema_keys_and_rules() {
        let k = kind();
        let input = json!({"text": "a long enough text to summarize"});
        let good = json!({"summary": "short", "sentiment": "neutral"});
        assert!(k.check_output(&input, &good).is_ok());

        let extra = json!({"summary": "short", "sentiment": "neutral", "confidence": 0.9});
        let v = k.check_output(&input, &extra).unwrap_err();
        assert!(v.0.contains("\"confidence\""), "{v}");

        let wrong_enum = json!({"summary": "short", "sentiment": "angry"});
        let v = k.check_output(&input, &wrong_enum).unwrap_err();
        assert!(v.0.contains("/sentiment"), "{v}");

        let missing = json!({"summary": "short"});
        assert!(k.check_output(&input, &missing).is_err());

        let too_long = json!({"summary": "x".repeat(401), "sentiment": "neutral"});
        assert!(k
            .check_output(&json!({"text": "y".repeat(1000)}), &too_long)
            .is_err());

        let longer =
            json!({"summary": "this summary is longer than the text", "sentiment": "neutral"});
        let v = k
            .check_output(&json!({"text": "tiny"}), &longer)
            .unwrap_err();
        assert!(v.0.contains("shorter_than"), "{v}");
    }

    #[test]
    fn contract_version_moves_with_prompt_schema_and_rules_only() {
        let base: KindDecl = serde_json::from_str(SUMMARIZE).unwrap();
        let version = |d: &KindDecl| {
            Kind::from_json(&serde_json::to_string(d).unwrap())
                .unwrap()
                .contract_version()
                .to_owned()
        };
        let v0 = version(&base);
        assert_eq!(v0.len(), 16);

        let mut prompt = base.clone();
        prompt.prompt.user.push('!');
        assert_ne!(version(&prompt), v0);

        let mut schema = base.clone();
        schema.output_schema["properties"]["summary"]["maxLength"] = json!(300);
        assert_ne!(version(&schema), v0);

        let mut rules = base.clone();
        rules.rules.clear();
        assert_ne!(version(&rules), v0);

        let mut providers = base.clone();
        providers.providers.reverse();
        assert_eq!(version(&providers), v0);
    }

    #[test]
    fn next_provider_follows_failover_order_and_wraps() {
        let k = kind();
        assert_eq!(k.next_provider(None, |_| true), Some("primary"));
        assert_eq!(k.next_provider(Some("primary"), |_| true), Some("fallback"));
        assert_eq!(k.next_provider(Some("fallback"), |_| true), Some("primary"));
        assert_eq!(
            k.next_provider(Some("primary"), |p| p != "fallback"),
            Some("primary")
        );
        assert_eq!(k.next_provider(Some("primary"), |_| false), None);
        assert_eq!(k.next_provider(Some("unknown"), |_| true), Some("primary"));
    }

    #[test]
    fn every_kind_file_compiles() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../edge/kinds");
        let mut seen = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            let kind = Kind::from_json(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(
                path.file_stem().and_then(|s| s.to_str()),
                Some(kind.name()),
                "a kind file is named after its kind"
            );
            for input in &kind.decl().golden_inputs {
                kind.check_input(input)
                    .unwrap_or_else(|e| panic!("{}: golden input {input}: {e}", path.display()));
            }
            assert!(
                !kind.decl().golden_inputs.is_empty(),
                "{} has golden inputs",
                path.display()
            );
            seen += 1;
        }
        assert!(seen >= 2, "found {seen} kind files");
    }

    #[test]
    fn prompt_renders_input_members() {
        let (_, user) = kind().render_prompt(&json!({"text": "The cat sat."}));
        assert!(user.contains("The cat sat."), "{user}");
        assert_eq!(render("a {{x}} b {{y}} {{", &json!({"x": 1})), "a 1 b  {{");
    }

    #[test]
    fn bad_declarations_are_refused_with_a_reason() {
        assert!(Kind::from_json("{").unwrap_err().contains("does not parse"));
        let mut d: Value = serde_json::from_str(SUMMARIZE).unwrap();
        d["providers"] = json!([]);
        assert!(Kind::from_json(&d.to_string())
            .unwrap_err()
            .contains("no providers"));
        d["providers"] = json!(["primary"]);
        d["input_schema"] = json!({"type": 5});
        assert!(Kind::from_json(&d.to_string())
            .unwrap_err()
            .contains("input schema"));
    }
}
