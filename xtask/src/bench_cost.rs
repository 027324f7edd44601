//! What one job costs the store, on D1 and on a shard (`tests/src/probe.rs` run against
//! a short-lived test Worker per store): a first-try job's round trips and rows, the
//! other paths of a job's life, the purge, the stops and the streamed answers. The
//! figures go to `bench/results.json` under `job_cost`.

use crate::test_worker::{StoreKind, TestWorker};
use crate::tools::Tools;
use anyhow::Result;
use serde_json::{json, Value};
use std::path::Path;

/// What one job that succeeds at once costs the store, on D1 and on a shard: round trips
/// and rows written and read per step, from `Server-Timing` and the `dispatched` line the
/// consumer logs (which `--log-level error` hides): a short-lived Worker per store at
/// the default log level, one job each; and one stop, timed (`probe::stop`, with the
/// test Worker's `CANCEL_POLL_MS`). `{"d1": probe, "durable": probe}`.
pub(crate) fn job_cost(tools: &Tools, root: &Path) -> Result<Value> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut out = serde_json::Map::new();
    for (name, store) in [("d1", StoreKind::D1), ("durable", StoreKind::Durable)] {
        let worker = TestWorker::start(tools, root, store)?;
        let probe = runtime.block_on(onceclick_tests::probe::probe(
            &worker.server.url,
            &worker.secret,
            &worker.log,
        ))?;
        let mock = mock_of(&worker);
        let [stops, streamed_stops] = stops(&runtime, &worker, &mock)?;
        let paths = runtime.block_on(onceclick_tests::probe::paths(
            &worker.server.url,
            &worker.secret,
            &mock,
            &worker.log,
        ))?;
        let purge = runtime.block_on(onceclick_tests::probe::purge(
            &worker.server.url,
            &worker.secret,
            &worker.log,
            &worker.persist,
            20,
        ))?;
        let mut value = serde_json::to_value(probe)?;
        value["stops"] = stops;
        value["streamed_stops"] = streamed_stops;
        value["paths"] = serde_json::to_value(&paths)?;
        value["purge"] = serde_json::to_value(purge)?;
        out.insert(name.to_owned(), value);
    }
    Ok(Value::Object(out))
}

/// The mock provider of `worker`.
pub(crate) fn mock_of(worker: &TestWorker) -> onceclick_tests::client::Mock {
    onceclick_tests::client::Mock {
        base: format!("http://127.0.0.1:{}", worker.mock_port),
        http: reqwest::Client::new(),
    }
}

/// The cost per job whose answer streams, beside the same job answered whole (the test
/// Worker's primary does not stream, its fallback does), each with the server's CPU
/// over its run (`probe::streamed`).
pub(crate) fn streamed(
    runtime: &tokio::runtime::Runtime,
    worker: &TestWorker,
    mock: &onceclick_tests::client::Mock,
) -> Result<Value> {
    // Certified first: its calls are no streamed job's CPU.
    runtime.block_on(onceclick_tests::probe::certify(
        &worker.server.url,
        &worker.secret,
        "fallback",
    ));
    let mut out = Vec::new();
    // For each length, the whole answer, the streamed one and its floor (the same jobs
    // handing their text to no hub), a job of each in turn, the order rotating each
    // round: the machine's drift and noise fall on the three alike, so that the
    // streamed job against its floor, the comparison that counts, holds within a few
    // per cent (rows of a kind run one after the other were ±20 % apart).
    let rows = [("primary", false), ("fallback", false), ("fallback", true)];
    for (chars, jobs) in [(400, 24), (2048, 12), (20_000, 3)] {
        let mut costs: [Vec<onceclick_tests::probe::StreamedCost>; 3] = Default::default();
        let mut cpu = [std::time::Duration::ZERO; 3];
        for round in 0..jobs {
            for turn in 0..rows.len() {
                let row = (round + turn) % rows.len();
                let (provider, floor) = rows[row];
                let before = worker.server.cpu_time();
                let cost = runtime.block_on(onceclick_tests::probe::streamed(
                    &worker.server.url,
                    &worker.secret,
                    mock,
                    &worker.log,
                    provider,
                    (chars, floor),
                ))?;
                cpu[row] += worker.server.cpu_time() - before;
                costs[row].push(cost);
            }
        }
        for (costs, cpu) in costs.iter().zip(cpu) {
            let mean = onceclick_tests::probe::StreamedCost::mean(costs);
            let mut cost = serde_json::to_value(mean)?;
            cost["cpu_ms_per_job"] = json!(cpu.as_secs_f64() * 1e3 / jobs as f64);
            out.push(cost);
        }
    }
    Ok(Value::Array(out))
}

/// The streamed figures of each store ([`streamed`], [`streamed_batch`]) on a Worker of
/// its own whose providers' limits allow the longest answers (20,000 code points take
/// 25 s, the batch's calls 100 s): `timeout_ms` 60 s, the fallback's total 120 s. By
/// store name: the rows, and the batch.
pub(crate) fn streamed_all(tools: &Tools) -> Result<Vec<(&'static str, Value, Value)>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut measured = Vec::new();
    for (name, store) in [("d1", StoreKind::D1), ("durable", StoreKind::Durable)] {
        let worker = TestWorker::start_with_timeout(tools, &tools.root, store, 60_000)?;
        let mock = mock_of(&worker);
        let rows = streamed(&runtime, &worker, &mock)?;
        let batch = streamed_batch(&runtime, &worker, &mock)?;
        measured.push((name, rows, batch));
    }
    Ok(measured)
}

/// Ten calls of about 100 s in one consumer batch (4 code points every 200 ms), on a
/// Worker whose providers' limits allow them (`timeout_ms` 60 s): the batch's
/// subrequests, as the consumer counted them. The watch reads every 250 ms here, so
/// each delivery reaches `MAX_WATCH_READS`.
pub(crate) fn streamed_batch(
    runtime: &tokio::runtime::Runtime,
    worker: &TestWorker,
    mock: &onceclick_tests::client::Mock,
) -> Result<Value> {
    let api = onceclick_tests::client::Api::at(&worker.server.url, &worker.secret);
    let batch = runtime.block_on(onceclick_tests::probe::batch(
        &api,
        mock,
        &worker.log,
        10,
        (2_000, 4, 200),
    ))?;
    Ok(serde_json::to_value(batch)?)
}

/// The stops of one store, each kind apart (`probe::StopOf`): calls held open, then
/// streamed answers, each cancelled at five offsets across one watch interval (250 ms in
/// this Worker), so that the figures do not depend on where the cancel falls between two
/// reads. Each list is shortest first.
pub(crate) fn stops(
    runtime: &tokio::runtime::Runtime,
    worker: &TestWorker,
    mock: &onceclick_tests::client::Mock,
) -> Result<[Value; 2]> {
    use onceclick_tests::probe::StopOf;
    let mut out = [Value::Null, Value::Null];
    for (slot, of) in out.iter_mut().zip([StopOf::Held, StopOf::Streamed]) {
        let mut figures = Vec::new();
        for offset in [0, 50, 100, 150, 200] {
            let stop = runtime.block_on(onceclick_tests::probe::stop(
                &worker.server.url,
                &worker.secret,
                mock,
                1000 + offset,
                of,
            ))?;
            figures.push(stop.figure);
        }
        figures.sort_by_key(|s| s.stop_ms);
        *slot = serde_json::to_value(&figures)?;
    }
    Ok(out)
}
