//! Provider configuration: the `PROVIDERS` var, a JSON array.

pub use onceclick_protocol::contract::ProviderConfig;
use onceclick_protocol::AttemptError;

/// The providers this deployment configures (`PROVIDERS`, read with the rest of the
/// configuration: `config.rs`). A list that does not parse is a deployment error, not
/// a client's: reported as internal.
pub fn configured(
    host: &dyn crate::host::Host,
) -> crate::error::ApiResult<std::rc::Rc<Vec<ProviderConfig>>> {
    host.config().providers()
}

/// The headers a call to `provider` carries beyond its body's: the key (in
/// `Authorization` as `Bearer KEY`, or alone in the provider's `key_header`) and the
/// extra headers, secrets read. A secret that is not set is the deployment's error,
/// `provider_misconfigured`, naming it: the call is never sent.
pub fn headers(
    provider: &ProviderConfig,
    host: &dyn crate::host::Host,
) -> Result<Vec<(String, String)>, AttemptError> {
    let secret = |name: &str| {
        host.secret(name).ok_or_else(|| {
            AttemptError::new(
                "provider_misconfigured",
                format!(
                    "the secret {name} that provider {} names is not set (wrangler secret put {name})",
                    provider.name
                ),
                false,
            )
        })
    };
    let mut headers = Vec::new();
    if let Some(name) = &provider.api_key_secret {
        let key = secret(name)?;
        headers.push(match provider.key_header.as_deref() {
            Some(header) if !header.eq_ignore_ascii_case("authorization") => {
                (header.to_owned(), key)
            }
            _ => ("Authorization".to_owned(), format!("Bearer {key}")),
        });
    }
    for (name, value) in provider.header_values() {
        headers.push((name.to_owned(), value.to_owned()));
    }
    for (name, secret_name) in provider.secret_header_names() {
        headers.push((name.to_owned(), secret(secret_name)?));
    }
    Ok(headers)
}

/// The secrets `provider` names that the host does not have.
pub fn missing_secrets(provider: &ProviderConfig, host: &dyn crate::host::Host) -> Vec<String> {
    provider
        .secrets()
        .filter(|name| host.secret(name).is_none())
        .map(str::to_owned)
        .collect()
}

/// The provider called `name`, if configured.
pub fn find<'a>(providers: &'a [ProviderConfig], name: &str) -> Option<&'a ProviderConfig> {
    providers.iter().find(|p| p.name == name)
}

/// The certification digest, for `kind`, of the provider called `name` (empty if not
/// configured).
pub fn digest(providers: &[ProviderConfig], name: &str, kind: &str) -> String {
    find(providers, name)
        .map(|p| p.digest_for(kind))
        .unwrap_or_default()
}
