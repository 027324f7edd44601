//! What one `wait` shows of its job: every change (`onUpdate`), and the text its
//! attempts stream (`onDelta`, `onText`, `onPartial`).
//!
//! The pieces that reach a wait are already trimmed to what it lacks (`watch.rs`), so
//! each attempt's text here only grows, and each piece begins where it ends. `onText`
//! follows one attempt: the first that streams, until the job names its winner
//! (`completed_by`), which it then follows; an attempt followed that ends without
//! winning hands over to one still running, in the order their text came; with none
//! to hand over to, its text is withdrawn (`onText("")`), so that it is not left on
//! screen as if it were still being written (but a stop's stays). A piece of an
//! attempt that the last document shows ended is never followed.
//!
//! Nothing is shown before the wait's first document: a wait that begins late is given
//! the text so far first, then the document, and that text may be an attempt's that
//! has already ended (a failed one, before the retry this wait follows). Its first
//! document says which of them still stream.

use crate::js;
use crate::watch::status_of;
use onceclick_protocol::JobStatus;
use wasm_bindgen::JsValue;

pub(crate) struct Show {
    on_update: Option<js_sys::Function>,
    on_text: Option<js_sys::Function>,
    on_partial: Option<js_sys::Function>,
    on_delta: Option<js_sys::Function>,
    /// Each attempt's text so far, in the order their first pieces came.
    texts: Vec<(String, String)>,
    /// The attempt whose text `onText` shows.
    followed: Option<String>,
    /// The job's last document: only an attempt it shows still streaming is followed
    /// (none before the first document).
    last: Option<JsValue>,
    /// `onPartial` has been given a JSON answer's partial (so a failover's empty text
    /// gives it `{}`; a text answer's never does).
    partial_given: std::cell::Cell<bool>,
}

impl Show {
    /// The callbacks of the wait's `options`.
    pub(crate) fn of(options: &JsValue) -> Show {
        let f = |name| crate::types::option_function(options, name);
        Show {
            on_update: f("onUpdate"),
            on_text: f("onText"),
            on_partial: f("onPartial"),
            on_delta: f("onDelta"),
            texts: Vec::new(),
            followed: None,
            last: None,
            partial_given: Default::default(),
        }
    }

    /// A piece of `attempt`'s text, at `offset` code points (where its text so far
    /// ends).
    pub(crate) fn piece(&mut self, attempt: &str, offset: f64, text: &str) {
        if let Some(on_delta) = &self.on_delta {
            let delta = js::object(&[
                ("attemptId", attempt.into()),
                ("offset", offset.into()),
                ("text", text.into()),
            ]);
            let _ = on_delta.call1(&JsValue::NULL, &delta);
        }
        match self.texts.iter_mut().find(|(a, _)| a == attempt) {
            Some((_, have)) => have.push_str(text),
            None => self.texts.push((attempt.to_owned(), text.to_owned())),
        }
        if self.followed.is_none() && self.last.as_ref().is_some_and(|doc| streams(doc, attempt)) {
            self.followed = Some(attempt.to_owned());
        }
        if self.followed.as_deref() == Some(attempt) {
            self.show();
        }
    }

    /// A newer document of the job: `onUpdate`, then `onText` if the attempt it follows
    /// changed (the winner named, the one followed ended without winning, or, at the
    /// first document, the first of the attempts whose text came that still streams).
    pub(crate) fn job(&mut self, job: &JsValue) {
        if let Some(on_update) = &self.on_update {
            let _ = on_update.call1(&JsValue::NULL, job);
        }
        self.last = Some(job.clone());
        let next = match js::get_string(job, "completed_by") {
            Some(winner) => Some(winner),
            None if self.followed.as_deref().is_none_or(|a| !streams(job, a)) => self
                .texts
                .iter()
                .map(|(a, _)| a)
                .find(|a| streams(job, a))
                .cloned(),
            None => return,
        };
        if next == self.followed {
            return;
        }
        match std::mem::replace(&mut self.followed, next) {
            // The attempt followed ended without winning (failed, abandoned, cancelled
            // by an operator) and none that streams has text: its text is no longer one
            // that may win, and goes, as a reload would not show it either; the next
            // attempt's follows as it comes. A stop's text stays (the job `cancelled`).
            // (An attempt is followed only once it has text.)
            Some(ended)
                if self.followed.is_none() && status_of(job) != Some(JobStatus::Cancelled) =>
            {
                self.tell(&ended, "")
            }
            _ => self.show(),
        }
    }

    /// The document `wait` resolves to. A job that succeeded ends with its winner's text
    /// whole: if the text seen is not the whole answer (whole JSON; for a text answer,
    /// the result's text), the result is shown in its place, once: a text answer's
    /// text, a JSON answer's JSON. That is the case when the winner did not stream, when
    /// its text was dropped as the job settled before this wait began (a reload), and
    /// when its tail was missed (a reconnect as it settled, or a fall-back to polling).
    pub(crate) fn end(&mut self, job: &JsValue) {
        let result = js::get(job, "result");
        let whole = match result.as_string() {
            Some(text) if text != self.text() => Some(text),
            None if result.is_object() && js_sys::JSON::parse(self.text()).is_err() => {
                js_sys::JSON::stringify(&result).ok().map(String::from)
            }
            _ => None,
        };
        if let Some(text) = whole {
            let winner = js::get_string(job, "completed_by").unwrap_or_default();
            match self.texts.iter_mut().find(|(a, _)| *a == winner) {
                Some((_, have)) => *have = text,
                None => self.texts.push((winner.clone(), text)),
            }
            self.followed = Some(winner);
            self.show();
        }
    }

    /// The text of the attempt followed.
    fn text(&self) -> &str {
        let followed = self.followed.as_deref();
        self.texts
            .iter()
            .find(|(a, _)| Some(a.as_str()) == followed)
            .map_or("", |(_, text)| text)
    }

    /// `onText` and `onPartial` with the text of the attempt followed, if it has any.
    fn show(&self) {
        match (&self.followed, self.text()) {
            (Some(attempt), text) if !text.is_empty() => self.tell(attempt, text),
            _ => {}
        }
    }

    /// `onText(text, { attemptId: attempt })`, and `onPartial` with the JSON `text`
    /// begins: only a JSON answer's text (an object's, so one that begins with `{`), and
    /// `{}` for no text once a JSON answer's was given. A text answer that does not
    /// begin with `{` never reaches `onPartial` (it is for JSON kinds).
    fn tell(&self, attempt: &str, text: &str) {
        if let Some(on_text) = &self.on_text {
            let info = js::object(&[("attemptId", attempt.into())]);
            let _ = on_text.call2(&JsValue::NULL, &text.into(), &info);
        }
        if let Some(on_partial) = &self.on_partial {
            let text = match text.trim_start().chars().next() {
                None if self.partial_given.get() => "{",
                Some('{') => text,
                _ => return,
            };
            let partial = onceclick_protocol::partial::close(text)
                .and_then(|json| js_sys::JSON::parse(&json).ok());
            if let Some(partial) = partial {
                self.partial_given.set(true);
                let _ = on_partial.call1(&JsValue::NULL, &partial);
            }
        }
    }
}

/// Whether `job` shows `attempt` still able to stream: `starting`, `running`, or
/// `unknown` (its call may still be reading).
fn streams(job: &JsValue, attempt: &str) -> bool {
    let attempts = js_sys::Array::from(&js::get(job, "attempts"));
    attempts.iter().any(|a| {
        js::get_string(&a, "id").as_deref() == Some(attempt)
            && matches!(
                js::get_string(&a, "state").as_deref(),
                Some("starting" | "running" | "unknown")
            )
    })
}

#[cfg(all(test, target_arch = "wasm32"))]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;
    use wasm_bindgen::closure::Closure;
    use wasm_bindgen_test::wasm_bindgen_test;

    fn json(text: &str) -> JsValue {
        js_sys::JSON::parse(text).expect("test JSON")
    }

    /// The texts `onText` was given, in order.
    type Seen = Rc<RefCell<Vec<String>>>;

    /// Sets `options[name]` to a callback that records `as_text` of what it is given;
    /// the records, and the callback (to keep).
    fn record(
        options: &js_sys::Object,
        name: &str,
        as_text: fn(JsValue) -> String,
    ) -> (Seen, Closure<dyn Fn(JsValue)>) {
        let seen: Seen = Rc::default();
        let callback = {
            let seen = seen.clone();
            Closure::<dyn Fn(JsValue)>::new(move |value: JsValue| {
                seen.borrow_mut().push(as_text(value))
            })
        };
        js_sys::Reflect::set(options, &name.into(), callback.as_ref()).expect("set");
        (seen, callback)
    }

    /// The text `onText` is given.
    fn text_of(text: JsValue) -> String {
        text.as_string().unwrap_or_default()
    }

    /// The partial `onPartial` is given, as JSON text.
    fn json_of(partial: JsValue) -> String {
        js_sys::JSON::stringify(&partial)
            .map(String::from)
            .unwrap_or_default()
    }

    /// A `Show` whose `onText` records each text it is given (and the callback, to keep).
    fn recording() -> (Show, Seen, Closure<dyn Fn(JsValue)>) {
        let options = js_sys::Object::new();
        let (seen, on_text) = record(&options, "onText", text_of);
        (Show::of(&options), seen, on_text)
    }

    const RUNNING: &str = r#"{"id": "job_1", "status": "running",
        "attempts": [{"id": "att_a", "state": "running"}, {"id": "att_b", "state": "running"}]}"#;

    const SUCCEEDED: &str = r#"{"id": "job_1", "status": "succeeded", "completed_by": "att_a",
        "result": {"summary": "hello"},
        "attempts": [{"id": "att_a", "state": "succeeded"}, {"id": "att_b", "state": "failed"}]}"#;

    #[wasm_bindgen_test]
    fn a_winners_tail_missed_is_filled_by_the_result_at_the_end() {
        let (mut show, seen, _keep) = recording();
        show.job(&json(RUNNING));
        show.piece("att_a", 0.0, r#"{"summary": "hel"#);
        assert_eq!(seen.borrow().len(), 1);
        show.end(&json(SUCCEEDED));
        assert_eq!(
            seen.borrow().last().map(String::as_str),
            Some(r#"{"summary":"hello"}"#),
            "the last onText is the whole result, not the text cut short: {:?}",
            seen.borrow()
        );
    }

    #[wasm_bindgen_test]
    fn a_text_answers_tail_missed_is_filled_by_its_text_and_never_reaches_on_partial() {
        let options = js_sys::Object::new();
        let (seen, _on_text) = record(&options, "onText", text_of);
        let (partials, _on_partial) = record(&options, "onPartial", json_of);
        let mut show = Show::of(&options);
        show.job(&json(RUNNING));
        show.piece("att_a", 0.0, "Bonjour, le mon");
        // A failover's reset, then the winner: a text answer never gives a partial.
        show.job(&json(
            r#"{"id": "job_1", "status": "running", "attempts": [
                {"id": "att_a", "state": "failed"}, {"id": "att_b", "state": "running"}]}"#,
        ));
        show.piece("att_b", 0.0, "[Brouillon] Bonjour");
        show.end(&json(
            r#"{"id": "job_1", "status": "succeeded", "completed_by": "att_b",
                "result": "[Brouillon] Bonjour, le monde.",
                "attempts": [{"id": "att_a", "state": "failed"}, {"id": "att_b", "state": "succeeded"}]}"#,
        ));
        assert_eq!(
            seen.borrow().last().map(String::as_str),
            Some("[Brouillon] Bonjour, le monde."),
            "the text itself, not its JSON: {:?}",
            seen.borrow()
        );
        assert!(partials.borrow().is_empty(), "{:?}", partials.borrow());
    }

    #[wasm_bindgen_test]
    fn a_winners_whole_text_is_not_shown_twice_at_the_end() {
        let (mut show, seen, _keep) = recording();
        show.job(&json(RUNNING));
        show.piece("att_a", 0.0, r#"{"summary": "hello"}"#);
        show.end(&json(SUCCEEDED));
        assert_eq!(*seen.borrow(), vec![r#"{"summary": "hello"}"#.to_owned()]);
    }

    #[wasm_bindgen_test]
    fn a_loser_streamed_first_hands_on_to_the_winner_at_the_end() {
        let (mut show, seen, _keep) = recording();
        show.job(&json(RUNNING));
        show.piece("att_b", 0.0, r#"{"summary": "other"#);
        assert_eq!(
            seen.borrow().len(),
            1,
            "the first attempt that streams is followed"
        );
        show.end(&json(SUCCEEDED));
        assert_eq!(
            seen.borrow().last().map(String::as_str),
            Some(r#"{"summary":"hello"}"#)
        );
    }

    #[wasm_bindgen_test]
    fn a_wait_after_a_retry_never_shows_the_failed_attempts_text() {
        let (mut show, seen, _keep) = recording();
        // A wait that begins after the retry is given the text so far first: the
        // failed attempt's. Then the document, which says it failed.
        show.piece("att_a", 0.0, "cut off");
        show.job(&json(
            r#"{"id": "job_1", "status": "running", "attempts": [
                {"id": "att_a", "state": "failed"}, {"id": "att_b", "state": "starting"}]}"#,
        ));
        assert!(seen.borrow().is_empty(), "{:?}", seen.borrow());
        show.piece("att_b", 0.0, "new");
        assert_eq!(*seen.borrow(), vec!["new".to_owned()]);
    }

    #[wasm_bindgen_test]
    fn a_failed_attempts_text_is_withdrawn_until_the_next_attempt_streams() {
        let options = js_sys::Object::new();
        let (seen, _on_text) = record(&options, "onText", text_of);
        let (partials, _on_partial) = record(&options, "onPartial", json_of);
        let mut show = Show::of(&options);
        show.job(&json(RUNNING));
        // A JSON answer's text: it reaches `onPartial` as the object it begins.
        show.piece("att_a", 0.0, r#"{"s": "cut"#);
        assert_eq!(
            partials.borrow().last().map(String::as_str),
            Some(r#"{"s":"cut"}"#)
        );
        // A failover: the attempt followed failed, the next has no text yet.
        show.job(&json(
            r#"{"id": "job_1", "status": "running", "attempts": [
                {"id": "att_a", "state": "failed"}, {"id": "att_c", "state": "starting"}]}"#,
        ));
        assert_eq!(
            *seen.borrow(),
            vec![r#"{"s": "cut"#.to_owned(), String::new()]
        );
        assert_eq!(partials.borrow().last().map(String::as_str), Some("{}"));
        // The failed attempt's tail, resent by a reconnect: its text does not come back.
        show.piece("att_a", 3.0, " off");
        assert_eq!(seen.borrow().len(), 2, "{:?}", seen.borrow());
        show.piece("att_c", 0.0, "new");
        assert_eq!(seen.borrow().last().map(String::as_str), Some("new"));
    }

    #[wasm_bindgen_test]
    fn an_abandoned_attempts_text_is_withdrawn_while_another_runs() {
        let (mut show, seen, _keep) = recording();
        show.job(&json(RUNNING));
        show.piece("att_a", 0.0, "so far");
        show.job(&json(
            r#"{"id": "job_1", "status": "running", "attempts": [
                {"id": "att_a", "state": "abandoned"}, {"id": "att_b", "state": "running"}]}"#,
        ));
        assert_eq!(*seen.borrow(), vec!["so far".to_owned(), String::new()]);
    }

    #[wasm_bindgen_test]
    fn a_stopped_attempts_text_stays() {
        let (mut show, seen, _keep) = recording();
        show.job(&json(RUNNING));
        show.piece("att_a", 0.0, "so far");
        show.job(&json(
            r#"{"id": "job_1", "status": "cancelled", "attempts": [
                {"id": "att_a", "state": "cancelled"}]}"#,
        ));
        assert_eq!(*seen.borrow(), vec!["so far".to_owned()]);
    }

    #[wasm_bindgen_test]
    fn a_late_waits_text_so_far_is_shown_once_its_document_says_the_attempt_streams() {
        let (mut show, seen, _keep) = recording();
        show.piece("att_a", 0.0, "so far");
        assert!(seen.borrow().is_empty());
        show.job(&json(RUNNING));
        assert_eq!(*seen.borrow(), vec!["so far".to_owned()]);
        show.piece("att_a", 6.0, ", more");
        assert_eq!(
            seen.borrow().last().map(String::as_str),
            Some("so far, more")
        );
    }
}
