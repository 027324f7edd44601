// onceclick/react: `useSubmit`, a React hook over a `Client`. It imports nothing from the
// SDK (it calls the client it is given), so it adds nothing to the core bundle; React is
// an optional peer dependency that only apps importing "onceclick/react" need.
//
// One hook instance shows one job at a time. A double click, or any submit of the same
// intent while one is in flight, gets the same job (the SDK shares the request and the
// key), and the hook follows that job with one `wait`. Nothing here throws at the caller:
// `submit`, `retry` and `cancel` resolve to a job or to null, and put a failure in `error`.

import { useCallback, useEffect, useRef, useState } from "react";

/** The statuses a `wait` settles on: finished, or waiting for a decision. */
const SETTLED = new Set(["succeeded", "cancelled", "failed", "unknown"]);

const IDLE = { job: null, status: "idle", error: null };

/** An `OnceclickError` as it is; anything else (a rejected client promise) in its shape. */
function asError(e) {
  if (e !== null && typeof e === "object" && typeof e.code === "string") return e;
  return {
    name: "OnceclickError",
    code: "internal",
    message: e instanceof Error ? e.message : String(e),
    status: undefined,
    retryable: false,
    jobId: undefined,
  };
}

export function useSubmit(client, kind) {
  const [state, setState] = useState(IDLE);
  // What is in flight, kept out of React's state so that a second click sees it at once.
  const live = useRef(null);
  if (live.current === null) {
    live.current = { latest: 0, jobId: null, waiting: null, controller: null, mounted: false };
  }

  useEffect(() => {
    const l = live.current;
    l.mounted = true;
    return () => {
      l.mounted = false;
      l.latest += 1;
      l.controller?.abort();
      l.controller = null;
      l.jobId = null;
      l.waiting = null;
    };
  }, []);

  // Shows job `jobId` (starting from `first`, when known) and follows it with one `wait`
  // until it settles. Following another job stops the wait on the previous one.
  const follow = useCallback((c, jobId, first) => {
    const l = live.current;
    if (l.jobId === jobId && l.waiting) return l.waiting;
    l.controller?.abort();
    l.controller = null;
    l.waiting = null;
    l.jobId = jobId;
    const shown = () => l.mounted && l.jobId === jobId;
    const show = (job) => {
      if (shown()) setState({ job, status: job.status, error: null });
    };
    if (first) {
      show(first);
      if (SETTLED.has(first.status)) return Promise.resolve(first);
    }
    const controller = new AbortController();
    l.controller = controller;
    const waiting = c
      .wait(jobId, { signal: controller.signal, onUpdate: show })
      .then(
        (job) => {
          show(job);
          return job;
        },
        (e) => {
          if (!controller.signal.aborted && shown()) setState((s) => ({ ...s, error: asError(e) }));
          return null;
        },
      )
      .finally(() => {
        if (l.waiting === waiting) {
          l.waiting = null;
          l.controller = null;
        }
      });
    l.waiting = waiting;
    return waiting;
  }, []);

  const submit = useCallback(
    async (input, options) => {
      const l = live.current;
      const mine = ++l.latest;
      const current = () => l.mounted && l.latest === mine;
      setState((s) => ({ ...s, status: "submitting", error: null }));
      try {
        const c = await client;
        const job = await c.submit(kind, input, options);
        // A later submit took over; it shows its own job (the same one, for the same intent).
        if (!current()) return null;
        return await follow(c, job.id, job);
      } catch (e) {
        if (current()) setState({ job: null, status: "idle", error: asError(e) });
        return null;
      }
    },
    [client, kind, follow],
  );

  // `action(client, jobId)`, for the job shown; its failure goes to `error`, keeping the job.
  const onShown = useCallback(
    async (action) => {
      const l = live.current;
      const jobId = l.jobId;
      if (jobId === null) return null;
      const mine = ++l.latest;
      const current = () => l.mounted && l.latest === mine && l.jobId === jobId;
      setState((s) => ({ ...s, error: null }));
      try {
        const c = await client;
        const job = await action(c, jobId);
        return current() ? job : null;
      } catch (e) {
        if (current()) setState((s) => ({ ...s, error: asError(e) }));
        return null;
      }
    },
    [client],
  );

  const retry = useCallback(
    (options) =>
      onShown(async (c, jobId) => {
        await c.retry(jobId, options);
        const l = live.current;
        // The job runs again: follow it afresh (no wait runs on a settled job).
        l.controller?.abort();
        l.waiting = null;
        l.jobId = null;
        return follow(c, jobId);
      }),
    [onShown, follow],
  );

  const cancel = useCallback(
    () =>
      onShown(async (c, jobId) => {
        const job = await c.cancel(jobId);
        const l = live.current;
        if (l.mounted && l.jobId === jobId) setState({ job, status: job.status, error: null });
        return job;
      }),
    [onShown],
  );

  const reset = useCallback(() => {
    const l = live.current;
    l.latest += 1;
    l.controller?.abort();
    l.controller = null;
    l.jobId = null;
    l.waiting = null;
    setState(IDLE);
  }, []);

  const pending = state.status === "submitting" || state.status === "queued" || state.status === "running";
  return { ...state, pending, submit, retry, cancel, reset };
}
