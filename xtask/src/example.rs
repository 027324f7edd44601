//! `examples/vite-react` as a frontend developer would use it: copied away from its
//! folder (to `target/xtask/vite-react`), pointed at the npm tarball that `cargo xtask sdk` packs, installed with `npm ci` from
//! its own pinned lock, type-checked under `strict`, built with Vite (for the browser and
//! for a server render), and served by `vite preview` for the end-to-end tests.

use crate::tools::{gzip_len, run, sha256_hex, Tools};
use crate::wrangler::free_port;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// The example in the repo.
const SOURCE: &str = "examples/vite-react";

/// What the example's files name the tarball by, relative to the example folder.
fn tarball_spec(version: &str) -> String {
    format!("file:../../sdk/pkg/onceclick-{version}.tgz")
}

/// Copies the example to `target/xtask/vite-react` (leaving out what its own
/// `.gitignore` leaves out), points its `onceclick` dependency at the tarball just
/// packed, with that tarball's integrity in the lock, and installs it with `npm ci`.
/// Then `tsc --noEmit` (strict, from its tsconfig), `vite build`, the size report, and
/// `vite build --ssr`. Returns the folder.
pub(crate) fn build(tools: &Tools) -> Result<PathBuf> {
    let root = &tools.root;
    let tarball = crate::sdk::tarball(root)?;
    let dir = root.join("target/xtask/vite-react");
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    copy_sources(&root.join(SOURCE), &dir)?;
    point_at(&dir, &tarball)?;
    eprintln!(
        "xtask: {SOURCE}: npm ci (installs {} from its lock)",
        tarball.display()
    );
    run(tools
        .command("npm")
        .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(&dir)
        .env_remove("NODE_PATH"))?;
    kinds_current(tools, &dir)?;
    eprintln!("xtask: {SOURCE}: tsc --noEmit (strict)");
    run(node(tools, &dir)
        .arg(dir.join("node_modules/typescript/bin/tsc"))
        .arg("--noEmit"))?;
    for project in TYPE_TESTS {
        eprintln!("xtask: {SOURCE}: tsc -p typecheck/{project} (each marked line fails as marked)");
        type_test(tools, &dir, project)?;
    }
    eprintln!("xtask: {SOURCE}: vite build");
    vite(tools, &dir, &["build", "--logLevel", "warn"])?;
    report_sizes(root, &dir)?;
    eprintln!("xtask: {SOURCE}: vite build --ssr");
    vite(
        tools,
        &dir,
        &[
            "build",
            "--ssr",
            "src/entry-server.tsx",
            "--outDir",
            "dist-ssr",
            "--logLevel",
            "warn",
        ],
    )?;
    Ok(dir)
}

/// The example's generated kinds (`src/onceclick-kinds.ts`) are those of `edge/kinds`:
/// written again into the copy by `cargo xtask kinds --types`, they must be the file
/// committed.
fn kinds_current(tools: &Tools, dir: &Path) -> Result<()> {
    let file = dir.join(KINDS_FILE);
    let committed = std::fs::read_to_string(&file).unwrap_or_default();
    crate::kinds::write_types(tools, &tools.root.join("edge/kinds"), &file)?;
    if std::fs::read_to_string(&file)? != committed {
        bail!("{SOURCE}/{KINDS_FILE} is not what the kind files give: run `cargo xtask kinds --types {SOURCE}/{KINDS_FILE}`");
    }
    Ok(())
}

/// The generated kinds, in the example.
const KINDS_FILE: &str = "src/onceclick-kinds.ts";

/// The type tests, each a tsc project in `typecheck/`: `typed` (with the generated
/// kinds: correct code compiles with no cast, and each misuse is an error) and `untyped`
/// (without them: everything compiles, with `unknown` results).
const TYPE_TESTS: [&str; 2] = ["typed", "untyped"];

/// Runs tsc on `typecheck/{project}` and compares its errors with the lines its files
/// mark `// error TSnnnn`: each marked line fails with that code, and nothing else fails.
fn type_test(tools: &Tools, dir: &Path, project: &str) -> Result<()> {
    let folder = dir.join("typecheck").join(project);
    let out = node(tools, dir)
        .arg(dir.join("node_modules/typescript/bin/tsc"))
        .args(["--noEmit", "--pretty", "false", "-p"])
        .arg(folder.join("tsconfig.json"))
        .output()?;
    let printed = String::from_utf8_lossy(&out.stdout);
    let got = tsc_errors(&printed);
    let errors = printed.lines().filter(|l| l.contains("error TS")).count();
    if errors != got.len() {
        bail!("typecheck/{project}: tsc printed errors with no place in a file (a broken project?):\n{printed}");
    }
    let mut want = Vec::new();
    for entry in std::fs::read_dir(&folder)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "ts") {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            want.extend(marked_errors(&name, &std::fs::read_to_string(&path)?));
        }
    }
    want.sort();
    if got != want {
        bail!("typecheck/{project}: tsc's errors are not the marked ones.\nmarked: {want:?}\ntsc: {got:?}\n{printed}");
    }
    if want.is_empty() == out.status.success() {
        Ok(())
    } else {
        bail!(
            "typecheck/{project}: tsc exited {} with {} marked errors\n{printed}",
            out.status,
            want.len()
        )
    }
}

/// `(file name, line, code)` of each error tsc printed (`--pretty false`).
fn tsc_errors(printed: &str) -> Vec<(String, usize, String)> {
    let mut errors: Vec<_> = printed
        .lines()
        .filter_map(|line| {
            let (place, rest) = line.split_once("): error ")?;
            let (file, at) = place.rsplit_once('(')?;
            let line_no = at.split(',').next()?.parse().ok()?;
            let code = rest.split(':').next()?.to_owned();
            let name = Path::new(file).file_name()?.to_string_lossy().into_owned();
            Some((name, line_no, code))
        })
        .collect();
    errors.sort();
    errors
}

/// `(file name, line, code)` of each line of `text` marked `// error TSnnnn`.
fn marked_errors(name: &str, text: &str) -> Vec<(String, usize, String)> {
    text.lines()
        .enumerate()
        .filter_map(|(i, line)| {
            let code = line.rsplit_once("// error ")?.1.trim();
            let digits = code.strip_prefix("TS")?;
            (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
                .then(|| (name.to_owned(), i + 1, code.to_owned()))
        })
        .collect()
}

/// The example's own tests (`npm test`: Vitest and happy-dom, `test/`), against the
/// Worker at `worker_url` as the owner `token` names, which no other suite uses; the
/// hook's tests also certify the fallback (`admin`) and script the mock provider.
pub(crate) fn app_tests(
    tools: &Tools,
    dir: &Path,
    worker_url: &str,
    token: &str,
    admin: &str,
    mock_url: &str,
) -> Result<()> {
    eprintln!("xtask: {SOURCE}: vitest run (its app tests, against {worker_url})");
    run(node(tools, dir)
        .arg(dir.join("node_modules/vitest/vitest.mjs"))
        .args(["run", "--reporter=verbose"])
        .env("VITE_ONCECLICK_URL", worker_url)
        .env("VITE_ONCECLICK_TOKEN", token)
        .env("ONCECLICK_ADMIN_TOKEN", admin)
        .env("ONCECLICK_MOCK_URL", mock_url))
}

fn vite(tools: &Tools, dir: &Path, args: &[&str]) -> Result<()> {
    run(node(tools, dir)
        .arg(dir.join("node_modules/vite/bin/vite.js"))
        .args(args))
}

/// The pinned Node in `dir`, resolving packages from the example's own `node_modules`
/// only: without the `NODE_PATH` that points xtask's other commands at the pinned tools,
/// a package the example forgot to declare fails here as it would for its users.
fn node(tools: &Tools, dir: &Path) -> std::process::Command {
    let mut cmd = tools.command("node");
    cmd.current_dir(dir).env_remove("NODE_PATH");
    cmd
}

/// The example's own files: what `git ls-files` would list, without its build output.
fn copy_sources(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        let name = entry.file_name();
        if ["node_modules", "dist", "dist-ssr"].contains(&name.to_string_lossy().as_ref()) {
            continue;
        }
        let path = entry.path();
        if path.is_dir() {
            crate::tools::copy_dir(&path, &to.join(&name))?;
        } else {
            std::fs::copy(&path, to.join(&name))?;
        }
    }
    Ok(())
}

/// Rewrites the copy's `package.json` and `package-lock.json` so that `onceclick` comes
/// from `tarball` by its absolute path, as a developer who copies the example does (its
/// README says how). The committed lock records no integrity for that one package, so
/// `npm ci` takes the tarball at hand, which every change to the SDK changes; every
/// package from the registry stays pinned by its integrity.
fn point_at(dir: &Path, tarball: &Path) -> Result<()> {
    let name = tarball
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let version = name
        .strip_prefix("onceclick-")
        .and_then(|v| v.strip_suffix(".tgz"))
        .unwrap_or_default();
    let spec = tarball_spec(version);
    let manifest_path = dir.join("package.json");
    let lock_path = dir.join("package-lock.json");
    let manifest = std::fs::read_to_string(&manifest_path)?;
    let lock = std::fs::read_to_string(&lock_path)?;
    if !manifest.contains(&format!("\"{spec}\"")) {
        bail!("{SOURCE}/package.json does not depend on \"onceclick\": \"{spec}\", the tarball `cargo xtask sdk` packs: update it, and its lock with npm install");
    }
    lock_names_tarball_without_integrity(&lock, &spec)?;
    // Quoted as JSON strings, so that any path stays one JSON string.
    let quoted = |s: &str| serde_json::to_string(s);
    let (from, to) = (
        quoted(&spec)?,
        quoted(&format!("file:{}", tarball.display()))?,
    );
    std::fs::write(&manifest_path, manifest.replace(&from, &to))?;
    std::fs::write(&lock_path, lock.replace(&from, &to))?;
    Ok(())
}

/// The example's lock resolves `onceclick` to `spec` and records no integrity for it.
fn lock_names_tarball_without_integrity(lock: &str, spec: &str) -> Result<()> {
    let lock: serde_json::Value = serde_json::from_str(lock)?;
    let entry = &lock["packages"]["node_modules/onceclick"];
    if entry["resolved"].as_str() != Some(spec) {
        bail!("{SOURCE}/package-lock.json does not resolve onceclick to {spec}: run npm install there");
    }
    if !entry["integrity"].is_null() {
        bail!("{SOURCE}/package-lock.json records an integrity for the onceclick tarball, which the next `cargo xtask sdk` changes: delete that one line");
    }
    Ok(())
}

/// Prints what the SDK adds to the app's build, and fails if the build holds the wasm
/// anywhere but in one file that is byte-for-byte the package's: no copy inlined into
/// the JS (as base64), no second copy.
fn report_sizes(root: &Path, dir: &Path) -> Result<()> {
    let assets = dir.join("dist/assets");
    let package_wasm = std::fs::read(crate::sdk::package_dir(root).join("onceclick_bg.wasm"))?;
    let (mut wasm_files, mut sdk_js, mut app_js) = (Vec::new(), 0, 0);
    for entry in std::fs::read_dir(&assets)? {
        let path = entry?.path();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name.ends_with(".wasm") {
            wasm_files.push(path);
        } else if name.ends_with(".js") {
            let text = std::fs::read_to_string(&path)?;
            // "\0asm", the start of every wasm module, in base64.
            if text.contains("AGFzbQ") {
                bail!("{name} holds a wasm module inlined as base64: the bundler copied the SDK's wasm into the JS");
            }
            if name.starts_with("onceclick-") {
                sdk_js += gzip_len(&path)?;
            } else {
                app_js += gzip_len(&path)?;
            }
        }
    }
    let [wasm] = wasm_files.as_slice() else {
        bail!(
            "the example's build holds {} wasm files, not the package's one: {wasm_files:?}",
            wasm_files.len()
        );
    };
    if sha256_hex(&std::fs::read(wasm)?) != sha256_hex(&package_wasm) {
        bail!("{} is not the package's onceclick_bg.wasm", wasm.display());
    }
    if sdk_js == 0 {
        bail!(
            "the example's build has no onceclick-*.js chunk (vite.config.ts puts the SDK in one)"
        );
    }
    println!(
        "example app (gzip): the SDK adds {sdk_js} B of JS (its own chunk) and its wasm, {} B, as one file byte-for-byte the package's; the rest of the app (React and the page) is {app_js} B",
        gzip_len(wasm)?
    );
    Ok(())
}

/// `vite preview` of the built example, forwarding /v1 to `api`; stopped when dropped.
pub(crate) struct Preview {
    child: Child,
    pub(crate) url: String,
}

impl Preview {
    pub(crate) fn start(tools: &Tools, dir: &Path, api: &str) -> Result<Self> {
        let port = free_port()?;
        let log = dir.join("preview.log");
        let file = std::fs::File::create(&log)?;
        let child = node(tools, dir)
            .arg(dir.join("node_modules/vite/bin/vite.js"))
            .args(["preview", "--host", "127.0.0.1", "--strictPort", "--port"])
            .arg(port.to_string())
            .env("ONCECLICK_URL", api)
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .context("starting vite preview")?;
        let mut preview = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = preview.child.try_wait()? {
                bail!(
                    "vite preview exited with {status}: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(preview);
            }
            if Instant::now() > deadline {
                bail!("vite preview did not listen on {port} within 60 s");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Preview {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::{marked_errors, tsc_errors};

    #[test]
    fn tsc_errors_are_compared_with_the_marked_lines() {
        let printed = "typecheck/typed/fails.ts(7,23): error TS2345: Argument of type '\"x\"' is not assignable.\n  Type 'x' …\ntypecheck/typed/uses.ts(3,1): error TS2339: Property 'a' does not exist.\n";
        assert_eq!(
            tsc_errors(printed),
            vec![
                ("fails.ts".to_owned(), 7, "TS2345".to_owned()),
                ("uses.ts".to_owned(), 3, "TS2339".to_owned()),
            ]
        );
        let text =
            "ok();\nclient.submit(\"x\"); // error TS2345\n// an error TS in prose is no mark\n// marked `// error TSnnnn` in prose neither\n";
        assert_eq!(
            marked_errors("fails.ts", text),
            vec![("fails.ts".to_owned(), 2, "TS2345".to_owned())]
        );
    }

    #[test]
    fn the_example_names_the_tarball_cargo_xtask_sdk_packs() {
        let root = crate::tools::project_root();
        let cargo = std::fs::read_to_string(root.join("Cargo.toml")).unwrap_or_default();
        let version = cargo
            .lines()
            .skip_while(|l| l.trim() != "[workspace.package]")
            .find_map(|l| l.trim().strip_prefix("version = "))
            .map(|v| v.trim_matches('"').to_owned())
            .unwrap_or_default();
        assert!(!version.is_empty(), "the workspace has a version");
        let manifest = std::fs::read_to_string(root.join(super::SOURCE).join("package.json"))
            .unwrap_or_default();
        let spec = super::tarball_spec(&version);
        assert!(
            manifest.contains(&spec),
            "examples/vite-react/package.json must depend on {spec}"
        );
        let lock = std::fs::read_to_string(root.join(super::SOURCE).join("package-lock.json"))
            .unwrap_or_default();
        if let Err(e) = super::lock_names_tarball_without_integrity(&lock, &spec) {
            panic!("{e:#}");
        }
    }
}
