import { useEffect, useState, type FormEvent } from "react";
import { useSubmit } from "onceclick/react";
import { client } from "./client";
import { explain } from "./explain";

/**
 * What survives a reload: the draft, whether it was sent, and the job it made. A reload
 * then shows that job again, or, if the answer had not come yet, submits the draft again:
 * a replay under the same stored key, never a second job.
 */
const DRAFT = "example:draft";
interface Draft {
  text: string;
  sent: boolean;
  jobId: string | null;
}

function save(draft: Draft) {
  sessionStorage.setItem(DRAFT, JSON.stringify(draft));
}

export function App() {
  const [text, setText] = useState("");
  // Typed from the kind file: `job.result` is a `SummarizeResult`, `partial` its deep
  // partial (./onceclick-kinds.ts, written by `cargo xtask kinds --types`).
  const { submit, follow, retry, cancel, job, status, error, pending, partial } = useSubmit(client, "summarize");

  useEffect(() => {
    const saved = sessionStorage.getItem(DRAFT);
    if (saved === null) return;
    const draft = JSON.parse(saved) as Draft;
    setText(draft.text);
    if (draft.jobId !== null) void follow(draft.jobId);
    else if (draft.sent) void submit({ text: draft.text });
  }, [submit, follow]);

  // Remember the job the sent draft made.
  useEffect(() => {
    if (job !== null) save({ text: job.input.text, sent: true, jobId: job.id });
    // Only when another job is shown: a text edited since must not be overwritten.
  }, [job?.id]);

  function onSubmit(event: FormEvent<HTMLFormElement>) {
    event.preventDefault();
    // The result of this very text is on screen: it stands. (The SDK freed the key when
    // the job succeeded, so submitting again would start a new job.)
    if (job?.status === "succeeded" && job.input.text === text) return;
    save({ text, sent: true, jobId: null });
    // Every other click calls submit: a double click sends one request and shows one job.
    void submit({ text });
  }

  const decided = job !== null && (job.status === "succeeded" || job.status === "cancelled");
  return (
    <main>
      <h1>Summarize</h1>
      <form onSubmit={onSubmit}>
        <label htmlFor="text">Text to summarize</label>
        <textarea
          id="text"
          rows={5}
          value={text}
          onChange={(e) => {
            setText(e.target.value);
            save({ text: e.target.value, sent: false, jobId: null });
          }}
        />
        <button id="generate" type="submit" aria-busy={pending} disabled={text.trim() === ""}>
          {pending ? `Working… (${status})` : "Generate"}
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
        {job?.result == null && typeof partial?.summary === "string" && (
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
          <button id="fallback" type="button" onClick={() => void retry({ provider: "fallback" })}>
            Try the fallback provider
          </button>{" "}
          <button id="cancel" type="button" onClick={() => void cancel()}>
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
