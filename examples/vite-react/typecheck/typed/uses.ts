// With the generated kinds (src/onceclick-kinds.ts), correct code type-checks with no
// cast: through `submit`, `wait`, `cancel`, `useSubmit` and the callbacks.
import init, { Client, OnceclickError, type Job, type JobId } from "onceclick";
import { useJob, useSubmit } from "onceclick/react";

export async function summarize(text: string): Promise<string> {
  await init();
  const client = new Client({ baseUrl: "https://api.example.com", token: "t" });
  const job = await client.submit("summarize", { text });
  const id: JobId<"summarize"> = job.id;
  const done = await client.wait(id, {
    onUpdate: (j) => {
      const s: "positive" | "neutral" | "negative" | undefined = j.result?.sentiment;
      void s;
    },
    onPartial: (p) => {
      const so_far: string | undefined = p.summary;
      void so_far;
    },
  });
  const kind: "summarize" = done.kind;
  void kind;
  if (done.status === "failed" || done.status === "unknown") {
    return done.failure?.message ?? "";
  }
  const cancelled: Job<"summarize"> = await client.cancel(done.id);
  void cancelled;
  return done.result?.summary ?? "";
}

export async function nested(client: Client): Promise<string | null | undefined> {
  const job = await client.submit("extract", { text: "Tom, +44 20 7946 0958" });
  let phone: string | null | undefined;
  await client.wait(job.id, {
    // A deep partial: `contact` and its members may be missing while it streams.
    onPartial: (p) => {
      phone = p.contact?.phone;
    },
  });
  return phone;
}

export async function text(client: Client): Promise<string> {
  const job = await client.wait((await client.submit("translate", { text: "Hello", to: "French" })).id);
  // A text answer's result is a string.
  return job.result ?? "";
}

export async function byUrl(client: Client, fromUrl: string): Promise<unknown> {
  // An id from elsewhere (a URL) is a plain string: the job comes back untyped.
  const job = await client.wait(fromUrl);
  return job.result;
}

export function errors(e: unknown): string {
  if (e instanceof OnceclickError) {
    const code: string = e.code;
    const retryable: boolean = e.retryable;
    return `${code} ${retryable} ${e.status ?? ""} ${e.jobId ?? ""} ${e.stack ?? ""}`;
  }
  return e instanceof Error ? e.message : "";
}

export function useSummary(client: Promise<Client>) {
  const s = useSubmit(client, "summarize");
  void s.submit({ text: "a" });
  const summary: string | undefined = s.job?.result?.summary;
  const partial: string | undefined = s.partial?.summary;
  const error: OnceclickError | null = s.error;
  return { summary, partial, error };
}

export function useFollowed(client: Promise<Client>, id: JobId<"summarize">, fromUrl: string | null) {
  // An id from `submit` keeps its kind.
  const typed = useJob(client, id);
  const sentiment: "positive" | "neutral" | "negative" | undefined = typed.job?.result?.sentiment;
  // A plain id (from a URL) is a job of any kind, narrowed by its `kind`.
  const linked = useJob(client, fromUrl);
  const summary: string | undefined = linked.job?.kind === "summarize" ? linked.job.result?.summary : undefined;
  const translation: string | null | undefined = linked.job?.kind === "translate" ? linked.job.result : undefined;
  linked.refresh();
  return { sentiment, summary, translation, pending: typed.pending || linked.pending };
}

export function useFallback(client: Promise<Client>) {
  const s = useSubmit(client, "summarize");
  void s.fallback({ provider: "fallback" });
  return s.pending;
}
