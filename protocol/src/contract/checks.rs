//! Every check a kind file must pass beyond its schemas compiling, each error naming
//! where in the file it is wrong. Native only: the build, `cargo xtask kinds` and the
//! simulator run them (`Kind::compile`); the Worker loads only files the build passed.

use super::decl::{Answer, KindDecl, Message, Role};
use super::template;
use serde_json::Value;

/// The most `stop` sequences the chat-completions API takes.
const MAX_STOP: usize = 4;

/// `Ok` when `decl` (with its `messages` and `output_schema` as compiled) says nothing
/// a kind may not; otherwise where and what.
pub(super) fn declaration(
    decl: &KindDecl,
    messages: &[Message],
    output_schema: &Value,
) -> Result<(), String> {
    let at = |path: &str, what: String| Err(format!("at {path}: {what}"));
    let name_ok = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if decl.kind.is_empty() || decl.kind.len() > 64 || !decl.kind.chars().all(name_ok) {
        // Sent as `response_format.json_schema.name`, which providers limit so.
        return at(
            "kind",
            "a kind's name is 1 to 64 of A-Z, a-z, 0-9, _ and -".into(),
        );
    }
    if decl.providers.is_empty() {
        return at("providers", "the kind names no providers".into());
    }
    match (&decl.prompt, decl.messages.is_empty()) {
        (Some(_), false) => {
            return at(
                "messages",
                "a kind says `prompt` or `messages`, not both".into(),
            )
        }
        (None, true) => return at("messages", "the kind has no messages".into()),
        _ => {}
    }
    if messages.last().map(|m| m.role) != Some(Role::User) {
        return at("messages", "the last message is the user's".into());
    }
    let (root, form) = match decl.answer {
        Answer::Json => ("object", "JSON"),
        Answer::Text => ("string", "text"),
    };
    if output_schema.get("type").and_then(Value::as_str) != Some(root) {
        return at(
            "output_schema.type",
            format!("a {form} answer's schema has \"type\": {root:?}"),
        );
    }
    holes(decl, messages)?;
    parameters(decl)?;
    rule_pointers(decl, output_schema)
}

/// Each template's holes are paths the input schema can have.
fn holes(decl: &KindDecl, messages: &[Message]) -> Result<(), String> {
    let where_ = |i: usize| match decl.prompt {
        Some(_) => ["prompt.system", "prompt.user"][i.min(1)].to_owned(),
        None => format!("messages[{i}].content"),
    };
    for (i, message) in messages.iter().enumerate() {
        for piece in template::pieces(&message.content) {
            if let template::Piece::Hole(path) = piece {
                template::check_path(&decl.input_schema, &path).map_err(|e| {
                    format!(
                        "at {}: {{{{{}}}}}: the input schema {e}",
                        where_(i),
                        path.join(".")
                    )
                })?;
            }
        }
    }
    Ok(())
}

/// The parameters are in the ranges the chat-completions API takes.
fn parameters(decl: &KindDecl) -> Result<(), String> {
    let p = &decl.parameters;
    let at = |name: &str, what: &str| Err(format!("at parameters.{name}: {what}"));
    if p.stop.len() > MAX_STOP {
        return at("stop", &format!("at most {MAX_STOP} sequences"));
    }
    if p.temperature.is_some_and(|t| !(0.0..=2.0).contains(&t)) {
        return at("temperature", "from 0 to 2");
    }
    if p.top_p.is_some_and(|t| !(0.0..=1.0).contains(&t)) {
        return at("top_p", "from 0 to 1");
    }
    if p.max_tokens == Some(0) {
        return at("max_tokens", "at least 1");
    }
    Ok(())
}

/// Each rule's pointers are paths its schemas can have.
fn rule_pointers(decl: &KindDecl, output_schema: &Value) -> Result<(), String> {
    for (i, rule) in decl.rules.iter().enumerate() {
        let (_, output, input) = rule.parts();
        let held = |pointer: &str, side: &str, schema: &Value| {
            let path =
                template::pointer_path(pointer).map_err(|e| format!("{side} {pointer:?}: {e}"))?;
            let path: Vec<&str> = path.iter().map(String::as_str).collect();
            template::check_path(schema, &path)
                .map_err(|e| format!("{side} {pointer:?}: the {side} schema {e}"))
        };
        held(output, "output", output_schema)
            .and(held(input, "input", &decl.input_schema))
            .map_err(|e| format!("at rules[{i}]: {e}"))?;
    }
    Ok(())
}
