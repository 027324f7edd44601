//! The Worker's side of the hubs, as a client: the store's notifications, a stream's
//! subscription, and a call's connection for its text (`line.rs`). Each is one request
//! to the hub of its job, on the stub's own `fetch`.

use super::frame::frame;
use super::BINDING;
use crate::error::{ApiResult, AppError};
use futures_util::future::LocalBoxFuture;
use onceclick_protocol::live::Place;
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
    /// object (as `places.rs` calls shards, for the Worker's size): sent at once, its
    /// answer the promise's.
    fn request(&self, job_id: &str, path: &str, init: &Object) -> Result<Promise, String> {
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
        fetch
            .call2(&stub, &url, init)
            .map_err(text)?
            .dyn_into()
            .map_err(text)
    }

    async fn send(&self, job_id: &str, path: &str, init: &Object) -> Result<JsValue, String> {
        let request = self.request(job_id, path, init)?;
        JsFuture::from(request).await.map_err(|e| format!("{e:?}"))
    }

    /// Asks the hub of `job_id` for a WebSocket at `path`: the request is sent at once,
    /// and its answer read with [`socket_of`].
    pub(crate) fn upgrade(&self, job_id: &str, path: &str) -> Result<JsFuture, String> {
        let show = |e: JsValue| format!("{e:?}");
        let (init, headers) = (Object::new(), Object::new());
        Reflect::set(&headers, &"Upgrade".into(), &"websocket".into()).map_err(show)?;
        Reflect::set(&init, &"headers".into(), &headers).map_err(show)?;
        self.request(job_id, path, &init).map(JsFuture::from)
    }

    /// Opens a WebSocket to the hub of `job_id` for a stream at `since`: the hub sends
    /// the text it has past that place, then every newer change and piece of text it
    /// hears of. `429 too_many_subscribers` when the job has its fill of streams.
    pub(crate) async fn subscribe(&self, job_id: &str, since: &Place) -> ApiResult<WebSocket> {
        let unavailable = |why: String| AppError::unavailable(format!("live hub: {why}"));
        let path = format!("/subscribe?job={job_id}&since={since}");
        let reply = self.upgrade(job_id, &path).map_err(unavailable)?;
        let reply = reply.await.map_err(|e| unavailable(format!("{e:?}")))?;
        if status_of(&reply) == 429.0 {
            return Err(AppError::new(
                onceclick_protocol::ErrorCode::TooManySubscribers,
                format!("job {job_id} has as many live streams open as one job may; close one, or retry later"),
            )
            .with_job(job_id)
            .retry_after(5));
        }
        socket_of(&reply).map_err(unavailable)
    }
}

/// The WebSocket of a hub's answer to [`Hubs::upgrade`], or why it has none.
pub(crate) fn socket_of(reply: &JsValue) -> Result<WebSocket, String> {
    let socket = Reflect::get(reply, &"webSocket".into()).unwrap_or(JsValue::NULL);
    if socket.is_null() || socket.is_undefined() {
        return Err(format!(
            "the hub answered {} without a WebSocket",
            status_of(reply)
        ));
    }
    Ok(WebSocket::from(
        socket.unchecked_into::<worker::web_sys::WebSocket>(),
    ))
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
            self.send(job_id, "/notify", &init).await.map(drop)
        })
    }
}
