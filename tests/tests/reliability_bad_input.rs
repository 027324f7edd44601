//! Generated bad input: thousands of malformed requests, drawn at random (seeded; the
//! seed is printed, and `ONCECLICK_SEED` replays a run) from every class of mistake a
//! client can make — keys, bodies, headers, tokens, routes. Each must get exactly the
//! status and `code` the contract gives its class, none a 5xx, none may panic the
//! Worker, and none may change a row.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use futures::StreamExt;
use onceclick_tests::auth;
use onceclick_tests::client::{id, send, status_is, unique, Api};
use onceclick_tests::{db, report};
use reqwest::header::HeaderValue;
use reqwest::Method;
use serde_json::json;
use std::collections::BTreeMap;

const REQUESTS: usize = 5_000;
const AT_ONCE: usize = 16;

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
}

/// One generated request: its class, how to send it, and what the contract answers.
struct Case {
    class: &'static str,
    request: reqwest::RequestBuilder,
    status: u16,
    code: &'static str,
}

struct World {
    api: Api,
    owner: String,
    token: String,
    /// Another owner's job, which nothing here may touch.
    theirs: String,
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

fn generate(rng: &mut Rng, w: &World) -> Case {
    let key = unique("bad-gen-key");
    let case = |class, request, status, code| Case {
        class,
        request,
        status,
        code,
    };
    match rng.below(24) {
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
            let method =
                [Method::PUT, Method::DELETE, Method::PATCH, Method::GET][rng.below(4)].clone();
            case(
                "route: wrong method",
                w.api.request(method, "/v1/jobs", Some(&w.token)),
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
    let owner = unique("bad-gen-owner");
    let token = api.token(&owner);
    let them = unique("bad-gen-them");
    let their_token = api.token(&them);
    // Failed, so that a cancel or a fallback click that slipped past the owner check
    // would write something.
    let marker = unique("bad-gen-theirs");
    onceclick_tests::client::Mock::from_env()
        .script("primary", &marker, json!([{"status": 400}]))
        .await;
    let theirs = id(&api
        .create_job(
            &their_token,
            "summarize",
            &format!("{marker}: someone else's job."),
            None,
        )
        .await);
    api.wait_job(&their_token, &theirs, status_is("failed"))
        .await;
    let their_etag = send(api.get(&their_token, &format!("/v1/jobs/{theirs}")))
        .await
        .header("etag")
        .map(str::to_owned);
    let their_events = db::count("SELECT count(*) FROM job_events WHERE job_id = ?1", &theirs);
    let panics_before = panics_in_log();
    let started = std::time::Instant::now();

    let world = World {
        api: api.clone(),
        owner: owner.clone(),
        token,
        theirs: theirs.clone(),
    };
    let mut rng = Rng(seed);
    let cases: Vec<Case> = (0..REQUESTS).map(|_| generate(&mut rng, &world)).collect();
    let outcomes: Vec<(&'static str, u16, &'static str, u16, String)> =
        futures::stream::iter(cases)
            .map(|c| async move {
                let reply = send(c.request).await;
                let code = serde_json::from_str::<serde_json::Value>(&reply.text)
                    .ok()
                    .and_then(|v| v["code"].as_str().map(str::to_owned))
                    .unwrap_or_default();
                (c.class, c.status, c.code, reply.status, code)
            })
            .buffer_unordered(AT_ONCE)
            .collect()
            .await;

    let mut per_class: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut wrong = Vec::new();
    for (class, status, code, got_status, got_code) in &outcomes {
        let entry = per_class.entry(class).or_default();
        entry.0 += 1;
        if (*got_status, got_code.as_str()) != (*status, *code) {
            entry.1 += 1;
            if wrong.len() < 10 {
                wrong.push(format!(
                    "{class}: expected {status} {code}, got {got_status} {got_code:?}"
                ));
            }
        }
    }
    let server_errors = outcomes.iter().filter(|o| o.3 >= 500).count();
    let written = db::count("SELECT count(*) FROM jobs WHERE owner_id = ?1", &owner);
    let their_events_after =
        db::count("SELECT count(*) FROM job_events WHERE job_id = ?1", &theirs);
    let their_etag_after = send(api.get(&their_token, &format!("/v1/jobs/{theirs}")))
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
            "server_errors": server_errors, "wrong_answers": violations, "panics": panics,
            "rows_written": written + (their_events_after - their_events),
            "seconds": started.elapsed().as_secs_f64(),
        }),
    );
    assert!(wrong.is_empty(), "seed {seed}: {wrong:#?}");
    assert_eq!(server_errors, 0, "seed {seed}: no 5xx");
    assert_eq!(panics, 0, "seed {seed}: the Worker never panicked");
    assert_eq!(written, 0, "seed {seed}: no job was made");
    assert_eq!(their_events_after, their_events, "their job is untouched");
    assert_eq!(their_etag_after, their_etag);
    assert_eq!(per_class.len(), 24, "every class was drawn: {per_class:?}");
}
