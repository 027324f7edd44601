//! A certification is bound to what was certified. These tests change the stored
//! certifications that every other test relies on, so they live in a test binary of
//! their own: cargo runs test binaries one after another, never side by side.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use onceclick_tests::client::{id, send, status_is, unique, Api, Mock};
use onceclick_tests::db;
use serde_json::json;

#[tokio::test]
async fn a_certification_for_another_model_or_address_does_not_count() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    api.ensure_certified("fallback").await;
    let token = api.token("bound");
    let marker = unique("bound");
    mock.script("primary", &marker, json!([{"status": 400}]))
        .await;
    let job = api
        .create_job(
            &token,
            "summarize",
            &format!("{marker}: a text to summarize, twice if need be."),
            None,
        )
        .await;
    let job_id = id(&job);
    api.wait_job(&token, &job_id, status_is("failed")).await;

    // The stored report was made for another model (or base URL) than the one
    // configured now: as if the deploy had changed the provider's `model`.
    let changed = db::execute(
        "UPDATE certifications SET provider_digest = 'another-model' WHERE provider = ?1",
        "fallback",
    );
    assert!(changed >= 1);
    let path = format!("/v1/jobs/{job_id}/attempts");
    let refused = send(api.post_json(&token, &path, &json!({"provider": "fallback"}))).await;
    assert_eq!(refused.status, 422, "{}", refused.text);
    assert_eq!(refused.problem_code(), "provider_not_certified");
    let listed = send(api.get(&token, "/v1/providers")).await.json();
    let fallback = listed["providers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "fallback")
        .unwrap()
        .clone();
    assert_eq!(
        fallback["kinds"]["summarize"]["certified"], false,
        "{fallback}"
    );

    // Certified again for what it is now, it counts.
    api.ensure_certified("fallback").await;
    let accepted = send(api.post_json(&token, &path, &json!({"provider": "fallback"}))).await;
    assert_eq!(accepted.status, 201, "{}", accepted.text);
    api.wait_job(&token, &job_id, status_is("succeeded")).await;
}

#[tokio::test]
async fn certify_refuses_a_provider_whose_golden_prompts_may_not_fit() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    // `primary` declares max_prompt_tokens 10 in the test Worker.
    let golden = "The new library opened downtown on Monday";
    let primary_calls = || async {
        let calls = mock.calls(golden).await;
        calls.iter().filter(|c| c["provider"] == "primary").count()
    };
    let before = primary_calls().await;
    let reports = api.certify("primary").await;
    assert!(!reports.is_empty());
    for report in &reports {
        assert_eq!(report["passed"], false, "{report}");
        let failures = report["failures"].as_array().unwrap();
        assert!(!failures.is_empty());
        assert!(
            failures.iter().all(|f| f["code"] == "prompt_too_long"),
            "{report}"
        );
    }
    assert_eq!(
        primary_calls().await,
        before,
        "a prompt that may not fit is never sent"
    );
}
