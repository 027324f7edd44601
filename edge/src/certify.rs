//! The HTTP side of the kinds and their providers' certification: `GET /v1/kinds`,
//! `POST /v1/providers/{name}/certify` and `GET /v1/providers`. What certification is
//! lives in `certification`.

use crate::certification;
use crate::error::{ApiResult, AppError};
use crate::http::{json, Ctx};
use crate::kinds;
use crate::providers;
use crate::store::Route;
use serde_json::{json, Value};
use worker::{Headers, Response};

/// `POST /v1/providers/{name}/certify` (admin): certifies the provider (see
/// [`certification::run`]) and answers its reports.
pub(crate) async fn certify(ctx: &Ctx<'_>, name: &str) -> ApiResult<Response> {
    let configured = providers::configured(ctx.host)?;
    let provider = providers::find(&configured, name)
        .ok_or_else(|| AppError::not_found(&format!("provider {name}")))?;
    let reports = certification::run(ctx.store, ctx.host, provider).await?;
    let body = json!({"provider": name, "reports": reports});
    json(200, body.to_string(), Headers::new())
}

/// `GET /v1/providers`: every configured provider, with what it is asked (its JSON
/// form, its headers' names, the secrets it lacks), and for each kind that names it,
/// its certification for the kind's current contract version and, when it is not
/// certified, why (so that the operator's page can say why failover skips it).
pub(crate) async fn list(ctx: &Ctx<'_>) -> ApiResult<Response> {
    let configured = providers::configured(ctx.host)?;
    let reports = ctx.store.certifications(Route::Any).await?;
    let kinds = kinds::all(ctx.host);
    let providers: Vec<Value> = configured
        .iter()
        .map(|p| {
            let missing = providers::missing_secrets(p, ctx.host);
            let per_kind: serde_json::Map<String, Value> = kinds
                .iter()
                .filter(|k| k.names_provider(&p.name))
                .map(|k| {
                    let current = reports.iter().find(|r| certification::is_current(r, k, p));
                    let why = match current {
                        Some(r) if r.passed => None,
                        Some(r) => Some(format!(
                            "its certification for this contract version failed: {}",
                            r.failures.first().and_then(|f| f["message"].as_str()).unwrap_or("no golden input")
                        )),
                        None if !missing.is_empty() => {
                            Some(format!("the secrets it names are not set: {}", missing.join(", ")))
                        }
                        None => Some(
                            "no certification for this contract version and configuration yet: the background pass (the cron) certifies it".to_owned(),
                        ),
                    };
                    let entry = json!({
                        "contract_version": k.contract_version(),
                        "model": p.model_for(k.name()),
                        "certified": current.is_some_and(|r| r.passed),
                        "primary": k.primary() == p.name,
                        "why": why,
                        "report": current,
                    });
                    (k.name().to_owned(), entry)
                })
                .collect();
            json!({
                "name": p.name,
                "model": p.model,
                "json_form": p.json_form,
                "key_header": p.key_header.as_deref().unwrap_or("Authorization"),
                "headers": p.header_names().collect::<Vec<_>>(),
                "missing_secrets": missing,
                "timeout_ms": p.timeout_ms,
                "abandon_after_ms": p.abandon_after_ms,
                "max_prompt_tokens": p.max_prompt_tokens,
                "kinds": per_kind,
            })
        })
        .collect();
    json(
        200,
        json!({"providers": providers}).to_string(),
        Headers::new(),
    )
}

/// `GET /v1/kinds`: every kind this Worker declares, as a client needs it to ask for
/// a job of it: its input schema, its answer's form and schema, its contract version,
/// and its golden inputs as examples.
pub(crate) fn kinds(ctx: &Ctx<'_>) -> ApiResult<Response> {
    let kinds: Vec<Value> = kinds::all(ctx.host)
        .iter()
        .map(|k| {
            let decl = k.decl();
            json!({
                "kind": k.name(),
                "description": decl.description,
                "answer": k.answer(),
                "contract_version": k.contract_version(),
                "input_schema": decl.input_schema,
                "output_schema": k.output_schema(),
                "providers": decl.providers,
                "examples": k.golden().map(|(input, _)| input).collect::<Vec<_>>(),
            })
        })
        .collect();
    json(200, json!({"kinds": kinds}).to_string(), Headers::new())
}
