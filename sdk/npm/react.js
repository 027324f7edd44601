// onceclick/react: `useSubmit`, a React hook over a `Client`. It imports only the
// `OnceclickError` class from the SDK (it calls the client it is given), so it adds
// nothing to the core bundle; React is an optional peer dependency that only apps
// importing "onceclick/react" need.
//
// One hook instance shows one job at a time, and follows it with one `wait`. Every call
// (`submit`, `follow`, `retry`, `cancel`, `reset`) starts a new "turn": whatever an
// earlier turn was waiting for is stopped, and its late answers are dropped, so the job
// shown is always the one the last call asked for. A double click is two submits of one
// intent: the SDK shares one request and one key, so both name the same job. Nothing
// here throws at the caller: calls resolve to a job or to null, and a failure goes to
// `error`.

import { useCallback, useEffect, useRef, useState } from "react";
import { OnceclickError } from "onceclick";

/** The statuses a `wait` settles on: finished, or waiting for a decision. */
const SETTLED = new Set(["succeeded", "cancelled", "failed", "unknown"]);

const IDLE = { job: null, status: "idle", error: null, text: "", partial: null };

/** An `OnceclickError` as it is; anything else (a rejected client promise) wrapped in one. */
function asError(e) {
  // By its class, or by its name and code: one from another copy of the package.
  if (e instanceof OnceclickError || (e instanceof Error && e.name === "OnceclickError" && typeof e.code === "string")) return e;
  return new OnceclickError("internal", e instanceof Error ? e.message : String(e), undefined, false, undefined, e);
}

export function useSubmit(client, kind) {
  const [state, setState] = useState(IDLE);
  // What is in flight, kept out of React's state so that a second click sees it at once:
  // the current turn, its AbortController (for the wait it runs), the job it shows.
  const live = useRef(null);
  if (live.current === null) {
    live.current = { turn: 0, controller: null, job: null, mounted: true, client };
  }
  live.current.client = client;

  /** Starts a new turn: stops the previous one's wait. Returns a check for "still mine". */
  const begin = useCallback(() => {
    const l = live.current;
    l.turn += 1;
    l.controller?.abort();
    l.controller = null;
    const turn = l.turn;
    return () => l.mounted && l.turn === turn;
  }, []);

  // Shows `job` and follows it with `wait` until it settles; `mine` guards every update.
  const watch = useCallback(async (c, jobId, first, mine) => {
    const l = live.current;
    // An error stays on screen until the job it was about moves on.
    const show = (job) => {
      if (!mine()) return;
      l.job = job;
      setState((s) => ({
        ...s,
        job,
        status: job.status,
        error: s.job !== null && s.job.id === job.id && s.job.version === job.version ? s.error : null,
      }));
    };
    // The text the job's attempt streams (the winner's, once known), and its JSON so far:
    // the job's, so another job starts with none (a wait that begins late gets the text
    // so far before the job itself).
    if (l.job === null || l.job.id !== jobId) setState((s) => ({ ...s, text: "", partial: null }));
    const onText = (text) => mine() && setState((s) => ({ ...s, text }));
    const onPartial = (partial) => mine() && setState((s) => ({ ...s, partial }));
    if (first) {
      show(first);
      if (SETTLED.has(first.status)) {
        // Settled before it was followed (a submit that found its job done): its text
        // is its result's JSON, as `wait`'s last `onText` would have said.
        // (a text answer's text is its result as it is, and has no partial).
        const result = first.result;
        if (typeof result === "string") setState((s) => ({ ...s, text: result }));
        else if (result != null) setState((s) => ({ ...s, text: JSON.stringify(result), partial: result }));
        return first;
      }
    }
    const controller = new AbortController();
    l.controller = controller;
    try {
      const job = await c.wait(jobId, { signal: controller.signal, onUpdate: show, onText, onPartial });
      show(job);
      return mine() ? job : null;
    } catch (e) {
      // Aborted by a later turn or an unmount: that turn owns what is shown.
      if (mine()) setState((s) => ({ ...s, error: asError(e) }));
      return null;
    } finally {
      if (l.controller === controller) l.controller = null;
    }
  }, []);

  useEffect(() => {
    const l = live.current;
    l.mounted = true;
    // Mounted again (StrictMode, Fast Refresh, a hidden subtree shown): the job shown
    // is followed again if it was still running.
    if (l.job !== null && !SETTLED.has(l.job.status) && l.controller === null) {
      const mine = begin();
      const job = l.job;
      Promise.resolve(l.client).then((c) => (mine() ? watch(c, job.id, undefined, mine) : null), () => null);
    }
    return () => {
      l.mounted = false;
      l.turn += 1;
      l.controller?.abort();
      l.controller = null;
    };
  }, [begin, watch]);

  const submit = useCallback(
    async (input, options) => {
      const mine = begin();
      setState((s) => ({ ...s, status: "submitting", error: null }));
      try {
        const c = await client;
        const job = await c.submit(kind, input, options);
        // A later call took over: it shows what it asked for.
        if (!mine()) return null;
        return await watch(c, job.id, job, mine);
      } catch (e) {
        if (mine()) {
          live.current.job = null;
          setState({ ...IDLE, error: asError(e) });
        }
        return null;
      }
    },
    [client, kind, begin, watch],
  );

  const follow = useCallback(
    async (jobId) => {
      const mine = begin();
      setState((s) => ({ ...s, error: null }));
      try {
        const c = await client;
        return mine() ? await watch(c, jobId, undefined, mine) : null;
      } catch (e) {
        if (mine()) setState((s) => ({ ...s, error: asError(e) }));
        return null;
      }
    },
    [client, begin, watch],
  );

  // `action(client, jobId, mine)` on the job shown; its failure goes to `error`, and the
  // job stays shown (and followed again if it was running).
  const onShown = useCallback(
    async (action) => {
      const shown = live.current.job;
      if (shown === null) return null;
      const mine = begin();
      setState((s) => ({ ...s, error: null }));
      const c = await Promise.resolve(client).catch(() => null);
      try {
        if (c === null) throw new Error("the client did not load");
        return await action(c, shown.id, mine);
      } catch (e) {
        if (!mine()) return null;
        setState((s) => ({ ...s, error: asError(e) }));
        // The refused action stopped the wait on a running job: follow it again (the
        // error stays until the job moves on).
        if (c !== null && !SETTLED.has(shown.status)) void watch(c, shown.id, undefined, mine);
        return null;
      }
    },
    [client, begin, watch],
  );

  const fallback = useCallback(
    (options) =>
      onShown(async (c, jobId, mine) => {
        await c.retry(jobId, options);
        if (!mine()) return null;
        // The failed attempt's text is not the new attempt's.
        setState((s) => ({ ...s, text: "", partial: null }));
        return watch(c, jobId, undefined, mine);
      }),
    [onShown, watch],
  );

  const cancel = useCallback(
    () =>
      onShown(async (c, jobId, mine) => {
        const job = await c.cancel(jobId);
        if (!mine()) return null;
        live.current.job = job;
        setState((s) => ({ ...s, job, status: job.status, error: null }));
        return job;
      }),
    [onShown],
  );

  const reset = useCallback(() => {
    begin();
    live.current.job = null;
    setState(IDLE);
  }, [begin]);

  // Never pending beside an error: the error is what the user has to act on.
  const pending =
    state.error === null && (state.status === "submitting" || state.status === "queued" || state.status === "running");
  // `retry` is the old name of `fallback`, kept for one release.
  return { ...state, pending, submit, follow, fallback, retry: fallback, cancel, reset };
}

/** No job to follow. */
const NO_JOB = { id: null, job: null, status: "idle", error: null, text: "", partial: null };

/**
 * `useJob(client, jobId)`: follows job `jobId` with `wait` (the client's one live
 * connection, shared by the tabs) and shows it: `job`, `status` ("idle" without an id,
 * "loading" until its first document, then the job's), `text`, `partial`, `error`. A job
 * that a reload or a link left is followed as any other. An id change, or an unmount,
 * stops the wait it started (its late answers are dropped); StrictMode's second mount
 * starts it again. It calls nothing during a server render.
 */
export function useJob(client, jobId) {
  const id = jobId || null;
  const [state, setState] = useState(() => (id ? { ...NO_JOB, id, status: "loading" } : NO_JOB));
  // Bumped by `refresh`: the same job followed again, from its document now.
  const [turn, setTurn] = useState(0);
  const refresh = useCallback(() => setTurn((t) => t + 1), []);
  useEffect(() => {
    if (!id) {
      setState(NO_JOB);
      return undefined;
    }
    const controller = new AbortController();
    const mine = () => !controller.signal.aborted;
    // Another job starts from nothing; the same one, followed again, stays shown.
    setState((s) => (s.id === id ? { ...s, error: null } : { ...NO_JOB, id, status: "loading" }));
    const show = (job) => mine() && setState((s) => ({ ...s, job, status: job.status, error: null }));
    const onText = (text) => mine() && setState((s) => ({ ...s, text }));
    const onPartial = (partial) => mine() && setState((s) => ({ ...s, partial }));
    Promise.resolve(client)
      .then((c) => c.wait(id, { signal: controller.signal, onUpdate: show, onText, onPartial }))
      .then(show, (e) => mine() && setState((s) => ({ ...s, error: asError(e) })));
    return () => controller.abort();
  }, [client, id, turn]);
  // Between an id change and its effect, the render shows the new id's start, never the
  // previous job.
  const { id: _shown, ...shown } = state.id === id ? state : id ? { ...NO_JOB, status: "loading" } : NO_JOB;
  const pending =
    shown.error === null && (shown.status === "loading" || shown.status === "queued" || shown.status === "running");
  return { ...shown, pending, refresh };
}
