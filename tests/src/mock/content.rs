//! What a call's answer says: the kind its messages were rendered from, and the content
//! a step gives for it.

use super::Step;
use onceclick_protocol::contract::{load_dir, Answer, Kind, KindFile};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::OnceLock;

/// The kinds answered with a summary as the mock always did (`Step::summary`, `pad_to`
/// and every `reply`): many tests rely on its exact shape.
const SUMMARY_KINDS: [&str; 2] = ["summarize", "summarize_hedged"];

/// The kinds the mock knows, loaded once: from the directory `ONCECLICK_KINDS` names,
/// else the repository's `edge/kinds`. When they do not load, the mock says why and
/// answers every call with a summary.
fn kinds() -> &'static [KindFile] {
    static KINDS: OnceLock<Vec<KindFile>> = OnceLock::new();
    KINDS.get_or_init(|| {
        let dir = std::env::var_os("ONCECLICK_KINDS").map_or_else(
            || PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../edge/kinds")),
            PathBuf::from,
        );
        load_dir(&dir).unwrap_or_else(|errors| {
            for error in errors {
                eprintln!("mock provider: {error}");
            }
            eprintln!("mock provider: the kinds do not load; every answer is a summary");
            Vec::new()
        })
    })
}

/// What one call asks for.
pub(super) struct Asked {
    /// The kind whose messages the call's are (the kind its `response_format` names
    /// first, for kinds whose messages are the same), if any.
    pub(super) kind: Option<&'static Kind>,
    /// The input they were rendered from (`null` without a kind).
    input: Value,
    /// What a summary is made of: the second message after its first blank line.
    text: String,
}

impl Asked {
    /// What the chat-completions request `body` asks for.
    pub(super) fn of(body: &Value) -> Self {
        let messages: Vec<(String, String)> = body["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| {
                let text = |name: &str| m[name].as_str().unwrap_or_default().to_owned();
                (text("role"), text("content"))
            })
            .collect();
        let named = body["response_format"]["json_schema"]["name"].as_str();
        let fit = |kind: &'static Kind| Some((kind, kind.input_of(&messages)?));
        let all = || kinds().iter().map(|file| &file.kind);
        let named = all().filter(|k| Some(k.name()) == named).find_map(fit);
        let found = named.or_else(|| all().find_map(fit));
        let (kind, input) = found.unzip();
        let user = body["messages"][1]["content"].as_str().unwrap_or_default();
        Self {
            kind,
            input: input.unwrap_or_default(),
            text: user.split_once("\n\n").map_or(user, |(_, t)| t).to_owned(),
        }
    }

    /// The content a 200 carries for `step`.
    pub(super) fn content(&self, step: &Step) -> String {
        match self.kind {
            Some(kind) if !SUMMARY_KINDS.contains(&kind.name()) => {
                kind_content(step, kind, &self.input)
            }
            _ => summary_content(step, &self.text),
        }
    }
}

/// A summary of `text` (the first half, unless the step says it), as `step`'s `reply`
/// has it.
fn summary_content(step: &Step, text: &str) -> String {
    let half: String = text.chars().take(text.chars().count() / 2).collect();
    let summary = step.summary.clone().unwrap_or(half);
    match step.reply.as_deref().unwrap_or("ok") {
        "malformed" => "{\"summary\": \"cut off".to_owned(),
        "extra_key" => {
            json!({"summary": summary, "sentiment": "neutral", "confidence": 0.9}).to_string()
        }
        "wrong_shape" => json!({"summary": summary, "sentiment": "ecstatic"}).to_string(),
        "long_summary" => {
            json!({"summary": format!("{text} and then some more"), "sentiment": "neutral"})
                .to_string()
        }
        _ => padded(
            json!({"summary": summary, "sentiment": "neutral"}).to_string(),
            step,
        ),
    }
}

/// Another kind's answer to `input`: its [`Kind::example_output`] (JSON text for a
/// JSON kind, the text itself for a text kind), or what `step`'s `reply` makes of it.
fn kind_content(step: &Step, kind: &Kind, input: &Value) -> String {
    let mut output = kind.example_output(input);
    let reply = step.reply.as_deref().unwrap_or("ok");
    if kind.answer() == Answer::Text {
        return match reply {
            "malformed" | "extra_key" | "wrong_shape" => "   ".to_owned(),
            _ => output.as_str().unwrap_or_default().to_owned(),
        };
    }
    match (reply, output.as_object_mut()) {
        ("malformed", _) => {
            let text = output.to_string();
            return text.chars().take(text.chars().count() / 2).collect();
        }
        ("extra_key", Some(members)) => {
            members.insert("confidence".to_owned(), json!(0.9));
        }
        ("wrong_shape", Some(members)) => {
            if let Some(first) = members.values_mut().next() {
                *first = if first.is_array() {
                    json!({})
                } else {
                    json!([])
                };
            }
        }
        _ => return padded(output.to_string(), step),
    }
    output.to_string()
}

/// A JSON `content` followed by whitespace to `step`'s `pad_to` code points.
fn padded(content: String, step: &Step) -> String {
    let pad = step.pad_to.unwrap_or_default();
    let have = content.chars().count();
    content + &" ".repeat(pad.saturating_sub(have))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(name: &str) -> &'static Kind {
        &kinds().iter().find(|f| f.kind.name() == name).unwrap().kind
    }

    /// The body the Worker sends for `input` under the shipped kind `name`.
    fn body(name: &str, input: &Value) -> Value {
        crate::mock::tests::body(name, input)
    }

    fn reply(reply: &str) -> Step {
        Step {
            reply: Some(reply.to_owned()),
            ..Step::default()
        }
    }

    fn json_of(content: &str) -> Value {
        serde_json::from_str(content).unwrap()
    }

    #[test]
    fn a_translate_request_gets_its_golden_text_or_the_text_itself() {
        let golden = json!({"text": "Where is the station?", "to": "Spanish"});
        let asked = Asked::of(&body("translate", &golden));
        assert_eq!(asked.kind.map(Kind::name), Some("translate"));
        assert_eq!(asked.content(&Step::default()), "¿Dónde está la estación?");
        assert_eq!(asked.content(&reply("malformed")), "   ");
        let other = json!({"text": "Good morning.", "to": "Italian"});
        let asked = Asked::of(&body("translate", &other));
        assert_eq!(asked.content(&Step::default()), "Good morning.");
    }

    #[test]
    fn classify_and_extract_requests_get_json_that_keeps_their_contract() {
        let inputs = [
            (
                "classify",
                json!({"text": "It crashes.", "labels": ["bug", "billing"]}),
            ),
            (
                "extract",
                json!({"text": "Call me.\nAna Lima\nana@example.org"}),
            ),
        ];
        for (name, input) in &inputs {
            let asked = Asked::of(&body(name, input));
            let kind = asked.kind.unwrap();
            assert_eq!(kind.name(), *name);
            let output = json_of(&asked.content(&Step::default()));
            kind.check_output(input, &output).unwrap();
            let malformed = asked.content(&reply("malformed"));
            assert!(
                serde_json::from_str::<Value>(&malformed).is_err(),
                "{malformed}"
            );
            for broken in ["extra_key", "wrong_shape"] {
                let output = json_of(&asked.content(&reply(broken)));
                assert!(
                    kind.check_output(input, &output).is_err(),
                    "{name} {broken}"
                );
            }
        }
        let classify = Asked::of(&body("classify", &inputs[0].1));
        assert_eq!(json_of(&classify.content(&Step::default()))["label"], "bug");
        let extract = kind("extract");
        let (input, golden) = extract.golden().next().unwrap();
        let asked = Asked::of(&body("extract", input));
        assert_eq!(&json_of(&asked.content(&Step::default())), golden.unwrap());
    }

    #[test]
    fn summarize_kinds_and_a_call_of_no_kind_get_the_summary_as_before() {
        let input = json!({"text": "abcdefgh"});
        for name in SUMMARY_KINDS {
            let asked = Asked::of(&body(name, &input));
            assert_eq!(asked.kind.map(Kind::name), Some(name));
            let summary = json_of(&asked.content(&Step::default()));
            assert_eq!(summary, json!({"summary": "abcd", "sentiment": "neutral"}));
        }
        let step = Step {
            summary: Some("x".to_owned()),
            pad_to: Some(100),
            ..Step::default()
        };
        let padded = Asked::of(&body("summarize", &input)).content(&step);
        assert_eq!(padded.chars().count(), 100);
        assert_eq!(json_of(&padded)["summary"], "x");
        let stranger = json!({"messages": [{"role": "system", "content": "Be brief."},
                                           {"role": "user", "content": "Do this:\n\nabcdef"}]});
        let asked = Asked::of(&stranger);
        assert!(asked.kind.is_none());
        let summary = json_of(&asked.content(&Step::default()));
        assert_eq!(summary, json!({"summary": "abc", "sentiment": "neutral"}));
        assert!(asked
            .content(&reply("malformed"))
            .starts_with("{\"summary\": \"cut"));
    }
}
