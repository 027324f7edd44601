//! The list endpoints: `GET /v1/jobs` (an owner's own jobs, or an admin's view of
//! everyone's) and `GET /v1/attempts` (admin: above all the `unknown` attempts that wait
//! for someone to resolve them). Each page is one indexed read; its cursor is opaque.

use crate::auth::Caller;
use crate::error::{ApiResult, AppError};
use crate::http::{invalid_query, json, param, query, whole_number, Ctx, Query};
use crate::store::{AttemptFilter, JobFilter, Page};
use onceclick_protocol::{AttemptState, ErrorCode, JobStatus};
use worker::{Headers, Request, Response};

/// Items per page when the request does not say.
pub(crate) const DEFAULT_LIMIT: u32 = 50;
/// The most items one page may hold.
pub(crate) const MAX_LIMIT: u32 = 200;

/// Items per page: `limit`, or [`DEFAULT_LIMIT`].
fn limit(query: &Query) -> ApiResult<u32> {
    let limit = whole_number(query, "limit", 1..=u64::from(MAX_LIMIT))?;
    Ok(limit.map_or(DEFAULT_LIMIT, |n| n as u32))
}

/// The oldest age `min_age_ms` may ask for: ten years.
const MAX_AGE_MS: u64 = 10 * 365 * 86_400_000;

/// A value of one of the protocol's string enums (`JobStatus`, `AttemptState`).
fn one_of<T: serde::de::DeserializeOwned>(name: &str, text: &str, all: &str) -> ApiResult<T> {
    serde_json::from_value(serde_json::Value::String(text.to_owned()))
        .map_err(|_| invalid_query(format!("{name} must be one of {all}")))
}

/// The cursor of a page that follows the item `id`: the id in hex behind a version
/// prefix, so that clients treat it as opaque and a later format can be told apart.
fn cursor(id: &str) -> String {
    let mut out = String::with_capacity(3 + 2 * id.len());
    out.push_str("c1.");
    for byte in id.bytes() {
        out.push_str(&format!("{byte:02x}"));
    }
    out
}

/// The item id a cursor continues after; it must name an id with `prefix`.
fn after(params: &Query, prefix: &str) -> ApiResult<Option<String>> {
    let Some(text) = param(params, "cursor") else {
        return Ok(None);
    };
    let bad = || invalid_query("cursor is not one this list gave: pass next_cursor as it came");
    let hex = text.strip_prefix("c1.").ok_or_else(bad)?;
    if hex.len() % 2 != 0 || hex.len() > 256 {
        return Err(bad());
    }
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| {
            hex.get(i..i + 2)
                .and_then(|b| u8::from_str_radix(b, 16).ok())
        })
        .collect::<Option<Vec<u8>>>()
        .ok_or_else(bad)?;
    let id = String::from_utf8(bytes).map_err(|_| bad())?;
    let well_formed = id.strip_prefix(prefix).is_some_and(|rest| {
        !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
    });
    if !well_formed {
        return Err(bad());
    }
    Ok(Some(id))
}

/// `{"items": [...], "next_cursor": "…" | null}`.
fn page_response(page: Page) -> ApiResult<Response> {
    let next = match &page.next_after {
        Some(id) => format!("\"{}\"", cursor(id)),
        None => "null".to_owned(),
    };
    let body = format!(
        "{{\"items\":[{}],\"next_cursor\":{next}}}",
        page.items.join(",")
    );
    let headers = Headers::new();
    headers
        .set("Cache-Control", "no-store")
        .map_err(crate::problem::runtime)?;
    json(200, body, headers)
}

/// `GET /v1/jobs`: the caller's own jobs, newest first, in one `status` when given. An
/// admin may name another `owner`, or every owner (`owner=*`).
pub(crate) async fn jobs(req: &Request, ctx: &Ctx<'_>, caller: &Caller) -> ApiResult<Response> {
    let params = query(req, &["status", "owner", "limit", "cursor"])?;
    let limit = limit(&params)?;
    let after = after(&params, "job_")?;
    let status = param(&params, "status")
        .map(|s| {
            one_of::<JobStatus>(
                "status",
                s,
                "queued, running, unknown, failed, succeeded, cancelled",
            )
            .map(|_| s)
        })
        .transpose()?;
    let filter = job_filter(caller, param(&params, "owner"), status)?;
    let page = ctx
        .store
        .list_jobs(&filter, after.as_deref(), limit)
        .await?;
    page_response(page)
}

/// Which jobs `caller` may list when it names `owner` (or none). Everyone's jobs
/// (`owner=*`) only for an admin, whatever the caller's own owner string is; another
/// owner's only for an admin; an admin who names no owner sees their own, like anyone
/// using an ordinary app's "my jobs" view.
fn job_filter<'a>(
    caller: &'a Caller,
    owner: Option<&'a str>,
    status: Option<&'a str>,
) -> ApiResult<JobFilter<'a>> {
    let forbidden = || {
        AppError::new(
            ErrorCode::Forbidden,
            "only an admin may list another owner's jobs (or every owner's, owner=*)",
        )
    };
    let Some(owner) = owner else {
        return Ok(JobFilter::Owner {
            owner: &caller.owner,
            status,
        });
    };
    if owner.is_empty() || owner.chars().count() > 128 {
        return Err(invalid_query("owner must be 1 to 128 characters"));
    }
    if owner == "*" {
        // The every-owner view is decided by the role alone: an owner string can never
        // reach it (and `*` is refused as an owner at authentication besides).
        if !caller.admin {
            return Err(forbidden());
        }
        return Ok(status.map_or(JobFilter::All, JobFilter::Status));
    }
    if !caller.admin && owner != caller.owner {
        return Err(forbidden());
    }
    Ok(JobFilter::Owner { owner, status })
}

/// `GET /v1/attempts` (admin): attempts in one `state` (`unknown` unless told), oldest
/// first, of one `provider` and at least `min_age_ms` old when given, each with its
/// job's owner, kind and status.
pub(crate) async fn attempts(req: &Request, ctx: &Ctx<'_>) -> ApiResult<Response> {
    let params = query(req, &["state", "provider", "min_age_ms", "limit", "cursor"])?;
    let limit = limit(&params)?;
    let after = after(&params, "att_")?;
    let state = param(&params, "state").unwrap_or("unknown");
    one_of::<AttemptState>(
        "state",
        state,
        "starting, running, succeeded, failed, unknown, abandoned, cancelled, superseded",
    )?;
    let provider = param(&params, "provider");
    if provider.is_some_and(|p| p.is_empty() || p.len() > 64) {
        return Err(invalid_query("provider must be 1 to 64 characters"));
    }
    let started_by = whole_number(&params, "min_age_ms", 0..=MAX_AGE_MS)?
        .map(|age| crate::clock::rfc3339(crate::clock::now_ms() - age as f64));
    let filter = AttemptFilter {
        state,
        provider,
        started_by: started_by.as_deref(),
    };
    let page = ctx
        .store
        .list_attempts(&filter, after.as_deref(), limit)
        .await?;
    page_response(page)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_cursor(value: &str) -> Query {
        vec![("cursor".to_owned(), value.to_owned())]
    }

    fn caller(owner: &str, admin: bool) -> Caller {
        Caller {
            owner: owner.to_owned(),
            admin,
        }
    }

    #[test]
    fn only_an_admin_reaches_every_owners_jobs_whatever_the_owner_string() {
        for owner in ["*", "alice"] {
            let plain = caller(owner, false);
            let refused = job_filter(&plain, Some("*"), None);
            assert!(
                matches!(&refused, Err(e) if e.code == ErrorCode::Forbidden),
                "a non-admin named {owner:?} listed every owner"
            );
            let refused = job_filter(&plain, Some("*"), Some("queued"));
            assert!(matches!(&refused, Err(e) if e.code == ErrorCode::Forbidden));
        }
        assert!(matches!(
            job_filter(&caller("ops", true), Some("*"), None),
            Ok(JobFilter::All)
        ));
        assert!(matches!(
            job_filter(&caller("ops", true), Some("*"), Some("queued")),
            Ok(JobFilter::Status("queued"))
        ));
        // A non-admin naming themselves, or no one, lists their own.
        for named in [Some("alice"), None] {
            assert!(matches!(
                job_filter(&caller("alice", false), named, None),
                Ok(JobFilter::Owner {
                    owner: "alice",
                    status: None
                })
            ));
        }
    }

    #[test]
    fn a_cursor_comes_back_as_the_id_it_was_made_from() {
        let id = "job_0192f0c4-7b1e-7c3d-9a4b-0123456789ab";
        let text = cursor(id);
        assert!(text.starts_with("c1.") && !text.contains("job_"));
        assert_eq!(
            after(&with_cursor(&text), "job_").ok().flatten().as_deref(),
            Some(id)
        );
    }

    #[test]
    fn a_cursor_the_api_did_not_give_is_refused() {
        let attempt = cursor("att_0192f0c4-7b1e-7c3d-9a4b-0123456789ab");
        for bad in [
            "",
            "c1.",
            "c1.zz",
            "c1.6a6f625",
            "job_1",
            "c2.6a6f625f31",
            &attempt,
            "c1.6a6f625f27",
        ] {
            let refused = after(&with_cursor(bad), "job_");
            assert!(
                matches!(&refused, Err(e) if e.code == ErrorCode::InvalidQuery),
                "{bad:?} was taken"
            );
        }
    }
}
