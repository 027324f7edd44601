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

/// The most `stop` sequences the chat-completions API takes.
const MAX_STOP: usize = 4;

impl Kind {
    /// Parses and compiles a kind file. Errors name what is wrong with the declaration
    /// and where (a JSON path into the file where the parser gives one).
    pub fn from_json(text: &str) -> Result<Self, String> {
        Self::compile(super::parse_decl(text)?)
    }

    /// Compiles a declaration: every check a kind file must pass.
    pub fn compile(decl: KindDecl) -> Result<Self, String> {
        let at = |path: &str, what: String| format!("at {path}: {what}");
        let name_ok = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
        if decl.kind.is_empty() || decl.kind.len() > 64 || !decl.kind.chars().all(name_ok) {
            // Sent as `response_format.json_schema.name`, which providers limit so.
            return Err(at(
                "kind",
                "a kind's name is 1 to 64 of A-Z, a-z, 0-9, _ and -".into(),
            ));
        }
        if decl.providers.is_empty() {
            return Err(at("providers", "the kind names no providers".into()));
        }
        let messages = match (&decl.prompt, decl.messages.is_empty()) {
            (Some(_), false) => {
                return Err(at(
                    "messages",
                    "a kind says `prompt` or `messages`, not both".into(),
                ))
            }
            (None, true) => return Err(at("messages", "the kind has no messages".into())),
            (Some(p), true) => vec![
                Message {
                    role: Role::System,
                    content: p.system.clone(),
                },
                Message {
                    role: Role::User,
                    content: p.user.clone(),
                },
            ],
            (None, false) => decl.messages.clone(),
        };
        if messages.last().map(|m| m.role) != Some(Role::User) {
            return Err(at("messages", "the last message is the user's".into()));
        }
        let output_schema = match (decl.answer, &decl.output_schema) {
            (Answer::Json, None) => {
                return Err(at(
                    "output_schema",
                    "a JSON answer needs an output schema".into(),
                ))
            }
            (Answer::Text, None) => json!({"type": "string", "minLength": 1}),
            (_, Some(schema)) => schema.clone(),
        };
        let root = match decl.answer {
            Answer::Json => "object",
            Answer::Text => "string",
        };
        if output_schema.get("type").and_then(Value::as_str) != Some(root) {
            return Err(at(
                "output_schema.type",
                format!(
                    "a {} answer's schema has \"type\": {root:?}",
                    answer_name(decl.answer)
                ),
            ));
        }
        let compile = |name: &str, schema: &Value| {
            let url = format!("urn:onceclick:{}:{name}", decl.kind);
            schema::Schema::compile(&url, schema).map_err(|e| {
                at(
                    &format!("{name}_schema"),
                    format!("the schema does not compile: {e}"),
                )
            })
        };
        let input = compile("input", &decl.input_schema)?;
        let output = compile("output", &output_schema)?;
        let where_ = |i: usize| match decl.prompt {
            Some(_) => ["prompt.system", "prompt.user"][i.min(1)].to_owned(),
            None => format!("messages[{i}].content"),
        };
        for (i, message) in messages.iter().enumerate() {
            for piece in template::pieces(&message.content) {
                if let template::Piece::Hole(path) = piece {
                    template::check_path(&decl.input_schema, &path).map_err(|e| {
                        at(
                            &where_(i),
                            format!("{{{{{}}}}}: the input schema {e}", path.join(".")),
                        )
                    })?;
                }
            }
        }
        let p = &decl.parameters;
        if p.stop.len() > MAX_STOP {
            return Err(at(
                "parameters.stop",
                format!("at most {MAX_STOP} sequences"),
            ));
        }
        if p.temperature.is_some_and(|t| !(0.0..=2.0).contains(&t)) {
            return Err(at("parameters.temperature", "from 0 to 2".into()));
        }
        if p.top_p.is_some_and(|t| !(0.0..=1.0).contains(&t)) {
            return Err(at("parameters.top_p", "from 0 to 1".into()));
        }
        if p.max_tokens == Some(0) {
            return Err(at("parameters.max_tokens", "at least 1".into()));
        }
        for (i, rule) in decl.rules.iter().enumerate() {
            let (_, output, input) = rule.parts();
            let held = |pointer: &str, side: &str, schema: &Value| {
                let path = template::pointer_path(pointer)
                    .map_err(|e| format!("{side} {pointer:?}: {e}"))?;
                path_in(schema, &path)
                    .map_err(|e| format!("{side} {pointer:?}: the {side} schema {e}"))
            };
            let out = held(output, "output", &output_schema);
            let inp = held(input, "input", &decl.input_schema);
            out.and(inp).map_err(|e| at(&format!("rules[{i}]"), e))?;
        }
        let contract_version = contract_version(&decl, &output_schema);
        let kind = Self {
            decl,
            messages,
            output_schema,
            input,
            output,
            contract_version,
        };
        kind.check_golden()?;
        Ok(kind)
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

/// Whether a value that `schema` accepts may have something at `path`.
fn path_in(schema: &Value, path: &[String]) -> Result<(), String> {
    let path: Vec<&str> = path.iter().map(String::as_str).collect();
    template::check_path(schema, &path)
}

fn answer_name(answer: Answer) -> &'static str {
    match answer {
        Answer::Json => "JSON",
        Answer::Text => "text",
    }
}

/// The version: SHA-256 of the canonical defining members, 16 hex digits. The first
/// form's members (`kind`, `input_schema`, `prompt`, `output_schema`, `rules`) are
/// hashed as they always were; a member of a later form joins only when it says
/// something the first form could not (`messages`, a text `answer`, parameters other
/// than the default), so that no deployed certification is voided by the upgrade.
fn contract_version(decl: &KindDecl, output_schema: &Value) -> String {
    let mut defining = json!({
        "kind": decl.kind,
        "input_schema": decl.input_schema,
        "output_schema": output_schema,
        "rules": decl.rules,
    });
    match &decl.prompt {
        Some(prompt) => defining["prompt"] = json!(prompt),
        None => defining["messages"] = json!(decl.messages),
    }
    if decl.answer != Answer::Json {
        defining["answer"] = json!(decl.answer);
    }
    let sent = decl.parameters.sent();
    if !sent.is_empty() {
        defining["parameters"] = Value::Object(sent);
    }
    let mut hex = canonical_sha256(&defining);
    hex.truncate(16);
    hex
}
