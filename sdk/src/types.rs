//! The TypeScript declarations of the package, the option types that name them, and
//! the readers of those options.

use crate::http::Policy;
use std::cell::RefCell;
use std::rc::Rc;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::AbortSignal;

#[wasm_bindgen(typescript_custom_section)]
const TYPES: &'static str = r#"
export type JobStatus = "queued" | "running" | "unknown" | "failed" | "succeeded" | "cancelled";
export type AttemptState = "starting" | "running" | "succeeded" | "failed" | "unknown" | "abandoned" | "cancelled" | "superseded";
export type ErrorCode =
  | "unauthorized" | "forbidden" | "not_found" | "method_not_allowed"
  | "idempotency_key_missing" | "idempotency_key_invalid" | "payload_too_large" | "invalid_json" | "invalid_query"
  | "invalid_last_event_id" | "unknown_kind" | "invalid_input" | "unknown_provider" | "idempotency_key_reused"
  | "attempt_in_flight" | "attempt_unresolved" | "job_finished" | "attempt_not_unknown"
  | "provider_not_certified" | "precondition_failed" | "contract_violation"
  | "rate_limited" | "stream_rate_limited" | "too_many_subscribers" | "service_unavailable" | "internal"
  | "network" | "aborted" | "timeout" | "invalid_argument" | "invalid_response"
  /** Only from the package's server build (`node` condition): no browser to run in. */
  | "unsupported_environment"
  /** An answer that was not problem+json (say, a proxy's 502): its bare status. */
  | `http_${number}`;
export interface AttemptError { code: string; message: string; retryable: boolean }
export interface Attempt {
  id: string; n: number; provider: string; state: AttemptState;
  started_at: string; finished_at: string | null; error: AttemptError | null;
  /** What its provider stated it billed for its answer, once it answered. */
  tokens: { prompt: number; completion: number } | null;
}
export interface Job<Result = unknown, Input = unknown> {
  id: string; kind: string; status: JobStatus; version: number; input: Input;
  provider: string; result: Result | null; completed_by: string | null;
  created_at: string; updated_at: string; attempts: Attempt[];
}
/** Anything with the methods of `localStorage`. */
export interface StorageLike {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
  removeItem(key: string): void;
  key(index: number): string | null;
  readonly length: number;
}
export interface RetryInfo { attempt: number; delayMs: number; code: string; status?: number }
export interface ClientOptions {
  /** The API's origin, e.g. "https://api.example.com". */
  baseUrl: string;
  /** A bearer token; or give `getToken`. */
  token?: string;
  /** Called before each call; may return a promise. */
  getToken?: () => string | Promise<string>;
  /**
   * `localStorage` by default; `null` keeps keys in memory only. A key is kept as long
   * as its job: until a submit, wait, cancel or retry sees the job `succeeded` or
   * `cancelled`, or `forget` is called. It never expires by age.
   */
  storage?: StorageLike | null;
}
export interface SubmitOptions {
  /** Naming the kind's primary provider is the same intent as naming none. */
  provider?: string;
  /** Aborts this submit only: a request shared with other submits goes on for them. */
  signal?: AbortSignal;
  /** Called before each retry of the request this submit waits on. */
  onRetry?: (info: RetryInfo) => void;
}
/** A piece of an attempt's streamed text, as `onDelta` gets it: new text only, never twice. */
export interface TextDelta {
  attemptId: string;
  /** The code points (not UTF-16 units) of the attempt's text before this piece. */
  offset: number;
  text: string;
}
export interface WaitOptions {
  signal?: AbortSignal;
  /** Called with the job once per change, in order. */
  onUpdate?: (job: Job) => void;
  /**
   * A provider that streams: the text of the attempt followed, whole, each time it
   * grows. It follows the first attempt that streams until the job names its winner,
   * then the winner (a hedge's losing text is not shown). When the attempt followed
   * ends without winning (failed, abandoned) and no other has text, it is given `""`
   * (and, for a JSON answer, `onPartial` `{}`): a failover's next attempt starts from nothing. A stop (`cancelled`) leaves the text as it was. A
   * wait that begins late, in a reload or another tab, gets the text so far first, as
   * soon as its first document says which attempts still stream. A job that succeeded ends
   * with its winner's text whole: where the text seen is not the whole answer (none
   * seen, or its tail missed on a reconnect), the result is given once in its place: a
   * text answer's text, a JSON answer's JSON.
   */
  onText?: (text: string, info: { attemptId: string }) => void;
  /** For a kind whose answer is JSON: with `onText`'s text, the object it begins, closed and parsed (best effort, like a partial object). A text answer's text (one that does not begin with `{`) never reaches it. */
  onPartial?: (partial: unknown) => void;
  /** Every attempt's pieces, as they come (a hedge's two attempts both). */
  onDelta?: (delta: TextDelta) => void;
  /** Reject with code "timeout" after this long. */
  timeoutMs?: number;
  /**
   * Follow the job live (the default), on the client's one connection for every job it
   * waits on, or poll `GET /v1/jobs/{id}` with `ETag` (`false`). The stream falls back
   * to polling by itself, once said in the console:
   * on a 404 or 405 (a server without it), on `too_many_subscribers` (that job alone), on
   * `stream_rate_limited` (the owner's stream opens; creates have their own limit), after
   * failures in a row, and when a connection says nothing within `firstEventMs`.
   */
  live?: boolean;
  /**
   * How long a new stream connection may stay silent (no answer, or no first event or
   * comment after it) before polling takes over (3000);
   * the wait that opens the client's connection sets it for that connection.
   */
  firstEventMs?: number;
}
/** A retry() sends its own Idempotency-Key: a resend after a lost answer gets the same attempt. */
export interface RetryOptions { provider?: string; signal?: AbortSignal; onRetry?: (info: RetryInfo) => void }
export interface ForgetOptions { provider?: string }
export interface IdempotentFetchOptions {
  /** Names the user's intent: one key per intent string. */
  intent: string;
  storage?: StorageLike | null;
  signal?: AbortSignal;
  onRetry?: (info: RetryInfo) => void;
  /** How long a stored key is reused, in hours (the server's retention; default 24). */
  retentionHours?: number;
}
"#;

#[wasm_bindgen]
extern "C" {
    /// `ClientOptions` in TypeScript.
    #[wasm_bindgen(typescript_type = "ClientOptions")]
    pub type ClientOptions;
    /// `SubmitOptions` in TypeScript.
    #[wasm_bindgen(typescript_type = "SubmitOptions")]
    pub type SubmitOptions;
    /// `WaitOptions` in TypeScript.
    #[wasm_bindgen(typescript_type = "WaitOptions")]
    pub type WaitOptions;
    /// `RetryOptions` in TypeScript.
    #[wasm_bindgen(typescript_type = "RetryOptions")]
    pub type RetryOptions;
    /// `ForgetOptions` in TypeScript.
    #[wasm_bindgen(typescript_type = "ForgetOptions")]
    pub type ForgetOptions;
    /// `IdempotentFetchOptions` in TypeScript.
    #[wasm_bindgen(typescript_type = "IdempotentFetchOptions")]
    pub type IdempotentFetchOptions;
}

/// `options[name]` as a string, if it is one.
pub(crate) fn option_string(options: &JsValue, name: &str) -> Option<String> {
    crate::js::get_string(options, name)
}

/// `options.signal`, if it is an `AbortSignal`.
pub(crate) fn option_signal(options: &JsValue) -> Option<AbortSignal> {
    crate::js::get(options, "signal").dyn_into().ok()
}

/// `options[name]`, if it is a function.
pub(crate) fn option_function(options: &JsValue, name: &str) -> Option<js_sys::Function> {
    crate::js::get(options, name).dyn_into().ok()
}

/// The `signal` and `onRetry` of `options`, as the policy of its calls.
pub(crate) fn policy(options: &JsValue) -> Policy {
    Policy {
        signal: option_signal(options),
        on_retry: Rc::new(RefCell::new(
            option_function(options, "onRetry").into_iter().collect(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use onceclick_protocol::{AttemptState, ErrorCode, JobStatus};

    #[test]
    fn typescript_names_every_code_and_state() {
        // The TypeScript section is consumed by the macro; read it from the source.
        const TYPES: &str = include_str!("types.rs");
        for code in ErrorCode::ALL {
            assert!(TYPES.contains(&format!("\"{}\"", code.as_str())), "{code}");
        }
        for status in JobStatus::ALL {
            assert!(
                TYPES.contains(&format!("\"{}\"", status.as_str())),
                "{status:?}"
            );
        }
        for state in AttemptState::ALL {
            assert!(
                TYPES.contains(&format!("\"{}\"", state.as_str())),
                "{state:?}"
            );
        }
    }
}
