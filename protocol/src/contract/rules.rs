//! The business rules a schema cannot say, checked on an output against its input.

use super::decl::Rule;
use super::Violation;
use serde_json::Value;
use std::fmt;

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, output, input) = self.parts();
        let what = match self {
            Rule::ShorterThan { .. } => "must be shorter than",
            Rule::OneOf { .. } => "must be one of the items of",
            Rule::FoundIn { .. } => "must occur in",
        };
        write!(f, "{name}: output {output:?} {what} input {input:?}")
    }
}

/// `Ok` when `output` keeps `rule` for `input`; otherwise what broke it.
pub(super) fn check(rule: &Rule, input: &Value, output: &Value) -> Result<(), Violation> {
    let (name, out_ptr, in_ptr) = rule.parts();
    let broken = |why: String| Err(Violation(format!("rule {name}: {why}")));
    let (Some(out), Some(inp)) = (output.pointer(out_ptr), input.pointer(in_ptr)) else {
        return broken(format!("output {out_ptr:?} or input {in_ptr:?} is missing"));
    };
    match rule {
        Rule::ShorterThan { .. } => match (out.as_str(), inp.as_str()) {
            (Some(o), Some(i)) => {
                let (o, i) = (o.chars().count(), i.chars().count());
                match o < i {
                    true => Ok(()),
                    false => broken(format!(
                        "output {out_ptr} has {o} characters, input {in_ptr} has {i}"
                    )),
                }
            }
            _ => broken(format!("{out_ptr} or {in_ptr} is not a string")),
        },
        Rule::OneOf { .. } => match inp.as_array() {
            Some(items) if items.contains(out) => Ok(()),
            Some(_) => broken(format!(
                "output {out_ptr} ({out}) is not one of input {in_ptr}"
            )),
            None => broken(format!("input {in_ptr} is not an array")),
        },
        Rule::FoundIn { .. } => match (out, inp.as_str()) {
            (Value::Null, _) => Ok(()),
            (Value::String(o), Some(i)) if !o.is_empty() && i.contains(o.as_str()) => Ok(()),
            (Value::String(_), Some(_)) => broken(format!(
                "output {out_ptr} ({out}) does not occur in input {in_ptr}"
            )),
            _ => broken(format!("{out_ptr} or {in_ptr} is not a string")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(name: &str, output: &str, input: &str) -> Rule {
        serde_json::from_value(json!({"rule": name, "output": output, "input": input})).unwrap()
    }

    #[test]
    fn one_of_takes_only_an_item_of_the_inputs_array() {
        let r = rule("one_of", "/label", "/labels");
        let input = json!({"labels": ["billing", "bug"]});
        assert!(check(&r, &input, &json!({"label": "bug"})).is_ok());
        let v = check(&r, &input, &json!({"label": "feature"})).unwrap_err();
        assert!(v.0.contains("one_of"), "{v}");
        assert!(check(&r, &json!({"labels": "bug"}), &json!({"label": "bug"})).is_err());
        assert!(check(&r, &input, &json!({})).is_err());
    }

    #[test]
    fn found_in_takes_a_quote_or_null() {
        let r = rule("found_in", "/name", "/text");
        let input = json!({"text": "Regards, Ada Lovelace"});
        assert!(check(&r, &input, &json!({"name": "Ada Lovelace"})).is_ok());
        assert!(check(&r, &input, &json!({"name": null})).is_ok());
        assert!(check(&r, &input, &json!({"name": "Grace"})).is_err());
        assert!(
            check(&r, &input, &json!({"name": ""})).is_err(),
            "null says none, not \"\""
        );
        assert!(check(&r, &input, &json!({"name": 5})).is_err());
    }

    #[test]
    fn shorter_than_reaches_a_text_answer_whole() {
        let r = rule("shorter_than", "", "/text");
        assert!(check(&r, &json!({"text": "abcd"}), &json!("abc")).is_ok());
        let v = check(&r, &json!({"text": "abc"}), &json!("abc")).unwrap_err();
        assert!(v.0.contains("3 characters"), "{v}");
    }
}
