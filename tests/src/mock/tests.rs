//! The mock over HTTP, with no Worker: what it answers a kind's call, whole and streamed,
//! and what it records of it.

use super::{router, Mock};
use onceclick_protocol::contract::{load_file, ProviderConfig};
use serde_json::{json, Value};

/// Serves a fresh mock on a free port; its base URL.
async fn serve() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router(Mock::default())).await });
    base
}

/// A call's body for `input` under the shipped kind `name`: the Worker's own
/// (`answer::request_body`), to a provider that takes strict schemas.
pub(super) fn body(name: &str, input: &Value) -> Value {
    let path = format!("{}/../edge/kinds/{name}.json", env!("CARGO_MANIFEST_DIR"));
    let kind = load_file(std::path::Path::new(&path)).unwrap().kind;
    let provider = ProviderConfig::parse_list(
        r#"[{"name": "primary", "base_url": "http://127.0.0.1:1/primary/v1", "model": "mock-small", "timeout_ms": 1000}]"#,
    )
    .unwrap()
    .remove(0);
    onceclick_core::answer::request_body(&provider, &kind, input)
}

async fn call(base: &str, body: &Value) -> String {
    let url = format!("{base}/primary/v1/chat/completions");
    let reply = reqwest::Client::new().post(url).json(body).send().await;
    let reply = reply.unwrap();
    assert_eq!(reply.status(), 200);
    reply.text().await.unwrap()
}

async fn calls(base: &str, contains: &str) -> Vec<Value> {
    let url = format!("{base}/_calls?contains={contains}");
    let calls: Value = reqwest::get(url).await.unwrap().json().await.unwrap();
    calls["calls"].as_array().unwrap().clone()
}

#[tokio::test]
async fn a_classify_call_gets_its_label_and_is_recorded_with_its_kind() {
    let base = serve().await;
    let input = json!({"text": "marker-classify: it crashes.", "labels": ["bug", "billing"]});
    let mut body = body("classify", &input);
    body["max_tokens"] = json!(50);
    let answer: Value = serde_json::from_str(&call(&base, &body).await).unwrap();
    let content = answer["choices"][0]["message"]["content"].as_str().unwrap();
    let output: Value = serde_json::from_str(content).unwrap();
    assert_eq!(output["label"], "bug");
    let calls = calls(&base, "marker-classify").await;
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["kind"], "classify");
    assert_eq!(calls[0]["max_tokens"], 50);
    assert_eq!(calls[0]["messages"], 2);
}

#[tokio::test]
async fn a_streamed_translate_call_streams_the_golden_text() {
    let base = serve().await;
    let input = json!({"text": "Where is the station?", "to": "Spanish"});
    let mut body = body("translate", &input);
    body["stream"] = json!(true);
    let text = call(&base, &body).await;
    let streamed: String = text
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .filter_map(|chunk| {
            chunk["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(streamed, "¿Dónde está la estación?");
    let calls = calls(&base, "station").await;
    assert_eq!(calls[0]["kind"], "translate");
    assert_eq!(calls[0]["max_tokens"], 4000);
    assert_eq!(calls[0]["temperature"], 0.3);
}

/// A provider that requires headers (`POST /_expect`) refuses a call without them, and
/// answers one with them: a test fails when a provider's headers do not reach it.
#[tokio::test]
async fn a_call_without_a_required_header_is_refused() {
    let base = serve().await;
    let http = reqwest::Client::new();
    let expect = json!({"provider": "gateway", "headers": {"api-key": "k", "X-Title": "t"}});
    let set = http
        .post(format!("{base}/_expect"))
        .json(&expect)
        .send()
        .await
        .unwrap();
    assert_eq!(set.status(), 204);
    let input = json!({"text": "Where is the station? (expect)", "to": "Spanish"});
    let url = format!("{base}/gateway/v1/chat/completions");
    let send = |headers: &[(&str, &str)]| {
        let mut request = http.post(&url).json(&body("translate", &input));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.send()
    };
    let refused = send(&[("api-key", "k")]).await.unwrap();
    assert_eq!(refused.status(), 401);
    assert!(refused.text().await.unwrap().contains("x-title"));
    let wrong = send(&[("api-key", "other"), ("x-title", "t")])
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let answered = send(&[("api-key", "k"), ("x-title", "t")]).await.unwrap();
    assert_eq!(answered.status(), 200);
    let recorded = calls(&base, "(expect)").await;
    assert_eq!(recorded.len(), 3, "every call is recorded, refused or not");
    assert_eq!(recorded[2]["headers"]["x-title"], "t");
}
