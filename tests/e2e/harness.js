// What the demo page's end-to-end tests share: Debian's Chromium through playwright-core,
// the page opened with its tokens, waits on what the page shows, and the real parts
// read directly: jobs counted in the Worker's D1 file, provider calls in the mock.
// `cargo xtask test` (or `cargo xtask test --e2e`) sets the environment and runs them
// under the pinned Node; `NODE_PATH` points at the pinned packages.

const { chromium } = require("playwright-core");
const { DatabaseSync } = require("node:sqlite");
const fs = require("node:fs");
const path = require("node:path");
const assert = require("node:assert/strict");

function env(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run these with \`cargo xtask test --e2e\``);
  return value;
}

const URL_BASE = env("ONCECLICK_URL");
const MOCK = env("ONCECLICK_MOCK_URL");
const PROXY = env("ONCECLICK_PROXY_URL");
const TOKEN = env("ONCECLICK_E2E_TOKEN");
const ADMIN = env("ONCECLICK_E2E_ADMIN");
const OUT = env("ONCECLICK_E2E_OUT");
/** The owner the token names (its `sub`). */
const OWNER = JSON.parse(Buffer.from(TOKEN.split(".")[1], "base64url").toString()).sub;

/** How long any one wait on the page may take. */
const WAIT_MS = 20_000;

/** Flags that keep Chromium off the network beyond loopback (shared/toolchain.md). */
const FLAGS = [
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

function launch() {
  return chromium.launch({
    executablePath: env("ONCECLICK_CHROMIUM"),
    headless: true,
    chromiumSandbox: false,
    args: FLAGS,
  });
}

/** The fallback must be certified before the page may fail over or hedge to it. */
async function certifyFallback() {
  const r = await fetch(`${URL_BASE}/v1/providers/fallback/certify`, {
    method: "POST",
    headers: { Authorization: `Bearer ${ADMIN}`, "Content-Type": "application/json" },
    body: "{}",
  });
  assert.equal(r.status, 200, `certify answered ${r.status}`);
  const { reports } = await r.json();
  for (const report of reports) assert.ok(report.passed, `fallback not certified for ${report.kind}`);
}

/** A text no other test (or run) uses, long enough for the mock's summary rule. */
function uniqueText(label) {
  const id = `${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
  return `[e2e ${label} ${id}] The meeting ran long, but everyone left with a plan they liked.`;
}

/**
 * Opens the page the way `cargo xtask dev` prints it: tokens and addresses after `#`
 * (the user's token is `token`, the test token's owner unless told).
 */
async function open(context, problems, token = TOKEN) {
  const page = await watched(context, problems);
  const fragment = new URLSearchParams({ token, admin: ADMIN, mock: MOCK, proxy: PROXY });
  await page.goto(`${URL_BASE}/#${fragment}`);
  await ready(page);
  return page;
}

/**
 * Opens the example app (examples/vite-react, served by `vite preview` at
 * ONCECLICK_EXAMPLE_URL) with the user's token after `#`, as its README says.
 */
async function openExample(context, problems) {
  const page = await watched(context, problems);
  await page.goto(`${env("ONCECLICK_EXAMPLE_URL")}/#${new URLSearchParams({ token: TOKEN })}`);
  await page.locator("#generate").waitFor({ timeout: WAIT_MS });
  return page;
}

/** A new page whose console errors and page errors go to `problems`. */
async function watched(context, problems) {
  const page = await context.newPage();
  page.on("console", (m) => {
    if (m.type() === "error") problems.push(`console: ${m.text()}`);
  });
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  return page;
}

/** Waits until the page has loaded the SDK and set itself up. */
async function ready(page) {
  await page.waitForFunction(() => document.body.dataset.ready, null, { timeout: WAIT_MS });
  assert.equal(await page.evaluate(() => document.body.dataset.ready), "yes", "the page loaded the SDK");
}

/**
 * Runs `body(page, context)` on the page that `opener` opens (the demo page unless told:
 * `openExample` for the example app) in a fresh browser context (its own localStorage), then
 * saves a screenshot under target/e2e/ whatever happened, and fails on any page error
 * or console error except the network errors listed in `allow` (regular expressions:
 * a failure the test provokes on purpose, which Chromium logs as a console error).
 */
async function withPage(browser, name, { allow = [], opener = open } = {}, body) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 1000 } });
  const problems = [];
  let page;
  try {
    page = await opener(context, problems);
    await body(page, context, problems);
  } finally {
    if (page) {
      await page.screenshot({ path: path.join(OUT, `${name}.png`), fullPage: true }).catch(() => {});
    }
    await context.close();
  }
  const unexpected = problems.filter((p) => !allow.some((re) => re.test(p)));
  assert.deepEqual(unexpected, [], "no console or page errors");
}

async function ticket(page) {
  return (await page.locator("#ticket-id").textContent()).trim();
}

/** Waits until the page shows a ticket (or that very ticket); returns it. */
async function waitTicket(page, expected) {
  await page.waitForFunction(
    (want) => {
      const id = document.querySelector("#ticket-id")?.textContent ?? "";
      return want ? id === want : id.startsWith("job_");
    },
    expected ?? null,
    { timeout: WAIT_MS },
  );
  return ticket(page);
}

async function waitStatus(page, status) {
  await page.waitForFunction(
    (want) => document.querySelector("#job-status")?.dataset.status === want,
    status,
    { timeout: WAIT_MS },
  );
}

/** The timeline as the page shows it. */
function rows(page) {
  return page.$$eval("#timeline tbody tr", (trs) =>
    trs.map((tr) => ({
      n: tr.dataset.n,
      provider: tr.dataset.provider,
      state: tr.dataset.state,
      winner: tr.dataset.winner === "true",
      text: tr.innerText,
    })),
  );
}

/** Waits until the timeline has exactly `want.length` rows, each matching its entry. */
async function waitRows(page, want) {
  await page.waitForFunction(
    (want) => {
      const trs = [...document.querySelectorAll("#timeline tbody tr")];
      return trs.length === want.length && want.every((w, i) =>
        Object.entries(w).every(([k, v]) => trs[i].dataset[k] === String(v)));
    },
    want,
    { timeout: WAIT_MS },
  );
  return rows(page);
}

/** Waits for the error box to show `code`; returns its text. */
async function waitError(page, code) {
  await page.waitForFunction((want) => document.querySelector("#error")?.dataset.code === want, code, { timeout: WAIT_MS });
  return page.locator("#error").innerText();
}

/** Chooses what the mock does with the next Generate, through the page's lab. */
async function arm(page, fault) {
  await page.locator(`input[name="fault"][value="${fault}"]`).check();
}

/**
 * The jobs of `owner` (the test token's unless told) whose input text is `text`, in the D1 file, counted
 * once the job the page shows (`shownId`, its ticket) is readable there. The file can
 * trail the Worker's answer by a moment: CI once saw the page show "succeeded" while a
 * read of the file found no row yet. A duplicate would have been written before the
 * answer that showed the ticket, so it is counted too.
 */
async function jobsWithText(text, shownId, owner = OWNER) {
  assert.match(shownId ?? "", /^job_/, "jobsWithText needs the ticket the page shows");
  await waitFor(() => jobStatus(shownId) !== undefined, `job ${shownId} in the D1 file`);
  return countJobsWithText(text, owner);
}

/** The status of job `id` in the D1 file (undefined while it is not there). */
function jobStatus(id) {
  const db = new DatabaseSync(d1File(), { readOnly: true });
  try {
    return db.prepare("SELECT status FROM jobs WHERE id = ?").get(id)?.status;
  } finally {
    db.close();
  }
}

/** The error of job `id`'s last attempt in the D1 file: `{ code, message, retryable }`. */
function lastAttemptError(id) {
  const db = new DatabaseSync(d1File(), { readOnly: true });
  try {
    const row = db.prepare("SELECT error FROM attempts WHERE job_id = ? ORDER BY n DESC LIMIT 1").get(id);
    return row?.error == null ? undefined : JSON.parse(row.error);
  } finally {
    db.close();
  }
}

/**
 * Polls `check` (a read of the D1 file, or a call; it may return a promise) every
 * `everyMs` until it holds, for at most `timeoutMs`.
 */
async function waitFor(check, what, { everyMs = 25, timeoutMs = WAIT_MS } = {}) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`waited ${timeoutMs} ms for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

function countJobsWithText(text, owner) {
  const db = new DatabaseSync(d1File(), { readOnly: true });
  try {
    return db
      .prepare("SELECT count(*) AS n FROM jobs WHERE owner_id = ? AND json_extract(input, '$.text') = ?")
      .get(owner, text).n;
  } finally {
    db.close();
  }
}

/** The one D1 database file that `wrangler dev --persist-to` keeps. */
function d1File() {
  const found = [];
  const walk = (dir) => {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
      const p = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(p);
      else if (entry.name.endsWith(".sqlite") && entry.name !== "metadata.sqlite") found.push(p);
    }
  };
  walk(path.join(env("ONCECLICK_D1_DIR"), "v3/d1"));
  assert.equal(found.length, 1, `one D1 database file: ${found}`);
  return found[0];
}

/** Holds every call whose prompt has `text` on `provider` at one gate until [`release`]; returns the gate. */
async function holdAll(provider, text) {
  const gate = `${provider}-${Math.random().toString(36).slice(2, 10)}`;
  await mockPost("/_script", { provider, contains: text, steps: [{ gate }] });
  return gate;
}

/**
 * Records what `page` asks of the API from now on: `{ method, path, jobs }`, where
 * `jobs` are the ids a live stream's `job` parameters name.
 */
function askedOf(page) {
  const asked = [];
  page.on("request", (r) => {
    const url = new URL(r.url());
    if (!url.pathname.startsWith("/v1/")) return;
    const jobs = url.searchParams.getAll("job").map((j) => j.split(":")[0]);
    asked.push({ method: r.method(), path: url.pathname, jobs });
  });
  return asked;
}

/** Holds the next call of `text` on `provider` at a gate until [`release`]; returns the gate. */
async function hold(provider, text) {
  const gate = `${provider}-${Math.random().toString(36).slice(2, 10)}`;
  await mockPost("/_script", { provider, contains: text, steps: [{ gate }, {}] });
  return gate;
}

/** Lets the call held at `gate` answer. */
async function release(gate) {
  await mockPost("/_release", { gate });
}

async function mockPost(path, body) {
  const r = await fetch(`${MOCK}${path}`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  assert.ok(r.ok, `the mock answered ${path} with ${r.status}`);
}

/** The serious and critical violations an axe-core scan finds on the page as it is now. */
async function axeScan(page) {
  if (!(await page.evaluate(() => typeof window.axe === "object"))) {
    // axe-core's own build, next to its main file (found through NODE_PATH).
    await page.addScriptTag({ path: path.join(path.dirname(require.resolve("axe-core")), "axe.min.js") });
  }
  const violations = await page.evaluate(async () => (await window.axe.run(document)).violations
    .map((v) => ({ id: v.id, impact: v.impact, nodes: v.nodes.map((n) => n.target.join(" ")) })));
  return violations.filter((v) => v.impact === "serious" || v.impact === "critical");
}

/** The calls the mock provider received for `text`. */
async function providerCalls(text) {
  const r = await fetch(`${MOCK}/_calls?contains=${encodeURIComponent(text)}`);
  return (await r.json()).calls;
}

/** Picks `kind` in the page's kind picker, and waits for its form. */
async function pickKind(page, kind) {
  await page.locator("#kind").selectOption(kind);
  await page.waitForFunction(
    (want) => document.getElementById("kind")?.value === want && document.querySelector("#fields [name]") !== null,
    kind,
    { timeout: WAIT_MS },
  );
}

/** The golden inputs and outputs of `kind`, from its file in edge/kinds (the mock answers a golden input with its output). */
function golden(kind) {
  const file = path.join(__dirname, "../../edge/kinds", `${kind}.json`);
  return JSON.parse(fs.readFileSync(file, "utf8")).golden;
}

/** Saves a screenshot of what is on screen now (not the whole page). */
async function snapshot(page, name) {
  const file = path.join(OUT, `${name}.png`);
  await page.screenshot({ path: file });
  return file;
}

module.exports = {
  lastAttemptError,
  WAIT_MS, TOKEN, ADMIN, MOCK, PROXY, URL_BASE, mockPost, d1File, axeScan, watched, launch, openExample, hold, holdAll, askedOf, release, jobStatus, waitFor, certifyFallback, uniqueText, withPage, open, ready, ticket, waitTicket,
  waitStatus, rows, waitRows, waitError, arm, jobsWithText, providerCalls, snapshot, pickKind, golden,
};
