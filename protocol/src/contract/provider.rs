//! One OpenAI-compatible provider, as the `PROVIDERS` var declares it, and what a
//! certification is bound to (its digest).

use crate::fingerprint::canonical_sha256;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One OpenAI-compatible provider: `POST {base_url}/chat/completions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// The name kinds use in their failover order.
    pub name: String,
    /// `POST {base_url}/chat/completions` is called.
    pub base_url: String,
    /// The model asked for (unless `models` names another for the kind).
    pub model: String,
    /// A model per kind, by the kind's name. (Every map here is a JSON object whose
    /// values [`ProviderConfig::parse_list`] holds to strings: the Worker has that map's
    /// code already, where a map of its own type would cost it 2 KB.)
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub models: Map<String, Value>,
    /// The name of the wrangler secret holding the API key, if the provider needs one.
    #[serde(default)]
    pub api_key_secret: Option<String>,
    /// The header that carries the key: `Authorization` (the default) as `Bearer KEY`,
    /// or another (Azure's `api-key`), which carries the key alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_header: Option<String>,
    /// More headers on every call, each with its value (OpenRouter's `HTTP-Referer`).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub headers: Map<String, Value>,
    /// More headers on every call, each with the name of the wrangler secret that holds
    /// its value.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub secret_headers: Map<String, Value>,
    /// How it is asked for a JSON answer: `strict` (the default: the output schema as a
    /// strict `json_schema`), `json_object` (`response_format: json_object`, the schema
    /// only in the prompt) or `prompt` (no response format at all).
    #[serde(default)]
    pub json_form: JsonForm,
    /// How long one call may take before the attempt becomes `unknown`; for a provider
    /// that streams, how long it may stay silent (before its answer's head, or between
    /// two chunks).
    pub timeout_ms: u64,
    /// The provider streams its answers: its calls send `"stream": true` (and ask for
    /// the usage chunk), and their text is read as it comes.
    #[serde(default)]
    pub stream: bool,
    /// With `stream`: how long one streamed call may take in all, however often it
    /// speaks (default: [`ProviderConfig::DEFAULT_STREAM_TOTAL_TIMEOUTS`] times
    /// `timeout_ms`).
    #[serde(default)]
    pub total_timeout_ms: Option<u64>,
    /// The provider promises to stop all work this long after a call.
    #[serde(default)]
    pub abandon_after_ms: Option<u64>,
    /// The largest prompt the provider takes, in its own tokens.
    #[serde(default)]
    pub max_prompt_tokens: Option<u64>,
}

/// How a provider is asked for a JSON answer. Read from its name (a string's reader,
/// which the Worker has anyway, not an enum's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum JsonForm {
    /// `response_format: {type: json_schema, json_schema: {strict: true, schema}}`.
    #[default]
    Strict,
    /// `response_format: {type: json_object}`: valid JSON, its shape asked by the prompt.
    JsonObject,
    /// No response format: the prompt alone asks for the JSON.
    Prompt,
}

impl TryFrom<String> for JsonForm {
    type Error = String;

    fn try_from(name: String) -> Result<Self, Self::Error> {
        match name.as_str() {
            "strict" => Ok(Self::Strict),
            "json_object" => Ok(Self::JsonObject),
            "prompt" => Ok(Self::Prompt),
            other => Err(format!(
                "unknown json_form {other:?}: expected strict, json_object or prompt"
            )),
        }
    }
}

impl ProviderConfig {
    /// A streamed call's total limit, in `timeout_ms`, when `total_timeout_ms` is unset.
    pub const DEFAULT_STREAM_TOTAL_TIMEOUTS: u64 = 10;

    /// How long one call may take in all: `timeout_ms`, or for a provider that streams,
    /// `total_timeout_ms`.
    pub fn total_ms(&self) -> u64 {
        match self.stream {
            false => self.timeout_ms,
            true => self.total_timeout_ms.unwrap_or(
                self.timeout_ms
                    .saturating_mul(Self::DEFAULT_STREAM_TOTAL_TIMEOUTS),
            ),
        }
    }

    /// Parses the `PROVIDERS` var: a JSON array of providers. An entry with a field
    /// this Worker does not know is refused, named.
    pub fn parse_list(text: &str) -> Result<Vec<ProviderConfig>, String> {
        let list: Vec<ProviderConfig> =
            serde_json::from_str(text).map_err(|e| format!("PROVIDERS does not parse: {e}"))?;
        // Natively (`cargo xtask kinds`, which checks both configurations before a
        // deploy): each map's values are strings. The Worker reads one that is not as "".
        #[cfg(not(target_arch = "wasm32"))]
        for p in &list {
            let maps = [
                ("models", &p.models),
                ("headers", &p.headers),
                ("secret_headers", &p.secret_headers),
            ];
            for (field, map) in maps {
                if let Some(key) = map.iter().find(|(_, v)| !v.is_string()).map(|(k, _)| k) {
                    return Err(format!(
                        "PROVIDERS does not parse: provider {}: {field}.{key} is not a string",
                        p.name
                    ));
                }
            }
        }
        Ok(list)
    }

    /// A map's value as the string `parse_list` held it to.
    fn text(value: &Value) -> &str {
        value.as_str().unwrap_or_default()
    }

    /// Its extra headers with their values.
    pub fn header_values(&self) -> impl Iterator<Item = (&str, &str)> {
        self.headers
            .iter()
            .map(|(k, v)| (k.as_str(), Self::text(v)))
    }

    /// Its secret headers, each with its secret's name.
    pub fn secret_header_names(&self) -> impl Iterator<Item = (&str, &str)> {
        self.secret_headers
            .iter()
            .map(|(k, v)| (k.as_str(), Self::text(v)))
    }

    /// The model asked for a job of `kind`.
    pub fn model_for(&self, kind: &str) -> &str {
        self.models.get(kind).map_or(&self.model, Self::text)
    }

    /// The secrets its calls read: the key's, and each secret header's.
    pub fn secrets(&self) -> impl Iterator<Item = &str> {
        let headers = self.secret_headers.values().map(Self::text);
        self.api_key_secret.as_deref().into_iter().chain(headers)
    }

    /// The names of its extra headers, both kinds.
    pub fn header_names(&self) -> impl Iterator<Item = &str> {
        self.headers
            .keys()
            .chain(self.secret_headers.keys())
            .map(String::as_str)
    }

    /// What a certification for `kind` is bound to: SHA-256 of the canonical
    /// `{base_url, model}` (the kind's model), with whatever else changes what the
    /// provider is asked: its JSON form (unless `strict`), the names of its extra
    /// headers and the header that carries its key (lower case). Another model, another
    /// address, another form is another provider; an entry in the first form keeps the
    /// digest it had.
    pub fn digest_for(&self, kind: &str) -> String {
        let mut what = Map::new();
        what.insert("base_url".to_owned(), Value::String(self.base_url.clone()));
        what.insert("model".to_owned(), self.model_for(kind).into());
        if self.json_form != JsonForm::Strict {
            what.insert("json_form".to_owned(), serde_json::json!(self.json_form));
        }
        // Both kinds of header, in order, in lower case, once each: the keys of a JSON
        // map (a set or a sort of its own would cost the Worker their code).
        let mut names = Map::new();
        for name in self.header_names() {
            names.insert(name.to_ascii_lowercase(), Value::Null);
        }
        if !names.is_empty() {
            let names: Vec<Value> = names.into_iter().map(|(k, _)| Value::String(k)).collect();
            what.insert("headers".to_owned(), Value::Array(names));
        }
        if let Some(header) = &self.key_header {
            what.insert("key_header".to_owned(), header.to_ascii_lowercase().into());
        }
        canonical_sha256(&Value::Object(what))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(entry: &str) -> ProviderConfig {
        ProviderConfig::parse_list(&format!("[{entry}]"))
            .unwrap()
            .remove(0)
    }

    const FIRST_FORM: &str = r#"{"name": "fallback", "base_url": "https://api.example/v1", "model": "m-large", "timeout_ms": 1000}"#;

    #[test]
    fn an_entry_in_the_first_form_keeps_its_digest() {
        // SHA-256 of the canonical {"base_url","model"}, as every deployed
        // certification was bound.
        let p = one(FIRST_FORM);
        let first = canonical_sha256(&serde_json::json!({
            "base_url": "https://api.example/v1", "model": "m-large"}));
        assert_eq!(p.digest_for("summarize"), first);
        let strict = one(&FIRST_FORM.replace('}', r#", "json_form": "strict"}"#));
        assert_eq!(strict.digest_for("summarize"), first);
    }

    #[test]
    fn what_changes_the_request_changes_the_digest_and_a_value_does_not() {
        let base = one(FIRST_FORM).digest_for("summarize");
        let with = |extra: &str| one(&FIRST_FORM.replace('}', &format!(", {extra}}}")));
        let form = with(r#""json_form": "json_object""#);
        assert_ne!(form.digest_for("summarize"), base);
        assert_ne!(
            with(r#""json_form": "prompt""#).digest_for("summarize"),
            form.digest_for("summarize")
        );
        assert_ne!(
            with(r#""key_header": "api-key""#).digest_for("summarize"),
            base
        );
        let header = with(r#""headers": {"X-Title": "a"}"#).digest_for("summarize");
        assert_ne!(header, base);
        assert_eq!(
            with(r#""headers": {"x-title": "b"}"#).digest_for("summarize"),
            header
        );
        let models = with(r#""models": {"translate": "m-small"}"#);
        assert_eq!(models.digest_for("summarize"), base, "another kind's model");
        assert_ne!(models.digest_for("translate"), base);
        assert_eq!(models.model_for("translate"), "m-small");
        assert_eq!(models.model_for("summarize"), "m-large");
    }

    #[test]
    fn secrets_are_the_keys_and_the_secret_headers() {
        let p = one(&FIRST_FORM.replace(
            '}',
            r#", "api_key_secret": "KEY", "headers": {"X-A": "a"}, "secret_headers": {"X-B": "B_SECRET"}}"#,
        ));
        assert_eq!(p.secrets().collect::<Vec<_>>(), ["KEY", "B_SECRET"]);
    }

    #[test]
    fn a_map_value_that_is_not_a_string_is_refused() {
        let e = ProviderConfig::parse_list(&format!(
            "[{}]",
            FIRST_FORM.replace('}', r#", "headers": {"X-A": 5}}"#)
        ))
        .unwrap_err();
        assert!(
            e.contains("provider fallback: headers.X-A is not a string"),
            "{e}"
        );
    }

    #[test]
    fn an_unknown_field_is_refused_by_name() {
        let e = ProviderConfig::parse_list(&format!(
            "[{}]",
            FIRST_FORM.replace('}', r#", "hedaers": {}}"#)
        ))
        .unwrap_err();
        assert!(e.contains("unknown field `hedaers`"), "{e}");
        let e = ProviderConfig::parse_list(&format!(
            "[{}]",
            FIRST_FORM.replace('}', r#", "json_form": "loose"}"#)
        ))
        .unwrap_err();
        assert!(e.contains("loose"), "{e}");
    }
}
