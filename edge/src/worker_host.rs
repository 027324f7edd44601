//! The Worker's shell of the core's interface to its platform (`host.rs`): workers-rs
//! bindings of one request (or one queue batch, cron run or alarm).

use crate::host::{send, Host, ProviderCall};
use crate::message::{Dispatch, QUEUE};
use crate::outcome::CallOutcome;
use futures_util::future::LocalBoxFuture;
use onceclick_core::config::Config;
use serde_json::json;
use std::rc::Rc;

thread_local! {
    /// The core's configuration, as this isolate read it first.
    static CONFIG: std::cell::OnceCell<Rc<Config>> = const { std::cell::OnceCell::new() };
}

/// The core's configuration, read once per isolate: a deployment's vars change only
/// with a new isolate. What the Durable Objects read of it too.
pub(crate) fn config(env: &worker::Env) -> Rc<Config> {
    CONFIG.with(|config| {
        config
            .get_or_init(|| {
                Rc::new(Config::read(&|name| {
                    env.var(name).ok().map(|v| v.to_string())
                }))
            })
            .clone()
    })
}

/// The Worker's shell: workers-rs bindings of one request (or one queue batch, cron
/// run or alarm, which have no response to wait for).
pub(crate) struct WorkerHost<'a> {
    pub(crate) env: &'a worker::Env,
    pub(crate) ctx: Option<&'a worker::Context>,
    /// The subrequests made through this host: provider calls, queue sends and the
    /// connections of calls to their hubs (the store counts its own).
    pub(crate) made: std::cell::Cell<u32>,
}

impl<'a> WorkerHost<'a> {
    pub(crate) fn new(env: &'a worker::Env, ctx: Option<&'a worker::Context>) -> Self {
        Self {
            env,
            ctx,
            made: Default::default(),
        }
    }

    fn made(&self) {
        self.made.set(self.made.get() + 1);
    }
}

impl Host for WorkerHost<'_> {
    fn config(&self) -> Rc<Config> {
        config(self.env)
    }

    fn secret(&self, name: &str) -> Option<String> {
        self.env.secret(name).ok().map(|s| s.to_string())
    }

    fn enqueue(&self, message: Dispatch) -> LocalBoxFuture<'_, Result<(), String>> {
        self.made();
        Box::pin(async move {
            let queue = self.env.queue(QUEUE).map_err(|e| e.to_string())?;
            queue.send(message).await.map_err(|e| e.to_string())
        })
    }

    fn enqueue_after_response(&self, message: Dispatch) {
        let env = self.env.clone();
        let send = async move {
            let host = WorkerHost::new(&env, None);
            send(&host, message).await;
        };
        match self.ctx {
            Some(ctx) => ctx.wait_until(send),
            // Only a request has a response to send first (the queue consumer, the cron
            // and the alarm enqueue with `enqueue`, and wait). Should one come here, the
            // message is lost as a dead isolate's would be, said in the log, and the
            // reconciler sends it again.
            None => crate::log::error(json!({"event": "enqueue_failed",
                "cause": "enqueue_after_response outside a request"})),
        }
    }

    fn call<'a>(&'a self, call: ProviderCall<'a>) -> LocalBoxFuture<'a, CallOutcome> {
        let sink = call
            .job
            .filter(|_| call.provider.stream && call.hand_off_fault != Some("off"))
            .and_then(|(job_id, n)| {
                let hubs = crate::live::Hubs::from_env(self.env)?;
                Some(crate::live::SocketLink::new(
                    hubs,
                    (job_id, n, call.attempt_id),
                    &self.made,
                    call.hand_off_fault,
                ))
            });
        self.made();
        Box::pin(crate::openai::call(
            call.provider,
            call.headers,
            call.kind,
            call.input,
            call.attempt_id,
            sink,
            call.news,
        ))
    }

    fn sleep(&self, ms: u64) -> LocalBoxFuture<'static, ()> {
        Box::pin(worker::Delay::from(std::time::Duration::from_millis(ms)))
    }

    fn count_create(&self, owner: &str, event: &str, kind: &str, provider: &str) {
        crate::analytics::create(self.env, owner, event, kind, provider);
    }

    fn count_call(&self, event: &str, kind: &str, provider: &str, ms: f64) {
        crate::analytics::call(self.env, event, kind, provider, ms);
    }
}
