//! Tokens from an identity provider (`tests/src/idp.rs`, a real JWKS server on
//! 127.0.0.1) against the real Worker: RS256 and ES256 verified with WebCrypto, the
//! claims checked, the owner and admin rule as configured (`uid`, `groups`), keys
//! rotated, a flood of unknown `kid`s costing at most one fetch per interval, and a key
//! set that cannot be fetched answering 503, and a burst of requests during a slow fetch
//! all waiting for that one fetch.
//!
//! One test, in steps: the identity provider's keys are shared state, and a rotation
//! must not pull keys from under a test running beside it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use onceclick_tests::client::{id, marked_text, send, unique, Api};
use serde_json::{json, Value};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

struct Idp {
    url: String,
    http: reqwest::Client,
    issuer: String,
    audience: String,
}

impl Idp {
    fn from_env() -> Self {
        let var = |name: &str| {
            std::env::var(name)
                .unwrap_or_else(|_| panic!("{name} is not set: run with `cargo xtask test`"))
        };
        Self {
            url: var("ONCECLICK_IDP_URL"),
            http: reqwest::Client::new(),
            issuer: var("ONCECLICK_JWT_ISSUER"),
            audience: var("ONCECLICK_JWT_AUDIENCE"),
        }
    }

    /// Claims that pass: the configured issuer and audience, `uid` = `owner`, an hour left.
    fn claims(&self, owner: &str) -> Value {
        json!({"iss": self.issuer, "aud": self.audience, "uid": owner, "exp": now() + 3600})
    }

    /// A token from the provider; `kid` overrides the header's (`Some("")`: none at all).
    async fn sign(&self, alg: &str, claims: &Value, key: &str, kid: Option<&str>) -> String {
        let mut body = json!({"alg": alg, "claims": claims, "key": key});
        match kid {
            Some("") => body["no_kid"] = json!(true),
            Some(kid) => body["kid"] = json!(kid),
            None => {}
        }
        let reply = self
            .http
            .post(format!("{}/_sign", self.url))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(reply.status().is_success(), "sign: {}", reply.status());
        reply.json::<Value>().await.unwrap()["token"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    async fn post(&self, path: &str, body: Value) {
        let reply = self
            .http
            .post(format!("{}{path}", self.url))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(reply.status().is_success(), "{path}: {}", reply.status());
    }

    async fn fetches(&self) -> u64 {
        let reply = self
            .http
            .get(format!("{}/_fetches", self.url))
            .send()
            .await
            .unwrap();
        reply.json::<Value>().await.unwrap()["count"]
            .as_u64()
            .unwrap()
    }
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// `GET /v1/jobs` with `token`: its status, and its problem code when it failed.
async fn list(api: &Api, token: &str) -> (u16, String) {
    let reply = send(api.get(token, "/v1/jobs?limit=1")).await;
    let code = if reply.status == 200 {
        String::new()
    } else {
        reply.problem_code()
    };
    (reply.status, code)
}

/// Sends `GET /v1/jobs` with `token` until it answers `status`, for at most 15 s.
async fn until(api: &Api, token: &str, status: u16) -> (u16, String) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let got = list(api, token).await;
        if got.0 == status || Instant::now() > deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn tokens_from_the_identity_provider() {
    let (api, idp) = (Api::from_env(), Idp::from_env());

    // RS256 and ES256 both verify; the owner is the `uid` claim, not `sub`.
    for alg in ["RS256", "ES256"] {
        let owner = unique(&format!("idp-{alg}"));
        let mut claims = idp.claims(&owner);
        claims["sub"] = json!("not-the-owner");
        let token = idp.sign(alg, &claims, "current", None).await;
        let job = api
            .create_job(&token, "summarize", &marked_text(&unique("idp")), None)
            .await;
        let page = send(api.get(&token, "/v1/jobs")).await.json();
        assert_eq!(page["items"][0]["id"], id(&job).as_str(), "{alg}");
        assert_eq!(
            page["items"][0]["owner_id"],
            owner.as_str(),
            "{alg}: the owner is uid"
        );
    }

    // Every claim is checked, with a minute of leeway on the clock.
    let owner = unique("idp-claims");
    let base = idp.claims(&owner);
    let with = |changes: Value| {
        let mut c = base.clone();
        for (k, v) in changes.as_object().unwrap() {
            if v.is_null() {
                c.as_object_mut().unwrap().remove(k);
            } else {
                c[k] = v.clone();
            }
        }
        c
    };
    let cases = [
        (
            "another issuer",
            with(json!({"iss": "https://evil.example"})),
            401,
        ),
        ("no issuer", with(json!({"iss": null})), 401),
        (
            "another audience",
            with(json!({"aud": "someone-else"})),
            401,
        ),
        (
            "the audience in a list",
            with(json!({"aud": ["x", idp.audience]})),
            200,
        ),
        (
            "expired two minutes ago",
            with(json!({"exp": now() - 120})),
            401,
        ),
        (
            "expired within the leeway",
            with(json!({"exp": now() - 20})),
            200,
        ),
        ("no exp", with(json!({"exp": null})), 401),
        (
            "not valid for two more minutes",
            with(json!({"nbf": now() + 120})),
            401,
        ),
        (
            "nbf within the leeway",
            with(json!({"nbf": now() + 20})),
            200,
        ),
        ("no owner claim", with(json!({"uid": null})), 401),
        // `*` is the list's every-owner view, never an owner.
        ("an owner named *", with(json!({"uid": "*"})), 401),
        (
            "an owner of 129 characters",
            with(json!({"uid": "x".repeat(129)})),
            401,
        ),
    ];
    for (what, claims, want) in cases {
        for alg in ["RS256", "ES256"] {
            let token = idp.sign(alg, &claims, "current", None).await;
            let (status, code) = list(&api, &token).await;
            assert_eq!(status, want, "{what} ({alg}): {code}");
            if want == 401 {
                assert_eq!(code, "unauthorized", "{what}");
            }
        }
    }

    // A key the provider never published, under a published kid: the signature fails.
    let kid = Some("rs256-1");
    let forged = idp.sign("RS256", &base, "unpublished", kid).await;
    assert_eq!(list(&api, &forged).await, (401, "unauthorized".to_owned()));
    // A header naming the other algorithm's key: no key of the right type, refused.
    let crossed = idp.sign("RS256", &base, "current", Some("es256-1")).await;
    assert_eq!(list(&api, &crossed).await, (401, "unauthorized".to_owned()));
    // No kid at all: every key of the algorithm's type is tried.
    for alg in ["RS256", "ES256"] {
        let token = idp.sign(alg, &base, "current", Some("")).await;
        assert_eq!(list(&api, &token).await.0, 200, "{alg} without a kid");
    }
    // `alg: none`, and an HS256 token signed with something else than AUTH_SECRET (such
    // as a provider's public key): refused.
    let good = idp.sign("RS256", &base, "current", None).await;
    let payload = good.split('.').nth(1).unwrap();
    let none = format!("eyJhbGciOiJub25lIn0.{payload}.");
    assert_eq!(list(&api, &none).await, (401, "unauthorized".to_owned()));
    let hs =
        onceclick_tests::auth::mint("the provider's public key, say", "idp-hs", true, 600).unwrap();
    assert_eq!(list(&api, &hs).await, (401, "unauthorized".to_owned()));

    // The admin rule: `groups` holding the configured value.
    let mut admin = idp.claims("idp-admin");
    admin["groups"] = json!(["staff", "onceclick-admins"]);
    let mut plain = idp.claims("idp-plain");
    plain["groups"] = json!(["staff"]);
    for (claims, want) in [(admin, 200), (plain, 403)] {
        let token = idp.sign("ES256", &claims, "current", None).await;
        let reply = send(api.get(&token, "/v1/attempts")).await;
        assert_eq!(reply.status, want, "{}", reply.text);
    }
    // The local HS256 secret still works beside the provider.
    assert_eq!(list(&api, &api.token(&unique("hs256"))).await.0, 200);

    // Rotation: the new keys are fetched for their unknown kid; the withdrawn ones fail.
    let old_token = idp.sign("RS256", &base, "current", None).await;
    assert_eq!(list(&api, &old_token).await.0, 200);
    idp.post("/_rotate", json!({})).await;
    let new_token = idp.sign("RS256", &base, "current", None).await;
    assert_eq!(
        until(&api, &new_token, 200).await.0,
        200,
        "the rotated key is fetched and verifies"
    );
    let withdrawn = idp.sign("RS256", &base, "previous", None).await;
    assert_eq!(
        list(&api, &withdrawn).await,
        (401, "unauthorized".to_owned())
    );
    assert_eq!(
        list(&api, &old_token).await.0,
        401,
        "a token of the withdrawn key"
    );

    // A flood of made-up kids: at most one fetch per JWKS_REFETCH_MS (1 s here).
    let before = idp.fetches().await;
    let started = Instant::now();
    for i in 0..30 {
        let token = idp
            .sign("ES256", &base, "current", Some(&format!("made-up-{i}")))
            .await;
        assert_eq!(list(&api, &token).await.0, 401);
    }
    let fetched = idp.fetches().await - before;
    let allowed = started.elapsed().as_secs() + 1;
    assert!(
        fetched <= allowed,
        "{fetched} fetches in {:?} for 30 unknown kids",
        started.elapsed()
    );

    // A key set that cannot be fetched: 503, never a token let through unchecked.
    idp.post("/_fail", json!({"on": true})).await;
    idp.post("/_rotate", json!({})).await;
    let unseen = idp.sign("ES256", &base, "current", None).await;
    let (status, code) = until(&api, &unseen, 503).await;
    assert_eq!((status, code.as_str()), (503, "service_unavailable"));
    let reply = send(api.get(&unseen, "/v1/jobs")).await;
    assert!(reply.header("retry-after").is_some());
    // While it is down, a flood costs at most one fetch per interval too.
    let before = idp.fetches().await;
    let started = Instant::now();
    for _ in 0..20 {
        assert_eq!(list(&api, &unseen).await.0, 503);
    }
    let fetched = idp.fetches().await - before;
    assert!(
        fetched <= started.elapsed().as_secs() + 1,
        "{fetched} fetches while the provider was down"
    );
    idp.post("/_fail", json!({"on": false})).await;
    assert_eq!(
        until(&api, &unseen, 200).await.0,
        200,
        "fetched again once the provider is back"
    );

    // A key set that hangs: 503 after the fetch's time limit, not a request held forever.
    idp.post("/_hang", json!({"on": true})).await;
    idp.post("/_rotate", json!({})).await;
    let hung = idp.sign("ES256", &base, "current", None).await;
    let started = Instant::now();
    let (status, code) = until(&api, &hung, 503).await;
    assert_eq!((status, code.as_str()), (503, "service_unavailable"));
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "answered within the fetch's limit"
    );
    idp.post("/_hang", json!({"on": false})).await;
    assert_eq!(until(&api, &hung, 200).await.0, 200);

    // A burst that needs keys the isolate is fetching (a rotation, as on a cold
    // isolate): every request waits for the one fetch and passes; none gets a 401.
    idp.post("/_delay", json!({"ms": 1500})).await;
    idp.post("/_rotate", json!({})).await;
    let rotated = idp.sign("ES256", &base, "current", None).await;
    // Past JWKS_REFETCH_MS (1 s here) since the last fetch, so the burst may fetch.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let before = idp.fetches().await;
    let burst = (0..12).map(|_| list(&api, &rotated));
    let answers = futures::future::join_all(burst).await;
    let fetched = idp.fetches().await - before;
    idp.post("/_delay", json!({"ms": 0})).await;
    assert!(
        answers.iter().all(|(status, _)| *status == 200),
        "a burst during the fetch: {answers:?}"
    );
    assert_eq!(fetched, 1, "the burst cost one fetch");
}
