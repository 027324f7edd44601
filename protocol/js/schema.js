// JSON Schema 2020-12 in the Worker: @cfworker/json-schema behind the two calls that
// protocol/src/contract/js_schema.rs imports through wasm-bindgen. worker-build bundles
// this file and the package into edge/build/index.js; `cargo xtask` puts the pinned
// package (package-lock.json) where that bundler finds it (NODE_PATH). See docs/json-schema.md.
//
// Values cross as JSON text. Errors cross as thrown strings. Messages follow boon's (the
// validator natively): the innermost failures, each as `at '<JSON Pointer>': <what>`.
import { Validator } from '@cfworker/json-schema';

const compiled = [];

function reason(e) {
  return String(e && e.message ? e.message : e);
}

/** Compiles a schema (JSON text) once; returns the handle that `checkJson` takes. */
export function compileSchema(url, schemaJson) {
  try {
    const schema = JSON.parse(schemaJson);
    const shaped =
      typeof schema === 'boolean' ||
      (schema !== null && typeof schema === 'object' && !Array.isArray(schema));
    if (!shaped) {
      throw new Error('a schema is a JSON object or a boolean');
    }
    compiled.push({ url, validator: new Validator(schema, '2020-12', false) });
    return compiled.length - 1;
  } catch (e) {
    throw reason(e);
  }
}

/** `undefined` when the instance (JSON text) passes; otherwise what failed. */
export function checkJson(handle, instanceJson) {
  try {
    const entry = compiled[handle];
    if (entry === undefined) {
      throw new Error(`no compiled schema ${handle}`);
    }
    const { valid, errors } = entry.validator.validate(JSON.parse(instanceJson));
    return valid ? undefined : describe(entry.url, errors);
  } catch (e) {
    throw reason(e);
  }
}

/** The innermost output units: an applicator's own unit ("Property "text" does not match
 * schema.") is dropped when a unit below it in the schema says what failed, and so is the
 * bare "False boolean schema." that follows `additionalProperties: false`'s own unit. */
export function describe(url, errors) {
  const below = (u) =>
    errors.some((v) => v !== u && v.keywordLocation.startsWith(`${u.keywordLocation}/`));
  let leaves = errors.filter((u) => !below(u));
  if (leaves.some((u) => u.keyword !== 'false')) {
    leaves = leaves.filter((u) => u.keyword !== 'false');
  }
  const lines = leaves.map((u) => `at '${pointer(u.instanceLocation)}': ${u.error}`);
  return [`jsonschema validation failed with ${url}#`, ...lines].join('; ');
}

// "#/a%20b/~1c" (a URI fragment) -> "/a b/~1c" (a JSON Pointer, as boon prints it).
function pointer(location) {
  const fragment = location.startsWith('#') ? location.slice(1) : location;
  try {
    return decodeURIComponent(fragment);
  } catch {
    return fragment;
  }
}
