//! Message templates: text with `{{path}}` holes, each replaced by the input's value at
//! a dotted path (`{{customer.name}}`, `{{labels}}`, `{{items.0}}`). A string goes in as
//! it is, anything else as JSON, and a path the input does not have as nothing. A `{{`
//! with no `}}` after it is text. Paths are checked against the input schema when the
//! kind loads ([`check_path`]), so a hole the input cannot fill is a load error.

use serde_json::Value;

/// One piece of a template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Text as written.
    Text(&'a str),
    /// A hole: the path's segments.
    Hole(Vec<&'a str>),
}

/// The template's pieces, in order.
pub fn pieces(template: &str) -> Vec<Piece<'_>> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            break;
        };
        if start > 0 {
            out.push(Piece::Text(&rest[..start]));
        }
        out.push(Piece::Hole(after[..end].trim().split('.').collect()));
        rest = &after[end + 2..];
    }
    if !rest.is_empty() {
        out.push(Piece::Text(rest));
    }
    out
}

/// The value at `path` in `input`, if it has one.
pub fn lookup<'v>(input: &'v Value, path: &[&str]) -> Option<&'v Value> {
    path.iter().try_fold(input, |value, segment| match value {
        Value::Object(members) => members.get(*segment),
        Value::Array(items) => segment.parse::<usize>().ok().and_then(|i| items.get(i)),
        _ => None,
    })
}

/// `template` with each hole filled from `input`.
pub fn render(template: &str, input: &Value) -> String {
    let mut out = String::with_capacity(template.len());
    for piece in pieces(template) {
        match piece {
            Piece::Text(text) => out.push_str(text),
            Piece::Hole(path) => match lookup(input, &path) {
                Some(Value::String(s)) => out.push_str(s),
                Some(other) => out.push_str(&other.to_string()),
                None => {}
            },
        }
    }
    out
}

/// Whether a value that `schema` accepts may have something at `path`: each segment
/// is a property the object schema at that depth names, or an index into an array
/// schema's `items`. `Err` says which segment it cannot have.
pub fn check_path(schema: &Value, path: &[&str]) -> Result<(), String> {
    let mut here = schema;
    for (depth, segment) in path.iter().enumerate() {
        let next = match here.get("properties").and_then(|p| p.get(*segment)) {
            Some(property) => Some(property),
            None if segment.parse::<usize>().is_ok() => here.get("items"),
            None => None,
        };
        here = next.ok_or_else(|| {
            let at = path[..depth].join(".");
            let at = if at.is_empty() {
                "the top".to_owned()
            } else {
                at
            };
            format!("has no property {segment:?} at {at}")
        })?;
    }
    Ok(())
}

/// `pointer`'s segments (a JSON Pointer, RFC 6901: `/a/b`, `""` for the whole).
pub fn pointer_path(pointer: &str) -> Result<Vec<String>, String> {
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        return Err("is not a JSON Pointer: it does not start with '/'".to_owned());
    };
    Ok(rest
        .split('/')
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn holes_reach_nested_input_and_keep_the_first_forms_rendering() {
        let input =
            json!({"customer": {"name": "Ada", "age": 36}, "labels": ["a", "b"], "text": "t"});
        assert_eq!(
            render("Dear {{ customer.name }} ({{customer.age}})", &input),
            "Dear Ada (36)"
        );
        assert_eq!(render("{{labels}} {{labels.1}}", &input), "[\"a\",\"b\"] b");
        assert_eq!(render("a {{x}} b {{text}} {{", &input), "a  b t {{");
        assert_eq!(render("no holes", &input), "no holes");
    }

    #[test]
    fn a_path_is_checked_against_the_schema_segment_by_segment() {
        let schema = json!({"type": "object", "properties": {
            "customer": {"type": "object", "properties": {"name": {"type": "string"}}},
            "labels": {"type": "array", "items": {"type": "string"}}}});
        assert!(check_path(&schema, &["customer", "name"]).is_ok());
        assert!(check_path(&schema, &["labels", "0"]).is_ok());
        let e = check_path(&schema, &["customer", "email"]).unwrap_err();
        assert_eq!(e, "has no property \"email\" at customer");
        let e = check_path(&schema, &["cutsomer"]).unwrap_err();
        assert!(e.contains("at the top"), "{e}");
    }

    #[test]
    fn pointers_unescape_and_refuse_a_missing_slash() {
        assert_eq!(pointer_path("").unwrap(), Vec::<String>::new());
        assert_eq!(pointer_path("/a~1b/c~0").unwrap(), vec!["a/b", "c~"]);
        assert!(pointer_path("summary").is_err());
    }
}
