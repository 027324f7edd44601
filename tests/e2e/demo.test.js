// The demo page, end to end: Debian's Chromium (playwright-core) on the page that the
// real Worker serves, the real mock provider behind it, jobs counted in the real D1
// file. Each test works on a text of its own (or a kind's golden input, which the mock
// answers with its golden output) and saves a screenshot in target/e2e/.

const { test, before, after } = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const h = require("./harness.js");

const TEST_MS = 90_000;
let browser;

before(async () => {
  browser = await h.launch();
  await h.certifyFallback();
});

after(async () => {
  await browser?.close();
});

test("a real double-click on Generate shows one ticket and makes one job", { timeout: TEST_MS }, async () => {
  await h.withPage(browser, "double-click", {}, async (page) => {
    const text = h.uniqueText("double-click");
    const keys = [];
    page.on("request", (r) => {
      if (r.method() === "POST" && new URL(r.url()).pathname === "/v1/jobs") keys.push(r.headers()["idempotency-key"]);
    });
    await page.evaluate(() => {
      window.submits = 0;
      document.getElementById("form").addEventListener("submit", () => { window.submits += 1; });
    });
    await page.locator("#text").fill(text);
    await page.locator("#generate").dblclick();
    await h.waitStatus(page, "succeeded");
    assert.equal(await page.evaluate(() => window.submits), 2, "the double-click submitted the form twice");
    assert.match(await h.ticket(page), /^job_/);
    assert.equal(await h.jobsWithText(text, await h.ticket(page)), 1, "one job in D1");
    assert.equal((await h.providerCalls(text)).length, 1, "one provider call");
    assert.ok(keys.length >= 1 && keys.every((k) => k === keys[0]), `every POST /v1/jobs carried one key: ${keys}`);
    await h.waitRows(page, [{ n: 1, provider: "primary", state: "succeeded", winner: true }]);
    // The event log is read after the job: wait for it, then count.
    await page.locator('#events li[data-type="job_created"]').first().waitFor({ timeout: h.WAIT_MS });
    await page.locator('#events li[data-type="attempt_succeeded"]').first().waitFor({ timeout: h.WAIT_MS });
    assert.equal(await page.locator('#events li[data-type="job_created"]').count(), 1);
    assert.ok((await page.locator("#result-summary").innerText()).length > 0, "the result card shows the summary");
    console.log(`double-click: ${keys.length} request(s) on the wire for 2 clicks, 1 job`);

    // Another text is another intent: a new ticket, a new job.
    const first = await h.ticket(page);
    const other = text.replace("a plan they liked", "a plan they loved");
    await page.locator("#text").fill(other);
    await page.locator("#generate").click();
    await page.waitForFunction((old) => {
      const id = document.querySelector("#ticket-id")?.textContent ?? "";
      return id.startsWith("job_") && id !== old;
    }, first, { timeout: h.WAIT_MS });
    await h.waitStatus(page, "succeeded");
    assert.equal(await h.jobsWithText(other, await h.ticket(page)), 1, "the other text made its own job");
    // Generate again on the text whose result is shown: the same ticket, no new job.
    const second = await h.ticket(page);
    await page.locator("#generate").click();
    await page.locator("#notes li", { hasText: "Same input, same ticket" }).waitFor({ timeout: h.WAIT_MS });
    assert.equal(await h.ticket(page), second);
    assert.equal(await h.jobsWithText(other, await h.ticket(page)), 1, "still one job for that text");
  });
});

test("a reload in mid-flight shows the same ticket", { timeout: TEST_MS }, async () => {
  await h.withPage(browser, "reload", {}, async (page) => {
    const text = h.uniqueText("reload");
    await h.arm(page, "hold");
    await page.locator("#text").fill(text);
    await page.locator("#generate").click();
    await h.waitRows(page, [{ n: 1, provider: "primary", state: "running" }]);
    const before = await h.ticket(page);

    // From the reload on, what the page asks of the API about this job.
    const asked = [];
    page.on("request", (r) => {
      const url = new URL(r.url());
      if (url.pathname.startsWith("/v1/")) asked.push({ method: r.method(), path: url.pathname, query: url.searchParams });
    });
    // The reloaded page re-attaches to the job's live stream (one connection for the
    // jobs the page waits on, each named by a `job` parameter).
    const reattached = page.waitForRequest((r) => {
      const url = new URL(r.url());
      return url.pathname === "/v1/stream" && url.searchParams.getAll("job").some((j) => j.split(":")[0] === before);
    }, { timeout: h.WAIT_MS });
    await page.reload();
    await h.ready(page);
    assert.equal(await h.waitTicket(page, before), before, "the same ticket after the reload");
    await reattached;
    const polls = () => asked.filter((a) => a.method === "GET" && a.path === `/v1/jobs/${before}`).length;
    await page.locator("#notes li", { hasText: "After the reload" }).waitFor({ timeout: h.WAIT_MS });
    assert.equal(await page.locator("#text").inputValue(), text, "the form kept its text");
    assert.equal(await h.jobsWithText(text, await h.ticket(page)), 1, "still one job in D1");

    await page.locator("#release-primary").click();
    await h.waitStatus(page, "succeeded");
    // The result came on the stream: the page polls only after `wait` has resolved (a
    // release's late result is only logged), never before the result is shown.
    assert.equal(polls(), 0, "no GET of the job before its result was on the page");
    assert.equal(await h.jobsWithText(text, await h.ticket(page)), 1);
    assert.equal((await h.providerCalls(text)).length, 1, "one provider call");
  });
});

test("the same text in a second tab shows the same ticket, followed on the first tab's connection", { timeout: TEST_MS }, async () => {
  await h.withPage(browser, "second-tab-first", {}, async (page, context, problems) => {
    const text = h.uniqueText("second-tab");
    await h.arm(page, "hold");
    await page.locator("#text").fill(text);
    await page.locator("#generate").click();
    await h.waitRows(page, [{ n: 1, provider: "primary", state: "running" }]);
    const first = await h.ticket(page);

    const second = await h.open(context, problems);
    const asked = h.askedOf(second);
    try {
      await second.locator("#text").fill(text);
      await second.locator("#generate").click();
      assert.equal(await h.waitTicket(second, first), first, "the second tab shows the same ticket");
      assert.equal(await h.jobsWithText(text, await h.ticket(page)), 1, "one job in D1");
      await second.locator("#release-primary").click();
      await h.waitStatus(second, "succeeded");
      await h.waitStatus(page, "succeeded");
      // The second tab heard the result from the first tab's stream: it opened none of
      // its own, and never polled.
      assert.deepEqual(asked.filter((a) => a.path === "/v1/stream"), [], "no stream from the second tab");
      assert.deepEqual(asked.filter((a) => a.method === "GET" && a.path === `/v1/jobs/${first}`), [], "no poll from the second tab");
      assert.equal(await h.jobsWithText(text, await h.ticket(page)), 1);
      assert.equal((await h.providerCalls(text)).length, 1, "one provider call");
    } finally {
      await second.screenshot({ path: path.join(process.env.ONCECLICK_E2E_OUT, "second-tab-second.png"), fullPage: true });
    }
  });
});

test("a tab that closes hands the live connection to the tab that stays", { timeout: TEST_MS }, async () => {
  await h.withPage(browser, "hand-off-first", {}, async (page, context, problems) => {
    const text = h.uniqueText("hand-off");
    await h.arm(page, "hold");
    await page.locator("#text").fill(text);
    await page.locator("#generate").click();
    await h.waitRows(page, [{ n: 1, provider: "primary", state: "running" }]);
    const first = await h.ticket(page);

    const second = await h.open(context, problems);
    const asked = h.askedOf(second);
    await second.locator("#text").fill(text);
    await second.locator("#generate").click();
    assert.equal(await h.waitTicket(second, first), first, "the second tab shows the same ticket");
    assert.deepEqual(asked.filter((a) => a.path === "/v1/stream"), [], "no stream while the first tab leads");

    // The first tab goes: its lock is released, and the second tab opens the stream.
    const takeover = second.waitForRequest((r) => {
      const url = new URL(r.url());
      return url.pathname === "/v1/stream" && url.searchParams.getAll("job").some((j) => j.split(":")[0] === first);
    }, { timeout: h.WAIT_MS });
    await page.close();
    await takeover;
    await second.locator("#release-primary").click();
    await h.waitStatus(second, "succeeded");
    assert.deepEqual(asked.filter((a) => a.method === "GET" && a.path === `/v1/jobs/${first}`), [], "the result came on the stream, not a poll");
    assert.equal((await h.providerCalls(text)).length, 1, "one provider call");
  });
});

test("ten jobs watched in two tabs all finish live, on one connection", { timeout: TEST_MS }, async () => {
  await h.withPage(browser, "ten-jobs-two-tabs", {}, async (page, context, problems) => {
    const marker = h.uniqueText("ten-jobs").slice(0, 30);
    const gate = await h.holdAll("primary", marker);
    const second = await h.open(context, problems);
    const tabs = [page, second];
    const asked = tabs.map((tab) => h.askedOf(tab));
    // Five jobs per tab, each followed by `wait` on the SDK the page loaded.
    const ids = [];
    for (const [n, tab] of tabs.entries()) {
      const texts = [0, 1, 2, 3, 4].map((k) => `${marker} job ${n * 5 + k}: the meeting ran long, but everyone left with a plan.`);
      ids.push(...(await tab.evaluate(async ({ texts, token }) => {
        const sdk = await import("/pkg/onceclick.js");
        await sdk.default();
        const client = new sdk.Client({ baseUrl: location.origin, token });
        const jobs = [];
        for (const text of texts) jobs.push(await client.submit("summarize", { text }));
        window.tenJobs = Promise.all(jobs.map((job) => client.wait(job.id).then((done) => done.status)));
        return jobs.map((job) => job.id);
      }, { texts, token: h.TOKEN })));
    }
    assert.equal(new Set(ids).size, 10, "ten jobs");
    // One tab's connection comes to follow all ten (it reopens as jobs join), while
    // every call is held.
    const streams = (i) => asked[i].filter((a) => a.path === "/v1/stream");
    await h.waitFor(
      () => tabs.some((_, i) => streams(i).some((s) => ids.every((id) => s.jobs.includes(id)))),
      "one stream that follows all ten jobs",
    );
    await h.release(gate);
    for (const tab of tabs) {
      assert.deepEqual(await tab.evaluate(() => window.tenJobs), Array(5).fill("succeeded"));
    }
    const leaders = tabs.filter((_, i) => streams(i).length > 0);
    assert.equal(leaders.length, 1, "one tab holds the connection, the other follows it");
    for (const [i] of tabs.entries()) {
      const polls = asked[i].filter((a) => a.method === "GET" && ids.some((id) => a.path === `/v1/jobs/${id}`));
      assert.deepEqual(polls, [], `no poll from tab ${i + 1}`);
    }
  });
});

test("a swallowed answer is retried with the same key, and the page shows one job", { timeout: TEST_MS }, async () => {
  // The proxy closes the connection without a byte once the Worker has answered:
  // Chromium logs that failed load as a console error.
  const allow = [/Failed to load resource: net::ERR_EMPTY_RESPONSE/];
  await h.withPage(browser, "swallow", { allow }, async (page) => {
    const text = h.uniqueText("swallow");
    await h.arm(page, "swallow");
    await page.locator("#text").fill(text);
    await page.locator("#generate").click();
    await h.waitStatus(page, "succeeded");
    await page.locator("#notes li", { hasText: "the SDK sends the same request again, with the same Idempotency-Key" }).waitFor({ timeout: h.WAIT_MS });
    assert.equal(await h.jobsWithText(text, await h.ticket(page)), 1, "one job in D1: the retry was a replay");
    assert.equal((await h.providerCalls(text)).length, 1, "one provider call");
    await h.waitRows(page, [{ n: 1, provider: "primary", state: "succeeded", winner: true }]);
  });
});

test("hang → unknown → the fallback is refused in words → resolve → the fallback succeeds", { timeout: TEST_MS }, async () => {
  // The refused fallback is a 409 that Chromium logs as a failed load.
  const allow = [/Failed to load resource: the server responded with a status of 409/];
  await h.withPage(browser, "hang-resolve", { allow }, async (page) => {
    const text = h.uniqueText("hang");
    await h.arm(page, "hang");
    await page.locator("#text").fill(text);
    await page.locator("#generate").click();
    await h.waitStatus(page, "unknown");
    await h.waitRows(page, [{ n: 1, provider: "primary", state: "unknown" }]);
    assert.match(await page.locator("#decision-text").innerText(), /nobody knows whether it did the work/);

    await page.locator("#fallback").click();
    const refused = await h.waitError(page, "attempt_unresolved");
    assert.match(refused, /attempt_unresolved/);
    assert.match(refused, /The last attempt is unknown: the provider may still be doing the work/);
    assert.doesNotMatch(refused, /\[object Object\]/);

    await page.locator("#resolve").click();
    await h.waitStatus(page, "failed");
    await h.waitRows(page, [{ n: 1, provider: "primary", state: "failed" }]);

    await page.locator("#fallback").click();
    await h.waitStatus(page, "succeeded");
    await h.waitRows(page, [
      { n: 1, provider: "primary", state: "failed", winner: false },
      { n: 2, provider: "fallback", state: "succeeded", winner: true },
    ]);
    await page.locator('#events li[data-type="attempt_succeeded"]').waitFor({ timeout: h.WAIT_MS });
    assert.equal(await h.jobsWithText(text, await h.ticket(page)), 1, "one job, two attempts");
    assert.ok(await page.locator("#error").isHidden(), "the error is gone once the fallback ran");
  });
});

test("a hedge race finished in reverse order shows one winner and one superseded attempt", { timeout: TEST_MS }, async () => {
  await h.withPage(browser, "race", {}, async (page) => {
    const text = h.uniqueText("race");
    await h.arm(page, "race");
    await page.locator("#text").fill(text);
    await page.locator("#generate").click();
    await h.waitRows(page, [
      { n: 1, provider: "primary", state: "running" },
      { n: 2, provider: "fallback", state: "running" },
    ]);
    // The README's picture: the page in the middle of a race.
    const shot = await h.snapshot(page, "readme-race");
    if (process.env.ONCECLICK_E2E_README === "1") {
      fs.copyFileSync(shot, path.join(__dirname, "../../docs/demo-race.png"));
    }

    await page.locator("#release-fallback").click();
    await h.waitStatus(page, "succeeded");
    // The primary lost. Its dispatcher's watch stops its call within CANCEL_POLL_MS
    // (superseded at once), or its held answer comes once released and is the late
    // loser: either way it ends superseded, and the page may never show it running
    // after the win. Releasing a call already stopped changes nothing.
    await page.locator("#release-primary").click();
    const final = await h.waitRows(page, [
      { n: 1, provider: "primary", state: "superseded", winner: false },
      { n: 2, provider: "fallback", state: "succeeded", winner: true },
    ]);
    assert.equal(final.filter((r) => r.winner).length, 1, "one winner");
    assert.match(final[1].text, /winner/);
    await page.locator('#events li[data-type="race_lost"]').waitFor({ timeout: h.WAIT_MS });
    assert.match(await page.locator("#result-meta").innerText(), /attempt 2 on fallback/);
    assert.equal(await h.jobsWithText(text, await h.ticket(page)), 1, "one job");
  });
});

/** The streamed text the page shows (raw, as the provider sends it), once it has `n` code points. */
async function writtenAtLeast(page, n) {
  await page.waitForFunction((n) => [...(document.querySelector("#writing-raw")?.textContent ?? "")].length >= n, n, { timeout: h.WAIT_MS });
  return page.locator("#writing-raw").textContent();
}

test("a streamed answer is written as it comes, and a reload mid-stream continues it on the same job", { timeout: TEST_MS }, async () => {
  await h.withPage(browser, "stream-reload", {}, async (page) => {
    const text = h.uniqueText("stream");
    await h.arm(page, "stream");
    await page.locator("#text").fill(text);
    await page.locator("#generate").click();
    const before = await writtenAtLeast(page, 10);
    const ticket = await h.ticket(page);
    // Text may come before the job's first document (the catch-up): the status is awaited.
    await h.waitStatus(page, "running");

    await page.reload();
    await h.ready(page);
    assert.equal(await h.waitTicket(page, ticket), ticket, "the same ticket after the reload");
    await h.waitStatus(page, "succeeded");
    const after = await page.locator("#writing-raw").textContent();
    assert.ok(after.startsWith(before), `the text went on from ${JSON.stringify(before)}: ${JSON.stringify(after)}`);
    // The text written is the answer: its summary is the result the page shows.
    const written = JSON.parse(after);
    assert.equal(written.summary, await page.locator("#result-summary").innerText());
    assert.equal(await page.locator("#writing-text").innerText(), written.summary, "the summary, written from the partial object");
    assert.equal((await h.providerCalls(text)).length, 1, "one provider call");
    assert.equal(await h.jobsWithText(text, ticket), 1, "one job");
  });
});

test("cancel mid-stream stops the text and closes the provider's connection", { timeout: TEST_MS }, async () => {
  await h.withPage(browser, "stream-stop", {}, async (page) => {
    const text = h.uniqueText("stream-stop");
    await h.arm(page, "stream");
    await page.locator("#text").fill(text);
    await page.locator("#generate").click();
    await writtenAtLeast(page, 6);
    await page.locator("#cancel").click();
    await h.waitStatus(page, "cancelled");
    const atCancel = await page.locator("#writing-raw").textContent();
    await h.waitFor(async () => {
      const calls = await h.providerCalls(text);
      return calls.some((c) => typeof c.closed_after_ms === "number");
    }, "the mock seeing its connection closed");
    assert.equal((await h.providerCalls(text)).length, 1, "one provider call");
    const shown = await page.locator("#writing-raw").textContent();
    assert.equal(shown, atCancel, "no text after the job said cancelled");
    assert.throws(() => JSON.parse(shown), "the text stopped before the answer was whole");
    assert.equal(await page.locator("#result").isHidden(), true, "no result");
  });
});

test("a hedge race where both attempts stream shows both texts and keeps the winner's", { timeout: TEST_MS }, async () => {
  await h.withPage(browser, "stream-race", {}, async (page) => {
    const text = h.uniqueText("stream-race");
    await h.arm(page, "stream_race");
    await page.locator("#text").fill(text);
    await page.locator("#generate").click();
    // Both attempts write in the timeline at once (the primary, silent past the hedge's
    // 300 ms, then slowly; the hedge faster).
    await page.waitForFunction(() => {
      const written = (n) => document.querySelector(`#timeline tr[data-n="${n}"] .attempt-text`)?.textContent ?? "";
      return written(1).length > 0 && written(2).length > 0;
    }, null, { timeout: h.WAIT_MS });
    await h.waitStatus(page, "succeeded");
    const final = await h.waitRows(page, [
      { n: 1, provider: "primary", state: "superseded", winner: false },
      { n: 2, provider: "fallback", state: "succeeded", winner: true },
    ]);
    assert.equal(final.filter((r) => r.winner).length, 1, "one winner");
    // What the page shows as written is the winner's text, and it is the result.
    const winner = await page.locator('#timeline tr[data-winner="true"]').getAttribute("data-attempt");
    assert.equal(await page.locator("#writing").getAttribute("data-attempt"), winner);
    const written = JSON.parse(await page.locator("#writing-raw").textContent());
    assert.equal(written.summary, await page.locator("#result-summary").innerText());
    // The loser's text stopped short of a whole answer: the page kept it apart.
    const loser = await page.locator('#timeline tr[data-n="1"] .attempt-text').textContent();
    assert.throws(() => JSON.parse(loser), `the loser's text is not a whole answer: ${loser}`);
    const calls = await h.providerCalls(text);
    assert.deepEqual(calls.map((c) => [c.provider, c.stream]).sort(), [["fallback", true], ["primary", true]], "one call each, both streamed");
  });
});

test("the page passes an axe-core scan, works from the keyboard and logs no console error", { timeout: TEST_MS }, async () => {
  await h.withPage(browser, "accessibility", {}, async (page) => {
    const scan = () => h.axeScan(page);
    assert.deepEqual(await scan(), [], "no serious or critical violation on load");

    // From the keyboard only: into the text, type, Tab to Generate, Enter.
    const text = h.uniqueText("keyboard");
    await page.locator("#text").focus();
    await page.keyboard.press("Control+A");
    await page.keyboard.type(text);
    await page.keyboard.press("Tab");
    assert.equal(await page.evaluate(() => document.activeElement?.id), "generate");
    await page.keyboard.press("Enter");
    await h.waitStatus(page, "succeeded");
    // The change was announced through the live region.
    await page.waitForFunction(() => /succeeded/.test(document.getElementById("announce").textContent), null, { timeout: h.WAIT_MS });
    assert.equal(await page.locator("#announce").getAttribute("aria-live"), "polite");

    // The raw JSON opens from the keyboard too.
    await page.locator("#raw summary").focus();
    await page.keyboard.press("Enter");
    assert.equal(await page.locator("#raw").getAttribute("open"), "");
    assert.match(await page.locator("#raw-job").innerText(), /"status": "succeeded"/);
    assert.deepEqual(await scan(), [], "no serious or critical violation with a result and the raw JSON open");
  });
});

// ---------------------------------------------------------------- the kind picker

test("the kind picker shows translate's two fields from its example, and its job shows the translation as text", { timeout: TEST_MS }, async () => {
  await h.withPage(browser, "kind-translate", {}, async (page) => {
    const examples = h.golden("translate");
    const [{ input, output }] = examples;
    const offered = await page.$$eval("#kind option", (options) => options.map((o) => o.value));
    for (const kind of ["summarize", "summarize_hedged", "translate", "classify", "extract"]) {
      assert.ok(offered.includes(kind), `the picker offers ${kind}: ${offered}`);
    }
    await h.pickKind(page, "translate");
    assert.match(await page.locator("#kind-description").innerText(), /Translate a text into another language/);
    assert.equal(await page.locator("#fields [name]").count(), 2, "two fields: text and to");
    assert.equal(await page.locator("#text").inputValue(), input.text, "prefilled from the first example");
    assert.equal(await page.locator("#in-to").inputValue(), input.to);
    assert.match(await page.locator('label[for="in-to"]').innerText(), /\(required\)/);
    // The other examples load, and the first comes back.
    await page.locator('#examples button[data-example="1"]').click();
    assert.equal(await page.locator("#in-to").inputValue(), examples[1].input.to);
    assert.equal(await page.locator("#text").inputValue(), examples[1].input.text);
    await page.locator('#examples button[data-example="0"]').click();
    assert.equal(await page.locator("#in-to").inputValue(), input.to);
    assert.deepEqual(await h.axeScan(page), [], "no serious or critical violation with translate's form");

    await page.locator("#generate").click();
    await h.waitStatus(page, "succeeded");
    assert.match(await page.locator("#job-kind").innerText(), /^translate · /);
    assert.equal(await page.locator("#result-summary").innerText(), output, "the golden translation, shown as text");
    assert.ok(await page.locator("#result-json").isHidden(), "a text answer is not shown as JSON");
    assert.match(await page.locator("#result-meta").innerText(), /A text answer · by attempt 1 on primary/);
    // The live text of a text answer is the text itself.
    await page.waitForFunction((want) => document.getElementById("writing-text")?.textContent === want, output, { timeout: h.WAIT_MS });
  });
});

test("classify and extract jobs succeed and show their JSON; the same kind and input again is the same ticket", { timeout: TEST_MS }, async () => {
  await h.withPage(browser, "kind-classify-extract", {}, async (page) => {
    for (const kind of ["classify", "extract"]) {
      const [{ input, output }] = h.golden(kind);
      const before = await page.locator("#ticket-id").textContent();
      await h.pickKind(page, kind);
      assert.equal(await page.locator("#text").inputValue(), input.text, `${kind}: prefilled from its first example`);
      if (input.labels) {
        assert.equal(await page.locator("#in-labels").inputValue(), input.labels.join(", "));
        assert.match(await page.locator('label[for="in-labels"]').innerText(), /separated by commas/);
      }
      await page.locator("#generate").click();
      await page.waitForFunction((old) => {
        const id = document.querySelector("#ticket-id")?.textContent ?? "";
        return id.startsWith("job_") && id !== old;
      }, before, { timeout: h.WAIT_MS });
      await h.waitStatus(page, "succeeded");
      assert.match(await page.locator("#job-kind").innerText(), new RegExp(`^${kind} · `));
      assert.deepEqual(JSON.parse(await page.locator("#result-json").innerText()), output, `${kind}: the golden output, as JSON`);
      assert.ok(await page.locator("#result-summary").isHidden(), `${kind}: no text line for a JSON answer`);
      assert.match(await page.locator("#result-meta").innerText(), /A JSON answer/);
    }
    const ticket = await h.ticket(page);
    await page.locator("#generate").click();
    await page.locator("#notes li", { hasText: "Same input, same ticket" }).waitFor({ timeout: h.WAIT_MS });
    assert.equal(await h.ticket(page), ticket, "extract's input again: the same ticket");
  });
});

test("a reload in mid-flight keeps the kind and its input, and shows the same ticket", { timeout: TEST_MS }, async () => {
  await h.withPage(browser, "kind-reload", {}, async (page) => {
    await h.pickKind(page, "classify");
    // The scenario tags the text (the mock's marker) and arms the hold.
    await page.locator('button[data-scenario="reload"]').click();
    const text = await page.locator("#text").inputValue();
    const labels = await page.locator("#in-labels").inputValue();
    assert.match(text, /\([0-9a-z]+-[0-9a-z]+\)$/, "the scenario made the text fresh");
    await page.locator("#generate").click();
    await h.waitRows(page, [{ n: 1, provider: "primary", state: "running" }]);
    const before = await h.ticket(page);

    await page.reload();
    await h.ready(page);
    assert.equal(await h.waitTicket(page, before), before, "the same ticket after the reload");
    await page.locator("#notes li", { hasText: "After the reload" }).waitFor({ timeout: h.WAIT_MS });
    assert.equal(await page.locator("#kind").inputValue(), "classify", "the picker kept the kind");
    assert.equal(await page.locator("#text").inputValue(), text);
    assert.equal(await page.locator("#in-labels").inputValue(), labels);

    await page.locator("#release-primary").click();
    await h.waitStatus(page, "succeeded");
    const result = JSON.parse(await page.locator("#result-json").innerText());
    assert.ok(labels.split(", ").includes(result.label), `the label is one of the input's: ${result.label}`);
    assert.equal(await h.jobsWithText(text, await h.ticket(page)), 1, "one job in D1");
    assert.equal((await h.providerCalls(text)).length, 1, "one provider call");
  });
});

test("the failure lab works on another kind: translate hangs → unknown → resolve → the fallback translates", { timeout: TEST_MS }, async () => {
  await h.withPage(browser, "kind-translate-hang", {}, async (page) => {
    await h.pickKind(page, "translate");
    await page.locator('button[data-scenario="hang"]').click();
    assert.equal(await page.locator("#kind").inputValue(), "translate", "the scenario kept the kind");
    const text = await page.locator("#text").inputValue();
    assert.match(text, /\([0-9a-z]+-[0-9a-z]+\)$/, "the scenario made the text fresh");
    await page.locator("#generate").click();
    await h.waitStatus(page, "unknown");
    await h.waitRows(page, [{ n: 1, provider: "primary", state: "unknown" }]);
    // The marker reached the prompt: the mock knew the call, and hung it.
    const calls = await h.providerCalls(text);
    assert.deepEqual(calls.map((c) => c.provider), ["primary"]);
    assert.match(calls[0].prompt, /Translate into French/);

    await page.locator("#resolve").click();
    await h.waitStatus(page, "failed");
    await page.locator("#fallback").click();
    await h.waitStatus(page, "succeeded");
    await h.waitRows(page, [
      { n: 1, provider: "primary", state: "failed", winner: false },
      { n: 2, provider: "fallback", state: "succeeded", winner: true },
    ]);
    assert.ok((await page.locator("#result-summary").innerText()).length > 0, "the fallback's translation, as text");
    assert.ok(await page.locator("#result-json").isHidden());
    assert.equal(await h.jobsWithText(text, await h.ticket(page)), 1, "one job, two attempts");
  });
});

test("the input form is made from the schema: fieldsets, comma lists, numbers, checkboxes, choices, JSON", { timeout: TEST_MS }, async () => {
  await h.withPage(browser, "kind-form", {}, async (page) => {
    const made = await page.evaluate(async () => {
      const kinds = await import("/kinds.js");
      const form = kinds.formFor({
        type: "object",
        required: ["customer", "tags", "count"],
        properties: {
          customer: {
            type: "object",
            required: ["name"],
            properties: { name: { type: "string", maxLength: 80 }, note: { type: ["string", "null"] } },
          },
          tags: { type: "array", items: { type: "string" } },
          count: { type: "integer" },
          urgent: { type: "boolean" },
          tone: { enum: ["warm", "dry"] },
          points: { type: "array", items: { type: "number" } },
        },
      });
      const input = { customer: { name: "Ada", note: "Two\nlines" }, tags: ["a", "b c"], count: 3, urgent: true, tone: "dry", points: [1, 2.5] };
      form.set(input);
      const control = (id) => form.node.querySelector(`#${id}`);
      return {
        input,
        read: form.get(),
        legends: [...form.node.querySelectorAll("legend")].map((l) => l.textContent),
        controls: ["in-customer-name", "in-customer-note", "in-tags", "in-count", "in-urgent", "in-tone", "in-points"]
          .map((id) => [id, control(id)?.tagName.toLowerCase(), control(id)?.type ?? null]),
        tags: form.node.querySelector('label[for="in-tags"]')?.textContent,
        name: control("in-customer-name")?.required,
      };
    });
    assert.deepEqual(made.read, made.input, "the form reads back what it was given");
    assert.deepEqual(made.legends, ["customer (required)"], "a nested object is a fieldset, marked required");
    assert.deepEqual(made.controls, [
      ["in-customer-name", "input", "text"], // a short string
      ["in-customer-note", "textarea", "textarea"], // a string with no small maxLength
      ["in-tags", "input", "text"],
      ["in-count", "input", "number"],
      ["in-urgent", "input", "checkbox"],
      ["in-tone", "select", "select-one"],
      ["in-points", "textarea", "textarea"],
    ]);
    assert.match(made.tags, /separated by commas/);
    assert.equal(made.name, true, "a required field is marked required");
  });
});
