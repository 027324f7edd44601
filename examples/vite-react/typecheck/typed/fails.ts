// Each line marked `// error TSnnnn` must fail with that error, and nothing else may
// fail: `cargo xtask test` (xtask/src/example.rs) runs tsc on this folder and compares.
import { Client } from "onceclick";
import { useJob, useSubmit } from "onceclick/react";

export async function misspelt(client: Client) {
  await client.submit("sumarize", { text: "a" }); // error TS2345
}

export async function wrongField(client: Client) {
  await client.submit("summarize", { txt: "a" }); // error TS2561
}

export async function missingField(client: Client) {
  await client.submit("translate", { text: "a" }); // error TS2741
}

export async function noSuchResultField(client: Client) {
  const job = await client.wait((await client.submit("summarize", { text: "a" })).id);
  return job.result?.title; // error TS2339
}

export async function anotherKindsId(client: Client) {
  const job = await client.submit("translate", { text: "a", to: "French" });
  const done = await client.wait(job.id);
  return done.result?.summary; // error TS2339
}

export function hook(client: Client) {
  const s = useSubmit(client, "extract");
  void s.submit({ text: 1 }); // error TS2322
  return s.partial?.contact?.fax; // error TS2339
}

export function hookKind(client: Client) {
  return useSubmit(client, "summarise"); // error TS2345
}

export function linkedJob(client: Client, fromUrl: string) {
  const linked = useJob(client, fromUrl);
  return linked.job?.result?.summary; // error TS2339
}
