//! The kind loader's tests: the shipped files, and what a declaration may not say.

use super::*;
use serde_json::{json, Value};

const SUMMARIZE: &str = include_str!("../../../edge/kinds/summarize.json");

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

    let longer = json!({"summary": "this summary is longer than the text", "sentiment": "neutral"});
    let v = k
        .check_output(&json!({"text": "tiny"}), &longer)
        .unwrap_err();
    assert!(v.0.contains("shorter_than"), "{v}");
}

/// The contract versions the shipped kinds had before kinds could say more: the
/// upgrade must not void a deployed certification.
const FIRST_FORM_VERSIONS: [(&str, &str); 2] = [
    ("summarize", "a03899eae93229d7"),
    ("summarize_hedged", "68aacb8d61541940"),
];

#[test]
fn first_form_kinds_keep_their_contract_versions() {
    for (name, version) in FIRST_FORM_VERSIONS {
        let path = format!("{}/../edge/kinds/{name}.json", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            Kind::from_json(&text).unwrap().contract_version(),
            version,
            "{name}"
        );
    }
}

fn version(d: &Value) -> String {
    Kind::from_json(&d.to_string())
        .unwrap()
        .contract_version()
        .to_owned()
}

#[test]
fn contract_version_moves_with_what_the_provider_is_asked_and_held_to() {
    let base: Value = serde_json::from_str(SUMMARIZE).unwrap();
    let v0 = version(&base);
    assert_eq!(v0.len(), 16);
    let changed = |change: &dyn Fn(&mut Value)| {
        let mut d = base.clone();
        change(&mut d);
        version(&d)
    };
    // What the provider is asked, and what its answer is held to.
    assert_ne!(
        changed(&|d| d["prompt"]["user"] = json!("Summarize:\n\n{{text}}")),
        v0
    );
    assert_ne!(
        changed(&|d| d["output_schema"]["properties"]["summary"]["maxLength"] = json!(300)),
        v0
    );
    assert_ne!(changed(&|d| d["rules"] = json!([])), v0);
    assert_ne!(
        changed(&|d| d["parameters"] = json!({"temperature": 0.2})),
        v0
    );
    assert_ne!(
        changed(&|d| d["parameters"] = json!({"temperature": null})),
        v0
    );
    assert_ne!(
        changed(&|d| d["parameters"] = json!({"max_tokens": 500})),
        v0
    );
    assert_ne!(changed(&|d| d["parameters"] = json!({"seed": 7})), v0);
    assert_ne!(changed(&|d| d["parameters"] = json!({"stop": ["END"]})), v0);
    assert_ne!(changed(&|d| d["parameters"] = json!({"top_p": 0.9})), v0);
    // The same messages in the second form are the same request, but another
    // declaration: a version of its own.
    let as_messages = changed(&|d| {
        let p = d["prompt"].take();
        d.as_object_mut().unwrap().remove("prompt");
        d["messages"] = json!([
            {"role": "system", "content": p["system"]},
            {"role": "user", "content": p["user"]},
        ]);
    });
    assert_ne!(as_messages, v0);
    // Not the order of failover, the description, the golden inputs, or the default
    // parameters written out.
    assert_eq!(
        changed(&|d| d["providers"] = json!(["fallback", "primary"])),
        v0
    );
    assert_eq!(changed(&|d| d["description"] = json!("another")), v0);
    assert_eq!(
        changed(&|d| d["golden_inputs"] = json!([{"text": "Another golden text."}])),
        v0
    );
    assert_eq!(
        changed(&|d| d["parameters"] = json!({"temperature": 0})),
        v0
    );
    assert_eq!(changed(&|d| d["parameters"] = json!({})), v0);
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
        assert!(kind.golden().count() > 0, "{}", path.display());
        seen += 1;
    }
    assert!(seen >= 5, "found {seen} kind files");
}

#[test]
fn prompt_renders_as_two_messages() {
    let messages = kind().render_messages(&json!({"text": "The cat sat."}));
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0].0, Role::System);
    assert_eq!(messages[1].0, Role::User);
    assert!(messages[1].1.contains("The cat sat."), "{messages:?}");
}

/// A small kind in the second form, as JSON, for the refusals below.
fn reply() -> Value {
    json!({
        "kind": "reply",
        "input_schema": {"type": "object", "properties": {
            "customer": {"type": "object", "properties": {"name": {"type": "string"}}},
            "text": {"type": "string", "minLength": 1}},
            "required": ["customer", "text"]},
        "messages": [
            {"role": "system", "content": "You draft replies."},
            {"role": "user", "content": "Hi, I am Bo: where is my order?"},
            {"role": "assistant", "content": "Dear Bo, it left today."},
            {"role": "user", "content": "I am {{customer.name}}: {{text}}"}
        ],
        "answer": "text",
        "output_schema": {"type": "string", "minLength": 1, "maxLength": 200},
        "parameters": {"temperature": 0.5, "max_tokens": 300},
        "rules": [{"rule": "shorter_than", "output": "", "input": "/text"}],
        "providers": ["primary"],
        "golden": [{"input": {"customer": {"name": "Ada"}, "text": "Where is my parcel, please? It is late."},
                    "output": "Dear Ada, it is on its way."}]
    })
}

/// Why `d` does not load, as the build loads a kind file (golden outputs checked).
fn refused(d: &Value) -> String {
    Kind::from_json(&d.to_string())
        .and_then(|k| k.check_golden())
        .unwrap_err()
}

#[test]
fn a_text_kind_with_few_shot_messages_renders_nested_input() {
    let k = Kind::from_json(&reply().to_string()).unwrap();
    assert_eq!(k.answer(), Answer::Text);
    let input = json!({"customer": {"name": "Ada"}, "text": "Where is it?"});
    let messages = k.render_messages(&input);
    assert_eq!(messages.len(), 4);
    assert_eq!(
        messages[2],
        (Role::Assistant, "Dear Bo, it left today.".to_owned())
    );
    assert_eq!(messages[3].1, "I am Ada: Where is it?");
    assert!(k.check_output(&input, &json!("Dear Ada.")).is_ok());
    assert!(k
        .check_output(&input, &json!("  \n"))
        .unwrap_err()
        .0
        .contains("blank"));
    assert!(k
        .check_output(&input, &json!("x".repeat(20)))
        .unwrap_err()
        .0
        .contains("shorter_than"));
    assert!(k
        .check_output(&input, &json!({"text": "Dear Ada."}))
        .is_err());
}

/// A change to a declaration.
type Change = &'static dyn Fn(&mut Value);

#[test]
fn bad_declarations_are_refused_naming_where() {
    let e = Kind::from_json("{").unwrap_err();
    assert!(e.contains("EOF"), "{e}");
    let mut d: Value = serde_json::from_str(SUMMARIZE).unwrap();
    d["providers"] = json!([]);
    assert!(refused(&d).contains("at providers: the kind names no providers"));
    d["providers"] = json!(["primary"]);
    d["input_schema"] = json!({"type": 5});
    assert!(refused(&d).starts_with("at input_schema: the schema does not compile"));

    let cases: [(Change, &str); 12] = [
        (&|d| d["kind"] = json!("v1.reply"), "at kind: a kind's name is 1 to 64 of"),
        (&|d| d["messages"][3]["role"] = json!("narrator"), "at messages[3].role: unknown variant `narrator`"),
        (&|d| d["parameters"]["temprature"] = json!(1), "at parameters.temprature: unknown field `temprature`"),
        (&|d| d["messages"][3]["content"] = json!("{{customer.email}}"), "at messages[3].content: {{customer.email}}: the input schema has no property \"email\" at customer"),
        (&|d| d["messages"][0]["content"] = json!("{{cutsomer}}"), "at messages[0].content: {{cutsomer}}: the input schema has no property \"cutsomer\" at the top"),
        (&|d| d["rules"][0]["input"] = json!("/txet"), "at rules[0]: input \"/txet\": the input schema has no property \"txet\""),
        (&|d| d["rules"][0]["output"] = json!("summary"), "at rules[0]: output \"summary\": is not a JSON Pointer"),
        (&|d| d["output_schema"] = json!({"type": "object"}), "at output_schema.type: a text answer's schema has \"type\": \"string\""),
        (&|d| { d["messages"].as_array_mut().unwrap().pop(); }, "at messages: the last message is the user's"),
        (&|d| d["prompt"] = json!({"system": "s", "user": "u"}), "at messages: a kind says `prompt` or `messages`, not both"),
        (&|d| d["golden"][0]["output"] = json!("x".repeat(40)), "at golden[0].output: rule shorter_than"),
        (&|d| d["parameters"]["stop"] = json!(["a", "b", "c", "d", "e"]), "at parameters.stop: at most 4"),
    ];
    for (change, expected) in cases {
        let mut d = reply();
        change(&mut d);
        let e = refused(&d);
        assert!(e.starts_with(expected), "{e}\n  expected: {expected}");
    }
    let mut json_kind = reply();
    json_kind["answer"] = json!("json");
    json_kind.as_object_mut().unwrap().remove("output_schema");
    assert!(refused(&json_kind).starts_with("at output_schema: a JSON answer needs"));
}

// What the local mock answers (`example.rs`): the input a request was rendered from, and
// an output that keeps the contract for it.

fn shipped() -> Vec<Kind> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../edge/kinds");
    let files = load_dir(std::path::Path::new(dir)).unwrap();
    files.into_iter().map(|f| f.kind).collect()
}

/// The messages of a request for `input`, as the mock reads them.
fn sent(kind: &Kind, input: &Value) -> Vec<(String, String)> {
    let messages = kind.render_messages(input).into_iter();
    messages.map(|(r, c)| (r.as_str().to_owned(), c)).collect()
}

/// `value` with each of its strings said otherwise: an input no golden one is.
fn altered(value: &Value) -> Value {
    match value {
        Value::String(s) => json!(format!("Also, {s}")),
        Value::Array(items) => Value::Array(items.iter().map(altered).collect()),
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), altered(v))).collect()),
        other => other.clone(),
    }
}

#[test]
fn each_kinds_input_is_read_back_from_its_messages_and_answered_with_its_golden_output() {
    for kind in shipped() {
        let name = kind.name();
        for (input, golden) in kind.golden() {
            assert_eq!(
                kind.input_of(&sent(&kind, input)).as_ref(),
                Some(input),
                "{name}"
            );
            let output = kind.example_output(input);
            match golden {
                Some(golden) => assert_eq!(&output, golden, "{name}"),
                None => kind.check_output(input, &output).unwrap(),
            }
        }
    }
}

#[test]
fn an_input_no_golden_one_is_gets_an_output_that_keeps_the_contract() {
    for kind in shipped() {
        let input = altered(kind.golden().next().unwrap().0);
        kind.check_input(&input).unwrap();
        assert!(kind.golden().all(|(golden, _)| *golden != input));
        assert_eq!(kind.input_of(&sent(&kind, &input)).as_ref(), Some(&input));
        let output = kind.example_output(&input);
        if let Err(v) = kind.check_output(&input, &output) {
            panic!("{}: {output} for {input}: {v}", kind.name());
        }
        match kind.name() {
            "classify" => assert_eq!(output["label"], input["labels"][0]),
            "extract" => assert_eq!(output["contact"]["name"], "Also,"),
            "translate" => assert_eq!(output, input["text"]),
            _ => {}
        }
    }
}

#[test]
fn messages_of_another_kind_or_changed_do_not_fit() {
    let kinds = shipped();
    for a in &kinds {
        for b in kinds.iter().filter(|b| b.messages() != a.messages()) {
            let messages = sent(a, a.golden().next().unwrap().0);
            assert_eq!(
                b.input_of(&messages),
                None,
                "{} read as {}",
                a.name(),
                b.name()
            );
        }
    }
    let k = kind();
    let good = sent(&k, &json!({"text": "The cat sat."}));
    assert_eq!(k.input_of(&good), Some(json!({"text": "The cat sat."})));
    let mut changed = good.clone();
    changed[1].1 = changed[1].1.replace("Summarize", "Summarise");
    assert_eq!(k.input_of(&changed), None);
    let mut role = good.clone();
    role[0].0 = "user".to_owned();
    assert_eq!(k.input_of(&role), None);
    assert_eq!(k.input_of(&good[1..]), None);
}

#[test]
fn an_output_is_made_from_the_schema_then_the_rules() {
    let string = |more: Value| {
        let mut s = json!({"type": "string"});
        s.as_object_mut()
            .unwrap()
            .extend(more.as_object().unwrap().clone());
        s
    };
    let properties = json!({
        "code": string(json!({"minLength": 10, "maxLength": 12})),
        "mood": {"enum": ["calm", "busy"]},
        "note": {"type": ["string", "null"]},
        "quote": string(json!({"type": ["string", "null"], "maxLength": 3})),
        "short": string(json!({"maxLength": 2})),
        "tag": string(json!({})),
        "count": {"type": "integer", "minimum": 2},
        "flags": {"type": "array", "items": {"type": "boolean"}, "minItems": 2}});
    let required: Vec<&String> = properties.as_object().unwrap().keys().collect();
    let d = json!({
        "kind": "made_up",
        "input_schema": {"type": "object", "properties": {"text": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}}, "n": {"type": "integer"}}},
        "messages": [{"role": "user", "content": "{{tags}} and {{n}}: {{text}}. Again: {{text}}"}],
        "output_schema": {"type": "object", "properties": properties, "required": required,
                          "additionalProperties": false},
        "rules": [{"rule": "found_in", "output": "/quote", "input": "/text"},
                  {"rule": "shorter_than", "output": "/short", "input": "/text"},
                  {"rule": "one_of", "output": "/tag", "input": "/tags"}],
        "providers": ["primary"],
        "golden_inputs": [{"text": "Hi", "tags": ["a"], "n": 1}]
    });
    let k = Kind::from_json(&d.to_string()).unwrap();
    let input = json!({"text": "Hello world again", "tags": ["x", "y"], "n": 3});
    let said = |text: &str| vec![("user".to_owned(), text.to_owned())];
    let text = r#"["x","y"] and 3: Hello world again. Again: Hello world again"#;
    assert_eq!(k.input_of(&said(text)), Some(input.clone()));
    // A hole used twice must say the same both times.
    assert_eq!(k.input_of(&said(r#"["x"] and 3: Hello. Again: Bye"#)), None);
    assert_eq!(k.input_of(&said("x and 3: Hello. Again: Hello")), None);
    let output = k.example_output(&input);
    let expected = json!({"code": "exampleexa", "mood": "calm", "note": "example",
        "quote": "Hel", "short": "He", "tag": "x", "count": 2, "flags": [false, false]});
    assert_eq!(output, expected);
    k.check_output(&input, &output).unwrap();
    let blank = json!({"text": "   ", "tags": ["x"], "n": 3});
    let output = k.example_output(&blank);
    assert_eq!(output["quote"], Value::Null);
    k.check_output(&blank, &output).unwrap();

    // A text answer: from the input's longest string, then its rules.
    let reply = Kind::from_json(&reply().to_string()).unwrap();
    let input = json!({"customer": {"name": "Ada"}, "text": "Where is it now?"});
    assert_eq!(reply.input_of(&sent(&reply, &input)), Some(input.clone()));
    assert_eq!(reply.example_output(&input), json!("Where is"));
}
