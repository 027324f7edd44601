import { defineConfig } from "vitest/config";

// The app's tests: Vitest, with happy-dom for the page, against a real onceclick Worker
// (`cargo xtask dev`, or the one `cargo xtask test` starts): VITE_ONCECLICK_URL and
// VITE_ONCECLICK_TOKEN say which, as for `npm run dev`.
export default defineConfig({
  resolve: {
    // The package's browser build (its `node` condition is the server build, which
    // refuses every call: right for a server render, not for a test of the page).
    conditions: ["browser"],
  },
  test: {
    environment: "happy-dom",
    include: ["test/**/*.test.{ts,tsx}"],
    setupFiles: ["./test/setup.ts"],
    // Resolved and loaded by Vite, so that the `browser` condition above applies.
    server: { deps: { inline: ["onceclick"] } },
    testTimeout: 30_000,
  },
});
