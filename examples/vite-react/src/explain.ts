import type { OnceclickError } from "onceclick";

/** One sentence a user understands, for each failure the app can meet. */
export function explain(error: OnceclickError): string {
  if (error.code.startsWith("http_")) {
    return `The service answered with an error page (${error.status ?? "no status"}). Your click is kept: press Generate again.`;
  }
  switch (error.code) {
    case "attempt_in_flight":
      return "The first provider is still working on this. Wait for it, or cancel before you try another.";
    case "attempt_unresolved":
      return "The last try timed out, so nobody knows whether it ran. Cancel it, or ask an admin to resolve it, before trying again.";
    case "job_finished":
      return "This already finished; its result stands.";
    case "provider_not_certified":
      return "That provider has not passed the checks for this kind of job, so it may not take it over.";
    case "invalid_input":
    case "payload_too_large":
      return "That text cannot be summarized: check its length and try again.";
    case "unauthorized":
    case "forbidden":
      return "Your session has ended. Sign in again; your click is kept.";
    case "network":
    case "timeout":
    case "service_unavailable":
      return "The service could not be reached. Your click is kept: press Generate again and it resumes the same job.";
    case "unsupported_environment":
      return "This runs in the browser only.";
    default:
      return error.message;
  }
}
