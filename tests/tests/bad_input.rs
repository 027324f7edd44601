//! Every client mistake gets its status and `code` as problem+json, and writes nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use onceclick_tests::auth;
use onceclick_tests::client::{send, unique, Api};
use onceclick_tests::db;
use reqwest::Method;
use serde_json::json;

fn jobs_of(owner: &str) -> i64 {
    db::count("SELECT count(*) FROM jobs WHERE owner_id = ?1", owner)
}

#[tokio::test]
async fn bad_requests_get_their_code_and_write_nothing() {
    let api = Api::from_env();
    let owner = unique("bad-input-owner");
    let token = api.token(&owner);
    let ok_body = json!({"kind": "summarize", "input": {"text": "fine"}}).to_string();
    let deep = format!(
        "{{\"kind\":\"summarize\",\"input\":{{\"text\":\"x\",\"d\":{}1{}}}}}",
        "[".repeat(40),
        "]".repeat(40)
    );
    let big = json!({"kind": "summarize", "input": {"text": "x".repeat(70 * 1024)}}).to_string();
    let cases: Vec<(&str, Option<String>, String, u16, &str)> = vec![
        (
            "no key",
            None,
            ok_body.clone(),
            400,
            "idempotency_key_missing",
        ),
        (
            "empty key",
            Some(String::new()),
            ok_body.clone(),
            400,
            "idempotency_key_invalid",
        ),
        (
            "key with a space",
            Some("a b".into()),
            ok_body.clone(),
            400,
            "idempotency_key_invalid",
        ),
        (
            "key of 256",
            Some("k".repeat(256)),
            ok_body.clone(),
            400,
            "idempotency_key_invalid",
        ),
        (
            "body over 64 KiB",
            Some(unique("k")),
            big,
            413,
            "payload_too_large",
        ),
        (
            "not JSON",
            Some(unique("k")),
            "{kind:".into(),
            400,
            "invalid_json",
        ),
        (
            "duplicate member",
            Some(unique("k")),
            r#"{"kind":"summarize","kind":"summarize","input":{"text":"a"}}"#.into(),
            400,
            "invalid_json",
        ),
        (
            "integer beyond 2^53",
            Some(unique("k")),
            r#"{"kind":"summarize","input":{"text":"a","n":9007199254740993}}"#.into(),
            400,
            "invalid_json",
        ),
        (
            "nesting beyond 32",
            Some(unique("k")),
            deep,
            400,
            "invalid_json",
        ),
        (
            "not an object",
            Some(unique("k")),
            "[1,2]".into(),
            400,
            "invalid_json",
        ),
        (
            "owner in body",
            Some(unique("k")),
            r#"{"kind":"summarize","input":{"text":"a"},"owner_id":"eve"}"#.into(),
            400,
            "invalid_json",
        ),
        (
            "unknown kind",
            Some(unique("k")),
            r#"{"kind":"transmogrify","input":{"text":"a"}}"#.into(),
            422,
            "unknown_kind",
        ),
        (
            "empty text",
            Some(unique("k")),
            r#"{"kind":"summarize","input":{"text":""}}"#.into(),
            422,
            "invalid_input",
        ),
        (
            "text too long",
            Some(unique("k")),
            json!({"kind":"summarize","input":{"text":"y".repeat(20001)}}).to_string(),
            422,
            "invalid_input",
        ),
        (
            "extra input member",
            Some(unique("k")),
            r#"{"kind":"summarize","input":{"text":"a","lang":"en"}}"#.into(),
            422,
            "invalid_input",
        ),
        (
            "unknown provider",
            Some(unique("k")),
            r#"{"kind":"summarize","input":{"text":"a"},"provider":"nope"}"#.into(),
            422,
            "unknown_provider",
        ),
    ];
    for (name, key, body, status, code) in cases {
        let reply = send(api.create(&token, key.as_deref(), &body)).await;
        assert_eq!(reply.status, status, "{name}: {}", reply.text);
        assert_eq!(reply.problem_code(), code, "{name}");
        assert!(
            !reply.json()["detail"].as_str().unwrap().is_empty(),
            "{name}"
        );
        assert!(reply.header("server-timing").is_some(), "{name}");
    }
    assert_eq!(jobs_of(&owner), 0, "no case wrote a job");
}

#[tokio::test]
async fn invalid_input_names_the_path() {
    let api = Api::from_env();
    let token = api.token("paths");
    let reply = send(api.create(
        &token,
        Some(&unique("k")),
        r#"{"kind":"summarize","input":{"text":5}}"#,
    ))
    .await;
    assert_eq!(reply.problem_code(), "invalid_input");
    let detail = reply.json()["detail"].as_str().unwrap().to_owned();
    assert!(detail.contains("/text"), "{detail}");
}

#[tokio::test]
async fn bad_tokens_are_401_with_www_authenticate() {
    let api = Api::from_env();
    let owner = unique("token-owner");
    let body = json!({"kind": "summarize", "input": {"text": "who am I"}}).to_string();
    let forged = auth::mint("not-the-secret", &owner, false, 3600).unwrap();
    let expired = auth::mint_with(&api.secret, &owner, false, -120).unwrap();
    // alg "none": a header and claims with an empty signature.
    let b64 = |v: serde_json::Value| {
        use std::fmt::Write;
        let bytes = v.to_string().into_bytes();
        let table = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let n = chunk
                .iter()
                .enumerate()
                .fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
            for i in 0..=chunk.len() {
                let _ = write!(
                    out,
                    "{}",
                    table[((n >> (18 - 6 * i)) & 63) as usize] as char
                );
            }
        }
        out
    };
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    let none = format!(
        "{}.{}.",
        b64(json!({"alg": "none", "typ": "JWT"})),
        b64(json!({"sub": owner, "exp": exp}))
    );
    let tampered = {
        let good = api.token(&owner);
        let mut parts: Vec<String> = good.split('.').map(str::to_owned).collect();
        parts[1] = b64(json!({"sub": "admin", "exp": exp, "role": "admin"}));
        parts.join(".")
    };
    let no_exp = {
        let good = api.token(&owner);
        let mut parts: Vec<String> = good.split('.').map(str::to_owned).collect();
        parts[1] = b64(json!({"sub": owner}));
        parts.join(".")
    };
    for (name, token) in [
        ("forged", Some(forged)),
        ("expired", Some(expired)),
        ("alg none", Some(none)),
        ("tampered", Some(tampered)),
        ("no exp", Some(no_exp)),
        ("garbage", Some("abc".to_owned())),
        ("missing", None),
    ] {
        let rb = api
            .request(Method::POST, "/v1/jobs", token.as_deref())
            .header("Idempotency-Key", unique("k"))
            .body(body.clone());
        let reply = send(rb).await;
        assert_eq!(reply.status, 401, "{name}: {}", reply.text);
        assert_eq!(reply.problem_code(), "unauthorized", "{name}");
        assert_eq!(reply.header("www-authenticate"), Some("Bearer"), "{name}");
    }
    assert_eq!(jobs_of(&owner), 0);
    assert_eq!(jobs_of("admin"), 0);
}

#[tokio::test]
async fn unknown_paths_and_methods_are_problems_not_5xx() {
    let api = Api::from_env();
    let token = api.token("wanderer");
    let missing = send(api.get(&token, "/v1/jobs/job_does-not-exist")).await;
    assert_eq!(
        (missing.status, missing.problem_code().as_str()),
        (404, "not_found")
    );
    let nowhere = send(api.get(&token, "/v1/nowhere")).await;
    assert_eq!(nowhere.problem_code(), "not_found");
    let wrong = send(api.request(Method::DELETE, "/v1/jobs", Some(&token))).await;
    assert_eq!(
        (wrong.status, wrong.problem_code().as_str()),
        (405, "method_not_allowed")
    );
}
