//! `cargo xtask dev` and what it shares with `token` and `certify`: the local secret.

use crate::tools::{self, project_root, Tools};
use crate::wrangler::{self, DevOptions, Wrangler};
use crate::{certify, sdk};
use anyhow::{Context, Result};
use std::path::Path;

/// The mock provider's port under `cargo xtask dev`, as wrangler.toml's PROVIDERS names it.
const DEV_MOCK_PORT: u16 = 8788;

/// The fault proxy in front of the Worker under `cargo xtask dev`: the demo page's
/// "swallow the answer" goes through it (the page's default for its address).
const DEV_PROXY_PORT: u16 = 8789;

/// `.dev.vars` holds the local AUTH_SECRET. Created with a random one when missing;
/// an existing file is never touched.
pub(crate) fn secret(root: &Path) -> Result<String> {
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

pub(crate) fn run(flags: &crate::Dev) -> Result<()> {
    let tools = Tools::bootstrap()?;
    let root = project_root();
    let secret = secret(&root)?;
    wrangler::build_edge(&tools)?;
    // The package (and its tarball, for examples/vite-react), copied to www/pkg.
    if let Err(e) = sdk::build(&tools).and_then(|()| sdk::copy_for_demo(&root)) {
        eprintln!("xtask: the demo page will run without the SDK: {e:#}");
    }
    let persist = root.join(".wrangler/state");
    wrangler::migrate(&tools, &persist, false)?;
    let port = flags.port.unwrap_or(8787);
    onceclick_tests::mock::spawn(DEV_MOCK_PORT).with_context(|| {
        format!("starting the mock provider on 127.0.0.1:{DEV_MOCK_PORT} (is the port taken?)")
    })?;
    // `--store durable`: the same, with jobs in 8 Durable Object shards (their alarms
    // reconcile every minute, as deployed).
    let vars = match crate::test_worker::StoreKind::parse(flags.store.as_deref())? {
        Some(crate::test_worker::StoreKind::Durable) => vec![
            ("STORE".to_owned(), "durable".to_owned()),
            (
                "SHARDS".to_owned(),
                crate::test_worker::TEST_SHARDS.to_string(),
            ),
        ],
        _ => Vec::new(),
    };
    let server = Wrangler::start(
        &tools,
        DevOptions {
            port,
            persist,
            vars,
            log: None,
            config: None,
            log_level: None,
        },
    )?;
    onceclick_tests::proxy::spawn(DEV_PROXY_PORT, server.url.clone()).with_context(|| {
        format!("starting the fault proxy on 127.0.0.1:{DEV_PROXY_PORT} (is the port taken?)")
    })?;
    // Failover goes only to certified providers. The Worker certifies what is due by
    // itself, from its cron, a few (kind, provider) pairs a pass; `wrangler dev
    // --test-scheduled` never fires the cron by itself, so `dev` runs it as often as
    // every pair the kinds name needs, and the demo starts with the mock's providers
    // certified. (A kind edited while `dev` runs is certified on its next start.)
    let pairs: usize = certify::kinds(&root)
        .map(|kinds| kinds.iter().map(|k| k.decl().providers.len()).sum())
        .unwrap_or(8);
    // Each pass certifies up to four pairs; one more finds nothing due.
    let passes = (pairs / 4 + 2) as u32;
    if let Err(e) = certify::scheduled_passes(&server.url, passes) {
        eprintln!("xtask: the background certification did not run: {e:#}");
    }
    const WEEK: u64 = 7 * 24 * 3600;
    let token = onceclick_tests::auth::mint(&secret, "dev-owner", false, WEEK)?;
    // The page takes its tokens from after the `#` (never sent to a server), keeps them
    // in localStorage and clears the address bar. The admin token lets it resolve an
    // unknown attempt and certify; it is signed with this machine's local secret.
    let page_admin = onceclick_tests::auth::mint(&secret, "dev-admin", true, WEEK)?;
    println!("\nonceclick is running at {}", server.url);
    println!(
        "demo page (open this address; it carries a token and an admin token for 7 days):\n  {}/#token={token}&admin={page_admin}",
        server.url
    );
    println!(
        "operator's page (unknown attempts, providers and figures; admin token):\n  {}/ops.html#admin={page_admin}",
        server.url
    );
    println!("mock provider (primary, fallback): http://127.0.0.1:{DEV_MOCK_PORT}");
    println!("fault proxy (the page's \"swallow the answer\"): http://127.0.0.1:{DEV_PROXY_PORT}");
    println!("token (owner dev-owner, 7 days):\n  export TOKEN={token}");
    println!(
        "try:\n  curl -i -X POST {}/v1/jobs -H \"Authorization: Bearer $TOKEN\" -H 'Idempotency-Key: demo-1' \\\n       -H 'Content-Type: application/json' -d '{{\"kind\":\"summarize\",\"input\":{{\"text\":\"A long day at the office ended well.\"}}}}'",
        server.url
    );
    server.wait()
}

/// `cargo xtask token`: a bearer token signed with the local secret.
pub(crate) fn token(flags: &crate::Token) -> Result<()> {
    let secret = secret(&project_root())?;
    let ttl = flags.ttl.unwrap_or(24 * 3600);
    println!(
        "{}",
        onceclick_tests::auth::mint(&secret, &flags.owner, flags.admin, ttl)?
    );
    Ok(())
}
