//! Generated bad input: thousands of malformed requests, drawn at random (seeded; the
//! seed is printed, and `ONCECLICK_SEED` replays a run) from every class of mistake a
//! client can make — keys, bodies, headers, tokens, routes — on every route that
//! writes: create, the fallback button, cancel and the admin's resolve. Each must get
//! exactly the status and `code` the contract gives its class, none a 5xx, none may
//! panic the Worker, and none may change a row: the whole database is compared before
//! and after. The targets are ones where a request that slipped past validation WOULD
//! write (the owner's failed job, an `unknown` attempt), so a slip cannot hide.
//!
//! A few requests reqwest refuses to send (a control byte in the `Idempotency-Key`) are
//! written by hand over TCP.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use futures::StreamExt;
use onceclick_tests::auth;
use onceclick_tests::client::{id, marked_text, send, status_is, unique, Api, Mock};
use onceclick_tests::{db, report};
use reqwest::header::HeaderValue;
use reqwest::Method;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

const REQUESTS: usize = 5_000;
const AT_ONCE: usize = 16;

/// Classes per route group, in the order [`generate`] numbers them.
const CREATE_AND_READ: usize = 25;
const FALLBACK: usize = 7;
const CANCEL: usize = 2;
const RESOLVE: usize = 12;
const GENERATED: usize = CREATE_AND_READ + FALLBACK + CANCEL + RESOLVE;
/// The hand-written class, outside the random draw.
const RAW_CLASS: &str = "key: a control byte, written by hand";

/// xorshift64*: a small, seedable source of choices, so a failing run can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn text(&mut self, len: usize) -> String {
        (0..len)
            .map(|_| char::from(b'!' + self.below(94) as u8))
            .collect()
    }
    fn pick<T: Clone>(&mut self, choices: &[T]) -> T {
        choices[self.below(choices.len())].clone()
    }
}

/// One generated request: its class, how to send it, and what the contract answers.
struct Case {
    class: &'static str,
    request: reqwest::RequestBuilder,
    status: u16,
    code: &'static str,
}

fn case(
    class: &'static str,
    request: reqwest::RequestBuilder,
    status: u16,
    code: &'static str,
) -> Case {
    Case {
        class,
        request,
        status,
        code,
    }
}

/// The owner, and the jobs and attempts the bad input aims at. Each target is one where
/// a request that wrongly passed validation would write something.
struct World {
    api: Api,
    owner: String,
    token: String,
    admin: String,
    /// Another owner's failed job, which nothing here may touch, and their token.
    theirs: String,
    their_token: String,
    /// The owner's failed job: a fallback click would add an attempt.
    failed: String,
    /// Its one attempt, `failed`: a resolve would move it.
    failed_attempt: String,
    /// The owner's succeeded job: a cancel would end it.
    succeeded: String,
    /// The owner's cancelled job: a cancel again answers it, and writes nothing.
    cancelled: String,
    /// An `unknown` attempt, and its job (`unknown` too): any resolve would end it.
    unknown_attempt: String,
    unknown_job: String,
    /// The input text of that attempt's job, for results that break its contract.
    unknown_text: String,
    /// A succeeded job's key and body: a resend is its replay, another body a conflict.
    repeat_key: String,
    repeat_body: String,
    repeated: String,
    /// The jobs in the store before this test began (see [`changed`]).
    foreign: std::collections::HashSet<String>,
}

fn good_body(rng: &mut Rng) -> String {
    json!({"kind": "summarize", "input": {"text": format!("bad input {}", rng.text(12))}})
        .to_string()
}

fn post(w: &World, key: Option<&str>, body: impl Into<reqwest::Body>) -> reqwest::RequestBuilder {
    let rb = w
        .api
        .request(Method::POST, "/v1/jobs", Some(&w.token))
        .header("Content-Type", "application/json")
        .body(body);
    match key {
        Some(k) => rb.header("Idempotency-Key", k),
        None => rb,
    }
}

/// An `Idempotency-Key` the contract refuses (`400 idempotency_key_invalid`): empty,
/// too long, a space or a tab inside, non-ASCII, or a broken sf-string.
fn bad_key(rng: &mut Rng) -> HeaderValue {
    let bytes = match rng.below(6) {
        0 => Vec::new(),
        1 => {
            let len = 256 + rng.below(200);
            // No quote: it could open an sf-string whose content is short enough.
            rng.text(len).replace('"', "x").into_bytes()
        }
        2 => format!("a {}", rng.text(8)).into_bytes(),
        3 => format!("a\t{}", rng.text(8)).into_bytes(),
        4 => {
            let mut bytes = b"key-".to_vec();
            bytes.extend(rng.pick(&["é", "ü", "😀", "\u{a0}"]).as_bytes());
            bytes
        }
        _ => format!("\"{}", rng.text(6).replace(['"', '\\'], "x")).into_bytes(),
    };
    HeaderValue::from_bytes(&bytes).unwrap()
}

/// A body that is not JSON at all (never blank: a blank body reads as `{}`).
fn not_json(rng: &mut Rng) -> String {
    let len = 1 + rng.below(40);
    format!("x{}", rng.text(len))
}

/// `json` with one byte that is not UTF-8 put where `at` stands in it (inside a string).
fn invalid_utf8(rng: &mut Rng, json: &str, at: &str) -> Vec<u8> {
    let (head, tail) = json.split_once(at).expect("the marker is in the body");
    let mut body = head.as_bytes().to_vec();
    body.push(rng.pick(&[0xff, 0xc3, 0x80, 0xfe]));
    body.extend_from_slice(tail.as_bytes());
    body
}

fn generate(rng: &mut Rng, w: &World) -> Case {
    match rng.below(GENERATED) {
        n if n < CREATE_AND_READ => create_and_read_case(n, rng, w),
        n if n < CREATE_AND_READ + FALLBACK => fallback_case(n - CREATE_AND_READ, rng, w),
        n if n < CREATE_AND_READ + FALLBACK + CANCEL => {
            cancel_case(n - CREATE_AND_READ - FALLBACK, rng, w)
        }
        n => resolve_case(n - CREATE_AND_READ - FALLBACK - CANCEL, rng, w),
    }
}

/// `POST /v1/jobs` and the reads: keys, bodies, headers, tokens, routes.
fn create_and_read_case(class: usize, rng: &mut Rng, w: &World) -> Case {
    let key = unique("bad-gen-key");
    match class {
        0 => case(
            "key: empty",
            post(w, Some(""), good_body(rng)),
            400,
            "idempotency_key_invalid",
        ),
        1 => {
            let len = 256 + rng.below(200);
            case(
                "key: longer than 255",
                post(w, Some(&rng.text(len)), good_body(rng)),
                400,
                "idempotency_key_invalid",
            )
        }
        2 => {
            let bad = [" ", "\t"][rng.below(2)];
            case(
                "key: space or tab inside",
                post(w, Some(&format!("a{bad}{}", rng.text(8))), good_body(rng)),
                400,
                "idempotency_key_invalid",
            )
        }
        3 => {
            let mut bytes = b"key-".to_vec();
            bytes.extend(["é", "ü", "😀", "\u{a0}"][rng.below(4)].as_bytes());
            let value = HeaderValue::from_bytes(&bytes).unwrap();
            case(
                "key: non-ASCII",
                w.api
                    .request(Method::POST, "/v1/jobs", Some(&w.token))
                    .header("Idempotency-Key", value)
                    .body(good_body(rng)),
                400,
                "idempotency_key_invalid",
            )
        }
        4 => {
            let inner = rng.text(6).replace(['"', '\\'], "x");
            let bad = [
                format!("\"{inner}"),
                format!("\"{inner}\\x\""),
                format!("\"{inner}\"{inner}"),
                "\"\"".to_owned(),
                format!("\"{inner}\"\""),
            ];
            let k = bad[rng.below(bad.len())].clone();
            case(
                "key: a quoted value that is no sf-string",
                post(w, Some(&k), good_body(rng)),
                400,
                "idempotency_key_invalid",
            )
        }
        5 => {
            let len = 1 + rng.below(40);
            case(
                "body: not JSON",
                post(w, Some(&key), format!("x{}", rng.text(len))),
                400,
                "invalid_json",
            )
        }
        6 => {
            let mut body = br#"{"kind":"summarize","input":{"text":"abc"#.to_vec();
            body.push([0xff, 0xc3, 0x80, 0xfe][rng.below(4)]);
            body.extend_from_slice(br#""}}"#);
            case(
                "body: invalid UTF-8",
                post(w, Some(&key), body),
                400,
                "invalid_json",
            )
        }
        7 => {
            let lone = ["\\ud800", "\\udfff", "\\ud83d x"][rng.below(3)];
            case(
                "body: lone surrogate",
                post(
                    w,
                    Some(&key),
                    format!(r#"{{"kind":"summarize","input":{{"text":"a{lone}"}}}}"#),
                ),
                400,
                "invalid_json",
            )
        }
        8 => {
            let depth = 33 + rng.below(968);
            case(
                "body: nested too deep",
                post(
                    w,
                    Some(&key),
                    format!(
                        r#"{{"kind":"summarize","input":{{"text":"x","d":{}1{}}}}}"#,
                        "[".repeat(depth),
                        "]".repeat(depth)
                    ),
                ),
                400,
                "invalid_json",
            )
        }
        9 => {
            let big = (1u64 << 53) + 1 + rng.below(1 << 20) as u64;
            case(
                "body: integer beyond 2^53",
                post(
                    w,
                    Some(&key),
                    format!(r#"{{"kind":"summarize","input":{{"text":"x","n":{big}}}}}"#),
                ),
                400,
                "invalid_json",
            )
        }
        10 => case(
            "body: duplicate members",
            post(
                w,
                Some(&key),
                r#"{"kind":"summarize","kind":"summarize","input":{"text":"x"}}"#,
            ),
            400,
            "invalid_json",
        ),
        11 => {
            let member = ["owner_id", "status", "result", "attempts"][rng.below(4)];
            case(
                "body: unknown member",
                post(
                    w,
                    Some(&key),
                    format!(r#"{{"kind":"summarize","input":{{"text":"x"}},"{member}":"x"}}"#),
                ),
                400,
                "invalid_json",
            )
        }
        12 => case(
            "header: no Idempotency-Key",
            post(w, None, good_body(rng)),
            400,
            "idempotency_key_missing",
        ),
        13 => case(
            "header: Idempotency-Key twice",
            post(w, Some(&key), good_body(rng)).header("Idempotency-Key", unique("k")),
            400,
            "idempotency_key_invalid",
        ),
        14 => case(
            "header: Authorization of another scheme",
            w.api
                .request(Method::GET, &format!("/v1/jobs/{}", w.theirs), None)
                .header("Authorization", format!("Basic {}", rng.text(16))),
            401,
            "unauthorized",
        ),
        15 => {
            let mut forged = w.token.clone();
            let last = forged.pop().unwrap();
            forged.push(if last == 'A' { 'B' } else { 'A' });
            case(
                "token: forged signature",
                w.api.get(&forged, &format!("/v1/jobs/{}", w.theirs)),
                401,
                "unauthorized",
            )
        }
        16 => {
            let expired = auth::mint_with(&w.api.secret, &w.owner, false, -60).unwrap();
            case(
                "token: expired",
                w.api.get(&expired, &format!("/v1/jobs/{}", w.theirs)),
                401,
                "unauthorized",
            )
        }
        17 => {
            let none = format!(
                "{}.{}.",
                base64_url(r#"{"alg":"none","typ":"JWT"}"#),
                base64_url(&format!(r#"{{"sub":"{}","exp":9999999999}}"#, w.owner))
            );
            case(
                "token: alg none",
                w.api.get(&none, &format!("/v1/jobs/{}", w.theirs)),
                401,
                "unauthorized",
            )
        }
        18 => {
            let other = auth::mint(&"s".repeat(64), &w.owner, false, 600).unwrap();
            case(
                "token: another secret's",
                w.api.get(&other, &format!("/v1/jobs/{}", w.theirs)),
                401,
                "unauthorized",
            )
        }
        19 => {
            let len = 2_000 + rng.below(6_000);
            case(
                "token: huge",
                w.api.get(&rng.text(len), &format!("/v1/jobs/{}", w.theirs)),
                401,
                "unauthorized",
            )
        }
        20 => {
            let (method, path) = [
                (Method::GET, format!("/v1/jobs/{}", w.theirs)),
                (Method::POST, format!("/v1/jobs/{}/cancel", w.theirs)),
                (Method::POST, format!("/v1/jobs/{}/attempts", w.theirs)),
                (Method::GET, format!("/v1/jobs/{}/events", w.theirs)),
            ][rng.below(4)]
            .clone();
            case(
                "token: another owner's job",
                w.api
                    .request(method, &path, Some(&w.token))
                    .header("Content-Type", "application/json")
                    .body("{}"),
                404,
                "not_found",
            )
        }
        21 => {
            // `/v1/jobs` takes GET (the list) and POST; the lists and figures take GET only.
            let (method, path) = [
                (Method::PUT, "/v1/jobs"),
                (Method::DELETE, "/v1/jobs"),
                (Method::PATCH, "/v1/jobs"),
                (Method::POST, "/v1/attempts"),
                (Method::POST, "/v1/stats"),
            ][rng.below(5)]
            .clone();
            case(
                "route: wrong method",
                w.api.request(method, path, Some(&w.token)),
                405,
                "method_not_allowed",
            )
        }
        22 => {
            let path = [
                format!(
                    "/v1/jobs/{}/x/y",
                    rng.text(3).replace(['/', '?', '#', '%'], "x")
                ),
                "/v2/jobs".to_owned(),
                "/v1//jobs".to_owned(),
                "/v1/job".to_owned(),
                format!("/{}", rng.text(5).replace(['/', '?', '#', '%'], "x")),
            ][rng.below(5)]
            .clone();
            case(
                "route: no such path",
                w.api.request(Method::GET, &path, Some(&w.token)),
                404,
                "not_found",
            )
        }
        23 => {
            // serde reads a struct from an array of its fields: this once made a job.
            let body = json!(["summarize", {"text": format!("array {}", rng.text(8))}]);
            case(
                "body: a JSON array",
                post(w, Some(&key), body.to_string()),
                400,
                "invalid_json",
            )
        }
        _ => {
            let raw = rng.text(10).replace(['/', '?', '#', '%'], "x");
            case(
                "route: an id that does not parse",
                w.api.get(&w.token, &format!("/v1/jobs/{raw}")),
                404,
                "not_found",
            )
        }
    }
}

/// `POST /v1/jobs/{id}/attempts` (the fallback button) on the owner's failed job. The
/// handler reads the key first, then the body, then the job (`edge/src/attempts.rs`,
/// `create`), so each class answers the same whatever else the request carries.
fn fallback_case(class: usize, rng: &mut Rng, w: &World) -> Case {
    let click = |key: Option<HeaderValue>, body: reqwest::Body| {
        let rb = w
            .api
            .request(
                Method::POST,
                &format!("/v1/jobs/{}/attempts", w.failed),
                Some(&w.token),
            )
            .header("Content-Type", "application/json")
            .body(body);
        match key {
            Some(k) => rb.header("Idempotency-Key", k),
            None => rb,
        }
    };
    // The key is optional on this route: the body's classes go with and without one.
    let key = [
        None,
        Some(HeaderValue::from_str(&unique("bad-gen-click")).unwrap()),
    ][rng.below(2)]
    .clone();
    match class {
        0 => {
            let body = rng.pick(&[
                r#"{"provider":"fallback"}"#,
                r#"{"provider":"primary"}"#,
                "{}",
                "",
            ]);
            case(
                "fallback: bad key",
                click(Some(bad_key(rng)), body.into()),
                400,
                "idempotency_key_invalid",
            )
        }
        1 => case(
            "fallback: body not JSON",
            click(key, not_json(rng).into()),
            400,
            "invalid_json",
        ),
        2 => case(
            "fallback: body invalid UTF-8",
            click(
                key,
                invalid_utf8(rng, r#"{"provider":"fall|back"}"#, "|").into(),
            ),
            400,
            "invalid_json",
        ),
        3 => {
            let member = rng.pick(&["kind", "input", "job_id", "Provider", "if_match"]);
            case(
                "fallback: unknown member",
                click(
                    key,
                    format!(r#"{{"provider":"fallback","{member}":"x"}}"#).into(),
                ),
                400,
                "invalid_json",
            )
        }
        4 => {
            let body = rng.pick(&[
                r#"{"provider":1}"#,
                r#"{"provider":true}"#,
                r#"{"provider":["fallback"]}"#,
                r#"{"provider":{}}"#,
                r#""fallback""#,
                "5",
                "null",
                "[1]",
                r#"["fallback","primary"]"#,
            ]);
            case(
                "fallback: wrong types",
                click(key, body.into()),
                400,
                "invalid_json",
            )
        }
        5 => {
            // serde reads a struct from an array of its fields: `["fallback"]` once made
            // an attempt.
            let body = rng.pick(&["[]", r#"["fallback"]"#, "[null]"]);
            case(
                "fallback: body a JSON array",
                click(key, body.into()),
                400,
                "invalid_json",
            )
        }
        _ => {
            let provider = rng.pick(&["nope", "Fallback", "primary ", "", "openai"]);
            case(
                "fallback: unknown provider",
                click(key, json!({ "provider": provider }).to_string().into()),
                422,
                "unknown_provider",
            )
        }
    }
}

/// `POST /v1/jobs/{id}/cancel`. The route reads neither key nor body
/// (`edge/src/jobs.rs`, `cancel`), so garbage in both must change nothing: a succeeded
/// job stays succeeded (409), a cancelled one is answered again (200, no new event).
fn cancel_case(class: usize, rng: &mut Rng, w: &World) -> Case {
    let (class, job, status, code) = match class {
        0 => (
            "cancel: bad key and body, job succeeded",
            &w.succeeded,
            409,
            "job_finished",
        ),
        _ => (
            "cancel: bad key and body, job cancelled",
            &w.cancelled,
            200,
            "",
        ),
    };
    let body: reqwest::Body = match rng.below(2) {
        0 => not_json(rng).into(),
        _ => invalid_utf8(rng, r#"{"reason":"a|b"}"#, "|").into(),
    };
    let request = w
        .api
        .request(
            Method::POST,
            &format!("/v1/jobs/{job}/cancel"),
            Some(&w.token),
        )
        .header("Idempotency-Key", bad_key(rng))
        .header("Content-Type", "application/json")
        .body(body);
    case(class, request, status, code)
}

/// `POST /v1/attempts/{id}/resolve` (admin), mostly on the `unknown` attempt. The
/// handler reads the body before it looks at the attempt; only then come the checks of
/// the attempt's state, of a missing result and of the kind's contract
/// (`edge/src/attempts.rs`, `resolve`).
fn resolve_case(class: usize, rng: &mut Rng, w: &World) -> Case {
    let resolve = |attempt: &str, token: &str, body: reqwest::Body| {
        w.api
            .request(
                Method::POST,
                &format!("/v1/attempts/{attempt}/resolve"),
                Some(token),
            )
            .header("Content-Type", "application/json")
            .body(body)
    };
    let on_unknown = |body: reqwest::Body| resolve(&w.unknown_attempt, &w.admin, body);
    match class {
        0 => case(
            "resolve: body not JSON",
            on_unknown(not_json(rng).into()),
            400,
            "invalid_json",
        ),
        1 => {
            let json = rng.pick(&[
                r#"{"outcome":"fail|ed"}"#,
                r#"{"outcome":"succeeded","result":{"summary":"a|b","sentiment":"neutral"}}"#,
            ]);
            case(
                "resolve: body invalid UTF-8",
                on_unknown(invalid_utf8(rng, json, "|").into()),
                400,
                "invalid_json",
            )
        }
        2 => {
            let member = rng.pick(&["reason", "error", "job_id", "state", "Outcome"]);
            case(
                "resolve: unknown member",
                on_unknown(format!(r#"{{"outcome":"failed","{member}":"x"}}"#).into()),
                400,
                "invalid_json",
            )
        }
        3 => {
            // Not `["failed"]` or `{"outcome":{"failed":null}}`: serde reads those as a
            // valid resolution.
            let body = rng.pick(&[
                r#"{"outcome":1}"#,
                r#"{"outcome":true}"#,
                r#"{"outcome":null}"#,
                r#"{"outcome":["failed"]}"#,
                r#"{"outcome":{}}"#,
                r#"{}"#,
                "",
                r#""failed""#,
                "5",
                "null",
                "[1]",
            ]);
            case(
                "resolve: wrong types or no outcome",
                on_unknown(body.into()),
                400,
                "invalid_json",
            )
        }
        4 => {
            let outcome = rng.pick(&[
                "unknown",
                "superseded",
                "Failed",
                "FAILED",
                "",
                "succeeded ",
                "resolved",
            ]);
            case(
                "resolve: outcome not one of the three",
                on_unknown(json!({ "outcome": outcome }).to_string().into()),
                400,
                "invalid_json",
            )
        }
        5 => {
            let body = rng.pick(&[
                r#"{"outcome":"succeeded"}"#,
                r#"{"outcome":"succeeded","result":null}"#,
            ]);
            case(
                "resolve: succeeded without a result",
                on_unknown(body.into()),
                400,
                "invalid_json",
            )
        }
        6 => {
            let long = "y".repeat(401 + rng.below(100));
            let results = [
                json!({"summary": "x"}),
                json!({"summary": "x", "sentiment": "angry"}),
                json!({"summary": "x", "sentiment": "neutral", "confidence": 0.5}),
                // Breaks the rule `shorter_than`: no shorter than the input text.
                json!({"summary": format!("{}!", w.unknown_text), "sentiment": "neutral"}),
                json!({"summary": long, "sentiment": "neutral"}),
                json!({"summary": 5, "sentiment": "neutral"}),
                json!({}),
            ];
            let result = rng.pick(&results);
            case(
                "resolve: result breaks the kind's contract",
                on_unknown(
                    json!({"outcome": "succeeded", "result": result})
                        .to_string()
                        .into(),
                ),
                422,
                "contract_violation",
            )
        }
        9 => {
            // serde reads a struct from an array of its fields: `["failed"]` once
            // resolved the attempt.
            let body = rng.pick(&[
                r#"["failed"]"#,
                r#"["cancelled"]"#,
                r#"["succeeded",{"summary":"x","sentiment":"neutral"}]"#,
                "[]",
            ]);
            case(
                "resolve: body a JSON array",
                on_unknown(body.into()),
                400,
                "invalid_json",
            )
        }
        10 => {
            // A unit variant read from a map: `{"failed": null}` once meant `failed`.
            let body = rng.pick(&[
                r#"{"outcome":{"failed":null}}"#,
                r#"{"outcome":{"cancelled":[]}}"#,
                r#"{"outcome":["failed"]}"#,
            ]);
            case(
                "resolve: outcome not a string",
                on_unknown(body.into()),
                400,
                "invalid_json",
            )
        }
        11 => {
            let outcome = rng.pick(&["failed", "cancelled", "succeeded"]);
            // A string is a text kind's result: for this JSON kind, a contract violation
            // (the case below), not a request that does not parse.
            let result = rng.pick(&[json!(5), json!([]), json!(true), json!(1.5)]);
            case(
                "resolve: result neither an object nor a string",
                on_unknown(
                    json!({"outcome": outcome, "result": result})
                        .to_string()
                        .into(),
                ),
                400,
                "invalid_json",
            )
        }
        7 => case(
            "resolve: not an admin",
            resolve(&w.unknown_attempt, &w.token, good_resolution(rng).into()),
            403,
            "forbidden",
        ),
        _ => case(
            "resolve: attempt not unknown",
            resolve(&w.failed_attempt, &w.admin, good_resolution(rng).into()),
            409,
            "attempt_not_unknown",
        ),
    }
}

/// A resolution the contract takes (it would write, were it let through).
fn good_resolution(rng: &mut Rng) -> String {
    rng.pick(&[
        r#"{"outcome":"failed"}"#,
        r#"{"outcome":"cancelled"}"#,
        r#"{"outcome":"succeeded","result":{"summary":"ok","sentiment":"neutral"}}"#,
    ])
    .to_owned()
}

/// The bytes no header value may carry unescaped: 0x00–0x1F but tab, and 0x7F.
fn control_bytes() -> impl Iterator<Item = u8> {
    (0x00..=0x1f).filter(|b| *b != b'\t').chain([0x7f])
}

/// One hand-written request per control byte and route that reads the key (create, and
/// the fallback click on the owner's failed job), each with a body that would write if
/// the key were taken. The byte sits inside the key, never at an end, and the key is
/// not the last header, so that a parser taking a bare LF as a line end still sees a
/// broken header line rather than a clean request with a shorter key.
///
/// What answers depends on who reads the byte first. RFC 9110 §5.5: a recipient of CR,
/// LF or NUL in a field value must reject the message or replace the byte with a space;
/// other control bytes it may keep. So the dev server may answer 400 itself, or hand
/// the request on and the Worker answers `400 idempotency_key_invalid` (a space, or the
/// byte kept, is outside 0x21–0x7E). Either is a 4xx. For NUL, CR and LF, which break
/// the framing, a server may also just close the connection: nothing was accepted and
/// nothing written, so that is taken too. A 5xx never is.
async fn send_raw_cases(w: &World) -> Vec<(u8, &'static str, Option<(u16, String)>)> {
    let auth = format!("Bearer {}", w.token);
    let fallback_path = format!("/v1/jobs/{}/attempts", w.failed);
    let mut cases = Vec::new();
    for byte in control_bytes() {
        for (route, path, body) in [
            (
                "create",
                "/v1/jobs",
                json!({"kind": "summarize", "input": {"text": format!("raw {byte}")}}).to_string(),
            ),
            (
                "fallback",
                fallback_path.as_str(),
                r#"{"provider":"fallback"}"#.to_owned(),
            ),
        ] {
            let mut key = b"ctl".to_vec();
            key.push(byte);
            key.extend_from_slice(unique("raw").as_bytes());
            cases.push((byte, route, path.to_owned(), key, body));
        }
    }
    futures::stream::iter(cases)
        .map(|(byte, route, path, key, body)| {
            let auth = auth.clone();
            async move {
                let headers: [(&str, &[u8]); 3] = [
                    ("Authorization", auth.as_bytes()),
                    ("Idempotency-Key", &key),
                    ("Content-Type", b"application/json"),
                ];
                let answer = w
                    .api
                    .send_raw("POST", &path, &headers, body.as_bytes())
                    .await;
                (byte, route, answer)
            }
        })
        .buffer_unordered(AT_ONCE)
        .collect()
        .await
}

/// Unpadded base64url, as a JWT writes its parts.
fn base64_url(text: &str) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = text.as_bytes();
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n =
            chunk.iter().fold(0u32, |acc, b| acc << 8 | u32::from(*b)) << (8 * (3 - chunk.len()));
        for i in 0..=chunk.len() {
            out.push(char::from(ABC[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

fn panics_in_log() -> usize {
    let path = std::env::var("ONCECLICK_WRANGLER_LOG").expect("ONCECLICK_WRANGLER_LOG");
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter(|l| l.contains("panicked") || l.contains("RuntimeError: unreachable"))
        .count()
}

/// A `summarize` job of `token`'s whose primary call answers 400 (not retryable: no
/// failover), once it has failed.
async fn failed_job(api: &Api, mock: &Mock, token: &str, prefix: &str) -> Value {
    let marker = unique(prefix);
    mock.script("primary", &marker, json!([{"status": 400}]))
        .await;
    let job = api
        .create_job(token, "summarize", &marked_text(&marker), None)
        .await;
    api.wait_job(token, &id(&job), status_is("failed")).await
}

/// The owner, another owner, and the jobs the bad input aims at, each in its final
/// state (`unknown` for the one whose attempt is).
async fn setup(api: &Api) -> World {
    let foreign = db::job_ids();
    let mock = Mock::from_env();
    // Certified, so that a fallback click that slipped through would really add an
    // attempt (and not stop at `provider_not_certified`).
    api.ensure_certified("fallback").await;
    let owner = unique("bad-gen-owner");
    let token = api.token(&owner);
    let their_token = api.token(&unique("bad-gen-them"));
    let theirs = id(&failed_job(api, &mock, &their_token, "bad-gen-theirs").await);
    let failed = failed_job(api, &mock, &token, "bad-gen-failed").await;
    let to_cancel = id(&failed_job(api, &mock, &token, "bad-gen-cancelled").await);
    let cancelled = send(api.request(
        Method::POST,
        &format!("/v1/jobs/{to_cancel}/cancel"),
        Some(&token),
    ))
    .await;
    assert_eq!(
        cancelled.json()["status"],
        "cancelled",
        "{}",
        cancelled.text
    );
    let succeeded = api
        .create_job(
            &token,
            "summarize",
            &marked_text(&unique("bad-gen-ok")),
            None,
        )
        .await;
    api.wait_job(&token, &id(&succeeded), status_is("succeeded"))
        .await;
    // A 504 leaves the attempt `unknown` at once (tests/tests/faults.rs).
    let marker = unique("bad-gen-unknown");
    mock.script("primary", &marker, json!([{"status": 504}]))
        .await;
    let unknown_text = marked_text(&marker);
    let unknown = api
        .create_job(&token, "summarize", &unknown_text, None)
        .await;
    let unknown = api
        .wait_job(&token, &id(&unknown), status_is("unknown"))
        .await;
    let repeat_key = unique("bad-gen-repeat");
    let repeat_body =
        json!({"kind": "summarize", "input": {"text": marked_text(&repeat_key)}}).to_string();
    let made = send(api.create(&token, Some(&repeat_key), &repeat_body)).await;
    assert_eq!(made.status, 201, "{}", made.text);
    let repeated = id(&made.json());
    api.wait_job(&token, &repeated, status_is("succeeded"))
        .await;
    World {
        api: api.clone(),
        owner,
        admin: api.admin_token(&unique("bad-gen-admin")),
        token,
        theirs,
        their_token,
        failed_attempt: id(&failed["attempts"][0]),
        failed: id(&failed),
        succeeded: id(&succeeded),
        cancelled: to_cancel,
        unknown_attempt: id(&unknown["attempts"][0]),
        unknown_job: id(&unknown),
        unknown_text,
        repeat_key,
        repeat_body,
        repeated,
        foreign,
    }
}

/// The whole database once it has settled: no attempt of the setup jobs `starting` or
/// `running`, and no row changed for 2 s — so that nothing a dispatcher is still
/// finishing for the setup lands during a batch and reads as a write (the rows of jobs
/// left over from an earlier test binary are not compared at all: [`changed`]). A result delayed in the queue for longer than that
/// could still land; none of the setup jobs leaves one.
async fn settled(w: &World) -> Vec<String> {
    let jobs = [
        &w.theirs,
        &w.failed,
        &w.succeeded,
        &w.cancelled,
        &w.unknown_job,
        &w.repeated,
    ];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut last = db::snapshot();
    let mut quiet_since = std::time::Instant::now();
    loop {
        let in_flight: i64 = jobs
            .iter()
            .map(|j| {
                db::count(
                    "SELECT count(*) FROM attempts
                      WHERE job_id = ?1 AND state IN ('starting', 'running')",
                    j,
                )
            })
            .sum();
        let now = db::snapshot();
        if !changed(w, &last, &now).is_empty() || in_flight > 0 {
            quiet_since = std::time::Instant::now();
        }
        if quiet_since.elapsed() >= std::time::Duration::from_secs(2) {
            return now;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the database did not settle in 60 s ({in_flight} setup attempts in flight): {:#?}",
            changed(w, &last, &now)
        );
        last = now;
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// The rows only `before` has (`-`) and only `after` has (`+`), but those of the jobs
/// in `w.foreign`: jobs of earlier test binaries, one of which may still be finishing
/// (a dispatch sent again after its attempt sat `starting`, say), which is no write of
/// this test's requests.
fn changed(w: &World, before: &[String], after: &[String]) -> Vec<String> {
    let ours = |rows: &[String]| -> BTreeSet<String> {
        rows.iter()
            .filter(|row| !db::names_any(row, &w.foreign))
            .cloned()
            .collect()
    };
    let (b, a) = (ours(before), ours(after));
    b.difference(&a)
        .map(|row| format!("- {row}"))
        .chain(a.difference(&b).map(|row| format!("+ {row}")))
        .collect()
}

/// What one request got, against what its class expects.
struct Outcome {
    class: &'static str,
    /// `None`: the connection closed without an answer (hand-written requests only).
    status: Option<u16>,
    /// Why the answer is not the one the class expects.
    wrong: Option<String>,
}

fn code_of(body: &str) -> String {
    let json = body
        .find('{')
        .zip(body.rfind('}'))
        .and_then(|(from, to)| body.get(from..=to))
        .unwrap_or_default();
    serde_json::from_str::<Value>(json)
        .ok()
        .and_then(|v| v["code"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

#[tokio::test]
async fn generated_bad_input_gets_its_code_never_a_5xx_and_writes_nothing() {
    let api = Api::from_env();
    let seed: u64 = std::env::var("ONCECLICK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
                | 1
        });
    println!("bad input seed: {seed} (ONCECLICK_SEED={seed} replays it)");
    let world = setup(&api).await;
    // Their job's rows are in the snapshot; its ETag is what its owner would see.
    let their_etag = send(api.get(&world.their_token, &format!("/v1/jobs/{}", world.theirs)))
        .await
        .header("etag")
        .map(str::to_owned);
    let before = settled(&world).await;
    let figures_before = db::figures();
    let panics_before = panics_in_log();
    let started = std::time::Instant::now();

    // The generated batch, over reqwest.
    let mut rng = Rng(seed);
    let cases: Vec<Case> = (0..REQUESTS).map(|_| generate(&mut rng, &world)).collect();
    let mut outcomes: Vec<Outcome> = futures::stream::iter(cases)
        .map(|c| async move {
            let reply = send(c.request).await;
            let code = code_of(&reply.text);
            let wrong = ((reply.status, code.as_str()) != (c.status, c.code)).then(|| {
                format!(
                    "{}: expected {} {}, got {} {code:?}",
                    c.class, c.status, c.code, reply.status
                )
            });
            Outcome {
                class: c.class,
                status: Some(reply.status),
                wrong,
            }
        })
        .buffer_unordered(AT_ONCE)
        .collect()
        .await;
    let after_generated = db::snapshot();

    // The hand-written batch: a control byte in the key.
    let mut raw_answers = BTreeMap::new();
    for (byte, route, answer) in send_raw_cases(&world).await {
        let name = format!("0x{byte:02x} {route}");
        // NUL, CR and LF break the framing: closing without an answer is taken too.
        let may_close = matches!(byte, 0x00 | b'\n' | b'\r');
        let (seen, wrong) = match &answer {
            Some((status, body)) => (
                format!("{status} {}", code_of(body)),
                !(400..500).contains(status),
            ),
            None => ("closed".to_owned(), !may_close),
        };
        outcomes.push(Outcome {
            class: RAW_CLASS,
            status: answer.as_ref().map(|(s, _)| *s),
            wrong: wrong.then(|| format!("{RAW_CLASS} {name}: expected a 4xx, got {seen}")),
        });
        raw_answers.insert(name, seen);
    }
    let after_raw = db::snapshot();
    let figures_after_bad_input = db::figures();

    let mut per_class: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for o in &outcomes {
        let entry = per_class.entry(o.class).or_default();
        entry.0 += 1;
        entry.1 += usize::from(o.wrong.is_some());
    }
    let wrong: Vec<&String> = outcomes
        .iter()
        .filter_map(|o| o.wrong.as_ref())
        .take(10)
        .collect();
    let server_errors = outcomes
        .iter()
        .filter(|o| o.status.is_some_and(|s| s >= 500))
        .count();
    let written_generated = changed(&world, &before, &after_generated);
    let written_raw = changed(&world, &after_generated, &after_raw);
    let their_etag_after = send(api.get(&world.their_token, &format!("/v1/jobs/{}", world.theirs)))
        .await
        .header("etag")
        .map(str::to_owned);
    let panics = panics_in_log() - panics_before;
    let violations: usize = per_class.values().map(|(_, bad)| bad).sum();

    report::write(
        "bad_input",
        &json!({
            "seed": seed, "requests": outcomes.len(), "classes": per_class.len(),
            "per_class": per_class.iter().map(|(k, (n, bad))| (k.to_string(), json!({"sent": n, "wrong": bad}))).collect::<serde_json::Map<_, _>>(),
            "control_bytes": raw_answers,
            "server_errors": server_errors, "wrong_answers": violations, "panics": panics,
            "rows_in_database": before.len(),
            "rows_written": written_generated.len() + written_raw.len(),
            "seconds": started.elapsed().as_secs_f64(),
        }),
    );
    assert!(wrong.is_empty(), "seed {seed}: {wrong:#?}");
    assert_eq!(server_errors, 0, "seed {seed}: no 5xx");
    assert_eq!(panics, 0, "seed {seed}: the Worker never panicked");
    assert!(
        written_generated.is_empty(),
        "seed {seed}: the generated requests changed rows (owner {}): {:#?}",
        world.owner,
        &written_generated[..written_generated.len().min(20)]
    );
    assert!(
        written_raw.is_empty(),
        "the hand-written requests changed rows (owner {}): {:#?}",
        world.owner,
        &written_raw[..written_raw.len().min(20)]
    );
    assert_eq!(their_etag_after, their_etag, "their job is untouched");
    // Bad input never reaches the create's batch: not even the figures moved.
    assert_eq!(
        figures_after_bad_input, figures_before,
        "bad input changed the figures' counters"
    );
    assert!(outcomes.len() >= REQUESTS);
    assert_eq!(
        per_class.len(),
        GENERATED + 1,
        "every class was drawn: {per_class:?}"
    );

    // Refused and replayed creates that reach the store: a conflict (the key with another
    // body) and a replay write only the figures' counters, which count them.
    let figures = |metric: &str| {
        db::count(
            &format!(
                "SELECT coalesce(sum(n), 0) FROM {} WHERE metric = ?1",
                db::FIGURES_TABLE
            ),
            metric,
        )
    };
    let (conflicts_before, replays_before) = (figures("conflicts"), figures("replays"));
    let other_body = json!({"kind": "summarize", "input": {"text": "another body"}}).to_string();
    for _ in 0..3 {
        let conflict = send(api.create(&world.token, Some(&world.repeat_key), &other_body)).await;
        assert_eq!(conflict.status, 409, "{}", conflict.text);
        let replay =
            send(api.create(&world.token, Some(&world.repeat_key), &world.repeat_body)).await;
        assert_eq!(replay.status, 200, "{}", replay.text);
    }
    let after_repeats = db::snapshot();
    let written_repeats = changed(&world, &after_raw, &after_repeats);
    assert!(
        written_repeats.is_empty(),
        "a conflict or a replay changed rows besides {}: {written_repeats:#?}",
        db::FIGURES_TABLE
    );
    assert_eq!(
        figures("conflicts") - conflicts_before,
        3,
        "each conflict counted"
    );
    assert_eq!(
        figures("replays") - replays_before,
        3,
        "each replay counted"
    );
}
