// What `import … from "onceclick"` gives under the `node` export condition: a server
// render (Next.js, Remix, Vite SSR, plain Node). The SDK keeps keys in the browser's
// storage and sends from the page, so on a server there is nothing for it to do.
// Importing this, loading it (`init`) and constructing a `Client` all succeed, so a
// module that sets a client up at its top level renders on the server. Every call that
// would send rejects with an `OnceclickError` whose code is "unsupported_environment"
// and whose message says where to call it instead.

import { OnceclickError } from "./error.js";

export { OnceclickError };

const WHY =
  "onceclick runs in the browser, and this code ran on a server (the package's `node` build). " +
  "Call submit, wait, retry, cancel, forget and idempotentFetch from an event handler or an effect, " +
  "which run only in the browser.";

function refuse() {
  return Promise.reject(new OnceclickError("unsupported_environment", WHY, undefined, false, undefined));
}

export class Client {
  submit() {
    return refuse();
  }

  wait() {
    return refuse();
  }

  retry() {
    return refuse();
  }

  cancel() {
    return refuse();
  }

  forget() {
    return refuse();
  }

  free() {}
}

if (typeof Symbol.dispose === "symbol") {
  Client.prototype[Symbol.dispose] = Client.prototype.free;
}

export function idempotentFetch() {
  return refuse();
}

/** Nothing to load on a server: resolves at once, so a shared `init()` renders. */
export default async function init() {
  return undefined;
}

export function initSync() {
  return undefined;
}
