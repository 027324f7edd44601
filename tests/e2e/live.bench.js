// The live stream's figures in real Chromium, for `cargo xtask bench` (not a test: it
// asserts only that each run did what it measures). Prints one line,
// `LIVE_BENCH {json}`, that xtask reads:
// - lag: from a move's commit (the document's `updated_at`) to `onUpdate`, for waits
//   that follow the stream and waits that poll, interleaved in one run;
// - click: from the click on Generate to the result on the demo page, minus the mock's
//   delay;
// - requests: what the browser sends for one job whose provider takes 10 s: the demo
//   page, the SDK alone on the same origin, and the SDK on another origin (counted at
//   the proxy, preflights included);
// - first: from a stream's request to its first bytes (the `: live` comment);
// - text: a streamed answer (the fallback, 4 code points every 25 ms): from `submit` to
//   the first `onText`, beside a request straight to the mock to its first content
//   chunk, taking turns; and from each chunk leaving the mock (its clock: the same
//   machine's) to the `onText` that shows it.

const assert = require("node:assert/strict");
const h = require("./harness.js");

const LAG_JOBS = Number(process.env.ONCECLICK_BENCH_LAG_JOBS || 24);
const CLICKS = Number(process.env.ONCECLICK_BENCH_CLICKS || 10);
const FIRSTS = Number(process.env.ONCECLICK_BENCH_FIRSTS || 20);
const TEXTS = Number(process.env.ONCECLICK_BENCH_TEXTS || 24);
const CLICK_DELAY_MS = 300;
const SLOW_JOB_MS = 10_000;

function quantiles(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const at = (q) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
  return { n: sorted.length, p50: at(0.5), p99: at(0.99) };
}

async function script(contains, steps) {
  await h.mockPost("/_script", { provider: "primary", contains, steps });
}

/** A client of the SDK the page loaded, as `window.bench`. */
async function sdkIn(page, baseUrl) {
  await page.evaluate(async ({ baseUrl, token }) => {
    const sdk = await import("/pkg/onceclick.js");
    await sdk.default();
    window.bench = new sdk.Client({ baseUrl: baseUrl ?? location.origin, token });
  }, { baseUrl, token: h.TOKEN });
}

/** Commit to `onUpdate`, push and poll taking turns, each job's call a little longer. */
async function lag(page) {
  const lags = { push: [], poll: [] };
  for (let n = 0; n < LAG_JOBS; n++) {
    const mode = n % 2 === 0 ? "push" : "poll";
    const text = h.uniqueText(`lag-${mode}-${n}`);
    await script(text, [{ delay_ms: 300 + ((n * 277) % 1200) }]);
    const seen = await page.evaluate(async ({ text, live }) => {
      const job = await window.bench.submit("summarize", { text });
      const started = Date.now();
      const lags = [];
      const done = await window.bench.wait(job.id, {
        live,
        onUpdate: (j) => {
          const at = Date.parse(j.updated_at);
          // Only changes made after the wait began: the first document is the state.
          if (at >= started) lags.push(Date.now() - at);
        },
      });
      return { status: done.status, lags };
    }, { text, live: mode === "push" });
    assert.equal(seen.status, "succeeded", `${mode} job ${n}`);
    assert.ok(seen.lags.length > 0, `${mode} job ${n} saw a change`);
    lags[mode].push(...seen.lags);
  }
  return { push: quantiles(lags.push), poll: quantiles(lags.poll) };
}

/** Click on Generate to the result shown, minus the mock's delay. */
async function click(page) {
  const times = [];
  for (let n = 0; n < CLICKS; n++) {
    const text = h.uniqueText(`click-${n}`);
    await script(text, [{ delay_ms: CLICK_DELAY_MS }]);
    await page.locator("#text").fill(text);
    await page.evaluate(() => {
      const before = document.querySelector("#ticket-id")?.textContent ?? "";
      window.clickedAt = null;
      document.getElementById("generate").addEventListener("click", () => { window.clickedAt = performance.now(); }, { capture: true, once: true });
      window.shownAt = new Promise((resolve) => {
        const check = () => {
          const ticket = document.querySelector("#ticket-id")?.textContent ?? "";
          if (ticket !== before && document.querySelector("#job-status")?.dataset.status === "succeeded") {
            observer.disconnect();
            resolve(performance.now());
          }
        };
        const observer = new MutationObserver(check);
        observer.observe(document.body, { subtree: true, childList: true, attributes: true, characterData: true });
      });
    });
    await page.locator("#generate").click();
    const ms = await page.evaluate(async () => (await window.shownAt) - window.clickedAt);
    assert.ok(Number.isFinite(ms), `click ${n}`);
    times.push(ms - CLICK_DELAY_MS);
  }
  return quantiles(times);
}

/** What the page sends for one job of `SLOW_JOB_MS`: through the demo page's button, and through the SDK alone. */
async function requests(page, context) {
  const counted = {};
  // The demo page: Generate, until the result shows.
  {
    const asked = h.askedOf(page);
    const text = h.uniqueText("requests-demo");
    await script(text, [{ delay_ms: SLOW_JOB_MS }]);
    await page.locator("#text").fill(text);
    const before = await h.ticket(page);
    const from = asked.length;
    await page.locator("#generate").click();
    // The new job's result, not the last one's.
    await page.waitForFunction(
      (before) => {
        const ticket = document.querySelector("#ticket-id")?.textContent ?? "";
        return ticket !== before && document.querySelector("#job-status")?.dataset.status === "succeeded";
      },
      before,
      { timeout: SLOW_JOB_MS + h.WAIT_MS },
    );
    counted.demo_page = asked.slice(from).map((a) => `${a.method} ${a.path}`);
  }
  // The SDK alone, on the page's own origin: submit, then wait. The demo page goes
  // first, so that this page's client leads and its stream is its own.
  await page.close();
  {
    const fresh = await context.newPage();
    await fresh.goto(`${h.URL_BASE}/favicon.svg`);
    const asked = h.askedOf(fresh);
    await sdkIn(fresh);
    const text = h.uniqueText("requests-sdk");
    await script(text, [{ delay_ms: SLOW_JOB_MS }]);
    const status = await fresh.evaluate(async (text) => {
      const job = await window.bench.submit("summarize", { text });
      return (await window.bench.wait(job.id)).status;
    }, text);
    assert.equal(status, "succeeded");
    counted.same_origin = asked.map((a) => `${a.method} ${a.path}`);
    // The same from another origin: the proxy's, in front of the Worker, which logs
    // every request (preflights too) under the scenario's id.
    const scenario = `bench-${Date.now().toString(36)}`;
    await sdkIn(fresh, `${h.PROXY}/pass/${scenario}`);
    const other = h.uniqueText("requests-cross");
    await script(other, [{ delay_ms: SLOW_JOB_MS }]);
    const crossStatus = await fresh.evaluate(async (text) => {
      const job = await window.bench.submit("summarize", { text });
      return (await window.bench.wait(job.id)).status;
    }, other);
    assert.equal(crossStatus, "succeeded");
    const log = await (await fetch(`${h.PROXY}/_log/${scenario}`)).json();
    counted.cross_origin = log.map((e) => `${e.method} ${e.path.split("?")[0]}`);
    await fresh.close();
  }
  return counted;
}

/** A stream's request to its first bytes, on a job that waits (its call held). */
async function first(page) {
  const text = h.uniqueText("first-event");
  const gate = await h.holdAll("primary", text);
  const job = await page.evaluate((text) => window.bench.submit("summarize", { text }), text);
  const times = [];
  for (let n = 0; n < FIRSTS; n++) {
    times.push(await page.evaluate(async ({ id, token }) => {
      const controller = new AbortController();
      const started = performance.now();
      const r = await fetch(`/v1/stream?job=${id}`, { headers: { Authorization: `Bearer ${token}` }, signal: controller.signal });
      const reader = r.body.getReader();
      await reader.read();
      const ms = performance.now() - started;
      controller.abort();
      return ms;
    }, { id: job.id, token: h.TOKEN }));
  }
  await h.release(gate);
  return quantiles(times);
}

/** Time to first text through onceclick and straight from the mock; chunk to `onText`. */
async function text(page) {
  const first = { onceclick: [], mock: [] };
  const chunkToText = [];
  for (let n = 0; n < TEXTS; n++) {
    const direct = h.uniqueText(`text-direct-${n}`);
    const viaJob = h.uniqueText(`text-job-${n}`);
    for (const t of [direct, viaJob]) {
      await h.mockPost("/_script", { provider: "fallback", contains: t, steps: [{ chunk_chars: 4, chunk_ms: 25 }] });
    }
    const seen = await page.evaluate(async ({ direct, viaJob, mock, jobFirst }) => {
      // Straight to the mock, as the Worker calls it: to the first chunk with content.
      const straight = async () => {
        const started = performance.now();
        // With the headers the tests' mock asks of `fallback` (`mock::spawn_for_tests`).
        const r = await fetch(`${mock}/fallback/v1/chat/completions`, {
          method: "POST",
          headers: { "content-type": "application/json", "api-key": "test-key",
                     "x-title": "onceclick tests", "x-tenant": "tenant-7" },
          body: JSON.stringify({ model: "mock-large", stream: true, messages: [
            { role: "system", content: "You summarize texts." },
            { role: "user", content: `Summarize this text:\n\n${direct}` },
          ] }),
        });
        const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) return null;
          buffer += value;
          if (/"content":"[^"]/.test(buffer)) {
            const ms = performance.now() - started;
            await reader.cancel();
            return ms;
          }
        }
      };
      // Through onceclick: submit on the fallback, to the first onText.
      const throughJob = async () => {
        const started = performance.now();
        let first = null;
        const shown = [];
        const job = await window.bench.submit("summarize", { text: viaJob }, { provider: "fallback" });
        const done = await window.bench.wait(job.id, {
          onText: (text) => {
            if (first === null) first = performance.now() - started;
            shown.push([[...text].length, Date.now()]);
          },
        });
        return { first, shown, status: done.status };
      };
      const order = jobFirst ? [throughJob, straight] : [straight, throughJob];
      const results = [];
      for (const run of order) results.push(await run());
      const [job, mockMs] = jobFirst ? results : [results[1], results[0]];
      return { job, mockMs };
    }, { direct, viaJob, mock: h.MOCK, jobFirst: n % 2 === 0 });
    assert.equal(seen.job.status, "succeeded", `text job ${n}`);
    assert.ok(seen.job.first !== null && seen.mockMs !== null, `text ${n} came both ways: ${JSON.stringify(seen)}`);
    first.onceclick.push(seen.job.first);
    first.mock.push(seen.mockMs);
    // Each chunk the mock sent for the job, to the first onText that held it.
    const calls = await h.providerCalls(viaJob);
    assert.equal(calls.length, 1, `one provider call for text job ${n}`);
    for (const [chars, sentAt] of calls[0].sent) {
      const shown = seen.job.shown.find(([length]) => length >= chars);
      assert.ok(shown, `chunk up to ${chars} code points reached onText`);
      chunkToText.push(shown[1] - sentAt);
    }
  }
  return { first_onceclick: quantiles(first.onceclick), first_mock: quantiles(first.mock), chunk_to_text: quantiles(chunkToText) };
}

(async () => {
  const browser = await h.launch();
  const context = await browser.newContext();
  try {
    const problems = [];
    const page = await h.open(context, problems);
    await sdkIn(page);
    const figures = {
      lag: await lag(page),
      click: await click(page),
      first: await first(page),
      text: await text(page),
      requests: await requests(page, context),
    };
    console.log(`LIVE_BENCH ${JSON.stringify(figures)}`);
  } finally {
    await browser.close();
  }
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
