//! Provider configuration: the `PROVIDERS` var, a JSON array.

pub use onceclick_protocol::contract::ProviderConfig;
use std::cell::RefCell;
use std::rc::Rc;

/// The providers this deployment configures. A `PROVIDERS` that does not parse is a
/// deployment error, not a client's: reported as internal.
pub fn configured(
    host: &dyn crate::host::Host,
) -> crate::error::ApiResult<Rc<Vec<ProviderConfig>>> {
    let text = host.var("PROVIDERS").unwrap_or_else(|| "[]".to_owned());
    PARSED.with(|parsed| {
        if let Some((seen, list)) = &*parsed.borrow() {
            if *seen == text {
                return Ok(list.clone());
            }
        }
        let list =
            Rc::new(ProviderConfig::parse_list(&text).map_err(crate::error::AppError::internal)?);
        *parsed.borrow_mut() = Some((text, list.clone()));
        Ok(list)
    })
}

thread_local! {
    /// `PROVIDERS` parsed once per isolate (the last text seen, and its list): it is
    /// read on every create and every dispatch, and changes only with a deploy.
    static PARSED: RefCell<Option<(String, Rc<Vec<ProviderConfig>>)>> = const { RefCell::new(None) };
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
