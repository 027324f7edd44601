// The SDK as a frontend developer gets it: examples/vite-react, installed from the npm
// tarball that `cargo xtask sdk` packs, built with Vite and served by `vite preview`
// (ONCECLICK_EXAMPLE_URL), which forwards /v1 to the real Worker. xtask has already
// type-checked it under `strict`, built it, and checked that the build holds one copy of
// the wasm; here it runs in Debian's Chromium, and its server build runs in plain Node.

const { test, before, after } = require("node:test");
const assert = require("node:assert/strict");
const path = require("node:path");
const { createRequire } = require("node:module");
const { pathToFileURL } = require("node:url");
const h = require("./harness.js");

const TEST_MS = 90_000;
/** The example's folder, as installed and built by xtask (a copy outside the repo's tree). */
const DIR = process.env.ONCECLICK_EXAMPLE_DIR;
/** A 409 is an answer Chromium logs as a failed load: the tests that provoke one allow it. */
const CONFLICT_LOGGED = /Failed to load resource: the server responded with a status of 409/;

let browser;

before(async () => {
  assert.ok(DIR && process.env.ONCECLICK_EXAMPLE_URL, "run these with `cargo xtask test --e2e`");
  browser = await h.launch();
});

after(async () => {
  await browser?.close();
});

/** Waits until the app shows `status` for its job. */
function waitStatus(page, status) {
  return page.locator(`#status[data-status="${status}"]`).waitFor({ timeout: h.WAIT_MS });
}

async function ticket(page) {
  await page.locator("#ticket").waitFor({ timeout: h.WAIT_MS });
  return (await page.locator("#ticket").textContent()).trim();
}

test("a server render imports the package and the hook without throwing; a call there says why it cannot run", async () => {
  // What Node resolves `onceclick` to, under its own conditions: the server build.
  const resolve = createRequire(path.join(DIR, "package.json")).resolve;
  assert.equal(path.basename(resolve("onceclick")), "server.js");
  assert.equal(path.basename(resolve("onceclick/react")), "react.js");

  // The app's server bundle (vite build --ssr), as a framework's server would load it.
  const ssr = await import(pathToFileURL(path.join(DIR, "dist-ssr/entry-server.js")).href);
  const html = ssr.render();
  assert.match(html, /<button id="generate" type="submit"/, "the app rendered its form");
  const client = await ssr.client;
  await assert.rejects(client.submit("summarize", { text: "on a server" }), (e) => {
    assert.equal(e.name, "OnceclickError");
    assert.equal(e.code, "unsupported_environment");
    assert.match(e.message, /runs in the browser/);
    return true;
  });
});

/** The Generate button's label and `aria-busy`, from the hook's `status` and `pending`. */
async function button(page) {
  const b = page.locator("#generate");
  return { label: (await b.innerText()).trim(), busy: await b.getAttribute("aria-busy") };
}

test("example app: a real double click on Generate makes one job", { timeout: TEST_MS }, async () => {
  await h.withPage(browser, "example-double-click", { opener: h.openExample }, async (page) => {
    const text = h.uniqueText("example double-click");
    const keys = [];
    page.on("request", (r) => {
      if (r.method() === "POST" && new URL(r.url()).pathname === "/v1/jobs") keys.push(r.headers()["idempotency-key"]);
    });
    await page.evaluate(() => {
      window.submits = 0;
      document.querySelector("form").addEventListener("submit", () => { window.submits += 1; });
    });
    await page.locator("#text").fill(text);
    await page.locator("#generate").dblclick();
    await waitStatus(page, "succeeded");
    assert.equal(await page.evaluate(() => window.submits), 2, "the double click submitted the form twice");
    const shown = await ticket(page);
    assert.match(shown, /^job_/);
    assert.ok((await page.locator("#result").innerText()).length > 0, "the result is shown");
    assert.deepEqual(await button(page), { label: "Generate", busy: "false" }, "the hook is no longer pending");
    assert.equal(await h.jobsWithText(text, shown), 1, "one job in D1");
    assert.equal((await h.providerCalls(text)).length, 1, "one provider call");
    assert.ok(keys.length >= 1 && keys.every((k) => k === keys[0]), `every POST /v1/jobs carried one key: ${keys}`);
  });
});

test("example app: a job that failed shows why, from the attempt that decided it", { timeout: TEST_MS }, async () => {
  await h.withPage(browser, "example-failure", { opener: h.openExample }, async (page) => {
    const text = h.uniqueText("example failure");
    await h.mockPost("/_script", { provider: "primary", contains: text, steps: [{ status: 400 }] });
    await page.locator("#text").fill(text);
    await page.locator("#generate").click();
    await waitStatus(page, "failed");
    const failure = page.locator("#failure");
    await failure.waitFor({ timeout: h.WAIT_MS });
    const code = await failure.getAttribute("data-code");
    assert.match(code, /^provider_/, "the attempt's own error code");
    // The sentence is the attempt's error, as the API recorded it.
    const error = h.lastAttemptError(await ticket(page));
    assert.equal(code, error.code);
    assert.ok((await failure.innerText()).includes(error.message), "its sentence is shown");
    assert.equal(await page.locator("#result").count(), 0, "no result");
  });
});

test("example app: a reload in mid-flight, and after the result, shows the same job (useJob, from the address); so does its link in another tab", { timeout: TEST_MS }, async () => {
  await h.withPage(browser, "example-reload", { opener: h.openExample }, async (page, context) => {
    const text = h.uniqueText("example reload");
    const gate = await h.hold("primary", text);
    await page.locator("#text").fill(text);
    await page.locator("#generate").click();
    await waitStatus(page, "running");
    const first = await ticket(page);
    assert.equal(new URL(page.url()).searchParams.get("job"), first, "the job is in the address");
    const keys = await page.evaluate(() => Object.keys(sessionStorage).length);
    assert.equal(keys, 0, "the app keeps nothing of its own in sessionStorage");
    await page.reload();
    await waitStatus(page, "running");
    assert.equal(await ticket(page), first, "the reloaded page shows the same job");
    assert.equal(await page.locator("#text").inputValue(), text, "its text is back in the form");
    assert.deepEqual(await button(page), { label: "Working… (running)", busy: "true" });
    // The link, opened in another tab (a fresh page on the same address), follows it too.
    const other = await context.newPage();
    await other.goto(page.url());
    await waitStatus(other, "running");
    assert.equal(await ticket(other), first, "the link shows the same job");
    await h.release(gate);
    await waitStatus(page, "succeeded");
    await waitStatus(other, "succeeded");
    assert.ok((await other.locator("#result").innerText()).length > 0, "the other tab shows the result, followed live");
    await other.close();
    assert.equal(await ticket(page), first);

    // After the result: a reload shows it again, and Generate on the same text keeps it.
    await page.reload();
    await waitStatus(page, "succeeded");
    assert.equal(await ticket(page), first, "the result survives a reload");
    await page.locator("#generate").click();
    await waitStatus(page, "succeeded");
    assert.equal(await ticket(page), first, "Generate on the text whose result is shown keeps it");
    assert.equal(await h.jobsWithText(text, first), 1, "one job in D1");
    assert.equal((await h.providerCalls(text)).length, 1, "one provider call");
  });
});

test("example app: another text while a job runs shows its own job, also when the first one finishes", { timeout: TEST_MS }, async () => {
  await h.withPage(browser, "example-next-intent", { opener: h.openExample }, async (page) => {
    const first = h.uniqueText("example first");
    const gate = await h.hold("primary", first);
    await page.locator("#text").fill(first);
    await page.locator("#generate").click();
    await waitStatus(page, "running");
    const held = await ticket(page);

    // Another text is another intent. (The local queue runs one dispatch at a time, so
    // its job waits, queued, behind the held one.)
    const second = h.uniqueText("example second");
    await page.locator("#text").fill(second);
    await page.locator("#generate").click();
    await page.waitForFunction((old) => {
      const id = document.querySelector("#ticket")?.textContent ?? "";
      return id.startsWith("job_") && id !== old;
    }, held, { timeout: h.WAIT_MS });
    const shown = await ticket(page);

    // The first job finishes while the page shows the second: it must not come back.
    await h.release(gate);
    await h.waitFor(() => h.jobStatus(held) === "succeeded", `job ${held} succeeded`);
    await waitStatus(page, "succeeded");
    assert.equal(await ticket(page), shown, "the page shows the second text's job");
    assert.deepEqual(await button(page), { label: "Generate", busy: "false" });
    assert.equal(await h.jobsWithText(second, shown), 1);
    assert.equal(await h.jobsWithText(first, held), 1);
  });
});

test("example app: a 409 is shown as its code and a sentence, and the job goes on", { timeout: TEST_MS }, async () => {
  await h.withPage(browser, "example-409", { opener: h.openExample, allow: [CONFLICT_LOGGED] }, async (page) => {
    const text = h.uniqueText("example conflict");
    const gate = await h.hold("primary", text);
    await page.locator("#text").fill(text);
    await page.locator("#generate").click();
    await waitStatus(page, "running");
    // The fallback while the first provider is still working: the API refuses (409).
    await page.locator("#fallback").click();
    const error = page.locator('#error[data-code="attempt_in_flight"]');
    await error.waitFor({ timeout: h.WAIT_MS });
    const words = await error.innerText();
    assert.match(words, /still working on this/, "the sentence the app chose for the code");
    assert.doesNotMatch(words, /\[object Object\]|undefined/);
    await h.release(gate);
    // The hook followed the job again after the refusal: the page sees it succeed.
    await waitStatus(page, "succeeded");
    assert.equal(await page.locator("#error").count(), 0, "the error went once the job moved on");
    assert.equal(await h.jobsWithText(text, await ticket(page)), 1, "one job in D1");
  });
});

test("example app: a failed attempt's text is withdrawn, and the fallback's replaces it", { timeout: TEST_MS }, async () => {
  await h.certifyFallback();
  await h.withPage(browser, "example-retry-text", { opener: h.openExample }, async (page) => {
    const text = h.uniqueText("example retry text");
    // The primary streams part of its summary (slowly enough for the page to follow it
    // live), then stops at `finish_reason: length`: its attempt fails. The fallback
    // streams its own, slowly enough to be seen coming.
    await h.mockPost("/_script", {
      provider: "primary",
      contains: text,
      // 14 chunks: `{"sentiment":"neutral","summary":"alpha alpha alpha al` (the mock
      // writes its keys in order): the summary is written for half a second.
      steps: [{ summary: "alpha alpha alpha alpha", chunk_chars: 4, chunk_ms: 100, stream_fault: "length", fault_after: 14 }],
    });
    await h.mockPost("/_script", {
      provider: "fallback",
      contains: text,
      steps: [{ summary: "omega omega omega omega", chunk_chars: 2, chunk_ms: 50 }],
    });
    // Every state the page renders: the job's status, whether it shows the second
    // attempt, and the summary being written.
    await page.evaluate(() => {
      window.rendered = [];
      const section = document.querySelector("section");
      const record = () =>
        window.rendered.push({
          status: document.querySelector("#status")?.textContent ?? null,
          second: /after 2 attempts/.test(section.textContent),
          writing: document.querySelector("#writing")?.textContent ?? null,
        });
      new MutationObserver(record).observe(section, { subtree: true, childList: true, characterData: true });
    });
    // A summary written so far, as the page shows it: the primary's or the fallback's.
    const ofPrimary = (w) => w !== null && w.length > 0 && "alpha alpha alpha alpha".startsWith(w);
    const ofFallback = (w) => w !== null && w.length > 0 && "omega omega omega omega".startsWith(w);
    await page.locator("#text").fill(text);
    await page.locator("#generate").click();
    await waitStatus(page, "failed");
    const before = await page.evaluate(() => window.rendered);
    const failed = before.length;
    assert.ok(
      before.some((r) => ofPrimary(r.writing)),
      `the primary's text was written as it came: ${JSON.stringify(before)}`,
    );
    // Then withdrawn, once the job says the attempt failed: a reload would not show it.
    await page.locator("#writing").waitFor({ state: "detached", timeout: h.WAIT_MS });
    await page.locator("#fallback").click();
    await waitStatus(page, "succeeded");
    const rendered = (await page.evaluate(() => window.rendered)).slice(failed);
    const stale = rendered.filter((r) => r.second && ofPrimary(r.writing));
    assert.deepEqual(stale, [], "the failed attempt's text is not shown once the new attempt is");
    assert.ok(
      rendered.some((r) => r.second && ofFallback(r.writing)),
      `the fallback's summary was written as it came: ${JSON.stringify(rendered)}`,
    );
    assert.equal(await page.locator("#result p").first().innerText(), "omega omega omega omega");
    assert.equal(await h.jobsWithText(text, await ticket(page)), 1, "one job");
  });
});
