//! onceclick for the browser: make a button safe to click twice.
//!
//! Each user intent — (owner, kind, fingerprint of the input) — gets one
//! `Idempotency-Key`, stored before the first byte is sent and reused on a double-click,
//! a re-render, a reload and in another tab, for as long as its job lives: until the SDK
//! sees the job end (`succeeded`, `cancelled`) or `forget` is called. Calls retry
//! safely with the same key; a new attempt (`retry`) carries its own key too.
//!
//! ```js
//! import init, { Client } from "onceclick";
//! await init();
//! const client = new Client({ baseUrl: "https://api.example.com", getToken });
//! const job = await client.submit("summarize", { text });
//! const done = await client.wait(job.id, { onUpdate: render });
//! ```
#![deny(missing_docs, missing_debug_implementations)]

/// The global allocator: talc's single-threaded wasm allocator is smaller than std's
/// dlmalloc (see docs/sdk-size.md).
#[cfg(all(target_family = "wasm", not(target_feature = "atomics")))]
#[global_allocator]
static ALLOCATOR: talc::wasm::WasmDynamicTalc = talc::wasm::new_wasm_dynamic_allocator();

// The unit tests that need a browser (`wasm-pack test --headless --chrome sdk`).
#[cfg(all(test, target_arch = "wasm32"))]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

mod call;
mod client;
mod decimal;
mod error;
mod failure;
mod fetch;
mod flight;
mod http;
mod js;
mod json;
mod keys;
mod live;
mod share;
mod text;
mod transport;
mod types;
mod watch;

pub use client::Client;
pub use error::JsOnceclickError;
pub use fetch::idempotent_fetch;
pub use types::{
    CancelOptions, ClientOptions, ForgetOptions, IdempotentFetchOptions, RetryOptions,
    SubmitOptions, WaitOptions,
};
