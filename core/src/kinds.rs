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

/// A set of kinds, compiled. A file that does not compile here (the build checked it
/// natively; the Worker's schema validator may still refuse what boon took) is kept
/// apart: its own kind answers an internal error, and every other kind still works.
#[derive(Debug)]
pub struct Kinds {
    kinds: Vec<Kind>,
    /// `(file stem, why)` for each file that does not compile.
    broken: Vec<(String, String)>,
}

impl Kinds {
    /// Compiles kind files, each `(file name, text)`.
    pub fn compile(files: &[(&str, &str)]) -> Self {
        let mut kinds = Kinds {
            kinds: Vec::new(),
            broken: Vec::new(),
        };
        for (file, text) in files {
            match Kind::from_json(text) {
                Ok(kind) => kinds.kinds.push(kind),
                Err(e) => {
                    let stem = file.strip_suffix(".json").unwrap_or(file);
                    kinds.broken.push((stem.to_owned(), format!("{file}: {e}")));
                }
            }
        }
        kinds
    }

    /// The kinds the build found, compiled once.
    pub fn built() -> &'static Kinds {
        static BUILT: OnceLock<Kinds> = OnceLock::new();
        BUILT.get_or_init(|| Kinds::compile(built::FILES))
    }

    /// Every kind that compiled.
    pub fn all(&self) -> &[Kind] {
        &self.kinds
    }

    /// The kind called `name`, if declared; why not, if its file does not compile.
    pub fn find(&self, name: &str) -> Result<Option<&Kind>, String> {
        if let Some((_, why)) = self.broken.iter().find(|(stem, _)| stem == name) {
            return Err(why.clone());
        }
        Ok(self.kinds.iter().find(|k| k.name() == name))
    }
}

/// Every kind the host's configuration declares (that compiled).
pub fn all(host: &dyn Host) -> &'static [Kind] {
    host.config().kinds.all()
}

/// The kind called `name`: `422 unknown_kind` when the deployment declares none (a
/// kind a request names, or one a deploy has retired since its job was made), `500`
/// when its kind file does not compile.
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
