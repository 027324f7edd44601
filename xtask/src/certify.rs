//! `cargo xtask certify --provider NAME [--url URL]`: the checks a provider must pass
//! before failover may go to it.
//!
//! 1. Offline: every rendered golden prompt of every kind that names the provider must
//!    fit its `max_prompt_tokens`, counted with the provider's own tokenizer where
//!    tiktoken-rs knows the model (an estimate with `o200k_base` where it does not).
//! 2. Online: `POST /v1/providers/NAME/certify` on a running Worker (by default the
//!    one `cargo xtask dev` serves), which runs the golden inputs through the provider
//!    and stores the reports.

use anyhow::{bail, Context, Result};
use onceclick_protocol::contract::{Kind, ProviderConfig};
use std::path::Path;

/// Every kind declared under `edge/kinds/`.
pub(crate) fn kinds(root: &Path) -> Result<Vec<Kind>> {
    let files =
        onceclick_protocol::contract::load_dir(&root.join("edge/kinds")).map_err(|errors| {
            anyhow::anyhow!("the kind files do not load:\n  {}", errors.join("\n  "))
        })?;
    Ok(files.into_iter().map(|f| f.kind).collect())
}

/// The providers `wrangler.toml` configures in its `PROVIDERS` var.
/// The providers a wrangler configuration's `[vars] PROVIDERS` declares, each checked as
/// the Worker loads it (an unknown field is refused, named).
pub(crate) fn providers_of(config: &Path) -> Result<Vec<ProviderConfig>> {
    let name = config.display();
    let text = std::fs::read_to_string(config)?;
    let table: toml::Table = text
        .parse()
        .with_context(|| format!("{name} does not parse"))?;
    let providers = table
        .get("vars")
        .and_then(|v| v.get("PROVIDERS"))
        .and_then(|v| v.as_str())
        .with_context(|| format!("{name} has no [vars] PROVIDERS"))?;
    ProviderConfig::parse_list(providers).map_err(|e| anyhow::anyhow!("{name}: {e}"))
}

/// How a prompt was counted.
#[derive(Debug, PartialEq)]
pub(crate) struct PromptCount {
    pub(crate) kind: String,
    pub(crate) golden: usize,
    pub(crate) tokens: usize,
}

/// Counts the tokens of every rendered golden prompt of `kinds` that name `provider`.
/// Returns the tokenizer used (and whether it is the model's own) and the counts.
pub(crate) fn count_prompts(
    provider: &ProviderConfig,
    kinds: &[Kind],
) -> Result<(String, Vec<PromptCount>)> {
    let (bpe, tokenizer) = match tiktoken_rs::bpe_for_model(&provider.model) {
        Ok(bpe) => (bpe, format!("the tokenizer of {}", provider.model)),
        Err(_) => (
            tiktoken_rs::o200k_base_singleton(),
            format!(
                "o200k_base (an estimate: no tokenizer is known for {})",
                provider.model
            ),
        ),
    };
    let mut counts = Vec::new();
    for kind in kinds.iter().filter(|k| k.names_provider(&provider.name)) {
        for (golden, (input, _)) in kind.golden().enumerate() {
            let tokens = kind
                .render_messages(input)
                .iter()
                .map(|(_, message)| bpe.encode_with_special_tokens(message).len())
                .sum();
            counts.push(PromptCount {
                kind: kind.name().to_owned(),
                golden,
                tokens,
            });
        }
    }
    Ok((tokenizer, counts))
}

pub(crate) fn run(
    root: &Path,
    config: &Path,
    name: &str,
    url: &str,
    admin_token: &str,
) -> Result<()> {
    let providers = providers_of(config)?;
    let provider = providers
        .iter()
        .find(|p| p.name == name)
        .with_context(|| format!("{} configures no provider {name:?}", config.display()))?;
    let kinds = kinds(root)?;

    let (tokenizer, counts) = count_prompts(provider, &kinds)?;
    let mut too_long = Vec::new();
    println!("prompt sizes for {name}, counted with {tokenizer}:");
    for c in &counts {
        let verdict = match provider.max_prompt_tokens {
            Some(max) if c.tokens as u64 > max => {
                too_long.push(format!(
                    "{} golden input {}: {} tokens > {max}",
                    c.kind, c.golden, c.tokens
                ));
                "TOO LONG"
            }
            Some(_) => "fits",
            None => "no max_prompt_tokens declared",
        };
        println!(
            "  {} golden input {}: {} tokens ({verdict})",
            c.kind, c.golden, c.tokens
        );
    }

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let body: serde_json::Value = runtime.block_on(async {
        let reply = reqwest::Client::new()
            .post(format!("{url}/v1/providers/{name}/certify"))
            .bearer_auth(admin_token)
            .send()
            .await
            .with_context(|| format!("is the Worker running at {url}? (cargo xtask dev)"))?;
        let status = reply.status();
        let body: serde_json::Value = reply.json().await?;
        if !status.is_success() {
            bail!("certify answered {status}: {body}");
        }
        Ok(body)
    })?;
    let mut failed = too_long;
    for report in body["reports"].as_array().into_iter().flatten() {
        let passed = report["passed"].as_bool().unwrap_or(false);
        println!(
            "{} for {}@{}: {}",
            name,
            report["kind"].as_str().unwrap_or("?"),
            report["contract_version"].as_str().unwrap_or("?"),
            if passed { "certified" } else { "FAILED" }
        );
        for failure in report["failures"].as_array().into_iter().flatten() {
            println!(
                "  golden input {}: {} {}",
                failure["input"], failure["code"], failure["message"]
            );
            failed.push(format!("{}: {}", report["kind"], failure["message"]));
        }
    }
    if !failed.is_empty() {
        bail!("{name} is not certified:\n  {}", failed.join("\n  "));
    }
    Ok(())
}

/// Runs the Worker's cron `passes` times (`GET /__scheduled`, which `wrangler dev
/// --test-scheduled` serves): each pass certifies a few of the (kind, provider) pairs
/// due, as the deployed cron does once a minute.
pub(crate) fn scheduled_passes(url: &str, passes: u32) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let http = reqwest::Client::new();
        for _ in 0..passes {
            let reply = http
                .get(format!("{url}/__scheduled"))
                .query(&[("cron", "* * * * *")])
                .send()
                .await?;
            if !reply.status().is_success() {
                bail!("the cron answered {}", reply.status());
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::project_root;

    fn provider(model: &str, max: Option<u64>) -> ProviderConfig {
        ProviderConfig {
            name: "primary".into(),
            base_url: "http://127.0.0.1:1/v1".into(),
            model: model.into(),
            api_key_secret: None,
            timeout_ms: 1000,
            abandon_after_ms: None,
            max_prompt_tokens: max,
            stream: false,
            total_timeout_ms: None,
            models: Default::default(),
            key_header: None,
            headers: Default::default(),
            secret_headers: Default::default(),
            json_form: Default::default(),
        }
    }

    #[test]
    fn counts_every_golden_prompt_of_every_kind_naming_the_provider() {
        let kinds = kinds(&project_root()).unwrap();
        let (tokenizer, counts) = count_prompts(&provider("gpt-4o", Some(10)), &kinds).unwrap();
        assert_eq!(tokenizer, "the tokenizer of gpt-4o");
        let expected: usize = kinds.iter().map(|k| k.golden().count()).sum();
        assert_eq!(counts.len(), expected);
        // Every message is counted: the system message alone is a score of tokens or
        // more, and a real count is far below the prompt's characters.
        let chars = |c: &PromptCount| {
            let kind = kinds.iter().find(|k| k.name() == c.kind).unwrap();
            let input = kind.golden().nth(c.golden).unwrap().0;
            kind.render_messages(input)
                .iter()
                .map(|(_, m)| m.chars().count())
                .sum::<usize>()
        };
        assert!(
            counts
                .iter()
                .all(|c| c.tokens > 20 && c.tokens * 2 < chars(c)),
            "{counts:?}"
        );
    }

    #[test]
    fn an_unknown_model_is_counted_as_an_estimate() {
        let kinds = kinds(&project_root()).unwrap();
        let (tokenizer, counts) = count_prompts(&provider("mock-small", None), &kinds).unwrap();
        assert!(tokenizer.contains("estimate"), "{tokenizer}");
        assert!(!counts.is_empty());
    }

    #[test]
    fn wrangler_toml_configures_primary_and_fallback() {
        let names: Vec<String> = providers_of(&project_root().join("wrangler.toml"))
            .unwrap()
            .into_iter()
            .map(|p| p.name)
            .collect();
        assert_eq!(names, ["primary", "fallback"]);
    }
}
