//! What a provider may answer for a kind, and which input a request was rendered from:
//! the two questions the local mock provider (`tests/src/mock`) asks of a kind to answer
//! it in its own shape, a user's new kind included. Native only: the Worker never
//! answers for a provider.

use super::decl::{Answer, Rule};
use super::template::{self, Piece};
use super::Kind;
use serde_json::{Map, Value};

/// What a made-up string is made of, cut or repeated to the schema's lengths.
const FILLER: &str = "example";

impl Kind {
    /// An output for `input`: the golden output when `input` is a golden input that has
    /// one; otherwise one made from the output schema (every property, the first value
    /// of an `enum`, the first type that is not `null`, lengths and `minItems` kept),
    /// then the rules: `shorter_than` takes the first half of the input's string,
    /// `one_of` the input's first item, `found_in` the input's first word (or `null`,
    /// where the schema allows it and there is none). A text answer starts as the
    /// input's longest string. Whenever the schema and rules can be kept together, the
    /// output keeps them ([`Kind::check_output`] passes); the same input gives the same
    /// output.
    pub fn example_output(&self, input: &Value) -> Value {
        if let Some(output) = self.golden().find_map(|(i, o)| o.filter(|_| i == input)) {
            return output.clone();
        }
        let schema = self.output_schema();
        let mut output = match self.answer() {
            Answer::Json => sample(schema),
            Answer::Text => {
                let text = longest_string(input).map(str::trim);
                Value::String(fit(
                    text.filter(|t| !t.is_empty()).unwrap_or(FILLER),
                    schema,
                ))
            }
        };
        for rule in &self.decl().rules {
            apply(rule, input, schema, &mut output);
        }
        output
    }

    /// The input that `messages` (role, content) were rendered from by
    /// [`Kind::render_messages`], if they fit this kind's messages: as many, with the
    /// same roles, each template's text where it stands. A hole's text is a string where
    /// the input schema says string there, and JSON otherwise (as it was rendered); a
    /// hole used twice is read where it is first. `None` when they do not fit, or when
    /// the input read would not render them.
    pub fn input_of(&self, messages: &[(String, String)]) -> Option<Value> {
        let mut input = Value::Object(Map::new());
        for (template, (_, content)) in self.messages().iter().zip(messages) {
            for (path, text) in captures(&template.content, content)? {
                let schema = schema_at(&self.decl().input_schema, &path);
                let value = match schema.is_some_and(|s| types(s).contains(&"string")) {
                    true => Value::String(text.to_owned()),
                    // A path the input does not have renders as nothing.
                    false if text.is_empty() => continue,
                    false => serde_json::from_str(text).ok()?,
                };
                insert(&mut input, &path, value);
            }
        }
        // The count, the roles, and a hole used twice are held here.
        let rendered: Vec<(String, String)> = self
            .render_messages(&input)
            .into_iter()
            .map(|(role, content)| (role.as_str().to_owned(), content))
            .collect();
        (rendered == messages).then_some(input)
    }
}

/// Each hole of `template` with the text it stands for in `content`, if `content` has
/// the template's text where the template has it. A hole takes the text up to the
/// first place the next text is found (the last text: the end of `content`).
fn captures<'t, 'c>(template: &'t str, content: &'c str) -> Option<Vec<(Vec<&'t str>, &'c str)>> {
    let pieces = template::pieces(template);
    let mut rest = content;
    let mut found = Vec::new();
    for (i, piece) in pieces.iter().enumerate() {
        match piece {
            Piece::Text(text) => rest = rest.strip_prefix(text)?,
            Piece::Hole(path) => {
                let end = match pieces.get(i + 1) {
                    None => rest.len(),
                    Some(Piece::Text(next)) if i + 2 == pieces.len() => {
                        rest.strip_suffix(next)?.len()
                    }
                    Some(Piece::Text(next)) => rest.find(next)?,
                    // Two holes side by side: the first takes nothing.
                    Some(Piece::Hole(_)) => 0,
                };
                found.push((path.clone(), &rest[..end]));
                rest = &rest[end..];
            }
        }
    }
    rest.is_empty().then_some(found)
}

/// Puts `value` at `path` in `target`, making objects on the way (an index is read as
/// a member's name: it renders the same). A place that holds a value keeps it.
fn insert(target: &mut Value, path: &[&str], value: Value) {
    let mut here = target;
    for segment in path {
        if here.is_null() {
            *here = Value::Object(Map::new());
        }
        here = match here {
            Value::Object(members) => members.entry(*segment).or_insert(Value::Null),
            _ => return,
        };
    }
    if here.is_null() {
        *here = value;
    }
}

/// The schema of what is at `path` in a value `schema` accepts (as `check_path` walks).
fn schema_at<'s, S: AsRef<str>>(schema: &'s Value, path: &[S]) -> Option<&'s Value> {
    path.iter().try_fold(schema, |here, segment| {
        let segment = segment.as_ref();
        match here.get("properties").and_then(|p| p.get(segment)) {
            Some(property) => Some(property),
            None if segment.parse::<usize>().is_ok() => here.get("items"),
            None => None,
        }
    })
}

/// The types a schema names (`"type": "string"` or `"type": ["string", "null"]`).
fn types(schema: &Value) -> Vec<&str> {
    match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

fn length(schema: &Value, name: &str) -> Option<usize> {
    schema.get(name).and_then(Value::as_u64).map(|n| n as usize)
}

/// A value `schema` accepts: its `enum`'s first value, its `const`, or one of its first
/// type that is not `null`.
fn sample(schema: &Value) -> Value {
    let first = schema.get("enum").and_then(|e| e.get(0));
    if let Some(value) = first.or(schema.get("const")) {
        return value.clone();
    }
    match types(schema).into_iter().find(|t| *t != "null") {
        Some("object") => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let members = properties.into_iter().flatten();
            Value::Object(members.map(|(k, s)| (k.clone(), sample(s))).collect())
        }
        Some("array") => {
            let item = schema.get("items").map_or(Value::Null, sample);
            Value::Array(vec![item; length(schema, "minItems").unwrap_or(0)])
        }
        Some("string") => Value::String(fit(FILLER, schema)),
        Some("integer" | "number") => schema.get("minimum").cloned().unwrap_or(0.into()),
        Some("boolean") => Value::Bool(false),
        _ => Value::Null,
    }
}

/// `text` filled out with [`FILLER`] to the schema's `minLength` and cut to its
/// `maxLength`, in code points as JSON Schema counts them.
fn fit(text: &str, schema: &Value) -> String {
    let max = length(schema, "maxLength").unwrap_or(usize::MAX);
    let n = text
        .chars()
        .count()
        .max(length(schema, "minLength").unwrap_or(0));
    text.chars()
        .chain(FILLER.chars().cycle())
        .take(n.min(max))
        .collect()
}

/// The longest string in `value`, however deep.
fn longest_string(value: &Value) -> Option<&str> {
    let inner: Box<dyn Iterator<Item = &Value>> = match value {
        Value::String(s) => return Some(s.as_str()),
        Value::Array(items) => Box::new(items.iter()),
        Value::Object(members) => Box::new(members.values()),
        _ => return None,
    };
    inner
        .filter_map(longest_string)
        .max_by_key(|s| s.chars().count())
}

/// `output` changed so that it keeps `rule` for `input`, where it can.
fn apply(rule: &Rule, input: &Value, schema: &Value, output: &mut Value) {
    let (_, out_ptr, in_ptr) = rule.parts();
    let path = template::pointer_path(out_ptr).unwrap_or_default();
    let (Some(from), Some(at)) = (input.pointer(in_ptr), schema_at(schema, &path)) else {
        return;
    };
    let value = match (rule, from) {
        (Rule::ShorterThan { .. }, Value::String(s)) => {
            let half: String = s.chars().take(s.chars().count() / 2).collect();
            Value::String(fit(&half, at))
        }
        (Rule::OneOf { .. }, Value::Array(items)) => match items.first() {
            Some(item) => item.clone(),
            None => return,
        },
        (Rule::FoundIn { .. }, Value::String(s)) => match s.split_whitespace().next() {
            None if types(at).contains(&"null") => Value::Null,
            word => Value::String(fit(word.unwrap_or_default(), at)),
        },
        _ => return,
    };
    if let Some(slot) = output.pointer_mut(out_ptr) {
        *slot = value;
    }
}
