//! Provider configuration: the `PROVIDERS` var, a JSON array.

use serde::{Deserialize, Serialize};

/// One OpenAI-compatible provider.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProviderConfig {
    pub(crate) name: String,
    /// `POST {base_url}/chat/completions` is called.
    pub(crate) base_url: String,
    pub(crate) model: String,
    /// The name of the wrangler secret holding the API key, if the provider needs one.
    #[serde(default)]
    pub(crate) api_key_secret: Option<String>,
    /// How long one call may take before the attempt becomes `unknown`.
    pub(crate) timeout_ms: u64,
    /// The provider promises to stop all work this long after a call.
    #[serde(default)]
    pub(crate) abandon_after_ms: Option<u64>,
    /// The largest prompt the provider takes, in its own tokens.
    #[serde(default)]
    pub(crate) max_prompt_tokens: Option<u64>,
}

/// Parses the `PROVIDERS` var. A deployment error, not a client's: reported as internal.
pub(crate) fn parse(text: &str) -> Result<Vec<ProviderConfig>, String> {
    serde_json::from_str(text).map_err(|e| format!("PROVIDERS does not parse: {e}"))
}

/// The providers this deployment configures.
pub(crate) fn configured(env: &worker::Env) -> crate::error::ApiResult<Vec<ProviderConfig>> {
    let text = env
        .var("PROVIDERS")
        .map(|v| v.to_string())
        .unwrap_or_else(|_| "[]".to_owned());
    parse(&text).map_err(crate::error::AppError::internal)
}

impl ProviderConfig {
    /// The provider's API key, from the wrangler secret its config names.
    pub(crate) fn api_key(&self, env: &worker::Env) -> Option<String> {
        let name = self.api_key_secret.as_deref()?;
        env.secret(name).ok().map(|s| s.to_string())
    }
}

/// The provider called `name`, if configured.
pub(crate) fn find<'a>(providers: &'a [ProviderConfig], name: &str) -> Option<&'a ProviderConfig> {
    providers.iter().find(|p| p.name == name)
}
