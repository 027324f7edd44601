//! `cargo xtask bench --store durable`: one shard against one D1, side by side in one run.
//!
//! Workers under `wrangler dev --log-level error` on loopback: onceclick on D1, on one
//! shard (`STORE=durable`, `SHARDS=1`) and on eight shards, none with a queue consumer
//! (the request path alone, as `cargo xtask bench` measures it; a sharded create's alarm
//! still hands its attempt to the queue, as a D1 create's `wait_until` still sends it).
//! Each takes the same four workloads (create with a fresh key, replay, a 304 read, a
//! page of the owner's jobs) from `cargo xtask load`, 16 connections. Beside them, the
//! baseline Worker (`bench/baseline`) makes one bare insert in one of eight Durable
//! Objects through the same Worker → object hop (`insert_object`), and onceclick on
//! eight shards *with* its consumer takes the create again (`create_dispatched`: the
//! dispatch running beside it). Two rounds, the second in reverse order; ratios are
//! taken inside a round. Beside each rate, the CPU time of the server's processes per
//! request. The figures go to `bench/durable.json`; SCALING.md reads them.

use crate::load::{self, Outcome, Spec};
use crate::test_worker::{Launch, StoreKind, TestWorker, TEST_TIMEOUT_MS};
use crate::tools::{self, Tools};
use crate::wrangler::{self, Wrangler, BASELINE, EDGE};
use anyhow::{bail, Result};
use serde_json::{json, Value};
use std::path::Path;

const CONNECTIONS: usize = 16;
const WARMUP_MS: u64 = 1000;
const MEASURED_MS: u64 = 4000;
const ROUNDS: usize = 2;
const BODY: &str = r#"{"kind":"summarize","input":{"text":"A benchmark sentence that is long enough to summarize."}}"#;

/// The stores measured: (name, store, shards).
const STORES: [(&str, StoreKind, Option<u32>); 3] = [
    ("d1", StoreKind::D1, None),
    ("one_shard", StoreKind::Durable, Some(1)),
    ("eight_shards", StoreKind::Durable, Some(8)),
];

/// `list`: one page of 50 of the bench owner's jobs (thousands by then), which every
/// shard is asked for: its cost per shard is the eight shards' over the one's.
const WORKLOADS: [&str; 4] = ["create", "replay", "read_304", "list"];

/// The sharded create against the bare insert through the same hop, by rate and by
/// requests per CPU second: at least this (issue 23).
const CREATE_OVER_BARE: f64 = 0.7;

struct Server {
    name: &'static str,
    running: Running,
    token: String,
    job_path: String,
    etag: String,
    workloads: &'static [&'static str],
}

/// What keeps a server of the run up: onceclick, or the bare baseline.
enum Running {
    Onceclick(TestWorker),
    Bare(Wrangler),
}

impl Server {
    fn wrangler(&self) -> &Wrangler {
        match &self.running {
            Running::Onceclick(worker) => &worker.server,
            Running::Bare(wrangler) => wrangler,
        }
    }
}

pub(crate) fn run(tools: &Tools) -> Result<Value> {
    let root = tools.root.clone();
    wrangler::build(tools, &EDGE)?;
    wrangler::build(tools, &BASELINE)?;
    let servers = start(tools, &root)?;
    let rounds = (0..ROUNDS)
        .map(|round| measure_round(&servers, round))
        .collect::<Result<Vec<Value>>>()?;
    let bytes_per_job = storage_per_job(&servers)?;
    drop(servers);

    let ratios = ratios_to_d1(&rounds);
    let against_bare = against_bare(&rounds);
    let results = json!({
        "date": crate::bench::today(),
        "against_bare": against_bare,
        "create_over_bare_target": CREATE_OVER_BARE,
        "connections": CONNECTIONS,
        "measured_ms": MEASURED_MS,
        "rounds": rounds,
        "ratios": ratios,
        "storage": bytes_per_job,
    });
    print_summary(&results, &ratios, &against_bare);
    let path = root.join("bench/durable.json");
    std::fs::write(&path, serde_json::to_string_pretty(&results)? + "\n")?;
    eprintln!("xtask: wrote {}", path.display());
    Ok(results)
}

/// Every server of the run, each with the job that replay and read use: onceclick on
/// each store with no consumer, on eight shards with its consumer, and the baseline.
fn start(tools: &Tools, root: &Path) -> Result<Vec<Server>> {
    let config = crate::bench_jobs::without_consumer(root)?;
    let dispatching = wrangler::unlimited_config(root)?;
    let mut servers = Vec::new();
    let onceclick = STORES
        .iter()
        .map(|(name, store, shards)| (*name, *store, *shards, &config, &WORKLOADS[..]))
        .chain([(
            "eight_shards_dispatching",
            StoreKind::Durable,
            Some(8),
            &dispatching,
            &["create"][..],
        )]);
    for (name, store, shards, config, workloads) in onceclick {
        let how = Launch {
            store,
            extra_vars: shards
                .map(|n| vec![("SHARDS".to_owned(), n.to_string())])
                .unwrap_or_default(),
            log_level: Some("error"),
            test_vars: false,
            persist_from: None,
            config: Some(config.clone()),
            provider_timeout_ms: TEST_TIMEOUT_MS,
            primary_streams: false,
        };
        let worker = TestWorker::launch(tools, root, &how)?;
        let token = onceclick_tests::auth::mint(&worker.secret, "bench", false, 3600)?;
        let (job, etag) = crate::bench::one_job(&worker.server.url, &token)?;
        servers.push(Server {
            name,
            running: Running::Onceclick(worker),
            token,
            job_path: format!("/v1/jobs/{job}"),
            etag,
            workloads,
        });
    }
    let baseline = crate::bench::start_baseline(tools, root)?;
    servers.push(Server {
        name: "baseline",
        running: Running::Bare(baseline),
        token: String::new(),
        job_path: String::new(),
        etag: String::new(),
        workloads: &["insert_object"],
    });
    Ok(servers)
}

/// Every workload of every server once, in reverse order in odd rounds: their outcomes
/// by `server.workload`.
fn measure_round(servers: &[Server], round: usize) -> Result<Value> {
    let mut order: Vec<(&Server, &str)> = servers
        .iter()
        .flat_map(|s| s.workloads.iter().map(move |w| (s, *w)))
        .collect();
    if round % 2 == 1 {
        order.reverse();
    }
    let mut outcomes = serde_json::Map::new();
    for (server, workload) in order {
        let outcome = measure(server, workload, round)?;
        outcomes.insert(
            format!("{}.{workload}", server.name),
            serde_json::to_value(&outcome)?,
        );
    }
    Ok(Value::Object(outcomes))
}

/// One workload on one server, with the CPU time of the server's processes per request.
fn measure(server: &Server, workload: &str, round: usize) -> Result<Outcome> {
    let spec = spec(server, workload, round);
    let cpu_before = server.wrangler().cpu_time();
    let mut outcome: Outcome = load::spawn(&spec)?;
    if outcome.requests == 0 || !outcome.unexpected.is_empty() {
        bail!(
            "{} {workload}: {} requests, unexpected {:?}: {}",
            server.name,
            outcome.requests,
            outcome.unexpected,
            outcome.first_unexpected.as_deref().unwrap_or("")
        );
    }
    if let Running::Onceclick(worker) = &server.running {
        if server.name == "eight_shards_dispatching" {
            // The dispatches it started are part of its cost, and must not run
            // into the next workload.
            crate::bench::drain(worker)?;
        }
    }
    outcome.cpu_ms_per_request = (server.wrangler().cpu_time() - cpu_before).as_secs_f64() * 1e3
        / outcome.issued.max(1) as f64;
    eprintln!(
        "xtask: bench --store durable, round {round}, {} {workload}: {:.0} req/s, p50 {:.2} ms, p99 {:.2} ms, {:.2} ms CPU/request",
        server.name, outcome.rate, outcome.p50_ms, outcome.p99_ms, outcome.cpu_ms_per_request
    );
    Ok(outcome)
}

/// Storage per job: the store's SQLite files (with their WAL) over the jobs in them,
/// after every create of the run, per onceclick server.
fn storage_per_job(servers: &[Server]) -> Result<serde_json::Map<String, Value>> {
    let mut bytes_per_job = serde_json::Map::new();
    for server in servers {
        let Running::Onceclick(worker) = &server.running else {
            continue;
        };
        let jobs: i64 = onceclick_tests::db::open_in(&worker.persist).query_row(
            "SELECT count(*) FROM jobs",
            [],
            |r| r.get(0),
        )?;
        let dir = worker.persist.join("v3").join(match server.name {
            "d1" => "d1",
            _ => "do",
        });
        let bytes = sqlite_bytes(&dir);
        bytes_per_job.insert(
            server.name.to_owned(),
            json!({"jobs": jobs, "bytes": bytes, "bytes_per_job": bytes as f64 / jobs.max(1) as f64}),
        );
    }
    Ok(bytes_per_job)
}

/// Each sharded store over D1, per workload and round: by rate and by CPU per request.
fn ratios_to_d1(rounds: &[Value]) -> serde_json::Map<String, Value> {
    let mut ratios = serde_json::Map::new();
    for workload in WORKLOADS {
        for (name, _, _) in &STORES[1..] {
            let per_round: Vec<Value> = rounds
                .iter()
                .map(|r| {
                    let rate = |store: &str| r[format!("{store}.{workload}")]["rate"].as_f64();
                    let cpu = |store: &str| {
                        r[format!("{store}.{workload}")]["cpu_ms_per_request"].as_f64()
                    };
                    json!({
                        "rate": rate(name).zip(rate("d1")).map(|(a, b)| a / b),
                        "cpu_per_request": cpu(name).zip(cpu("d1")).map(|(a, b)| a / b),
                    })
                })
                .collect();
            ratios.insert(format!("{name} / d1, {workload}"), json!(per_round));
        }
    }
    ratios
}

/// The sharded create against the bare insert through the same hop: by rate, and by
/// requests per CPU second (the insert's CPU per request over the create's).
fn against_bare(rounds: &[Value]) -> serde_json::Map<String, Value> {
    let mut against_bare = serde_json::Map::new();
    for create in ["eight_shards.create", "eight_shards_dispatching.create"] {
        let per_round: Vec<Value> = rounds
            .iter()
            .map(|r| {
                let of = |w: &str, f: &str| r[w][f].as_f64();
                let bare = "baseline.insert_object";
                json!({
                    "rate": of(create, "rate").zip(of(bare, "rate")).map(|(a, b)| a / b),
                    "per_cpu": of(bare, "cpu_ms_per_request")
                        .zip(of(create, "cpu_ms_per_request"))
                        .map(|(a, b)| a / b),
                })
            })
            .collect();
        against_bare.insert(
            format!("{create} / baseline.insert_object"),
            json!(per_round),
        );
    }
    against_bare
}

/// The ratios per round, and the storage per job, on stdout.
fn print_summary(
    results: &Value,
    ratios: &serde_json::Map<String, Value>,
    against_bare: &serde_json::Map<String, Value>,
) {
    println!(
        "\nbench --store durable: one shard against one D1, and eight shards (ratios per round)"
    );
    print_rounds(ratios, "", ("CPU/request", "cpu_per_request"));
    print_rounds(
        against_bare,
        &format!(" (target >= {CREATE_OVER_BARE})"),
        ("per CPU second", "per_cpu"),
    );
    for (name, storage) in results["storage"].as_object().into_iter().flatten() {
        println!(
            "  storage, {name}: {} jobs, {} bytes, {:.0} bytes per job",
            storage["jobs"],
            storage["bytes"],
            storage["bytes_per_job"].as_f64().unwrap_or(0.0)
        );
    }
}

/// One line per figure: its rate ratio and its CPU ratio (`cpu`: label and key), per
/// round.
fn print_rounds(figures: &serde_json::Map<String, Value>, note: &str, cpu: (&str, &str)) {
    for (figure, per_round) in figures {
        let text: Vec<String> = per_round
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                format!(
                    "rate {:.2}, {} {:.2}",
                    r["rate"].as_f64().unwrap_or(f64::NAN),
                    cpu.0,
                    r[cpu.1].as_f64().unwrap_or(f64::NAN)
                )
            })
            .collect();
        println!("  {figure}{note}: {}", text.join(" | "));
    }
}

fn spec(server: &Server, workload: &str, round: usize) -> Spec {
    let nonce = tools::random_secret().unwrap_or_default();
    let auth = (
        "authorization".to_owned(),
        format!("Bearer {}", server.token),
    );
    let create = Spec {
        addr: server
            .wrangler()
            .url
            .trim_start_matches("http://")
            .to_owned(),
        method: "POST".into(),
        path: "/v1/jobs".into(),
        headers: vec![auth.clone()],
        body: BODY.into(),
        fresh_key: Some(format!("bench-{}-{round}", &nonce[..8.min(nonce.len())])),
        expect: 201,
        connections: CONNECTIONS,
        warmup_ms: WARMUP_MS,
        duration_ms: MEASURED_MS,
        total: None,
    };
    match workload {
        "replay" => Spec {
            headers: vec![auth, ("idempotency-key".into(), "bench-seed".into())],
            fresh_key: None,
            expect: 200,
            ..create
        },
        "read_304" => Spec {
            method: "GET".into(),
            path: server.job_path.clone(),
            headers: vec![auth, ("if-none-match".into(), server.etag.clone())],
            body: String::new(),
            fresh_key: None,
            expect: 304,
            ..create
        },
        "insert_object" => Spec {
            path: "/insert-object".into(),
            headers: Vec::new(),
            ..create
        },
        "list" => Spec {
            method: "GET".into(),
            path: "/v1/jobs?limit=50".into(),
            headers: vec![auth],
            body: String::new(),
            fresh_key: None,
            expect: 200,
            ..create
        },
        _ => create,
    }
}

/// Bytes of the SQLite files (and their WAL) under `dir`, metadata aside.
fn sqlite_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if path.is_dir() {
            total += sqlite_bytes(&path);
        } else if (name.ends_with(".sqlite") || name.ends_with(".sqlite-wal"))
            && !name.starts_with("metadata")
        {
            total += entry.metadata().map(|m| m.len()).unwrap_or(0);
        }
    }
    total
}
