//! Unfinished JSON, closed: the best-effort object a streamed answer says so far.
//!
//! Today's kinds ask for JSON, so what streams is `{"summary": "The meeting ra`.
//! [`close`] turns such a prefix into the shortest JSON text that keeps everything the
//! prefix said for sure, closed: an unfinished string value is kept as far as it goes
//! (`{"summary": "The meeting ra"}`), while a key without its value, a number or a
//! literal cut short, a dangling comma and an unfinished escape are left out. The
//! browser then parses the result with `JSON.parse`, as the AI SDK's `streamObject`
//! shows a partial object.

/// A container the prefix has opened and not closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Object,
    Array,
}

/// The JSON text that `text`, a prefix of a JSON document, says so far, closed; `None`
/// while it says nothing (nothing but whitespace, or a scalar cut short at the top).
/// The result parses as JSON whenever `text` is a prefix of valid JSON.
pub fn close(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut open: Vec<Open> = Vec::new();
    // The end of the longest prefix that is whole once closed with `open`'s closers.
    let mut cut: Option<usize> = None;
    // An object's next string is a key.
    let mut key_next = false;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'{' => {
                open.push(Open::Object);
                key_next = true;
                cut = Some(i + 1);
            }
            b'[' => {
                open.push(Open::Array);
                key_next = false;
                cut = Some(i + 1);
            }
            b'}' | b']' => {
                open.pop();
                key_next = false;
                cut = Some(i + 1);
            }
            b',' => key_next = open.last() == Some(&Open::Object),
            b':' => key_next = false,
            b'"' => {
                let (end, whole) = string_end(bytes, i + 1);
                let is_key = key_next;
                if !whole {
                    // A value cut short is kept as far as it goes; a key, not at all.
                    if is_key {
                        break;
                    }
                    let mut closed = text.get(..end)?.to_owned();
                    closed.push('"');
                    closers(&open, &mut closed);
                    return Some(closed);
                }
                key_next = false;
                if !is_key {
                    cut = Some(end + 1);
                }
                i = end;
            }
            b if b.is_ascii_whitespace() => {}
            _ => {
                // A number or a literal: kept only if it is one already, and only once
                // something ends it (`12` may yet be `123`, but it is a number).
                let end = bytes[i..]
                    .iter()
                    .position(|b| matches!(b, b',' | b'}' | b']' | b':') || b.is_ascii_whitespace())
                    .map_or(bytes.len(), |n| i + n);
                if !text.get(i..end).is_some_and(is_scalar) {
                    break;
                }
                cut = Some(end);
                i = end;
                continue;
            }
        }
        i += 1;
    }
    let mut closed = text.get(..cut?)?.to_owned();
    closers(&open, &mut closed);
    Some(closed)
}

/// Appends what closes `open`, innermost first.
fn closers(open: &[Open], out: &mut String) {
    for o in open.iter().rev() {
        out.push(match o {
            Open::Object => '}',
            Open::Array => ']',
        });
    }
}

/// Where the string whose content starts at `start` ends: the index of its closing
/// quote and `true`; or, for a string cut short, the end of its content up to the last
/// whole character or escape (a lone high surrogate left out too) and `false`.
fn string_end(bytes: &[u8], start: usize) -> (usize, bool) {
    let mut i = start;
    let mut safe = start;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => return (i, true),
            b'\\' => {
                let len = match bytes.get(i + 1) {
                    Some(b'u') => 6,
                    Some(_) => 2,
                    None => return (safe, false),
                };
                let Some(escape) = bytes.get(i..i + len) else {
                    return (safe, false);
                };
                // `\uD83D` waits for its low half, which JSON parsers other than the
                // browser's require.
                // (D800–DBFF: its first two hex digits are D and 8–B.)
                let high = len == 6
                    && matches!(escape[2], b'd' | b'D')
                    && matches!(escape[3], b'8' | b'9' | b'a' | b'b' | b'A' | b'B');
                i += len;
                if !high {
                    safe = i;
                }
            }
            _ => {
                i += 1;
                safe = i;
            }
        }
    }
    (safe, false)
}

/// Whether `token` is a whole JSON number or literal.
fn is_scalar(token: &str) -> bool {
    if matches!(token, "true" | "false" | "null") {
        return true;
    }
    // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
    let b = token.as_bytes();
    let mut i = usize::from(b.first() == Some(&b'-'));
    let digits = |i: &mut usize| {
        let from = *i;
        while b.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        *i > from
    };
    let int = i;
    if !digits(&mut i) || (b[int] == b'0' && i - int > 1) {
        return false;
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        if !digits(&mut i) {
            return false;
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if !digits(&mut i) {
            return false;
        }
    }
    i == b.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn closed(text: &str) -> Option<Value> {
        close(text).map(|c| {
            serde_json::from_str(&c).unwrap_or_else(|e| panic!("{text:?} closed as {c:?}: {e}"))
        })
    }

    #[test]
    fn an_answer_being_written_reads_as_what_it_says_so_far() {
        assert_eq!(closed(""), None);
        assert_eq!(closed("  "), None);
        assert_eq!(closed("{"), Some(json!({})));
        assert_eq!(closed("{\"summ"), Some(json!({})));
        assert_eq!(closed("{\"summary\""), Some(json!({})));
        assert_eq!(closed("{\"summary\": "), Some(json!({})));
        assert_eq!(
            closed("{\"summary\": \"The mee"),
            Some(json!({"summary": "The mee"}))
        );
        assert_eq!(
            closed("{\"summary\": \"The meeting.\", "),
            Some(json!({"summary": "The meeting."}))
        );
        assert_eq!(
            closed("{\"summary\": \"ok\", \"sentiment\": \"neu"),
            Some(json!({"summary": "ok", "sentiment": "neu"}))
        );
        assert_eq!(closed("{\"n\": 12"), Some(json!({"n": 12})));
        assert_eq!(closed("{\"n\": -"), Some(json!({})));
        assert_eq!(closed("{\"n\": 1.5e"), Some(json!({})));
        assert_eq!(closed("{\"ok\": tru"), Some(json!({})));
        assert_eq!(closed("{\"ok\": true"), Some(json!({"ok": true})));
        assert_eq!(
            closed("[1, [2, {\"a\": [\"x"),
            Some(json!([1, [2, {"a": ["x"]}]]))
        );
        // Escapes are kept whole or not at all.
        assert_eq!(closed("{\"s\": \"a\\"), Some(json!({"s": "a"})));
        assert_eq!(closed("{\"s\": \"a\\u00"), Some(json!({"s": "a"})));
        assert_eq!(closed("{\"s\": \"a\\u00e9"), Some(json!({"s": "aé"})));
        assert_eq!(closed("{\"s\": \"\\ud83d"), Some(json!({"s": ""})));
        assert_eq!(closed("{\"s\": \"\\ud83d\\ude00"), Some(json!({"s": "😀"})));
        // Upper case too; a low half or a character outside the surrogates stands alone.
        assert_eq!(closed("{\"s\": \"a\\uDBFF"), Some(json!({"s": "a"})));
        assert_eq!(closed("{\"s\": \"a\\u00E9"), Some(json!({"s": "aé"})));
        assert_eq!(
            closed("{\"s\": \"a\\uE000"),
            Some(json!({"s": "a\u{e000}"}))
        );
        assert_eq!(closed("tru"), None);
        assert_eq!(closed("12"), Some(json!(12)));
    }

    #[test]
    fn every_prefix_closes_to_json_and_the_whole_to_itself() {
        let docs = [
            json!({"summary": "Café, 会议 and 😀 \"quoted\"\n\ttab \\ slash", "sentiment": "neutral"}),
            json!({"a": [1, -2.5, 3e10, true, false, null, {"b": {}}, []], "c": {"d": [{"e": "f"}]}}),
            json!([{"k": "v"}, "s", 0, -0.125]),
            json!("a string alone"),
        ];
        for doc in docs {
            for text in [doc.to_string(), serde_json::to_string_pretty(&doc).unwrap()] {
                // Escapes written by hand too: a surrogate pair and a BMP escape.
                let text = text.replace('😀', "\\ud83d\\ude00").replace('é', "\\u00e9");
                for (cut, _) in text.char_indices() {
                    closed(&text[..cut]);
                }
                assert_eq!(closed(&text), Some(doc.clone()), "{text}");
            }
        }
    }
}
