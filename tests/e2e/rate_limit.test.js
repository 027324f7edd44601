// The per-owner rate limit, as wrangler.toml configures it (60 creates, attempts and
// lists per 10 s per owner) on the real Worker's rate limiting binding: over the limit a request
// gets 429 `rate_limited` with `Retry-After`, and writes nothing; the SDK in Chromium waits
// as told and then sends the same request again, with the same key.
//
// The binding counts in fixed windows, so a run that straddles a window's end sees more
// than the limit pass; the tests spend the owner's budget right before each check, and
// try again (a bounded number of times) when a window ended in between.
//
// Stream opens have a budget of their own (STREAM_LIMIT): a page that submits jobs and
// waits on each, which reopens its stream as each job joins, never spends what its
// creates need.

const { test, before, after } = require("node:test");
const assert = require("node:assert/strict");
const { DatabaseSync } = require("node:sqlite");
const h = require("./harness.js");

/** wrangler.toml's [[ratelimits]] (RATE_LIMIT, then STREAM_LIMIT) and RATE_LIMIT_PERIOD_S. */
const LIMIT = 60;
const STREAM_LIMIT = 120;
const PERIOD_S = 10;
const LIMITED = process.env.ONCECLICK_E2E_LIMITED_TOKEN;
/** An owner of its own for the stream budget's test, whose budgets nothing else spends. */
const STREAMS = process.env.ONCECLICK_E2E_STREAMS_TOKEN;
const TEST_MS = 120_000;

let browser;

before(async () => {
  assert.ok(LIMITED && STREAMS, "run these with `cargo xtask test --e2e`");
  browser = await h.launch();
});

after(async () => {
  await browser?.close();
});

let serial = 0;
function key(label) {
  serial += 1;
  return `rl-${label}-${Date.now().toString(36)}-${serial}`;
}

function create(idempotencyKey, text) {
  return fetch(`${h.URL_BASE}/v1/jobs`, {
    method: "POST",
    headers: { Authorization: `Bearer ${LIMITED}`, "Content-Type": "application/json", "Idempotency-Key": idempotencyKey },
    body: JSON.stringify({ kind: "summarize", input: { text } }),
  });
}

/** Sends creates for the limited owner until one is refused; returns what passed and the refusal. */
async function spend() {
  const admitted = [];
  for (let i = 0; i < 3 * LIMIT; i++) {
    const k = key("spend");
    const text = h.uniqueText(`rate limit ${i}`);
    const r = await create(k, text);
    if (r.status === 429) return { admitted, refused: { key: k, text, response: r, body: await r.json() } };
    assert.equal(r.status, 201, `create ${i} answered ${r.status}`);
    admitted.push(await r.json());
  }
  assert.fail(`${3 * LIMIT} creates in a row passed a limit of ${LIMIT} per ${PERIOD_S} s`);
}

function jobsWithKey(idempotencyKey) {
  const db = new DatabaseSync(h.d1File(), { readOnly: true });
  try {
    return db.prepare("SELECT count(*) AS n FROM jobs WHERE idempotency_key = ?").get(idempotencyKey).n;
  } finally {
    db.close();
  }
}

test("over the limit, a create, an attempt or a list gets 429 rate_limited with Retry-After, and writes nothing", { timeout: TEST_MS }, async () => {
  let job;
  for (let round = 1; ; round++) {
    const { admitted, refused } = await spend();
    assert.equal(refused.response.headers.get("content-type"), "application/problem+json");
    assert.equal(refused.body.code, "rate_limited");
    assert.equal(refused.body.retryable, true);
    assert.equal(refused.response.headers.get("retry-after"), String(PERIOD_S));
    assert.equal(jobsWithKey(refused.key), 0, "no job under the refused key in the D1 file");
    // The fallback button is limited by the same budget, on a job of this owner's: the
    // last one admitted, in this round or an earlier one (a list is refused now too).
    job = admitted.at(-1) ?? job;
    assert.ok(job, "a job was admitted before the first refusal");
    const attempt = await fetch(`${h.URL_BASE}/v1/jobs/${job.id}/attempts`, {
      method: "POST",
      headers: { Authorization: `Bearer ${LIMITED}`, "Content-Type": "application/json", "Idempotency-Key": key("attempt") },
      body: "{}",
    });
    if (attempt.status !== 429 && round < 3) continue; // a window ended in between
    assert.equal(attempt.status, 429, `the attempt answered ${attempt.status}`);
    assert.equal((await attempt.json()).code, "rate_limited");
    // A list asks every shard: it spends the same budget.
    const list = await fetch(`${h.URL_BASE}/v1/jobs?limit=1`, { headers: { Authorization: `Bearer ${LIMITED}` } });
    if (list.status !== 429 && round < 3) continue; // a window ended in between
    assert.equal(list.status, 429, `the list answered ${list.status}`);
    assert.equal((await list.json()).code, "rate_limited");
    // A fresh owner: at least the limit passes before the first refusal.
    if (round === 1) assert.ok(admitted.length >= LIMIT, `only ${admitted.length} passed before the first 429`);
    // The refused create wrote nothing: sent again once the window has passed, the same
    // key makes its job now (201), where a job it had written would be a replay (200).
    let again;
    await h.waitFor(async () => (again = await create(refused.key, refused.text)).status !== 429,
      "the rate limit's window to pass", { everyMs: 250, timeoutMs: (PERIOD_S + 5) * 1000 });
    assert.equal(again.status, 201, "the refused key was free: nothing had been written");
    return;
  }
});

test("the SDK waits as Retry-After tells, then sends the same request again and gets its job", { timeout: TEST_MS }, async () => {
  const allow = [/Failed to load resource: the server responded with a status of 429/];
  const opener = (context, problems) => h.open(context, problems, LIMITED);
  await h.withPage(browser, "rate-limited", { allow, opener }, async (page) => {
    for (let round = 1; ; round++) {
      const posts = [];
      page.on("response", (r) => {
        const req = r.request();
        if (req.method() === "POST" && new URL(r.url()).pathname === "/v1/jobs") {
          posts.push({ at: Date.now(), status: r.status(), key: req.headers()["idempotency-key"] });
        }
      });
      const text = h.uniqueText(`rate limited ${round}`);
      await page.locator("#text").fill(text);
      await spend();
      await page.locator("#generate").click();
      await h.waitStatus(page, "succeeded");
      page.removeAllListeners("response");
      const refused = posts.filter((p) => p.status === 429);
      if (refused.length === 0 && round < 3) continue; // the window ended before the click
      assert.ok(refused.length >= 1, `the page's create was refused first: ${JSON.stringify(posts)}`);
      const admitted = posts.find((p) => p.status === 201 || p.status === 200);
      assert.ok(admitted, "then admitted");
      assert.ok(posts.every((p) => p.key === posts[0].key), "every send carried one key");
      const waited = admitted.at - refused.at(-1).at;
      assert.ok(waited >= PERIOD_S * 1000 - 250, `the SDK waited ${waited} ms after the 429, not the ${PERIOD_S} s Retry-After told`);
      await page.locator("#notes li", { hasText: `The server answered 429: the SDK sends the same request again, with the same Idempotency-Key, in ${PERIOD_S}.00 s` }).waitFor({ timeout: h.WAIT_MS });
      assert.equal(await h.jobsWithText(text, await h.ticket(page), "e2e-limited"), 1);
      return;
    }
  });
});

/** Loads the SDK in `page` as `window[name]`, a client of the streams' owner, and
 *  records every API answer the page gets: `{method, path, status}`. */
async function sdkPage(page, name) {
  await page.evaluate(async ([token, name]) => {
    const sdk = await import("/pkg/onceclick.js");
    await sdk.default();
    window[name] = new sdk.Client({ baseUrl: location.origin, token });
  }, [STREAMS, name]);
  const answers = [];
  page.on("response", (r) => {
    const url = new URL(r.url());
    if (url.pathname.startsWith("/v1/")) answers.push({ method: r.request().method(), path: url.pathname, status: r.status() });
  });
  return answers;
}

test("an owner that submits 40 jobs and waits on each within one period gets no 429: its streams do not spend its creates' budget", { timeout: TEST_MS }, async (t) => {
  const JOBS = 40;
  const opener = (context, problems) => h.open(context, problems, STREAMS);
  await h.withPage(browser, "streams-apart", { opener }, async (page) => {
    const answers = await sdkPage(page, "streamsClient");
    for (let round = 1; ; round++) {
      // The round starts as a period does (the local limiter's windows are the wall
      // clock's, `floor(now / period)`), so that it falls in one period when it takes
      // less than one (about 3.5 s here); a round that did not is run again.
      const periodMs = PERIOD_S * 1000;
      await new Promise((r) => setTimeout(r, periodMs - (Date.now() % periodMs) + 50));
      answers.length = 0;
      const started = Date.now();
      const texts = Array.from({ length: JOBS }, (_, i) => h.uniqueText(`streams apart ${round}.${i}`));
      // Each job submitted, then waited on: its wait opens the SDK's stream (the last
      // job's wait closed it), so the round spends one create and one stream open a job.
      const statuses = await page.evaluate(async (texts) => {
        const statuses = [];
        for (const text of texts) {
          const job = await window.streamsClient.submit("summarize", { text });
          statuses.push((await window.streamsClient.wait(job.id)).status);
        }
        return statuses;
      }, texts);
      const ended = Date.now();
      const refused = answers.filter((a) => a.status === 429);
      assert.deepEqual(refused, [], "no create and no stream open was refused");
      assert.deepEqual(statuses, Array(JOBS).fill("succeeded"));
      const creates = answers.filter((a) => a.method === "POST" && a.path === "/v1/jobs").length;
      const opens = answers.filter((a) => a.path === "/v1/stream" || a.path.endsWith("/stream")).length;
      assert.equal(creates, JOBS, "one create per job");
      t.diagnostic(`round ${round}: ${creates} creates and ${opens} stream opens in ${ended - started} ms`);
      const oneWindow = Math.floor(started / periodMs) === Math.floor(ended / periodMs);
      if (!oneWindow && round < 3) continue; // a period ended mid-round
      assert.ok(oneWindow, `every round took more than one period (the last ${ended - started} ms)`);
      // What makes this a test: on one budget, these would not all have passed.
      assert.ok(creates + opens > LIMIT, `${creates} creates and ${opens} stream opens: more than ${LIMIT} together, or the round proves nothing`);
      return;
    }
  });
});

test("over the stream limit, a stream open gets 429 stream_rate_limited with Retry-After; creates still pass, and the SDK's wait polls instead", { timeout: TEST_MS }, async () => {
  const allow = [/Failed to load resource: the server responded with a status of 429/];
  const opener = (context, problems) => h.open(context, problems, STREAMS);
  const stream = () => fetch(`${h.URL_BASE}/v1/jobs/job_none/stream`, { headers: { Authorization: `Bearer ${STREAMS}` } });
  await h.withPage(browser, "stream-limited", { allow, opener }, async (page) => {
    const answers = await sdkPage(page, "limitedClient");
    for (let round = 1; ; round++) {
      // Spend the owner's stream opens (a job it does not have: counted, then 404).
      let refused;
      for (let i = 0; i < 3 * STREAM_LIMIT && !refused; i++) {
        const r = await stream();
        if (r.status === 429) refused = r;
        else {
          assert.equal(r.status, 404, `stream open ${i} answered ${r.status}`);
          await r.body?.cancel();
        }
      }
      assert.ok(refused, `${3 * STREAM_LIMIT} stream opens in a row passed a limit of ${STREAM_LIMIT} per ${PERIOD_S} s`);
      assert.equal(refused.headers.get("content-type"), "application/problem+json");
      assert.equal(refused.headers.get("retry-after"), String(PERIOD_S));
      const problem = await refused.json();
      assert.equal(problem.code, "stream_rate_limited");
      assert.equal(problem.status, 429);
      assert.equal(problem.retryable, true);
      assert.equal(problem.job_id, undefined, "the refusal names no job: it is the owner's, not one job's");
      // Watching spent nothing creating needs.
      const created = await create(key("streams-spent"), h.uniqueText(`stream limited ${round}`));
      assert.equal(created.status, 201, `a create answered ${created.status} while the stream budget was spent`);
      // The SDK: its create passes, its stream is refused, and its wait polls to the end.
      answers.length = 0;
      const status = await page.evaluate(async (text) => {
        const job = await window.limitedClient.submit("summarize", { text });
        return (await window.limitedClient.wait(job.id)).status;
      }, h.uniqueText(`stream limited sdk ${round}`));
      // Still refused: all of the above fell in the period the opens spent.
      const still = await stream();
      await still.body?.cancel();
      const streams = answers.filter((a) => a.path === "/v1/stream");
      if ((still.status !== 429 || !streams.some((a) => a.status === 429)) && round < 3) continue; // a period ended in between
      assert.equal(still.status, 429, "the stream budget was still spent");
      assert.equal(status, "succeeded");
      assert.deepEqual(answers.filter((a) => a.method === "POST").map((a) => a.status), [201], "the SDK's create passed at once");
      assert.deepEqual(streams.map((a) => a.status), [429], "the SDK's stream was refused, once");
      assert.ok(answers.some((a) => a.method === "GET" && a.path.startsWith("/v1/jobs/job_")), "the wait polled");
      return;
    }
  });
});
