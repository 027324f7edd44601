//! What ships, weighed: both Workers as `wrangler deploy --dry-run` bundles them and
//! the SDK as `cargo xtask sdk` builds it (gzip bytes), and the time Node's V8 takes to
//! compile and instantiate each Worker's wasm. `cargo xtask test` holds the Worker to its
//! budget with [`bundle`].

use crate::load;
use crate::tools::{self, Tools};
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// gzip bytes of what ships: both Workers as `wrangler deploy --dry-run` bundles them,
/// the SDK as `cargo xtask sdk` builds it; and the time to compile and instantiate each
/// Worker's wasm.
pub(crate) fn sizes(tools: &Tools) -> Result<Value> {
    let root = &tools.root;
    let mut out = serde_json::Map::new();
    for (name, config) in [
        ("worker", None),
        ("baseline", Some(root.join("bench/baseline/wrangler.toml"))),
    ] {
        let bundle = bundle(tools, name, config.as_deref())?;
        let start = wasm_start(tools, &bundle.wasm)?;
        out.insert(
            name.into(),
            json!({"wasm_gzip": bundle.wasm_gzip, "js_gzip": bundle.js_gzip,
                   "gzip": bundle.wasm_gzip + bundle.js_gzip, "wasm_raw": bundle.wasm_raw,
                   "start": start}),
        );
    }
    crate::sdk::build(tools)?;
    let (wasm, js) = crate::sdk::sizes(root)?;
    out.insert(
        "sdk".into(),
        json!({"wasm_gzip": wasm, "js_gzip": js, "gzip": wasm + js}),
    );
    Ok(Value::Object(out))
}

/// What `wrangler deploy --dry-run` wrote for one Worker.
pub(crate) struct Bundle {
    pub(crate) wasm: PathBuf,
    pub(crate) wasm_raw: usize,
    pub(crate) wasm_gzip: usize,
    pub(crate) js_gzip: usize,
}

/// Bundles a Worker with `wrangler deploy --dry-run --outdir` (offline) and weighs it.
pub(crate) fn bundle(tools: &Tools, name: &str, config: Option<&Path>) -> Result<Bundle> {
    let outdir = tools.root.join(format!("target/xtask/bundle-{name}"));
    let _ = std::fs::remove_dir_all(&outdir);
    let mut cmd = tools.command("wrangler");
    cmd.args(["deploy", "--dry-run", "--outdir"]).arg(&outdir);
    if let Some(config) = config {
        cmd.arg("--config").arg(config);
    }
    let out = cmd.output().context("wrangler deploy --dry-run")?;
    if !out.status.success() {
        bail!(
            "wrangler deploy --dry-run failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mut wasm = None;
    let mut js_gzip = 0;
    for entry in std::fs::read_dir(&outdir)?.flatten() {
        let path = entry.path();
        match path.extension().and_then(|e| e.to_str()) {
            Some("wasm") => wasm = Some(path),
            Some("js" | "mjs") => js_gzip += tools::gzip_len(&path)?,
            _ => {}
        }
    }
    let wasm = wasm.with_context(|| format!("no .wasm in {}", outdir.display()))?;
    Ok(Bundle {
        wasm_raw: std::fs::metadata(&wasm)?.len() as usize,
        wasm_gzip: tools::gzip_len(&wasm)?,
        js_gzip,
        wasm,
    })
}

/// Compiling and instantiating a Worker's wasm in Node's V8 (the engine workerd embeds),
/// imports stubbed: the part of a cold start that the bundle decides. Median of 5 fresh
/// processes, with V8's defaults (lazy, Liftoff first) and with every function compiled
/// by TurboFan up front.
fn wasm_start(tools: &Tools, wasm: &Path) -> Result<Value> {
    const SCRIPT: &str = r#"
const bytes = require('fs').readFileSync(process.argv[1]);
const t0 = performance.now();
const mod = new WebAssembly.Module(bytes);
const t1 = performance.now();
const imports = {};
for (const i of WebAssembly.Module.imports(mod)) {
  const stub = i.kind === 'function' ? () => { throw new Error('stub'); }
    : i.kind === 'memory' ? new WebAssembly.Memory({ initial: 17 })
    : i.kind === 'table' ? new WebAssembly.Table({ initial: 1, element: 'anyfunc' })
    : i.kind === 'tag' ? (WebAssembly.JSTag ?? new WebAssembly.Tag({ parameters: ['externref'] }))
    : new WebAssembly.Global({ value: 'i32', mutable: true }, 0);
  (imports[i.module] ??= {})[i.name] = stub;
}
new WebAssembly.Instance(mod, imports);
const t2 = performance.now();
console.log(JSON.stringify({ compile_ms: t1 - t0, instantiate_ms: t2 - t1 }));
"#;
    let mut out = serde_json::Map::new();
    for (mode, flags) in [
        ("default", &[][..]),
        (
            "eager_turbofan",
            &["--no-wasm-lazy-compilation", "--no-liftoff"][..],
        ),
    ] {
        let mut totals = Vec::new();
        for _ in 0..5 {
            let run = tools
                .command("node")
                .args(flags)
                .args(["-e", SCRIPT])
                .arg(wasm)
                .output()?;
            let figures: Value = serde_json::from_slice(&run.stdout).with_context(|| {
                format!(
                    "timing the wasm start: {}",
                    String::from_utf8_lossy(&run.stderr)
                )
            })?;
            let total = figures["compile_ms"].as_f64().unwrap_or(0.0)
                + figures["instantiate_ms"].as_f64().unwrap_or(0.0);
            totals.push(Duration::from_secs_f64(total / 1e3));
        }
        totals.sort();
        out.insert(mode.into(), json!(load::percentile(&totals, 0.5)));
    }
    Ok(Value::Object(out))
}
