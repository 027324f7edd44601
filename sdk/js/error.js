// `OnceclickError`: the one error every call of the SDK rejects with, in the browser build
// (whose wasm makes it through this module) and in the server build (`server.js`) alike.
// A real `Error`: it has a stack, `instanceof Error` holds, and error trackers report it
// as one. Branch on `code`.
export class OnceclickError extends Error {
  constructor(code, message, status, retryable, jobId, cause) {
    super(message, cause === undefined ? undefined : { cause });
    this.code = code;
    this.status = status;
    this.retryable = retryable === true;
    this.jobId = jobId;
  }

  toString() {
    return `OnceclickError [${this.code}]: ${this.message}`;
  }
}

OnceclickError.prototype.name = "OnceclickError";
