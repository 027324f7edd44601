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

/**
 * The kinds of your deployment, each as `{ input; result }`. Empty in the package: the
 * file that `cargo xtask kinds --types <path>` writes from `edge/kinds/*.json` fills it
 * (module augmentation), and then `submit`, `wait` and the hooks check a kind's name and
 * input and type its result. Without that file every name is a `string` and every input
 * and result `unknown`.
 */
export interface Kinds {}
/** A kind's name: a key of `Kinds` once the generated file fills it, else any string. */
export type KindName = [keyof Kinds] extends [never] ? string : Extract<keyof Kinds, string>;
/** Kind `K`'s input (`unknown` for a kind `Kinds` does not name). */
export type InputOf<K extends string> = K extends keyof Kinds ? (Kinds[K] extends { input: infer I } ? I : unknown) : unknown;
/** Kind `K`'s result: its output schema's type, or `string` for a text answer. */
export type ResultOf<K extends string> = K extends keyof Kinds ? (Kinds[K] extends { result: infer R } ? R : unknown) : unknown;
/** Every member optional, all the way down: the JSON a streamed answer has written so far. */
export type DeepPartial<T> = T extends readonly (infer E)[] ? DeepPartial<E>[] : T extends object ? { [P in keyof T]?: DeepPartial<T[P]> } : T;
/** What a streamed answer has written of kind `K`'s result: none for a text answer. */
export type PartialOf<K extends string> = K extends string ? (ResultOf<K> extends string ? never : DeepPartial<ResultOf<K>>) : never;
declare const kindOfJob: unique symbol;
/** This file exports only what it says it exports (not `kindOfJob`, which is a type's brand). */
export {};
/**
 * A job's id, which remembers its kind: `submit` gives one (`job.id`), and `wait`,
 * `cancel` and the hooks type the job they give by it. A plain `string` (an id from a
 * URL) is accepted too, with an untyped result.
 */
export type JobId<K extends string = string> = string & { readonly [kindOfJob]?: K };

/**
 * A job, as the API sends it (its fields are the wire's, so snake_case), with `failure`
 * added by the SDK. `Job<"summarize">` types `input` and `result` from the kind.
 */
export interface Job<K extends string = string> {
  id: JobId<K>; kind: K; status: JobStatus; version: number; input: InputOf<K>;
  provider: string; result: ResultOf<K> | null; completed_by: string | null;
  created_at: string; updated_at: string; attempts: Attempt[];
  /**
   * Why the job ended badly, when its status is `failed` or `unknown` (else `null`): the
   * attempt that decided it (for `unknown`, the attempt whose outcome is not known; for
   * `failed`, the newest that ended without an answer), with its error's code and
   * sentence. Derived by the SDK from `attempts`.
   */
  failure: JobFailure | null;
}
/**
 * `Job<K>` for each kind of `K`, as a union: `JobOf<"a" | "b">` is `Job<"a"> | Job<"b">`,
 * which `job.kind === "a"` narrows.
 */
export type JobOf<K extends string> = K extends string ? Job<K> : never;
/** A job of any of your kinds, narrowed by its `kind`: what an id from a URL gives. */
export type AnyJob = JobOf<KindName>;
/** Why a job ended badly: `Job.failure`. */
export interface JobFailure {
  /** The attempt's error code (`provider_timeout`, `provider_output_invalid`, …), or its state when it gave none. */
  code: string;
  /** The attempt's error, for a human. */
  message: string;
  /** The attempt that decided it. */
  attempt_id: string;
}

/**
 * What every call of the SDK rejects with (and `new Client` throws): a real `Error`, in
 * the browser build and in the server build alike. Branch on `code`.
 */
export declare class OnceclickError extends Error {
  /** As the SDK makes one (an app may, to stand in for the SDK in its own tests). */
  constructor(code: ErrorCode, message: string, status?: number, retryable?: boolean, jobId?: string, cause?: unknown);
  readonly name: "OnceclickError";
  /** The stable machine code. */
  readonly code: ErrorCode;
  /** The HTTP status, when the server answered. */
  readonly status: number | undefined;
  /** Whether the same call may succeed later (the SDK has already retried it). */
  readonly retryable: boolean;
  /** The job concerned, where known. */
  readonly jobId: string | undefined;
  /** What JS threw underneath (a `TypeError` of `fetch`), if anything. */
  readonly cause?: unknown;
  /** `OnceclickError [code]: message`. */
  toString(): string;
}

/** A client of one onceclick API. Make one per app (`await init()` first). */
export declare class Client {
  /** `new Client({ baseUrl, token | getToken, storage? })`; throws an `OnceclickError` (`invalid_argument`) without them. */
  constructor(options: ClientOptions);
  /**
   * Submits the intent `(kind, input)`: creates its job, or returns the one it already
   * has. Concurrent submits of one intent share one request; each keeps its own
   * `signal` (aborting one rejects only that one) and its own `onRetry`.
   */
  submit<K extends KindName>(kind: K, input: InputOf<K>, options?: SubmitOptions): Promise<Job<K>>;
  /**
   * Resolves to the job once it has finished (`succeeded`, `cancelled`) or needs a
   * decision (`failed`: ask for a new attempt; `unknown`: resolve or cancel; `failure`
   * says why), calling `onUpdate` once per change, in order. Follows the job's live
   * stream, reconnecting from its last position after a dropped connection; polls with
   * backoff and `ETag` where the stream cannot be had (see `WaitOptions`).
   */
  wait<K extends string>(jobId: JobId<K>, options?: WaitOptions<K>): Promise<Job<K>>;
  wait(jobId: string, options?: WaitOptions): Promise<AnyJob>;
  /**
   * Asks for a new attempt on the same job (the fallback button). Safe to retry: each
   * call sends its own `Idempotency-Key`, unchanged on every resend, so a resend after
   * a lost answer gets the attempt the first send made (200, replayed), never a second
   * one. It also sends `If-Match` with the job's ETag, so a click on a job that changed
   * since it was read is refused (412).
   */
  retry(jobId: string, options?: RetryOptions): Promise<Attempt>;
  /** The owner gives up: the job becomes `cancelled` and its key is freed. */
  cancel<K extends string>(jobId: JobId<K>, options?: CancelOptions): Promise<Job<K>>;
  cancel(jobId: string, options?: CancelOptions): Promise<AnyJob>;
  /** Forgets the key of the intent `(kind, input)`: the next submit is a new intent. */
  forget<K extends KindName>(kind: K, input: InputOf<K>, options?: ForgetOptions): Promise<void>;
  /** Frees the client's memory in the wasm (it is unusable after). */
  free(): void;
  [Symbol.dispose](): void;
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
  /**
   * How a call is retried (network errors, 429, 503, retryable 409s, a try past
   * `timeoutMs`), always with the same key: `tries` in all (6, the first included), with
   * full-jitter exponential backoff from `baseMs` (250) up to `capMs` (8000), or
   * `Retry-After` when the server gives one. `false`: one try, no retry.
   */
  retry?: RetryPolicy | false;
  /** Each try's time to answer, in ms, before it is aborted and counted a failure (code `timeout` once the tries run out). None by default. The live stream has `firstEventMs` instead. */
  timeoutMs?: number;
  /** Called with each `Request` instead of the global `fetch`, by every request of the client, the live stream's too (a test's, a proxy's). It should honour the request's `signal`. */
  fetch?: (request: Request) => Promise<Response>;
  /** Headers added to every request, anything `new Headers()` takes (the server must allow them in CORS: onceclick's Worker allows those a browser asks for). The SDK's own (`Authorization`, `Idempotency-Key`, …) win over them. */
  headers?: HeadersInit;
}
/** `ClientOptions.retry`: each member defaults to the SDK's own. */
export interface RetryPolicy {
  /** Tries in all, the first included (6). */
  tries?: number;
  /** The backoff's base, in ms (250): try n+1 waits a random time up to `baseMs · 2^(n-1)`. */
  baseMs?: number;
  /** The backoff's cap, in ms (8000). */
  capMs?: number;
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
export interface WaitOptions<K extends string = string> {
  signal?: AbortSignal;
  /** Called with the job once per change, in order. */
  onUpdate?: (job: Job<K>) => void;
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
  onPartial?: (partial: PartialOf<K>) => void;
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
export interface ForgetOptions { provider?: string; signal?: AbortSignal }
export interface CancelOptions { signal?: AbortSignal }
export interface IdempotentFetchOptions {
  /** Names the user's intent: one key per intent string. */
  intent: string;
  storage?: StorageLike | null;
  signal?: AbortSignal;
  onRetry?: (info: RetryInfo) => void;
  /** How long a stored key is reused, in hours (the server's retention; default 24). */
  retentionHours?: number;
  /** As `ClientOptions.retry`. */
  retry?: RetryPolicy | false;
  /** As `ClientOptions.fetch`. */
  fetch?: (request: Request) => Promise<Response>;
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
    /// `CancelOptions` in TypeScript.
    #[wasm_bindgen(typescript_type = "CancelOptions")]
    pub type CancelOptions;
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
