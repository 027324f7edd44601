//! The end-to-end tests of the demo page and of the example app: `tests/e2e/*.test.js`
//! under Node's own test runner (the pinned Node 22), driving Debian's Chromium through
//! the pinned `playwright-core` against the Worker under test, its mock provider and a
//! fault proxy in front of it, and the example app under `vite preview`.

use crate::test_worker::TestWorker;
use crate::tools::{run, Tools};
use crate::wrangler::free_port;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// Debian's Chromium; Playwright never downloads a browser here.
const CHROMIUM: &str = "/usr/bin/chromium";

/// Where the tests write their screenshots (ignored by git, under `target/`).
pub(crate) fn out_dir(root: &Path) -> PathBuf {
    root.join("target/e2e")
}

/// The test files, in name order.
fn test_files(root: &Path) -> Result<Vec<PathBuf>> {
    let dir = root.join("tests/e2e");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".test.js"))
        .collect();
    files.sort();
    if files.is_empty() {
        bail!("no *.test.js in {}", dir.display());
    }
    Ok(files)
}

/// Runs the end-to-end tests against `worker`: the demo page, which must already be in
/// `www/` with the SDK in `www/pkg` ([`crate::sdk::copy_for_demo`]) when the Worker
/// started, and the example app built in `example` ([`crate::example::build`]) and
/// served at `example_url`.
pub(crate) fn run_tests(
    tools: &Tools,
    worker: &TestWorker,
    example: &Path,
    example_url: &str,
) -> Result<()> {
    if !Path::new(CHROMIUM).exists() {
        bail!("the demo page's end-to-end tests need Debian's chromium: apt-get install chromium (.ci/run does)");
    }
    let root = &tools.root;
    let proxy_port = free_port()?;
    onceclick_tests::proxy::spawn(proxy_port, worker.server.url.clone())?;
    let token = onceclick_tests::auth::mint(&worker.secret, "e2e", false, 3600)?;
    let admin = onceclick_tests::auth::mint(&worker.secret, "e2e-admin", true, 3600)?;
    // An owner of its own for the rate limit's test, which spends that owner's budget.
    let limited = onceclick_tests::auth::mint(&worker.secret, "e2e-limited", false, 3600)?;
    // And one for the test that both budgets are apart, which needs them untouched.
    let streams = onceclick_tests::auth::mint(&worker.secret, "e2e-streams", false, 3600)?;
    let out = out_dir(root);
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out)?;
    eprintln!(
        "xtask: the end-to-end tests of the demo page and the example app (playwright-core, {CHROMIUM}); screenshots in {}",
        out.display()
    );
    let started = std::time::Instant::now();
    let result = run(tools
        .command("node")
        .args([
            // node:sqlite (counting rows in the D1 file) is still marked experimental.
            "--disable-warning=ExperimentalWarning",
            "--test",
            "--test-concurrency=1",
            "--test-reporter=spec",
        ])
        .args(test_files(root)?)
        .env("ONCECLICK_URL", &worker.server.url)
        .env(
            "ONCECLICK_MOCK_URL",
            format!("http://127.0.0.1:{}", worker.mock_port),
        )
        .env(
            "ONCECLICK_PROXY_URL",
            format!("http://127.0.0.1:{proxy_port}"),
        )
        .env("ONCECLICK_E2E_TOKEN", token)
        .env("ONCECLICK_E2E_ADMIN", admin)
        .env("ONCECLICK_E2E_LIMITED_TOKEN", limited)
        .env("ONCECLICK_E2E_STREAMS_TOKEN", streams)
        .env("ONCECLICK_D1_DIR", &worker.persist)
        .env("ONCECLICK_E2E_OUT", &out)
        .env("ONCECLICK_CHROMIUM", CHROMIUM)
        .env("ONCECLICK_EXAMPLE_DIR", example)
        .env("ONCECLICK_EXAMPLE_URL", example_url));
    eprintln!(
        "xtask: the end-to-end tests took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    result
}
