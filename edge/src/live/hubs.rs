//! The Worker's side of the hubs, as a client: the store's notifications, a call's
//! hand-off of its text, and a stream's subscription. Each is one request to the hub of
//! its job, on the stub's own `fetch`.

use super::frame::frame;
use super::BINDING;
use crate::error::{ApiResult, AppError};
use crate::pacing::HubAnswer;
use futures_util::future::LocalBoxFuture;
use onceclick_protocol::live::{Place, Position};
use wasm_bindgen::{JsCast, JsValue};
use worker::js_sys::{Function, Object, Promise, Reflect};
use worker::wasm_bindgen_futures::JsFuture;
use worker::{Env, ObjectNamespace, WebSocket};

/// The Worker's side of the hubs: the store's [`crate::host::Notify`], and a stream's
/// subscription.
pub(crate) struct Hubs {
    namespace: ObjectNamespace,
}

impl Hubs {
    /// The hubs, if this deployment has the binding.
    pub(crate) fn from_env(env: &Env) -> Option<Self> {
        env.durable_object(BINDING)
            .ok()
            .map(|namespace| Self { namespace })
    }

    /// One request to the hub of `job_id`, on the stub's own `fetch` with a plain init
    /// object (as `places.rs` calls shards, for the Worker's size).
    async fn send(
        &self,
        job_id: &str,
        path: &str,
        init: &Object,
    ) -> std::result::Result<JsValue, String> {
        let text = |e: JsValue| format!("{e:?}");
        let stub: JsValue = self
            .namespace
            .id_from_name(job_id)
            .and_then(|id| id.get_stub())
            .map_err(|e| e.to_string())?
            .into_rpc();
        let fetch: Function = Reflect::get(&stub, &"fetch".into())
            .map_err(text)?
            .dyn_into()
            .map_err(text)?;
        let url = JsValue::from_str(&format!("https://live{path}"));
        let promise: Promise = fetch
            .call2(&stub, &url, init)
            .map_err(text)?
            .dyn_into()
            .map_err(text)?;
        JsFuture::from(promise).await.map_err(text)
    }

    /// Hands the hub of `job_id` the piece of attempt `n`'s text that begins at code
    /// point `offset`.
    pub(crate) async fn text(
        &self,
        job_id: &str,
        n: u32,
        attempt_id: &str,
        offset: u64,
        text: &str,
        fault: Option<&str>,
    ) -> std::result::Result<HubAnswer, String> {
        let show = |e: JsValue| format!("{e:?}");
        let init = post(text)?;
        let mut path = format!("/text?attempt={attempt_id}&n={n}&offset={offset}");
        if let Some(fault) = fault {
            path.push_str("&fault=");
            path.push_str(fault);
        }
        let reply = self.send(job_id, &path, &init).await?;
        let status = status_of(&reply);
        let body: Promise = Reflect::get(&reply, &"text".into())
            .and_then(|f| f.dyn_into::<Function>())
            .and_then(|f| f.call0(&reply))
            .and_then(|p| p.dyn_into())
            .map_err(show)?;
        let body = JsFuture::from(body).await.map_err(show)?;
        let have = body.as_string().and_then(|b| Position::parse(&b));
        match (status as u16, have) {
            (410, _) => Ok(HubAnswer::Stop),
            (200 | 409, Some(have)) => Ok(HubAnswer::Have(have.0)),
            _ => Err(format!("the hub answered {status}: {body:?}")),
        }
    }

    /// Opens a WebSocket to the hub of `job_id` for a stream at `since`: the hub sends
    /// the text it has past that place, then every newer change and piece of text it
    /// hears of. `429 too_many_subscribers` when the job has its fill of streams.
    pub(crate) async fn subscribe(&self, job_id: &str, since: &Place) -> ApiResult<WebSocket> {
        let unavailable = |why: String| AppError::unavailable(format!("live hub: {why}"));
        let init = Object::new();
        let headers = Object::new();
        let set = |o: &Object, k: &str, v: &str| {
            Reflect::set(o, &k.into(), &v.into()).map_err(|e| unavailable(format!("{e:?}")))
        };
        set(&headers, "Upgrade", "websocket")?;
        Reflect::set(&init, &"headers".into(), &headers)
            .map_err(|e| unavailable(format!("{e:?}")))?;
        let path = format!("/subscribe?job={job_id}&since={since}");
        let reply = self.send(job_id, &path, &init).await.map_err(unavailable)?;
        let status = status_of(&reply);
        if status == 429.0 {
            return Err(AppError::new(
                onceclick_protocol::ErrorCode::TooManySubscribers,
                format!("job {job_id} has as many live streams open as one job may; close one, or retry later"),
            )
            .with_job(job_id)
            .retry_after(5));
        }
        let socket = Reflect::get(&reply, &"webSocket".into()).unwrap_or(JsValue::NULL);
        if socket.is_null() || socket.is_undefined() {
            return Err(unavailable(format!(
                "the hub answered {status} without a WebSocket"
            )));
        }
        Ok(WebSocket::from(
            socket.unchecked_into::<worker::web_sys::WebSocket>(),
        ))
    }
}

/// The init of a `POST` of `body` to a hub.
fn post(body: &str) -> std::result::Result<Object, String> {
    let show = |e: JsValue| format!("{e:?}");
    let init = Object::new();
    Reflect::set(&init, &"method".into(), &"POST".into()).map_err(show)?;
    Reflect::set(&init, &"body".into(), &body.into()).map_err(show)?;
    Ok(init)
}

/// The status of a hub's answer (a JS `Response`), or 0 if it has none.
fn status_of(reply: &JsValue) -> f64 {
    Reflect::get(reply, &"status".into())
        .ok()
        .and_then(|s| s.as_f64())
        .unwrap_or(0.0)
}

/// The store's notifier for this deployment: its hubs, or none without the binding.
pub(crate) fn notifier(env: &Env) -> Option<std::rc::Rc<dyn crate::host::Notify>> {
    Hubs::from_env(env).map(|hubs| std::rc::Rc::new(hubs) as std::rc::Rc<dyn crate::host::Notify>)
}

impl crate::host::Notify for Hubs {
    fn notify<'a>(
        &'a self,
        job_id: &'a str,
        seq: u64,
        doc: &'a str,
    ) -> LocalBoxFuture<'a, std::result::Result<(), String>> {
        Box::pin(async move {
            let init = post(&frame(seq, doc))?;
            self.send(job_id, "/notify", &init).await.map(|_| ())
        })
    }
}
