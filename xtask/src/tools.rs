//! The pinned toolchain, installed into a cache shared by every clone on the machine.
//!
//! Nothing here downloads from outside the package registries: worker-build and wrangler
//! are pointed at local binaries, and their telemetry and `Request.cf` fetches are off.

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// (crate, version, binary, install with --locked). wasm-bindgen-cli must equal the
/// `wasm-bindgen` pinned in Cargo.toml; its own lockfile names a crate version the
/// registry lacks, so it is installed without `--locked`.
const CARGO_TOOLS: &[(&str, &str, &str, bool)] = &[
    ("worker-build", "0.8.7", "worker-build", true),
    ("wasm-bindgen-cli", "0.2.130", "wasm-bindgen", false),
    ("wasm-pack", "0.15.1", "wasm-pack", true),
];

/// Where the installed tools live, and how to run them.
#[derive(Debug, Clone)]
pub(crate) struct Tools {
    pub(crate) root: PathBuf,
    cargo_bin: PathBuf,
    node_bin: PathBuf,
    /// The pinned packages of package-lock.json: the tools, and the JSON Schema validator
    /// that worker-build bundles into the Worker (found through `NODE_PATH`).
    pub(crate) node_modules: PathBuf,
    /// The project's own folder for wrangler's config and state.
    wrangler_home: PathBuf,
}

pub(crate) fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

fn cache_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("ONCECLICK_CACHE") {
        return Ok(PathBuf::from(dir));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .context("neither ONCECLICK_CACHE, XDG_CACHE_HOME nor HOME is set")?;
    Ok(base.join("onceclick"))
}

/// Runs `cmd`, failing with its command line if it does not exit 0.
pub(crate) fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("could not start {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed with {status}");
    }
    Ok(())
}

fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

impl Tools {
    /// Installs whatever is missing, at pinned versions. A second run only checks.
    pub(crate) fn bootstrap() -> Result<Self> {
        let root = project_root();
        let cache = cache_dir()?;
        std::fs::create_dir_all(&cache)?;

        let targets = output(Command::new("rustup").args(["target", "list", "--installed"]))
            .unwrap_or_default();
        if !targets
            .lines()
            .any(|t| t.trim() == "wasm32-unknown-unknown")
        {
            eprintln!("xtask: adding the wasm32-unknown-unknown target");
            run(Command::new("rustup").args(["target", "add", "wasm32-unknown-unknown"]))?;
        }

        let node_dir = install_npm_tools(&root, &cache)?;
        let cargo_root = cache.join("cargo");
        for &(krate, version, bin, locked) in CARGO_TOOLS {
            let path = cargo_root.join("bin").join(bin);
            let have = output(Command::new(&path).arg("--version")).unwrap_or_default();
            if have.contains(version) {
                continue;
            }
            eprintln!("xtask: installing {krate} {version} (once per machine; a few minutes)");
            let mut cmd = Command::new("cargo");
            cmd.args(["install", krate, "--version", version, "--root"])
                .arg(&cargo_root);
            if locked {
                cmd.arg("--locked");
            }
            run(&mut cmd)?;
        }

        let wrangler_home = root.join(".wrangler");
        std::fs::create_dir_all(wrangler_home.join("config"))?;
        Ok(Self {
            root,
            cargo_bin: cargo_root.join("bin"),
            node_bin: node_dir.join("node_modules").join(".bin"),
            node_modules: node_dir.join("node_modules"),
            wrangler_home,
        })
    }

    /// A command with the tools on `PATH` and every download and telemetry switched off.
    pub(crate) fn command(&self, program: &str) -> Command {
        let program_path = [&self.node_bin, &self.cargo_bin]
            .iter()
            .map(|dir| dir.join(program))
            .find(|p| p.exists())
            .unwrap_or_else(|| PathBuf::from(program));
        let mut cmd = Command::new(program_path);
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut dirs = vec![self.node_bin.clone(), self.cargo_bin.clone()];
        dirs.extend(std::env::split_paths(&path));
        if let Ok(joined) = std::env::join_paths(dirs) {
            cmd.env("PATH", joined);
        }
        cmd.current_dir(&self.root)
            .env("WASM_BINDGEN_BIN", self.cargo_bin.join("wasm-bindgen"))
            .env("WASM_OPT_BIN", self.node_bin.join("wasm-opt"))
            .env("ESBUILD_BIN", self.node_bin.join("esbuild"))
            // How worker-build's esbuild resolves `@cfworker/json-schema`, which
            // protocol/js/schema.js imports: from the pinned install, not a node_modules
            // in the repo.
            .env("NODE_PATH", &self.node_modules)
            .env("CLOUDFLARE_CF_FETCH_ENABLED", "false")
            .env("WRANGLER_SEND_METRICS", "false")
            .env("XDG_CONFIG_HOME", self.wrangler_home.join("config"));
        cmd
    }
}

/// `npm ci` of the committed package-lock.json into a cache folder named by the lock's
/// hash, so a changed lock installs anew and an unchanged one is reused by every clone.
/// It holds the tools (among them `playwright-core` and `axe-core` for the demo page's
/// end-to-end tests, which drive Debian's Chromium: no browser is downloaded) and the
/// one runtime dependency, `@cfworker/json-schema`.
fn install_npm_tools(root: &Path, cache: &Path) -> Result<PathBuf> {
    let lock =
        std::fs::read(root.join("package-lock.json")).context("reading package-lock.json")?;
    let manifest = std::fs::read(root.join("package.json")).context("reading package.json")?;
    let digest = sha256_hex(&[lock.as_slice(), manifest.as_slice()].concat());
    let dir = cache.join(format!("npm-{}", &digest[..12]));
    let marker = dir.join(".installed");
    if marker.exists() {
        return Ok(dir);
    }
    eprintln!(
        "xtask: installing node 22, wrangler, binaryen, playwright-core, axe-core, json-schema-to-typescript and @cfworker/json-schema from package-lock.json"
    );
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("package.json"), manifest)?;
    std::fs::write(dir.join("package-lock.json"), lock)?;
    run(Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(&dir))?;
    for bin in ["node", "wrangler", "wasm-opt", "esbuild"] {
        if !dir.join("node_modules/.bin").join(bin).exists() {
            bail!("npm ci finished but node_modules/.bin/{bin} is missing");
        }
    }
    for package in [
        "@cfworker/json-schema",
        "playwright-core",
        "axe-core",
        "json-schema-to-typescript",
    ] {
        if !dir
            .join("node_modules")
            .join(package)
            .join("package.json")
            .exists()
        {
            bail!("npm ci finished but node_modules/{package} is missing");
        }
    }
    std::fs::write(&marker, b"ok\n")?;
    Ok(dir)
}

/// schemathesis, from `xtask/schemathesis-requirements.txt` (every dependency pinned),
/// in a venv in the cache named by that file's hash. Returns the `st` binary.
pub(crate) fn schemathesis(root: &Path) -> Result<PathBuf> {
    let requirements = root.join("xtask/schemathesis-requirements.txt");
    let text = std::fs::read(&requirements).context("reading the schemathesis requirements")?;
    let digest = sha256_hex(&text);
    let venv = cache_dir()?.join(format!("schemathesis-{}", &digest[..12]));
    let st = venv.join("bin/st");
    if venv.join(".installed").exists() && st.exists() {
        return Ok(st);
    }
    eprintln!("xtask: installing schemathesis into {}", venv.display());
    let _ = std::fs::remove_dir_all(&venv);
    run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
    run(Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check", "-r"])
        .arg(&requirements))?;
    std::fs::write(venv.join(".installed"), b"ok\n")?;
    Ok(st)
}

/// 32 random bytes as hex: an `AUTH_SECRET`.
pub(crate) fn random_secret() -> Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    Ok(hex::encode(bytes))
}

/// Copies the folder `from` to `to` (`cp -r`, sharing blocks where the file system can).
pub(crate) fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    run(Command::new("cp")
        .args(["-r", "--reflink=auto"])
        .arg(from)
        .arg(to))
}

/// SHA-256 of `bytes`, in hex: names cache folders by what they were built from.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The bytes of `path` after `gzip -9`.
pub(crate) fn gzip_len(path: &Path) -> Result<usize> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(&bytes)?;
    Ok(encoder.finish()?.len())
}
