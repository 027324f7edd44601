import { useEffect, useState, type FormEvent } from "react";
import { useSubmit } from "onceclick/react";
import { client } from "./client";
import { explain } from "./explain";

/** The input and the output of the "summarize" kind (its contracts are in the API). */
export interface SummarizeInput {
  text: string;
}
export interface Summary {
  summary: string;
  sentiment: "positive" | "neutral" | "negative";
}

/** The draft and whether it was sent survive a reload, so the page picks its job up again. */
const DRAFT = "example:draft";

export function App() {
  const [text, setText] = useState("");
  const { submit, retry, cancel, job, status, error, pending } = useSubmit<SummarizeInput, Summary>(
    client,
    "summarize",
  );

  // After a reload: the same text is the same intent, so submitting it again is a replay
  // that shows the job already running (or finished), never a second one.
  useEffect(() => {
    const saved = sessionStorage.getItem(DRAFT);
    if (saved === null) return;
    const draft = JSON.parse(saved) as { text: string; sent: boolean };
    setText(draft.text);
    if (draft.sent) void submit({ text: draft.text });
  }, [submit]);

  function onSubmit(event: FormEvent<HTMLFormElement>) {
    event.preventDefault();
    sessionStorage.setItem(DRAFT, JSON.stringify({ text, sent: true }));
    // Every click calls submit: a double click sends one request and shows one job.
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
            sessionStorage.setItem(DRAFT, JSON.stringify({ text: e.target.value, sent: false }));
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
