//! `bench/results.json` from the rounds of one bench run (`bench.rs`): each workload's
//! means, the ratios taken inside each round (by rate and by CPU per request), and every
//! figure beside its target; and the summary the run prints.

use crate::bench_plan::{Plan, CONNECTIONS, WORKLOADS};
use crate::load::Outcome;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

/// Targets: (figure, comparison, bound). Ratios are per round; sizes are bytes.
const TARGETS: [(&str, &str, f64); 7] = [
    ("create / insert", ">=", 0.8),
    ("replay / create", ">=", 1.2),
    ("read_304 / ok", ">=", 0.6),
    ("create_1m p50 / create_one p50", "<=", 1.2),
    (
        "round trips (create, replay, read_304, completion)",
        "==",
        1.0,
    ),
    ("worker gzip bytes", "<=", 400.0 * 1024.0),
    ("sdk gzip bytes", "<=", 40.0 * 1024.0),
];

/// Mean of a figure over the rounds that have it.
fn mean(rounds: &[BTreeMap<&str, Outcome>], name: &str, figure: fn(&Outcome) -> f64) -> f64 {
    let values: Vec<f64> = rounds
        .iter()
        .filter_map(|r| r.get(name))
        .map(figure)
        .collect();
    values.iter().sum::<f64>() / (values.len().max(1) as f64)
}

/// `a / b` in each round that has both.
fn ratios(
    rounds: &[BTreeMap<&str, Outcome>],
    a: &str,
    b: &str,
    figure: fn(&Outcome) -> f64,
) -> Vec<f64> {
    rounds
        .iter()
        .filter_map(|r| Some(figure(r.get(a)?) / figure(r.get(b)?)))
        .collect()
}

pub(crate) fn results(
    rounds: &[BTreeMap<&str, Outcome>],
    e2e: &Value,
    cost: &Value,
    sizes: &Value,
    plan: &Plan,
    bench_time: Duration,
    build_time: Duration,
) -> Value {
    let rate = |o: &Outcome| o.rate;
    let p50 = |o: &Outcome| o.p50_ms;
    let mut workloads = serde_json::Map::new();
    for name in WORKLOADS {
        if rounds.iter().all(|r| !r.contains_key(name)) {
            continue;
        }
        let trips: BTreeMap<u32, usize> = rounds
            .iter()
            .filter_map(|r| r.get(name))
            .flat_map(|o| o.round_trips.clone())
            .fold(BTreeMap::new(), |mut m, (k, v)| {
                *m.entry(k).or_default() += v;
                m
            });
        workloads.insert(
            name.into(),
            json!({
                "rate": mean(rounds, name, rate),
                "p50_ms": mean(rounds, name, p50),
                "p99_ms": mean(rounds, name, |o| o.p99_ms),
                "cpu_ms_per_request": mean(rounds, name, |o| o.cpu_ms_per_request),
                "requests": rounds.iter().filter_map(|r| r.get(name)).map(|o| o.requests).sum::<usize>(),
                "per_round": rounds.iter().filter_map(|r| r.get(name)).map(|o| o.rate).collect::<Vec<_>>(),
                "round_trips": trips,
            }),
        );
    }
    let ratio_of = |a, b| ratios(rounds, a, b, rate);
    // The same ratios from CPU per request (b's over a's): what one core would serve,
    // far steadier than rates on a shared machine.
    let cpu = |o: &Outcome| 1.0 / o.cpu_ms_per_request.max(1e-6);
    let cpu_ratios = json!({
        "create / insert": ratios(rounds, "create", "insert", cpu),
        "replay / create": ratios(rounds, "replay", "create", cpu),
        "read_304 / ok": ratios(rounds, "read_304", "ok", cpu),
        "create_dispatched / insert": ratios(rounds, "create_dispatched", "insert", cpu),
    });
    let figures = json!({
        "create / insert": ratio_of("create", "insert"),
        "replay / create": ratio_of("replay", "create"),
        "read_304 / ok": ratio_of("read_304", "ok"),
        "create_dispatched / insert": ratio_of("create_dispatched", "insert"),
        "create_1m p50 / create_one p50": ratios(rounds, "create_1m", "create_one", p50),
        "round trips (create, replay, read_304, completion)": [
            workloads.get("create").map(|w| w["round_trips"].clone()),
            workloads.get("replay").map(|w| w["round_trips"].clone()),
            workloads.get("read_304").map(|w| w["round_trips"].clone()),
            cost["d1"]["round_trips"]["complete"].clone(),
        ],
        "worker gzip bytes": sizes["worker"]["gzip"],
        "sdk gzip bytes": sizes["sdk"]["gzip"],
    });
    json!({
        "plan": {"rounds": plan.rounds, "warmup_ms": plan.warmup_ms,
                 "measured_ms": plan.measured_ms, "connections": CONNECTIONS,
                 "e2e_jobs": plan.e2e_jobs, "seeded_jobs": plan.seeded_jobs},
        "seconds": {"bench": bench_time.as_secs_f64(), "builds": build_time.as_secs_f64()},
        "workloads": workloads,
        "end_to_end": e2e,
        "dispatch_round_trips": cost["d1"]["round_trips"],
        "job_cost": cost,
        "sizes": sizes,
        "figures": figures,
        "cpu_ratios": cpu_ratios,
        "targets": TARGETS.iter().map(|(f, op, bound)| json!({"figure": f, "op": op, "bound": bound, "met": met(&figures[*f], op, *bound)})).collect::<Vec<_>>(),
    })
}

/// Whether every value of a figure meets its target (ratios: every round; round trips:
/// every answer said exactly 1).
fn met(figure: &Value, op: &str, bound: f64) -> Option<bool> {
    let check = |x: f64| match op {
        ">=" => x >= bound,
        "<=" => x <= bound,
        _ => x == bound,
    };
    match figure {
        Value::Number(n) => n.as_f64().map(check),
        Value::Array(items) if op == "==" => Some(items.iter().all(|i| match i {
            Value::Object(counts) => counts.len() == 1 && counts.contains_key("1"),
            Value::Number(n) => n.as_f64() == Some(bound),
            _ => false,
        })),
        Value::Array(items) if !items.is_empty() => {
            Some(items.iter().all(|i| i.as_f64().is_some_and(check)))
        }
        _ => None,
    }
}

pub(crate) fn print(results: &Value) {
    println!(
        "{:<12} {:>9} {:>9} {:>9} {:>9}  round trips",
        "workload", "req/s", "p50 ms", "p99 ms", "CPU ms"
    );
    if let Some(workloads) = results["workloads"].as_object() {
        for (name, w) in workloads {
            println!(
                "{:<12} {:>9.0} {:>9.2} {:>9.2} {:>9.2}  {}",
                name,
                w["rate"].as_f64().unwrap_or(0.0),
                w["p50_ms"].as_f64().unwrap_or(0.0),
                w["p99_ms"].as_f64().unwrap_or(0.0),
                w["cpu_ms_per_request"].as_f64().unwrap_or(0.0),
                w["round_trips"]
            );
        }
    }
    println!("end to end: {}", results["end_to_end"]);
    println!(
        "the same ratios by CPU per request: {}",
        results["cpu_ratios"]
    );
    for target in results["targets"].as_array().into_iter().flatten() {
        let figure = target["figure"].as_str().unwrap_or_default();
        println!(
            "{figure}: {} (target {} {}; met: {})",
            results["figures"][figure],
            target["op"].as_str().unwrap_or_default(),
            target["bound"],
            target["met"]
        );
    }
}
