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
use futures_util::future::join_all;
use onceclick_protocol::contract::Kind;
use serde_json::{json, Value};
use std::collections::HashSet;

/// Runs every golden input of every kind that names `provider` through it at
/// temperature 0, checks each full round trip against the kind's contract, and stores
/// one report per kind. A kind whose golden prompts may not fit the provider's
/// `max_prompt_tokens` fails without a call.
pub fn run<'a>(
    store: &'a Store,
    host: &'a dyn Host,
    provider: &'a ProviderConfig,
) -> futures_util::future::LocalBoxFuture<'a, ApiResult<Vec<Certification>>> {
    Box::pin(async move {
        let api_key = providers::api_key(provider, host);
        let kinds = kinds::all(host);
        let mut reports = Vec::new();
        for kind in kinds.iter().filter(|k| k.names_provider(&provider.name)) {
            if let Some(report) = too_long(provider, kind) {
                store.save_certification(&report).await?;
                reports.push(report);
                continue;
            }
            let calls = kind.golden().enumerate().map(|(i, (input, _))| {
                let call_id = clock::new_id("cert");
                let api_key = api_key.as_deref();
                async move {
                    let call = ProviderCall {
                        provider,
                        api_key,
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
                }
            });
            let failures: Vec<Value> = join_all(calls).await.into_iter().flatten().collect();
            let report = Certification {
                provider: provider.name.clone(),
                kind: kind.name().to_owned(),
                contract_version: kind.contract_version().to_owned(),
                provider_digest: provider.digest(),
                passed: failures.is_empty() && kind.golden().next().is_some(),
                failures,
                certified_at: clock::now_rfc3339(),
            };
            store.save_certification(&report).await?;
            reports.push(report);
        }
        Ok(reports)
    })
}

/// Whether `report` certifies `provider` as it is configured now for `kind` as it is
/// declared now: another contract version, model or base URL voids it.
pub fn is_current(report: &Certification, kind: &Kind, provider: &ProviderConfig) -> bool {
    report.provider == provider.name
        && report.kind == kind.name()
        && report.contract_version == kind.contract_version()
        && report.provider_digest == provider.digest()
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
fn too_long(provider: &ProviderConfig, kind: &Kind) -> Option<Certification> {
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
    (!failures.is_empty()).then(|| Certification {
        provider: provider.name.clone(),
        kind: kind.name().to_owned(),
        contract_version: kind.contract_version().to_owned(),
        provider_digest: provider.digest(),
        passed: false,
        failures,
        certified_at: clock::now_rfc3339(),
    })
}
