//! The adapter for OpenAI-compatible providers: `POST {base_url}/chat/completions`.
//!
//! One call per attempt, carrying `Idempotency-Key: <attempt id>`, bounded by the
//! provider's `timeout_ms`. The answer is classified so that the dispatcher never has to
//! look at HTTP: an output to offer, a failure (retryable or not), or an *unknown*: a
//! timeout, a 504, or an answer cut off after its status line, after which the
//! provider may have done the work (or may still be doing it).

use futures_util::future::{select, Either};
use onceclick_protocol::contract::Kind;
use onceclick_protocol::contract::ProviderConfig;
use onceclick_protocol::{ijson, AttemptError};
use serde_json::{json, Value};
use std::time::Duration;
use worker::{AbortController, Delay, Fetch, Headers, Method, Request, RequestInit};

/// What a provider says it billed for one answer (a chat completion's `usage`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tokens {
    pub prompt: u64,
    pub completion: u64,
}

/// How one provider call ended.
#[derive(Debug)]
pub enum CallOutcome {
    /// An output that keeps the kind's contract, and the tokens the answer says it
    /// used (if it says).
    Output(Value, Option<Tokens>),
    /// The call failed, and the provider did no work; `retryable` says whether a new
    /// attempt may help.
    Failed(AttemptError),
    /// Nobody knows whether the provider did the work: no answer within `timeout_ms`,
    /// a 504 from a gateway in front of it, or an answer cut off after its status.
    Unknown(AttemptError),
}

/// The chat-completions request body for `input` under `kind`.
pub(crate) fn request_body(provider: &ProviderConfig, kind: &Kind, input: &Value) -> Value {
    let (system, user) = kind.render_prompt(input);
    json!({
        "model": provider.model,
        "temperature": 0,
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": user},
        ],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": kind.name(), "strict": true, "schema": kind.decl().output_schema},
        },
    })
}

/// Aborts its fetch when dropped: a call dropped before its answer (the dispatcher
/// stopped it, or its isolate went away) closes the provider's connection rather than
/// leave it working for nobody. Aborting a fetch that has ended does nothing.
struct AbortOnDrop(Option<AbortController>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(controller) = self.0.take() {
            controller.abort();
        }
    }
}

/// Calls the provider once for attempt `attempt_id` and classifies the answer. Dropped
/// before it ends, it aborts the fetch ([`AbortOnDrop`]).
pub(crate) async fn call(
    provider: &ProviderConfig,
    api_key: Option<&str>,
    kind: &Kind,
    input: &Value,
    attempt_id: &str,
) -> CallOutcome {
    let controller = AbortController::default();
    let signal = controller.signal();
    let _abort = AbortOnDrop(Some(controller));
    let exchange = async {
        let request =
            build_request(provider, api_key, kind, input, attempt_id).map_err(Definite)?;
        let mut response = Fetch::Request(request)
            .send_with_signal(&signal)
            .await
            .map_err(|e| {
                Definite(AttemptError::new(
                    "provider_unreachable",
                    format!("could not reach {}: {e}", provider.name),
                    true,
                ))
            })?;
        let status = response.status_code();
        let retry_after = response.headers().get("Retry-After").ok().flatten();
        // Past the status line the provider has taken the request: a body that breaks
        // off may carry work that was done.
        let text = response.text().await.map_err(|e| {
            Ambiguous(AttemptError::new(
                "provider_answer_cut_off",
                format!(
                    "the answer from {} broke off after its status {status}: {e}; it may have done the work",
                    provider.name
                ),
                false,
            ))
        })?;
        Ok::<_, Broke>((status, retry_after, text))
    };
    futures_util::pin_mut!(exchange);
    let timeout = Delay::from(Duration::from_millis(provider.timeout_ms));
    match select(exchange, timeout).await {
        Either::Left((Ok((status, retry_after, text)), _)) => {
            classify(provider, kind, input, status, retry_after, &text)
        }
        Either::Left((Err(Definite(error)), _)) => CallOutcome::Failed(error),
        Either::Left((Err(Ambiguous(error)), _)) => CallOutcome::Unknown(error),
        // The timeout: `_abort` aborts the fetch as this returns.
        Either::Right(((), _)) => CallOutcome::Unknown(AttemptError::new(
            "provider_timeout",
            format!(
                "{} did not answer within {} ms; it may still be working",
                provider.name, provider.timeout_ms
            ),
            false,
        )),
    }
}

/// How a call broke before its answer was read.
enum Broke {
    /// Before the provider took the request: it did nothing.
    Definite(AttemptError),
    /// After: it may have done the work.
    Ambiguous(AttemptError),
}
use Broke::{Ambiguous, Definite};

fn build_request(
    provider: &ProviderConfig,
    api_key: Option<&str>,
    kind: &Kind,
    input: &Value,
    attempt_id: &str,
) -> Result<Request, AttemptError> {
    let setup = |e: worker::Error| {
        AttemptError::new(
            "provider_misconfigured",
            format!("cannot build a request for {}: {e}", provider.name),
            false,
        )
    };
    let headers = Headers::new();
    headers
        .set("Content-Type", "application/json")
        .map_err(setup)?;
    headers.set("Idempotency-Key", attempt_id).map_err(setup)?;
    if let Some(key) = api_key {
        headers
            .set("Authorization", &format!("Bearer {key}"))
            .map_err(setup)?;
    }
    let body = request_body(provider, kind, input).to_string();
    let mut init = RequestInit::new();
    init.with_method(Method::Post)
        .with_headers(headers)
        .with_body(Some(body.into()));
    let url = format!(
        "{}/chat/completions",
        provider.base_url.trim_end_matches('/')
    );
    Request::new_with_init(&url, &init).map_err(setup)
}

fn classify(
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
        200..=299 => match output_of(text).and_then(|(output, tokens)| {
            kind.check_output(input, &output)
                .map(|()| (output, tokens))
                .map_err(|v| v.0)
        }) {
            Ok((output, tokens)) => CallOutcome::Output(output, tokens),
            Err(why) => CallOutcome::Failed(AttemptError::new(
                "contract_violation",
                format!("{name}: {why}"),
                false,
            )),
        },
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

/// The JSON object a chat completion carries in `choices[0].message.content`, and its
/// `usage` when it has one (two counts that are not whole numbers read as none).
fn output_of(text: &str) -> Result<(Value, Option<Tokens>), String> {
    let envelope =
        ijson::parse(text.as_bytes()).map_err(|e| format!("the answer is not JSON: {e}"))?;
    let content = envelope
        .pointer("/choices/0/message/content")
        .and_then(Value::as_str)
        .ok_or("the answer has no choices[0].message.content string")?;
    let output =
        ijson::parse(content.as_bytes()).map_err(|e| format!("the content is not JSON: {e}"))?;
    let count = |name: &str| envelope.get("usage")?.get(name)?.as_u64();
    let tokens = count("prompt_tokens")
        .zip(count("completion_tokens"))
        .map(|(prompt, completion)| Tokens { prompt, completion });
    Ok((output, tokens))
}

#[cfg(test)]
mod tests {
    use super::{output_of, Tokens};

    fn envelope(usage: &str) -> String {
        format!(r#"{{"choices": [{{"message": {{"content": "{{\"summary\": \"s\"}}"}}}}]{usage}}}"#)
    }

    #[test]
    fn an_answer_says_what_it_billed_or_nothing() {
        let (output, tokens) = output_of(&envelope(
            r#", "usage": {"prompt_tokens": 31, "completion_tokens": 9, "total_tokens": 40}"#,
        ))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(output["summary"], "s");
        assert_eq!(
            tokens,
            Some(Tokens {
                prompt: 31,
                completion: 9
            })
        );
        for usage in [
            "",
            r#", "usage": {"prompt_tokens": 31}"#,
            r#", "usage": {"prompt_tokens": -1, "completion_tokens": 9}"#,
            r#", "usage": {"prompt_tokens": "31", "completion_tokens": 9}"#,
            r#", "usage": null"#,
        ] {
            let (_, tokens) = output_of(&envelope(usage)).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(tokens, None, "{usage}");
        }
    }
}
