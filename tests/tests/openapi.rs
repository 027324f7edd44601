//! `edge/openapi.yaml` must name every code, state and event the code knows, and every
//! route the Worker serves. A drift between the two fails here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use onceclick_protocol::{AttemptState, ErrorCode, JobStatus};

fn spec() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../edge/openapi.yaml")).unwrap()
}

/// The inline `enum: [...]` list that follows `anchor` in the spec.
fn enum_after(spec: &str, anchor: &str) -> Vec<String> {
    let start = spec
        .find(anchor)
        .unwrap_or_else(|| panic!("{anchor} not in spec"));
    let rest = &spec[start..];
    let open = rest.find("enum: [").unwrap() + "enum: [".len();
    let close = rest[open..].find(']').unwrap();
    rest[open..open + close]
        .split(',')
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

#[test]
fn every_error_code_is_documented() {
    let documented = enum_after(&spec(), "    Problem:\n      type: object");
    let known: Vec<String> = ErrorCode::ALL
        .iter()
        .map(|c| c.as_str().to_owned())
        .collect();
    assert_eq!(documented, known);
}

#[test]
fn every_state_is_documented() {
    let spec = spec();
    let statuses: Vec<String> = JobStatus::ALL
        .iter()
        .map(|s| s.as_str().to_owned())
        .collect();
    assert_eq!(enum_after(&spec, "        status: { enum:"), statuses);
    let states: Vec<String> = AttemptState::ALL
        .iter()
        .map(|s| s.as_str().to_owned())
        .collect();
    assert_eq!(enum_after(&spec, "        state: { enum:"), states);
}

#[test]
fn every_route_is_documented() {
    let spec = spec();
    for route in [
        "/v1/health:",
        "/v1/jobs:",
        "/v1/jobs/{id}:",
        "/v1/jobs/{id}/events:",
        "/v1/jobs/{id}/stream:",
        "/v1/stream:",
        "/v1/jobs/{id}/attempts:",
        "/v1/jobs/{id}/cancel:",
        "/v1/attempts:",
        "/v1/attempts/{id}/resolve:",
        "/v1/attempts/{id}/dispatch:",
        "/v1/kinds:",
        "/v1/providers:",
        "/v1/providers/{name}/certify:",
        "/v1/stats:",
        "/v1/move:",
    ] {
        assert!(
            spec.contains(&format!("\n  {route}\n")),
            "{route} is not in openapi.yaml"
        );
    }
    let api = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../edge/src/api.rs"))
        .unwrap();
    // Routes under `/v1/_…` exist only in a Worker with fault injection on (tests):
    // they are not part of the contract.
    let served = api.matches("[\"v1\"").count() - api.matches("[\"v1\", \"_").count();
    assert_eq!(served, 16, "api.rs serves a route this test does not list");
}
