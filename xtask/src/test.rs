//! `cargo xtask test` (and `lint`, its first stage): unit tests, the deploy dry-run, the
//! SDK's browser tests, the demo page's end-to-end tests, the integration tests against
//! a fresh test Worker, schemathesis and the crash suite, then one line per reliability
//! suite.

use crate::test_worker::{StoreKind, TestWorker};
use crate::tools::{self, project_root, run, Tools};
use crate::{bench, bench_sizes, crashes, e2e, example, sdk, sim, wrangler};
use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::Command;

/// `test --browser` runs only the SDK's browser tests (against a fresh test Worker),
/// `test --e2e` only the demo page's end-to-end tests: no lint, unit tests, dry-run or
/// integration tests; `--only` wins over both.
pub(crate) fn suites(flags: &crate::Test) -> Result<()> {
    let tools = Tools::bootstrap()?;
    let root = project_root();
    let stages = Stages::of(flags);

    if stages.everything() {
        lint(&root)?;
        unit_tests(&root)?;
    }
    wrangler::build_edge(&tools)?;
    if let Some(name @ ("moves" | "crashes" | "schemathesis")) = stages.only.as_deref() {
        return own_workers_suite(&tools, &root, name, flags.store.as_deref());
    }
    if stages.everything() {
        eprintln!("xtask: wrangler deploy --dry-run");
        let bundle = bench_sizes::bundle(&tools, "worker", None)?;
        budget(
            "the Worker",
            bundle.wasm_gzip + bundle.js_gzip,
            WORKER_BUDGET,
        )?;
        // The production configuration deploys too (its own providers, no pages).
        eprintln!("xtask: wrangler deploy --dry-run --config wrangler.production.toml");
        let production = root.join("wrangler.production.toml");
        bench_sizes::bundle(&tools, "worker-production", Some(&production))?;
        // Fails over the SDK's own budget.
        sdk::build(&tools)?;
    }
    if stages.e2e {
        end_to_end(&tools, &root, stages.some_only)?;
    }
    if stages.some_only && !stages.browser {
        return Ok(());
    }

    // `--store`: one store; by default both, D1 first (the browser tests use its Worker).
    let stores = stores_asked(flags.store.as_deref())?;
    let worker = TestWorker::start(&tools, &root, stores[0])?;
    if stages.browser {
        browser_tests(&tools, &worker)?;
    }
    if stages.some_only {
        return Ok(());
    }
    let reports = root.join("target/reliability");
    let _ = std::fs::remove_dir_all(&reports);
    let mut worker = Some(worker);
    for store in &stores {
        let worker = match worker.take() {
            Some(worker) => worker,
            None => TestWorker::start(&tools, &root, *store)?,
        };
        integration(
            &tools,
            &root,
            worker,
            *store,
            &stages.only,
            stages.soak,
            &reports,
        )?;
    }
    // The move from D1 to the shards, as README.md describes it (`moves.rs`).
    if stages.only.is_none() && stores.contains(&StoreKind::Durable) {
        crate::moves::run(&tools, &root)?;
    }
    // About 20 s of load against the baseline: ratios printed, never asserted (timing
    // on a shared machine is noise). The deterministic part, D1 round trips, is
    // asserted by `tests/budgets.rs`; the sizes above.
    match &stages.only {
        Some(_) => Ok(()),
        None => {
            eprintln!("xtask: a short bench (ratios only; `cargo xtask bench` for the report)");
            bench::run(&tools, &bench::SHORT).map(drop)
        }
    }
}

/// Which stages a `cargo xtask test` runs, from its flags.
struct Stages {
    /// `--only NAME`: just the integration test binary `tests/tests/NAME.rs` (`a,b`:
    /// several), or one of the suites that start their own Workers.
    only: Option<String>,
    /// `--browser` and `--e2e` pick browser suites (either or both) and nothing else.
    some_only: bool,
    /// The SDK's browser tests.
    browser: bool,
    /// The demo page's end-to-end tests.
    e2e: bool,
    /// The heavy reliability variants: 50,000 model operations instead of 2,000.
    soak: bool,
}

impl Stages {
    fn of(flags: &crate::Test) -> Self {
        let only = flags.only.clone();
        let some_only = (flags.browser || flags.e2e) && only.is_none();
        Stages {
            browser: only.is_none() && (!some_only || flags.browser),
            e2e: only.is_none() && (!some_only || flags.e2e),
            some_only,
            only,
            soak: flags.soak,
        }
    }

    /// No flag picked a part: lint, unit tests, the dry-run and every suite.
    fn everything(&self) -> bool {
        !self.some_only && self.only.is_none()
    }
}

/// `--store d1|durable`: that store; by default both, D1 first.
fn stores_asked(flag: Option<&str>) -> Result<Vec<StoreKind>> {
    Ok(match StoreKind::parse(flag)? {
        Some(store) => vec![store],
        None => vec![StoreKind::D1, StoreKind::Durable],
    })
}

/// The workspace's unit tests (all but the integration tests' crate), then the
/// simulation's stage.
fn unit_tests(root: &Path) -> Result<()> {
    eprintln!("xtask: unit tests");
    run(Command::new("cargo")
        .args([
            "test",
            "--workspace",
            "--exclude",
            "onceclick-tests",
            "--all-features",
        ])
        .current_dir(root))?;
    sim::test_stage()
}

/// `--only moves`: the move suite alone (it starts its own Workers); `--only crashes`
/// the crash suite alone, on each store asked for; `--only schemathesis` the
/// conformance check alone, against a Worker on D1.
fn own_workers_suite(tools: &Tools, root: &Path, name: &str, store: Option<&str>) -> Result<()> {
    match name {
        "moves" => crate::moves::run(tools, root),
        "crashes" => {
            let reports = root.join("target/reliability");
            for store in stores_asked(store)? {
                crashes::run(tools, root, &reports.join(store.name()), store)?;
            }
            Ok(())
        }
        _ => {
            let worker = TestWorker::start(tools, root, StoreKind::D1)?;
            let reports = root.join("target/reliability/d1");
            conformance(root, &worker.server.url, &worker.secret, &reports)
        }
    }
}

/// The demo page's end-to-end tests. The page imports the SDK from www/pkg; wrangler
/// serves what is there when it starts (built here when the browser suites run alone).
/// The example app installs the package's tarball. The tests get a Worker of their own
/// (a longer provider timeout, see `TestWorker::start_for_e2e`), stopped before the next
/// suite.
fn end_to_end(tools: &Tools, root: &Path, build_sdk: bool) -> Result<()> {
    if build_sdk {
        sdk::build(tools)?;
    }
    sdk::copy_for_demo(root)?;
    let example = example::build(tools)?;
    let worker = TestWorker::start_for_e2e(tools, root)?;
    let preview = example::Preview::start(tools, &example, &worker.server.url)?;
    e2e::run_tests(tools, &worker, &example, &preview.url)?;
    let token = onceclick_tests::auth::mint(&worker.secret, "example-vitest", false, 3600)?;
    let admin = onceclick_tests::auth::mint(&worker.secret, "example-vitest-admin", true, 3600)?;
    let mock = format!("http://127.0.0.1:{}", worker.mock_port);
    example::app_tests(tools, &example, &worker.server.url, &token, &admin, &mock)
}

/// The SDK's browser tests against `worker`, run once. (The flake that a second run
/// used to hide, one of the last tests "not detected as having run", was the runner's
/// 20 s for the whole suite: `sdk::browser_tests` gives it more.)
fn browser_tests(tools: &Tools, worker: &TestWorker) -> Result<()> {
    let mock_url = format!("http://127.0.0.1:{}", worker.mock_port);
    sdk::browser_tests(tools, &worker.server.url, &worker.secret, &mock_url)
}

/// The integration suite against `worker` on `store`, then (on a full run) the crash
/// suite on the same store, and schemathesis on D1. Each store's reliability figures go
/// to `reports/<store>/`.
fn integration(
    tools: &Tools,
    root: &Path,
    worker: TestWorker,
    store: StoreKind,
    only: &Option<String>,
    soak: bool,
    reports: &Path,
) -> Result<()> {
    let TestWorker {
        server,
        secret,
        persist,
        mock_port,
        log,
        idp_url,
    } = worker;
    let mock_url = format!("http://127.0.0.1:{mock_port}");
    let reports = reports.join(store.name());
    eprintln!(
        "xtask: integration tests against {} on {}",
        server.url,
        store.name()
    );
    let mut cargo = Command::new("cargo");
    cargo.args(["test", "-p", "onceclick-tests"]);
    match only {
        // `--only a,b`: several test binaries.
        Some(names) => names
            .split(',')
            .fold(&mut cargo, |c, name| c.args(["--test", name])),
        None => cargo.arg("--tests"),
    };
    let status = cargo
        .env("ONCECLICK_URL", &server.url)
        .env("ONCECLICK_AUTH_SECRET", &secret)
        .env("ONCECLICK_D1_DIR", &persist)
        .env("ONCECLICK_STORE", store.name())
        .env("ONCECLICK_MOCK_URL", &mock_url)
        .env("ONCECLICK_IDP_URL", idp_url.unwrap_or_default())
        .env("ONCECLICK_JWT_ISSUER", crate::test_worker::TEST_ISSUER)
        .env("ONCECLICK_JWT_AUDIENCE", crate::test_worker::TEST_AUDIENCE)
        .env("ONCECLICK_WRANGLER_LOG", &log)
        .env(
            "ONCECLICK_PROVIDER_TIMEOUT_MS",
            crate::test_worker::TEST_TIMEOUT_MS.to_string(),
        )
        .env("ONCECLICK_REPORT_DIR", &reports)
        .env("ONCECLICK_SOAK", if soak { "1" } else { "0" })
        // schema_equivalence: the Worker's JSON Schema glue, bundled and run as it is there.
        .env("ONCECLICK_NODE", tools.node_modules.join(".bin/node"))
        .env("ONCECLICK_ESBUILD", tools.node_modules.join(".bin/esbuild"))
        .env("ONCECLICK_NODE_PATH", &tools.node_modules)
        .current_dir(root)
        .status()?;
    // schemathesis checks the HTTP contract, which does not depend on the store.
    let conformance = match (only, store) {
        (None, StoreKind::D1) => conformance(root, &server.url, &secret, &reports),
        _ => Ok(()),
    };
    drop(server);
    if !status.success() {
        print_reliability(&reports);
        bail!("integration tests failed on {}", store.name());
    }
    let crashed = match only {
        Some(_) => Ok(()),
        None => crashes::run(tools, root, &reports, store),
    };
    print_reliability(&reports);
    conformance.and(crashed)
}

/// gzip bytes of the Worker as `wrangler deploy` bundles it (wasm plus JS): 289,213 B
/// when set (300 KiB), against issue 11's target of 400 KB; raised to 320 KiB for issue
/// 14's operations (lists, figures, the rate limit, JWKS verification: 318,412 B); raised
/// to 352 KiB for issue 13's second store (358,407 B): the `Shard` Durable Object
/// class and its glue, the migration files compiled in for the shards (about 5 KB), the
/// routing and the fan-out. Trimmed on the way: only `fetch` and `alarm` bound on the
/// class (-3 KB), rows read through the same `serde_wasm_bindgen` code as D1's rather
/// than through `serde_json::Value` (-13 KB), the stub called without `RequestInit`;
/// raised to 360 KiB for issue 21 (about 366,000 B): the sharded list's merge (about
/// 6 KB: ids first from every shard, refills, then the page's documents, where a list
/// had been one statement per shard), the JWKS waiters and `GET /v1/move` (about 2 KB).
/// Trimmed on the way: one fan-out future (`Store::call_all`) shared by every call that
/// asks every place (-1.6 KB), a scan instead of a heap and no sort of the places
/// (-3.5 KB); raised to 364 KiB for issue 22 (368,118 B): the core's interface to its
/// shell (`host.rs`: a `dyn Host` whose provider call, enqueue and timer are boxed
/// futures), the handlers' decisions split from their HTTP (`decide_*`), statement
/// parameters as `serde_json::Value` turned into `JsValue`s where D1 or a shard binds
/// them, and a resolve or late result racing the purge told apart from a store that no
/// longer holds the job (about 2.5 KB in all); raised to 372 KiB for issue 23 (377,219
/// B, from 371,068): the shard's hand-off of its creates from its alarm (`handoff.rs`:
/// the outbox, the new instance's read of its `starting` attempts, the alarm that serves the hand-off and the
/// pass with the pass's due time kept apart) and the marked statement on the wire
/// (about 5 KB; a nested serde struct on the wire cost 0.5 KB more, so the mark is two
/// plain fields), and the answer's `usage` read and logged (`call_tokens`, about 1
/// KB), and the live stream (the `Live` hub object with its hibernatable WebSockets,
/// the SSE relay, the documents read back and notified, the failover in one batch:
/// about 17 KB, gzip -9 of 379,197 B wasm and 15,238 B JavaScript); raised to 396 KiB
/// for issue 24's stream of several jobs (403,333 B: `GET /v1/stream`, its query and
/// the relay over several hub sockets, about 9 KB, likely most of it the two new
/// `join_all` instances, to trim); raised to 400 KiB, the Worker's target, for issue
/// 25's streamed provider answers (408,247 B: `protocol::chat` and `sse` in the Worker,
/// the body read chunk by chunk with its silence and total limits, the streamed
/// classification, about 4.9 KB); raised to 412 KiB for the text handed to the job's hub
/// and relayed as `delta` events (420,332 B with this bundle; about 12 KB, of which
/// the hub's text endpoint, its storage once per KB and its read-back about 5 KB, the
/// hand-off beside the body read about 3.5 KB, the place format, the relay's deltas and
/// the review's fixes the rest, by `gzip -9` of the wasm against the commit before);
/// raised to 413 KiB for a reconnect that gets the winner's last words before the
/// document that shows the win, the text kept as chunks of a KB each and dropped by one
/// `deleteAll` at the settle, and frames cut below 16,384 code points (about 0.9 KB, by
/// the same measure; 700 B under 412 KiB left no room for the stop that comes next).
/// Raised to 415 KiB for the tokens per attempt (issue 25: written with the answer,
/// carried by a queued result, in the document and the figures) and the hub's write of
/// an `unknown` attempt's last text (`Keeper::at_unknown`): about 1.7 KB together, by
/// this check's own measure (flate2's best, about 1.3 KB above `gzip -9`), from
/// 422,696 B; the document's `tokens` read as a JSON value, not a type with a derived
/// reader, saved 0.5 KB of it. Raised to 416 KiB for the cost per streamed job (issue
/// 25's figures: the hand-offs and the hub's documents in the consumer's lines, the
/// hub's writes and deletes logged) and the hand-offs spaced 50 ms apart, which cut a
/// 2 KB answer's requests to its hub from 512 to 63 (425,598 B, 885 B more). Raised
/// to 417 KiB for the shard that hands its create's attempt to the queue as it answers,
/// not in its alarm's turn, which took about 11 ms off a sharded job's first streamed
/// text (`handoff.rs`; 426,180 B, 582 B more: the outbox shared with the task, the task).
/// That is over the 400 KiB target: what the next steps
/// add, and the way back under it, are to come from trimming (the `join_all`s above
/// first). Lowered as the Worker shrinks (BENCHMARKS.md), so that it cannot grow back unnoticed:
/// the `url` crate, for one, would add about 75 KB with its IDNA tables (`req.url()`,
/// `worker::Url`: use `http::query` and `Request::new`), and boon in the wasm
/// about 475 KB. Raised to 448 KiB (458,752 B) for the turn of issues 42 to 50 together
/// (issue 42, the stream's eight defects, measured in its note).
const WORKER_BUDGET: usize = 448 * 1024;

/// Fails when `bytes` is over `limit`.
fn budget(what: &str, bytes: usize, limit: usize) -> Result<()> {
    eprintln!("xtask: {what} is {bytes} B gzip (budget {limit} B)");
    if bytes > limit {
        bail!("{what} is {bytes} B gzip, over its budget of {limit} B (see BENCHMARKS.md)");
    }
    Ok(())
}

/// `cargo fmt --check` and clippy with warnings denied, on the host crates and on the
/// Workers (onceclick's and the bench's baseline) and the SDK for their real target.
pub(crate) fn lint(root: &Path) -> Result<()> {
    eprintln!("xtask: cargo fmt --check and clippy");
    run(Command::new("cargo")
        .args(["fmt", "--all", "--", "--check"])
        .current_dir(root))?;
    run(Command::new("cargo")
        .args([
            "clippy",
            "--workspace",
            "--exclude",
            "onceclick-bench-baseline",
            "--all-targets",
            "--all-features",
            "--",
            "-D",
            "warnings",
        ])
        .current_dir(root))?;
    run(Command::new("cargo")
        .args([
            "clippy",
            "-p",
            "onceclick-edge",
            "-p",
            "onceclick-bench-baseline",
            "-p",
            "onceclick",
            "--target",
            "wasm32-unknown-unknown",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ])
        .current_dir(root))
}

/// schemathesis against `edge/openapi.yaml` on the Worker under test, as an admin (so
/// that every route is reachable): every answer must conform to the spec, none a 5xx.
fn conformance(root: &Path, url: &str, secret: &str, reports: &Path) -> Result<()> {
    let st = tools::schemathesis(root)?;
    let admin = onceclick_tests::auth::mint(secret, "schemathesis", true, 3600)?;
    eprintln!("xtask: schemathesis against edge/openapi.yaml");
    let started = std::time::Instant::now();
    let out = Command::new(&st)
        .arg("run")
        .arg(root.join("edge/openapi.yaml"))
        .args(["--url", url, "-H"])
        .arg(format!("Authorization: Bearer {admin}"))
        .args([
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,response_headers_conformance",
            "--max-examples",
            "50",
            // One worker: hypothesis's lambda descriptions call `ast.parse`, which
            // CPython 3.11 can crash in when threads race ("AST constructor recursion
            // depth mismatch").
            "--workers",
            "1",
            "--no-color",
        ])
        .env("SCHEMATHESIS_TELEMETRY", "false")
        .current_dir(root)
        .output()
        .context("running schemathesis")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    // "N generated, N passed" (and ", K failed" when any did).
    let cases = text
        .lines()
        .rev()
        .find(|l| l.contains(" generated"))
        .unwrap_or_default()
        .trim()
        .to_owned();
    let number = |word: &str| -> u64 {
        cases
            .split(',')
            .find(|p| p.trim().ends_with(word))
            .and_then(|p| p.trim().split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let figures = serde_json::json!({
        "generated": number("generated"), "passed": number("passed"), "failed": number("failed"),
        "seconds": started.elapsed().as_secs_f64(),
    });
    std::fs::create_dir_all(reports)?;
    std::fs::write(
        reports.join("schemathesis.json"),
        serde_json::to_string_pretty(&figures)?,
    )?;
    if out.status.success() {
        eprintln!("xtask: schemathesis: {cases}");
        return Ok(());
    }
    // Its own traceback can run to megabytes: the end says what happened.
    let lines: Vec<&str> = text.lines().collect();
    eprintln!("{}", lines[lines.len().saturating_sub(80)..].join("\n"));
    // A crash inside schemathesis itself ("Runtime Error", no failed case) is the tool's,
    // not the API's: said loudly, not counted as a nonconforming answer.
    let tool_only = number("failed") == 0
        && number("generated") > 0
        && text.contains("Runtime Error")
        && !text.contains("Failures:");
    if tool_only {
        eprintln!(
            "xtask: WARNING: schemathesis crashed inside itself (above); no answer failed a check"
        );
        return Ok(());
    }
    bail!("schemathesis found responses that do not conform to edge/openapi.yaml")
}

/// One line per reliability suite, from the figures each wrote (see RELIABILITY.md).
fn print_reliability(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    for path in paths {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let Ok(serde_json::Value::Object(figures)) = serde_json::from_str(&text) else {
            continue;
        };
        let line: Vec<String> = figures
            .iter()
            .filter(|(_, v)| v.is_number() || v.is_string() || v.is_boolean())
            .map(|(k, v)| match v.as_f64() {
                Some(x) if x.fract() != 0.0 => format!("{k}={x:.1}"),
                _ => format!("{k}={v}"),
            })
            .collect();
        let suite = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        println!("reliability {suite}: {}", line.join(" "));
    }
}
