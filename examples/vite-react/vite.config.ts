import { defineConfig } from "vite";

// The app calls the API on its own origin; Vite forwards /v1 to the Worker, in
// `vite` (dev) and in `vite preview` alike. Point ONCECLICK_URL at another Worker
// (`wrangler dev` listens on 127.0.0.1:8787 by default).
const api = process.env.ONCECLICK_URL ?? "http://127.0.0.1:8787";
const proxy = { "/v1": { target: api, changeOrigin: true } };

export default defineConfig({
  server: { proxy },
  preview: { proxy },
  build: {
    rolldownOptions: {
      output: {
        // The SDK in a chunk of its own: an app deploy leaves its cache alone, and the
        // build's report shows what it costs.
        codeSplitting: { groups: [{ name: "onceclick", test: /node_modules[\\/]onceclick[\\/]/ }] },
      },
    },
  },
});
