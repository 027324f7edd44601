// The demo page's kind picker: the kinds the server serves (GET /v1/kinds), a form made
// from the picked kind's input schema and prefilled from its examples, and the input
// read back from that form. It knows nothing of jobs: demo.js asks it which kind and
// input are on screen, what the intent of a kind and an input is, and which text field
// carries the failure lab's marker into the provider's prompt.
//
// What the form makes of a schema: a string → a text area (a one-line input when its
// maxLength is at most SHORT_TEXT), an array of strings → one input, items separated by
// commas, an object → a fieldset of its own fields, a number or an integer → a number
// input, a boolean → a checkbox, strings from an `enum` → a select, anything else → its
// JSON in a text area. Nothing is checked here: an input that does not fit its kind is
// sent as it is, and the server's problem+json says why.

const $ = (id) => document.getElementById(id);

/** A string this long at most gets a one-line input; a longer one a text area. */
const SHORT_TEXT = 100;

/** The kind shown while the server's list cannot be read (no token yet, say). */
const OFFLINE = [{
  kind: "summarize",
  description: "Summarize a text in at most 400 characters and judge its sentiment.",
  answer: "json",
  input_schema: { type: "object", properties: { text: { type: "string", minLength: 1, maxLength: 20000 } }, required: ["text"] },
  providers: ["primary", "fallback"],
  examples: [{ text: "The meeting ran long, but everyone left with a plan they liked." }],
}];

let kinds = new Map(); // name → the kind, as GET /v1/kinds gives it
let current = null; // { kind, field }: the kind on screen, and its form
let changed = () => {};

function node(tag, props = {}, ...children) {
  const n = Object.assign(document.createElement(tag), props);
  n.append(...children.filter((c) => c !== null && c !== undefined && c !== ""));
  return n;
}

// ---------------------------------------------------------------- the kinds

/**
 * Reads the server's kinds into the picker. When they cannot be read, the picker offers
 * the offline summarize kind, and the failure is thrown for the page to show.
 */
export async function load(api) {
  let list = OFFLINE;
  let failure = null;
  try {
    const r = await api("GET", "/v1/kinds");
    if (Array.isArray(r.data?.kinds) && r.data.kinds.length > 0) list = r.data.kinds;
  } catch (e) {
    failure = e;
  }
  kinds = new Map(list.map((k) => [k.kind, k]));
  $("kind").replaceChildren(...list.map((k) => new Option(k.kind, k.kind)));
  if (failure) throw failure;
}

/** Calls `fn(why)` when the user picks a kind ("kind"), loads an example ("example") or types ("input"). */
export function onChange(fn) {
  changed = fn;
}

/** The name of the kind on screen. */
export const picked = () => current?.kind.kind ?? null;

/** Whether the server has kind `name`. */
export const has = (name) => kinds.has(name);

/** "json" or "text" for a kind the server listed; undefined for one it did not. */
export const answerOf = (name) => kinds.get(name)?.answer;

/**
 * Shows kind `name` (the summarize kind, or the first, if the server has none of that
 * name) with `input` in its form. With no input: the input on screen when both kinds
 * take the same input (summarize and summarize_hedged), otherwise the kind's first example.
 */
export function show(name, input) {
  const kind = kinds.get(name) ?? kinds.get("summarize") ?? kinds.values().next().value;
  if (input === undefined && current && canonical(current.kind.input_schema) === canonical(kind.input_schema)) {
    input = read();
  }
  const field = formFor(kind.input_schema);
  field.set(input ?? kind.examples?.[0] ?? {});
  current = { kind, field };
  $("kind").value = kind.kind;
  $("kind-description").textContent = kind.description ?? "";
  renderExamples(kind);
  $("fields").replaceChildren(field.node);
}

/** The input on screen, as the kind's input. */
export const read = () => current?.field.get() ?? {};

function renderExamples(kind) {
  const examples = kind.examples ?? [];
  $("examples").hidden = examples.length === 0;
  $("examples").replaceChildren(
    node("span", { id: "examples-label", className: "hint" }, "Load an example input:"),
    ...examples.map((example, i) => {
      const button = node("button", { type: "button" }, `Example ${i + 1}`);
      button.dataset.example = String(i);
      button.addEventListener("click", () => {
        current.field.set(example);
        changed("example");
      });
      return button;
    }),
  );
}

{
  $("kind").addEventListener("change", () => {
    show($("kind").value);
    changed("kind");
  });
  $("fields").addEventListener("input", () => changed("input"));
}

// ---------------------------------------------------------------- intents and markers

/** JSON with every object's members in code-unit order: one text per value. */
function canonical(value) {
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`;
  if (value && typeof value === "object") {
    const names = Object.keys(value).filter((k) => value[k] !== undefined).sort();
    return `{${names.map((k) => `${JSON.stringify(k)}:${canonical(value[k])}`).join(",")}}`;
  }
  return JSON.stringify(value) ?? "null";
}

/** The user's intent: the same kind with the same input is the same intent. */
export const intentOf = (kind, input) => `${kind} ${canonical(input)}`;

/**
 * The input's field that carries the failure lab's marker into the provider's prompt:
 * `text` when the kind has that string (every kind shipped does), else its first string.
 */
export function markerName(kind) {
  const props = kinds.get(kind)?.input_schema?.properties ?? {};
  const isText = (s) => typeOf(s) === "string" && !Array.isArray(s.enum);
  if (props.text && isText(props.text)) return "text";
  return Object.keys(props).find((n) => isText(props[n])) ?? null;
}

/** The marker the lab scripts the mock with: the value of the kind's marker field. */
export function markerOf(kind, input) {
  const name = markerName(kind);
  const value = name ? input?.[name] : null;
  return typeof value === "string" && value ? value : null;
}

/** Puts `make(value now)` into the marker field on screen; false when the kind has none. */
export function remark(make) {
  const name = markerName(picked());
  if (!name) return false;
  const input = read();
  current.field.set({ ...input, [name]: make(typeof input[name] === "string" ? input[name] : "") });
  return true;
}

/** The input in a few words, for the ticket's line. */
export function briefly(input) {
  const text = Object.values(input ?? {}).find((v) => typeof v === "string");
  return (text ?? JSON.stringify(input ?? null)).slice(0, 80);
}

// ---------------------------------------------------------------- the form

/** The form of an input schema: `node`, `set(input)`, and `get()` the input it shows. */
export const formFor = (schema) => fieldFor(schema ?? {}, [], true);

/** The JSON type a schema names (its first but "null"), or "object" for one with properties. */
function typeOf(schema) {
  const t = Array.isArray(schema?.type) ? schema.type.find((x) => x !== "null") : schema?.type;
  return t ?? (schema?.properties ? "object" : undefined);
}

const nullable = (schema) => Array.isArray(schema.type) && schema.type.includes("null");

function fieldFor(schema, path, required) {
  const type = typeOf(schema);
  if (type === "object" && schema.properties) return objectField(schema, path, required);
  if (Array.isArray(schema.enum) && schema.enum.every((v) => typeof v === "string")) return choiceField(schema, path, required);
  if (type === "string") return textField(schema, path, required);
  if (type === "number" || type === "integer") return numberField(schema, path, required, type);
  if (type === "boolean") return checkField(schema, path);
  if (type === "array" && typeOf(schema.items) === "string") return listField(schema, path, required);
  return jsonField(schema, path, required);
}

/** The input's `text` keeps the id the page's text area always had. */
const fieldId = (path) => (path.length === 1 && path[0] === "text" ? "text" : `in-${path.join("-").replace(/\s/g, "_")}`);

const labelOf = (schema, path) => schema.title ?? path[path.length - 1] ?? "input";
const requiredMark = (required) => (required ? node("span", { className: "required" }, " (required)") : null);

/** A control with its label, its schema's description, and the page's hint on intents. */
function labelled(control, schema, path, required, how = "") {
  const id = fieldId(path);
  Object.assign(control, { id, name: path.join(".") });
  if (required && control.type !== "checkbox") control.required = true;
  const hint = schema.description ? node("p", { id: `${id}-hint`, className: "hint" }, schema.description) : null;
  control.setAttribute("aria-describedby", [hint?.id, "intent-hint"].filter(Boolean).join(" "));
  const label = control.type === "checkbox"
    ? node("label", { className: "check" }, control, ` ${labelOf(schema, path)}`)
    : node("label", { htmlFor: id }, labelOf(schema, path), how ? ` (${how})` : "", requiredMark(required));
  return node("div", { className: "field" }, label, control.type === "checkbox" ? null : control, hint);
}

/** An empty field: left out, unless required (then `null` where the schema allows it). */
const empty = (schema, required, blank) => (required ? (nullable(schema) ? null : blank) : undefined);

function objectField(schema, path, required) {
  const names = new Set(schema.required ?? []);
  const fields = Object.entries(schema.properties).map(([n, s]) => [n, fieldFor(s ?? {}, [...path, n], names.has(n))]);
  const box = path.length === 0
    ? node("div", { className: "fields" })
    : node("fieldset", {}, node("legend", {}, labelOf(schema, path), requiredMark(required)));
  box.append(...fields.map(([, f]) => f.node));
  return {
    node: box,
    set(value) {
      const given = value && typeof value === "object" && !Array.isArray(value) ? value : {};
      for (const [n, f] of fields) f.set(given[n]);
    },
    get() {
      const out = {};
      for (const [n, f] of fields) {
        const v = f.get();
        if (v !== undefined) out[n] = v;
      }
      return Object.keys(out).length > 0 || required ? out : undefined;
    },
  };
}

function textField(schema, path, required) {
  const short = typeof schema.maxLength === "number" && schema.maxLength <= SHORT_TEXT;
  const control = short ? node("input", { type: "text", autocomplete: "off" }) : node("textarea", { rows: 4 });
  return {
    node: labelled(control, schema, path, required),
    set(value) { control.value = typeof value === "string" ? value : ""; },
    get() { return control.value.trim() || empty(schema, required, ""); },
  };
}

function choiceField(schema, path, required) {
  const control = node("select");
  control.append(...(required ? [] : [new Option("—", "")]), ...schema.enum.map((v) => new Option(v, v)));
  return {
    node: labelled(control, schema, path, required),
    set(value) { control.value = schema.enum.includes(value) ? value : (required ? schema.enum[0] : ""); },
    get() { return control.value || empty(schema, required, undefined); },
  };
}

function numberField(schema, path, required, type) {
  const control = node("input", { type: "number", step: type === "integer" ? "1" : "any" });
  return {
    node: labelled(control, schema, path, required),
    set(value) { control.value = typeof value === "number" ? String(value) : ""; },
    get() { return control.value === "" ? empty(schema, required, undefined) : Number(control.value); },
  };
}

function checkField(schema, path) {
  const control = node("input", { type: "checkbox" });
  return {
    node: labelled(control, schema, path, false),
    set(value) { control.checked = value === true; },
    get() { return control.checked; },
  };
}

function listField(schema, path, required) {
  const control = node("input", { type: "text", autocomplete: "off" });
  return {
    node: labelled(control, schema, path, required, "separated by commas"),
    set(value) { control.value = Array.isArray(value) ? value.join(", ") : ""; },
    get() {
      const items = control.value.split(",").map((s) => s.trim()).filter(Boolean);
      return items.length > 0 || required ? items : undefined;
    },
  };
}

/** Anything else, as JSON; what does not parse is sent as its text, for the server to refuse. */
function jsonField(schema, path, required) {
  const control = node("textarea", { rows: 3, spellcheck: false });
  return {
    node: labelled(control, schema, path, required, "as JSON"),
    set(value) { control.value = value === undefined ? "" : JSON.stringify(value); },
    get() {
      const text = control.value.trim();
      if (!text) return empty(schema, required, undefined);
      try { return JSON.parse(text); } catch { return text; }
    },
  };
}
