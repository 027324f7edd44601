// The operator's page (www/ops.html) in Chromium against the real Worker: the queue of
// unknown attempts, each way out of one (resolve as failed, as succeeded with a pasted
// result checked against the contract, cancel the job), the figures, the providers with
// their certifications, an axe-core scan and the keyboard.

const { test, before, after } = require("node:test");
const assert = require("node:assert/strict");
const h = require("./harness.js");

const TEST_MS = 120_000;
let browser;

before(async () => {
  browser = await h.launch();
});

after(async () => {
  await browser?.close();
});

/** Creates a job for `text` as the test token's owner; returns it. */
async function create(text) {
  const r = await fetch(`${h.URL_BASE}/v1/jobs`, {
    method: "POST",
    headers: { Authorization: `Bearer ${h.TOKEN}`, "Content-Type": "application/json", "Idempotency-Key": `ops-${text.length}-${Math.random().toString(36).slice(2)}` },
    body: JSON.stringify({ kind: "summarize", input: { text } }),
  });
  assert.equal(r.status, 201);
  return r.json();
}

async function job(id) {
  const r = await fetch(`${h.URL_BASE}/v1/jobs/${id}`, { headers: { Authorization: `Bearer ${h.TOKEN}` } });
  assert.equal(r.status, 200);
  return r.json();
}

/** Polls the job until `done(job)` holds; returns it. */
async function waitJob(id, done, what) {
  let j;
  await h.waitFor(async () => done((j = await job(id))), `job ${id} ${what}`, { everyMs: 100, timeoutMs: 30_000 });
  return j;
}

async function openOps(context, problems) {
  const page = await h.watched(context, problems);
  await page.goto(`${h.URL_BASE}/ops.html#${new URLSearchParams({ admin: h.ADMIN })}`);
  await page.waitForFunction(() => document.body.dataset.ready === "yes", null, { timeout: h.WAIT_MS });
  return page;
}

test("the operator finds every unknown attempt and resolves each one from the page", { timeout: TEST_MS }, async () => {
  // Four jobs whose provider hangs past its timeout: four unknown attempts.
  const texts = [1, 2, 3, 4].map((i) => h.uniqueText(`ops ${i}`));
  for (const text of texts) {
    const r = await fetch(`${h.MOCK}/_script`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ provider: "primary", contains: text, steps: [{ delay_ms: 60000 }, {}] }),
    });
    assert.ok(r.ok);
  }
  const jobs = await Promise.all(texts.map(create));
  const stuck = await Promise.all(jobs.map((j) => waitJob(j.id, (x) => x.status === "unknown", "unknown")));
  const attempts = stuck.map((j) => j.attempts[0].id);

  // A contract violation and an attempt resolved behind the page's back answer in words.
  const allow = [/Failed to load resource: the server responded with a status of (409|422)/];
  await h.withPage(browser, "ops", { opener: openOps, allow }, async (page) => {
    const rowOf = (attempt) => page.locator(`#queue tr[data-attempt="${attempt}"]`);
    // Unknown attempts left by earlier tests come first (oldest first): page on until ours show.
    for (const a of attempts) {
      while ((await rowOf(a).count()) === 0) {
        assert.ok(await page.locator("#more").isVisible(), `attempt ${a} is not in the queue`);
        await page.locator("#more").click();
        await page.waitForFunction((n) => document.querySelectorAll("#queue tbody tr").length > n,
          await page.locator("#queue tbody tr").count(), { timeout: h.WAIT_MS });
      }
    }
    assert.deepEqual(await h.axeScan(page), [], "no serious or critical violation");
    const order = await page.$$eval("#queue tbody tr", (trs) => trs.map((tr) => tr.dataset.attempt));
    // The four were created at once, so their age is their id's (a UUIDv7 sorts by creation),
    // not the order of `texts`.
    const ours = order.filter((a) => attempts.includes(a));
    assert.deepEqual(ours, [...attempts].sort(), "oldest first");

    // 1. Resolve as failed: the row goes, the job is failed and may be tried again.
    await rowOf(attempts[0]).getByRole("button", { name: "Resolve as failed" }).click();
    await rowOf(attempts[0]).waitFor({ state: "detached", timeout: h.WAIT_MS });
    assert.match(await page.locator("#status").innerText(), /resolved as failed/);
    assert.equal((await job(stuck[0].id)).status, "failed");

    // 2. Resolve as succeeded: a result that breaks the contract is refused in words …
    const second = rowOf(attempts[1]);
    await second.locator("summary").click();
    await second.locator("textarea").fill('{"summary": "short"}');
    await second.getByRole("button", { name: "Resolve as succeeded" }).click();
    await page.locator('#error[data-code="contract_violation"]').waitFor({ timeout: h.WAIT_MS });
    assert.match(await page.locator("#error").innerText(), /output contract/);
    assert.equal((await job(stuck[1].id)).status, "unknown", "nothing was written");
    // … and one that meets it, typed from the keyboard, completes the job.
    await second.locator("textarea").fill("");
    await second.locator("textarea").focus();
    await page.keyboard.type('{"summary": "short", "sentiment": "neutral"}');
    await page.keyboard.press("Tab");
    await page.keyboard.press("Enter");
    await rowOf(attempts[1]).waitFor({ state: "detached", timeout: h.WAIT_MS });
    const done = await job(stuck[1].id);
    assert.equal(done.status, "succeeded");
    assert.deepEqual(done.result, { summary: "short", sentiment: "neutral" });

    // 3. Cancel the job: its attempt is cancelled with it.
    await rowOf(attempts[2]).getByRole("button", { name: "Cancel the job" }).click();
    await rowOf(attempts[2]).waitFor({ state: "detached", timeout: h.WAIT_MS });
    const cancelled = await job(stuck[2].id);
    assert.equal(cancelled.status, "cancelled");
    assert.equal(cancelled.attempts[0].state, "cancelled");

    // 4. An attempt someone else resolved meanwhile: the page says so and refreshes.
    const r = await fetch(`${h.URL_BASE}/v1/attempts/${attempts[3]}/resolve`, {
      method: "POST",
      headers: { Authorization: `Bearer ${h.ADMIN}`, "Content-Type": "application/json" },
      body: JSON.stringify({ outcome: "failed" }),
    });
    assert.equal(r.status, 200);
    await rowOf(attempts[3]).getByRole("button", { name: "Resolve as cancelled" }).click();
    await page.locator('#error[data-code="attempt_not_unknown"]').waitFor({ timeout: h.WAIT_MS });
    assert.match(await page.locator("#error").innerText(), /no longer unknown/);
    await rowOf(attempts[3]).waitFor({ state: "detached", timeout: h.WAIT_MS });
    assert.equal((await job(stuck[3].id)).status, "failed", "the first decision stands");

    // The figures are on the page, from GET /v1/stats.
    await page.waitForFunction(() => document.body.dataset.figures === "yes", null, { timeout: h.WAIT_MS });
    const unknowns = Number(await page.locator('#figures tr[data-figure="attempts_unknown"] td').innerText());
    assert.ok(unknowns >= 3, `the figures count the unknown attempts: ${unknowns}`);
    assert.deepEqual(await h.axeScan(page), [], "no serious or critical violation after the decisions");
  });
});

test("the operator sees each provider, how it is asked, and why failover skips it for a kind", { timeout: TEST_MS }, async () => {
  await h.withPage(browser, "ops-providers", { opener: openOps }, async (page) => {
    await page.waitForFunction(() => document.body.dataset.providers === "yes", null, { timeout: h.WAIT_MS });
    const provider = (name) => page.locator(`#providers tbody tr[data-provider="${name}"]`);
    const field = (name, f) => provider(name).locator(`td[data-field="${f}"]`).innerText();
    const names = await page.$$eval("#providers tbody tr", (trs) => trs.map((tr) => tr.dataset.provider));
    assert.deepEqual(names.sort(), ["fallback", "primary"]);

    // The test Worker's fallback is of the other shape (tests/src/mock.rs providers_var):
    // JSON asked as json_object, its key in api-key, two more headers (one a secret's).
    assert.equal(await field("fallback", "json_form"), "json_object");
    assert.equal(await field("fallback", "model"), "mock-large");
    const headers = await provider("fallback").locator('td[data-field="headers"] code').allInnerTexts();
    assert.deepEqual(headers.sort(), ["X-Tenant", "X-Title"], "its headers' names (never their values)");
    assert.doesNotMatch(await field("fallback", "headers"), /onceclick tests/, "a header's value is not shown");
    assert.equal(await field("primary", "json_form"), "strict", "today's form is the default");
    assert.equal(await field("primary", "headers"), "none");
    // Every secret the test Worker's providers name is set.
    assert.ok(await page.locator("#providers-warnings").isHidden());
    assert.equal(await page.locator("#providers .missing").count(), 0);

    // primary is summarize's primary; no golden prompt fits its max_prompt_tokens (10), so
    // it is not certified for any kind: a failed report says prompt too long, and until
    // the background pass has run, the page says it is to come.
    const summarize = provider("primary").locator('li[data-kind="summarize"]');
    assert.equal(await summarize.getAttribute("data-primary"), "true");
    assert.match(await summarize.innerText(), /primary/);
    const refused = provider("primary").locator('li[data-certified="false"]');
    assert.ok((await refused.count()) > 0, "primary is not certified for some kind");
    assert.equal(await provider("primary").locator('li[data-certified="true"]').count(), 0);
    for (const why of await refused.locator(".why").allInnerTexts()) {
      assert.match(why, /max_prompt_tokens of primary|background pass/, `a reason is shown: ${why}`);
    }
    assert.equal(await refused.locator(".why").count(), await refused.count(), "each refusal has its reason");
    assert.match(await refused.first().innerText(), /not certified/);

    // Refresh reads the providers again: once fallback is certified, the page says so.
    // (The page marks each load of GET /v1/providers it has shown.)
    await h.certifyFallback();
    await page.evaluate(() => { delete document.body.dataset.providers; });
    await page.locator("#refresh").click();
    await page.waitForFunction(() => document.body.dataset.providers === "yes", null, { timeout: h.WAIT_MS });
    const fallbackSummarize = provider("fallback").locator('li[data-kind="summarize"]');
    assert.equal(await fallbackSummarize.getAttribute("data-certified"), "true");
    assert.match(await fallbackSummarize.innerText(), /certified/);
    assert.equal(await fallbackSummarize.getAttribute("data-primary"), "false");
    assert.equal(await provider("fallback").locator('li[data-certified="false"]').count(), 0, "certified for every kind");
    assert.equal(await provider("fallback").locator(".why").count(), 0, "no reason where none is due");
    assert.deepEqual(await h.axeScan(page), [], "no serious or critical violation");
  });
});
