use serde_json::Value;
use sha2::{Digest, Sha256};

/// SHA-256 (lowercase hex) over the RFC 8785 canonical JSON of `{kind, input, provider}`.
///
/// Two requests with the same fingerprint ask for the same thing, whatever their key
/// order or whitespace. The provider must be resolved first (the kind's primary when the
/// request named none), so that naming the default explicitly is still the same request.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Fingerprint(String);

impl Fingerprint {
    /// The hex digest.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Computes the request fingerprint. See [`Fingerprint`].
pub fn fingerprint(kind: &str, input: &Value, provider: &str) -> Fingerprint {
    // Built by hand rather than with `json!`: the serde machinery that macro pulls in
    // is most of what the fingerprint would cost the browser SDK.
    let mut request = serde_json::Map::new();
    request.insert("kind".to_owned(), Value::String(kind.to_owned()));
    request.insert("input".to_owned(), input.clone());
    request.insert("provider".to_owned(), Value::String(provider.to_owned()));
    let request = Value::Object(request);
    Fingerprint(canonical_sha256(&request))
}

/// The same [`fingerprint`], for a caller that already holds the RFC 8785 canonical text
/// of the input: the browser SDK writes it from the browser's own JSON, so that it ships
/// no JSON value type, number formatter or canonicalizer of its own.
pub fn fingerprint_canonical(kind: &str, canonical_input: &str, provider: &str) -> Fingerprint {
    // The canonical form of `{kind, input, provider}`: its keys in JCS order.
    let mut text = String::from("{\"input\":");
    text.push_str(canonical_input);
    text.push_str(",\"kind\":");
    crate::jcs::write_string(kind, &mut text);
    text.push_str(",\"provider\":");
    crate::jcs::write_string(provider, &mut text);
    text.push('}');
    Fingerprint(hex::encode(Sha256::digest(text)))
}

/// Lowercase hex SHA-256 of the RFC 8785 canonical form of `value`.
pub(crate) fn canonical_sha256(value: &Value) -> String {
    hex::encode(Sha256::digest(crate::jcs::to_vec(value)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ijson;
    use serde_json::json;

    #[test]
    fn key_order_and_whitespace_do_not_matter() {
        let a = ijson::parse(br#"{"text":"hi","opts":{"x":1,"y":[1,2]}}"#).unwrap();
        let b =
            ijson::parse(b"{ \"opts\" : { \"y\" : [ 1 , 2 ] , \"x\" : 1 } ,\n\"text\" : \"hi\" }")
                .unwrap();
        assert_eq!(
            fingerprint("summarize", &a, "primary"),
            fingerprint("summarize", &b, "primary")
        );
    }

    #[test]
    fn number_spelling_does_not_matter() {
        let a = ijson::parse(br#"{"n":1.0e2}"#).unwrap();
        let b = ijson::parse(br#"{"n":100}"#).unwrap();
        assert_eq!(fingerprint("k", &a, "p"), fingerprint("k", &b, "p"));
    }

    #[test]
    fn kind_input_and_provider_all_count() {
        let input = json!({"text": "hi"});
        let base = fingerprint("summarize", &input, "primary");
        assert_ne!(base, fingerprint("translate", &input, "primary"));
        assert_ne!(base, fingerprint("summarize", &input, "fallback"));
        assert_ne!(
            base,
            fingerprint("summarize", &json!({"text": "hi!"}), "primary")
        );
    }

    #[test]
    fn from_canonical_text_is_the_same_fingerprint() {
        let inputs = [
            json!({"text": "hi"}),
            json!({"b": [1, 2.5, -0.0, 1e21], "a": null, "\u{e000}": true, "\u{1f600}": "é\n"}),
            json!([]),
            json!("plain"),
        ];
        for input in &inputs {
            let canonical = String::from_utf8(crate::jcs::to_vec(input)).unwrap();
            for (kind, provider) in [("summarize", ""), ("k\"ind", "fall\u{1}back")] {
                assert_eq!(
                    fingerprint_canonical(kind, &canonical, provider),
                    fingerprint(kind, input, provider),
                    "{input}"
                );
            }
        }
    }

    #[test]
    fn is_sha256_of_the_jcs_form() {
        // JCS of {"input":{"text":"hi"},"kind":"summarize","provider":"primary"}
        let expected = hex::encode(Sha256::digest(
            br#"{"input":{"text":"hi"},"kind":"summarize","provider":"primary"}"#,
        ));
        assert_eq!(
            fingerprint("summarize", &json!({"text": "hi"}), "primary").as_str(),
            expected
        );
    }
}
