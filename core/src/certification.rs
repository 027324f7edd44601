//! Provider certification: a provider may receive failover, hedges and fallback
//! attempts for a kind only after it has kept that kind's contract on its golden inputs,
//! as it is configured now. Used by the certify endpoint and by the dispatcher.

use crate::clock;
use crate::error::ApiResult;
use crate::host::{Host, ProviderCall};
use crate::kinds;
use crate::outcome::CallOutcome;
use crate::providers::{self, ProviderConfig};
use crate::store::{Certification, Route, Store};
use crate::together::together;
use onceclick_protocol::contract::Kind;
use serde_json::{json, Value};
use std::collections::HashSet;

/// Certifies `provider` for every kind that names it ([`run_kind`]): one report per
/// kind, each stored.
pub fn run<'a>(
    store: &'a Store,
    host: &'a dyn Host,
    provider: &'a ProviderConfig,
) -> futures_util::future::LocalBoxFuture<'a, ApiResult<Vec<Certification>>> {
    Box::pin(async move {
        let mut reports = Vec::new();
        for kind in kinds::all(host)
            .iter()
            .filter(|k| k.names_provider(&provider.name))
        {
            reports.push(run_kind(store, host, provider, kind).await?);
        }
        Ok(reports)
    })
}

/// Runs every golden input of `kind` through `provider`, with the kind's own messages
/// and parameters, checks each full round trip against the kind's contract, and stores
/// the report. Golden prompts that may not fit the provider's `max_prompt_tokens`, or a
/// secret it names that is not set, fail it without a call.
async fn run_kind(
    store: &Store,
    host: &dyn Host,
    provider: &ProviderConfig,
    kind: &'static Kind,
) -> ApiResult<Certification> {
    let report = |failures: Vec<Value>| Certification {
        provider: provider.name.clone(),
        kind: kind.name().to_owned(),
        contract_version: kind.contract_version().to_owned(),
        provider_digest: provider.digest_for(kind.name()),
        passed: failures.is_empty() && kind.golden().next().is_some(),
        failures,
        certified_at: clock::now_rfc3339(),
    };
    let report = match (too_long(provider, kind), providers::headers(provider, host)) {
        (Some(failures), _) => report(failures),
        (None, Err(e)) => report(vec![
            json!({"input": null, "code": e.code, "message": e.message}),
        ]),
        (None, Ok(headers)) => {
            let headers = &headers;
            let calls = kind.golden().enumerate().map(|(i, (input, _))| async move {
                let call_id = clock::new_id("cert");
                let call = ProviderCall {
                    provider,
                    headers,
                    kind,
                    input,
                    attempt_id: &call_id,
                    job: None,
                    news: None,
                    hand_off_fault: None,
                };
                match host.call(call).await {
                    CallOutcome::Output(..) => None,
                    CallOutcome::Failed(e) | CallOutcome::Unknown(e) => {
                        Some(json!({"input": i, "code": e.code, "message": e.message}))
                    }
                }
            });
            report(together(calls).await.into_iter().flatten().collect())
        }
    };
    store.save_certification(&report).await?;
    Ok(report)
}

/// The most (kind, provider) certifications one background pass runs: each costs a
/// kind's golden calls and a write to every place, and the next pass takes the rest.
/// On the shards, fewer, so that a pass stays well inside an invocation's subrequests
/// (4 pairs on up to 512 shards, 1 on 2,048 or more: [`pairs_per_pass`]).
pub const AUTO_PER_PASS: usize = 4;

/// The pairs one pass may certify when a report is written to `places` places.
pub fn pairs_per_pass(places: u32) -> usize {
    (2_048 / places.max(1) as usize).clamp(1, AUTO_PER_PASS)
}

/// A failed report whose failures say nothing of the provider's answers is tried again
/// this long after it was made.
const RETRY_AFTER_MS: f64 = 15.0 * 60_000.0;

/// Whether `report` failed on what the provider answered (its contract, an unfinished
/// or refused answer, a prompt too long for it): a verdict that a later try of the same
/// configuration would only repeat.
fn broke_contract(report: &Certification) -> bool {
    const VERDICTS: [&str; 4] = [
        "contract_violation",
        "provider_output_incomplete",
        "provider_refused",
        "prompt_too_long",
    ];
    report
        .failures
        .iter()
        .any(|f| f["code"].as_str().is_some_and(|c| VERDICTS.contains(&c)))
}

/// The background pass (the cron's): certifies each provider that a kind names (its
/// failover, hedge or fallback may go there) and that has no report for the kind's
/// current contract version and its own digest now: once per (contract version,
/// provider digest), at most [`AUTO_PER_PASS`] a pass, each logged. A provider that
/// failed on its answers stays failed until its kind or its configuration changes, or
/// an operator certifies it again; one that failed otherwise (down, rate limited, a
/// timeout) is tried again [`RETRY_AFTER_MS`] later; one whose secret is not set is
/// skipped. Returns the reports it made.
pub fn auto<'a>(
    store: &'a Store,
    host: &'a dyn Host,
) -> futures_util::future::LocalBoxFuture<'a, ApiResult<Vec<Certification>>> {
    Box::pin(async move {
        let configured = providers::configured(host)?;
        let reports = store.certifications(Route::Any).await?;
        // A failure that says nothing of the provider's answers (it was down, slow, or
        // refused the call) is tried again after a while; one that broke the contract
        // stands until the kind or the configuration changes.
        let retry_before = clock::rfc3339(clock::now_ms() - RETRY_AFTER_MS);
        let most = pairs_per_pass(store.places());
        // A provider whose secret is not set is skipped, with no report: its
        // `GET /v1/providers` entry says why, and it is certified once set.
        let ready: Vec<bool> = configured
            .iter()
            .map(|p| providers::missing_secrets(p, host).is_empty())
            .collect();
        let mut due = Vec::new();
        for kind in kinds::all(host) {
            for (provider, ready) in configured.iter().zip(&ready) {
                let settled = reports.iter().any(|r| {
                    is_current(r, kind, provider)
                        && (r.passed || r.certified_at > retry_before || broke_contract(r))
                });
                if kind.names_provider(&provider.name) && !settled && *ready && due.len() < most {
                    due.push((provider, kind));
                }
            }
        }
        let mut made = Vec::new();
        for (provider, kind) in due {
            let report = run_kind(store, host, provider, kind).await?;
            crate::log::info(json!({"event": "certified_in_background",
                "provider": report.provider, "kind": report.kind,
                "contract_version": report.contract_version, "passed": report.passed,
                "failures": report.failures.len()}));
            made.push(report);
        }
        Ok(made)
    })
}

/// Whether `report` certifies `provider` as it is configured now for `kind` as it is
/// declared now: another contract version, model or base URL voids it.
pub fn is_current(report: &Certification, kind: &Kind, provider: &ProviderConfig) -> bool {
    report.provider == provider.name
        && report.kind == kind.name()
        && report.contract_version == kind.contract_version()
        && report.provider_digest == provider.digest_for(kind.name())
}

/// The providers certified for `kind` at its current contract version, as `configured`
/// now, as the job `job_id`'s own place holds the reports (its shard, or the D1 it was
/// made in): the copy that place's SQL guard reads too.
pub async fn certified_for(
    store: &Store,
    job_id: &str,
    kind: &Kind,
    configured: &[ProviderConfig],
) -> ApiResult<HashSet<String>> {
    Ok(store
        .certifications(Route::Id(job_id))
        .await?
        .into_iter()
        .filter(|r| {
            r.passed
                && providers::find(configured, &r.provider).is_some_and(|p| is_current(r, kind, p))
        })
        .map(|r| r.provider)
        .collect())
}

/// A failed report when a rendered golden prompt may not fit the provider's
/// `max_prompt_tokens`. The Worker carries no tokenizer, so it bounds the count from
/// above by the prompt's UTF-8 length (a byte-level BPE token is at least one byte):
/// a prompt passes here only if it fits for certain. `cargo xtask certify` counts with
/// the model's own tokenizer before it calls this endpoint.
fn too_long(provider: &ProviderConfig, kind: &Kind) -> Option<Vec<Value>> {
    let max = provider.max_prompt_tokens?;
    let failures: Vec<Value> = kind
        .golden()
        .enumerate()
        .filter_map(|(i, (input, _))| {
            let rendered = kind.render_messages(input);
            let bound = rendered.iter().map(|(_, m)| m.len() as u64).sum::<u64>();
            (bound > max).then(|| {
                json!({"input": i, "code": "prompt_too_long", "message": format!(
                    "golden input {i} renders to {bound} bytes, which may be more than the {max} max_prompt_tokens of {}",
                    provider.name
                )})
            })
        })
        .collect();
    (!failures.is_empty()).then_some(failures)
}

#[cfg(test)]
mod tests {
    use super::pairs_per_pass;

    #[test]
    fn a_pass_certifies_fewer_pairs_the_more_places_each_report_is_written_to() {
        for (places, pairs) in [
            (1, 4),
            (256, 4),
            (513, 3),
            (1_024, 2),
            (2_049, 1),
            (4_097, 1),
            (0, 4),
        ] {
            assert_eq!(pairs_per_pass(places), pairs, "{places}");
        }
    }
}
