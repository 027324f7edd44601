import type { Client, ErrorCode, Job, JobStatus, RetryOptions, SubmitOptions } from "./onceclick.js";

/**
 * Why the last call failed: an `OnceclickError` as the SDK rejected with it. Branch on
 * `code`. Anything that is not one (say, the client promise rejected) comes in the same
 * shape with code "internal" and its own message.
 */
export interface SubmitError {
    readonly name: string;
    readonly code: ErrorCode;
    readonly message: string;
    /** The HTTP status, when the server answered. */
    readonly status: number | undefined;
    /** Whether the same call may succeed later (the SDK has already retried it). */
    readonly retryable: boolean;
    readonly jobId: string | undefined;
}

/** "submitting" until the job is known, then the job's own status. */
export type SubmitStatus = "idle" | "submitting" | JobStatus;

export interface UseSubmit<Input, Result> {
    /**
     * Submits the intent `(kind, input)` and follows its job with `wait` until it settles
     * (`succeeded`, `cancelled`, or `failed`/`unknown`, which wait for a decision). Safe to
     * call on every click: while the intent's job has not succeeded or been cancelled, the
     * same input is the same key and the same job (after that, the SDK frees the key and
     * the same input is a new intent: show the result instead of submitting again). Never
     * rejects: resolves to the settled job, or to null when it failed (see `error`) or a
     * later call took over.
     */
    submit(input: Input, options?: SubmitOptions): Promise<Job<Result, Input> | null>;
    /** Shows job `jobId` and follows it until it settles (say, the job a reload left). */
    follow(jobId: string): Promise<Job<Result, Input> | null>;
    /** A new attempt on the job shown (the fallback button); then follows it again. */
    retry(options?: RetryOptions): Promise<Job<Result, Input> | null>;
    /** Cancels the job shown. */
    cancel(): Promise<Job<Result, Input> | null>;
    /** Stops following and forgets what is shown (the intent's key stays stored). */
    reset(): void;
    /** The job shown, updated live. */
    job: Job<Result, Input> | null;
    status: SubmitStatus;
    /**
     * The last call's failure. It stays until the next call or until the job it was
     * about moves on. A failed `wait` (the network, for long) leaves the job as last
     * seen: calling `follow` or `submit` again picks it up.
     */
    error: SubmitError | null;
    /** True while submitting, and while the job shown is queued or running. */
    pending: boolean;
    /**
     * The text the job's provider streams as it writes it (`wait`'s `onText`): the first
     * attempt that streams, then the winner's. A reload continues it. "" until text comes.
     */
    text: string;
    /** `text`'s JSON so far, closed and parsed (best effort); null until it says something, `{}` once a failed attempt's text is withdrawn. */
    partial: Partial<Result> | null;
}

/**
 * A React hook over a `Client` for one job kind. Give it the client, or a promise of one
 * (`init().then(() => new Client(...))`, made once at module level): it must not change
 * between renders. Each call starts a new turn: what an earlier call was waiting for is
 * stopped and its late answers dropped, so the job shown is the last call's. Renders on
 * a server: it calls nothing until a call is made.
 */
export function useSubmit<Input = unknown, Result = unknown>(
    client: Client | PromiseLike<Client>,
    kind: string,
): UseSubmit<Input, Result>;
