//! A kind as written in its file, `edge/kinds/NAME.json`: every field a kind may say.
//! README.md ("Your own kind") explains each for authors; `kind.rs` compiles them.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A kind as written in its file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KindDecl {
    /// The name clients send as `kind`; the file is `NAME.json`.
    pub kind: String,
    /// What the kind is for, for humans.
    #[serde(default)]
    pub description: String,
    /// JSON Schema (2020-12) the input must pass.
    pub input_schema: Value,
    /// One system and one user message (the first form kinds had). A kind says either
    /// `prompt` or `messages`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<Prompt>,
    /// The messages sent, in order: few-shot examples are `user` and `assistant`
    /// messages before the last `user` one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<Message>,
    /// What the answer is: a JSON object (`json`, the default) or text (`text`).
    #[serde(default)]
    pub answer: Answer,
    /// JSON Schema (2020-12) the output must pass. Required for a JSON answer, whose
    /// schema is an object's; for a text answer a string's, by default
    /// `{"type": "string", "minLength": 1}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// The model's sampling parameters.
    #[serde(default)]
    pub parameters: Parameters,
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
    /// Inputs that certify a provider for this kind, each with the output a provider
    /// may give for it (which the local mock answers).
    #[serde(default)]
    pub golden: Vec<Golden>,
    /// Inputs alone, the first form of `golden`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub golden_inputs: Vec<Value>,
}

/// What a kind's answer is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// A JSON object: the provider is asked for it with the output schema, and the
    /// job's result is the object.
    #[default]
    Json,
    /// Text: the answer's content is the job's result, a string, never blank.
    Text,
}

/// The two messages of a kind's first form.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prompt {
    /// The system message template.
    pub system: String,
    /// The user message template.
    pub user: String,
}

/// Who says a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The instructions.
    System,
    /// The user's turn (the last message is one).
    User,
    /// The model's turn: an example answer.
    Assistant,
}

impl Role {
    /// The role as the chat-completions API names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

/// One message: a role and its template. `{{path}}` in a template is replaced by the
/// input's value at that dotted path (`{{customer.name}}`): a string as it is,
/// anything else as JSON.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Message {
    /// Who says it.
    pub role: Role,
    /// Its template.
    pub content: String,
}

/// The model's sampling parameters. Unset, they keep the first form's request:
/// `temperature` 0 and nothing else.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Parameters {
    /// Sent as `temperature` (default 0). `null` sends none, for a model that refuses
    /// the parameter.
    #[serde(default = "zero")]
    pub temperature: Option<f64>,
    /// Sent as `max_tokens`: the most tokens the answer may have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Sent as `top_p`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// Sent as `stop`: up to 4 sequences that end the answer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// Sent as `seed`, for a provider that takes one (one that refuses it fails its
    /// certification for the kind).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
}

fn zero() -> Option<f64> {
    Some(0.0)
}

impl Default for Parameters {
    fn default() -> Self {
        Self {
            temperature: zero(),
            max_tokens: None,
            top_p: None,
            stop: Vec::new(),
            seed: None,
        }
    }
}

impl Parameters {
    /// The members these parameters add to a request, other than the default
    /// `temperature` 0 (in the order the request lists them).
    pub fn sent(&self) -> serde_json::Map<String, Value> {
        let mut sent = serde_json::Map::new();
        if self.temperature != Some(0.0) {
            sent.insert("temperature".to_owned(), self.temperature.into());
        }
        if let Some(max) = self.max_tokens {
            sent.insert("max_tokens".to_owned(), max.into());
        }
        if let Some(p) = self.top_p {
            sent.insert("top_p".to_owned(), p.into());
        }
        if !self.stop.is_empty() {
            sent.insert("stop".to_owned(), self.stop.clone().into());
        }
        if let Some(seed) = self.seed {
            sent.insert("seed".to_owned(), seed.into());
        }
        sent
    }
}

/// One golden input, and the output a provider may give for it: an output keeps the
/// kind's contract for its input (the build checks it), the local mock answers it,
/// and certification holds a provider's answer to the contract, not to this output.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Golden {
    /// The input.
    pub input: Value,
    /// An output that keeps the contract for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
}

/// Automatic failover after a retryable failure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AutoFailover {
    /// The most attempts a job may have, the first included.
    pub max_attempts: u32,
}

/// A business rule on an output. Each names a JSON Pointer into the output (`""` is a
/// text answer's whole text) and one into the input.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "rule", rename_all = "snake_case", deny_unknown_fields)]
pub enum Rule {
    /// The string at `output` has fewer characters than the string at `input`.
    ShorterThan {
        /// Pointer into the output.
        output: String,
        /// Pointer into the input.
        input: String,
    },
    /// The value at `output` is one of the items of the array at `input` (a label
    /// from the labels the input lists).
    OneOf {
        /// Pointer into the output.
        output: String,
        /// Pointer into the input.
        input: String,
    },
    /// The string at `output`, unless it is `null`, is not empty and occurs in the
    /// string at `input` (a value extracted word for word).
    FoundIn {
        /// Pointer into the output.
        output: String,
        /// Pointer into the input.
        input: String,
    },
}

impl Rule {
    /// The rule's name as written, and its two pointers: `(name, output, input)`.
    pub fn parts(&self) -> (&'static str, &str, &str) {
        match self {
            Rule::ShorterThan { output, input } => ("shorter_than", output, input),
            Rule::OneOf { output, input } => ("one_of", output, input),
            Rule::FoundIn { output, input } => ("found_in", output, input),
        }
    }
}
