//! `onceclick-sim`: runs the simulation (what `cargo xtask sim` and `cargo xtask test`
//! call).
//!
//! - `--seed N --ops M`: worlds of [`WORLD_OPS`] operations from seed N until M
//!   operations have run; the last line is the run's figures.
//! - `--world SEED [--ops M] [--skip a,b,…]`: one world, its trace printed (a shrunk
//!   failure's replay).
//! - `--mutants`: every planted defect, each run until the simulation catches it.
//! - `--soak`: 100,000,000 operations, progress printed as it goes.

use anyhow::{bail, Context, Result};
use onceclick_sim::{
    run_world, shrink, world_seed, AnyMutant, Figures, Mutant, SqlMutant, WorldSpec, WORLD_OPS,
};
use std::collections::BTreeSet;
use std::time::Instant;

fn main() {
    if let Err(e) = run() {
        eprintln!("sim: {e:#}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |name: &str| -> Option<String> {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let number = |name: &str| -> Result<Option<u64>> {
        value(name)
            .map(|v| {
                v.parse::<u64>()
                    .with_context(|| format!("{name} {v}: not a number"))
            })
            .transpose()
    };
    let threads = number("--threads")?.unwrap_or(2).max(1) as usize;
    if let Some(seed) = number("--world")? {
        let skip: BTreeSet<u64> = value("--skip")
            .map(|list| {
                list.split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::parse)
                    .collect::<Result<_, _>>()
            })
            .transpose()
            .context("--skip: a comma-separated list of operation numbers")?
            .unwrap_or_default();
        let spec = WorldSpec {
            seed,
            ops: number("--ops")?.unwrap_or(WORLD_OPS),
            mutant: value("--mutant").map(|m| mutant(&m)).transpose()?,
            skip,
        };
        let run = run_world(&spec, true);
        for line in &run.trace {
            println!("{line}");
        }
        println!(
            "world {seed} ({:?}): {} ops, {}; {}",
            run.shape,
            run.figures.ops,
            run.summary,
            verdict(&run.violations)
        );
        if run.violations.is_empty() {
            return Ok(());
        }
        bail!("the world broke a promise");
    }
    if args.iter().any(|a| a == "--mutants") {
        return mutants(number("--seed")?.unwrap_or(1));
    }
    let soak = args.iter().any(|a| a == "--soak");
    let seed = number("--seed")?.unwrap_or(1);
    let ops = number("--ops")?.unwrap_or(if soak { 100_000_000 } else { 1_000_000 });
    let worlds = ops.div_ceil(WORLD_OPS);
    let started = Instant::now();
    let figures = run_many(seed, worlds, threads, soak, None)?;
    let seconds = started.elapsed().as_secs_f64();
    eprintln!(
        "sim: {:.1} s, {:.0} µs per operation (not asserted: this machine is shared)",
        seconds,
        seconds * 1e6 / figures.ops.max(1) as f64
    );
    println!(
        "sim: seed {seed}: {} worlds, {} operations, {} requests, {} deliveries ({} redelivered), {} provider calls, {} reconciler passes, {} crashes, {} clock jumps, {} store faults in {} batches, {} checks on {} jobs; no promise broken",
        worlds,
        figures.ops,
        figures.requests,
        figures.deliveries,
        figures.redeliveries,
        figures.provider_calls,
        figures.reconciles,
        figures.crashes,
        figures.clock_jumps,
        figures.store_faults,
        figures.batches,
        figures.checks,
        figures.jobs,
    );
    if figures.ops < ops {
        bail!("only {} of {ops} operations ran", figures.ops);
    }
    Ok(())
}

fn verdict(violations: &[onceclick_sim::Violation]) -> String {
    match violations.first() {
        None => "no promise broken".to_owned(),
        Some(v) => format!("BROKEN at operation {}: {}", v.op, v.what),
    }
}

/// Runs `worlds` worlds on `threads` threads; the first failure is shrunk and printed.
fn run_many(
    seed: u64,
    worlds: u64,
    threads: usize,
    progress: bool,
    mutant: Option<AnyMutant>,
) -> Result<Figures> {
    let next = std::sync::atomic::AtomicU64::new(0);
    let failed = std::sync::Mutex::new(None::<WorldSpec>);
    let total = std::sync::Mutex::new(Figures::default());
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if n >= worlds || failed.lock().map(|f| f.is_some()).unwrap_or(true) {
                    return;
                }
                let spec = WorldSpec {
                    seed: world_seed(seed, n),
                    ops: WORLD_OPS,
                    mutant,
                    skip: BTreeSet::new(),
                };
                let run = run_world(&spec, false);
                if let Ok(mut t) = total.lock() {
                    t.add(&run.figures);
                    if progress && (n + 1) % 500 == 0 {
                        eprintln!(
                            "sim: {} worlds, {} operations, {:.0} s",
                            n + 1,
                            t.ops,
                            started.elapsed().as_secs_f64()
                        );
                    }
                }
                if !run.violations.is_empty() {
                    if let Ok(mut f) = failed.lock() {
                        f.get_or_insert(spec);
                    }
                    return;
                }
            });
        }
    });
    let figures = total.into_inner().unwrap_or_default();
    if let Some(spec) = failed.into_inner().ok().flatten() {
        report(&spec);
        bail!(
            "the simulation broke a promise (seed {seed}, world {})",
            spec.seed
        );
    }
    Ok(figures)
}

/// Prints a failing world, shrunk, and how to replay it.
fn report(spec: &WorldSpec) {
    let small = shrink(spec, 300);
    let run = run_world(&small, true);
    let kept = small.ops - small.skip.iter().filter(|i| **i < small.ops).count() as u64;
    eprintln!(
        "sim: world {} broke a promise; shrunk to {kept} of its operations:",
        spec.seed
    );
    for line in &run.trace {
        eprintln!("  {line}");
    }
    eprintln!("sim: {}", verdict(&run.violations));
    let skip: Vec<String> = small
        .skip
        .iter()
        .filter(|i| **i < small.ops)
        .map(u64::to_string)
        .collect();
    eprintln!(
        "sim: replay: cargo xtask sim --world {} --ops {}{}{}",
        small.seed,
        small.ops,
        if skip.is_empty() {
            String::new()
        } else {
            format!(" --skip {}", skip.join(","))
        },
        spec.mutant
            .map(|m| format!(" --mutant {}", name(m)))
            .unwrap_or_default()
    );
}

const MUTANTS: &[(&str, AnyMutant)] = &[
    (
        "cas-without-completed-by",
        AnyMutant::Sql(SqlMutant::CasWithoutCompletedBy),
    ),
    (
        "refused-resolve-writes-event",
        AnyMutant::Rust(Mutant::RefusedResolveWritesEvent),
    ),
    (
        "lost-running-fails",
        AnyMutant::Sql(SqlMutant::LostRunningFails),
    ),
    (
        "purge-takes-unknown",
        AnyMutant::Sql(SqlMutant::PurgeTakesUnknown),
    ),
    (
        "create-skips-fingerprint",
        AnyMutant::Rust(Mutant::CreateSkipsFingerprint),
    ),
    (
        "sharded-create-skips-before",
        AnyMutant::Rust(Mutant::ShardedCreateSkipsBefore),
    ),
];

fn mutant(name: &str) -> Result<AnyMutant> {
    MUTANTS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, m)| *m)
        .with_context(|| {
            format!(
                "no mutant {name}; the mutants: {}",
                MUTANTS.iter().map(|m| m.0).collect::<Vec<_>>().join(", ")
            )
        })
}

fn name(m: AnyMutant) -> &'static str {
    MUTANTS
        .iter()
        .find(|(_, x)| *x == m)
        .map_or("?", |(n, _)| n)
}

/// Every planted defect must be caught: worlds run (one thread, in order) until one
/// breaks a promise; the operations it took are printed.
fn mutants(seed: u64) -> Result<()> {
    let mut missed = Vec::new();
    for (label, m) in MUTANTS {
        let started = Instant::now();
        let mut ops = 0;
        let mut caught = None;
        for n in 0..200 {
            let spec = WorldSpec {
                seed: world_seed(seed, n),
                ops: WORLD_OPS,
                mutant: Some(*m),
                skip: BTreeSet::new(),
            };
            let run = run_world(&spec, false);
            if let Some(v) = run.violations.first() {
                ops += v.op + 1;
                caught = Some((n, v.clone()));
                break;
            }
            ops += run.figures.ops;
        }
        match caught {
            Some((n, v)) => println!(
                "sim: mutant {label}: caught after {ops} operations (world {}, operation {}): {} ({:.1} s)",
                n + 1,
                v.op,
                v.what,
                started.elapsed().as_secs_f64()
            ),
            None => {
                println!("sim: mutant {label}: NOT caught in {ops} operations");
                missed.push(*label);
            }
        }
    }
    if !missed.is_empty() {
        bail!(
            "the simulation missed {} planted defects: {}",
            missed.len(),
            missed.join(", ")
        );
    }
    Ok(())
}
