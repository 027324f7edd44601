//! Provider contracts and certified failover. One test, in phases, because it changes
//! the certification of `fallback`, which every phase depends on.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use onceclick_tests::client::{id, send, status_is, unique, Api, Mock};
use onceclick_tests::db;
use serde_json::{json, Value};

/// A phrase from each golden input of the summarize kinds, to script the mock's answers
/// to certification calls (and nothing else).
const GOLDEN: [&str; 3] = [
    "The new library opened downtown",
    "The train was delayed",
    "The committee met on Tuesday",
];

async fn golden_replies(mock: &Mock, provider: &str, step: Value) {
    for phrase in GOLDEN {
        mock.script(provider, phrase, json!([step.clone()])).await;
    }
}

/// Whether `report` is one of the summarize kinds' (the ones `GOLDEN` scripts).
fn summarizes(report: &Value) -> bool {
    report["kind"]
        .as_str()
        .is_some_and(|k| k.starts_with("summarize"))
}

async fn create(api: &Api, token: &str, kind: &str, marker: &str, provider: Option<&str>) -> Value {
    api.create_job(
        token,
        kind,
        &format!("{marker}: the harvest was late but generous this year."),
        provider,
    )
    .await
}

async fn certified(api: &Api, token: &str, provider: &str, kind: &str) -> bool {
    let reply = send(api.get(token, "/v1/providers")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let body = reply.json();
    let entry = body["providers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == provider)
        .unwrap_or_else(|| panic!("{provider} not listed: {body}"))
        .clone();
    assert_eq!(
        entry["kinds"][kind]["contract_version"]
            .as_str()
            .unwrap()
            .len(),
        16
    );
    entry["kinds"][kind]["certified"].as_bool().unwrap()
}

/// A job of `summarize` whose primary failed retryably, ready for the fallback button.
async fn failed_job(api: &Api, mock: &Mock, token: &str) -> String {
    let marker = unique("failed");
    mock.script("primary", &marker, json!([{"status": 503}]))
        .await;
    let job = create(api, token, "summarize", &marker, None).await;
    api.wait_job(token, &id(&job), status_is("failed")).await;
    id(&job)
}

/// With `fallback` uncertified: the fallback button is refused, a hedge is not started
/// and automatic failover does not happen, each with its reason.
async fn fallback_gets_nothing(api: &Api, mock: &Mock, token: &str) {
    let job = failed_job(api, mock, token).await;
    for body in [json!({"provider": "fallback"}), json!({})] {
        let refused = send(api.post_json(token, &format!("/v1/jobs/{job}/attempts"), &body)).await;
        assert_eq!(refused.status, 422, "{}", refused.text);
        assert_eq!(refused.problem_code(), "provider_not_certified");
        assert!(refused.json()["detail"]
            .as_str()
            .unwrap()
            .contains("fallback"));
    }

    let marker = unique("no-hedge");
    let gate = format!("{marker}-g");
    mock.script("primary", &marker, json!([{"gate": gate}]))
        .await;
    let hedged = create(api, token, "summarize_hedged", &marker, None).await;
    let events = api
        .wait_event(token, &id(&hedged), "failover_skipped")
        .await;
    let skipped = events
        .iter()
        .find(|e| e["type"] == "failover_skipped")
        .unwrap();
    assert_eq!(skipped["details"]["for"], "hedge");
    assert!(
        skipped["details"]["reason"]
            .as_str()
            .unwrap()
            .contains("certified"),
        "{skipped}"
    );
    mock.release(&gate).await;
    let done = api
        .wait_job(token, &id(&hedged), status_is("succeeded"))
        .await;
    assert_eq!(
        done["attempts"].as_array().unwrap().len(),
        1,
        "no hedge: {done}"
    );

    let marker = unique("no-failover");
    mock.script("primary", &marker, json!([{"status": 503}]))
        .await;
    let failing = create(api, token, "summarize_hedged", &marker, None).await;
    let events = api
        .wait_event(token, &id(&failing), "failover_skipped")
        .await;
    let skipped = events
        .iter()
        .find(|e| e["type"] == "failover_skipped")
        .unwrap();
    assert_eq!(skipped["details"]["for"], "auto_failover");
    let job = api
        .wait_job(token, &id(&failing), status_is("failed"))
        .await;
    assert_eq!(job["attempts"].as_array().unwrap().len(), 1);
    assert!(mock
        .calls(&marker)
        .await
        .iter()
        .all(|c| c["provider"] == "primary"));
}

#[tokio::test]
async fn only_certified_providers_receive_failover_hedges_and_fallbacks() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    let token = api.token("certification");

    // A provider that adds a top-level key fails certification, naming the key.
    golden_replies(&mock, "fallback", json!({"reply": "extra_key"})).await;
    let reports = api.certify("fallback").await;
    let kinds: Vec<&str> = reports
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    for kind in [
        "summarize",
        "summarize_hedged",
        "translate",
        "classify",
        "extract",
    ] {
        assert!(kinds.contains(&kind), "{kinds:?}");
    }
    // The other kinds' golden calls were not scripted: the mock answers each in its
    // own shape (its golden output), which keeps its contract.
    for report in reports.iter().filter(|r| !summarizes(r)) {
        assert_eq!(report["passed"], true, "{report}");
    }
    for report in reports.iter().filter(|r| summarizes(r)) {
        assert_eq!(report["passed"], false, "{report}");
        assert_eq!(report["failures"].as_array().unwrap().len(), 3, "{report}");
        let failure = &report["failures"][0];
        assert_eq!(failure["code"], "contract_violation");
        assert!(
            failure["message"]
                .as_str()
                .unwrap()
                .contains("\"confidence\""),
            "{failure}"
        );
    }
    assert!(!certified(&api, &token, "fallback", "summarize").await);
    fallback_gets_nothing(&api, &mock, &token).await;

    // The job's own first provider needs no certification.
    let own = create(
        &api,
        &token,
        "summarize",
        &unique("own-first"),
        Some("fallback"),
    )
    .await;
    assert_eq!(own["provider"], "fallback");

    // Valid JSON that breaks a business rule fails in the same way, naming the rule.
    golden_replies(&mock, "fallback", json!({"reply": "long_summary"})).await;
    for report in api
        .certify("fallback")
        .await
        .iter()
        .filter(|r| summarizes(r))
    {
        assert_eq!(report["passed"], false);
        assert!(
            report["failures"][0]["message"]
                .as_str()
                .unwrap()
                .contains("shorter_than"),
            "{report}"
        );
    }
    fallback_gets_nothing(&api, &mock, &token).await;

    // A wrong shape, named by its path.
    golden_replies(&mock, "fallback", json!({"reply": "wrong_shape"})).await;
    let reports = api.certify("fallback").await;
    let report = reports.iter().find(|r| summarizes(r)).unwrap();
    assert!(
        report["failures"][0]["message"]
            .as_str()
            .unwrap()
            .contains("/sentiment"),
        "{report}"
    );

    // Once it keeps the contract, it gets all three.
    golden_replies(&mock, "fallback", json!({})).await;
    api.ensure_certified("fallback").await;
    assert!(certified(&api, &token, "fallback", "summarize").await);
    assert!(certified(&api, &token, "fallback", "summarize_hedged").await);

    let job = failed_job(&api, &mock, &token).await;
    let fallback = send(api.post_json(
        &token,
        &format!("/v1/jobs/{job}/attempts"),
        &json!({"provider": "fallback"}),
    ))
    .await;
    assert_eq!(fallback.status, 201, "{}", fallback.text);

    let marker = unique("failover");
    mock.script("primary", &marker, json!([{"status": 503}]))
        .await;
    let failing = create(&api, &token, "summarize_hedged", &marker, None).await;
    let done = api
        .wait_job(&token, &id(&failing), status_is("succeeded"))
        .await;
    assert_eq!(
        done["attempts"][1]["provider"], "fallback",
        "automatic failover: {done}"
    );
    assert_eq!(done["completed_by"], done["attempts"][1]["id"]);

    // A winning-looking output that breaks the contract fails its attempt, and the
    // hedge still wins.
    let marker = unique("violating-winner");
    let gate = format!("{marker}-g");
    mock.script(
        "primary",
        &marker,
        json!([{"gate": gate, "reply": "extra_key"}]),
    )
    .await;
    mock.script("fallback", &marker, json!([{"gate": gate}]))
        .await;
    let raced = create(&api, &token, "summarize_hedged", &marker, None).await;
    mock.wait_calls(&marker, 2).await;
    mock.release(&gate).await;
    // The two answers race once released: the hedge may win before the primary's
    // violating answer is recorded, so wait for both attempts to be final.
    let done = api
        .wait_job(&token, &id(&raced), |job| {
            job["status"] == "succeeded"
                && job["attempts"][0]["state"] != "running"
                && job["attempts"][0]["state"] != "starting"
        })
        .await;
    let attempts = done["attempts"].as_array().unwrap();
    assert_eq!(attempts[0]["state"], "failed", "{done}");
    assert_eq!(attempts[0]["error"]["code"], "contract_violation");
    assert_eq!(done["completed_by"], attempts[1]["id"]);

    // Changing a kind's declaration makes a new contract version, which has no
    // certification: seen from the database, a stored report for another version no
    // longer counts (as after a deploy that changed the kind). No one certifies by
    // hand: the cron's background pass certifies what is due, a few a pass, and the
    // gate opens again.
    let moved = db::execute(
        "UPDATE certifications SET contract_version = 'an-old-version' WHERE provider = ?1",
        "fallback",
    );
    assert!(moved >= 2, "{moved}");
    assert!(!certified(&api, &token, "fallback", "summarize").await);
    let job = failed_job(&api, &mock, &token).await;
    let refused = send(api.post_json(
        &token,
        &format!("/v1/jobs/{job}/attempts"),
        &json!({"provider": "fallback"}),
    ))
    .await;
    assert_eq!(refused.problem_code(), "provider_not_certified");
    let logged_before = onceclick_tests::log::events("certified_in_background").len();
    for _ in 0..4 {
        if certified(&api, &token, "fallback", "summarize").await {
            break;
        }
        api.run_cron().await;
    }
    assert!(certified(&api, &token, "fallback", "summarize").await);
    // The background pass logged what it certified, since the voiding above.
    let mut logged = Vec::new();
    for _ in 0..50 {
        logged = onceclick_tests::log::events("certified_in_background");
        if logged.len() > logged_before {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(
        logged[logged_before..]
            .iter()
            .any(|l| l["provider"] == "fallback"
                && l["kind"] == "summarize"
                && l["passed"] == true),
        "the background pass logs what it certified: {logged:?}"
    );
    let allowed = send(api.post_json(
        &token,
        &format!("/v1/jobs/{job}/attempts"),
        &json!({"provider": "fallback"}),
    ))
    .await;
    assert_eq!(allowed.status, 201, "{}", allowed.text);
}

#[tokio::test]
async fn certification_is_admin_only_and_names_a_real_provider() {
    let api = Api::from_env();
    let token = api.token("not-admin");
    let reply = send(api.post_json(&token, "/v1/providers/fallback/certify", &json!({}))).await;
    assert_eq!(
        (reply.status, reply.problem_code().as_str()),
        (403, "forbidden")
    );
    let admin = api.admin_token("ops");
    let reply = send(api.post_json(&admin, "/v1/providers/nobody/certify", &json!({}))).await;
    assert_eq!(
        (reply.status, reply.problem_code().as_str()),
        (404, "not_found")
    );
    let anonymous = send(api.request(reqwest::Method::GET, "/v1/providers", None)).await;
    assert_eq!(anonymous.status, 401);
}
