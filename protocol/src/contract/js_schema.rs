//! JSON Schema 2020-12 in the Worker, with @cfworker/json-schema through `js/schema.js`:
//! boon and the regex and Unicode tables it pulls in stay out of the wasm. Its verdicts
//! are checked against boon's by `tests/tests/schema_equivalence.rs`.

use serde_json::Value;
use wasm_bindgen::prelude::*;

#[wasm_bindgen(module = "/js/schema.js")]
extern "C" {
    #[wasm_bindgen(catch, js_name = compileSchema)]
    fn compile_schema(url: &str, schema_json: &str) -> Result<u32, JsValue>;

    #[wasm_bindgen(catch, js_name = checkJson)]
    fn check_json(handle: u32, instance_json: &str) -> Result<Option<String>, JsValue>;
}

fn reason(e: JsValue) -> String {
    e.as_string()
        .unwrap_or_else(|| "the JSON Schema validator failed".to_owned())
}

/// One compiled schema: a handle into the validators `js/schema.js` keeps for the
/// isolate's life.
pub(super) struct Schema {
    handle: u32,
}

impl Schema {
    /// Compiles `schema` as draft 2020-12 under the name `url`.
    pub(super) fn compile(url: &str, schema: &Value) -> Result<Self, String> {
        let text = serde_json::to_string(schema).map_err(|e| e.to_string())?;
        let handle = compile_schema(url, &text).map_err(reason)?;
        Ok(Self { handle })
    }

    /// `Ok` when `value` passes; otherwise the innermost failures, `; `-separated.
    pub(super) fn check(&self, value: &Value) -> Result<(), String> {
        let text = serde_json::to_string(value).map_err(|e| e.to_string())?;
        match check_json(self.handle, &text) {
            Ok(None) => Ok(()),
            Ok(Some(failures)) => Err(failures),
            Err(e) => Err(format!("the schema check did not run: {}", reason(e))),
        }
    }
}
