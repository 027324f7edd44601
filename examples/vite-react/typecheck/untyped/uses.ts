// Without the generated kinds, everything compiles as before, with `unknown` results.
import { Client } from "onceclick";
import { useSubmit } from "onceclick/react";

export async function anyKind(client: Client): Promise<unknown> {
  const job = await client.submit("any kind at all", { anything: [1, 2, 3] });
  const done = await client.wait(job.id, { onPartial: (p: unknown) => void p });
  const result: unknown = done.result;
  return result;
}

export async function readingNeedsANarrowing(client: Client) {
  const job = await client.wait("job_123");
  return job.result.summary; // error TS18046
}

export function hook(client: Client) {
  const s = useSubmit(client, "summarize");
  void s.submit({ whatever: true });
  const partial: unknown = s.partial;
  return partial;
}
