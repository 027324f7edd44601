import { useEffect, useState, type FormEvent } from "react";
import type { OnceclickError } from "onceclick";
import { useJob, useSubmit } from "onceclick/react";
import { client } from "./client";
import { explain } from "./explain";

/**
 * The job shown is in the page's address (`?job=…`): a reload, or the link sent to
 * someone, shows it again, followed live by `useJob`. Nothing else is kept: the SDK
 * keeps the intent's key, so Generate on the same text is the same job anyway.
 */
function jobInAddress(): string | null {
  return new URLSearchParams(globalThis.location?.search ?? "").get("job");
}

function putInAddress(jobId: string) {
  const url = new URL(location.href);
  url.searchParams.set("job", jobId);
  history.replaceState(null, "", url);
}

export function App() {
  const [text, setText] = useState("");
  // Typed from the kind file: `job.result` is a `SummarizeResult`, `partial` its deep
  // partial (./onceclick-kinds.ts, written by `cargo xtask kinds --types`).
  const submitted = useSubmit(client, "summarize");
  const [shownId, setShownId] = useState(jobInAddress);
  const followed = useJob(client, shownId);
  const { status, error: followError, pending, refresh } = followed;
  // An id from the address may name a job of any kind: this page shows a summary's.
  const job = followed.job?.kind === "summarize" ? followed.job : null;
  const partial = job === null ? null : followed.partial;
  const [actionError, setActionError] = useState<OnceclickError | null>(null);

  // The job a submit made (or found) is the one shown, and the one in the address.
  const submittedId = submitted.job?.id ?? null;
  useEffect(() => {
    if (submittedId === null) return;
    setShownId(submittedId);
    putInAddress(submittedId);
  }, [submittedId]);

  // A refused action's error stays until the job it was about moves on.
  const version = job?.version;
  useEffect(() => setActionError(null), [shownId, version]);

  // A job shown after a reload brings its text back into the form.
  const loadedText = job?.input.text;
  useEffect(() => {
    if (loadedText !== undefined) setText((t) => (t === "" ? loadedText : t));
  }, [loadedText]);

  function onSubmit(event: FormEvent<HTMLFormElement>) {
    event.preventDefault();
    // The result of this very text is on screen: it stands. (The SDK freed the key when
    // the job succeeded, so submitting again would start a new job.)
    if (job?.status === "succeeded" && job.input.text === text) return;
    setActionError(null);
    // Every other click calls submit: a double click sends one request and shows one job.
    void submitted.submit({ text });
  }

  // The fallback button and cancel act on the job shown, however it came to be shown;
  // then it is followed again from where it stands.
  async function act(action: (jobId: string) => Promise<unknown>) {
    if (job === null) return;
    setActionError(null);
    try {
      await action(job.id);
    } catch (e) {
      setActionError(e as OnceclickError);
    }
    refresh();
  }

  const submitting = submitted.status === "submitting" && submitted.error === null;
  const busy = submitting || pending;
  // A submit's own failure is shown until the next; once its job is known, the job
  // shown (`useJob`) says how it stands.
  const submitError = submitted.job === null ? submitted.error : null;
  const error = actionError ?? submitError ?? followError;
  const decided = job !== null && (job.status === "succeeded" || job.status === "cancelled");
  return (
    <main>
      <h1>Summarize</h1>
      <form onSubmit={onSubmit}>
        <label htmlFor="text">Text to summarize</label>
        <textarea id="text" rows={5} value={text} onChange={(e) => setText(e.target.value)} />
        <button id="generate" type="submit" aria-busy={busy} disabled={text.trim() === ""}>
          {busy ? `Working… (${submitting ? "submitting" : status})` : "Generate"}
        </button>
      </form>

      <section aria-live="polite">
        {job !== null && (
          <p>
            Ticket <code id="ticket">{job.id}</code>:{" "}
            <strong id="status" data-status={job.status}>
              {job.status}
            </strong>
            {job.attempts.length > 1 && ` after ${job.attempts.length} attempts`}
          </p>
        )}
        {job?.failure != null && (
          // Why the job ended badly, from the attempt that decided it.
          <p id="failure" data-code={job.failure.code}>
            It stopped: {job.failure.message} <small>({job.failure.code})</small>
          </p>
        )}
        {job?.result == null && partial !== null && "summary" in partial && typeof partial.summary === "string" && (
          // A provider that streams: the summary as it is written (a reload continues it).
          <p id="writing">{partial.summary}</p>
        )}
        {job?.result != null && (
          <article id="result">
            <p>{job.result.summary}</p>
            <p>Sentiment: {job.result.sentiment}</p>
          </article>
        )}
      </section>

      {job !== null && !decided && (
        <p>
          <button
            id="fallback"
            type="button"
            onClick={() => void act(async (id) => (await client).retry(id, { provider: "fallback" }))}
          >
            Try the fallback provider
          </button>{" "}
          <button id="cancel" type="button" onClick={() => void act(async (id) => (await client).cancel(id))}>
            Cancel
          </button>
        </p>
      )}

      {error !== null && (
        <p id="error" role="alert" data-code={error.code}>
          {explain(error)} <small>({error.code})</small>
        </p>
      )}
    </main>
  );
}
