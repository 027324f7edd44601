// Loads the SDK's wasm from the file system: in Node there is no page to fetch it from,
// so `init` is given its bytes. After this, `init()` in the app resolves at once.
import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import init from "onceclick";

const wasm = createRequire(import.meta.url).resolve("onceclick/onceclick_bg.wasm");
await init({ module_or_path: await readFile(wasm) });
