//! A compiled kind: its declaration checked whole once (schemas compiled, every
//! template hole and rule pointer held to the schemas, golden outputs held to the
//! contract), then pure checks of inputs and outputs.

use super::decl::{Answer, KindDecl, Message, Role};
use super::{rules, schema, template, Violation};
use crate::fingerprint::canonical_sha256;
use serde_json::{json, Value};
use std::fmt;

/// A compiled kind, ready to check inputs and outputs.
pub struct Kind {
    decl: KindDecl,
    messages: Vec<Message>,
    output_schema: Value,
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

impl Kind {
    /// Parses and compiles a kind file. Errors name what is wrong with the declaration
    /// and where (a JSON path into the file where the parser gives one).
    pub fn from_json(text: &str) -> Result<Self, String> {
        let decl = super::parse_decl(text)?;
        // The file's members as written, for the contract version (hashing them as they
        // are spares the Worker the typed members' serializers).
        let raw: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        Self::compile(decl, &raw)
    }

    /// Compiles a declaration. Natively (the build, `cargo xtask kinds`, the
    /// simulator) every check a kind file must pass comes first (`checks.rs`); the
    /// Worker loads only files the build passed, and keeps those checks out of its wasm.
    fn compile(decl: KindDecl, raw: &Value) -> Result<Self, String> {
        let at = |path: &str, what: &str| format!("at {path}: {what}");
        let messages = match &decl.prompt {
            Some(p) => vec![
                Message {
                    role: Role::System,
                    content: p.system.clone(),
                },
                Message {
                    role: Role::User,
                    content: p.user.clone(),
                },
            ],
            None => decl.messages.clone(),
        };
        let output_schema = match (decl.answer, &decl.output_schema) {
            (_, Some(schema)) => schema.clone(),
            (Answer::Text, None) => json!({"type": "string", "minLength": 1}),
            (Answer::Json, None) => {
                return Err(at("output_schema", "a JSON answer needs an output schema"))
            }
        };
        let compile = |name: &str, schema: &Value| {
            let url = format!("urn:onceclick:{}:{name}", decl.kind);
            schema::Schema::compile(&url, schema)
                .map_err(|e| format!("at {name}_schema: the schema does not compile: {e}"))
        };
        let input = compile("input", &decl.input_schema)?;
        let output = compile("output", &output_schema)?;
        #[cfg(not(target_arch = "wasm32"))]
        super::checks::declaration(&decl, &messages, &output_schema)?;
        let contract_version = contract_version(&decl, raw, &output_schema);
        Ok(Self {
            decl,
            messages,
            output_schema,
            input,
            output,
            contract_version,
        })
    }

    /// Each golden input passes the input schema, and each golden output keeps the
    /// contract for its input. The build checks it (`files.rs`); the Worker does not,
    /// so that a value its validator reads otherwise than boon (a `format`) cannot
    /// take the kind down at run time.
    pub fn check_golden(&self) -> Result<(), String> {
        for (i, (input, output)) in self.golden().enumerate() {
            self.check_input(input)
                .map_err(|e| format!("at golden[{i}].input: {e}"))?;
            if let Some(output) = output {
                self.check_output(input, output)
                    .map_err(|e| format!("at golden[{i}].output: {e}"))?;
            }
        }
        Ok(())
    }

    /// The declaration as written.
    pub fn decl(&self) -> &KindDecl {
        &self.decl
    }

    /// The kind's name.
    pub fn name(&self) -> &str {
        &self.decl.kind
    }

    /// What its answer is.
    pub fn answer(&self) -> Answer {
        self.decl.answer
    }

    /// The output schema (for a text answer, the string's, default or written).
    pub fn output_schema(&self) -> &Value {
        &self.output_schema
    }

    /// The golden inputs, each with its output if the file gives one (`golden`, then
    /// the first form's `golden_inputs`).
    pub fn golden(&self) -> impl Iterator<Item = (&Value, Option<&Value>)> {
        let golden = self
            .decl
            .golden
            .iter()
            .map(|g| (&g.input, g.output.as_ref()));
        golden.chain(self.decl.golden_inputs.iter().map(|input| (input, None)))
    }

    /// The primary provider: the first in failover order.
    pub fn primary(&self) -> &str {
        // `compile` refuses a kind without providers.
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

    /// A hash of everything that defines the contract: the messages, both schemas, the
    /// answer's form, the parameters and the rules. Any change to one of them makes a
    /// new version and voids certifications. A file in the first form (`prompt`, a
    /// JSON answer, the default parameters) hashes as it always has.
    pub fn contract_version(&self) -> &str {
        &self.contract_version
    }

    /// Checks an input against the input schema.
    pub fn check_input(&self, input: &Value) -> Result<(), String> {
        self.input.check(input)
    }

    /// Checks a provider's output against the whole contract: the output schema (for
    /// JSON, no top-level key the schema does not name; for text, not blank), and
    /// every business rule.
    pub fn check_output(&self, input: &Value, output: &Value) -> Result<(), Violation> {
        match (self.decl.answer, output) {
            (Answer::Text, Value::String(text)) if text.trim().is_empty() => {
                return Err(Violation("the text answer is blank".to_owned()))
            }
            (Answer::Json, Value::Object(members)) => {
                let named = self
                    .output_schema
                    .get("properties")
                    .and_then(Value::as_object);
                if let Some(extra) =
                    named.and_then(|named| members.keys().find(|k| !named.contains_key(*k)))
                {
                    return Err(Violation(format!(
                        "top-level key {extra:?} is not named by the output schema"
                    )));
                }
            }
            _ => {}
        }
        self.output
            .check(output)
            .map_err(|e| Violation(format!("output schema: {e}")))?;
        for rule in &self.decl.rules {
            rules::check(rule, input, output)?;
        }
        Ok(())
    }

    /// The messages for `input`, rendered: `(role, content)` in order.
    pub fn render_messages(&self, input: &Value) -> Vec<(Role, String)> {
        self.messages
            .iter()
            .map(|m| (m.role, template::render(&m.content, input)))
            .collect()
    }

    /// The messages as written (the first form's two, as messages).
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }
}

/// The version: SHA-256 of the canonical defining members, 16 hex digits. The first
/// form's members (`kind`, `input_schema`, `prompt`, `output_schema`, `rules`) are
/// hashed as they always were; a member of a later form joins only when it says
/// something the first form could not (`messages`, a text `answer`, parameters other
/// than the default), so that no deployed certification is voided by the upgrade.
fn contract_version(decl: &KindDecl, raw: &Value, output_schema: &Value) -> String {
    let member = |name: &str| raw.get(name).cloned();
    let mut defining = json!({
        "kind": decl.kind,
        "input_schema": decl.input_schema,
        "output_schema": output_schema,
        "rules": member("rules").unwrap_or_else(|| json!([])),
    });
    match member("prompt") {
        Some(prompt) => defining["prompt"] = prompt,
        None => defining["messages"] = member("messages").unwrap_or_else(|| json!([])),
    }
    if decl.answer != Answer::Json {
        defining["answer"] = json!("text");
    }
    let sent = decl.parameters.sent();
    if !sent.is_empty() {
        defining["parameters"] = Value::Object(sent);
    }
    let mut hex = canonical_sha256(&defining);
    hex.truncate(16);
    hex
}
