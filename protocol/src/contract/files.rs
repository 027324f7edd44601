//! A directory of kind files, as the build, `cargo xtask kinds` and the simulator read
//! it: every `*.json` in it, in name order, each checked whole. Native only: the
//! Worker gets its files from the build.

use super::Kind;
use std::path::{Path, PathBuf};

/// One kind file that passed every check.
#[derive(Debug)]
pub struct KindFile {
    /// Where it is.
    pub path: PathBuf,
    /// Its text, as the Worker compiles it in.
    pub text: String,
    /// It, compiled.
    pub kind: Kind,
}

/// Every kind file in `dir`, checked: each loads ([`Kind::from_json`]) and is named
/// after its kind (`NAME.json`, so no two declare one name). `Err` lists every file that
/// does not pass, each as `PATH: at JSON-PATH: what is wrong`.
pub fn load_dir(dir: &Path) -> Result<Vec<KindFile>, Vec<String>> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        vec![format!(
            "{}: cannot read the kinds' directory: {e}",
            dir.display()
        )]
    })?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    let (mut files, mut errors) = (Vec::new(), Vec::new());
    for path in paths {
        match load_file(&path) {
            Ok(file) => files.push(file),
            Err(e) => errors.push(format!("{}: {e}", path.display())),
        }
    }
    if files.is_empty() && errors.is_empty() {
        errors.push(format!("{}: no kind file (NAME.json) in it", dir.display()));
    }
    match errors.is_empty() {
        true => Ok(files),
        false => Err(errors),
    }
}

/// One kind file, checked.
pub fn load_file(path: &Path) -> Result<KindFile, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read it: {e}"))?;
    let kind = Kind::from_json(&text)?;
    kind.check_golden()?;
    if kind.golden().next().is_none() {
        return Err("at golden: the kind has no golden inputs to certify a provider with".into());
    }
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    if stem != kind.name() {
        return Err(format!(
            "at kind: the file declares {:?}; a kind's file is named after it ({}.json)",
            kind.name(),
            kind.name()
        ));
    }
    Ok(KindFile {
        path: path.to_owned(),
        text,
        kind,
    })
}
