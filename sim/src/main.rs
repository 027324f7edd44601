//! `onceclick-sim`: runs the simulation (what `cargo xtask sim` and `cargo xtask test`
//! call).
//!
//! - `--seed N --ops M`: worlds of [`WORLD_OPS`] operations from seed N until M
//!   operations have run; the last line is the run's figures.
//! - `--world SEED [--ops M] [--skip a,b,…]`: one world, its trace printed (a shrunk
//!   failure's replay).
//! - `--mutants`: every planted defect, each run until the simulation catches it;
//!   `--mutant NAME` (without `--world`): that one alone.
//! - `--soak`: 100,000,000 operations, progress printed as it goes.

use anyhow::{bail, Context, Result};
use onceclick_protocol::moving::StoreLayout;
use onceclick_sim::{
    run_world, shrink, world_seed, AnyMutant, Figures, Mutant, Shape, SqlMutant, WorldSpec,
    WORLD_OPS,
};
use std::collections::BTreeSet;
use std::time::Instant;

fn main() {
    if let Err(e) = run() {
        eprintln!("sim: {e:#}");
        std::process::exit(1);
    }
}

/// The command line: `--name value` options and `--flag`s.
struct Args(Vec<String>);

impl Args {
    fn value(&self, name: &str) -> Option<String> {
        self.0
            .iter()
            .position(|a| a == name)
            .and_then(|i| self.0.get(i + 1).cloned())
    }

    fn number(&self, name: &str) -> Result<Option<u64>> {
        self.value(name)
            .map(|v| {
                v.parse::<u64>()
                    .with_context(|| format!("{name} {v}: not a number"))
            })
            .transpose()
    }

    fn flag(&self, name: &str) -> bool {
        self.0.iter().any(|a| a == name)
    }
}

fn run() -> Result<()> {
    let args = Args(std::env::args().skip(1).collect());
    let threads = args.number("--threads")?.unwrap_or(2).max(1) as usize;
    if let Some(seed) = args.number("--world")? {
        let skip = args
            .value("--skip")
            .map(|list| parse_ranges(&list))
            .transpose()
            .context("--skip: operation numbers and ranges, as 3,7-12,40")?
            .unwrap_or_default();
        let spec = WorldSpec {
            kinds: onceclick_core::kinds::Kinds::built(),
            seed,
            ops: args.number("--ops")?.unwrap_or(WORLD_OPS),
            mutant: args.value("--mutant").map(|m| mutant(&m)).transpose()?,
            skip,
        };
        return one_world(spec);
    }
    if args.flag("--mutants") {
        return mutants(args.number("--seed")?.unwrap_or(1), None);
    }
    if let Some(name) = args.value("--mutant") {
        mutant(&name)?;
        return mutants(args.number("--seed")?.unwrap_or(1), Some(&name));
    }
    let soak = args.flag("--soak");
    let seed = args.number("--seed")?.unwrap_or(1);
    let ops = args
        .number("--ops")?
        .unwrap_or(if soak { 100_000_000 } else { 1_000_000 });
    // One world's worth or less: that world (the run's first), with its trace.
    if ops <= WORLD_OPS {
        return one_world(WorldSpec {
            kinds: onceclick_core::kinds::Kinds::built(),
            seed: world_seed(seed, 0),
            ops,
            mutant: None,
            skip: BTreeSet::new(),
        });
    }
    let worlds = ops.div_ceil(WORLD_OPS);
    let started = Instant::now();
    let figures = run_many(seed, worlds, threads, soak, None)?;
    let seconds = started.elapsed().as_secs_f64();
    eprintln!(
        "sim: {:.1} s, {:.0} µs per operation (not asserted: this machine is shared)",
        seconds,
        seconds * 1e6 / figures.ops.max(1) as f64
    );
    println!("{}", figures_line(seed, worlds, &figures));
    every_path_reached(ops, &figures)
}

/// The run's last line: what its worlds did.
fn figures_line(seed: u64, worlds: u64, f: &Figures) -> String {
    format!(
        "sim: seed {seed}: {} worlds, {} operations, {} requests, {} deliveries ({} redelivered), {} provider calls ({} stopped), {} shard alarms ({} attempts handed on), {} reconciler passes, {} crashes, {} clock jumps, {} store faults in {} batches, {} checks on {} jobs; live: {} streams opened, {} reconnected, {} events, {} of {} notifications lost, {} hub re-reads, {} hub restarts, {} hand-offs of text ({} failed, {} after an eviction, {} refused as ended, {} answered with no stream watching; {} pokes, {} of them to a call with text to hand on) on {} connections to hubs ({} not opened, {} dropped), {} pieces of text sent, {} chunks of text kept ({} at an attempt's unknown end; {} writes failed), {} hub alarms that read a job for its kept text ({} deleted it), {} claims told their hub after their provider call began; jobs succeeded by kind: {}; {} certifications made again after a redeploy; {} deliveries whose watch reached its cap; moves: {}; creates answered from the layout a move left: {}; no promise broken",
        worlds,
        f.ops,
        f.requests,
        f.deliveries,
        f.redeliveries,
        f.provider_calls,
        f.stops,
        f.alarms,
        f.handed_off,
        f.reconciles,
        f.crashes,
        f.clock_jumps,
        f.store_faults,
        f.batches,
        f.checks,
        f.jobs,
        f.live.opens,
        f.live.reconnects,
        f.live.events,
        f.live.lost,
        f.live.told,
        f.live.rereads,
        f.live.restarts,
        f.live.handed,
        f.live.hand_failed,
        f.live.evictions,
        f.live.refused_ended,
        f.live.alone,
        f.live.pokes,
        f.live.pokes_due,
        f.live.connections,
        f.live.open_failed,
        f.live.dropped,
        f.live.pieces,
        f.live.kept,
        f.live.kept_at_end,
        f.live.keep_failed,
        f.live.kept_checks,
        f.live.check_deleted,
        f.live.calls_beside,
        f.succeeded
            .iter()
            .map(|(kind, n)| format!("{kind} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
        f.recertified,
        f.watch_capped,
        f.moves
            .iter()
            .map(|(kind, n)| format!("{kind} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
        f.previous_answers
            .iter()
            .map(|(kind, n)| format!("{kind} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
    )
}

/// A run long enough to reach every rare path must have reached it: otherwise the
/// checks on that path held for nothing.
fn every_path_reached(ops: u64, figures: &Figures) -> Result<()> {
    if figures.ops < ops {
        bail!("only {} of {ops} operations ran", figures.ops);
    }
    // A run long enough to cancel calls in flight must have stopped some: otherwise the
    // check that a stop stops held for nothing.
    if ops >= 100_000 && figures.stops == 0 {
        bail!("no provider call was stopped in {ops} operations: the stop went untested");
    }
    // Likewise the shards' hand-off: a run that sharded no create checked nothing of it.
    if ops >= 100_000 && figures.watch_capped == 0 {
        bail!("no delivery's watch reached its cap in {ops} operations: the cap went untested");
    }
    if ops >= 100_000 && figures.handed_off == 0 {
        bail!("no shard handed a create on in {ops} operations: the hand-off went untested");
    }
    // And the live channel: streams that never reconnected, or a world in which no
    // notification was lost, checked nothing of the re-read.
    let live = figures.live;
    let untested = live.reconnects == 0 || live.lost == 0 || live.restarts == 0;
    if ops >= 100_000
        && (untested
            || live.pieces == 0
            || live.hand_failed == 0
            || live.open_failed == 0
            || live.dropped == 0
            || live.evictions == 0
            || live.kept == 0
            || live.kept_at_end == 0
            || live.keep_failed == 0
            || live.check_deleted == 0
            || live.alone == 0
            || live.pokes_due == 0
            || live.calls_beside == 0)
    {
        bail!("the live channel went untested in {ops} operations: {live:?}");
    }
    // And every kind: a kind no job of which succeeded had its answers checked for
    // nothing (a text answer, a rule on the input, a nested answer).
    let kinds = onceclick_core::kinds::Kinds::built().all();
    let missed: Vec<&str> = kinds
        .iter()
        .map(|k| k.name())
        .filter(|k| !figures.succeeded.contains_key(*k))
        .collect();
    // And the moves: in each kind of move, some key bound before it answered from the
    // layout it left (a run this long has about 66 moved worlds, 16 of each kind).
    let moves = [
        "d1 → durable:2",
        "durable:2 → durable:4",
        "durable:4 → durable:2",
        "durable:2 → d1",
    ];
    let unanswered: Vec<&str> = moves
        .into_iter()
        .filter(|m| !figures.previous_answers.contains_key(*m))
        .collect();
    if ops >= 400_000 && !unanswered.is_empty() {
        bail!(
            "the moves went untested in {ops} operations: no create was answered from the layout left by {unanswered:?} (moves made: {:?})",
            figures.moves
        );
    }
    if ops >= 100_000 && figures.recertified == 0 {
        bail!("no redeploy's voided certification was made again in {ops} operations: the background pass went untested");
    }
    if ops >= 100_000 && !missed.is_empty() {
        bail!("no job of {missed:?} succeeded in {ops} operations: their answers went untested");
    }
    Ok(())
}

/// `3,7-12,40` for the numbers 3, 7 to 12 and 40 (in order).
fn ranges(numbers: impl Iterator<Item = u64>) -> String {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for n in numbers {
        match out.last_mut() {
            Some((_, end)) if *end + 1 == n => *end = n,
            _ => out.push((n, n)),
        }
    }
    out.iter()
        .map(|(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn parse_ranges(list: &str) -> Result<BTreeSet<u64>> {
    let mut out = BTreeSet::new();
    for part in list.split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (u64, u64) = (a.parse()?, b.parse()?);
        out.extend(a..=b);
    }
    Ok(out)
}

/// Runs one world and prints its trace and a last line; an error if it broke a promise.
fn one_world(spec: WorldSpec) -> Result<()> {
    let run = run_world(&spec, true);
    for line in &run.trace {
        println!("{line}");
    }
    println!(
        "world {} ({:?}): {} ops, {}; {}",
        spec.seed,
        run.shape,
        run.figures.ops,
        run.summary,
        verdict(&run.violations)
    );
    if run.violations.is_empty() {
        return Ok(());
    }
    bail!("the world broke a promise")
}

fn verdict(violations: &[onceclick_sim::Violation]) -> String {
    match violations.first() {
        None => "no promise broken".to_owned(),
        Some(v) => format!("BROKEN at operation {}: {}", v.op, v.what),
    }
}

/// Runs `worlds` worlds on `threads` threads. The lowest-numbered failing world is
/// shrunk and printed (every world below it runs, so which one that is does not depend
/// on the threads); a world that panics counts as failing, with its seed.
fn run_many(
    seed: u64,
    worlds: u64,
    threads: usize,
    progress: bool,
    mutant: Option<AnyMutant>,
) -> Result<Figures> {
    use std::sync::atomic::{AtomicU64, Ordering};
    let next = AtomicU64::new(0);
    let first_failure = AtomicU64::new(u64::MAX);
    let failed =
        std::sync::Mutex::new(std::collections::BTreeMap::<u64, (WorldSpec, String)>::new());
    let total = std::sync::Mutex::new(Figures::default());
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= worlds || n > first_failure.load(Ordering::Relaxed) {
                    return;
                }
                let spec = WorldSpec {
                    kinds: onceclick_core::kinds::Kinds::built(),
                    seed: world_seed(seed, n),
                    ops: WORLD_OPS,
                    mutant,
                    skip: BTreeSet::new(),
                };
                let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    run_world(&spec, false)
                }));
                let broken = match &run {
                    Ok(run) => run
                        .violations
                        .first()
                        .map(|v| format!("operation {}: {}", v.op, v.what)),
                    Err(panic) => Some(format!(
                        "panicked: {}",
                        panic
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                            .unwrap_or_default()
                    )),
                };
                if let (Ok(run), Ok(mut t)) = (&run, total.lock()) {
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
                if let Some(what) = broken {
                    first_failure.fetch_min(n, Ordering::Relaxed);
                    if let Ok(mut f) = failed.lock() {
                        f.insert(n, (spec, what));
                    }
                }
            });
        }
    });
    let figures = total.into_inner().unwrap_or_default();
    let lowest = failed.into_inner().ok().and_then(|f| f.into_iter().next());
    if let Some((n, (spec, what))) = lowest {
        eprintln!("sim: world {n} (seed {}) {what}", spec.seed);
        report(&spec);
        bail!(
            "the simulation broke a promise (seed {seed}, world {n}, its seed {})",
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
    let skip = ranges(small.skip.iter().copied().filter(|i| *i < small.ops));
    eprintln!(
        "sim: replay: cargo xtask sim --world {} --ops {}{}{}",
        small.seed,
        small.ops,
        if skip.is_empty() {
            String::new()
        } else {
            format!(" --skip {skip}")
        },
        spec.mutant
            .map(|m| format!(" --mutant {}", name(m)))
            .unwrap_or_default()
    );
}

/// The planted defects: a name, the defect, and what its catch must say (a catch for
/// another reason would not show that the check meant for it works).
type Planted = (&'static str, AnyMutant, &'static [&'static str]);

const MUTANTS: &[Planted] = &[
    (
        "cas-without-completed-by",
        AnyMutant::Sql(SqlMutant::CasWithoutCompletedBy),
        &["winners", "result changed"],
    ),
    (
        "refused-resolve-writes-event",
        AnyMutant::Rust(Mutant::RefusedResolveWritesEvent),
        &["was refused"],
    ),
    (
        "lost-running-fails",
        AnyMutant::Sql(SqlMutant::LostRunningFails),
        &["paid work"],
    ),
    (
        "purge-takes-unknown",
        AnyMutant::Sql(SqlMutant::PurgeTakesUnknown),
        &["purged while"],
    ),
    (
        "claim-leaves-position",
        AnyMutant::Sql(SqlMutant::ClaimLeavesPosition),
        &["log numbers its changes"],
    ),
    (
        "create-skips-fingerprint",
        AnyMutant::Rust(Mutant::CreateSkipsFingerprint),
        &["of another request"],
    ),
    (
        "call-outlives-cancel",
        AnyMutant::Rust(Mutant::CallOutlivesCancel),
        &["a stop that did not stop"],
    ),
    (
        "sharded-create-skips-before",
        AnyMutant::Rust(Mutant::ShardedCreateSkipsBefore),
        &["jobs for"],
    ),
    (
        "hand-off-skips-sweep",
        AnyMutant::Rust(Mutant::HandOffSkipsSweep),
        &["a create whose dispatch was lost"],
    ),
    (
        "alarm-ignores-hand-off",
        AnyMutant::Rust(Mutant::AlarmIgnoresHandOff),
        &[
            "keeps attempts to hand to the queue",
            "its dispatch waits for the reconciler",
        ],
    ),
    (
        "notify-under-the-next-position",
        AnyMutant::Rust(Mutant::NotifyUnderTheNextPosition),
        &["two documents at position"],
    ),
    (
        "stream-error-after-text-retries",
        AnyMutant::Rust(Mutant::StreamErrorAfterTextRetries),
        &["streamed answer of"],
    ),
    (
        "hedge-after-text",
        AnyMutant::Rust(Mutant::HedgeAfterText),
        &["a hedge of"],
    ),
    (
        "alarm-forgets-pass",
        AnyMutant::Rust(Mutant::AlarmForgetsPass),
        &["holds jobs and has no alarm set"],
    ),
    (
        "text-hand-off-ends-with-body",
        AnyMutant::Rust(Mutant::TextHandOffEndsWithBody),
        &["never reached the hub"],
    ),
    (
        "unknown-text-not-kept-whole",
        AnyMutant::Rust(Mutant::UnknownTextNotKeptWhole),
        &["whole text is not kept"],
    ),
    (
        "hand-off-quits-after-first-piece",
        AnyMutant::Rust(Mutant::HandOffQuitsAfterFirstPiece),
        &["gave up its hand-off though its hub took every piece"],
    ),
    (
        "offer-skips-contract",
        AnyMutant::Rust(Mutant::OfferSkipsContract),
        &["breaks its kind's contract"],
    ),
    (
        "poke-ignored",
        AnyMutant::Rust(Mutant::PokeIgnored),
        &["held back its text"],
    ),
    (
        "claim-notice-first",
        AnyMutant::Rust(Mutant::ClaimNoticeFirst),
        &["came back from the hub"],
    ),
];

fn mutant(name: &str) -> Result<AnyMutant> {
    MUTANTS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, m, _)| *m)
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
        .find(|(_, x, _)| *x == m)
        .map_or("?", |(n, _, _)| n)
}

/// A planted defect's label, the worlds' name, and which worlds they are.
type InWorlds = (&'static str, &'static str, fn(Shape) -> bool);

/// The planted defects that must be caught in each of some kinds of world, not only in
/// the first world that breaks: by label, the worlds' name and which worlds they are.
const IN_WORLDS: &[InWorlds] = &[
    (
        "sharded-create-skips-before",
        "a move from D1 to shards",
        |shape| {
            matches!(
                shape,
                Shape::Moved {
                    from: StoreLayout::D1,
                    ..
                }
            )
        },
    ),
    (
        "sharded-create-skips-before",
        "a move from shards to D1",
        |shape| {
            matches!(
                shape,
                Shape::Moved {
                    to: StoreLayout::D1,
                    ..
                }
            )
        },
    ),
    (
        "sharded-create-skips-before",
        "a move between shard counts",
        |shape| {
            matches!(
                shape,
                Shape::Moved {
                    from: StoreLayout::Shards(_),
                    to: StoreLayout::Shards(_)
                }
            )
        },
    ),
];

/// Every planted defect (or only the one named) must be caught: worlds run (one
/// thread, in order) until one breaks a promise; the operations it took are printed.
fn mutants(seed: u64, only: Option<&str>) -> Result<()> {
    let mut missed = Vec::new();
    let hunts = MUTANTS
        .iter()
        .filter(|(n, _, _)| only.is_none_or(|o| o == *n))
        .flat_map(|planted| {
            let worlds: Vec<_> = IN_WORLDS.iter().filter(|w| w.0 == planted.0).collect();
            match worlds.is_empty() {
                true => vec![(planted, None)],
                false => worlds
                    .into_iter()
                    .map(|w| (planted, Some((w.1, w.2))))
                    .collect(),
            }
        });
    for ((label, m, says), in_worlds) in hunts {
        let label = match in_worlds {
            Some((worlds, _)) => format!("{label} (in {worlds})"),
            None => label.to_string(),
        };
        let started = Instant::now();
        let mut ops = 0;
        let mut caught = None;
        let mut ran = false;
        let worlds = (0..2_000)
            .map(|n| WorldSpec {
                kinds: onceclick_core::kinds::Kinds::built(),
                seed: world_seed(seed, n),
                ops: WORLD_OPS,
                mutant: Some(*m),
                skip: BTreeSet::new(),
            })
            .enumerate()
            .filter(|(_, spec)| in_worlds.is_none_or(|(_, of)| of(spec.layout())))
            .take(200);
        for (n, spec) in worlds {
            let run = run_world(&spec, false);
            ran |= run.mutant_ran;
            if let Some(v) = run.violations.first() {
                ops += v.op.min(WORLD_OPS) + 1;
                caught = Some((n, v.clone()));
                break;
            }
            ops += run.figures.ops;
        }
        let sql = matches!(m, AnyMutant::Sql(_));
        match caught {
            Some((n, v)) if says.iter().any(|s| v.what.contains(s)) && (ran || !sql) => println!(
                "sim: mutant {label}: caught after {ops} operations (world {}, operation {}): {} ({:.1} s)",
                n + 1,
                v.op,
                v.what,
                started.elapsed().as_secs_f64()
            ),
            Some((_, v)) => {
                println!("sim: mutant {label}: caught for another reason (its statement ran: {ran}): {}", v.what);
                missed.push(label);
            }
            None => {
                println!("sim: mutant {label}: NOT caught in {ops} operations");
                missed.push(label);
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
