//! Project automation, run as `cargo xtask <command>`:
//!
//! - `dev [--port N]`: install what is missing, build, migrate the local D1, start
//!   `wrangler dev` on 127.0.0.1, print the URL and a ready token.
//! - `test [--browser]`: the same bootstrap, then unit tests, `wrangler deploy --dry-run`,
//!   the SDK's browser tests and the integration tests against a fresh `wrangler dev` on
//!   a free port, then the crash suite; `--browser` runs only the browser tests,
//!   `--only NAME` only `tests/tests/NAME.rs`, `--soak` the heavy reliability variants
//!   (see RELIABILITY.md).
//! - `token --owner NAME [--admin] [--ttl SECONDS]`: a bearer token for the local secret.
//! - `build-edge`: build the Worker (wrangler's `[build] command`).
//! - `sdk`: build the npm package `onceclick` (web and bundler) and print its gzip size.
//! - `bench`: request rates of create, replay and read, side by side in one run.
//! - `lint`: `cargo fmt --check` and clippy (`-D warnings`) on every crate.
//! - `certify --provider NAME [--url URL]`: prompt sizes against `max_prompt_tokens`,
//!   then certification on a running Worker (default: the one `dev` serves).

mod bench;
mod certify;
mod crashes;
mod sdk;
mod tools;
mod wrangler;

use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::Command;
use tools::{project_root, run, Tools};
use wrangler::{DevOptions, Wrangler};

/// Provider timeout in the test Worker: long enough for a gated race to finish on a busy
/// two-core machine, short enough that timeout tests stay quick.
const TEST_TIMEOUT_MS: u64 = 4000;

/// The mock provider's port under `cargo xtask dev`, as wrangler.toml's PROVIDERS names it.
const DEV_MOCK_PORT: u16 = 8788;

const USAGE: &str = "usage: cargo xtask <dev [--port N] | test [--browser] [--soak] [--only NAME] | token --owner NAME [--admin] [--ttl SECONDS] | build-edge | lint | sdk | bench | certify --provider NAME [--url URL]>";

fn main() {
    if let Err(e) = real_main() {
        eprintln!("xtask: {e:#}");
        std::process::exit(1);
    }
}

fn real_main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (command, rest) = args.split_first().context(USAGE)?;
    match command.as_str() {
        "dev" => dev(&Flags::parse(rest)?),
        "test" => test(),
        "token" => token(&Flags::parse(rest)?),
        "build-edge" => wrangler::build_edge(&Tools::bootstrap()?),
        "lint" => lint(&project_root()),
        "bench" => {
            let tools = Tools::bootstrap()?;
            let root = project_root();
            wrangler::build_edge(&tools)?;
            let worker = TestWorker::start(&tools, &root)?;
            bench::run(&worker.server.url, &worker.secret)
        }
        "sdk" => sdk::build(&Tools::bootstrap()?),
        "certify" => {
            let flags = Flags::parse(rest)?;
            let provider = flags
                .provider
                .as_deref()
                .context("certify needs --provider NAME")?;
            let root = project_root();
            let admin =
                onceclick_tests::auth::mint(&dev_secret(&root)?, "xtask-certify", true, 600)?;
            let url = flags
                .url
                .clone()
                .unwrap_or_else(|| "http://127.0.0.1:8787".to_owned());
            certify::run(&root, provider, &url, &admin)
        }
        _ => bail!("unknown command {command:?}\n{USAGE}"),
    }
}

#[derive(Default)]
struct Flags {
    port: Option<u16>,
    owner: Option<String>,
    admin: bool,
    ttl: Option<u64>,
    provider: Option<String>,
    url: Option<String>,
}

impl Flags {
    fn parse(args: &[String]) -> Result<Self> {
        let mut flags = Flags::default();
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let mut value = || it.next().with_context(|| format!("{arg} needs a value"));
            match arg.as_str() {
                "--port" => flags.port = Some(value()?.parse().context("--port")?),
                "--owner" => flags.owner = Some(value()?.clone()),
                "--ttl" => flags.ttl = Some(value()?.parse().context("--ttl")?),
                "--admin" => flags.admin = true,
                "--provider" => flags.provider = Some(value()?.clone()),
                "--url" => flags.url = Some(value()?.clone()),
                _ => bail!("unknown flag {arg:?}\n{USAGE}"),
            }
        }
        Ok(flags)
    }
}

/// `.dev.vars` holds the local AUTH_SECRET. Created with a random one when missing;
/// an existing file is never touched.
fn dev_secret(root: &Path) -> Result<String> {
    let path = root.join(".dev.vars");
    if !path.exists() {
        std::fs::write(&path, format!("AUTH_SECRET={}\n", tools::random_secret()?))?;
        eprintln!("xtask: wrote .dev.vars with a new random AUTH_SECRET");
    }
    let text = std::fs::read_to_string(&path)?;
    text.lines()
        .filter_map(|l| l.strip_prefix("AUTH_SECRET="))
        .map(|v| v.trim().trim_matches('"').to_owned())
        .next()
        .context(".dev.vars has no AUTH_SECRET line")
}

fn dev(flags: &Flags) -> Result<()> {
    let tools = Tools::bootstrap()?;
    let root = project_root();
    let secret = dev_secret(&root)?;
    wrangler::build_edge(&tools)?;
    if let Err(e) = sdk::build_for_demo(&tools) {
        eprintln!("xtask: the demo page will run without the SDK: {e:#}");
    }
    let persist = root.join(".wrangler/state");
    wrangler::migrate(&tools, &persist, false)?;
    let port = flags.port.unwrap_or(8787);
    onceclick_tests::mock::spawn(DEV_MOCK_PORT).with_context(|| {
        format!("starting the mock provider on 127.0.0.1:{DEV_MOCK_PORT} (is the port taken?)")
    })?;
    let server = Wrangler::start(
        &tools,
        DevOptions {
            port,
            persist,
            vars: Vec::new(),
            log: None,
        },
    )?;
    // The fallback must be certified before failover may go to it; against the mock
    // that takes a moment, so the demo starts with it done.
    let admin = onceclick_tests::auth::mint(&secret, "xtask-dev", true, 600)?;
    if let Err(e) = certify::run(&root, "fallback", &server.url, &admin) {
        eprintln!("xtask: fallback is not certified yet: {e:#}");
    }
    let token = onceclick_tests::auth::mint(&secret, "dev-owner", false, 7 * 24 * 3600)?;
    println!("\nonceclick is running at {}", server.url);
    println!("demo page:   {}/", server.url);
    println!("mock provider (primary, fallback): http://127.0.0.1:{DEV_MOCK_PORT}");
    println!("token (owner dev-owner, 7 days):\n  export TOKEN={token}");
    println!(
        "try:\n  curl -i -X POST {}/v1/jobs -H \"Authorization: Bearer $TOKEN\" -H 'Idempotency-Key: demo-1' \\\n       -H 'Content-Type: application/json' -d '{{\"kind\":\"summarize\",\"input\":{{\"text\":\"A long day at the office ended well.\"}}}}'",
        server.url
    );
    server.wait()
}

/// `test --browser` runs only the SDK's browser tests (against a fresh test Worker):
/// no lint, unit tests, dry-run or integration tests.
fn test() -> Result<()> {
    let tools = Tools::bootstrap()?;
    let root = project_root();
    let args: Vec<String> = std::env::args().skip(2).collect();
    let browser_only = args.iter().any(|a| a == "--browser");
    // `--only NAME`: just the integration test binary `tests/tests/NAME.rs`.
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1).cloned());
    let browser_only = browser_only && only.is_none();
    // The heavy reliability variants: 50,000 model operations instead of 2,000.
    let soak = args.iter().any(|a| a == "--soak");

    if !browser_only && only.is_none() {
        lint(&root)?;
        eprintln!("xtask: unit tests");
        run(Command::new("cargo")
            .args([
                "test",
                "--workspace",
                "--exclude",
                "onceclick-tests",
                "--all-features",
            ])
            .current_dir(&root))?;
    }

    wrangler::build_edge(&tools)?;
    if !browser_only && only.is_none() {
        eprintln!("xtask: wrangler deploy --dry-run");
        let outdir = root.join("target/xtask/deploy-dry-run");
        run(tools
            .command("wrangler")
            .args(["deploy", "--dry-run", "--outdir"])
            .arg(&outdir))?;
    }

    let TestWorker {
        server,
        secret,
        persist,
        mock_port,
        log,
    } = TestWorker::start(&tools, &root)?;
    let mock_url = format!("http://127.0.0.1:{mock_port}");

    if only.is_none() {
        // Known flake, being chased: about one run in ten, one browser test never
        // reports back to wasm-bindgen-test-runner ("might have timed out"). A second
        // run tells a flake from a failure; a real failure fails both.
        if let Err(first) = sdk::browser_tests(&tools, &server.url, &secret, &mock_url) {
            eprintln!(
                "xtask: WARNING: the browser tests failed ({first:#}); running them once more"
            );
            sdk::browser_tests(&tools, &server.url, &secret, &mock_url)?;
            eprintln!("xtask: WARNING: the browser tests passed only on their second run");
        }
    }
    if browser_only {
        return Ok(());
    }

    eprintln!("xtask: integration tests against {}", server.url);
    let reports = root.join("target/reliability");
    let _ = std::fs::remove_dir_all(&reports);
    let mut cargo = Command::new("cargo");
    cargo.args(["test", "-p", "onceclick-tests"]);
    match &only {
        Some(name) => cargo.args(["--test", name]),
        None => cargo.arg("--tests"),
    };
    let status = cargo
        .env("ONCECLICK_URL", &server.url)
        .env("ONCECLICK_AUTH_SECRET", &secret)
        .env("ONCECLICK_D1_DIR", &persist)
        .env("ONCECLICK_MOCK_URL", &mock_url)
        .env("ONCECLICK_WRANGLER_LOG", &log)
        .env("ONCECLICK_REPORT_DIR", &reports)
        .env("ONCECLICK_SOAK", if soak { "1" } else { "0" })
        .current_dir(&root)
        .status()?;
    let conformance = match &only {
        Some(_) => Ok(()),
        None => conformance(&root, &server.url, &secret, &reports),
    };
    drop(server);
    if !status.success() {
        print_reliability(&reports);
        bail!("integration tests failed");
    }
    let crashed = match &only {
        Some(_) => Ok(()),
        None => crashes::run(&tools, &root, &reports),
    };
    print_reliability(&reports);
    conformance.and(crashed)
}

/// The Worker as the tests and the bench run it: `wrangler dev` on a free port with a
/// fresh local D1, a random secret, and the mock provider on another free port.
struct TestWorker {
    server: Wrangler,
    secret: String,
    persist: std::path::PathBuf,
    mock_port: u16,
    /// What the Worker printed: tests read its structured lines (`fault_fired`).
    log: std::path::PathBuf,
}

impl TestWorker {
    fn start(tools: &Tools, root: &Path) -> Result<Self> {
        let scratch = root.join("target/xtask");
        std::fs::create_dir_all(&scratch)?;
        let port = wrangler::free_port()?;
        let persist = scratch.join(format!("d1-{port}"));
        let _ = std::fs::remove_dir_all(&persist);
        wrangler::migrate(tools, &persist, true)?;
        let secret = tools::random_secret()?;
        let mock_port = wrangler::free_port()?;
        onceclick_tests::mock::spawn(mock_port)?;
        let log = scratch.join(format!("wrangler-{port}.log"));
        eprintln!(
            "xtask: starting wrangler dev on 127.0.0.1:{port} (log: {})",
            log.display()
        );
        let server = Wrangler::start(
            tools,
            DevOptions {
                port,
                persist: persist.clone(),
                vars: vec![
                    ("AUTH_SECRET".into(), secret.clone()),
                    (
                        "PROVIDERS".into(),
                        onceclick_tests::mock::providers_var(mock_port, TEST_TIMEOUT_MS, Some(200)),
                    ),
                    ("FALLBACK_API_KEY".into(), "test-key".into()),
                    ("ALLOW_FAULT_INJECTION".into(), "true".into()),
                    ("RECONCILE_STARTING_AFTER_MS".into(), "1500".into()),
                    // Small purge chunks, so that the retention test crosses several.
                    ("PURGE_CHUNK".into(), "2".into()),
                ],
                log: Some(log.clone()),
            },
        )?;

        Ok(Self {
            server,
            secret,
            persist,
            mock_port,
            log,
        })
    }
}

/// `cargo fmt --check` and clippy with warnings denied, on the host crates and on the
/// Worker for its real target.
fn lint(root: &Path) -> Result<()> {
    eprintln!("xtask: cargo fmt --check and clippy");
    run(Command::new("cargo")
        .args(["fmt", "--all", "--", "--check"])
        .current_dir(root))?;
    run(Command::new("cargo")
        .args([
            "clippy",
            "--workspace",
            "--exclude",
            "onceclick-edge",
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

fn token(flags: &Flags) -> Result<()> {
    let owner = flags.owner.as_deref().context("token needs --owner NAME")?;
    let secret = dev_secret(&project_root())?;
    let ttl = flags.ttl.unwrap_or(24 * 3600);
    println!(
        "{}",
        onceclick_tests::auth::mint(&secret, owner, flags.admin, ttl)?
    );
    Ok(())
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
