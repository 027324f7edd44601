//! The Worker checks JSON Schema with @cfworker/json-schema (through
//! `protocol/js/schema.js`); everything native checks it with boon. This test runs both
//! over the same documents and wants the same verdicts, and the same instance paths named
//! in each refusal.
//!
//! For every kind in `edge/kinds/` (and one synthetic nested schema built from the same
//! keywords) it takes the input and the output schema and generates a corpus from the
//! schema itself: a valid document, then every keyword broken in turn (each wrong type,
//! null, nested objects and arrays where a string is wanted, too short, too long, each
//! `required` member missing, extra and oddly named keys, values outside an `enum`), and
//! strings of astral-plane characters around `minLength`/`maxLength`, which count code
//! points in both (UTF-16 units would differ). A schema that uses a keyword the
//! generator does not know fails the test: add its cases before a kind may use it.
//!
//! The JS side is `protocol/js/schema.js` bundled with the pinned package by the same
//! esbuild and `NODE_PATH` as worker-build uses, run by the pinned Node; `cargo xtask test`
//! sets `ONCECLICK_NODE`, `ONCECLICK_ESBUILD` and `ONCECLICK_NODE_PATH`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use onceclick_protocol::contract::Kind;
use serde_json::{json, Map, Value};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The keywords the generator makes cases for.
const KNOWN: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "enum",
    "minLength",
    "maxLength",
    "description",
    "title",
    "items",
    "minItems",
    "maxItems",
    "uniqueItems",
];

/// One schema and what to run through it.
struct Case {
    url: String,
    kind: Kind,
    docs: Vec<Value>,
}

fn env_path(name: &str) -> PathBuf {
    PathBuf::from(std::env::var_os(name).unwrap_or_else(|| {
        panic!("{name} is not set: run with `cargo xtask test --only schema_equivalence`")
    }))
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A kind whose input schema is `schema`, so that `check_input` is boon on that schema
/// alone (`check_output` adds the top-level-key check and the rules, which are not the
/// validator's).
fn boon_kind(name: &str, schema: &Value) -> Kind {
    let decl = json!({
        "kind": name,
        "input_schema": schema,
        "answer": "text",
        "output_schema": {"type": "string"},
        "prompt": {"system": "", "user": ""},
        "providers": ["p"],
    });
    Kind::from_json(&decl.to_string()).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn keywords_known(schema: &Value, at: &str) {
    let Some(map) = schema.as_object() else {
        return;
    };
    for (key, sub) in map {
        assert!(
            KNOWN.contains(&key.as_str()),
            "{at}: keyword {key:?} has no cases in tests/tests/schema_equivalence.rs; add them"
        );
        match key.as_str() {
            "properties" => {
                for (name, s) in sub.as_object().into_iter().flatten() {
                    keywords_known(s, &format!("{at}/properties/{name}"));
                }
            }
            "additionalProperties" => keywords_known(sub, &format!("{at}/additionalProperties")),
            "items" => keywords_known(sub, &format!("{at}/items")),
            _ => {}
        }
    }
}

fn types_of(schema: &Value) -> Vec<String> {
    match schema.get("type") {
        Some(Value::String(t)) => vec![t.clone()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(|t| t.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    }
}

fn len_bound(schema: &Value, key: &str) -> Option<usize> {
    schema
        .get(key)
        .and_then(Value::as_u64)
        .and_then(|n| usize::try_from(n).ok())
}

/// A document the schema accepts.
fn valid(schema: &Value) -> Value {
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    match types_of(schema).first().map(String::as_str) {
        Some("object") => {
            let mut doc = Map::new();
            for (name, sub) in schema
                .get("properties")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                doc.insert(name.clone(), valid(sub));
            }
            Value::Object(doc)
        }
        Some("string") => {
            let min = len_bound(schema, "minLength").unwrap_or(0).max(1);
            let n = len_bound(schema, "maxLength").map_or(min, |max| min.min(max));
            Value::String("a".repeat(n))
        }
        Some("integer") | Some("number") => json!(1),
        Some("boolean") => json!(true),
        Some("array") => {
            // `minItems` distinct items (as `uniqueItems` wants), each valid.
            let item = schema.get("items").map_or(json!("anything"), valid);
            let n = len_bound(schema, "minItems").unwrap_or(0);
            Value::Array((0..n).map(|i| distinct(&item, i)).collect())
        }
        Some("null") => Value::Null,
        _ => json!("anything"),
    }
}

/// `item` made the `i`th of a run of distinct items: a string gets `i` in its last
/// place (its length kept), anything else is left as it is.
fn distinct(item: &Value, i: usize) -> Value {
    match item.as_str() {
        Some(s) if !s.is_empty() => {
            let mut chars: Vec<char> = s.chars().collect();
            if let Some(last) = chars.last_mut() {
                *last = char::from_digit((i % 10) as u32, 10).unwrap_or('0');
            }
            json!(chars.into_iter().collect::<String>())
        }
        _ => item.clone(),
    }
}

/// Values for an array schema: lengths around its bounds, repeated items, and items of
/// the wrong kind.
fn arrays_for(schema: &Value) -> Vec<Value> {
    let Some(items) = schema.get("items") else {
        return Vec::new();
    };
    let item = valid(items);
    let run = |n: usize| Value::Array((0..n).map(|i| distinct(&item, i)).collect());
    let mut out = Vec::new();
    for n in [len_bound(schema, "minItems"), len_bound(schema, "maxItems")]
        .into_iter()
        .flatten()
    {
        for k in [n.saturating_sub(1), n, n + 1] {
            out.push(run(k));
        }
    }
    let two = len_bound(schema, "minItems").unwrap_or(0).max(2);
    out.push(Value::Array(vec![item.clone(); two]));
    for wrong in every_type().into_iter().chain(values_for(items)) {
        let mut doc = (0..two).map(|i| distinct(&item, i)).collect::<Vec<_>>();
        doc[0] = wrong;
        out.push(Value::Array(doc));
    }
    out
}

/// Values of every JSON type, nested ones and edge numbers among them.
fn every_type() -> Vec<Value> {
    vec![
        Value::Null,
        json!(true),
        json!(false),
        json!(0),
        json!(-0.0),
        json!(1.0),
        json!(1.5),
        json!(-17),
        json!(1e308),
        json!(12_345_678_901_234_567_890_u64),
        json!(""),
        json!("s"),
        json!("😀"),
        json!([]),
        json!(["a", 1, null]),
        json!([{"text": "a"}]),
        json!({}),
        json!({"text": "a"}),
        json!({"a": {"b": [1, {"c": null}]}}),
    ]
}

fn astral(n: usize) -> String {
    // U+1F600: one code point, two UTF-16 units, four UTF-8 bytes.
    "😀".repeat(n)
}

/// Values for the spot `schema` describes: some pass, most break one keyword.
fn values_for(schema: &Value) -> Vec<Value> {
    let mut out = every_type();
    if let Some(members) = schema.get("enum").and_then(Value::as_array) {
        out.extend(members.iter().cloned());
        for m in members {
            if let Some(s) = m.as_str() {
                out.push(json!(s.to_uppercase()));
                out.push(json!(format!("{s} ")));
                out.push(json!(format!("{s}😀")));
            }
        }
        out.push(json!(members.clone()));
    }
    let min = len_bound(schema, "minLength");
    let max = len_bound(schema, "maxLength");
    for n in [min, max].into_iter().flatten() {
        for k in [n.saturating_sub(1), n, n + 1] {
            out.push(json!("x".repeat(k)));
            out.push(json!(astral(k)));
            // Mixed: one astral character among plain ones.
            if k >= 1 {
                out.push(json!(format!("{}😀", "y".repeat(k - 1))));
            }
            // A combining mark counts as its own code point in both.
            if k >= 2 {
                out.push(json!(format!("{}e\u{301}", "z".repeat(k - 2))));
            }
        }
    }
    out
}

/// Every document for `schema`: the valid one, the whole document replaced by each value,
/// and for an object each member broken in turn, each required member missing and extra
/// members added; members that are objects get the same treatment, one level deeper.
fn corpus(schema: &Value) -> Vec<Value> {
    let base = valid(schema);
    let mut docs = vec![base.clone()];
    docs.extend(values_for(schema));
    docs.extend(arrays_for(schema));
    if let (Some(Value::Object(base)), Some(props)) = (
        Some(&base),
        schema.get("properties").and_then(Value::as_object),
    ) {
        for (name, sub) in props {
            for broken in corpus(sub) {
                let mut doc = base.clone();
                doc.insert(name.clone(), broken);
                docs.push(Value::Object(doc));
            }
        }
        for name in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            let mut doc = base.clone();
            doc.remove(name);
            docs.push(Value::Object(doc));
        }
        let mut none = Map::new();
        docs.push(Value::Object(none.clone()));
        for extra in ["extra", "", "a/b~c", "%23", "#", "😀", "TEXT", "__proto__"] {
            let mut doc = base.clone();
            doc.insert(extra.to_owned(), json!(1));
            docs.push(Value::Object(doc));
            none.insert(extra.to_owned(), Value::Null);
        }
        docs.push(Value::Object(none));
        let mut nulls = base.clone();
        for v in nulls.values_mut() {
            *v = Value::Null;
        }
        docs.push(Value::Object(nulls));
    }
    docs
}

/// The instance paths a refusal names: every `at '<pointer>'`.
fn paths(message: &str) -> BTreeSet<String> {
    message
        .split("at '")
        .skip(1)
        .filter_map(|rest| rest.split('\'').next())
        .map(str::to_owned)
        .collect()
}

/// The JS side: protocol/js/schema.js bundled as the Worker bundles it, run by Node.
/// Returns, per case and document, `null` (passes) or the refusal.
fn run_js(cases: &[Case]) -> Vec<Vec<Option<String>>> {
    let node = env_path("ONCECLICK_NODE");
    let esbuild = env_path("ONCECLICK_ESBUILD");
    let node_path = env_path("ONCECLICK_NODE_PATH");
    let dir = root().join("target/schema-equivalence");
    std::fs::create_dir_all(&dir).unwrap();
    let glue = root().join("protocol/js/schema.js").canonicalize().unwrap();
    let harness = format!(
        r#"import {{ compileSchema, checkJson }} from {glue:?};
import {{ readFileSync }} from 'node:fs';
const cases = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const out = cases.map(({{ url, schema, docs }}) => {{
  const handle = compileSchema(url, schema);
  return docs.map((doc) => checkJson(handle, doc) ?? null);
}});
process.stdout.write(JSON.stringify(out));
"#,
        glue = glue.display().to_string()
    );
    std::fs::write(dir.join("harness.mjs"), harness).unwrap();
    let status = Command::new(&esbuild)
        .args([
            "harness.mjs",
            "--bundle",
            "--format=esm",
            "--platform=node",
            "--minify",
            "--log-level=warning",
            "--outfile=bundle.mjs",
        ])
        .env("NODE_PATH", &node_path)
        .current_dir(&dir)
        .status()
        .expect("running esbuild");
    assert!(
        status.success(),
        "esbuild failed to bundle protocol/js/schema.js"
    );
    // Documents cross as the exact JSON text the Worker would send: serde_json's.
    let input: Vec<Value> = cases
        .iter()
        .map(|c| {
            json!({
                "url": c.url,
                "schema": serde_json::to_string(&c.kind.decl().input_schema).unwrap(),
                "docs": c.docs.iter().map(|d| serde_json::to_string(d).unwrap()).collect::<Vec<_>>(),
            })
        })
        .collect();
    std::fs::write(
        dir.join("cases.json"),
        serde_json::to_string(&input).unwrap(),
    )
    .unwrap();
    let out = Command::new(&node)
        .arg(dir.join("bundle.mjs"))
        .arg(dir.join("cases.json"))
        .output()
        .expect("running node");
    assert!(
        out.status.success(),
        "node failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the harness prints JSON")
}

#[test]
fn cfworker_json_schema_agrees_with_boon_on_every_kind() {
    let dir = root().join("edge/kinds");
    let mut schemas: Vec<(String, Value)> = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let kind = Kind::from_json(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let decl = kind.decl();
        for (name, schema) in [
            ("input", &decl.input_schema),
            ("output", kind.output_schema()),
        ] {
            keywords_known(schema, &format!("{}: {name}", path.display()));
            schemas.push((format!("{}:{name}", decl.kind), schema.clone()));
        }
    }
    assert!(schemas.len() >= 4, "found {} schemas", schemas.len());
    // Paths below the top level, from the same keywords.
    schemas.push((
        "synthetic:nested".to_owned(),
        json!({
            "type": "object",
            "properties": {
                "meta": {
                    "type": "object",
                    "properties": {
                        "lang": {"enum": ["en", "fr", null, 1]},
                        "tag": {"type": "string", "minLength": 2, "maxLength": 3},
                        "a/b": {"type": ["string", "null"], "maxLength": 1}
                    },
                    "required": ["lang", "tag"],
                    "additionalProperties": false
                },
                "count": {"type": "integer"},
                "ratio": {"type": "number"},
                "flag": {"type": "boolean"},
                "list": {"type": "array"}
            },
            "required": ["meta"],
            "additionalProperties": {"type": "string", "maxLength": 2}
        }),
    ));

    let cases: Vec<Case> = schemas
        .iter()
        .map(|(name, schema)| Case {
            url: format!("urn:onceclick:{}:input", name.replace(':', "-")),
            kind: boon_kind(&name.replace(':', "-"), schema),
            docs: corpus(schema),
        })
        .collect();
    let js = run_js(&cases);
    assert_eq!(js.len(), cases.len());

    let (mut passed, mut refused, mut disagreements) = (0, 0, Vec::new());
    for (case, js) in cases.iter().zip(&js) {
        assert_eq!(js.len(), case.docs.len(), "{}", case.url);
        for (doc, js) in case.docs.iter().zip(js) {
            let boon = case.kind.check_input(doc).err();
            match (&boon, js) {
                (None, None) => passed += 1,
                (Some(b), Some(j)) if paths(b) == paths(j) => refused += 1,
                _ => disagreements.push(format!(
                    "{}: {}\n  boon: {boon:?}\n  cfworker: {js:?}",
                    case.url,
                    serde_json::to_string(doc).unwrap()
                )),
            }
        }
    }
    // One line in `cargo xtask test`'s output: what the two validators were run over.
    onceclick_tests::report::write(
        "schema_equivalence",
        &json!({
            "schemas": cases.len(),
            "documents": passed + refused + disagreements.len(),
            "both_passed": passed,
            "both_refused_same_paths": refused,
            "disagreements": disagreements.len(),
        }),
    );
    assert!(
        disagreements.is_empty(),
        "{} disagreements:\n{}",
        disagreements.len(),
        disagreements.join("\n")
    );
    assert!(
        passed >= 20 && refused >= 200,
        "{passed} passed, {refused} refused"
    );
}
