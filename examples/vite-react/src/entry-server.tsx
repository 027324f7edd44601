// What a server render does with the app: import it (and with it the SDK and the hook)
// in Node, and render it to HTML. `vite build --ssr` bundles this for the check in
// `cargo xtask test`.
import { StrictMode } from "react";
import { renderToString } from "react-dom/server";
import { App } from "./App";

export { client } from "./client";

export function render(): string {
  return renderToString(
    <StrictMode>
      <App />
    </StrictMode>,
  );
}
