//! Building the Worker and running it under `wrangler dev` (workerd, local D1).

use crate::tools::{run, Tools};
use anyhow::{bail, Context, Result};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// The newest modification time under `path` (a file or a folder).
fn newest(path: &Path) -> SystemTime {
    let own = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let children = std::fs::read_dir(path)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| newest(&e.path()));
    children.fold(own, SystemTime::max)
}

/// A Worker crate that xtask builds with worker-build: its folder, and what its output
/// depends on (relative to the project root).
pub(crate) struct WorkerCrate {
    pub(crate) dir: &'static str,
    inputs: &'static [&'static str],
}

/// onceclick's Worker.
pub(crate) const EDGE: WorkerCrate = WorkerCrate {
    dir: "edge",
    inputs: &[
        "edge/src",
        "edge/kinds",
        "core/src",
        "core/Cargo.toml",
        "edge/Cargo.toml",
        "protocol/src",
        "protocol/Cargo.toml",
        "protocol/js",
        "Cargo.toml",
        "package-lock.json",
        "Cargo.lock",
        ".cargo/config.toml",
    ],
};

/// The bench's baseline Worker (`bench/baseline`): same pins, profile and build.
pub(crate) const BASELINE: WorkerCrate = WorkerCrate {
    dir: "bench/baseline",
    inputs: &[
        "bench/baseline/src",
        "bench/baseline/Cargo.toml",
        "Cargo.toml",
        "Cargo.lock",
        ".cargo/config.toml",
    ],
};

/// Builds `edge/` (see [`build`]).
pub(crate) fn build_edge(tools: &Tools) -> Result<()> {
    build(tools, &EDGE)
}

/// Builds a Worker crate with `worker-build --release`, then `wasm-opt` ([`WASM_OPT`]),
/// unless the last build that got through both is newer than every input. The mark of
/// such a build, `build/.optimized`, is removed first and written last, so a build that
/// fails or is stopped half-way is never taken for a finished one.
pub(crate) fn build(tools: &Tools, krate: &WorkerCrate) -> Result<()> {
    let root = &tools.root;
    let mark = root.join(krate.dir).join("build/.optimized");
    let built = std::fs::metadata(&mark).and_then(|m| m.modified()).ok();
    let newest_input = krate
        .inputs
        .iter()
        .map(|p| newest(&root.join(p)))
        .fold(SystemTime::UNIX_EPOCH, SystemTime::max);
    if built.is_some_and(|b| b >= newest_input) {
        return Ok(());
    }
    eprintln!(
        "xtask: building the Worker in {}/ (worker-build --release, then wasm-opt)",
        krate.dir
    );
    let _ = std::fs::remove_file(&mark);
    run(tools
        .command("worker-build")
        .arg("--release")
        .current_dir(root.join(krate.dir)))?;
    let wasm = root.join(krate.dir).join("build/index_bg.wasm");
    let optimized = wasm.with_extension("opt.wasm");
    run(tools
        .command("wasm-opt")
        .arg(&wasm)
        .arg("-o")
        .arg(&optimized)
        .args(WASM_OPT))?;
    std::fs::rename(&optimized, &wasm)?;
    std::fs::write(&mark, "")?;
    Ok(())
}

/// How xtask runs wasm-opt on a Worker (worker-build's own run is off: it always adds
/// `--debuginfo`, which keeps the name section). `-Oz` for size; `--strip-debug` drops
/// the name section, `--strip-producers` the toolchain's note. The features are
/// worker-build's explicit list (what rustc's wasm32 target emits, plus the exception
/// handling of wasm-bindgen's catch wrappers), so that wasm-opt emits nothing workerd
/// might not take.
const WASM_OPT: &[&str] = &[
    "-Oz",
    "--strip-debug",
    "--strip-producers",
    "--enable-mutable-globals",
    "--enable-sign-ext",
    "--enable-nontrapping-float-to-int",
    "--enable-bulk-memory",
    "--enable-multivalue",
    "--enable-reference-types",
    "--enable-exception-handling",
];

/// A port the OS says is free right now.
pub(crate) fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Applies `edge/migrations` to the local D1 kept in `persist`.
pub(crate) fn migrate(tools: &Tools, persist: &Path, quiet: bool) -> Result<()> {
    migrate_with(tools, None, persist, quiet)
}

/// Applies the migrations of the Worker that `config` (a wrangler.toml; the root one
/// when `None`) describes to the local D1 kept in `persist`.
pub(crate) fn migrate_with(
    tools: &Tools,
    config: Option<&Path>,
    persist: &Path,
    quiet: bool,
) -> Result<()> {
    let mut cmd = tools.command("wrangler");
    cmd.args(["d1", "migrations", "apply", "DB", "--local", "--persist-to"])
        .arg(persist);
    if let Some(config) = config {
        cmd.arg("--config").arg(config);
    }
    if quiet {
        let out = cmd
            .output()
            .context("running wrangler d1 migrations apply")?;
        if !out.status.success() {
            bail!(
                "wrangler d1 migrations apply failed:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    } else {
        run(&mut cmd)
    }
}

/// What to start `wrangler dev` with.
pub(crate) struct DevOptions {
    pub(crate) port: u16,
    pub(crate) persist: PathBuf,
    /// `--var NAME:VALUE` overrides of wrangler.toml and .dev.vars.
    pub(crate) vars: Vec<(String, String)>,
    /// Where its output goes; `None` inherits the terminal.
    pub(crate) log: Option<PathBuf>,
    /// Another wrangler.toml than the root one (the bench's baseline).
    pub(crate) config: Option<PathBuf>,
    /// `--log-level`; `None` keeps wrangler's default, which prints the Worker's
    /// `console.log` lines (tests read them). The bench runs every server at `error`.
    pub(crate) log_level: Option<&'static str>,
}

/// A running `wrangler dev`, stopped (with workerd) when dropped.
pub(crate) struct Wrangler {
    child: Child,
    pub(crate) url: String,
    log: Option<PathBuf>,
}

impl Wrangler {
    pub(crate) fn start(tools: &Tools, opts: DevOptions) -> Result<Self> {
        Self::start_answering(tools, opts, b"HTTP/1.1 200")
    }

    /// Starts a Worker whose configuration it refuses: ready once `GET /v1/health`
    /// answers `500` (every request does, saying why).
    pub(crate) fn start_refused(tools: &Tools, opts: DevOptions) -> Result<Self> {
        Self::start_answering(tools, opts, b"HTTP/1.1 500")
    }

    /// Starts `wrangler dev`; ready once `GET /v1/health`'s status line starts with
    /// `ready`.
    fn start_answering(tools: &Tools, opts: DevOptions, ready: &'static [u8]) -> Result<Self> {
        let mut cmd = tools.command("wrangler");
        cmd.args(["dev", "--ip", "127.0.0.1", "--port"])
            .arg(opts.port.to_string())
            .arg("--inspector-port")
            .arg(free_port()?.to_string())
            .arg("--persist-to")
            .arg(&opts.persist)
            .args(["--test-scheduled", "--show-interactive-dev-session=false"]);
        if let Some(config) = &opts.config {
            cmd.arg("--config").arg(config);
        }
        if let Some(level) = opts.log_level {
            cmd.arg("--log-level").arg(level);
        }
        for (name, value) in &opts.vars {
            cmd.arg("--var").arg(format!("{name}:{value}"));
        }
        if let Some(log) = &opts.log {
            let file = std::fs::File::create(log)?;
            cmd.stdout(file.try_clone()?)
                .stderr(file)
                .stdin(Stdio::null());
            // Its own process group, so that stopping it stops workerd too.
            std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        }
        let child = cmd.spawn().context("starting wrangler dev")?;
        let mut wrangler = Self {
            child,
            url: format!("http://127.0.0.1:{}", opts.port),
            log: opts.log,
        };
        wrangler.wait_ready(opts.port, ready)?;
        Ok(wrangler)
    }

    /// Waits until `GET /v1/health` answers 200, or wrangler exits, or 5 minutes pass
    /// (a first build on a cold machine takes a few).
    fn wait_ready(&mut self, port: u16, ready: &[u8]) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "wrangler dev exited with {status} before it was ready{}",
                    self.log_tail()
                );
            }
            if health(port, ready) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "wrangler dev was not ready within 5 minutes{}",
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn log_tail(&self) -> String {
        let Some(log) = &self.log else {
            return String::new();
        };
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        format!(
            "; the end of {}:\n{}",
            log.display(),
            lines[lines.len().saturating_sub(40)..].join("\n")
        )
    }

    /// CPU time (user + system) used so far by wrangler and workerd, its process group
    /// (only for a `wrangler dev` started with a log, which gets its own group).
    pub(crate) fn cpu_time(&self) -> Duration {
        let group = self.child.id().to_string();
        let ticks: u64 = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
            .filter_map(|stat| {
                // After the command's closing parenthesis: state, ppid, pgrp, … ; utime
                // and stime are fields 14 and 15 of the whole line.
                let rest = stat.rsplit_once(')')?.1;
                let fields: Vec<&str> = rest.split_whitespace().collect();
                (fields.get(2) == Some(&group.as_str())).then(|| {
                    let at = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
                    at(11).unwrap_or(0) + at(12).unwrap_or(0)
                })
            })
            .sum();
        Duration::from_secs_f64(ticks as f64 / clock_ticks())
    }

    /// `kill -9` of wrangler and workerd, mid-whatever-they-were-doing: a crash.
    pub(crate) fn crash(mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.child.wait();
    }

    /// Blocks until wrangler exits (for `cargo xtask dev`).
    pub(crate) fn wait(mut self) -> Result<()> {
        self.child.wait()?;
        Ok(())
    }
}

impl Drop for Wrangler {
    fn drop(&mut self) {
        if self.log.is_some() {
            let group = format!("-{}", self.child.id());
            let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
        } else {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// One plain HTTP/1.1 GET of /v1/health on loopback; true on a 200.
fn health(port: u16, ready: &[u8]) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let request = "GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.starts_with(ready)
}

/// Clock ticks per second of `/proc/*/stat` times (`getconf CLK_TCK`; 100 on Linux).
fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// The root wrangler.toml as `edit` changes it, without `[build]` (xtask has built the
/// Worker) and with its paths made absolute, in `target/xtask/<name>`.
pub(crate) fn derived_config(
    root: &Path,
    name: &str,
    edit: impl FnOnce(&mut toml::Table),
) -> Result<PathBuf> {
    let text = std::fs::read_to_string(root.join("wrangler.toml"))?;
    let mut config: toml::Table = text.parse().context("wrangler.toml does not parse")?;
    config.remove("build");
    let absolute = |v: &mut toml::Value| {
        if let Some(path) = v.as_str() {
            *v = toml::Value::String(root.join(path).to_string_lossy().into_owned());
        }
    };
    if let Some(main) = config.get_mut("main") {
        absolute(main);
    }
    if let Some(toml::Value::Table(assets)) = config.get_mut("assets") {
        if let Some(dir) = assets.get_mut("directory") {
            absolute(dir);
        }
    }
    if let Some(toml::Value::Array(dbs)) = config.get_mut("d1_databases") {
        for db in dbs {
            if let Some(dir) = db.get_mut("migrations_dir") {
                absolute(dir);
            }
        }
    }
    edit(&mut config);
    std::fs::create_dir_all(root.join("target/xtask"))?;
    let path = root.join("target/xtask").join(name);
    std::fs::write(&path, toml::to_string(&config)?)?;
    Ok(path)
}

/// The root wrangler.toml with no rate limit that one owner's load would reach, in
/// `target/xtask/wrangler-unlimited.toml`: what the integration suite (whose storms send
/// one owner's creates by the thousand) and the bench run. The limiter is still asked on
/// every create, as in production; the demo page's end-to-end tests run the committed
/// limit and check it.
pub(crate) fn unlimited_config(root: &Path) -> Result<PathBuf> {
    derived_config(root, "wrangler-unlimited.toml", raise_rate_limit)
}

/// Raises every `[[ratelimits]]` limit out of reach: for runs that send one owner's
/// traffic by the thousand (the storms, the bench). The limiter is still asked.
pub(crate) fn raise_rate_limit(config: &mut toml::Table) {
    if let Some(toml::Value::Array(limits)) = config.get_mut("ratelimits") {
        for limit in limits {
            if let Some(toml::Value::Table(simple)) = limit.get_mut("simple") {
                simple.insert("limit".into(), toml::Value::Integer(1_000_000_000));
            }
        }
    }
}
