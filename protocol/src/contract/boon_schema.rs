//! JSON Schema 2020-12 natively, with boon: what xtask and the tests use. The Worker uses
//! @cfworker/json-schema instead (`js_schema.rs`); `tests/tests/schema_equivalence.rs`
//! holds it to boon's verdicts.

use serde_json::Value;

/// One compiled schema.
pub(super) struct Schema {
    schemas: boon::Schemas,
    index: boon::SchemaIndex,
}

impl Schema {
    /// Compiles `schema` (draft 2020-12 unless it names another) under the name `url`.
    pub(super) fn compile(url: &str, schema: &Value) -> Result<Self, String> {
        let mut schemas = boon::Schemas::new();
        let mut compiler = boon::Compiler::new();
        compiler.set_default_draft(boon::Draft::V2020_12);
        compiler
            .add_resource(url, schema.clone())
            .map_err(|e| e.to_string())?;
        let index = compiler
            .compile(url, &mut schemas)
            .map_err(|e| e.to_string())?;
        Ok(Self { schemas, index })
    }

    /// `Ok` when `value` passes; otherwise the innermost failures, `; `-separated.
    pub(super) fn check(&self, value: &Value) -> Result<(), String> {
        self.schemas
            .validate(value, self.index)
            .map_err(|e| describe(&e))
    }
}

fn describe(e: &boon::ValidationError<'_, '_>) -> String {
    // boon's alternate form lists the innermost failures, each with its instance path.
    let text = format!("{e:#}");
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}
