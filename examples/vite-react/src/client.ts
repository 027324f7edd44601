import init, { Client } from "onceclick";

/**
 * One client for the whole app, made once. `init()` loads the SDK's wasm (once, however
 * often it is called); the hook takes this promise and awaits it on the first submit.
 * Under a server render the package's `node` build resolves both without doing anything,
 * so this module is safe to import there.
 */
export const client: Promise<Client> = init().then(
  () =>
    new Client({
      // The API on this page's own origin: Vite forwards /v1 to the Worker.
      baseUrl: import.meta.env.VITE_ONCECLICK_URL ?? globalThis.location?.origin ?? "http://localhost",
      getToken,
    }),
);

// If the wasm cannot load, the hook reports it on the first submit; until then the
// rejection is not an unhandled one.
client.catch(() => undefined);

/**
 * Your sign-in gives the token. Here: `#token=…` in the address (what `cargo xtask dev`
 * prints), or VITE_ONCECLICK_TOKEN at build time.
 */
function getToken(): string {
  const fromHash = new URLSearchParams(globalThis.location?.hash.slice(1) ?? "").get("token");
  return fromHash ?? import.meta.env.VITE_ONCECLICK_TOKEN ?? "";
}
