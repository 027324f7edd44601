//! The kinds beyond summarize, end to end on the real Worker and its store: a text
//! answer (`translate`), a JSON answer held to a rule on its input (`classify`), and a
//! nested JSON answer asked with few-shot messages (`extract`). Each runs whole (on
//! `primary`) and streamed (on `fallback`, which streams), keeps its contract, and its
//! provider is sent what its kind file says. Then `GET /v1/kinds`, certification of
//! every kind against the mock, and a text answer's contract refusing a blank one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use onceclick_tests::client::{id, send, status_is, unique, Api, Mock};
use onceclick_tests::sse;
use serde_json::{json, Value};

/// An input of `kind` that carries `marker` (so the mock's record of its call is found).
fn input(kind: &str, marker: &str) -> Value {
    match kind {
        "translate" => {
            json!({"text": format!("{marker}: the library opens at nine."), "to": "French"})
        }
        "classify" => json!({"text": format!("{marker}: I was charged twice this month."),
                             "labels": ["billing", "bug", "feature request"]}),
        _ => json!({"text": format!(
            "{marker}\n\nBest regards,\nAda Lovelace\nAnalytical Engines Ltd\nada@engines.example"
        )}),
    }
}

/// The job's result keeps what `kind`'s contract says of it.
fn assert_keeps_its_contract(kind: &str, input: &Value, result: &Value) {
    match kind {
        "translate" => {
            let text = result
                .as_str()
                .unwrap_or_else(|| panic!("a text result: {result}"));
            assert!(!text.trim().is_empty(), "{result}");
        }
        "classify" => {
            let labels = input["labels"].as_array().unwrap();
            assert!(labels.contains(&result["label"]), "{result}");
            assert!(result["reason"].is_string(), "{result}");
        }
        _ => {
            let text = input["text"].as_str().unwrap();
            for pointer in [
                "/contact/name",
                "/contact/email",
                "/contact/phone",
                "/company",
            ] {
                match result.pointer(pointer) {
                    Some(Value::Null) => {}
                    Some(Value::String(s)) => assert!(text.contains(s.as_str()), "{result}"),
                    other => panic!("{pointer} is {other:?}: {result}"),
                }
            }
        }
    }
}

/// Follows job `job_id` on its stream to the end: the text its deltas wrote, and the
/// last document.
async fn streamed_text(api: &Api, token: &str, job_id: &str) -> (String, Value) {
    let mut stream = sse::follow(api, Some(token), job_id, None).await;
    let (mut text, mut last) = (String::new(), Value::Null);
    while let Some((_, event, data)) = stream.next_typed().await {
        match event.as_str() {
            "delta" => {
                assert_eq!(data["offset"].as_u64(), Some(text.chars().count() as u64));
                text.push_str(data["text"].as_str().unwrap());
            }
            "job" => last = data,
            other => panic!("an event this test does not know: {other}"),
        }
    }
    (text, last)
}

#[tokio::test]
async fn each_new_kind_runs_whole_and_streamed_and_keeps_its_contract() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    let token = api.token("kinds");
    for kind in ["translate", "classify", "extract"] {
        for provider in ["primary", "fallback"] {
            let marker = unique(kind);
            let input = input(kind, &marker);
            let body = json!({"kind": kind, "input": input, "provider": provider});
            let created = send(api.create(&token, Some(&unique("key")), &body.to_string())).await;
            assert_eq!(created.status, 201, "{kind}: {}", created.text);
            let job_id = id(&created.json());
            let job = match provider {
                "fallback" => {
                    let (text, last) = streamed_text(&api, &token, &job_id).await;
                    assert_eq!(last["status"], "succeeded", "{kind}: {last}");
                    // The text streamed is the answer: a text answer's text, a JSON
                    // answer's JSON.
                    let result = &last["result"];
                    match result {
                        Value::String(answer) => assert_eq!(&text, answer, "{kind}"),
                        _ => assert_eq!(&serde_json::from_str::<Value>(&text).unwrap(), result),
                    }
                    last
                }
                _ => api.wait_job(&token, &job_id, status_is("succeeded")).await,
            };
            assert_keeps_its_contract(kind, &input, &job["result"]);

            // The provider was asked as the kind file says.
            let calls = mock.calls(&marker).await;
            assert_eq!(calls.len(), 1, "{kind} on {provider}: {calls:?}");
            let call = &calls[0];
            assert_eq!(call["kind"], kind, "{call}");
            assert_eq!(call["stream"], provider == "fallback", "{call}");
            // A JSON answer is asked as the provider takes it: `primary` a strict
            // schema, `fallback` `json_object`; a text answer with no format at all.
            let form = match (kind, provider) {
                ("translate", _) => Value::Null,
                (_, "fallback") => json!("json_object"),
                _ => json!("json_schema"),
            };
            assert_eq!(call["response_format"], form, "{call}");
            match kind {
                "translate" => {
                    assert_eq!(call["temperature"], 0.3, "{call}");
                    assert_eq!(call["max_tokens"], 4000, "{call}");
                }
                "extract" => {
                    assert_eq!(call["messages"], 6, "two few-shot exchanges: {call}");
                    assert_eq!(call["temperature"], 0.0, "{call}");
                }
                _ => {}
            }
        }
    }
}

#[tokio::test]
async fn a_blank_text_answer_and_a_label_not_offered_break_the_contract() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    let token = api.token("kinds-refused");
    for kind in ["translate", "classify"] {
        let marker = unique(kind);
        // For a text kind the mock's malformed answer is blank; for a JSON kind, cut.
        mock.script("primary", &marker, json!([{"reply": "malformed"}]))
            .await;
        let body = json!({"kind": kind, "input": input(kind, &marker)});
        let created = send(api.create(&token, Some(&unique("key")), &body.to_string())).await;
        assert_eq!(created.status, 201, "{}", created.text);
        let job = api
            .wait_job(&token, &id(&created.json()), status_is("failed"))
            .await;
        let error = &job["attempts"][0]["error"];
        assert_eq!(error["code"], "contract_violation", "{job}");
        if kind == "translate" {
            assert!(
                error["message"].as_str().unwrap().contains("blank"),
                "{error}"
            );
        }
    }
    // A resolve is held to the same contract: a label the input did not offer is refused.
    let marker = unique("classify-resolve");
    mock.script("primary", &marker, json!([{"status": 504}]))
        .await;
    let body = json!({"kind": "classify", "input": input("classify", &marker)});
    let created = send(api.create(&token, Some(&unique("key")), &body.to_string())).await;
    let job = api
        .wait_job(&token, &id(&created.json()), status_is("unknown"))
        .await;
    let attempt = id(&job["attempts"][0]);
    let admin = api.admin_token("kinds-resolver");
    let path = format!("/v1/attempts/{attempt}/resolve");
    let wrong = json!({"outcome": "succeeded", "result": {"label": "praise", "reason": "r"}});
    let refused = send(api.post_json(&admin, &path, &wrong)).await;
    assert_eq!(refused.status, 422, "{}", refused.text);
    assert!(refused.text.contains("one_of"), "{}", refused.text);
    let right = json!({"outcome": "succeeded", "result": {"label": "billing", "reason": "r"}});
    let resolved = send(api.post_json(&admin, &path, &right)).await;
    assert_eq!(resolved.status, 200, "{}", resolved.text);
    assert_eq!(resolved.json()["result"]["label"], "billing");
}

#[tokio::test]
async fn kinds_are_listed_and_each_is_certified_against_the_mock() {
    let api = Api::from_env();
    let token = api.token("kinds-list");
    let reply = send(api.get(&token, "/v1/kinds")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let kinds = reply.json()["kinds"].as_array().cloned().unwrap();
    let named = |name: &str| kinds.iter().find(|k| k["kind"] == name).cloned().unwrap();
    assert_eq!(named("translate")["answer"], "text");
    assert_eq!(named("translate")["output_schema"]["type"], "string");
    assert_eq!(named("classify")["answer"], "json");
    assert_eq!(named("summarize")["contract_version"], "a03899eae93229d7");
    assert!(!named("extract")["examples"].as_array().unwrap().is_empty());
    // The mock answers each kind's golden inputs in the kind's own shape.
    let reports = api.certify("fallback").await;
    for kind in ["translate", "classify", "extract"] {
        let report = reports.iter().find(|r| r["kind"] == kind).unwrap();
        assert_eq!(report["passed"], true, "{report}");
        assert_eq!(report["contract_version"], named(kind)["contract_version"]);
    }
}
