//! `cargo xtask sim`, and the simulation's stage of `cargo xtask test`: the
//! `onceclick-sim` binary (`sim/`), built in the dev profile with the simulator, the
//! core and SQLite optimised (the workspace's profile overrides).

use crate::tools::project_root;
use anyhow::Result;
use std::process::Command;

/// Operations `cargo xtask test` runs (a million until issue 49, when CI had to come
/// back under 45 minutes; `cargo xtask sim` alone still runs a million).
pub(crate) const TEST_OPS: u64 = 800_000;

/// The binary's arguments for the command's flags.
pub(crate) fn args(flags: &crate::Sim) -> Vec<String> {
    let mut out = Vec::new();
    let mut push = |name: &str, value: Option<String>| {
        if let Some(value) = value {
            out.push(name.to_owned());
            out.push(value);
        }
    };
    push("--seed", flags.seed.map(|s| s.to_string()));
    push("--ops", flags.ops.map(|s| s.to_string()));
    push("--world", flags.world.map(|s| s.to_string()));
    push("--skip", flags.skip.clone());
    push("--mutant", flags.mutant.clone());
    if flags.mutants {
        out.push("--mutants".to_owned());
    }
    if flags.soak {
        out.push("--soak".to_owned());
    }
    out
}

/// Runs the simulator with `args`.
pub(crate) fn run(args: &[String]) -> Result<()> {
    crate::tools::run(
        Command::new("cargo")
            .args(["run", "--quiet", "-p", "onceclick-sim", "--"])
            .args(args)
            .current_dir(project_root()),
    )
}

/// The test stage: a million operations from this commit's seed (printed, so that a
/// failure replays with `cargo xtask sim --seed N`; `ONCECLICK_SIM_SEED` overrides it),
/// then every planted defect, each of which must be caught.
pub(crate) fn test_stage() -> Result<()> {
    let seed = match std::env::var("ONCECLICK_SIM_SEED") {
        Ok(seed) => seed,
        Err(_) => commit_seed().to_string(),
    };
    eprintln!("xtask: the simulation, seed {seed} ({TEST_OPS} operations; `cargo xtask sim --seed {seed} --ops {TEST_OPS}` replays it)");
    run(&[
        "--seed".to_owned(),
        seed,
        "--ops".to_owned(),
        TEST_OPS.to_string(),
    ])?;
    eprintln!("xtask: the simulation's planted defects");
    run(&["--mutants".to_owned()])
}

/// A seed from the commit under test: the same for every run of one commit (a failure
/// replays), another for the next commit (each explores new interleavings).
fn commit_seed() -> u64 {
    let head = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(project_root())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    u64::from_str_radix(head.get(..15).unwrap_or("1"), 16).unwrap_or(1)
}
