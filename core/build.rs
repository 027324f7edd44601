//! Finds the kinds: every `NAME.json` in `edge/kinds/` (or the directory that
//! `ONCECLICK_KINDS` names), checked whole as the Worker will load it, and compiled into
//! the core as `kind_files.rs`. A file that does not pass fails the build, naming the
//! file, the JSON path and what is wrong. Adding a kind is adding its file.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=ONCECLICK_KINDS");
    let dir = match std::env::var_os("ONCECLICK_KINDS") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../edge/kinds"),
    };
    println!("cargo:rerun-if-changed={}", dir.display());
    let files = match onceclick_protocol::contract::load_dir(&dir) {
        Ok(files) => files,
        Err(errors) => {
            eprintln!("the kind files do not load:");
            for e in &errors {
                eprintln!("  {e}");
                println!("cargo:warning={e}");
            }
            std::process::exit(1);
        }
    };
    let mut out = String::from("/// The kind files the build found, each `(file name, text)`.\n");
    out.push_str("pub(super) const FILES: &[(&str, &str)] = &[\n");
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.path.display());
        let name = file
            .path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let path = std::fs::canonicalize(&file.path).unwrap_or_else(|_| file.path.clone());
        out.push_str(&format!(
            "    ({name:?}, include_str!({:?})),\n",
            path.display().to_string()
        ));
    }
    out.push_str("];\n");
    let target =
        PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default()).join("kind_files.rs");
    if let Err(e) = std::fs::write(&target, out) {
        eprintln!("cannot write {}: {e}", target.display());
        std::process::exit(1);
    }
}
