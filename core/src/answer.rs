//! What a provider's answer means (the OpenAI-compatible chat-completions form): the
//! request's body, and the classification of an answer, whole or streamed, into an
//! output that keeps the kind's contract, a failure (retryable or not), or `unknown`.
//! The Worker's adapter (`openai.rs`) carries the HTTP; the simulator's providers answer
//! through the same classification.

use crate::outcome::CallOutcome;
use onceclick_protocol::chat::{ChatStream, Ending, Tokens};
use onceclick_protocol::contract::ProviderConfig;
use onceclick_protocol::contract::{Answer, JsonForm, Kind};
use onceclick_protocol::{ijson, AttemptError};
use serde_json::{json, Value};

/// The chat-completions request body for `input` under `kind`: the provider's model for
/// the kind, the kind's messages rendered, its parameters (`temperature` 0 unless the
/// kind says otherwise), and for a JSON answer the response format the provider's
/// `json_form` takes (the output schema as a strict `json_schema`, `json_object`, or
/// none: the prompt alone).
pub fn request_body(provider: &ProviderConfig, kind: &Kind, input: &Value) -> Value {
    let messages: Vec<Value> = kind
        .render_messages(input)
        .into_iter()
        .map(|(role, content)| json!({"role": role.as_str(), "content": content}))
        .collect();
    let model = provider.model_for(kind.name());
    let mut body = json!({"model": model, "temperature": 0, "messages": messages});
    let parameters = &kind.decl().parameters;
    if parameters.temperature.is_none() {
        body.as_object_mut().map(|b| b.remove("temperature"));
    }
    for (name, value) in parameters.sent() {
        if !value.is_null() {
            body[name.as_str()] = value;
        }
    }
    match (kind.answer(), provider.json_form) {
        (Answer::Json, JsonForm::Strict) => {
            body["response_format"] = json!({
                "type": "json_schema",
                "json_schema": {"name": kind.name(), "strict": true, "schema": kind.output_schema()},
            });
        }
        (Answer::Json, JsonForm::JsonObject) => {
            body["response_format"] = json!({"type": "json_object"});
        }
        (Answer::Json, JsonForm::Prompt) | (Answer::Text, _) => {}
    }
    if provider.stream {
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
    }
    body
}

pub fn timed_out(provider: &ProviderConfig) -> AttemptError {
    AttemptError::new(
        "provider_timeout",
        format!(
            "{} did not answer within {} ms; it may still be working",
            provider.name, provider.timeout_ms
        ),
        false,
    )
}

pub fn classify(
    provider: &ProviderConfig,
    kind: &Kind,
    input: &Value,
    status: u16,
    retry_after: Option<String>,
    text: &str,
) -> CallOutcome {
    let name = &provider.name;
    match status {
        429 => CallOutcome::Failed(AttemptError::new(
            "provider_rate_limited",
            format!(
                "{name} answered 429{}",
                retry_after
                    .map(|r| format!(" (Retry-After: {r})"))
                    .unwrap_or_default()
            ),
            true,
        )),
        // A gateway gave up waiting; the provider behind it may have finished the work.
        504 => CallOutcome::Unknown(AttemptError::new(
            "provider_gateway_timeout",
            format!(
                "{name} answered 504: a gateway timed out; the provider may have done the work"
            ),
            false,
        )),
        500..=599 => CallOutcome::Failed(AttemptError::new(
            "provider_unavailable",
            format!("{name} answered {status}"),
            true,
        )),
        200..=299 => whole(provider, kind, input, text),
        _ => CallOutcome::Failed(AttemptError::new(
            "provider_rejected",
            format!(
                "{name} answered {status}: {}",
                text.chars().take(200).collect::<String>()
            ),
            false,
        )),
    }
}

/// An answer's output, if it parsed, checked against the kind's contract.
pub fn offer(
    provider: &ProviderConfig,
    kind: &Kind,
    input: &Value,
    parsed: Result<(Value, Option<Tokens>), String>,
) -> CallOutcome {
    match parsed.and_then(|(output, tokens)| {
        if crate::mutant::on(crate::mutant::Mutant::OfferSkipsContract) {
            return Ok((output, tokens));
        }
        kind.check_output(input, &output)
            .map(|()| (output, tokens))
            .map_err(|v| v.0)
    }) {
        Ok((output, tokens)) => CallOutcome::Output(output, tokens),
        Err(why) => CallOutcome::Failed(AttemptError::new(
            "contract_violation",
            format!("{}: {why}", provider.name),
            false,
        )),
    }
}

/// How a streamed answer that was read to its end came out. Only a finish reason of
/// `stop` makes its text an output; the text is then parsed and checked as a whole
/// answer's content is.
pub fn classify_stream(
    provider: &ProviderConfig,
    kind: &Kind,
    input: &Value,
    chat: &ChatStream,
) -> CallOutcome {
    let (name, got) = (&provider.name, chat.chars());
    let failed = |code: &str, message: String, retryable: bool| {
        CallOutcome::Failed(AttemptError::new(code, message, retryable))
    };
    match chat.end() {
        Ending::Complete => {
            let parsed = content_output(kind.answer(), chat.text())
                .map(|output| (output, chat.tokens()))
                .map_err(|e| format!("the streamed {e}"));
            offer(provider, kind, input, parsed)
        }
        Ending::Incomplete(reason) => failed(
            "provider_output_incomplete",
            format!("{name} ended its answer unfinished (finish_reason {reason}) after {got} characters; an unfinished answer is never an output"),
            false,
        ),
        Ending::Refused(why) => failed(
            "provider_refused",
            format!("{name} refused: {why}"),
            false,
        ),
        // Retryable only if no text came: text means the provider did (and billed)
        // work, which a failover would pay for twice. A new attempt is then the owner's
        // choice.
        Ending::Error(message) => failed(
            "provider_stream_error",
            format!("{name} reported an error in its streamed answer after {got} characters: {message}"),
            got == 0 || crate::mutant::on(crate::mutant::Mutant::StreamErrorAfterTextRetries),
        ),
        Ending::Malformed(why) => failed("contract_violation", format!("{name}: {why}"), false),
        Ending::CutOff => CallOutcome::Unknown(AttemptError::new(
            "provider_answer_cut_off",
            format!("the streamed answer from {name} broke off after {got} characters, before its finish reason; it may have done the work"),
            false,
        )),
    }
}

/// A whole answer (status 2xx) classified: an answer its provider ended unfinished
/// (`finish_reason` other than `stop`: `length`, `content_filter`) fails, as a streamed
/// one does, whatever its content; otherwise its output is offered to the contract.
fn whole(provider: &ProviderConfig, kind: &Kind, input: &Value, text: &str) -> CallOutcome {
    let envelope = match envelope_of(text) {
        Ok(envelope) => envelope,
        Err(e) => return offer(provider, kind, input, Err(e)),
    };
    let finish = envelope
        .pointer("/choices/0/finish_reason")
        .and_then(Value::as_str);
    if let Some(reason) = finish.filter(|r| *r != "stop") {
        return CallOutcome::Failed(AttemptError::new(
            "provider_output_incomplete",
            format!("{} ended its answer unfinished (finish_reason {reason}); an unfinished answer is never an output", provider.name),
            false,
        ));
    }
    offer(provider, kind, input, output_in(kind.answer(), &envelope))
}

/// The output a chat completion carries in `choices[0].message.content` (for a JSON
/// answer, the JSON it holds; for text, the text), and its `usage` when it has one (two
/// counts that are not whole numbers read as none).
pub fn output_of(answer: Answer, text: &str) -> Result<(Value, Option<Tokens>), String> {
    output_in(answer, &envelope_of(text)?)
}

/// A whole answer's body, parsed (I-JSON).
fn envelope_of(text: &str) -> Result<Value, String> {
    ijson::parse(text.as_bytes()).map_err(|e| format!("the answer is not JSON: {e}"))
}

/// [`output_of`], from the answer already parsed.
fn output_in(answer: Answer, envelope: &Value) -> Result<(Value, Option<Tokens>), String> {
    let content = envelope
        .pointer("/choices/0/message/content")
        .and_then(Value::as_str)
        .ok_or("the answer has no choices[0].message.content string")?;
    let output = content_output(answer, content).map_err(|e| format!("the {e}"))?;
    let tokens = envelope.get("usage").and_then(Tokens::of_usage);
    Ok((output, tokens))
}

/// An answer's content as an output: parsed for a JSON answer, as it is for text. The
/// error begins "content …".
fn content_output(answer: Answer, content: &str) -> Result<Value, String> {
    match answer {
        Answer::Json => {
            ijson::parse(content.as_bytes()).map_err(|e| format!("content is not JSON: {e}"))
        }
        Answer::Text => Ok(Value::String(content.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider() -> ProviderConfig {
        ProviderConfig::parse_list(
            r#"[{"name": "p", "base_url": "http://127.0.0.1:1", "model": "m", "timeout_ms": 1000}]"#,
        )
        .unwrap()
        .remove(0)
    }

    fn translate() -> Kind {
        Kind::from_json(include_str!("../../edge/kinds/translate.json")).unwrap()
    }

    fn completion(content: &str, finish: &str) -> String {
        json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                            "finish_reason": finish}]})
        .to_string()
    }

    #[test]
    fn a_whole_text_answer_is_its_text_and_one_cut_short_is_never_an_output() {
        let (p, k) = (provider(), translate());
        let input = json!({"text": "The library opens at nine.", "to": "French"});
        match classify(
            &p,
            &k,
            &input,
            200,
            None,
            &completion("La bibliothèque", "stop"),
        ) {
            CallOutcome::Output(output, _) => assert_eq!(output, json!("La bibliothèque")),
            other => panic!("{other:?}"),
        }
        for finish in ["length", "content_filter"] {
            match classify(&p, &k, &input, 200, None, &completion("La bibli", finish)) {
                CallOutcome::Failed(e) => {
                    assert_eq!(e.code, "provider_output_incomplete");
                    assert!(!e.retryable && e.message.contains(finish), "{e:?}");
                }
                other => panic!("{finish}: {other:?}"),
            }
        }
        match classify(&p, &k, &input, 200, None, &completion(" \n", "stop")) {
            CallOutcome::Failed(e) => assert_eq!(e.code, "contract_violation"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_text_kind_is_asked_without_a_response_format_and_with_its_parameters() {
        let body = request_body(
            &provider(),
            &translate(),
            &json!({"text": "Hi.", "to": "German"}),
        );
        assert_eq!(body["temperature"], json!(0.3));
        assert_eq!(body["max_tokens"], json!(4000));
        assert!(body.get("response_format").is_none(), "{body}");
        assert_eq!(
            body["messages"][1]["content"],
            "Translate into German:\n\nHi."
        );
        let summarize = Kind::from_json(include_str!("../../edge/kinds/summarize.json")).unwrap();
        let body = request_body(&provider(), &summarize, &json!({"text": "Hi there."}));
        assert_eq!(
            body["temperature"],
            json!(0),
            "the first form's request, as it was"
        );
        assert_eq!(body["response_format"]["json_schema"]["strict"], true);
        assert!(body.get("max_tokens").is_none(), "{body}");
        let mut loose = provider();
        loose.json_form = JsonForm::JsonObject;
        loose.models.insert("summarize".into(), "m-summary".into());
        let body = request_body(&loose, &summarize, &json!({"text": "Hi there."}));
        assert_eq!(body["response_format"], json!({"type": "json_object"}));
        assert_eq!(body["model"], "m-summary");
        loose.json_form = JsonForm::Prompt;
        let body = request_body(&loose, &summarize, &json!({"text": "Hi there."}));
        assert!(body.get("response_format").is_none(), "{body}");
    }
}
