import type {
    Client, InputOf, Job, JobId, JobOf, JobStatus, KindName, OnceclickError, PartialOf, RetryOptions,
    SubmitOptions,
} from "./onceclick.js";

/**
 * Why the last call failed: the `OnceclickError` the SDK rejected with. Anything else
 * (say, the client promise rejected because the wasm did not load) is wrapped in one
 * with code "internal", the original as its `cause`.
 * @deprecated Use `OnceclickError`; this name goes in the next release.
 */
export type SubmitError = OnceclickError;

/** "submitting" until the job is known, then the job's own status. */
export type SubmitStatus = "idle" | "submitting" | JobStatus;

/** What `useSubmit(client, kind)` gives: calls, and the job shown with its state. */
export interface UseSubmit<K extends string = string> {
    /**
     * Submits the intent `(kind, input)` and follows its job with `wait` until it settles
     * (`succeeded`, `cancelled`, or `failed`/`unknown`, which wait for a decision). Safe to
     * call on every click: while the intent's job has not succeeded or been cancelled, the
     * same input is the same key and the same job (after that, the SDK frees the key and
     * the same input is a new intent: show the result instead of submitting again). Never
     * rejects: resolves to the settled job, or to null when it failed (see `error`) or a
     * later call took over.
     */
    submit(input: InputOf<K>, options?: SubmitOptions): Promise<Job<K> | null>;
    /** Shows job `jobId` and follows it until it settles (say, the job a reload left). */
    follow(jobId: JobId<K> | string): Promise<Job<K> | null>;
    /**
     * A new attempt on the job shown (the fallback button: name another provider in
     * `options.provider`); then follows it again. Not a resend of the same request: the
     * SDK already retries each request by itself.
     */
    fallback(options?: RetryOptions): Promise<Job<K> | null>;
    /** @deprecated The old name of `fallback`, kept for one release. */
    retry(options?: RetryOptions): Promise<Job<K> | null>;
    /** Cancels the job shown. */
    cancel(): Promise<Job<K> | null>;
    /** Stops following and forgets what is shown (the intent's key stays stored). */
    reset(): void;
    /** The job shown, updated live. */
    job: Job<K> | null;
    status: SubmitStatus;
    /**
     * The last call's failure. It stays until the next call or until the job it was
     * about moves on. A failed `wait` (the network, for long) leaves the job as last
     * seen: calling `follow` or `submit` again picks it up.
     */
    error: OnceclickError | null;
    /** True while submitting, and while the job shown is queued or running; never while `error` is set. */
    pending: boolean;
    /**
     * The text the job's provider streams as it writes it (`wait`'s `onText`): the first
     * attempt that streams, then the winner's. A reload continues it. "" until text comes.
     */
    text: string;
    /** `text`'s JSON so far, closed and parsed (best effort); null until it says something, `{}` once a failed attempt's text is withdrawn. */
    partial: PartialOf<K> | null;
}

/**
 * A React hook over a `Client` for one job kind: its input and result are typed from
 * the kind (`Kinds`, filled by the file `cargo xtask kinds --types` generates). Give it the client, or a promise of one
 * (`init().then(() => new Client(...))`, made once at module level): it must not change
 * between renders. Each call starts a new turn: what an earlier call was waiting for is
 * stopped and its late answers dropped, so the job shown is the last call's. Renders on
 * a server: it calls nothing until a call is made.
 */
export function useSubmit<K extends KindName>(
    client: Client | PromiseLike<Client>,
    kind: K,
): UseSubmit<K>;

/** `useJob`'s status: "idle" without a job id, "loading" until its first document, then the job's own. */
export type JobFollowStatus = "idle" | "loading" | JobStatus;

/** What `useJob(client, jobId)` gives: the job followed, with its state. */
export interface UseJob<K extends string = string> {
    /** The job, updated live; null until its first document. For a plain id, a job of any kind, narrowed by `job.kind`. */
    job: JobOf<K> | null;
    status: JobFollowStatus;
    /** The text its provider streams (as `useSubmit`'s `text`). */
    text: string;
    /** `text`'s JSON so far (as `useSubmit`'s `partial`). */
    partial: PartialOf<K> | null;
    /** Why following it failed (a job that does not exist: `not_found`), until the id changes. */
    error: OnceclickError | null;
    /** True while loading and while the job is queued or running; never while `error` is set. */
    pending: boolean;
    /**
     * Follows the same job again, from its document now: after an action that moves it on
     * (a new attempt, a cancel, a resolve), since a wait ends when the job settles.
     */
    refresh(): void;
}

/**
 * A React hook that follows a job by its id: one a reload, a link or another tab left
 * (put it in the URL). It follows with `wait` until the job settles (finished, or waiting
 * for a decision), and stops on an id change and on unmount. `null` or `undefined`
 * follows nothing. A `JobId<K>` from `submit` types the job; a plain string (from a
 * URL) leaves it untyped. Renders on a server: it calls nothing there.
 */
export function useJob<K extends string>(
    client: Client | PromiseLike<Client>,
    jobId: JobId<K> | null | undefined,
): UseJob<K>;
export function useJob(client: Client | PromiseLike<Client>, jobId: string | null | undefined): UseJob<KindName>;
