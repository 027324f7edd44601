//! What `wait` does between its start and its end: follows the job on the client's
//! live connection (`follow`, which starts the connection if none runs), and polls the
//! job with backoff and `ETag` where the stream cannot be had (`poll`).

use super::Client;
use crate::call::Call;
use crate::error::OnceclickError;
use crate::http::Policy;
use crate::js;
use crate::keys;
use crate::live;
use crate::text::Show;
use crate::watch::{self, waits_end, Update, Watching};
use std::cell::RefCell;
use wasm_bindgen::JsValue;

/// How long a new connection to the live stream may say nothing before `wait` polls
/// instead: the server writes its first event or comment at once, so a silence this
/// long is a proxy that buffers the stream (`WaitOptions.firstEventMs`).
pub(super) const FIRST_EVENT_MS: f64 = 3_000.0;

/// Where `follow` left a wait.
pub(super) enum Followed {
    /// The job as `wait` resolves to it.
    Settled(JsValue),
    /// The stream cannot be had: poll, from the position the stream had shown.
    Poll(Option<String>),
}

/// Takes a wait off the live connection when it ends, however it ends.
struct Leave<'a> {
    watching: &'a RefCell<Watching>,
    job_id: &'a str,
    number: u32,
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.watching.borrow_mut().unwatch(self.job_id, self.number);
    }
}

impl Client {
    /// Follows `job_id` on the client's one live connection, which this starts if none
    /// runs (`first_ms` then applies to it), until the job ends its wait or the stream
    /// cannot be had: then `Poll` with the position the stream had shown, from which
    /// polling goes on. Dropping this (an abort, a timeout) leaves the connection; the
    /// connection closes when no job is left.
    ///
    /// Each connection asks `getToken` again and sends each job's position, so nothing
    /// seen is shown twice and the latest document always comes. A stream that ends
    /// after it said something (the server's maximum duration) is reopened at once;
    /// failures in a row back off as calls do, and after as many as a call tries,
    /// polling takes over. So does a 404 or 405 (a server without the stream: the poll
    /// then answers for the job), a `too_many_subscribers` (for that job alone), and a
    /// connection that says nothing, not even its answer's head or its first comment,
    /// within `first_ms` (a proxy that buffers the stream).
    pub(super) async fn follow(&self, job_id: &str, show: &mut Show, first_ms: f64) -> Followed {
        let (number, mailbox, start) = self.inner.watching.borrow_mut().watch(job_id);
        let _leave = Leave {
            watching: &self.inner.watching,
            job_id,
            number,
        };
        if start {
            let client = self.clone();
            wasm_bindgen_futures::spawn_local(async move {
                let watching = client.inner.watching.clone();
                // The tabs that share a connection are one owner's; without a token the
                // connection fails alone, and its waits poll (which say why).
                let owner = client.token().await.map(|t| keys::sharing_owner(&t));
                let lead = client.clone().run_stream(first_ms);
                crate::share::run(
                    watching,
                    &client.inner.base_url,
                    owner.ok().as_deref(),
                    lead,
                )
                .await;
            });
        }
        loop {
            match watch::take(&mailbox).await {
                Update::Job(job) => {
                    self.seen_job(&job);
                    show.job(&job);
                    if waits_end(&job) {
                        return Followed::Settled(job);
                    }
                }
                Update::Text(attempt, offset, text) => show.piece(&attempt, offset, &text),
                Update::Poll(from) => return Followed::Poll(from),
            }
        }
    }

    /// Polls `GET /v1/jobs/{job_id}` until the job ends its wait, from the position
    /// `from` (as an `ETag`), showing each new document: every 250 ms after a change,
    /// backing off to 4 s while it answers 304.
    pub(super) async fn poll(
        &self,
        job_id: &str,
        policy: &Policy,
        show: &mut Show,
        from: Option<String>,
    ) -> Result<JsValue, OnceclickError> {
        let path = format!("/v1/jobs/{job_id}");
        let mut etag: Option<String> = from.as_deref().map(live::etag);
        let mut pause = 250.0;
        loop {
            let mut call = Call::get(&path).policy(policy);
            if let Some(etag) = &etag {
                call = call.header("If-None-Match", etag);
            }
            let answer = self.send(call).await?;
            if answer.status == 304 {
                pause = (pause * 1.5_f64).min(4000.0);
            } else {
                etag = answer.header("ETag");
                let job = self.job_answer(answer).await?;
                show.job(&job);
                if waits_end(&job) {
                    return Ok(job);
                }
                pause = 250.0;
            }
            js::sleep(pause).await;
        }
    }
}
