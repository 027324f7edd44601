// What the demo page says: a plain sentence per error code, each event of a job's log in
// words, and why a job waits for a decision. Pure functions of what they are given.

/** One plain sentence per error code; the code itself is always shown beside it. */
const SENTENCES = {
  attempt_unresolved: "The last attempt is unknown: the provider may still be doing the work, so onceclick will not start another one until it is settled. Cancel the job, or resolve the attempt with an admin token.",
  attempt_in_flight: "An attempt is still running; wait for it to finish before asking for another.",
  job_finished: "This job has already finished, so there is nothing left to try.",
  provider_not_certified: "The fallback is not certified for this kind, so onceclick will not send the job there. Certify it (admin) in the failure lab.",
  precondition_failed: "The job changed while you were looking at it; look at it again and retry.",
  unauthorized: "The token is missing, expired or not for this server. Paste the one that cargo xtask dev printed under Settings.",
  forbidden: "This needs an admin token: cargo xtask token --owner ops --admin, pasted under Settings.",
  not_found: "This server does not know that job (it may belong to another token).",
  attempt_not_unknown: "That attempt is no longer unknown, so there is nothing to resolve.",
  idempotency_key_reused: "That key was already used for a different request, so the server refused it and wrote nothing.",
  invalid_input: "The input does not fit this kind's input schema: the server says where, below.",
  invalid_json: "The request was not valid JSON for this API.",
  payload_too_large: "The request is too large (64 KiB at most).",
  unknown_kind: "The server does not know this kind of job.",
  unknown_provider: "The server does not know this provider.",
  contract_violation: "The answer broke the kind's contract, so it was refused.",
  service_unavailable: "The database did not answer; the same request can safely be sent again.",
  internal: "The server failed unexpectedly.",
  network: "The page could not reach the server.",
  aborted: "The call was stopped.",
  timeout: "The job took longer than the page was willing to wait.",
  invalid_argument: "The page gave the SDK something it cannot use.",
  invalid_response: "The server answered with something the SDK could not read.",
  sdk_missing: "The onceclick SDK is not built into www/pkg: run cargo xtask dev, which builds it.",
  mock_unreachable: "The local mock provider did not answer, so the failure lab cannot script it: it runs under cargo xtask dev.",
  admin_token_missing: "Resolving needs an admin token: cargo xtask token --owner ops --admin, pasted under Settings.",
};
export const sentenceFor = (code) => SENTENCES[code] ?? "Something went wrong.";

/** Any thrown thing as `{code, detail}`: an OnceclickError, a problem, or an Error. */
export function describe(e) {
  if (e && typeof e === "object" && typeof e.code === "string") {
    return { code: e.code, detail: String(e.message ?? e.detail ?? "") };
  }
  if (e instanceof Error) return { code: "page_error", detail: e.message };
  return { code: "page_error", detail: String(e) };
}

/** What each event means, in words. `attempt` names the attempt ("attempt 2 on fallback"). */
export function eventLine(e, attempt) {
  const d = e.details ?? {};
  const who = attempt(e.attempt_id) ?? `the attempt on ${d.provider ?? "?"}`;
  switch (e.type) {
    case "job_created": return `Job created for ${d.kind} on ${d.provider}.`;
    case "attempt_started": return `Attempt ${d.n} queued for ${d.provider}.`;
    case "attempt_running": return `${cap(who)} is running: the provider was called.`;
    case "attempt_succeeded": return `${cap(who)} succeeded.`;
    case "attempt_failed": return `${cap(who)} failed: ${d.error?.code ?? "error"}${d.error?.retryable ? " (retryable)" : ""} — ${d.error?.message ?? ""}`;
    case "attempt_timed_out": return `${cap(who)} is unknown: ${d.error?.message ?? "the provider did not answer in time"}.`;
    case "attempt_resolved": return `${cap(who)} was resolved: ${d.from} → ${d.to}.`;
    case "race_lost": return `${cap(who)} finished after the winner: superseded, its result dropped.`;
    case "late_result_discarded": return `A late result for ${who} arrived after the job was ${d.job_status}: discarded.`;
    case "job_cancelled": return "The job was cancelled.";
    case "failover_skipped": return `No ${d.for ?? "failover"} started: ${d.reason ?? "no certified provider"}.`;
    case "dispatch_ignored": return `A repeated dispatch of ${who} was ignored: no second provider call.`;
    default: return `${e.type} ${JSON.stringify(d)}`;
  }
}
const cap = (s) => s.charAt(0).toUpperCase() + s.slice(1);

/** Why a job needs a decision, in one or two sentences. */
export function decisionText(job) {
  const last = job.attempts[job.attempts.length - 1];
  if (job.status === "unknown") {
    return "The provider did not answer in time, so nobody knows whether it did the work: onceclick will not start another attempt until that is settled. Cancel the job, or resolve the attempt (admin) and then try the fallback.";
  }
  const code = last?.error?.code;
  if (code === "contract_violation") {
    return `The provider's answer broke the contract (${last.error.message}), so it can never win. Try the fallback: the same job gets a new attempt.`;
  }
  if (code === "provider_unavailable" || code === "provider_rate_limited" || code === "provider_unreachable") {
    return `The provider failed (${code}) before doing the work, so trying again is safe. Try the fallback: the same job gets a new attempt.`;
  }
  if (code === "resolved_failed") {
    return "The unknown attempt was resolved as failed. Try the fallback: the same job gets a new attempt.";
  }
  return `The last attempt failed (${code ?? "error"}). Try the fallback, or cancel.`;
}
