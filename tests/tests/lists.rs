//! The list endpoints against the real Worker: an owner's own jobs newest first, an
//! admin's view of everyone's, the queue of `unknown` attempts, cursors that page
//! without gaps or repeats, and bad queries refused with `invalid_query`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use onceclick_tests::client::{id, marked_text, send, status_is, unique, Api, Mock};
use serde_json::{json, Value};

/// Every page of `path` (which has a query already or not), `limit` at a time.
async fn all_pages(api: &Api, token: &str, path: &str, limit: u32) -> (Vec<Value>, usize) {
    let sep = if path.contains('?') { '&' } else { '?' };
    let (mut items, mut pages, mut cursor) = (Vec::new(), 0, None::<String>);
    loop {
        let url = match &cursor {
            Some(c) => format!("{path}{sep}limit={limit}&cursor={c}"),
            None => format!("{path}{sep}limit={limit}"),
        };
        let reply = send(api.get(token, &url)).await;
        assert_eq!(reply.status, 200, "{url}: {}", reply.text);
        let page = reply.json();
        let got = page["items"].as_array().unwrap();
        assert!(got.len() <= limit as usize);
        items.extend(got.iter().cloned());
        pages += 1;
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => return (items, pages),
        }
        assert!(pages < 100, "the cursor never ends");
    }
}

fn ids(items: &[Value]) -> Vec<String> {
    items.iter().map(id).collect()
}

#[tokio::test]
async fn an_owner_pages_through_their_own_jobs_newest_first() {
    let api = Api::from_env();
    let owner = unique("lister");
    let token = api.token(&owner);
    let other = api.token(&unique("someone-else"));
    api.create_job(&other, "summarize", &marked_text(&unique("not-mine")), None)
        .await;
    let mut made = Vec::new();
    for i in 0..5 {
        let job = api
            .create_job(
                &token,
                "summarize",
                &marked_text(&unique(&format!("mine-{i}"))),
                None,
            )
            .await;
        made.push(id(&job));
    }
    let (items, pages) = all_pages(&api, &token, "/v1/jobs", 2).await;
    made.reverse();
    assert_eq!(ids(&items), made, "newest first, every job once, only mine");
    assert_eq!(pages, 3);
    for item in &items {
        assert_eq!(item["owner_id"], owner.as_str());
        assert!(item["input"]["text"].is_string(), "input is JSON: {item}");
        assert!(
            item.get("attempts").is_none(),
            "a list item has no attempts"
        );
    }

    // Asking for their own name is the same list; another owner's is refused.
    let (same, _) = all_pages(&api, &token, &format!("/v1/jobs?owner={owner}"), 50).await;
    assert_eq!(ids(&same), made);
    let refused = send(api.get(&token, "/v1/jobs?owner=someone-else")).await;
    assert_eq!(refused.status, 403);
    assert_eq!(refused.problem_code(), "forbidden");
}

#[tokio::test]
async fn an_owner_named_star_never_reaches_every_owners_jobs() {
    let api = Api::from_env();
    let other = api.token(&unique("star-victim"));
    let job = api
        .create_job(&other, "summarize", &marked_text(&unique("victim")), None)
        .await;
    let star = api.token("*");
    for path in [
        "/v1/jobs?owner=*",
        "/v1/jobs?owner=*&status=queued",
        "/v1/jobs",
    ] {
        let reply = send(api.get(&star, path)).await;
        assert_eq!(reply.status, 401, "{path}: {}", reply.text);
        assert_eq!(reply.problem_code(), "unauthorized", "{path}");
        assert!(
            !reply.text.contains(&id(&job)),
            "{path} showed another owner's job"
        );
    }
    // Nor can it make jobs under the reserved name.
    let body = json!({"kind": "summarize", "input": {"text": "star"}}).to_string();
    let made = send(api.create(&star, Some(&unique("star-key")), &body)).await;
    assert_eq!(made.status, 401, "{}", made.text);
}

#[tokio::test]
async fn a_status_filter_keeps_the_order_and_the_cursor() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    let owner = unique("filter");
    let token = api.token(&owner);
    let mut failed = Vec::new();
    for i in 0..3 {
        let marker = unique(&format!("fails-{i}"));
        mock.script("primary", &marker, json!([{"status": 400}]))
            .await;
        let job = api
            .create_job(&token, "summarize", &marked_text(&marker), None)
            .await;
        api.wait_job(&token, &id(&job), status_is("failed")).await;
        failed.push(id(&job));
        let ok = api
            .create_job(
                &token,
                "summarize",
                &marked_text(&unique(&format!("ok-{i}"))),
                None,
            )
            .await;
        api.wait_job(&token, &id(&ok), status_is("succeeded")).await;
    }
    failed.reverse();
    let (items, _) = all_pages(&api, &token, "/v1/jobs?status=failed", 2).await;
    assert_eq!(ids(&items), failed);
    assert!(items.iter().all(|j| j["status"] == "failed"));

    // An admin sees them by owner, and among every owner's failed jobs (`owner=*`); the
    // admin's own list is the admin's own jobs.
    let admin = api.admin_token("ops");
    let (own, _) = all_pages(&api, &admin, "/v1/jobs?status=failed", 200).await;
    assert!(
        own.iter().all(|j| j["owner_id"] == "ops"),
        "an admin's own list is their own"
    );
    let (by_owner, _) = all_pages(
        &api,
        &admin,
        &format!("/v1/jobs?owner={owner}&status=failed"),
        50,
    )
    .await;
    assert_eq!(ids(&by_owner), failed);
    let (everyone, _) = all_pages(&api, &admin, "/v1/jobs?owner=*&status=failed", 200).await;
    let everyone = ids(&everyone);
    assert!(failed.iter().all(|f| everyone.contains(f)));
    let mut sorted = everyone.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(everyone, sorted, "newest first across owners");
}

#[tokio::test]
async fn an_operator_finds_every_unknown_attempt_oldest_first() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    let token = api.token(&unique("stuck"));
    let admin = api.admin_token("ops");
    let mut stuck = Vec::new();
    for i in 0..3 {
        let marker = unique(&format!("hang-{i}"));
        mock.script("primary", &marker, json!([{"delay_ms": 30000}]))
            .await;
        let job = api
            .create_job(&token, "summarize", &marked_text(&marker), None)
            .await;
        let job = api.wait_job(&token, &id(&job), status_is("unknown")).await;
        stuck.push((id(&job["attempts"][0]), id(&job)));
    }
    let (items, _) = all_pages(&api, &admin, "/v1/attempts?provider=primary", 2).await;
    let listed = ids(&items);
    let positions: Vec<usize> = stuck
        .iter()
        .map(|(attempt, _)| listed.iter().position(|l| l == attempt).expect("listed"))
        .collect();
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "oldest first: {positions:?}"
    );
    let mut sorted = listed.clone();
    sorted.sort();
    assert_eq!(listed, sorted);
    let first = items.iter().find(|a| id(a) == stuck[0].0).unwrap();
    assert_eq!(first["state"], "unknown");
    assert_eq!(first["job_id"], stuck[0].1.as_str());
    assert_eq!(first["job_status"], "unknown");
    assert_eq!(first["provider"], "primary");
    assert!(first["owner_id"].as_str().unwrap().starts_with("stuck"));

    // Resolving one takes it off the queue.
    let resolved = send(api.post_json(
        &admin,
        &format!("/v1/attempts/{}/resolve", stuck[0].0),
        &json!({"outcome": "failed"}),
    ))
    .await;
    assert_eq!(resolved.status, 200, "{}", resolved.text);
    let (after, _) = all_pages(&api, &admin, "/v1/attempts", 200).await;
    let after = ids(&after);
    assert!(!after.contains(&stuck[0].0));
    assert!(after.contains(&stuck[1].0) && after.contains(&stuck[2].0));

    // An age no attempt has reached yet lists none of them.
    let (young, _) = all_pages(&api, &admin, "/v1/attempts?min_age_ms=86400000", 200).await;
    assert!(ids(&young)
        .iter()
        .all(|a| !stuck.iter().any(|(s, _)| s == a)));

    // Only an admin may list attempts.
    let refused = send(api.get(&token, "/v1/attempts")).await;
    assert_eq!(refused.status, 403);
}

#[tokio::test]
async fn a_bad_query_is_refused_with_invalid_query() {
    let api = Api::from_env();
    let token = api.token(&unique("bad-query"));
    let admin = api.admin_token("ops");
    for (token, path) in [
        (&token, "/v1/jobs?limit=0"),
        (&token, "/v1/jobs?limit=201"),
        (&token, "/v1/jobs?limit=ten"),
        (&token, "/v1/jobs?status=done"),
        (&token, "/v1/jobs?colour=red"),
        (&token, "/v1/jobs?limit=2&limit=3"),
        (&token, "/v1/jobs?cursor=job_0192"),
        (&token, "/v1/jobs?cursor=c1.7a7a"),
        (&admin, "/v1/attempts?state=stuck"),
        (&admin, "/v1/attempts?min_age_ms=-5"),
        (&admin, "/v1/attempts?cursor=c1.6a6f625f30"),
    ] {
        let reply = send(api.get(token, path)).await;
        assert_eq!(reply.status, 400, "{path}: {}", reply.text);
        assert_eq!(reply.problem_code(), "invalid_query", "{path}");
        assert_eq!(
            reply.header("content-type"),
            Some("application/problem+json"),
            "{path}"
        );
    }
}
