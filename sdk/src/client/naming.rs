//! The name an intent's key is stored under: whether the provider a submit names is
//! its kind's primary (`GET /v1/providers`, asked once per client and never guessed),
//! and where the key is when that primary has changed since the key was stored.

use super::Client;
use crate::call::Call;
use crate::error::OnceclickError;
use crate::js;
use crate::js::future_to_promise;
use crate::keys::Intent;
use js_sys::Promise;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::AbortSignal;

/// How often a submit that names a provider asks `GET /v1/providers` (each ask already
/// retried as every call is) before it fails rather than guess the intent's name.
const LOOKUP_TRIES: u32 = 3;

/// The name of `kind`'s primary provider, read off `GET /v1/providers`.
fn primary_of(list: &JsValue, kind: &str) -> Option<String> {
    let providers: js_sys::Array = js::get(list, "providers").dyn_into().ok()?;
    providers
        .iter()
        .find(|p| js::get(&js::get(&js::get(p, "kinds"), kind), "primary").as_bool() == Some(true))
        .and_then(|p| js::get_string(&p, "name"))
}

impl Client {
    /// `provider`, or `None` when it names `kind`'s primary: naming the primary is the
    /// same intent as naming no provider. Reads `GET /v1/providers` (once per client).
    ///
    /// The answer decides the intent's name, so it is never guessed: a lookup that fails
    /// is asked again with backoff (inside `signal`), and if it still fails the submit
    /// fails, retryable, before any key is made or any request sent. A name guessed
    /// while the lookup was down would be another key, and so a second job, once it
    /// works again.
    pub(super) async fn as_named(
        &self,
        kind: &str,
        provider: Option<String>,
        signal: Option<&AbortSignal>,
    ) -> Result<Option<String>, OnceclickError> {
        let Some(provider) = provider else {
            return Ok(None);
        };
        let mut tries = 1;
        let list = loop {
            let listed = wasm_bindgen_futures::JsFuture::from(self.providers());
            match js::abortable(signal, listed).await? {
                Ok(list) => break list,
                Err(_) if tries < LOOKUP_TRIES => {
                    let pause = crate::http::delay_ms(tries, None, js_sys::Math::random());
                    js::abortable(signal, js::sleep(pause)).await?;
                    tries += 1;
                }
                Err(_) => return Err(self.lookup_failed()),
            }
        };
        let primary = primary_of(&list, kind);
        Ok((primary.as_deref() != Some(provider.as_str())).then_some(provider))
    }

    /// Why a submit naming a provider could not go out: the provider list would not load.
    /// Its own error, retryable (nothing was sent), unless the token is refused, which
    /// the create would be too.
    fn lookup_failed(&self) -> OnceclickError {
        match self.inner.lookup_error.borrow().clone() {
            Some(e) if matches!(e.status, Some(401 | 403)) => e,
            Some(e) => e.lookup(),
            None => OnceclickError::network("").lookup(),
        }
    }

    /// The promise of `GET /v1/providers`'s JSON, shared by every submit of this client.
    fn providers(&self) -> Promise {
        if let Some(asked) = self.inner.providers.borrow().clone() {
            return asked;
        }
        let client = self.clone();
        let asked = future_to_promise(async move {
            let answer = client.send(Call::get("/v1/providers")).await;
            let list = match answer {
                Ok(answer) if answer.status == 200 => answer.js_json().await,
                Ok(answer) => Err(answer.error().await),
                Err(e) => Err(e),
            };
            // A failure is not kept: the next submit asks again.
            list.inspect_err(|e| {
                client.inner.providers.replace(None);
                client.inner.lookup_error.replace(Some(e.clone()));
            })
        });
        self.inner.providers.replace(Some(asked.clone()));
        asked
    }

    /// The name an intent's key is stored under, and whether its request names the
    /// provider (else it leaves the provider out, as for the kind's primary).
    ///
    /// That is the intent's own name (see `Intent::name`), unless the kind's primary has
    /// changed since a submit naming `asked` stored this intent's key: then the key is
    /// where it was stored, so that a deploy that changes the primary never orphans the
    /// key of an open job.
    /// - `asked` is the primary now (`resolved` is `None`), and was not then: the key
    ///   is under the name that names it (looked at first). A key under the plain name
    ///   whose job runs on another provider is not this intent's;
    /// - `asked` is not the primary now, and was then: with no key under its own name,
    ///   the key is under the name without a provider, in an entry whose job runs on
    ///   `asked` (made by a submit that named it, or named none).
    pub(super) fn stored_name(
        &self,
        token: &str,
        kind: &str,
        input: &str,
        asked: Option<&str>,
        resolved: Option<&str>,
    ) -> (String, bool) {
        let name = |provider: Option<&str>| {
            Intent::Job {
                token,
                kind,
                input,
                provider,
            }
            .name()
        };
        let own = (name(resolved), resolved.is_some());
        let Some(asked) = asked else {
            return own;
        };
        match resolved {
            // `asked` is the primary now. A key stored under the name that names it was
            // made for `asked` by name, when it was not the primary: that one is this
            // intent's. So is one under the plain name, unless its job runs on another
            // provider (the primary of its day): then this intent is the one named.
            None => {
                let named = name(Some(asked));
                if self.inner.keys.get(&named).is_some() {
                    return (named, true);
                }
                match self.inner.keys.get(&own.0) {
                    Some(entry) if entry.provider.as_deref().is_some_and(|p| p != asked) => {
                        (named, true)
                    }
                    _ => own,
                }
            }
            Some(_) if self.inner.keys.get(&own.0).is_some() => own,
            Some(_) => {
                let plain = name(None);
                match self.inner.keys.get(&plain) {
                    Some(entry) if entry.provider.as_deref() == Some(asked) => (plain, false),
                    _ => own,
                }
            }
        }
    }
}
