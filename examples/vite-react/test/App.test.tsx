// The example's own tests, as an app's would be: its components rendered in happy-dom,
// the SDK's browser build, and a real Worker (VITE_ONCECLICK_URL) with the mock provider.
import { cleanup, fireEvent, render, screen, waitFor } from "@testing-library/react";
import { afterEach, expect, test } from "vitest";
import { useJob } from "onceclick/react";
import { App } from "../src/App";
import { client } from "../src/client";

afterEach(() => {
  cleanup();
  history.replaceState(null, "", "/");
});

/** A text no other test sends: its own intent, its own job. */
function unique(label: string): string {
  return `${label} ${crypto.randomUUID()}: a short text to summarize.`;
}

/** This owner's jobs whose input is `text`, as the API lists them. */
async function jobsWith(text: string): Promise<string[]> {
  const response = await fetch(`${import.meta.env.VITE_ONCECLICK_URL}/v1/jobs?limit=100`, {
    headers: { Authorization: `Bearer ${import.meta.env.VITE_ONCECLICK_TOKEN}` },
  });
  expect(response.status).toBe(200);
  // One page of this owner's jobs (`GET /v1/jobs`: `{ items, next_cursor }`), newest first.
  const body = (await response.json()) as { items: { id: string; input: { text?: string } }[] };
  return body.items.filter((j) => j.input.text === text).map((j) => j.id);
}

test("a double submit of Generate makes one job, shown to its result", async () => {
  const text = unique("vitest double submit");
  render(<App />);
  fireEvent.change(screen.getByLabelText("Text to summarize"), { target: { value: text } });
  const generate = screen.getByRole("button", { name: "Generate" });
  fireEvent.click(generate);
  fireEvent.click(generate);
  await waitFor(() => expect(document.querySelector("#status")?.getAttribute("data-status")).toBe("succeeded"), {
    timeout: 20_000,
  });
  const ticket = document.querySelector("#ticket")?.textContent ?? "";
  expect(ticket).toMatch(/^job_/);
  expect(document.querySelector("#result")?.textContent ?? "").not.toBe("");
  expect(new URLSearchParams(location.search).get("job")).toBe(ticket);
  expect(await jobsWith(text)).toEqual([ticket]);
});

function Follow({ id }: { id: string }) {
  const { job, status } = useJob(client, id);
  const summary = job?.kind === "summarize" ? job.result?.summary : undefined;
  return (
    <p>
      <span data-testid="status">{status}</span> <span data-testid="summary">{summary ?? ""}</span>
    </p>
  );
}

test("useJob follows a job by its id to its result, again after a 'reload'", async () => {
  const c = await client;
  const job = await c.submit("summarize", { text: unique("vitest useJob") });
  const first = render(<Follow id={job.id} />);
  await waitFor(() => expect(screen.getByTestId("status").textContent).toBe("succeeded"), { timeout: 20_000 });
  const summary = screen.getByTestId("summary").textContent;
  expect(summary).not.toBe("");
  // A reload: nothing but the id survives; a new tree follows it again.
  first.unmount();
  render(<Follow id={job.id} />);
  await waitFor(() => expect(screen.getByTestId("status").textContent).toBe("succeeded"), { timeout: 20_000 });
  expect(screen.getByTestId("summary").textContent).toBe(summary);
});
