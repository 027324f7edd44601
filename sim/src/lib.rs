//! The deterministic simulation of onceclick's core.
//!
//! The core's own decisions (`onceclick-core`, the same code the Worker runs: the
//! handlers' `decide` functions, the dispatcher, the reconciler and every store call
//! with its SQL) run here under a seeded scheduler, against SQLite with the Worker's migrations,
//! with a virtual clock, a queue that delays, reorders and redelivers, scripted
//! providers, crashes that drop an isolate's tasks, and store faults on either side of
//! the commit. A reference model ([`model`]: plain functions over what a client sees,
//! which any client of the Worker can use) says what each answer may be; the invariants
//! of RELIABILITY.md are checked after every step, on the jobs that step touched. A run
//! is many small worlds, each from a seed derived from the run's; a failing world is
//! shrunk to the operations it needs and printed as a trace that `cargo xtask sim`
//! replays.

mod db;
mod exec;
mod handing;
mod host;
mod live;
pub mod model;
mod platform;
mod requests;
mod rng;
mod script;
mod world;
mod world_platform;

pub use db::{AnyMutant, SqlMutant};
pub use live::LiveFigures;
pub use onceclick_core::mutant::Mutant;
pub use world::{Figures, Shape, Violation};

use db::FaultRates;
use onceclick_core::kinds::Kinds;
use onceclick_protocol::moving::StoreLayout;
use onceclick_protocol::shard::ShardCount;
use rng::Rng;
use std::collections::BTreeSet;
use world::World;

/// Where every world's virtual clock starts.
pub(crate) const EPOCH_MS: u64 = 1_800_000_000_000;

/// Operations per world.
pub const WORLD_OPS: u64 = 2_000;

/// One world to run.
#[derive(Clone, Debug)]
pub struct WorldSpec {
    /// The world's own seed (from which everything in it follows).
    pub seed: u64,
    pub ops: u64,
    pub mutant: Option<AnyMutant>,
    /// Operations left out (shrinking).
    pub skip: BTreeSet<u64>,
    /// The kinds the world declares: the build's (`edge/kinds/`) unless a test gives
    /// its own set.
    pub kinds: &'static Kinds,
}

/// `n` shards (a power of two the simulation picks).
fn shards(n: u32) -> StoreLayout {
    ShardCount::new(n).map_or(StoreLayout::D1, StoreLayout::Shards)
}

impl WorldSpec {
    /// The world's store layout (and its move, if any), from its seed.
    pub fn layout(&self) -> Shape {
        self.shape().0
    }

    /// The world's shape and faults, from its seed.
    fn shape(&self) -> (Shape, FaultRates) {
        let mut rng = Rng::new(Rng::derive(self.seed, u64::MAX));
        let shape = match rng.below(6) {
            0 | 1 => Shape::D1,
            2 => Shape::Shards(2),
            3 => Shape::Shards(4),
            // Halfway, a move: onto shards, to more shards, to fewer, back to D1.
            _ => {
                let (d1, two, four) = (StoreLayout::D1, shards(2), shards(4));
                let (from, to) =
                    [(d1, two), (two, four), (four, two), (two, d1)][rng.below(4) as usize];
                Shape::Moved { from, to }
            }
        };
        let faults = match rng.below(4) {
            0 => FaultRates::default(),
            _ => FaultRates {
                before: 5_000 + rng.below(20_000) as u32,
                after: 5_000 + rng.below(20_000) as u32,
            },
        };
        (shape, faults)
    }
}

/// What one world came to.
#[derive(Clone, Debug)]
pub struct WorldRun {
    pub shape: Shape,
    pub figures: Figures,
    pub violations: Vec<Violation>,
    pub trace: Vec<String>,
    pub summary: String,
    /// For a world with an SQL mutant: whether its statement ever ran.
    pub mutant_ran: bool,
}

/// Runs one world; with `trace`, keeps a line per event.
pub fn run_world(spec: &WorldSpec, trace: bool) -> WorldRun {
    let (shape, faults) = spec.shape();
    crate::platform::install();
    crate::platform::seed(spec.seed);
    crate::platform::set_now_ms(EPOCH_MS as f64);
    let _ = crate::platform::drain_log();
    let world = World::new(
        spec.seed,
        shape,
        spec.mutant,
        trace,
        WORLD_OPS / 2,
        spec.kinds,
    );
    world.setup(faults);
    for index in 0..spec.ops {
        if spec.skip.contains(&index) {
            continue;
        }
        world.operation(index, Rng::derive(spec.seed, index));
        // A world stops at its first broken promise: the rest would follow from it.
        if !world.violations().is_empty() {
            break;
        }
    }
    if world.violations().is_empty() {
        world.settle();
    }
    onceclick_core::mutant::plant(None);
    WorldRun {
        shape,
        figures: world.figures(),
        violations: world.violations(),
        trace: world.trace(),
        summary: world.summary(),
        mutant_ran: world.mutant_ran(),
    }
}

/// The seed of world `n` of a run seeded `seed`.
pub fn world_seed(seed: u64, n: u64) -> u64 {
    Rng::derive(seed, n)
}

/// Shrinks a failing world: first to the operations up to its failure, then without
/// every operation (in halving chunks) whose absence still fails it. Returns the
/// smaller spec (it still fails).
pub fn shrink(spec: &WorldSpec, budget: u32) -> WorldSpec {
    let mut best = spec.clone();
    let first = run_world(&best, false);
    let Some(v) = first.violations.first() else {
        return best;
    };
    // A failure found while settling is numbered past the last operation.
    best.ops = (v.op + 1).min(spec.ops);
    if run_world(&best, false).violations.is_empty() {
        best.ops = spec.ops;
    }
    let mut runs = 0;
    let mut chunk = (best.ops / 2).max(1);
    while chunk >= 1 && runs < budget {
        let mut start = 0;
        let mut changed = false;
        while start < best.ops && runs < budget {
            let mut trial = best.clone();
            let cut: Vec<u64> = (start..(start + chunk).min(best.ops))
                .filter(|i| !trial.skip.contains(i))
                .collect();
            if cut.is_empty() {
                start += chunk;
                continue;
            }
            trial.skip.extend(cut);
            runs += 1;
            let run = run_world(&trial, false);
            if let Some(v) = run.violations.first() {
                trial.ops = (v.op + 1).min(best.ops);
                best = trial;
                changed = true;
            } else {
                start += chunk;
            }
        }
        if !changed {
            if chunk == 1 {
                break;
            }
            chunk /= 2;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same world twice: the same trace, line for line, and the same figures.
    #[test]
    fn a_world_replays_exactly_from_its_seed() {
        let spec = WorldSpec {
            kinds: onceclick_core::kinds::Kinds::built(),
            seed: world_seed(7, 3),
            ops: 400,
            mutant: None,
            skip: BTreeSet::new(),
        };
        let (a, b) = (run_world(&spec, true), run_world(&spec, true));
        assert!(a.trace.len() > 100, "a trace of {} lines", a.trace.len());
        assert_eq!(a.trace, b.trace);
        assert_eq!(a.summary, b.summary);
        assert_eq!(a.figures.batches, b.figures.batches);
    }

    /// A kind is one file: a kind file dropped into a copy of `edge/kinds/`, loaded as
    /// the build loads it, runs in a world through the core's real code, no Rust
    /// changed; its jobs succeed with answers that keep its contract.
    #[test]
    fn a_kind_file_dropped_in_runs_with_no_rust_changed() {
        let dir = std::env::temp_dir().join(format!("onceclick-sim-kinds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let shipped = concat!(env!("CARGO_MANIFEST_DIR"), "/../edge/kinds");
        for entry in std::fs::read_dir(shipped).unwrap() {
            let path = entry.unwrap().path();
            std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
        }
        std::fs::write(dir.join("reply.json"), REPLY_KIND).unwrap();
        let files = onceclick_protocol::contract::load_dir(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        let files = files.unwrap();
        let named: Vec<(String, &str)> = files
            .iter()
            .map(|f| {
                (
                    f.path.file_name().unwrap().to_string_lossy().into_owned(),
                    f.text.as_str(),
                )
            })
            .collect();
        let named: Vec<(&str, &str)> = named.iter().map(|(n, t)| (n.as_str(), *t)).collect();
        let kinds: &'static Kinds = Box::leak(Box::new(Kinds::compile(&named)));
        let mut succeeded = 0;
        for n in 0..4 {
            let spec = WorldSpec {
                kinds,
                seed: world_seed(45, n),
                ops: WORLD_OPS,
                mutant: None,
                skip: BTreeSet::new(),
            };
            let run = run_world(&spec, false);
            assert!(run.violations.is_empty(), "{:?}", run.violations);
            succeeded += run.figures.succeeded.get("reply").copied().unwrap_or(0);
        }
        assert!(succeeded > 0, "no job of the dropped kind succeeded");
    }

    /// A team's own kind, in no Rust file: a text answer with few-shot messages,
    /// nested input and its own parameters.
    const REPLY_KIND: &str = r#"{
        "kind": "reply",
        "input_schema": {"type": "object", "additionalProperties": false,
            "required": ["text", "customer"],
            "properties": {"text": {"type": "string", "minLength": 1, "maxLength": 2000},
                "customer": {"type": "object", "required": ["name"],
                    "properties": {"name": {"type": "string", "minLength": 1}}}}},
        "messages": [
            {"role": "system", "content": "You draft short, kind replies to customers."},
            {"role": "user", "content": "Bo asks: where is my order?"},
            {"role": "assistant", "content": "Dear Bo, your order left today."},
            {"role": "user", "content": "{{customer.name}} asks: {{text}}"}],
        "answer": "text",
        "output_schema": {"type": "string", "minLength": 1, "maxLength": 600},
        "parameters": {"temperature": 0.7, "max_tokens": 300},
        "providers": ["primary", "fallback"],
        "golden": [{"input": {"text": "Can I change my delivery address?", "customer": {"name": "Ada"}},
                    "output": "Dear Ada, yes: reply with the new address and we will update it."}]
    }"#;

    /// The shrinker keeps a failure: a planted defect's world, shrunk, still fails, in
    /// fewer operations.
    #[test]
    fn a_shrunk_failure_still_fails() {
        let spec = WorldSpec {
            kinds: onceclick_core::kinds::Kinds::built(),
            seed: world_seed(1, 0),
            ops: WORLD_OPS,
            mutant: Some(AnyMutant::Rust(Mutant::CreateSkipsFingerprint)),
            skip: BTreeSet::new(),
        };
        let small = shrink(&spec, 100);
        let kept = small.ops - small.skip.iter().filter(|i| **i < small.ops).count() as u64;
        assert!(kept < 20, "shrunk to {kept} operations");
        assert!(!run_world(&small, false).violations.is_empty());
    }
}
