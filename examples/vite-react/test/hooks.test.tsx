// The hooks of `onceclick/react` as the app uses them, against the same Worker. These two
// need more than an app has: the mock provider to make a provider refuse
// (ONCECLICK_MOCK_URL) and an admin token to certify the fallback (ONCECLICK_ADMIN_TOKEN),
// both given by `cargo xtask test`; without them they are skipped.
import { act, renderHook, waitFor } from "@testing-library/react";
import { beforeAll, describe, expect, test } from "vitest";
import { useJob, useSubmit } from "onceclick/react";
import { client } from "../src/client";

const MOCK = process.env.ONCECLICK_MOCK_URL;
const ADMIN = process.env.ONCECLICK_ADMIN_TOKEN;

async function post(url: string, body: unknown, token?: string) {
  const headers: Record<string, string> = { "Content-Type": "application/json" };
  if (token !== undefined) headers.Authorization = `Bearer ${token}`;
  const response = await fetch(url, { method: "POST", headers, body: JSON.stringify(body) });
  expect(response.ok, `${url} answered ${response.status}`).toBe(true);
}

describe.skipIf(MOCK === undefined || ADMIN === undefined)("useSubmit's fallback", () => {
  beforeAll(async () => {
    // An operator's step: the fallback may take over a kind once it passed its contract.
    await post(`${import.meta.env.VITE_ONCECLICK_URL}/v1/providers/fallback/certify`, {}, ADMIN);
  });

  for (const name of ["fallback", "retry"] as const) {
    test(`${name}() asks for a new attempt on the job shown, after its provider refused`, async () => {
      const text = `vitest ${name} ${crypto.randomUUID()}: the primary refuses this one.`;
      await post(`${MOCK}/_script`, { provider: "primary", contains: text, steps: [{ status: 400 }] });
      const { result } = renderHook(() => useSubmit(client, "summarize"));
      await act(async () => {
        await result.current.submit({ text });
      });
      expect(result.current.job?.status).toBe("failed");
      expect(result.current.job?.failure?.code).toMatch(/^provider_/);
      expect(result.current.pending).toBe(false);
      // `retry` is the deprecated name of `fallback`: the same call.
      await act(async () => {
        await result.current[name]({ provider: "fallback" });
      });
      expect(result.current.error).toBe(null);
      expect(result.current.job?.status).toBe("succeeded");
      expect(result.current.job?.attempts.map((a) => a.provider)).toEqual(["primary", "fallback"]);
    });
  }
});

test("useJob of a job that does not exist says not_found, and is not pending", async () => {
  const { result } = renderHook(() => useJob(client, "job_00000000-0000-7000-8000-00000000beef"));
  expect(result.current.status).toBe("loading");
  expect(result.current.pending).toBe(true);
  await waitFor(() => expect(result.current.error?.code).toBe("not_found"), { timeout: 20_000 });
  expect(result.current.pending).toBe(false);
  expect(result.current.job).toBe(null);
});
