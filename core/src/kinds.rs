//! The kinds this Worker knows, compiled in from `edge/kinds/*.json`.

use crate::error::{ApiResult, AppError};
use onceclick_protocol::contract::Kind;
use onceclick_protocol::ErrorCode;
use std::sync::OnceLock;

/// The kind files, compiled into the Worker. Add a kind by adding its file here.
const KIND_FILES: &[(&str, &str)] = &[
    (
        "summarize.json",
        include_str!("../../edge/kinds/summarize.json"),
    ),
    (
        "summarize_hedged.json",
        include_str!("../../edge/kinds/summarize_hedged.json"),
    ),
];

static KINDS: OnceLock<Result<Vec<Kind>, String>> = OnceLock::new();

/// Every declared kind, compiled once per isolate.
pub fn all() -> Result<&'static [Kind], String> {
    KINDS
        .get_or_init(|| {
            KIND_FILES
                .iter()
                .map(|(file, text)| Kind::from_json(text).map_err(|e| format!("{file}: {e}")))
                .collect()
        })
        .as_ref()
        .map(Vec::as_slice)
        .map_err(Clone::clone)
}

/// The kind called `name`, if declared.
pub fn find(name: &str) -> Result<Option<&'static Kind>, String> {
    Ok(all()?.iter().find(|k| k.name() == name))
}

/// The kind called `name`: `422 unknown_kind` when this Worker declares none (a kind
/// a request names, or one a deploy has retired since its job was made), `500` when the
/// compiled-in kind files do not compile.
pub fn declared(name: &str) -> ApiResult<&'static Kind> {
    find(name).map_err(AppError::internal)?.ok_or_else(|| {
        AppError::new(
            ErrorCode::UnknownKind,
            format!("this Worker declares no kind called {name:?}"),
        )
    })
}
