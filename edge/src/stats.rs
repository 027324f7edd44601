//! `GET /v1/stats` (admin): what happened over a window, by kind and provider, from the
//! counters that triggers keep as things happen (`migrations/0006_stats.sql`). One read
//! of the counters' primary key; `job_events` is never scanned for it.

use crate::error::ApiResult;
use crate::http::{json, query, whole_number, Ctx};
use crate::store::StatRow;
use serde_json::{json, Map, Value};
use worker::{Headers, Request, Response};

/// The window when the request names none: the last hour.
const DEFAULT_WINDOW_S: u64 = 3_600;
/// The longest window: the counters are kept as long as jobs are, at least a day.
const MAX_WINDOW_S: u64 = 7 * 86_400;

/// The latency histogram's buckets, by upper bound in ms, as the migration names them.
const BUCKETS: [&str; 10] = [
    "100", "250", "500", "1000", "2500", "5000", "10000", "30000", "60000", "inf",
];

/// Attempt outcomes counted, as `attempts_<state>`.
const OUTCOMES: [&str; 6] = [
    "succeeded",
    "failed",
    "unknown",
    "abandoned",
    "superseded",
    "cancelled",
];

/// The window in seconds from `?window_s=`.
fn window(req: &Request) -> ApiResult<u64> {
    let query = query(req, &["window_s"])?;
    Ok(whole_number(&query, "window_s", 60..=MAX_WINDOW_S)?.unwrap_or(DEFAULT_WINDOW_S))
}

/// The counters of one kind and provider (or of all), as the API shows them.
#[derive(Default)]
struct Figures {
    counts: Map<String, Value>,
    histogram: [i64; BUCKETS.len()],
}

impl Figures {
    fn add(&mut self, metric: &str, n: i64) {
        if let Some(bucket) = metric.strip_prefix("latency_le_") {
            if let Some(i) = BUCKETS.iter().position(|b| *b == bucket) {
                self.histogram[i] += n;
            }
            return;
        }
        let total = self.counts.get(metric).and_then(Value::as_i64).unwrap_or(0) + n;
        self.counts.insert(metric.to_owned(), json!(total));
    }

    fn count(&self, metric: &str) -> i64 {
        self.counts.get(metric).and_then(Value::as_i64).unwrap_or(0)
    }

    /// The upper bound of the bucket that holds quantile `q`: `null` without data or
    /// past the last bound.
    fn quantile(&self, q: f64) -> Value {
        let total: i64 = self.histogram.iter().sum();
        if total == 0 {
            return Value::Null;
        }
        let rank = (q * total as f64).ceil().max(1.0) as i64;
        let mut seen = 0;
        for (i, n) in self.histogram.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return BUCKETS[i]
                    .parse::<u64>()
                    .map_or(Value::Null, |ms| json!(ms));
            }
        }
        Value::Null
    }

    fn to_json(&self) -> Value {
        let attempts: Map<String, Value> = OUTCOMES
            .iter()
            .map(|o| ((*o).to_owned(), json!(self.count(&format!("attempts_{o}")))))
            .collect();
        let histogram: Map<String, Value> = BUCKETS
            .iter()
            .zip(self.histogram)
            .map(|(b, n)| ((*b).to_owned(), json!(n)))
            .collect();
        json!({
            "jobs_created": self.count("jobs_created"),
            "replays": self.count("replays"),
            "conflicts": self.count("conflicts"),
            "attempts": attempts,
            "races_lost": self.count("attempts_superseded"),
            "retries_started": self.count("retries_started"),
            "failovers": {"started": self.count("failovers_started"), "skipped": self.count("failovers_skipped")},
            "hedges": {"started": self.count("hedges_started"), "skipped": self.count("hedges_skipped")},
            "tokens": self.count("tokens"),
            "latency_ms": {
                "answered": self.histogram.iter().sum::<i64>(),
                "p50": self.quantile(0.50),
                "p99": self.quantile(0.99),
                "histogram": histogram,
            },
        })
    }
}

/// The page of `GET /v1/stats` for `rows`, counted over `[from, to]`.
fn render(rows: &[StatRow], from: &str, to: &str, seconds: u64) -> Value {
    let mut totals = Figures::default();
    let mut by: Vec<((String, String), Figures)> = Vec::new();
    for row in rows {
        totals.add(&row.metric, row.n);
        let key = (row.kind.clone(), row.provider.clone());
        let at = match by.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                by.push((key, Figures::default()));
                by.len() - 1
            }
        };
        by[at].1.add(&row.metric, row.n);
    }
    by.sort_by(|a, b| a.0.cmp(&b.0));
    let by: Vec<Value> = by
        .into_iter()
        .map(|((kind, provider), figures)| {
            let mut v = figures.to_json();
            v["kind"] = json!(kind);
            v["provider"] = json!(provider);
            v
        })
        .collect();
    json!({
        "window": {"from": from, "to": to, "seconds": seconds},
        "totals": totals.to_json(),
        "by_kind_and_provider": by,
    })
}

/// `GET /v1/stats?window_s=3600`.
pub(crate) async fn get(req: &Request, ctx: &Ctx<'_>) -> ApiResult<Response> {
    let seconds = window(req)?;
    let now = crate::clock::now_ms();
    let from = crate::clock::rfc3339(now - seconds as f64 * 1000.0);
    let to = crate::clock::rfc3339(now);
    let since = from.get(..16).unwrap_or(&from);
    let rows = ctx.store.stats(since).await?;
    let headers = Headers::new();
    headers
        .set("Cache-Control", "no-store")
        .map_err(crate::problem::runtime)?;
    json(200, render(&rows, &from, &to, seconds).to_string(), headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(kind: &str, provider: &str, metric: &str, n: i64) -> StatRow {
        StatRow {
            kind: kind.into(),
            provider: provider.into(),
            metric: metric.into(),
            n,
        }
    }

    #[test]
    fn counters_add_up_by_kind_and_provider_and_in_total() {
        let rows = [
            row("summarize", "primary", "jobs_created", 3),
            row("summarize", "fallback", "attempts_succeeded", 1),
            row("summarize", "primary", "attempts_superseded", 2),
            row("translate", "primary", "jobs_created", 1),
        ];
        let page = render(&rows, "a", "b", 60);
        assert_eq!(page["totals"]["jobs_created"], 4);
        assert_eq!(page["totals"]["races_lost"], 2);
        assert_eq!(page["totals"]["attempts"]["superseded"], 2);
        let by = page["by_kind_and_provider"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(by.len(), 3);
        assert_eq!(by[0]["provider"], "fallback");
        assert_eq!(by[1]["jobs_created"], 3);
    }

    #[test]
    fn quantiles_come_from_the_histogram_buckets() {
        let mut f = Figures::default();
        assert_eq!(f.quantile(0.5), Value::Null);
        f.add("latency_le_100", 98);
        f.add("latency_le_2500", 1);
        f.add("latency_le_inf", 1);
        assert_eq!(f.quantile(0.5), json!(100));
        assert_eq!(f.quantile(0.99), json!(2500));
        assert_eq!(f.quantile(1.0), Value::Null, "past the last bound");
    }
}
