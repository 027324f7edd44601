//! The sharded store (`STORE=durable`, 8 shards in the test Worker) seen from outside:
//! jobs spread over every shard and each (owner, key) is bound in exactly one; the id
//! carries its shard, and every call after the create goes there alone; a create and a
//! replay make one call to their shard (`Server-Timing`); a job's attempts live with it;
//! the shards' own alarms do the reconciler's work with no cron.
//!
//! Against the D1 Worker these tests check what the same requests must show there
//! (ids of the single database, one `d1` round trip), so they run in both suites.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use onceclick_protocol::shard::{route_of_id, IdRoute, Shard};
use onceclick_tests::client::{id, marked_text, send, status_is, unique, Api, Mock};
use onceclick_tests::db;
use serde_json::json;
use std::collections::BTreeSet;

fn sharded() -> bool {
    std::env::var("ONCECLICK_STORE").is_ok_and(|s| s == "durable")
}

/// The shard an id names; on D1, that it is the database's.
fn shard_of(id: &str) -> Option<Shard> {
    match route_of_id(id) {
        IdRoute::Shard(shard) => {
            assert!(sharded(), "a sharded id from the D1 Worker: {id}");
            Some(shard)
        }
        IdRoute::Database => {
            assert!(!sharded(), "a D1 id from the sharded Worker: {id}");
            None
        }
        IdRoute::Unknown => panic!("an id the service did not make: {id}"),
    }
}

/// The metric names of a reply's `Server-Timing`, and its total round trips.
fn timing(reply: &onceclick_tests::client::Reply) -> (Vec<String>, u32) {
    let value = reply.header("server-timing").expect("Server-Timing");
    let names = value
        .split(", ")
        .map(|m| m.split(';').next().unwrap_or_default().to_owned())
        .collect();
    let trips = onceclick_tests::probe::server_timing_round_trips(value).expect("round trips");
    (names, trips)
}

/// The one place a call on `id`'s job should name in `Server-Timing`.
fn place_of(id: &str) -> String {
    shard_of(id).map_or_else(|| "d1".to_owned(), |s| s.object_name())
}

#[tokio::test]
async fn keys_spread_over_every_shard_and_each_call_goes_to_its_own() {
    let api = Api::from_env();
    let owner = unique("spread");
    let token = api.token(&owner);
    let body =
        json!({"kind": "summarize", "input": {"text": "Spread me over the shards."}}).to_string();
    let mut shards = BTreeSet::new();
    // At least 48 keys, and on until every shard holds one (the owner is new each run,
    // so the keys' shards are too): past 48, a shard is missed with a chance of
    // (7/8)^n, which 400 keys put below 1e-22.
    for i in 0..400 {
        if i >= 48 && (!sharded() || shards.len() == 8) {
            break;
        }
        let key = format!("{owner}-{i}");
        let created = send(api.create(&token, Some(&key), &body)).await;
        assert_eq!(created.status, 201, "{}", created.text);
        let job_id = id(&created.json());
        // A create is one call, to the job's own shard.
        assert_eq!(
            timing(&created),
            (vec![place_of(&job_id)], 1),
            "create {key}"
        );
        let replay = send(api.create(&token, Some(&key), &body)).await;
        assert_eq!(replay.status, 200, "{}", replay.text);
        assert_eq!(id(&replay.json()), job_id);
        assert_eq!(
            timing(&replay),
            (vec![place_of(&job_id)], 1),
            "replay {key}"
        );
        // A read routes from the id alone.
        let read = send(api.get(&token, &format!("/v1/jobs/{job_id}"))).await;
        assert_eq!(read.status, 200);
        assert_eq!(timing(&read), (vec![place_of(&job_id)], 1), "read {key}");
        // The key is bound once in the whole store.
        assert_eq!(db::jobs_with_key(&key), 1, "{key}");
        if let Some(shard) = shard_of(&job_id) {
            assert_eq!(shard.count.get(), 8);
            shards.insert(shard.index);
        }
    }
    if sharded() {
        assert_eq!(shards.len(), 8, "shards in use: {shards:?}");
    }
}

#[tokio::test]
async fn a_jobs_attempts_live_in_its_shard_and_every_call_on_them_goes_there() {
    let api = Api::from_env();
    let mock = Mock::from_env();
    let marker = unique("fallback-shard");
    mock.script("primary", &marker, json!([{"status": 503}]))
        .await;
    api.ensure_certified("fallback").await;
    let token = api.token(&unique("attempts"));
    let job = api
        .create_job(&token, "summarize", &marked_text(&marker), None)
        .await;
    let job_id = id(&job);
    api.wait_job(&token, &job_id, status_is("failed")).await;
    let retry = send(
        api.post_json(
            &token,
            &format!("/v1/jobs/{job_id}/attempts"),
            &json!({"provider": "fallback"}),
        )
        .header("Idempotency-Key", unique("click")),
    )
    .await;
    assert_eq!(retry.status, 201, "{}", retry.text);
    // Every call of the fallback button goes to the job's shard, and only there.
    assert_eq!(timing(&retry).0, vec![place_of(&job_id)]);
    let done = api.wait_job(&token, &job_id, status_is("succeeded")).await;
    let attempts = done["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{done}");
    for attempt in attempts {
        assert_eq!(shard_of(&id(attempt)), shard_of(&job_id), "{attempt}");
    }
}

#[tokio::test]
async fn the_shards_alarms_resend_a_lost_dispatch_with_no_cron() {
    let api = Api::from_env();
    let mock = Mock::from_env();
    let marker = unique("alarm");
    let token = api.token(&unique("alarm-owner"));
    let body = json!({"kind": "summarize", "input": {"text": marked_text(&marker)}});
    let created = send(
        api.create(&token, Some(&unique("key")), &body.to_string())
            .header("X-Onceclick-Fault", "drop-enqueue"),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.text);
    let job_id = id(&created.json());
    // Older than RECONCILE_STARTING_AFTER_MS (1.5 s in the test Worker) before any pass.
    tokio::time::sleep(std::time::Duration::from_millis(1600)).await;
    assert!(mock.calls(&marker).await.is_empty());
    if sharded() {
        // Every shard's alarm moved to now: the alarms, not a request, run the pass.
        let admin = api.admin_token("alarm-admin");
        let armed = send(api.post_json(&admin, "/v1/_reconcile", &json!({"alarm_in_ms": 0}))).await;
        assert_eq!(armed.status, 200, "{}", armed.text);
    } else {
        api.run_cron().await;
    }
    api.wait_job(&token, &job_id, status_is("succeeded")).await;
    assert_eq!(
        mock.wait_calls(&marker, 1).await.len(),
        1,
        "exactly one provider call"
    );
    if sharded() {
        let shard = place_of(&job_id);
        let log = std::fs::read_to_string(
            std::env::var("ONCECLICK_WRANGLER_LOG").expect("ONCECLICK_WRANGLER_LOG"),
        )
        .unwrap_or_default();
        // Only this test moves alarms close (the test Worker's passes come an hour
        // apart; the alarms a create sets hand on and do not reconcile), so a
        // reconciling `alarm_ran` line of the job's shard is this test's alarm.
        assert!(
            log.lines().any(|l| l.contains("\"event\":\"alarm_ran\"")
                && l.contains("\"reconciled\":true")
                && l.contains(&format!("\"shard\":\"{shard}\""))),
            "no alarm reconciled {shard}"
        );
    }
}

#[tokio::test]
async fn ids_that_no_shard_of_this_layout_made_are_not_found() {
    let api = Api::from_env();
    let token = api.token(&unique("nobody"));
    for bogus in [
        // A shard of this layout (8 shards, number 1) that holds no such job.
        "job_0192f0c4-7b1e-8c3d-9a4b-012345673001",
        // A shard count no layout has (2^15).
        "job_0192f0c4-7b1e-8c3d-9a4b-01234567f000",
        // A valid count that is not this deployment's (4 shards, number 1).
        "job_0192f0c4-7b1e-8c3d-9a4b-012345672001",
        // A UUIDv7: D1's kind of id (on the sharded Worker, with no D1 kept: nobody's).
        "job_0192f0c4-7b1e-7c3d-9a4b-0123456789ab",
        "job_0192f0c4-7b1e-6c3d-9a4b-0123456789ab",
        "job_not-an-id",
    ] {
        let read = send(api.get(&token, &format!("/v1/jobs/{bogus}"))).await;
        assert_eq!(read.status, 404, "{bogus}: {}", read.text);
        let cancel =
            send(api.post_json(&token, &format!("/v1/jobs/{bogus}/cancel"), &json!({}))).await;
        assert_eq!(cancel.status, 404, "{bogus}: {}", cancel.text);
    }
}

/// Keys of `owner` whose jobs live away from shard 0 (every key, on D1).
fn keys_away_from_shard_zero(owner: &str, n: usize) -> Vec<String> {
    let count = onceclick_protocol::shard::ShardCount::new(8).expect("8 shards");
    (0..)
        .map(|i| format!("{owner}-{i}"))
        .filter(|key| onceclick_protocol::shard::shard_for_key(owner, key, count).index != 0)
        .take(n)
        .collect()
}

#[tokio::test]
async fn a_hedge_reads_the_certifications_in_its_jobs_own_shard_never_shard_zero() {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    api.ensure_certified("fallback").await;
    let owner = unique("hedged");
    let token = api.token(&owner);
    for key in keys_away_from_shard_zero(&owner, 3) {
        let marker = unique("hedge-home");
        let gate = format!("{marker}-p");
        // The primary stays silent past hedge_after_ms; the hedge on fallback answers.
        mock.script("primary", &marker, json!([{"gate": gate}]))
            .await;
        let body = json!({"kind": "summarize_hedged", "input": {"text": marked_text(&marker)}});
        let created = send(api.create(&token, Some(&key), &body.to_string())).await;
        assert_eq!(created.status, 201, "{}", created.text);
        let job_id = id(&created.json());
        let done = api.wait_job(&token, &job_id, status_is("succeeded")).await;
        mock.release(&gate).await;
        let first = id(&done["attempts"][0]);
        assert_eq!(done["attempts"][1]["provider"], "fallback", "{done}");
        // The hedge's pre-check ran in the primary attempt's dispatch, on the job's own
        // place, and no call of that dispatch went anywhere else.
        // Every call of the primary's dispatch is logged once its `dispatched` line is.
        let dispatched = onceclick_tests::log::wait_event("dispatched", 30, |v| {
            v["attempt_id"] == first.as_str()
        });
        assert!(
            dispatched.await.is_some(),
            "{first} never logged dispatched"
        );
        let calls = onceclick_tests::log::store_calls(&first);
        assert!(
            calls.iter().any(|(op, _)| op == "certifications"),
            "no certifications read logged for {first}: {calls:?}"
        );
        let home = place_of(&job_id);
        let elsewhere: Vec<_> = calls.iter().filter(|(_, place)| *place != home).collect();
        assert!(elsewhere.is_empty(), "{key} lives in {home}: {elsewhere:?}");
    }
}

#[tokio::test]
async fn health_and_the_provider_list_do_not_all_go_to_one_shard() {
    let api = Api::from_env();
    let token = api.token(&unique("lookups"));
    for path in ["/v1/providers", "/v1/health"] {
        let mut places = BTreeSet::new();
        for _ in 0..16 {
            let reply = send(api.get(&token, path)).await;
            assert_eq!(reply.status, 200, "{path}: {}", reply.text);
            let (names, trips) = timing(&reply);
            assert_eq!(trips, 1, "{path}: one call");
            places.extend(names);
        }
        if sharded() {
            // 16 calls, each to a shard picked at random of 8: all in one shard has a
            // chance of 8 in 8^16.
            assert!(places.len() > 1, "{path} went only to {places:?}");
        } else {
            assert_eq!(places, BTreeSet::from(["d1".to_owned()]), "{path}");
        }
    }
}

#[tokio::test]
async fn a_page_over_large_jobs_holds_a_few_ids_per_shard_and_the_pages_documents() {
    let api = Api::from_env();
    let owner = unique("large-lister");
    let token = api.token(&owner);
    let count = onceclick_protocol::shard::ShardCount::new(8).expect("8 shards");
    let shard_of_key =
        |key: &str| onceclick_protocol::shard::shard_for_key(&owner, key, count).index;
    // Fourteen jobs in one shard (so that its ids run out and it is asked again) and
    // four elsewhere, made last (so the first page has 8 of the crowded shard's and needs
    // more), each with an input of about 19 KB.
    let crowded = shard_of_key(&format!("{owner}-0"));
    let mut keys: Vec<String> = (0..)
        .map(|i| format!("{owner}-{i}"))
        .filter(|k| shard_of_key(k) == crowded)
        .take(14)
        .collect();
    keys.extend(
        (0..)
            .map(|i| format!("{owner}-other-{i}"))
            .filter(|k| shard_of_key(k) != crowded)
            .take(4),
    );
    let mut made = Vec::new();
    for key in &keys {
        let text = format!("{} {}", unique(key), "A long text to list. ".repeat(900));
        let body = json!({"kind": "summarize", "input": {"text": text}}).to_string();
        let created = send(api.create(&token, Some(key), &body)).await;
        assert_eq!(created.status, 201, "{}", created.text);
        made.push(id(&created.json()));
    }
    made.sort();
    made.reverse();
    let limit = 12;
    let (mut listed, mut cursor, mut refills) = (Vec::new(), None::<String>, 0);
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/jobs?limit={limit}&cursor={c}"),
            None => format!("/v1/jobs?limit={limit}"),
        };
        let reply = send(api.get(&token, &path)).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let page = reply.json();
        let items: Vec<String> = page["items"].as_array().unwrap().iter().map(id).collect();
        if sharded() {
            refills += check_merge_line(&items, limit).await;
        } else {
            assert_eq!(timing(&reply), (vec!["d1".to_owned()], 1), "one read on D1");
        }
        listed.extend(items);
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
        assert!(listed.len() <= made.len(), "the cursor never ends");
    }
    assert_eq!(listed, made, "newest first, every job once");
    if sharded() {
        assert!(
            refills > 0,
            "no shard's ids ran out: the refill went untested"
        );
    }
}

/// What the merge of one page asked each shard for, and what it held at once; how many
/// times a shard was asked again for more ids.
async fn check_merge_line(items: &[String], limit: u32) -> usize {
    let Some(first) = items.first() else { return 0 };
    let line = onceclick_tests::log::wait_event("list_page", 10, |v| {
        v["limit"] == limit && v["first"] == first.as_str()
    })
    .await
    .unwrap_or_else(|| panic!("no list_page line for {first}"));
    let asked = line["asked"].as_array().unwrap();
    // A few ids per shard, never a page of documents: ids_per_place(12, 8) is 8.
    let per_place = 8;
    let ids: Vec<_> = asked.iter().filter(|c| c["for"] == "ids").collect();
    assert!(ids.len() >= 8, "every shard is asked for ids: {line}");
    for call in &ids {
        assert_eq!(call["limit"], per_place, "{call}");
        assert!(call["rows"].as_u64().unwrap() <= per_place, "{call}");
        assert!(call["bytes"].as_u64().unwrap() < 600, "ids only: {call}");
    }
    // Documents only for the page's items, from the shards that hold them.
    let documents: u64 = asked
        .iter()
        .filter(|c| c["for"] == "documents")
        .map(|c| c["limit"].as_u64().unwrap())
        .sum();
    assert_eq!(documents, items.len() as u64, "{line}");
    for item in items {
        let place = place_of(item);
        assert!(
            asked
                .iter()
                .any(|c| c["for"] == "documents" && c["place"] == place.as_str()),
            "{item} was fetched from {place}: {line}"
        );
    }
    // What was alive at once: the page's documents, or every shard's few ids.
    let (peak, page) = (
        line["peak_bytes"].as_u64().unwrap(),
        line["page_bytes"].as_u64().unwrap(),
    );
    let ids_bound = 8 * per_place * 128;
    assert!(page >= 18_000 * items.len() as u64, "{line}");
    assert!(
        peak <= page + ids_bound,
        "{peak} bytes alive for a page of {page}: {line}"
    );
    ids.len() - 8
}
