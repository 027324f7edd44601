//! The Worker as the tests and the bench run it.

use crate::tools::{self, Tools};
use crate::wrangler::{self, DevOptions, Wrangler};
use anyhow::Result;
use std::path::{Path, PathBuf};

/// Provider timeout in the test Worker: long enough for a gated race to finish on a busy
/// two-core machine, short enough that timeout tests stay quick.
pub(crate) const TEST_TIMEOUT_MS: u64 = 4000;

/// Provider timeout in the demo page's end-to-end Worker: a person-paced race (both
/// attempts held, a screenshot, two releases through the page) must finish well inside
/// it on a busy machine; a hang still turns `unknown` within seconds.
const E2E_TIMEOUT_MS: u64 = 8000;

/// `wrangler dev` on a free port with a fresh local D1, a random secret, and the mock
/// provider on another free port.
pub(crate) struct TestWorker {
    pub(crate) server: Wrangler,
    pub(crate) secret: String,
    pub(crate) persist: PathBuf,
    pub(crate) mock_port: u16,
    /// What the Worker printed: tests read its structured lines (`fault_fired`).
    pub(crate) log: PathBuf,
    /// The local identity provider whose JWKS the Worker trusts (tests only).
    pub(crate) idp_url: Option<String>,
}

/// How the tests' Worker is told about the local identity provider (`tests/src/idp.rs`).
pub(crate) const TEST_ISSUER: &str = "https://idp.onceclick.test";
pub(crate) const TEST_AUDIENCE: &str = "onceclick-tests";

/// Which store the Worker runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StoreKind {
    /// Every job in the local D1 database (the default).
    D1,
    /// Jobs in [`TEST_SHARDS`] Durable Objects with SQLite storage (`STORE=durable`).
    Durable,
}

/// Shards of the sharded test Worker: enough that jobs spread over many, and the
/// fan-out reads (lists, figures, certifications) cross several.
pub(crate) const TEST_SHARDS: u32 = 8;

impl StoreKind {
    /// `--store d1|durable`.
    pub(crate) fn parse(flag: Option<&str>) -> anyhow::Result<Option<Self>> {
        match flag {
            None => Ok(None),
            Some("d1") => Ok(Some(StoreKind::D1)),
            Some("durable") => Ok(Some(StoreKind::Durable)),
            Some(other) => anyhow::bail!("--store {other}: use d1 or durable"),
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            StoreKind::D1 => "d1",
            StoreKind::Durable => "durable",
        }
    }

    /// The vars that pick it. Sharded, the shards' own alarms are set an hour out, so
    /// that the tests decide when a pass runs (`POST /v1/_reconcile`); one test moves
    /// the alarms close and watches them run.
    pub(crate) fn vars(self) -> Vec<(String, String)> {
        match self {
            StoreKind::D1 => vec![("STORE".into(), "d1".into())],
            StoreKind::Durable => vec![
                ("STORE".into(), "durable".into()),
                ("SHARDS".into(), TEST_SHARDS.to_string()),
                ("RECONCILE_EVERY_MS".into(), "3600000".into()),
            ],
        }
    }
}

/// The vars every Worker the suites start needs: its secret, the mock's providers (each
/// timing out after `timeout_ms`; `fallback` abandoned after `abandon_ms`), and the
/// fallback's secrets (its key, and a header's).
pub(crate) fn base_vars(
    secret: &str,
    mock_port: u16,
    timeout_ms: u64,
    abandon_ms: Option<u64>,
    primary_streams: bool,
) -> Vec<(String, String)> {
    vec![
        ("AUTH_SECRET".into(), secret.to_owned()),
        (
            "PROVIDERS".into(),
            onceclick_tests::mock::providers_var(
                mock_port,
                timeout_ms,
                abandon_ms,
                primary_streams,
            ),
        ),
    ]
    .into_iter()
    .chain(
        onceclick_tests::mock::FALLBACK_SECRETS
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string())),
    )
    .collect()
}

/// What a suite that starts Workers of its own begins with (the crash suite, the move
/// suite): a fresh local store under `persist`, migrated; a random secret; the mock
/// provider on a free port.
pub(crate) struct Scratch {
    pub(crate) persist: PathBuf,
    pub(crate) secret: String,
    pub(crate) mock_port: u16,
    pub(crate) mock: onceclick_tests::client::Mock,
}

impl Scratch {
    pub(crate) fn new(tools: &Tools, persist: PathBuf) -> Result<Self> {
        let _ = std::fs::remove_dir_all(&persist);
        wrangler::migrate(tools, &persist, true)?;
        let mock_port = wrangler::free_port()?;
        onceclick_tests::mock::spawn_for_tests(mock_port)?;
        Ok(Self {
            persist,
            secret: tools::random_secret()?,
            mock_port,
            mock: onceclick_tests::client::Mock {
                base: format!("http://127.0.0.1:{mock_port}"),
                http: reqwest::Client::new(),
            },
        })
    }
}

/// How a [`TestWorker`] differs between the tests and the bench.
pub(crate) struct Launch<'a> {
    /// The store it runs on.
    pub(crate) store: StoreKind,
    /// Vars set last, over the store's own (the bench's `SHARDS`).
    pub(crate) extra_vars: Vec<(String, String)>,
    /// `wrangler dev --log-level` (see `DevOptions::log_level`).
    pub(crate) log_level: Option<&'static str>,
    /// The tests' extras: fault injection, a quick reconciler, small purge chunks.
    pub(crate) test_vars: bool,
    /// Start from a copy of this `--persist-to` folder (already migrated and seeded)
    /// instead of a freshly migrated D1.
    pub(crate) persist_from: Option<&'a Path>,
    /// Another wrangler.toml than the root one.
    pub(crate) config: Option<PathBuf>,
    /// Every provider's `timeout_ms`.
    pub(crate) provider_timeout_ms: u64,
    /// `primary` streams its answers too (`fallback` always does).
    pub(crate) primary_streams: bool,
}

impl Launch<'_> {
    /// The Worker as the tests run it: the tests' extras, providers timing out after
    /// `provider_timeout_ms`.
    fn for_tests(provider_timeout_ms: u64) -> Self {
        Launch {
            store: StoreKind::D1,
            extra_vars: Vec::new(),
            log_level: None,
            test_vars: true,
            persist_from: None,
            config: None,
            provider_timeout_ms,
            primary_streams: false,
        }
    }
}

impl TestWorker {
    /// The Worker as the integration tests run it: with no rate limit one owner's
    /// storm would reach ([`wrangler::unlimited_config`]).
    pub(crate) fn start(tools: &Tools, root: &Path, store: StoreKind) -> Result<Self> {
        Self::start_with_timeout(tools, root, store, TEST_TIMEOUT_MS)
    }

    /// [`TestWorker::start`] with the providers' `timeout_ms` at `timeout_ms` (the
    /// streaming fallback's total limit is two of them).
    pub(crate) fn start_with_timeout(
        tools: &Tools,
        root: &Path,
        store: StoreKind,
        timeout_ms: u64,
    ) -> Result<Self> {
        let mut how = Launch::for_tests(timeout_ms);
        how.store = store;
        how.config = Some(wrangler::unlimited_config(root)?);
        Self::launch(tools, root, &how)
    }

    /// The Worker as the end-to-end tests run it: the tests' extras, with a longer
    /// provider timeout ([`E2E_TIMEOUT_MS`]), and the committed wrangler.toml, rate
    /// limit included.
    pub(crate) fn start_for_e2e(tools: &Tools, root: &Path) -> Result<Self> {
        // Both providers stream, as under `cargo xtask dev`: the page's hedge race has
        // two streams.
        let mut how = Launch::for_tests(E2E_TIMEOUT_MS);
        how.primary_streams = true;
        Self::launch(tools, root, &how)
    }

    pub(crate) fn launch(tools: &Tools, root: &Path, how: &Launch<'_>) -> Result<Self> {
        let scratch = root.join("target/xtask");
        std::fs::create_dir_all(&scratch)?;
        let port = wrangler::free_port()?;
        let persist = scratch.join(format!("d1-{port}"));
        let _ = std::fs::remove_dir_all(&persist);
        match how.persist_from {
            Some(from) => crate::tools::copy_dir(from, &persist)?,
            None => wrangler::migrate(tools, &persist, true)?,
        }
        let secret = tools::random_secret()?;
        let mock_port = wrangler::free_port()?;
        onceclick_tests::mock::spawn_for_tests(mock_port)?;
        let log = scratch.join(format!("wrangler-{port}.log"));
        eprintln!(
            "xtask: starting wrangler dev on 127.0.0.1:{port} (log: {})",
            log.display()
        );
        let mut vars = base_vars(
            &secret,
            mock_port,
            how.provider_timeout_ms,
            Some(200),
            how.primary_streams,
        );
        vars.extend(
            how.store
                .vars()
                .into_iter()
                .filter(|(name, _)| how.extra_vars.iter().all(|(n, _)| n != name)),
        );
        vars.extend(how.extra_vars.iter().cloned());
        let mut idp_url = None;
        if how.test_vars {
            vars.extend(test_vars());
            // Tokens from a local identity provider, besides the HS256 secret: its claims
            // are named otherwise than the defaults, so the configuration is exercised.
            let idp_port = wrangler::free_port()?;
            onceclick_tests::idp::spawn(idp_port)?;
            let url = format!("http://127.0.0.1:{idp_port}");
            vars.extend(idp_vars(&url));
            idp_url = Some(url);
        }
        let server = Wrangler::start(
            tools,
            DevOptions {
                port,
                persist: persist.clone(),
                vars,
                log: Some(log.clone()),
                config: how.config.clone(),
                log_level: how.log_level,
            },
        )?;

        Ok(Self {
            server,
            secret,
            persist,
            mock_port,
            log,
            idp_url,
        })
    }
}

/// The tests' extras ([`Launch::test_vars`]): fault injection, a quick reconciler,
/// small purge chunks, and the live stream's limits brought within a test's reach.
fn test_vars() -> [(String, String); 10] {
    [
        ("ALLOW_FAULT_INJECTION".into(), "true".into()),
        ("RECONCILE_STARTING_AFTER_MS".into(), "1500".into()),
        // A stop reaches a held call well inside the providers' timeout.
        ("CANCEL_POLL_MS".into(), "250".into()),
        // Small purge chunks, so that the retention test crosses several.
        ("PURGE_CHUNK".into(), "2".into()),
        // A `store_call` line per store call, for the suites that count them.
        ("LOG_STORE_CALLS".into(), "true".into()),
        // A live stream's lost notification is late by a second, not five.
        ("LIVE_REREAD_MS".into(), "1000".into()),
        // A hub that keeps text reads its job every 3 s, not once a retention
        // period, so that the suite sees its check (`tests/live_kept.rs`).
        ("LIVE_KEPT_CHECK_MS".into(), "3000".into()),
        // The load test (`tests/live_load.rs`) opens this many on one job, and
        // one more to be refused.
        ("LIVE_MAX_SUBSCRIBERS".into(), "200".into()),
        // Streams end after 8 s, so the maximum duration's test waits 8 s (the
        // clients reconnect with their positions, as after 5 minutes).
        ("LIVE_MAX_STREAM_MS".into(), "8000".into()),
        // A stream that does not read is cut once 128 KiB of live frames wait
        // (`tests/live.rs`; the least the Worker takes), not 1 MiB.
        ("LIVE_MAX_BUFFERED_BYTES".into(), "131072".into()),
    ]
}

/// The vars that make the Worker trust the local identity provider at `url`.
fn idp_vars(url: &str) -> [(String, String); 7] {
    [
        ("JWKS_URL".into(), format!("{url}/jwks.json")),
        ("JWT_ISSUER".into(), TEST_ISSUER.into()),
        ("JWT_AUDIENCE".into(), TEST_AUDIENCE.into()),
        ("JWT_OWNER_CLAIM".into(), "uid".into()),
        ("JWT_ADMIN_CLAIM".into(), "groups".into()),
        ("JWT_ADMIN_VALUE".into(), "onceclick-admins".into()),
        // A rotation is seen within a second, not a minute, so the test is quick.
        ("JWKS_REFETCH_MS".into(), "1000".into()),
    ]
}
