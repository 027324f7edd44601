// The demo page: each scenario scripts the mock provider for a marker in the text,
// then drives the real API (through the SDK where it is built) and shows the job and
// its event log as they change. Nothing here is needed by the API itself.

const $ = (id) => document.getElementById(id);
for (const id of ["token", "admin", "mock"]) {
  $(id).value = localStorage.getItem(`demo:${id}`) || $(id).value;
  $(id).addEventListener("change", () => localStorage.setItem(`demo:${id}`, $(id).value));
}

// `?token=…&admin=…` fill the fields; `?run=<scenario>` starts one (for links and
// for a headless look at the page).
const params = new URLSearchParams(location.search);
for (const id of ["token", "admin"]) if (params.get(id)) $(id).value = params.get(id);

let sdk = null;
try {
  sdk = await import("/pkg/onceclick.js");
  await sdk.default();
  $("sdk-status").textContent = "Using the onceclick SDK from /pkg (built by cargo xtask dev).";
} catch {
  $("sdk-status").textContent = "The SDK is not built into www/pkg; scenarios use plain fetch.";
}

let current = null; // { id, marker }
const say = (text, cls) => {
  const li = document.createElement("li");
  li.textContent = text;
  if (cls) li.className = cls;
  $("log").prepend(li);
};
const marker = () => `[demo-${Math.random().toString(36).slice(2, 8)}]`;
const text = (m) => `${$("text").value} ${m}`;

async function api(method, path, { body, key, token = $("token").value, headers = {} } = {}) {
  const h = { Authorization: `Bearer ${token}`, ...headers };
  if (body !== undefined) h["Content-Type"] = "application/json";
  if (key) h["Idempotency-Key"] = key;
  const r = await fetch(path, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body) });
  const data = r.status === 204 || r.status === 304 ? null : await r.json();
  return { status: r.status, headers: r.headers, data };
}

async function mock(path, body) {
  await fetch(`${$("mock").value}${path}`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
}
const script = (provider, contains, steps) => mock("/_script", { provider, contains, steps });

function client() {
  return new sdk.Client({ baseUrl: location.origin, token: $("token").value });
}

async function submit(m, kind = $("kind").value) {
  const input = { text: text(m) };
  if (sdk) return client().submit(kind, input);
  const r = await api("POST", "/v1/jobs", { body: { kind, input }, key: crypto.randomUUID() });
  if (r.status >= 400) throw r.data;
  return r.data;
}

function follow(job, m) {
  current = { id: job.id, marker: m };
  say(`job ${job.id} (${job.status})`);
}

const scenarios = {
  async double() {
    const m = marker();
    if (!sdk) return say("Build the SDK (cargo xtask dev) to see two clicks share one request.", "err");
    const c = client();
    const [a, b] = await Promise.all([c.submit($("kind").value, { text: text(m) }), c.submit($("kind").value, { text: text(m) })]);
    say(`two submits in one tick → ${a.id === b.id ? "one job" : "TWO JOBS"}: ${a.id}`);
    follow(a, m);
  },
  async reused() {
    const m = marker(), key = crypto.randomUUID(), kind = $("kind").value;
    const first = await api("POST", "/v1/jobs", { body: { kind, input: { text: text(m) } }, key });
    const again = await api("POST", "/v1/jobs", { body: { kind, input: { text: text(m) } }, key });
    const other = await api("POST", "/v1/jobs", { body: { kind, input: { text: `${text(m)}!` } }, key });
    say(`same key: ${first.status}, replay ${again.status} (Idempotent-Replayed: ${again.headers.get("Idempotent-Replayed")}), other text ${other.status} ${other.data?.code}`);
    follow(first.data, m);
  },
  async timeout() {
    const m = marker();
    await script("primary", m, [{ delay_ms: 60000 }]);
    say("the primary will hang past its timeout: the attempt becomes unknown, never failed");
    follow(await submit(m, "summarize"), m);
  },
  async fails() {
    const m = marker();
    await script("primary", m, [{ status: 503 }]);
    say("the primary answers 503: a retryable failure; press the fallback button");
    follow(await submit(m, "summarize"), m);
  },
  async race() {
    const m = marker();
    await script("primary", m, [{ gate: `${m}-p` }]);
    await script("fallback", m, [{ gate: `${m}-f`, summary: "the hedge's answer" }]);
    say("the primary is held; after 300 ms a hedge starts on the fallback. Release the fallback first, then the primary.");
    follow(await submit(m, "summarize_hedged"), m);
  },
  async late() {
    const m = marker();
    await script("primary", m, [{ gate: `${m}-p` }]);
    say("the primary is held. Cancel the job, then release the primary: its result is discarded and logged.");
    follow(await submit(m, "summarize"), m);
  },
  async sloppy() {
    for (const phrase of ["The new library opened downtown", "The train was delayed", "The committee met on Tuesday"]) {
      await script("fallback", phrase, [{ reply: "extra_key" }]);
    }
    say("the fallback now adds a top-level key to certification answers; certify it (admin) to see it fail, then it gets no failover");
  },
};

const actions = {
  async fallback() {
    const r = await api("POST", `/v1/jobs/${current.id}/attempts`, { body: {} });
    say(`new attempt → ${r.status} ${r.data?.code ?? r.data?.id}`, r.status >= 400 ? "err" : "");
  },
  async cancel() {
    const r = await api("POST", `/v1/jobs/${current.id}/cancel`, { body: {} });
    say(`cancel → ${r.status} ${r.data?.status ?? r.data?.code}`);
  },
  async resolve() {
    const job = (await api("GET", `/v1/jobs/${current.id}`)).data;
    const unknown = job.attempts.find((a) => a.state === "unknown");
    if (!unknown) return say("no attempt is unknown", "err");
    const r = await api("POST", `/v1/attempts/${unknown.id}/resolve`, { body: { outcome: "failed" }, token: $("admin").value });
    say(`resolve → ${r.status} ${r.data?.status ?? r.data?.code}`);
  },
  "release-fallback": () => mock("/_release", { gate: `${current.marker}-f` }),
  "release-primary": () => mock("/_release", { gate: `${current.marker}-p` }),
  async certify() {
    const r = await api("POST", "/v1/providers/fallback/certify", { body: {}, token: $("admin").value });
    for (const report of r.data?.reports ?? []) {
      say(`fallback for ${report.kind}: ${report.passed ? "certified" : "FAILED — " + report.failures.map((f) => f.message).join("; ")}`);
    }
    if (r.status >= 400) say(`certify → ${r.status} ${r.data?.code}`, "err");
  },
};

document.addEventListener("click", async (e) => {
  const b = e.target.closest("button");
  if (!b) return;
  try {
    if (b.dataset.scenario) await scenarios[b.dataset.scenario]();
    else if (current || b.dataset.action === "certify") await actions[b.dataset.action]();
    else say("start a scenario first", "err");
  } catch (err) {
    say(`${err.code ?? "error"}: ${err.message ?? err.detail ?? err}`, "err");
  }
});

if (params.get("run")) document.querySelector(`[data-scenario="${params.get("run")}"]`)?.click();

let etag = null;
setInterval(async () => {
  if (!current) return;
  const headers = etag ? { "If-None-Match": etag } : {};
  const r = await api("GET", `/v1/jobs/${current.id}`, { headers });
  if (r.status !== 200) return;
  etag = r.headers.get("ETag");
  $("job").textContent = JSON.stringify(r.data, null, 2);
  const ev = await api("GET", `/v1/jobs/${current.id}/events`);
  $("events").replaceChildren(...(ev.data?.events ?? []).map((e) => {
    const li = document.createElement("li");
    li.textContent = `${e.at.slice(11, 23)} ${e.type}${e.attempt_id ? " " + e.attempt_id.slice(0, 12) + "…" : ""} ${JSON.stringify(e.details)}`;
    return li;
  }));
}, 500);
