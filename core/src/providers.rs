//! Provider configuration: the `PROVIDERS` var, a JSON array.

pub use onceclick_protocol::contract::ProviderConfig;

/// The providers this deployment configures (`PROVIDERS`, read with the rest of the
/// configuration: `config.rs`). A list that does not parse is a deployment error, not
/// a client's: reported as internal.
pub fn configured(
    host: &dyn crate::host::Host,
) -> crate::error::ApiResult<std::rc::Rc<Vec<ProviderConfig>>> {
    host.config().providers()
}

/// The provider's API key, from the wrangler secret its config names.
pub fn api_key(provider: &ProviderConfig, host: &dyn crate::host::Host) -> Option<String> {
    host.secret(provider.api_key_secret.as_deref()?)
}

/// The provider called `name`, if configured.
pub fn find<'a>(providers: &'a [ProviderConfig], name: &str) -> Option<&'a ProviderConfig> {
    providers.iter().find(|p| p.name == name)
}

/// The certification digest of the provider called `name` (empty if not configured).
pub fn digest(providers: &[ProviderConfig], name: &str) -> String {
    find(providers, name)
        .map(ProviderConfig::digest)
        .unwrap_or_default()
}
