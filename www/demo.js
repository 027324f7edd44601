// The demo page. The top half is what an app would do: a kind picker and its input form
// (kinds.js, from GET /v1/kinds), and one Generate button that calls the SDK's `submit`
// on every click and follows the job with `wait`; the SDK makes a double-click, a reload
// and a second tab land on the same job. The failure lab scripts the local mock provider
// (tests/src/mock.rs) for the next Generate, by a marker in the provider's prompt (the
// input's text field), and routes a "swallowed" Generate through the fault proxy
// (tests/src/proxy.rs), which lets the Worker answer and then drops the answer. Nothing
// here is needed by the API itself.

import * as kinds from "/kinds.js";
import { decisionText, describe, eventLine, sentenceFor } from "/words.js";

const $ = (id) => document.getElementById(id);

// ---------------------------------------------------------------- small helpers

/** localStorage that never throws (private mode, quota): the page just forgets. */
const store = {
  get(name) {
    try { return localStorage.getItem(`demo:${name}`); } catch { return null; }
  },
  set(name, value) {
    try { localStorage.setItem(`demo:${name}`, value); } catch { /* memory only */ }
  },
  remove(name) {
    try { localStorage.removeItem(`demo:${name}`); } catch { /* nothing stored */ }
  },
};

const sleep = (ms, signal) => new Promise((resolve) => {
  const timer = setTimeout(resolve, ms);
  signal?.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
});

const randomId = () => `${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
const clock = (iso) => (iso ? iso.slice(11, 23) : "");
const LIVE = new Set(["starting", "running"]);
/** Job statuses after which the SDK frees the intent's key. */
const ENDED = new Set(["succeeded", "cancelled"]);
/** The statuses at which `wait` returns: the job needs nobody, or a decision. */
const WAITS_END = new Set(["succeeded", "cancelled", "failed", "unknown"]);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k.startsWith("data-")) node.setAttribute(k, v);
    else node[k] = v;
  }
  node.append(...children.filter((c) => c !== null && c !== undefined));
  return node;
}

function badge(state) {
  return el("span", { class: `state state-${state}`, "data-state": state }, state);
}

function duration(from, to) {
  const ms = Math.max(0, (to ? Date.parse(to) : Date.now()) - Date.parse(from));
  return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(1)} s`;
}

// ---------------------------------------------------------------- settings

const SETTINGS = { token: "", admin: "", mock: "http://127.0.0.1:8788", proxy: "http://127.0.0.1:8789" };
{
  // `cargo xtask dev` prints the page's address with the tokens after `#`; they are
  // kept in localStorage and taken out of the address bar.
  const given = new URLSearchParams(location.hash.slice(1));
  const query = new URLSearchParams(location.search);
  for (const [name, fallback] of Object.entries(SETTINGS)) {
    const value = given.get(name) ?? query.get(name);
    if (value) store.set(name, value);
    $(name).value = store.get(name) ?? fallback;
    $(name).addEventListener("change", () => store.set(name, $(name).value.trim()));
  }
  if (location.hash || query.has("token")) history.replaceState(null, "", location.pathname);
  $("settings").open = !$("token").value;
}
const setting = (name) => $(name).value.trim().replace(/\/+$/, "");
$("admin").addEventListener("input", () => { $("resolve").disabled = !setting("admin"); });

// ---------------------------------------------------------------- errors and notes (their words: words.js)

function showError(e) {
  const { code, detail } = describe(e);
  const box = $("error");
  box.replaceChildren(
    el("p", {}, el("code", {}, code), ` — ${sentenceFor(code)}`),
    detail && detail !== sentenceFor(code) ? el("p", { class: "hint" }, `The server said: ${detail}`) : null,
  );
  box.dataset.code = code;
  box.hidden = false;
}

function clearError() {
  $("error").hidden = true;
  $("error").replaceChildren();
  delete $("error").dataset.code;
}

/** A line in "What the page did" (newest first), also read out. */
function note(text) {
  $("notes").prepend(el("li", {}, text));
  while ($("notes").children.length > 8) $("notes").lastElementChild.remove();
  announce(text);
}

let announcing = [];
function announce(text) {
  // What changed in one turn is read out together; replacing the text makes screen
  // readers read it even when it repeats.
  announcing.push(text);
  if (announcing.length > 1) return;
  setTimeout(() => {
    $("announce").textContent = announcing.join(" ");
    announcing = [];
  }, 50);
}

// ---------------------------------------------------------------- the SDK

let sdk = null;
let app = null;
try {
  sdk = await import("/pkg/onceclick.js");
  await sdk.default();
  app = new sdk.Client({ baseUrl: location.origin, getToken: () => setting("token") });
  $("sdk-status").textContent = "Using the onceclick SDK from /pkg (built by cargo xtask dev).";
} catch (e) {
  $("sdk-status").textContent = "The onceclick SDK is not built into www/pkg.";
  showError({ code: "sdk_missing", message: describe(e).detail });
}

/** A plain API call (what the SDK has no method for: events, resolve, certify). */
async function api(method, path, { body, token = setting("token"), headers = {}, key, signal } = {}) {
  const h = { Authorization: `Bearer ${token}`, ...headers };
  if (body !== undefined) h["Content-Type"] = "application/json";
  if (key) h["Idempotency-Key"] = key;
  let r;
  try {
    r = await fetch(path, { method, headers: h, signal, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (e) {
    if (signal?.aborted) throw { code: "aborted", message: "stopped" };
    throw { code: "network", message: describe(e).detail };
  }
  const data = r.status === 304 || r.status === 204 ? null : await r.json().catch(() => null);
  if (r.status >= 400) {
    throw { code: data?.code ?? `http_${r.status}`, message: data?.detail ?? `the server answered ${r.status}`, status: r.status };
  }
  return { status: r.status, etag: r.headers.get("ETag"), replayed: r.headers.get("Idempotent-Replayed") === "true", data };
}

/** A call to the mock provider's control API. */
async function mock(path, body) {
  let r;
  try {
    r = await fetch(`${setting("mock")}${path}`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  } catch (e) {
    throw { code: "mock_unreachable", message: `${setting("mock")}: ${describe(e).detail}` };
  }
  if (!r.ok) throw { code: "mock_unreachable", message: `${setting("mock")}${path} answered ${r.status}` };
}
const script = (provider, contains, steps) => mock("/_script", { provider, contains, steps });

// ---------------------------------------------------------------- the ticket

// The ticket on screen, kept in localStorage so that a reload and a second tab find it:
// { kind, input, intent, provider, jobId, status, gates: {primary?, fallback?} }, where
// `intent` is `kinds.intentOf(kind, input)`: the same kind with the same input is the
// same intent (a ticket from before the kind picker has `text` for its input).
const tickets = {
  get() {
    let t;
    try { t = JSON.parse(store.get("ticket")) ?? null; } catch { return null; }
    if (t && !t.input && typeof t.text === "string") {
      t.input = { text: t.text };
      t.intent = kinds.intentOf(t.kind, t.input);
    }
    return t;
  },
  put(t) { store.set("ticket", JSON.stringify(t)); },
};

let shown = null; // { jobId, job, events, states: Map(attempt id → state) }
let watcher = null; // AbortController of the running watch
let lingerUntil = 0; // after a release: keep reading the log a while for late results
let submitting = 0; // submits in flight (for the button's label)

function renderButton() {
  const status = shown?.job?.status;
  const busy = submitting > 0 || status === "queued" || status === "running";
  $("generate").setAttribute("aria-busy", String(busy));
  $("generate-label").textContent = submitting > 0 && !shown?.job ? "Sending…"
    : busy ? `Working… (${status ?? "sending"})` : "Generate";
  $("generate-state").textContent = busy ? "Clicking again is safe: it shows the same ticket." : "";
}

function renderReleases() {
  const gates = (shown && tickets.get()?.jobId === shown.jobId && tickets.get()?.gates) || {};
  $("release-primary").hidden = !gates.primary;
  $("release-fallback").hidden = !gates.fallback;
  $("releases").hidden = !gates.primary && !gates.fallback;
}

function render(job) {
  if (!shown || shown.jobId !== job.id) return;
  const before = shown.job;
  shown.job = job;
  $("no-ticket").hidden = true;
  $("job").hidden = false;
  $("ticket-id").textContent = job.id;
  $("job-status").replaceWith(Object.assign(badge(job.status), { id: "job-status" }));
  $("job-status").dataset.status = job.status;
  $("job-kind").textContent = `${job.kind} · “${kinds.briefly(job.input)}”`;

  // The timeline: one row per attempt.
  const rows = job.attempts.map((a) => {
    const winner = job.completed_by === a.id;
    return el("tr", { class: winner ? "winner" : "", "data-attempt": a.id, "data-n": String(a.n), "data-provider": a.provider, "data-state": a.state, "data-winner": String(winner) },
      el("td", {}, String(a.n)),
      el("td", {}, a.provider),
      el("td", {}, badge(a.state), a.error ? el("div", { class: "hint" }, a.error.code) : null,
        el("div", { class: "attempt-text" }, shown.texts?.get(a.id) ?? "")),
      el("td", { class: "duration", "data-from": a.started_at, "data-to": a.finished_at ?? "" }, duration(a.started_at, a.finished_at)),
      el("td", {}, winner ? "★ winner" : ""));
  });
  $("timeline").tBodies[0].replaceChildren(...rows);

  renderResult(job);

  // What the user can do now.
  const decide = job.status === "failed" || job.status === "unknown";
  const live = job.status === "queued" || job.status === "running";
  $("decision").hidden = !decide && !live;
  $("decision-text").textContent = decide ? decisionText(job) : "The job is running. You may cancel it.";
  $("fallback").hidden = !decide;
  $("resolve").hidden = job.status !== "unknown";
  $("cancel").hidden = !decide && !live;
  $("resolve").disabled = !setting("admin");
  $("resolve-hint").textContent = job.status === "unknown" && !setting("admin") ? sentenceFor("admin_token_missing") : "";

  $("raw-job").textContent = JSON.stringify(job, null, 2);

  // Say what changed.
  if (!before || before.status !== job.status) announce(`Job ${job.status}.`);
  for (const a of job.attempts) {
    const was = shown.states.get(a.id);
    if (was !== a.state) {
      shown.states.set(a.id, a.state);
      if (was) announce(`Attempt ${a.n} on ${a.provider}: ${a.state}${job.completed_by === a.id ? ", the winner" : ""}.`);
    }
  }

  const t = tickets.get();
  if (t && t.jobId === job.id && t.status !== job.status) tickets.put({ ...t, status: job.status });
  renderButton();
  renderReleases();
  // The log is read once the job stops on its own, and after each later change (a
  // hedge's loser settling): while the job runs, the timeline shows its moves from the
  // stream, so a job costs the browser its create, its stream and one read of the log.
  // Keyed by the attempts' states too: a hedge's loser settles after the job is final,
  // without a new version.
  const change = `${job.version}:${job.attempts.map((a) => a.state).join(",")}`;
  if (WAITS_END.has(job.status)) refreshEvents(job.id, change);
}

/** The result card: a text answer as text, a summary as today, any other JSON as JSON. */
function renderResult(job) {
  const result = job.result;
  $("result").hidden = result === null || result === undefined;
  if ($("result").hidden) return;
  const by = job.attempts.find((a) => a.id === job.completed_by);
  const who = `by ${by ? `attempt ${by.n} on ${by.provider}` : "?"}`;
  const summary = typeof result === "string" ? result : result?.summary;
  $("result-summary").hidden = typeof summary !== "string";
  $("result-summary").textContent = typeof summary === "string" ? summary : "";
  $("result-json").hidden = typeof summary === "string";
  $("result-json").textContent = typeof summary === "string" ? "" : JSON.stringify(result, null, 2);
  $("result-meta").textContent = typeof result === "string" ? `A text answer · ${who}`
    : "sentiment" in result ? `Sentiment: ${result.sentiment ?? "—"} · ${who}` : `A JSON answer · ${who}`;
}

let eventsAsked = 0;
let eventsRead = null; // `${jobId}@${change}` of the last read for a change
async function refreshEvents(jobId, change) {
  if (change !== undefined) {
    if (eventsRead === `${jobId}@${change}`) return;
    eventsRead = `${jobId}@${change}`;
  }
  const asked = ++eventsAsked;
  let r;
  try {
    r = await api("GET", `/v1/jobs/${jobId}/events`);
  } catch {
    if (asked === eventsAsked) eventsRead = null;
    return; // the next change, or the next render of this one, asks again
  }
  if (asked !== eventsAsked || shown?.jobId !== jobId) return;
  const events = r.data?.events ?? [];
  shown.events = events;
  const attempts = shown.job?.attempts ?? [];
  const attempt = (id) => {
    const a = attempts.find((x) => x.id === id);
    return a ? `attempt ${a.n} on ${a.provider}` : null;
  };
  $("events").replaceChildren(...events.map((e) => el("li", { "data-type": e.type },
    el("time", { dateTime: e.at }, clock(e.at)), eventLine(e, attempt))));
  $("raw-events").textContent = JSON.stringify(events, null, 2);
}

/** Shows `jobId` (with `job` when known) and follows it until nothing more can change. */
function follow(jobId, job) {
  if (shown?.jobId !== jobId) {
    watcher?.abort();
    watcher = null;
    const t = tickets.get();
    const kind = job?.kind ?? (t?.jobId === jobId ? t.kind : null);
    shown = { jobId, job: null, answer: kinds.answerOf(kind), events: [], states: new Map(), texts: new Map() };
    renderText("", null);
    eventsRead = null;
    $("events").replaceChildren();
    announce(`Ticket ${jobId}.`);
  }
  if (job) render(job);
  if (!watcher) watch(jobId);
}

/** The text the SDK follows (`onText`: the first attempt to stream, then the winner):
 * raw as the provider sends it, and readable: a text answer itself, or (`onPartial`)
 * what the JSON so far says. */
function renderText(text, attemptId) {
  $("writing").hidden = !text;
  if (!text) return;
  $("writing-raw").textContent = text;
  if (shown?.answer === "text") $("writing-text").textContent = text;
  else if ($("writing").dataset.attempt !== attemptId) $("writing-text").textContent = "";
  const a = shown?.job?.attempts.find((x) => x.id === attemptId);
  $("writing-by").textContent = a ? `attempt ${a.n} on ${a.provider}` : "";
  $("writing").dataset.attempt = attemptId ?? "";
}

/** A JSON answer so far: a summary's words, or what the object says so far. */
function renderPartial(partial) {
  if (!partial || typeof partial !== "object") return;
  $("writing-text").textContent = typeof partial.summary === "string" ? partial.summary
    : Object.keys(partial).length > 0 ? JSON.stringify(partial, null, 2) : "";
}

/** An attempt's streamed text, under its row of the timeline. */
function renderAttemptText(attemptId) {
  const row = document.querySelector(`#timeline tr[data-attempt="${attemptId}"] .attempt-text`);
  if (row) row.textContent = shown.texts.get(attemptId) ?? "";
}

/** `wait` until the job needs nobody (or a decision); then, while an attempt is still
 * live (a hedge's loser) or a release was just pressed, keep reading it. */
async function watch(jobId) {
  const ctl = new AbortController();
  watcher = ctl;
  const { signal } = ctl;
  try {
    const job = await app.wait(jobId, {
      signal,
      onUpdate: (j) => { if (!signal.aborted) render(j); },
      // Each attempt's text, in the timeline; the one followed (the first to stream,
      // then the winner) in "Being written".
      onDelta: (d) => {
        if (signal.aborted || shown?.jobId !== jobId) return;
        // `offset` is in code points: a second watch of the same job (an unknown one, say)
        // starts its pieces from 0 again, so the text held is cut there, never doubled.
        const held = [...(shown.texts.get(d.attemptId) ?? "")].slice(0, d.offset).join("");
        shown.texts.set(d.attemptId, held + d.text);
        renderAttemptText(d.attemptId);
      },
      onText: (text, { attemptId }) => { if (!signal.aborted && shown?.jobId === jobId) renderText(text, attemptId); },
      // A partial object is for JSON answers only: a text answer is its text.
      ...(shown?.answer === "json" ? { onPartial: (partial) => {
        if (!signal.aborted && shown?.jobId === jobId) renderPartial(partial);
      } } : {}),
    });
    if (signal.aborted) return;
    render(job);
    const attemptLive = () => (shown?.job?.attempts ?? []).some((a) => LIVE.has(a.state));
    // A hedge's loser still running: the job's own stream shows it settle, and ends.
    if (attemptLive() && (await readStream(jobId, signal))) return;
    let etag = null;
    // After a release (a late result is logged without changing the job), or where the
    // stream could not be had: read the job a while.
    const stillMoving = () => attemptLive() || Date.now() < lingerUntil;
    while (!signal.aborted && stillMoving()) {
      await sleep(500, signal);
      if (signal.aborted) break;
      const r = await api("GET", `/v1/jobs/${jobId}`, { headers: etag ? { "If-None-Match": etag } : {}, signal });
      if (r.status === 200) {
        etag = r.etag;
        render(r.data);
      } else {
        refreshEvents(jobId); // a late result is logged without changing the job
      }
    }
  } catch (e) {
    if (signal.aborted || describe(e).code === "aborted") return;
    if (describe(e).code === "not_found" && tickets.get()?.jobId === jobId) {
      // A ticket kept from a database that has since been wiped: forget it quietly.
      store.remove("ticket");
      shown = null;
      $("job").hidden = true;
      $("no-ticket").hidden = false;
      return;
    }
    showError(e);
  } finally {
    if (watcher === ctl) watcher = null;
  }
}

/** Renders every change of `jobId` from `GET /v1/jobs/{id}/stream` until it ends (the
 * job settled: nothing in flight). False when the stream could not be had, or ended
 * with the job still moving. */
async function readStream(jobId, signal) {
  let r;
  try {
    r = await fetch(`/v1/jobs/${jobId}/stream`, { headers: { Authorization: `Bearer ${setting("token")}` }, signal });
  } catch {
    return false;
  }
  if (r.status !== 200 || !r.body) return false;
  const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
  let settled = false;
  try {
    for (let buf = ""; ; ) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += value.replaceAll("\r\n", "\n");
      for (let end; (end = buf.indexOf("\n\n")) >= 0; buf = buf.slice(end + 2)) {
        const lines = buf.slice(0, end).split("\n");
        if (!lines.includes("event: job")) continue;
        const data = lines.filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
        const doc = JSON.parse(data);
        if (!signal.aborted) render(doc);
        settled = !(doc.attempts ?? []).some((a) => LIVE.has(a.state));
      }
    }
  } catch {
    return false; // aborted, or the connection dropped: the caller reads on
  } finally {
    reader.cancel().catch(() => {});
  }
  return settled && Date.now() >= lingerUntil;
}

function rewatch() {
  if (!shown) return;
  watcher?.abort();
  watcher = null;
  watch(shown.jobId);
}

// ---------------------------------------------------------------- Generate

/** The one kind that hedges, which the hedge races run on. */
const HEDGED = "summarize_hedged";
const RACES = new Set(["race", "stream_race"]);

const lab = {
  armed: () => document.querySelector('input[name="fault"]:checked')?.value ?? "normal",
  set(fault) {
    if (RACES.has(fault) && kinds.picked() !== HEDGED) {
      if (kinds.has(HEDGED)) {
        kinds.show(HEDGED);
        renderHint();
        note(`A hedge race needs a kind that hedges: the picker switched to ${HEDGED}.`);
      } else {
        note(`This server has no ${HEDGED}, the kind that hedges: there is no race to run.`);
        fault = "normal";
      }
    }
    const input = document.querySelector(`input[name="fault"][value="${fault}"]`);
    if (input) input.checked = true;
    $("lab-state").textContent = fault === "normal" ? "" : `Armed: the next Generate ${LAB_WORDS[fault]}.`;
  },
};
const LAB_WORDS = {
  slow: "gets a provider that takes 3 s",
  hold: "gets a provider that holds its answer until you release it",
  hang: "gets a provider that hangs past its timeout",
  unavailable: "gets a 503 from the provider",
  extra_key: "gets an answer with a key the contract does not name",
  race: "runs a hedge race that you finish in reverse order",
  swallow: "has its answer swallowed on the way back",
  stream: "streams its answer slowly: reload mid-way, or cancel",
  stream_stall: "streams, then stalls past its timeout",
  stream_cut: "streams, then its connection is cut",
  stream_race: "runs a hedge race where both attempts stream",
};
/** The faults whose job runs on the fallback, which streams. */
const ON_FALLBACK = new Set(["stream", "stream_stall", "stream_cut"]);

/** Scripts the mock for the fault; returns the gates it holds. The first call of the
 * text on that provider misbehaves, every later one answers normally. */
async function arm(fault, text) {
  const id = randomId();
  const once = (step) => [step, {}];
  switch (fault) {
    case "slow": await script("primary", text, once({ delay_ms: 3000 })); return {};
    case "hold": await script("primary", text, once({ gate: `${id}-primary` })); return { primary: `${id}-primary` };
    case "hang": await script("primary", text, once({ delay_ms: 60000 })); return {};
    case "unavailable": await script("primary", text, once({ status: 503 })); return {};
    case "extra_key": await script("primary", text, once({ reply: "extra_key" })); return {};
    case "stream": await script("fallback", text, once({ chunk_chars: 2, chunk_ms: 150 })); return {};
    case "stream_stall": await script("fallback", text, once({ chunk_chars: 2, chunk_ms: 100, stream_fault: "stall", fault_after: 12 })); return {};
    case "stream_cut": await script("fallback", text, once({ chunk_chars: 2, chunk_ms: 100, stream_fault: "cut", fault_after: 12 })); return {};
    case "stream_race":
      // Both stream (under `cargo xtask dev`). A hedge is only for a silent primary, so
      // the primary says nothing (comments only) for 600 ms, past the kind's 300 ms, and
      // then streams slowly; the hedge streams faster.
      await script("primary", text, once({ hold_open_ms: 600, chunk_chars: 1, chunk_ms: 250 }));
      await script("fallback", text, once({ chunk_chars: 2, chunk_ms: 60 }));
      return {};
    case "race":
      await script("primary", text, once({ gate: `${id}-primary` }));
      await script("fallback", text, once({ gate: `${id}-fallback` }));
      return { primary: `${id}-primary`, fallback: `${id}-fallback` };
    default: return {};
  }
}

// Clicks take turns only for the lab's preparation (scripting the mock must land
// before the job is created); each click then calls `submit`, as an app would.
let preparing = Promise.resolve();

async function generate({ resumed = false } = {}) {
  clearError();
  if (!app) return showError({ code: "sdk_missing" });
  let fault = resumed ? "normal" : lab.armed();
  if (RACES.has(fault)) {
    lab.set(fault); // the race's kind on screen, should the picker have left it
    fault = lab.armed();
  }
  const known = tickets.get();
  // After a reload the ticket's own kind and input are sent again: the same intent. A
  // race's second click is the same intent too: the picker stays on the hedged kind.
  const kind = resumed ? known.kind : kinds.picked();
  const input = resumed ? known.input : kinds.read();
  const intent = kinds.intentOf(kind, input);
  // The streamed faults run on the fallback, which streams (its wrangler.toml entry says
  // "stream": true); the ticket keeps the provider, so a reload is the same intent.
  const provider = ON_FALLBACK.has(fault) ? "fallback" : known?.intent === intent ? known.provider : undefined;
  const same = known && known.intent === intent && known.provider === provider;

  if (same && known.jobId && known.status === "succeeded" && !resumed) {
    // The SDK frees a key once its job has succeeded; the page keeps the promise that
    // the same input shows the same ticket.
    note("Same input, same ticket: this input already has its result. Change it for a new job.");
    return follow(known.jobId);
  }
  const fresh = !same || known.status === "cancelled";
  // The mock knows this job by its marker, the input's text field, in the prompt.
  const marker = kinds.markerOf(kind, input);
  if (!fresh && fault !== "normal") {
    note("This input already has a ticket, so no provider is called for it and the failure stays armed: change the input to try it.");
    fault = "normal";
  } else if (fault !== "normal" && fault !== "swallow" && !marker) {
    note("The lab knows a job by its text field in the prompt, and this input has none filled in: this Generate runs normally.");
    fault = "normal";
    lab.set("normal");
  } else if (fault !== "normal") {
    lab.set("normal");
  }
  const ticket = fresh ? { kind, input, intent, provider, jobId: null, status: null, gates: {} } : known;
  if (fresh) tickets.put(ticket);
  renderHint();

  const prep = fault === "normal" || fault === "swallow" ? null : arm(fault, marker);
  prep?.catch(() => {}); // its failure is reported below, through `mine`
  const mine = preparing.then(() => prep);
  preparing = mine.catch(() => {});
  submitting += 1;
  renderButton();
  try {
    const gates = await mine;
    if (gates) {
      ticket.gates = gates;
      tickets.put({ ...(tickets.get() ?? ticket), gates });
    }
    let client = app;
    if (fault === "swallow") {
      const path = `/drop-once/${randomId()}`;
      client = new sdk.Client({ baseUrl: `${setting("proxy")}${path}`, getToken: () => setting("token") });
      note(`This Generate goes through the fault proxy (${setting("proxy")}${path}), which lets the Worker answer and then drops the answer.`);
    }
    const onRetry = (info) => note(`${info.status ? `The server answered ${info.status}` : `No answer (${info.code})`}: the SDK sends the same request again, with the same Idempotency-Key, in ${(info.delayMs / 1000).toFixed(2)} s (try ${info.attempt}).`);
    const job = await client.submit(kind, input, { onRetry, provider });
    const now = tickets.get();
    if (now?.intent === intent) tickets.put({ ...now, jobId: job.id, status: job.status });
    if (resumed) note(`After the reload, the same input was sent again with the same key: ticket ${job.id}.`);
    else if (shown?.jobId === job.id) note(`Same input, same intent: the SDK gave back ticket ${job.id}, no new job.`);
    follow(job.id, job);
  } catch (e) {
    showError(e);
  } finally {
    submitting -= 1;
    renderButton();
  }
}

$("form").addEventListener("submit", (e) => {
  e.preventDefault();
  generate();
});
function renderHint() {
  const t = tickets.get();
  $("intent-hint").textContent = t && t.intent !== kinds.intentOf(kinds.picked(), kinds.read())
    ? "The kind or the input changed: Generate makes a new intent, and a new job."
    : "While this input is on screen, Generate shows its ticket again. Change it for a new job.";
}
kinds.onChange((why) => {
  // The races run on the hedged kind only: picking another one disarms them.
  if (why === "kind" && RACES.has(lab.armed()) && kinds.picked() !== HEDGED) {
    lab.set("normal");
    note(`The hedge races run on ${HEDGED} only, so the lab went back to normal.`);
  }
  renderHint();
});
for (const input of document.querySelectorAll('input[name="fault"]')) {
  input.addEventListener("change", () => lab.set(lab.armed()));
}

// ---------------------------------------------------------------- decisions

/** Runs a button's action once at a time (a double-click on it is one action). */
function action(id, run) {
  $(id).addEventListener("click", async () => {
    const button = $(id);
    if (button.dataset.running) return;
    button.dataset.running = "1";
    button.disabled = true;
    clearError();
    try {
      await run();
    } catch (e) {
      showError(e);
    } finally {
      delete button.dataset.running;
      button.disabled = id === "resolve" && !setting("admin");
    }
  });
}

action("fallback", async () => {
  const attempt = await app.retry(shown.jobId);
  note(`Attempt ${attempt.n} started on ${attempt.provider}, on the same job.`);
  rewatch();
});

action("cancel", async () => {
  const job = await app.cancel(shown.jobId);
  note("You cancelled the job: any late result is discarded and logged.");
  render(job);
  rewatch();
});

action("resolve", async () => {
  const unknown = shown.job?.attempts.find((a) => a.state === "unknown");
  if (!unknown) throw { code: "attempt_not_unknown", message: "no attempt is unknown" };
  if (!setting("admin")) throw { code: "admin_token_missing" };
  const r = await api("POST", `/v1/attempts/${unknown.id}/resolve`, { body: { outcome: "failed" }, token: setting("admin") });
  note(`An admin resolved attempt ${unknown.n} as failed: the job may now try the fallback.`);
  render(r.data);
  rewatch();
});

for (const provider of ["primary", "fallback"]) {
  action(`release-${provider}`, async () => {
    const gate = tickets.get()?.gates?.[provider];
    if (!gate) return;
    await mock("/_release", { gate });
    const t = tickets.get();
    if (t?.gates?.[provider] === gate) {
      delete t.gates[provider];
      tickets.put(t);
    }
    renderReleases();
    note(`The mock released the ${provider === "fallback" ? "hedge's (fallback's)" : "primary's"} answer.`);
    lingerUntil = Date.now() + 15000;
    if (!watcher && shown) watch(shown.jobId);
  });
}

// ---------------------------------------------------------------- scenarios

const SAMPLES = [
  "The meeting ran long, but everyone left with a plan they liked",
  "The bakery on the corner sold out of bread before nine, and the queue went round the block",
  "After three weeks of rain the river rose over the path, and the town put sandbags along the bank",
  "The new trainee fixed the printer that nobody else could fix, and the whole office cheered",
];
/** A text made fresh: a new tag at its end, in place of an old one (a sample if empty). */
const retag = (text) => {
  const base = text.replace(/\s*\([0-9a-z]+-[0-9a-z]+\)\.?$/, "");
  return `${base || SAMPLES[Math.floor(Math.random() * SAMPLES.length)]} (${randomId()})`;
};

const SCENARIOS = {
  double: ["normal", "Now double-click Generate: one ticket, one job."],
  reload: ["hold", "Press Generate, then reload this page or open it in a second tab before you release the answer: the same ticket comes back."],
  swallow: ["swallow", "Press Generate: the Worker makes the job, the answer is dropped, and the SDK sends the same request again."],
  hang: ["hang", "Press Generate. After the provider's timeout the attempt is unknown: try the fallback, then resolve or cancel."],
  unavailable: ["unavailable", "Press Generate: the primary answers 503, then press Try the fallback."],
  extra_key: ["extra_key", "Press Generate: the answer breaks the contract and cannot win; then press Try the fallback."],
  race: ["race", "Press Generate. When both attempts run, release the hedge's answer first, then the primary's."],
  late: ["hold", "Press Generate, cancel the job, then release the primary's answer: the late result is discarded and logged."],
  stream: ["stream", "Press Generate: the answer is written as it comes. Reload mid-way (it goes on where it was), or cancel (the provider's connection closes, and no more text comes)."],
};

/** One key sent three times with the raw API: the picked kind's input made fresh, the
 * same again, then with its text field changed. */
async function reusedKey() {
  const key = crypto.randomUUID();
  const kind = kinds.remark(retag) ? kinds.picked() : "summarize";
  const field = kinds.markerName(kind) ?? "text";
  const input = kind === kinds.picked() ? kinds.read() : { text: retag("") };
  const body = (text) => ({ kind, input: { ...input, [field]: text } });
  const first = await api("POST", "/v1/jobs", { body: body(input[field]), key });
  const again = await api("POST", "/v1/jobs", { body: body(input[field]), key });
  let other;
  try {
    await api("POST", "/v1/jobs", { body: body(`${input[field]}!`), key });
    other = "accepted (unexpected)";
  } catch (e) {
    other = `${e.status} ${e.code}`;
  }
  note(`One key, raw API: first ${first.status}, the same request again ${again.status}${again.replayed ? " (Idempotent-Replayed)" : ""}, another input ${other}.`);
  follow(first.data.id, first.data);
}

async function certify() {
  if (!setting("admin")) throw { code: "admin_token_missing" };
  const r = await api("POST", "/v1/providers/fallback/certify", { body: {}, token: setting("admin") });
  for (const report of r.data?.reports ?? []) {
    const why = [...new Set(report.failures.map((f) => f.message))].join("; ");
    note(`The fallback for ${report.kind}: ${report.passed ? "certified" : `not certified — ${why}`}.`);
  }
}

async function sloppy() {
  // The golden inputs of both kinds: their first two calls each (one per kind) get an
  // answer with an extra key, so this certification fails and the next one passes.
  for (const phrase of ["The new library opened downtown", "The train was delayed", "The committee met on Tuesday"]) {
    await script("fallback", phrase, [{ reply: "extra_key" }, { reply: "extra_key" }, {}]);
  }
  note("The fallback will add a top-level key to its certification answers.");
  await certify();
  note("Until it is certified again, no job fails over to it: press Certify the fallback to restore it.");
}

document.querySelector(".scenarios").addEventListener("click", async (e) => {
  const button = e.target.closest("button[data-scenario]");
  if (!button) return;
  const name = button.dataset.scenario;
  clearError();
  try {
    if (name === "reused") return await reusedKey();
    if (name === "certify") return await certify();
    if (name === "sloppy") return await sloppy();
    const [fault, hint] = SCENARIOS[name];
    lab.set(fault); // first: a race switches the picker to the kind that hedges
    if (!kinds.remark(retag)) note("This kind's input has no text field to make fresh: change the input yourself.");
    renderHint();
    note(hint);
    $("generate").focus();
  } catch (err) {
    showError(err);
  }
});

// ---------------------------------------------------------------- start

// Durations of live attempts tick once a second.
setInterval(() => {
  for (const cell of document.querySelectorAll("#timeline td.duration")) {
    if (!cell.dataset.to) cell.textContent = duration(cell.dataset.from, null);
  }
}, 1000);

/** The server's kinds, into the picker; the kind on screen stays if the server has it. */
async function loadKinds() {
  const was = kinds.picked();
  const input = was ? kinds.read() : undefined;
  try {
    await kinds.load(api);
  } catch (e) {
    if (setting("token")) showError(e); // with no token yet, Settings is open and says so
  }
  kinds.show(was ?? "summarize", was && kinds.has(was) ? input : undefined);
  renderHint();
}
$("token").addEventListener("change", loadKinds);
await loadKinds();

// A ticket from before a reload (or from another tab): its kind and input are shown; a
// job that has ended is shown too; otherwise the same intent is submitted again, and the
// SDK's stored key brings back the same job.
{
  const t = tickets.get();
  if (t?.input && kinds.has(t.kind) && app) {
    kinds.show(t.kind, t.input);
    renderHint();
    if (t.jobId && ENDED.has(t.status)) follow(t.jobId);
    else generate({ resumed: true });
  }
}
renderButton();
// For people and tests alike: the page has set itself up.
document.body.dataset.ready = app ? "yes" : "no-sdk";
