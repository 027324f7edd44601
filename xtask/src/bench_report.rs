//! BENCHMARKS.md from one bench run (`bench.rs`): every figure beside its baseline and
//! its target, then `bench/ANALYSIS.md`, the committed account of what was changed, what
//! each lever bought and why a missed target was left missed.

use serde_json::Value;
use std::fmt::Write;

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

fn list(v: &Value, digits: usize) -> String {
    match v {
        Value::Array(items) => items
            .iter()
            .map(|i| match i {
                Value::Number(_) => format!("{:.digits$}", f(i)),
                Value::Object(counts) => trips(counts),
                other => other.to_string(),
            })
            .collect::<Vec<_>>()
            .join(" / "),
        Value::Number(_) => format!("{:.digits$}", f(v)),
        other => other.to_string(),
    }
}

/// Round trips by answer count, `{"1": 2406}`, as "1 (2,406 answers)".
fn trips(counts: &serde_json::Map<String, Value>) -> String {
    if counts.is_empty() {
        return "none".to_owned();
    }
    counts
        .iter()
        .map(|(n, answers)| format!("{n} ({answers} answers)"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// D1's and Durable Object SQLite's prices per million rows beyond the included ones
/// (Workers Paid), as published on developers.cloudflare.com/d1/platform/pricing, read
/// 2026-12-01: rows written, rows read.
const PRICE_PER_MILLION_ROWS: (f64, f64) = (1.00, 0.001);

/// $ per million jobs for `written` and `read` rows per job.
fn rows_price(written: f64, read: f64) -> f64 {
    written * PRICE_PER_MILLION_ROWS.0 + read * PRICE_PER_MILLION_ROWS.1
}

/// Workers Paid prices beyond the included amounts, read 2026-12-01 on
/// developers.cloudflare.com (Workers, Queues and Durable Objects pricing): $ per
/// million requests, per million CPU ms, per million queue operations (a message is
/// three: written, read, deleted), per million object requests (alarm invocations
/// included), per million GB-s of object duration.
const PRICES: [(&str, f64); 5] = [
    ("requests", 0.30),
    ("cpu_ms", 0.02),
    ("queue_operations", 0.40),
    ("object_requests", 0.15),
    ("object_gb_s", 12.50),
];

fn price(name: &str) -> f64 {
    PRICES
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(f64::NAN, |(_, p)| *p)
}

/// "Price per million jobs": every line a first-try job is billed for, per store, from
/// the same run's figures (rows and round trips from `job_cost`, CPU from the end-to-end
/// run), and beside them the provider's tokens.
fn price_table(md: &mut String, r: &Value) {
    let cost = &r["job_cost"];
    if cost.is_null() {
        return;
    }
    let cpu = f(&r["end_to_end"]["cpu_ms_per_job"]);
    price_heading(md);
    price_lines(md, &billed_lines(cost, cpu));
    duration_and_tokens(md, cost);
}

/// The price table's heading: the prices it uses, and how its counts were taken.
fn price_heading(md: &mut String) {
    let _ = writeln!(
        md,
        "## Price per million jobs

A job that succeeds on its first attempt, line by line, at Workers Paid prices beyond the included amounts (read 2026-12-01: ${} per million requests, ${} per million CPU ms, ${} per million queue operations, ${} per million Durable Object requests, ${} per million GB-s of object duration; rows as above). Counts are this run's: rows and round trips measured per step; CPU measured over the end-to-end run on D1 (wrangler's own CPU included: an upper bound). A consumer invocation is counted as one request per job, though a batch of messages shares one. The mock answers at once, so no watch read is counted: a call that takes N seconds adds one per `CANCEL_POLL_MS` (1 s deployed; two rows by primary key each, and on a shard one more object request each: docs/job-home.md).

| line | D1: per job | D1: $ per million jobs | a shard: per job | a shard: $ per million jobs |
|---|---|---|---|---|",
        price("requests"),
        price("cpu_ms"),
        price("queue_operations"),
        price("object_requests"),
        price("object_gb_s"),
    );
}

/// What a first-try job is billed for, line by line: (line, per job on D1, per job on a
/// shard, $ per million units).
fn billed_lines(cost: &Value, cpu: f64) -> [(&'static str, f64, f64, f64); 6] {
    let rows = |name: &str, k: &str| {
        let p = &cost[name][k];
        f(&p["create"]) + f(&p["claim"]) + f(&p["complete"])
    };
    let trips = |name: &str| {
        let t = &cost[name]["round_trips"];
        f(&t["create"]) + f(&t["claim"]) + f(&t["complete"])
    };
    // A shard's requests: the create's, the claim's and the completion's batches, and
    // the alarm that hands the create on (one per create at most: creates that come
    // together share one).
    let object_requests = trips("durable") + 1.0;
    [
        (
            "Worker requests (the create; the consumer)",
            2.0,
            2.0,
            price("requests"),
        ),
        ("Worker CPU ms", cpu, f64::NAN, price("cpu_ms")),
        (
            "rows written",
            rows("d1", "rows_written"),
            rows("durable", "rows_written"),
            PRICE_PER_MILLION_ROWS.0,
        ),
        (
            "rows read",
            rows("d1", "rows_read"),
            rows("durable", "rows_read"),
            PRICE_PER_MILLION_ROWS.1,
        ),
        (
            "queue operations (one message)",
            3.0,
            3.0,
            price("queue_operations"),
        ),
        (
            "Durable Object requests (create, hand-off alarm, claim, completion)",
            0.0,
            object_requests,
            price("object_requests"),
        ),
    ]
}

/// One row per billed line, then the total per store.
fn price_lines(md: &mut String, lines: &[(&str, f64, f64, f64); 6]) {
    let mut totals = (0.0, 0.0);
    let cell = |n: f64, digits: usize| {
        if n.is_nan() {
            "not measured".to_owned()
        } else {
            format!("{n:.digits$}")
        }
    };
    for &(line, d1, shard, unit) in lines {
        let (a, b) = (d1 * unit, shard * unit);
        if !a.is_nan() {
            totals.0 += a;
        }
        if !b.is_nan() {
            totals.1 += b;
        }
        let _ = writeln!(
            md,
            "| {line} | {} | {} | {} | {} |",
            cell(d1, if d1.fract() == 0.0 { 0 } else { 1 }),
            cell(a, 2),
            cell(shard, if shard.fract() == 0.0 { 0 } else { 1 }),
            cell(b, 2)
        );
    }
    let _ = writeln!(
        md,
        "| **Cloudflare, per million jobs** | | **{:.2}** | | **{:.2}** (CPU not counted) |",
        totals.0, totals.1
    );
}

/// Object duration, which shape (b) does not pay, and the provider's tokens per job.
fn duration_and_tokens(md: &mut String, cost: &Value) {
    let tokens = |name: &str| {
        let t = &cost[name]["tokens"];
        (f(&t["prompt"]), f(&t["completion"]))
    };
    let (prompt, completion) = tokens("d1");
    let _ = writeln!(
        md,
        "
Object duration: the shards hold no provider call (shape (b), docs/job-home.md), so a shard is active only for its requests, milliseconds each (not metered here). Shape (a), an object per job holding its call, would pay the call's wall-clock time at 128 MB: {:.2} GB-s for a 10 s call (${:.2} per million jobs) and {:.2} GB-s for a 60 s call (${:.2}).

The provider's tokens per job, from its answer's `usage` (the consumer's `call_tokens` line): {prompt:.0} prompt and {completion:.0} completion tokens here, where the mock estimates a token per four characters. With a real provider these are its own counts, billed at its own rates to whoever holds the key: for most jobs the larger cost, and the user's, not ours.
",
        10.0 * 0.125,
        10.0 * 0.125 * price("object_gb_s"),
        60.0 * 0.125,
        60.0 * 0.125 * price("object_gb_s"),
    );
}

/// "Rows per job": what one job that succeeds at once costs the store, per step and
/// store, from `bench_cost.rs`'s `job_cost`; then the other paths of a job's life, the
/// streamed jobs, the purge and the stops.
fn job_cost(md: &mut String, cost: &Value) {
    if cost.is_null() {
        return;
    }
    rows_per_step(md, cost);
    subrequests(md, cost);
    paths_cost(md, cost);
    streamed_cost(md, cost);
    purge_cost(md, cost);
    stops_cost(md, cost);
}

/// A first-try job's rows written and read, per step and store, and their price.
fn rows_per_step(md: &mut String, cost: &Value) {
    let _ = writeln!(
        md,
        "## Rows per job\n\nOne job that succeeds on its first attempt, as the store bills it: D1's `meta.rows_written`/`rows_read` and a shard's cursors' `rowsWritten`/`rowsRead` (each row and each index entry an insert or update touches is one row written), summed by the Worker over each step's one round trip (`Server-Timing`, the consumer's `dispatched` line). Priced at ${:.2} per million rows written and ${:.3} per million read (Workers Paid, beyond the included rows; read 2026-12-01).\n\n| store | written: create + claim + completion | written per job | read: create + claim + completion | read per job | rows, $ per million jobs |\n|---|---|---|---|---|---|",
        PRICE_PER_MILLION_ROWS.0, PRICE_PER_MILLION_ROWS.1
    );
    for (name, what) in [("d1", "D1"), ("durable", "a shard (Durable Object SQLite)")] {
        let p = &cost[name];
        if p.is_null() {
            continue;
        }
        let steps = |k: &str| -> (String, f64) {
            let v = &p[k];
            let parts = [&v["create"], &v["claim"], &v["complete"]];
            let total: f64 = parts.iter().map(|x| f(x)).sum();
            (
                parts
                    .iter()
                    .map(|x| format!("{:.0}", f(x)))
                    .collect::<Vec<_>>()
                    .join(" + "),
                total,
            )
        };
        let (written, w) = steps("rows_written");
        let (read, r) = steps("rows_read");
        let _ = writeln!(
            md,
            "| {what} | {written} | **{w:.0}** | {read} | {r:.0} | {:.2} |",
            rows_price(w, r)
        );
    }
}

/// The subrequests of a first-try job, per store.
fn subrequests(md: &mut String, cost: &Value) {
    for (name, place) in [
        ("d1", "D1 queries"),
        ("durable", "requests to its shard's object"),
    ] {
        let t = &cost[name]["round_trips"];
        if t.is_null() {
            continue;
        }
        let trips = f(&t["create"]) + f(&t["claim"]) + f(&t["complete"]);
        let _ = writeln!(
            md,
            "{}Subrequests of a first-try job on {}: {trips:.0} {place} (the create's, the claim's, the completion's: one round trip each, measured), one queue send ({}) and one provider call (the claim's).",
            if name == "d1" { "\n" } else { "" },
            if name == "d1" { "D1" } else { "a shard" },
            if name == "d1" {
                "the create's dispatch, after its answer"
            } else {
                "the create's dispatch, by its shard after the answer, with the alarm it set: one more object request"
            }
        );
    }
}

/// The other paths of a job's life (`probe::paths`), per store.
fn paths_cost(md: &mut String, cost: &Value) {
    let _ = writeln!(
        md,
        "\nThe other paths of a job's life (`tests/src/probe.rs`, `paths`), each on a fresh job, over all its steps: a hedged race the hedge wins (its primary stopped as the loser), a failover after a retryable failure, an `unknown` attempt (its provider past the timeout) and an admin's resolve. The watch reads over calls in flight are apart (one per 250 ms a call took here).\n\n| store | path | rows written | rows read | round trips | watch reads | rows, $ per million jobs |\n|---|---|---|---|---|---|---|"
    );
    for (name, what) in [("d1", "D1"), ("durable", "a shard")] {
        for p in cost[name]["paths"].as_array().into_iter().flatten() {
            let (w, r) = (f(&p["rows_written"]), f(&p["rows_read"]));
            let _ = writeln!(
                md,
                "| {what} | {} | {w:.0} | {r:.0} | {:.0} | {:.0} | {:.2} |",
                p["path"].as_str().unwrap_or_default(),
                f(&p["round_trips"]),
                f(&p["watch_reads"]),
                rows_price(w, r)
            );
        }
    }
}

/// The retention purge's rows per job (`probe::purge`), per store.
fn purge_cost(md: &mut String, cost: &Value) {
    let _ = writeln!(
        md,
        "\nThe retention purge, its own line (`tests/src/probe.rs`, `purge`): 20 first-try jobs made idle for 30 days, then one reconciler pass; the rows of its purge statements (the `reconciled` line's `purge`, apart from the sweeps'), per job taken.\n\n| store | jobs purged | rows written per job | rows read per job | rows, $ per million jobs |\n|---|---|---|---|---|"
    );
    for (name, what) in [("d1", "D1"), ("durable", "the shards")] {
        let p = &cost[name]["purge"];
        if p.is_null() {
            continue;
        }
        let (w, r) = (f(&p["rows_written_per_job"]), f(&p["rows_read_per_job"]));
        let _ = writeln!(
            md,
            "| {what} | {:.0} | {w:.1} | {r:.1} | {:.2} |",
            f(&p["jobs"]),
            rows_price(w, r)
        );
    }
}

/// The stops (`probe::stop`): the close after each cancel's answer, per store and kind
/// of call.
fn stops_cost(md: &mut String, cost: &Value) {
    let _ = writeln!(
        md,
        "\nStops (`tests/src/probe.rs`, `stop`), each cancelled at another point of a second's last watch interval (1,000 to 1,200 ms into the call). A call the mock holds open for 10 s (its answer not come): the dispatcher reads its attempt every `CANCEL_POLL_MS` (250 ms in this Worker; 1,000 ms deployed, which stretches these figures up to four times) and drops the call, which closes the connection. A streamed answer (two code points every 100 ms for about 12 s): the job's hub refuses the next piece once it has the `cancelled` document, which wakes the dispatcher before its tick (the tick stays the bound). The close after the cancel's answer, per stop, shortest first{}:\n\n| store | call | ms from the cancel to the close | median | longest |\n|---|---|---|---|---|",
        cost["stops_date"]
            .as_str()
            .map(|d| format!(" (measured {d}, by `cargo xtask bench --stops`)"))
            .unwrap_or_default()
    );
    let kinds = [("stops", "held open"), ("streamed_stops", "streamed")];
    for ((name, what), (list, of)) in [("d1", "D1"), ("durable", "a shard")]
        .into_iter()
        .flat_map(|store| kinds.map(|kind| (store, kind)))
    {
        let Some(stops) = cost[name][list].as_array().filter(|s| !s.is_empty()) else {
            continue;
        };
        let lags: Vec<f64> = stops.iter().map(|s| f(&s["stop_ms"])).collect();
        let _ = writeln!(
            md,
            "| {what} | {of} | {} | **{:.0}** | {:.0} |",
            lags.iter()
                .map(|l| format!("{l:.0}"))
                .collect::<Vec<_>>()
                .join(", "),
            lags[lags.len() / 2],
            lags[lags.len() - 1]
        );
    }
    md.push('\n');
}

/// "The live stream" (issue 24): `bench_live.rs`'s figures, per store.
fn live(md: &mut String, l: &Value) {
    if l.is_null() {
        return;
    }
    live_latencies(md, l);
    live_requests(md, l);
    watcher_hour(md, l);
}

/// The live stream's heading, and its latencies beside their targets.
fn live_latencies(md: &mut String, l: &Value) {
    let _ = writeln!(
        md,
        "## The live stream\n\nMeasured by `cargo xtask bench` ({}) in Debian's headless Chromium on the demo page (`tests/e2e/live.bench.js`) and against the Worker as deployed: the hub re-reads every {} s, a stream lasts {} s, keep-alives every {} s. Each store ran its own Worker; the mock provider answered after a scripted delay.\n\n| figure | D1 | shards | target |\n|---|---|---|---|",
        l["date"].as_str().unwrap_or("with the rest of this file"),
        l["reread_s"], l["max_stream_s"], l["keep_alive_s"],
    );
    let q = |store: &str, path: &[&str]| {
        let mut v = &l[store]["browser"];
        for p in path {
            v = &v[*p];
        }
        format!("{:.0} / {:.0}", f(&v["p50"]), f(&v["p99"]))
    };
    let rows: [(&str, &[&str], &str); 7] = [
        (
            "commit to `onUpdate`, pushed: p50 / p99 ms",
            &["lag", "push"],
            "p50 ≤ 50",
        ),
        (
            "commit to `onUpdate`, polled (today's `wait`): p50 / p99 ms",
            &["lag", "poll"],
            "",
        ),
        (
            "click on Generate to the result shown, less the provider's delay: p50 / p99 ms",
            &["click"],
            "p50 ≤ 100",
        ),
        (
            "a stream's request to its first bytes (`: live`): p50 / p99 ms",
            &["first"],
            "",
        ),
        (
            "streamed text: `submit` to the first `onText` (a new job on the streaming fallback): p50 / p99 ms",
            &["text", "first_onceclick"],
            "≤ the next line + 30 at p50",
        ),
        (
            "the same text straight from the mock, taking turns: request to its first content chunk: p50 / p99 ms",
            &["text", "first_mock"],
            "",
        ),
        (
            "a chunk leaving the mock to the `onText` that shows it: p50 / p99 ms",
            &["text", "chunk_to_text"],
            "",
        ),
    ];
    for (what, path, target) in rows {
        let _ = writeln!(
            md,
            "| {what} | {} | {} | {target} |",
            q("d1", path),
            q("durable", path)
        );
    }
}

/// The requests one job of 10 s takes from the demo page and from the SDK, and those
/// requests in order.
fn live_requests(md: &mut String, l: &Value) {
    let count = |store: &str, which: &str| {
        l[store]["browser"]["requests"][which]
            .as_array()
            .map_or(0, Vec::len)
    };
    for (which, what, target) in [
        (
            "demo_page",
            "requests the demo page sends for one job of 10 s (Generate to the result)",
            "≤ 3",
        ),
        (
            "same_origin",
            "the same, the SDK alone on the page's origin (`submit`, `wait`)",
            "≤ 3",
        ),
        (
            "cross_origin",
            "the same from another origin, preflights included (counted at the proxy)",
            "",
        ),
    ] {
        let _ = writeln!(
            md,
            "| {what} | {} | {} | {target} |",
            count("d1", which),
            count("durable", which)
        );
    }
    let _ = writeln!(md, "\nThe requests, in order (D1):\n");
    for which in ["demo_page", "same_origin", "cross_origin"] {
        let sent: Vec<&str> = l["d1"]["browser"]["requests"][which]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let _ = writeln!(md, "- {which}: {}", sent.join(", "));
    }
}

/// A watcher-hour, priced, pushed against polled.
fn watcher_hour(md: &mut String, l: &Value) {
    // A watcher-hour, priced: what each arm is billed for in an hour of a job that does
    // not move, one watcher per job. Pushed: a stream reopens every `max_stream_s`
    // (a Worker request, and the hub's `/subscribe`: an object request), and the hub's
    // alarm re-reads every `reread_s` (an object request and a read of the job); between
    // alarms the hub holds only hibernatable WebSockets, which is not billed for
    // duration. Polled: a request every `poll_every_s`.
    let hour = 3600.0;
    let opens = hour / f(&l["max_stream_s"]);
    let rereads = hour / f(&l["reread_s"]);
    let polls = hour / f(&l["poll_every_s"]);
    let _ = writeln!(
        md,
        "\nA watcher-hour of a job that does not move (as an `unknown` waits for its resolve), one watcher per job. CPU is measured: wrangler's and workerd's, over {} s with {} jobs each watched by one stream, then by one poller every {} s, on a Worker with no consumer (so nothing else ran). The rest are the counts the design fixes, at the prices above; between its alarms a hub holds only hibernatable WebSockets, which Durable Objects do not bill for duration.\n\n| per watcher-hour | pushed | polled |\n|---|---|---|",
        l["window_s"], l["watchers"], l["poll_every_s"]
    );
    let stores = [("d1", "D1"), ("durable", "shards")];
    for (store, name) in stores {
        let w = &l[store]["watchers"];
        let _ = writeln!(
            md,
            "| server CPU ms ({name}) | {:.0} | {:.0} |",
            f(&w["push_cpu_ms_per_watcher_hour"]),
            f(&w["poll_cpu_ms_per_watcher_hour"])
        );
    }
    let push_price =
        opens * price("requests") / 1e6 + (opens + rereads) * price("object_requests") / 1e6;
    let poll_price = polls * price("requests") / 1e6;
    let _ = writeln!(
        md,
        "| Worker requests | {opens:.0} (a reconnect per stream lifetime) | {polls:.0} |\n| object requests | {:.0} ({opens:.0} subscribes, {rereads:.0} re-read alarms) | 0 |\n| reads of the job (rows by primary key, at $0.001 per million: not priced) | {rereads:.0} re-reads, {opens:.0} opens | {polls:.0} |\n| **$ per million watcher-hours, CPU not counted** | **{:.0}** | **{:.0}** |\n\nWith more watchers on one job, the hub's alarms are shared: the object lines are per job, not per watcher. CPU is the figure to read side by side (the same machine, the same minute); it prices at $0.02 per million ms.\n",
        opens + rereads,
        push_price * 1e6,
        poll_price * 1e6,
    );
}

/// The whole file.
pub(crate) fn render(r: &Value) -> String {
    let mut md = String::new();
    heading(&mut md, r);
    targets(&mut md, r);
    requests(&mut md, r);
    end_to_end(&mut md, r);
    job_cost(&mut md, &r["job_cost"]);
    price_table(&mut md, r);
    live(&mut md, &r["live"]);
    sizes(&mut md, r);
    md.push_str(
        &r["analysis"]
            .as_str()
            .unwrap_or_default()
            .replace("\r\n", "\n"),
    );
    md
}

/// The title, and how the run was made.
fn heading(md: &mut String, r: &Value) {
    let plan = &r["plan"];
    let _ = writeln!(
        md,
        "# Benchmarks\n\nWritten by `cargo xtask bench` ({}; {} rounds of {} ms per workload after {} ms of warm-up, {} connections, the second round in reverse order; {:.0} s). Every server ran under `wrangler dev --log-level error` on loopback, on this 2-core machine, beside the load generator (`cargo xtask load`, one thread). Absolute rates move by a quarter from run to run here; the ratios, taken inside one round, are the figures. Raw numbers: `bench/results.json`.\n",
        r["date"].as_str().unwrap_or("this run"),
        plan["rounds"],
        plan["measured_ms"],
        plan["warmup_ms"],
        plan["connections"],
        f(&r["seconds"]["bench"]),
    );
}

/// "Targets": every figure beside its target, by rate and by CPU; then create with its
/// dispatch beside it.
fn targets(md: &mut String, r: &Value) {
    let _ = writeln!(
        md,
        "## Targets\n\n| figure | measured (per round) | target | met | the same by CPU per request |\n|---|---|---|---|---|"
    );
    for t in r["targets"].as_array().into_iter().flatten() {
        let name = t["figure"].as_str().unwrap_or_default();
        let figure = &r["figures"][name];
        let digits = if name.contains("bytes") { 0 } else { 2 };
        let bound = if name.contains("bytes") {
            format!("{:.0}", f(&t["bound"]))
        } else {
            format!("{}", f(&t["bound"]))
        };
        let met = match t["met"].as_bool() {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "n/a",
        };
        let by_cpu = &r["cpu_ratios"][name];
        let _ = writeln!(
            md,
            "| {name} | {} | {} {bound} | {met} | {} |",
            list(figure, digits),
            t["op"].as_str().unwrap_or_default(),
            if by_cpu.is_null() {
                String::new()
            } else {
                list(by_cpu, 2)
            }
        );
    }

    let _ = writeln!(
        md,
        "\nCreate with its dispatch running beside it on the same cores (issue 11 measured create this way): {} × the bare insert by rate, {} by CPU per request, per round.",
        list(&r["figures"]["create_dispatched / insert"], 2),
        list(&r["cpu_ratios"]["create_dispatched / insert"], 2)
    );
}

/// "Requests": each workload's rate, latency, CPU and round trips (after a word on the
/// targets' last column).
fn requests(md: &mut String, r: &Value) {
    let _ = writeln!(
        md,
        "\nThe last column divides CPU time instead of rates: the CPU that wrangler and workerd spent per request sent. One isolate runs on one thread, so it predicts the rate one core would serve, and it moves far less than rates when other work shares the machine. Create, replay and the 304 run on a Worker with no queue consumer: they measure the request path, and the dispatches the creates enqueue wait in the local queue. The whole job, dispatch included, is measured apart, below.\n\n## Requests\n\n| workload | server | req/s (per round) | p50 ms | p99 ms | CPU ms per request | D1 round trips (answers) |\n|---|---|---|---|---|---|---|"
    );
    let servers = [
        ("ok", "baseline: GET returning \"ok\", no D1"),
        ("insert", "baseline: one bare INSERT"),
        ("create", "onceclick: POST /v1/jobs, fresh keys"),
        ("replay", "onceclick: POST /v1/jobs, one key again"),
        ("read_304", "onceclick: GET /v1/jobs/{id}, If-None-Match"),
        ("create_one", "onceclick: create, one connection"),
        (
            "create_1m",
            "onceclick, 1,000,000 jobs in D1: create, one connection",
        ),
    ];
    for (name, what) in servers {
        let w = &r["workloads"][name];
        if w.is_null() {
            continue;
        }
        let _ = writeln!(
            md,
            "| {name} | {what} | {:.0} ({}) | {:.2} | {:.2} | {:.2} | {} |",
            f(&w["rate"]),
            list(&w["per_round"], 0),
            f(&w["p50_ms"]),
            f(&w["p99_ms"]),
            f(&w["cpu_ms_per_request"]),
            w["round_trips"].as_object().map_or_else(String::new, trips)
        );
    }
}

/// "End to end and the completion": the whole job, dispatch included.
fn end_to_end(md: &mut String, r: &Value) {
    let plan = &r["plan"];
    let e = &r["end_to_end"];
    let d = &r["dispatch_round_trips"];
    let _ = writeln!(
        md,
        "\n## End to end and the completion\n\n{} jobs created at once by {} connections, then run by the queue consumer against the mock provider, which answers at once:\n\n- jobs completed per second, from the first `created_at` to the last `succeeded`: **{:.0}** (created at {:.0} req/s);\n- CPU of wrangler and workerd per job, create and dispatch together: {:.2} ms (against {:.2} ms for a bare insert);\n- stored per job (the D1 file's used pages, after less before, over the jobs; indexes and figures included): {:.0} bytes;\n- the compare-and-swap completion, claim to CAS by D1's clock: {:.0} per second, p50 {:.1} ms, p99 {:.1} ms;\n- D1 round trips of one dispatch (from the consumer's `dispatched` log line): claim {}, then {} for the provider's answer and its completion.\n",
        e["jobs"], plan["connections"], f(&e["jobs_per_s"]), f(&e["create_rate"]),
        f(&e["cpu_ms_per_job"]), f(&r["workloads"]["insert"]["cpu_ms_per_request"]),
        f(&e["stored_bytes_per_job"]),
        f(&e["completion_per_s"]), f(&e["completion_p50_ms"]), f(&e["completion_p99_ms"]),
        d["claim"], d["complete"]
    );
}

/// "Sizes and the wasm start", and the SDK's own cost.
fn sizes(md: &mut String, r: &Value) {
    let s = &r["sizes"];
    let _ = writeln!(
        md,
        "## Sizes and the wasm start\n\n| | gzip bytes (wasm + JS) | raw wasm | compile + instantiate, V8 default | all TurboFan |\n|---|---|---|---|---|"
    );
    for (name, what) in [
        ("worker", "onceclick Worker"),
        ("baseline", "baseline Worker"),
    ] {
        let x = &s[name];
        let _ = writeln!(
            md,
            "| {what} | {:.0} ({:.0} + {:.0}) | {:.0} | {:.1} ms | {:.1} ms |",
            f(&x["gzip"]),
            f(&x["wasm_gzip"]),
            f(&x["js_gzip"]),
            f(&x["wasm_raw"]),
            f(&x["start"]["default"]),
            f(&x["start"]["eager_turbofan"])
        );
    }
    let x = &s["sdk"];
    let _ = writeln!(
        md,
        "| SDK (`sdk/pkg/web`) | {:.0} ({:.0} + {:.0}) | | | |\n\nWorker sizes are what `wrangler deploy --dry-run --outdir` bundles. The start is Node's V8 (the engine workerd embeds) compiling and instantiating the wasm with its imports stubbed: median of 5 fresh processes.\n",
        f(&x["gzip"]), f(&x["wasm_gzip"]), f(&x["js_gzip"])
    );
    if let Some(error) = r["sdk_submit"]["error"].as_str() {
        let _ = writeln!(md, "The SDK's own cost was not measured: {error}\n");
    } else if !r["sdk_submit"].is_null() {
        let c = &r["sdk_submit"];
        let _ = writeln!(
            md,
            "The SDK in headless Chromium (`sdk/tests/cost.rs`, release build, `fetch` stubbed): from `submit()` to its request leaving, the intent's key stored first, p50 **{:.2} ms**, p99 {:.2} ms over {} new intents.\n",
            f(&c["p50_ms"]), f(&c["p99_ms"]), c["calls"]
        );
    }
}

/// The figures per streamed job (`tests/src/probe.rs`, `streamed`; issues 25 and 49),
/// beside the same job answered whole and the floor, on each store.
fn streamed_cost(md: &mut String, cost: &Value) {
    let _ = writeln!(
        md,
        "\nPer streamed job (`tests/src/probe.rs`, `streamed`): first-try `summarize` jobs, one at a time, a job of each of a length's three rows in turn (the order rotating each round, so that the machine's drift and noise fall on the three alike), whose answer is 400 code points (the demo kind's size: its summary is at most 400), 2,048 or 20,000 (the same answer padded with JSON whitespace, which its contract reads as the same), streamed four code points per chunk every 5 ms, beside the same jobs on the provider that answers whole, and beside the floor: the same streamed jobs whose call hands its text to no hub (`no_hand_off`), which is what reading the provider's chunks costs, whatever the design. Server CPU is wrangler's and workerd's over the run, per job (an upper bound: wrangler's own included). Subrequests: the store's round trips (D1 queries, or requests to the job's shard), the requests to the job's hub (each document the store hands it, each connection the call opens to it: one, whatever the length), one queue send and one provider call. Messages: the pieces of text the call sends on its connection, each answered on it; no stream watches these jobs, so the hub answers each piece `alone` and the call sends at most one per 500 ms (`ALONE_EVERY_MS`; one per 50 ms, `HAND_OFF_EVERY_MS`, while a stream watches), besides one for each poke (a newer document); an object bills incoming WebSocket messages at 20 to a request. The hub's rows: each kilobyte it keeps while the text streams is a row, and each is deleted (a row written) once the result is stored. $ per million jobs: CPU, the create's request and the consumer's, three queue operations, rows, and object requests (the shard's round trips, the hub's requests, its messages at 20:1), at the prices above; an object's duration is not counted. Before issue 49 each piece was a request of its own: 13.4 and 63 requests to the hub for 400 and 2,048 code points on D1, and 2.22× and 7.82× the whole answer's CPU (measured 2026-12-05).\n\n| store | answer | jobs | server CPU ms per job | × the whole answer's | × the floor | subrequests: store + hub (documents + connections) + queue + provider | messages to the hub | rows written: store + hub | $ per million jobs |\n|---|---|---|---|---|---|---|---|---|---|"
    );
    for (name, what) in [("d1", "D1"), ("durable", "the shards")] {
        let lines = cost[name]["streamed"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let cpu_of = |chars: f64, pick: &dyn Fn(&Value) -> bool| {
            lines
                .iter()
                .find(|l| f(&l["chars"]) == chars && pick(l))
                .map_or(f64::NAN, |l| f(&l["cpu_ms_per_job"]))
        };
        for l in &lines {
            let streams = l["provider"] != "primary";
            let floor = l["floor"] == true;
            let chars = f(&l["chars"]);
            let whole = cpu_of(chars, &|l| l["provider"] == "primary");
            let floor_cpu = cpu_of(chars, &|l| l["floor"] == true);
            let (trips, notifies, opens, messages) = (
                f(&l["round_trips"]),
                f(&l["hub_notifies"]),
                f(&l["hub_opens"]),
                f(&l["hand_offs"]),
            );
            let cpu = f(&l["cpu_ms_per_job"]);
            let rows = f(&l["rows_written"]) + f(&l["hub_rows_written"]);
            let shard_trips = if name == "durable" { trips } else { 0.0 };
            let object_requests = shard_trips + notifies + opens + messages / 20.0;
            let dollars = cpu * price("cpu_ms")
                + 2.0 * price("requests")
                + 3.0 * price("queue_operations")
                + rows_price(f(&l["rows_written"]), f(&l["rows_read"]))
                + f(&l["hub_rows_written"]) * PRICE_PER_MILLION_ROWS.0
                + object_requests * price("object_requests");
            let answer = match (streams, floor) {
                (false, _) => "whole",
                (true, false) => "streamed",
                (true, true) => "streamed, the floor (no hub)",
            };
            let _ = writeln!(
                md,
                "| {what} | {chars:.0} code points, {answer} | {:.0} | {cpu:.1} | {:.2} | {} | {:.1} = {trips:.0} + {notifies:.0} + {opens:.1} + 1 + 1 | {messages:.1} | {rows:.1} = {:.0} + {:.1} | {dollars:.2} |",
                f(&l["jobs"]),
                cpu / whole,
                match streams && !floor {
                    true => format!("{:.2}", cpu / floor_cpu),
                    false => "".to_owned(),
                },
                trips + notifies + opens + 2.0,
                f(&l["rows_written"]),
                f(&l["hub_rows_written"]),
            );
        }
    }
    let _ = writeln!(
        md,
        "\nTen streamed calls in one consumer batch (`probe::batch`: a held call keeps the local consumer busy while their ten messages queue, then they run side by side), each about 100 s long (2,000 code points, 4 every 200 ms), on a Worker whose providers allow that long; the consumer's own count of the invocation's subrequests (`batch_consumed`), against the platform's 10,000 and the bound `10 × (MAX_WATCH_READS + MAX_SUBREQUESTS_BESIDE_WATCH)` = 4,280 (SCALING.md). The watch reads every 250 ms in this Worker (1 s deployed), so each delivery reaches its 300 reads.\n\n| store | messages | subrequests | of them the watch's reads | the rest, per message | connections to the hub, per call | pieces per call | seconds |\n|---|---|---|---|---|---|---|---|"
    );
    for (name, what) in [("d1", "D1"), ("durable", "the shards")] {
        let b = &cost[name]["streamed_batch"];
        let list = |key: &str| -> Vec<f64> {
            b[key]
                .as_array()
                .map_or(Vec::new(), |a| a.iter().map(f).collect())
        };
        let (opens, pieces) = (list("hub_opens"), list("hand_offs"));
        let span = |v: &[f64]| {
            let (lo, hi) = v.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &x| {
                (lo.min(x), hi.max(x))
            });
            format!("{lo:.0} to {hi:.0}")
        };
        let (messages, made, watched) = (
            f(&b["messages"]),
            f(&b["subrequests"]),
            f(&b["watch_reads"]),
        );
        let _ = writeln!(
            md,
            "| {what} | {messages:.0} | {made:.0} | {watched:.0} | {:.1} | {} | {} | {:.0} |",
            (made - watched) / messages,
            span(&opens),
            span(&pieces),
            f(&b["seconds"]),
        );
    }
}
