// The operator's page: the queue of unknown attempts (GET /v1/attempts), the ways out of
// each (POST /v1/attempts/{id}/resolve, POST /v1/jobs/{id}/cancel), the figures
// (GET /v1/stats), and the providers with their certifications (GET /v1/providers),
// all with an admin token. Plain fetch: there is no intent to protect
// here, and every decision the page sends is refused by the API if it no longer applies
// (a resolved attempt is not unknown any more: 409 attempt_not_unknown).

const $ = (id) => document.getElementById(id);
const FIGURES_EVERY_MS = 5000;

// ---------------------------------------------------------------- the token

// Kept for this tab only (sessionStorage), not beside the demo page's tokens: an admin
// token is worth more than a user's.
const STORE = "ops:admin";
{
  const given = new URLSearchParams(location.hash.slice(1)).get("admin");
  try {
    if (given) sessionStorage.setItem(STORE, given);
    $("admin").value = sessionStorage.getItem(STORE) ?? "";
  } catch {
    $("admin").value = given ?? "";
  }
  if (location.hash) history.replaceState(null, "", location.pathname);
  $("admin").addEventListener("change", () => {
    try { sessionStorage.setItem(STORE, $("admin").value.trim()); } catch { /* memory only */ }
    refresh();
  });
}

// ---------------------------------------------------------------- calls

/** A problem the page shows: its code and a sentence. */
class Problem extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

const SENTENCES = {
  unauthorized: "The admin token is missing, expired or not accepted: paste a fresh one under Access.",
  forbidden: "This token is not an admin's.",
  attempt_not_unknown: "That attempt is no longer unknown: someone decided already. The list is refreshed.",
  contract_violation: "That result does not meet the kind's output contract, so it was not accepted.",
  invalid_json: "That result is not a JSON object.",
  job_finished: "The job has already succeeded; its result stands.",
  service_unavailable: "The database did not answer. Nothing may have been written: try again.",
  rate_limited: "Too many requests: wait a moment.",
  network: "The API could not be reached.",
};

async function call(method, path, body) {
  let r;
  try {
    r = await fetch(path, {
      method,
      headers: { Authorization: `Bearer ${$("admin").value.trim()}`, ...(body ? { "Content-Type": "application/json" } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
  } catch (e) {
    throw new Problem("network", `${SENTENCES.network} (${e.message})`);
  }
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  if (!r.ok) {
    const code = json?.code ?? `http_${r.status}`;
    throw new Problem(code, SENTENCES[code] ?? json?.detail ?? `The API answered ${r.status}.`);
  }
  return json;
}

function showError(e) {
  const box = $("error");
  box.replaceChildren();
  const p = document.createElement("p");
  const code = document.createElement("code");
  code.textContent = e.code ?? "error";
  p.append(code, ` ${e.message}`);
  box.append(p);
  box.dataset.code = e.code ?? "error";
  box.hidden = false;
}

function clearError() {
  $("error").hidden = true;
  delete $("error").dataset.code;
}

function say(text) {
  $("status").textContent = text;
}

// ---------------------------------------------------------------- the queue

let cursor = null;

function age(started) {
  const s = Math.max(0, Math.round((Date.now() - Date.parse(started)) / 1000));
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  return `${Math.round(s / 3600)} h`;
}

function button(label, onClick, describedBy) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = label;
  if (describedBy) b.setAttribute("aria-describedby", describedBy);
  b.addEventListener("click", onClick);
  return b;
}

/** Runs one decision on a row, its buttons disabled meanwhile (a second click is no second decision). */
async function decide(tr, what, action) {
  clearError();
  const buttons = [...tr.querySelectorAll("button")];
  for (const b of buttons) b.disabled = true;
  tr.setAttribute("aria-busy", "true");
  try {
    await action();
    say(what);
    await refresh();
  } catch (e) {
    showError(e);
    if (e.code === "attempt_not_unknown") await refresh();
  } finally {
    for (const b of buttons) b.disabled = false;
    tr.removeAttribute("aria-busy");
  }
}

function row(a) {
  const tr = document.createElement("tr");
  tr.dataset.attempt = a.id;
  tr.dataset.job = a.job_id;
  const cells = [age(a.started_at), a.provider, a.kind];
  for (const text of cells) {
    const td = document.createElement("td");
    td.textContent = text;
    tr.append(td);
  }
  const who = document.createElement("td");
  const job = document.createElement("code");
  job.textContent = a.job_id;
  job.id = `job-${a.id}`;
  who.append(job, document.createElement("br"), `owner ${a.owner_id}`);
  tr.append(who);

  const actions = document.createElement("td");
  const label = `job-${a.id}`;
  const row1 = document.createElement("div");
  row1.className = "row";
  const resolve = (outcome, extra = {}) => call("POST", `/v1/attempts/${a.id}/resolve`, { outcome, ...extra });
  row1.append(
    button("Resolve as failed", () => decide(tr, `Attempt ${a.id} resolved as failed: its job may be tried again.`,
      () => resolve("failed")), label),
    button("Resolve as cancelled", () => decide(tr, `Attempt ${a.id} resolved as cancelled.`,
      () => resolve("cancelled")), label),
    // The attempt is resolved first: that is refused (409) if someone decided already, so
    // a stale row never cancels a job that has moved on (say, to the owner's new attempt).
    button("Cancel the job", () => decide(tr, `Job ${a.job_id} cancelled.`, async () => {
      await resolve("cancelled");
      await call("POST", `/v1/jobs/${a.job_id}/cancel`);
    }), label),
  );
  const details = document.createElement("details");
  const summary = document.createElement("summary");
  summary.textContent = "Resolve as succeeded, with the provider's result";
  const area = document.createElement("textarea");
  area.rows = 3;
  area.id = `result-${a.id}`;
  area.placeholder = '{"summary": "…", "sentiment": "neutral"}';
  const areaLabel = document.createElement("label");
  areaLabel.htmlFor = area.id;
  areaLabel.textContent = "The result, as JSON";
  const send = button("Resolve as succeeded", () => decide(tr, `Attempt ${a.id} resolved as succeeded: its job has its result.`, async () => {
    let result;
    try { result = JSON.parse(area.value); } catch { throw new Problem("invalid_json", SENTENCES.invalid_json); }
    if (result === null || typeof result !== "object" || Array.isArray(result)) throw new Problem("invalid_json", SENTENCES.invalid_json);
    return resolve("succeeded", { result });
  }), label);
  details.append(summary, areaLabel, area, send);
  actions.append(row1, details);
  tr.append(actions);
  return tr;
}

async function loadQueue(more = false) {
  const page = await call("GET", `/v1/attempts?state=unknown&limit=50${more && cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`);
  const body = $("queue").tBodies[0];
  if (!more) body.replaceChildren();
  for (const a of page.items) body.append(row(a));
  cursor = page.next_cursor;
  $("more").hidden = !cursor;
  const n = body.rows.length;
  $("empty").hidden = n > 0;
  $("queue-count").textContent = `${n}${cursor ? "+" : ""} waiting`;
  document.body.dataset.queue = String(n);
}

// ---------------------------------------------------------------- figures

const FIGURES = [
  ["Jobs created", (t) => t.jobs_created, "jobs_created"],
  ["Replays (same key, same request)", (t) => t.replays, "replays"],
  ["Conflicts (same key, another request: 409)", (t) => t.conflicts, "conflicts"],
  ["Attempts succeeded", (t) => t.attempts.succeeded, "attempts_succeeded"],
  ["Attempts failed", (t) => t.attempts.failed, "attempts_failed"],
  ["Attempts unknown", (t) => t.attempts.unknown, "attempts_unknown"],
  ["Attempts abandoned", (t) => t.attempts.abandoned, "attempts_abandoned"],
  ["Races lost (superseded)", (t) => t.races_lost, "races_lost"],
  ["Fallback button (new attempts)", (t) => t.retries_started, "retries_started"],
  ["Failovers started / skipped", (t) => `${t.failovers.started} / ${t.failovers.skipped}`, "failovers"],
  ["Hedges started / skipped", (t) => `${t.hedges.started} / ${t.hedges.skipped}`, "hedges"],
  ["Provider latency p50 / p99", (t) => latency(t.latency_ms), "latency"],
];

function latency(l) {
  if (!l.answered) return "no answer yet";
  const bound = (ms) => (ms === null ? "over 60 s" : `≤ ${ms} ms`);
  return `${bound(l.p50)} / ${bound(l.p99)} (${l.answered} answers)`;
}

async function loadFigures() {
  const stats = await call("GET", `/v1/stats?window_s=${$("window").value}`);
  const body = $("figures").tBodies[0];
  body.replaceChildren();
  for (const [name, value, key] of FIGURES) {
    const tr = document.createElement("tr");
    tr.dataset.figure = key;
    const th = document.createElement("th");
    th.scope = "row";
    th.textContent = name;
    const td = document.createElement("td");
    td.textContent = String(value(stats.totals));
    tr.append(th, td);
    body.append(tr);
  }
  const by = $("by").tBodies[0];
  by.replaceChildren();
  for (const f of stats.by_kind_and_provider) {
    const tr = document.createElement("tr");
    for (const text of [f.kind, f.provider, f.jobs_created, f.attempts.succeeded, f.attempts.failed, f.attempts.unknown, f.races_lost, latency(f.latency_ms)]) {
      const td = document.createElement("td");
      td.textContent = String(text);
      tr.append(td);
    }
    by.append(tr);
  }
  document.body.dataset.figures = "yes";
}

// ---------------------------------------------------------------- providers

function code(text) {
  const c = document.createElement("code");
  c.textContent = text;
  return c;
}

/** `items` with ", " between them, for `append`. */
function joined(items) {
  return items.flatMap((item, i) => (i ? [", ", item] : [item]));
}

/** A cell of the providers table; `field` names it for the tests. */
function cell(field, ...content) {
  const td = document.createElement("td");
  td.dataset.field = field;
  td.append(...content);
  return td;
}

/** The provider for one kind: primary or not, certified or why not (failover and hedges skip it until it is). */
function kindItem(kind, k, provider) {
  const li = document.createElement("li");
  li.dataset.kind = kind;
  li.dataset.primary = String(k.primary);
  li.dataset.certified = String(k.certified);
  const name = document.createElement("strong");
  name.textContent = kind;
  const badge = document.createElement("span");
  // A failed report is a refusal; no report yet (or a secret missing) is a wait.
  badge.className = `state ${k.certified ? "state-succeeded" : k.report ? "state-failed" : "state-unknown"}`;
  badge.textContent = k.certified ? "certified" : "not certified";
  li.append(name, ` · ${k.primary ? "primary" : "failover"} · `, badge);
  if (k.model !== provider.model) li.append(" · model ", code(k.model));
  if (k.report) {
    const at = document.createElement("time");
    at.dateTime = k.report.certified_at;
    at.textContent = new Date(k.report.certified_at).toLocaleString();
    li.append(` (${k.certified ? "certified" : "tried"} `, at, ")");
  }
  if (!k.certified) {
    const why = document.createElement("p");
    why.className = "why";
    const text = k.why ?? "it is not certified for this contract version.";
    why.textContent = `${text.charAt(0).toUpperCase()}${text.slice(1)}${/[.!?]$/.test(text) ? "" : "."}`;
    li.append(why);
  }
  return li;
}

function providerRow(p) {
  const tr = document.createElement("tr");
  tr.dataset.provider = p.name;
  const name = document.createElement("th");
  name.scope = "row";
  name.textContent = p.name;
  if (p.missing_secrets.length) {
    const mark = document.createElement("span");
    mark.className = "missing";
    mark.textContent = " (secrets not set)";
    name.append(mark);
  }
  const kinds = Object.entries(p.kinds);
  let list;
  if (kinds.length) {
    list = document.createElement("ul");
    list.className = "kinds";
    for (const [kind, k] of kinds) list.append(kindItem(kind, k, p));
  } else {
    list = "No kind names it.";
  }
  const headers = p.headers.length ? joined(p.headers.map(code)) : ["none"];
  tr.append(name, cell("model", p.model), cell("json_form", code(p.json_form)), cell("headers", ...headers), cell("kinds", list));
  return tr;
}

/** A provider whose secrets are not set: every call of it fails until they are. */
function missingWarning(p) {
  const li = document.createElement("li");
  li.dataset.provider = p.name;
  const name = document.createElement("strong");
  name.textContent = p.name;
  const one = p.missing_secrets.length === 1;
  li.append(name, `: the ${one ? "secret" : "secrets"} `, ...joined(p.missing_secrets.map(code)),
    ` ${one ? "is" : "are"} not set in this deployment, so its calls fail with `,
    code("provider_misconfigured"), `. Set ${one ? "it" : "each"} with `, code("wrangler secret put"), ".");
  return li;
}

async function loadProviders() {
  const { providers } = await call("GET", "/v1/providers");
  $("providers").tBodies[0].replaceChildren(...providers.map(providerRow));
  const missing = providers.filter((p) => p.missing_secrets.length);
  $("providers-warnings").replaceChildren(...missing.map(missingWarning));
  $("providers-warnings").hidden = missing.length === 0;
  $("providers-empty").hidden = providers.length > 0;
  document.body.dataset.providers = "yes";
}

// ---------------------------------------------------------------- wiring

async function refresh() {
  if (!$("admin").value.trim()) {
    showError(new Problem("unauthorized", SENTENCES.unauthorized));
    return;
  }
  try {
    await Promise.all([loadQueue(), loadFigures(), loadProviders()]);
  } catch (e) {
    showError(e);
  }
}

$("refresh").addEventListener("click", () => { clearError(); say(""); refresh(); });
$("more").addEventListener("click", () => loadQueue(true).catch(showError));
$("window").addEventListener("change", () => loadFigures().catch(showError));
setInterval(() => {
  if (document.visibilityState === "visible" && $("admin").value.trim()) loadFigures().catch(() => { /* shown on the next refresh */ });
}, FIGURES_EVERY_MS);

refresh().finally(() => { document.body.dataset.ready = "yes"; });
