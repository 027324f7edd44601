//! The kinds a deployment declares. By default, the files the build found in
//! `edge/kinds/` (`core/build.rs` checked each whole and compiled it in), compiled
//! once per isolate. A shell may give its own set instead (the simulator's worlds, a
//! test's copy of the directory), through its configuration.

use crate::error::{ApiResult, AppError};
use crate::host::Host;
use onceclick_protocol::contract::Kind;
use onceclick_protocol::ErrorCode;
use std::sync::OnceLock;

mod built {
    include!(concat!(env!("OUT_DIR"), "/kind_files.rs"));
}

/// A set of kinds, compiled (or why one of them does not compile).
#[derive(Debug)]
pub struct Kinds(Result<Vec<Kind>, String>);

impl Kinds {
    /// Compiles kind files, each `(file name, text)`.
    pub fn compile(files: &[(&str, &str)]) -> Self {
        Self(
            files
                .iter()
                .map(|(file, text)| Kind::from_json(text).map_err(|e| format!("{file}: {e}")))
                .collect(),
        )
    }

    /// The kinds the build found, compiled once.
    pub fn built() -> &'static Kinds {
        static BUILT: OnceLock<Kinds> = OnceLock::new();
        BUILT.get_or_init(|| Kinds::compile(built::FILES))
    }

    /// The files the build found, each `(file name, text)`.
    pub fn built_files() -> &'static [(&'static str, &'static str)] {
        built::FILES
    }

    /// Every kind.
    pub fn all(&self) -> Result<&[Kind], String> {
        self.0.as_deref().map_err(Clone::clone)
    }

    /// The kind called `name`, if declared.
    pub fn find(&self, name: &str) -> Result<Option<&Kind>, String> {
        Ok(self.all()?.iter().find(|k| k.name() == name))
    }
}

/// Every kind the host's configuration declares.
pub fn all(host: &dyn Host) -> Result<&'static [Kind], String> {
    host.config().kinds.all()
}

/// The kind called `name`: `422 unknown_kind` when the deployment declares none (a
/// kind a request names, or one a deploy has retired since its job was made), `500`
/// when its kind files do not compile.
pub fn declared(host: &dyn Host, name: &str) -> ApiResult<&'static Kind> {
    let kinds = host.config().kinds;
    kinds
        .find(name)
        .map_err(AppError::internal)?
        .ok_or_else(|| {
            AppError::new(
                ErrorCode::UnknownKind,
                format!("this Worker declares no kind called {name:?}"),
            )
        })
}
