//! How much of the bench runs: its plans, its workloads and their connections, which
//! the run (`bench.rs`) and its results (`bench_results.rs`) both read.

/// Open connections of every workload.
pub(crate) const CONNECTIONS: usize = 16;

/// How much of the bench to run.
pub(crate) struct Plan {
    pub(crate) rounds: usize,
    pub(crate) warmup_ms: u64,
    pub(crate) measured_ms: u64,
    /// Jobs created for the end-to-end figure.
    pub(crate) e2e_jobs: usize,
    /// Seed a second D1 with this many jobs and measure create on it (0: skip).
    pub(crate) seeded_jobs: usize,
    /// The whole report: sizes and the wasm start, the dispatch's round trips, the
    /// SDK's cost, and BENCHMARKS.md with bench/results.json. `cargo xtask test` checks
    /// the sizes and the round trips itself, so its short run skips them.
    pub(crate) report: bool,
}

/// `cargo xtask bench`.
pub(crate) const FULL: Plan = Plan {
    rounds: 2,
    warmup_ms: 1000,
    measured_ms: 4000,
    e2e_jobs: 1000,
    seeded_jobs: 1_000_000,
    report: true,
};

/// The short run in `cargo xtask test`: about 20 seconds of load; ratios printed only.
pub(crate) const SHORT: Plan = Plan {
    rounds: 1,
    warmup_ms: 400,
    measured_ms: 2000,
    e2e_jobs: 200,
    seeded_jobs: 0,
    report: false,
};

/// The workloads, in the order of the first round.
pub(crate) const WORKLOADS: [&str; 8] = [
    "ok",
    "insert",
    "create",
    "replay",
    "read_304",
    "create_one",
    "create_1m",
    "create_dispatched",
];
