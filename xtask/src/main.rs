//! Project automation, run as `cargo xtask <command>`:
//!
//! - `dev [--port N]`: install what is missing, build, migrate the local D1, start
//!   `wrangler dev` on 127.0.0.1, print the URL and a ready token (`dev.rs`).
//! - `test [--browser] [--e2e] [--soak] [--only NAME[,NAME…]] [--store d1|durable]`
//!   (`test.rs`): the same bootstrap,
//!   then lint, unit tests, `wrangler deploy --dry-run`, the SDK's browser tests, the
//!   demo page's end-to-end tests (`e2e.rs`) and the integration tests against a fresh
//!   `wrangler dev` on a free port (`test_worker.rs`), then schemathesis and the crash
//!   suite; `--browser` runs only the SDK's browser tests, `--e2e` only the end-to-end
//!   tests (both flags: both), `--only NAME` only `tests/tests/NAME.rs`
//!   (`--only schemathesis` the conformance check, `moves` and `crashes` their suites), `--soak` the
//!   heavy reliability variants (see RELIABILITY.md). The integration and crash suites
//!   run on D1, then on 8 Durable Object shards; `--store` picks one.
//! - `token --owner NAME [--admin] [--ttl SECONDS]`: a bearer token for the local secret.
//! - `build-edge`: build the Worker (wrangler's `[build] command`).
//! - `sdk`: build the npm package `onceclick` (web and bundler) and print its gzip size;
//!   fails over its budget.
//! - `bench`: onceclick against a baseline Worker in one run (`bench.rs`); writes
//!   BENCHMARKS.md and bench/results.json. `load` is its load generator (`load.rs`).
//!   `bench --store durable`: one shard against one D1 (`bench_durable.rs`), written to
//!   bench/durable.json.
//! - `lint`: `cargo fmt --check` and clippy (`-D warnings`) on every crate.
//! - `move-status [--previous d1|durable:N] [--local [--persist DIR]] [--url URL [--token
//!   T]]`: during a move, how many jobs the layout it leaves still holds, and so whether
//!   `PREVIOUS_STORE` may go (`move_status.rs`).
//! - `certify --provider NAME [--url URL] [--token TOKEN] [--config FILE]`: prompt sizes against
//!   `max_prompt_tokens`, then certification on a running Worker (default: the one `dev`
//!   serves), with any admin token (default: one minted from `.dev.vars`).
//! - `kinds [--dir DIR]`: checks every kind file as the build will, and prints each
//!   kind's messages rendered for its golden inputs; then the providers of
//!   `wrangler.toml` and `wrangler.production.toml` (`kinds.rs`).
//!
//! Each command takes only its own flags: any other flag, or a flag without its value,
//! is an error. `cargo xtask --help` prints every command with its flags.

mod bench;
mod bench_cost;
mod bench_durable;
mod bench_jobs;
mod bench_live;
mod bench_plan;
mod bench_report;
mod bench_results;
mod bench_seed;
mod bench_sizes;
mod certify;
mod crashes;
mod dev;
mod doc_links;
mod e2e;
mod example;
mod kinds;
mod load;
mod move_status;
mod moves;
mod reshards;
mod sdk;
mod sdk_readme;
mod sim;
mod test;
mod test_worker;
mod tools;
mod wrangler;

use anyhow::{bail, Context, Result};
use std::ffi::OsString;
use std::path::PathBuf;
use tools::{project_root, Tools};

/// Printed after every parse error; `usage_says_what_parses` keeps it true to the grammar.
const USAGE: &str = "usage: cargo xtask <dev [--port N] [--store durable] | test [--browser] [--e2e] [--soak] [--only NAME] [--store d1|durable] | token --owner NAME [--admin] [--ttl SECONDS] | sim [--seed N] [--ops N] [--world N] [--skip LIST] [--mutant NAME] [--mutants] [--soak] | build-edge | lint | sdk | bench [--store durable] [--live] [--stops] [--streamed] [--render] | load | move-status [--previous d1|durable:N] [--local [--persist DIR]] [--url URL [--token T]] | certify --provider NAME [--url URL] [--token TOKEN] [--config FILE] | kinds [--dir DIR] [--types FILE]>";

// One struct per command with its own flags, and `XtaskCmd`, the enum of them: generated
// below from this grammar by `UPDATE_XFLAGS=1 cargo build -p xtask`.
xflags::xflags! {
    src "./src/main.rs"

    cmd xtask {
        /// Build, migrate and serve the Worker locally, with the mock provider.
        cmd dev {
            /// The port `wrangler dev` serves on (default 8787).
            optional --port port: u16
            /// `durable`: jobs in 8 Durable Object shards instead of D1.
            optional --store store: String
        }
        /// Every test: lint, unit, deploy dry-run, browser, integration, crashes.
        cmd test {
            /// Only the SDK's browser tests.
            optional --browser
            /// Only the demo page's end-to-end tests.
            optional --e2e
            /// The heavy reliability variants.
            optional --soak
            /// Only the integration test binary `tests/tests/NAME.rs` (or `moves`).
            optional --only name: String
            /// Only against this store: `d1` or `durable` (default: both, in turn).
            optional --store store: String
        }
        /// A bearer token signed with the secret in `.dev.vars`.
        cmd token {
            /// Its owner (the `sub` claim).
            required --owner name: String
            /// With `role: "admin"`.
            optional --admin
            /// Seconds until it expires (default one day).
            optional --ttl seconds: u64
        }
        /// The deterministic simulation (`sim/`): a million operations from one seed.
        cmd sim {
            /// The run's seed (default 1).
            optional --seed seed: u64
            /// Operations in all (default 1,000,000; 100,000,000 with --soak).
            optional --ops ops: u64
            /// Replay one world from its seed, with its trace.
            optional --world seed: u64
            /// With --world: operations left out, as a failure's replay line names them.
            optional --skip list: String
            /// Plant one defect (with --world); see --mutants for their names.
            optional --mutant name: String
            /// Every planted defect, each until the simulation catches it.
            optional --mutants
            /// 100,000,000 operations, with progress.
            optional --soak
        }
        /// Build the Worker (wrangler's `[build] command`).
        cmd build-edge {}
        /// `cargo fmt --check` and clippy on every crate.
        cmd lint {}
        /// Build the npm package `onceclick` and print its gzip size; fails over its budget.
        cmd sdk {}
        /// onceclick against a baseline Worker; writes BENCHMARKS.md.
        cmd bench {
            /// `durable`: one shard against one D1, side by side (SCALING.md).
            optional --store store: String
            /// The live stream's figures alone, merged into bench/results.json and
            /// BENCHMARKS.md.
            optional --live
            /// The stops alone (a held call and a streamed answer, cancelled), merged
            /// into bench/results.json and BENCHMARKS.md.
            optional --stops
            /// The cost per streamed job alone (CPU, subrequests, rows), merged into
            /// bench/results.json and BENCHMARKS.md.
            optional --streamed
            /// Writes BENCHMARKS.md again from bench/results.json and bench/ANALYSIS.md,
            /// measuring nothing.
            optional --render
        }
        /// The bench's load generator: a spec on stdin, figures on stdout.
        cmd load {}
        /// How many jobs the layout a move leaves still holds: whether PREVIOUS_STORE may go.
        cmd move-status {
            /// The layout the move leaves, `d1` or `durable:N` (default: wrangler.toml's
            /// PREVIOUS_STORE, else d1).
            optional --previous layout: String
            /// Ask the local store that `dev` and the tests keep instead of the deployed one.
            optional --local
            /// With `--local`: the `--persist-to` folder (default .wrangler/state).
            optional --persist dir: PathBuf
            /// Shards, deployed: the Worker to ask (`GET /v1/move`), since a Durable
            /// Object's storage is read only through it.
            optional --url url: String
            /// With `--url`: an admin token (default: $ONCECLICK_ADMIN_TOKEN).
            optional --token token: String
        }
        /// Prompt sizes, then certification of a provider on a running Worker.
        cmd certify {
            /// A provider that wrangler.toml's PROVIDERS names.
            required --provider name: String
            /// The Worker (default the one `dev` serves, http://127.0.0.1:8787).
            optional --url url: String
            /// An admin token (default: $ONCECLICK_ADMIN_TOKEN, else one minted from the
            /// AUTH_SECRET in .dev.vars).
            optional --token token: String
            /// The wrangler configuration that names the provider (default wrangler.toml).
            optional --config config: PathBuf
        }
        /// Check every kind file as the build will, and show its rendered prompts.
        cmd kinds {
            /// The kinds' directory (default edge/kinds).
            optional --dir dir: PathBuf
            /// Also write the kinds' TypeScript types to this file, in the app's source.
            optional --types types: PathBuf
        }
    }
}

// generated start
// The following code is generated by `xflags` macro.
// Run `env UPDATE_XFLAGS=1 cargo build` to regenerate.
#[derive(Debug)]
pub struct Xtask {
    pub subcommand: XtaskCmd,
}

#[derive(Debug)]
pub enum XtaskCmd {
    Dev(Dev),
    Test(Test),
    Token(Token),
    Sim(Sim),
    BuildEdge(BuildEdge),
    Lint(Lint),
    Sdk(Sdk),
    Bench(Bench),
    Load(Load),
    MoveStatus(MoveStatus),
    Certify(Certify),
    Kinds(Kinds),
}

#[derive(Debug)]
pub struct Dev {
    pub port: Option<u16>,
    pub store: Option<String>,
}

#[derive(Debug)]
pub struct Test {
    pub browser: bool,
    pub e2e: bool,
    pub soak: bool,
    pub only: Option<String>,
    pub store: Option<String>,
}

#[derive(Debug)]
pub struct Token {
    pub owner: String,
    pub admin: bool,
    pub ttl: Option<u64>,
}

#[derive(Debug)]
pub struct Sim {
    pub seed: Option<u64>,
    pub ops: Option<u64>,
    pub world: Option<u64>,
    pub skip: Option<String>,
    pub mutant: Option<String>,
    pub mutants: bool,
    pub soak: bool,
}

#[derive(Debug)]
pub struct BuildEdge;

#[derive(Debug)]
pub struct Lint;

#[derive(Debug)]
pub struct Sdk;

#[derive(Debug)]
pub struct Bench {
    pub store: Option<String>,
    pub live: bool,
    pub stops: bool,
    pub streamed: bool,
    pub render: bool,
}

#[derive(Debug)]
pub struct Load;

#[derive(Debug)]
pub struct MoveStatus {
    pub previous: Option<String>,
    pub local: bool,
    pub persist: Option<PathBuf>,
    pub url: Option<String>,
    pub token: Option<String>,
}

#[derive(Debug)]
pub struct Certify {
    pub provider: String,
    pub url: Option<String>,
    pub token: Option<String>,
    pub config: Option<PathBuf>,
}

#[derive(Debug)]
pub struct Kinds {
    pub dir: Option<PathBuf>,
    pub types: Option<PathBuf>,
}

impl Xtask {
    #[allow(dead_code)]
    pub fn from_env_or_exit() -> Self {
        Self::from_env_or_exit_()
    }

    #[allow(dead_code)]
    pub fn from_env() -> xflags::Result<Self> {
        Self::from_env_()
    }

    #[allow(dead_code)]
    pub fn from_vec(args: Vec<std::ffi::OsString>) -> xflags::Result<Self> {
        Self::from_vec_(args)
    }
}
// generated end

fn main() {
    if let Err(e) = real_main() {
        eprintln!("xtask: {e:#}");
        std::process::exit(1);
    }
}

/// The command and its flags, or an error that ends with the usage line.
/// `--help` is an error too: the caller prints it to stdout and exits 0.
fn parse(args: Vec<OsString>) -> Result<Xtask, xflags::Error> {
    Xtask::from_vec(args).map_err(|e| match e.is_help() {
        true => e,
        false => xflags::Error::new(format!("{e}\n{USAGE}")),
    })
}

fn real_main() -> Result<()> {
    let flags = match parse(std::env::args_os().skip(1).collect()) {
        Ok(flags) => flags,
        Err(e) if e.is_help() => {
            println!("{e}");
            return Ok(());
        }
        Err(e) => bail!("{e}"),
    };
    match flags.subcommand {
        XtaskCmd::Dev(flags) => dev::run(&flags),
        XtaskCmd::Test(flags) => test::suites(&flags),
        XtaskCmd::Token(flags) => dev::token(&flags),
        XtaskCmd::BuildEdge(_) => wrangler::build_edge(&Tools::bootstrap()?),
        XtaskCmd::Lint(_) => test::lint(&project_root()),
        XtaskCmd::Sim(flags) => sim::run(&sim::args(&flags)),
        XtaskCmd::Sdk(_) => sdk::build(&Tools::bootstrap()?),
        XtaskCmd::Bench(flags) if flags.render => bench::render_only(&project_root()),
        XtaskCmd::Bench(flags) if flags.live => bench::live_only(&Tools::bootstrap()?),
        XtaskCmd::Bench(flags) if flags.stops => bench::stops_only(&Tools::bootstrap()?),
        XtaskCmd::Bench(flags) if flags.streamed => bench::streamed_only(&Tools::bootstrap()?),
        XtaskCmd::Bench(flags) => match test_worker::StoreKind::parse(flags.store.as_deref())? {
            Some(test_worker::StoreKind::Durable) => {
                bench_durable::run(&Tools::bootstrap()?).map(drop)
            }
            _ => bench::run(&Tools::bootstrap()?, &bench::FULL).map(drop),
        },
        XtaskCmd::Load(_) => load::main(),
        XtaskCmd::MoveStatus(flags) => {
            let tools = Tools::bootstrap()?;
            let root = project_root();
            let previous = move_status::previous_layout(&root, flags.previous.as_deref())?;
            let at = match (flags.local, flags.url) {
                (true, Some(_)) => bail!("move-status asks one place: --local, or --url"),
                (true, None) => move_status::Asked::Local(
                    flags
                        .persist
                        .unwrap_or_else(|| root.join(".wrangler/state")),
                ),
                (false, Some(url)) => {
                    let token = flags
                        .token
                        .or_else(|| std::env::var("ONCECLICK_ADMIN_TOKEN").ok())
                        .context(
                            "--url needs an admin token: --token, or $ONCECLICK_ADMIN_TOKEN",
                        )?;
                    move_status::Asked::Worker { url, token }
                }
                (false, None) => move_status::Asked::Deployed,
            };
            let status = move_status::status(&tools, previous, &at)?;
            println!("{}", status.verdict(previous));
            Ok(())
        }
        XtaskCmd::Kinds(flags) => {
            let dir = flags
                .dir
                .clone()
                .unwrap_or_else(|| project_root().join("edge/kinds"));
            kinds::run(&project_root(), &dir)?;
            if let Some(out) = &flags.types {
                let tools = Tools::bootstrap()?;
                kinds::write_types(&tools, &dir, out)?;
                println!("wrote the kinds' TypeScript types to {}", out.display());
            }
            Ok(())
        }
        XtaskCmd::Certify(flags) => {
            let root = project_root();
            // Any admin token: one an identity provider issued, or one minted from the
            // local secret (`.dev.vars`) when none is given.
            let admin = match flags
                .token
                .or_else(|| std::env::var("ONCECLICK_ADMIN_TOKEN").ok())
            {
                Some(token) => token,
                None => {
                    onceclick_tests::auth::mint(&dev::secret(&root)?, "xtask-certify", true, 600)?
                }
            };
            let url = flags
                .url
                .unwrap_or_else(|| "http://127.0.0.1:8787".to_owned());
            let config = flags.config.unwrap_or_else(|| root.join("wrangler.toml"));
            certify::run(&root, &config, &flags.provider, &url, &admin)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(line: &str) -> Result<Xtask, xflags::Error> {
        parse(line.split_whitespace().map(OsString::from).collect())
    }

    fn error(line: &str) -> String {
        match parse_str(line) {
            Ok(flags) => panic!("{line:?} parsed as {flags:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn each_command_takes_its_own_flags() {
        let Ok(Xtask {
            subcommand: XtaskCmd::Test(test),
        }) = parse_str("test --only jobs --soak")
        else {
            panic!("test --only jobs --soak");
        };
        assert_eq!(test.only.as_deref(), Some("jobs"));
        assert!(test.soak && !test.browser && !test.e2e);
        let Ok(Xtask {
            subcommand: XtaskCmd::Token(token),
        }) = parse_str("token --admin --owner a --ttl 60")
        else {
            panic!("token --admin --owner a --ttl 60");
        };
        assert_eq!(
            (token.owner.as_str(), token.admin, token.ttl),
            ("a", true, Some(60))
        );
        assert!(matches!(
            parse_str("dev --port 9000"),
            Ok(Xtask {
                subcommand: XtaskCmd::Dev(Dev {
                    port: Some(9000),
                    store: None
                })
            })
        ));
    }

    #[test]
    fn another_commands_flag_is_an_error_with_the_usage() {
        let e = error("dev --owner x");
        assert!(e.contains("--owner") && e.ends_with(USAGE), "{e}");
        assert!(error("lint --soak").contains("--soak"));
        assert!(error("bench --port 1").contains("--port"));
        assert!(error("test --browser extra").contains("extra"));
        assert!(error("deploy").contains("deploy"));
        assert!(error("").ends_with(USAGE));
    }

    #[test]
    fn a_missing_or_bad_value_is_an_error() {
        assert!(error("token").contains("--owner"));
        assert!(error("token --admin").contains("--owner"));
        assert!(error("certify --url http://x").contains("--provider"));
        assert!(error("test --only").contains("--only"));
        assert!(error("dev --port").contains("--port"));
        assert!(error("dev --port many").contains("--port"));
        assert!(error("token --owner a --ttl -1").contains("--ttl"));
    }

    #[test]
    fn help_is_not_an_error() {
        let e = parse_str("--help")
            .err()
            .map(|e| (e.is_help(), e.to_string()));
        assert!(matches!(e, Some((true, text)) if text.contains("xtask certify")));
    }

    /// Every command of USAGE parses with every flag it shows (placeholders as `1`), and
    /// every flag of the grammar is in USAGE.
    #[test]
    fn usage_says_what_parses() {
        let commands = USAGE
            .trim_start_matches("usage: cargo xtask <")
            .trim_end_matches('>');
        for command in commands.split(" | ") {
            let line: Vec<&str> = command
                .split(' ')
                .map(|w| w.trim_matches(['[', ']']))
                .map(|w| match w.chars().all(|c| c.is_ascii_uppercase()) {
                    true => "1",
                    false => w,
                })
                .collect();
            assert!(parse_str(&line.join(" ")).is_ok(), "{command}");
        }
        for line in Xtask::HELP_.lines() {
            let Some(flag) = line
                .trim()
                .split(' ')
                .next()
                .filter(|f| f.starts_with("--"))
            else {
                continue;
            };
            assert!(
                flag == "--help" || USAGE.contains(flag),
                "{flag} not in USAGE"
            );
        }
    }
}
