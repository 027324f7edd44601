//! The list endpoints' reads, and the operators' figures. On one database a page is one
//! statement, one range of one index (see `migrations/0005_lists.sql`), the items
//! rendered by the database; over several places it is a merge of their ids, then the
//! page's documents by id (`Store::page`). Also the figures (`stats`) and what the D1
//! kept by a move still holds.

use super::route::Target;
use super::{bind_num, bind_opt_text, bind_text, exactly, json_text, sql, Op, Rows, Store};
use crate::error::ApiResult;
use crate::fault::{Point, When};
use onceclick_protocol::moving::StoreLayout;
use serde::Deserialize;
use serde_json::{json, Value};

/// Which jobs to list, newest first.
pub enum JobFilter<'a> {
    /// One owner's, in one status when given.
    Owner {
        owner: &'a str,
        status: Option<&'a str>,
    },
    /// Every owner's, in one status.
    Status(&'a str),
    /// Every job.
    All,
}

/// Which attempts to list, oldest first.
pub struct AttemptFilter<'a> {
    pub state: &'a str,
    pub provider: Option<&'a str>,
    /// Only attempts started at or before this time (RFC 3339, as stored).
    pub started_by: Option<&'a str>,
}

/// One page: up to `limit` items (JSON objects as the database rendered them), and the
/// id of the last one when more follow.
pub struct Page {
    pub items: Vec<String>,
    pub next_after: Option<String>,
}

/// A list's row: its id, and its item (absent from the ids-only reads of a merge: one
/// row type keeps one deserializer in the Worker).
#[derive(Deserialize)]
struct Row {
    id: String,
    #[serde(default)]
    item: String,
}

/// One list: its store call's name, its three statements over one filter (see
/// `sql.rs`: the page in one read, the ids alone, and the items of given ids), and its
/// order.
struct ListSql<'a> {
    op: Op,
    order: Order,
    page: &'static str,
    ids: &'static str,
    by_id: &'static str,
    /// The status (or state) the filter asks for, if any: the items of given ids are
    /// read again only in it, so that a job that moved on between the two reads of a
    /// merge is left off the page, as the one-read path would leave it.
    status: Option<&'a str>,
}

/// A list's parameters for a cursor and a row count: the filter's, in its statements'
/// order.
type Params<'a> = dyn Fn(Option<&str>, u32) -> Vec<Value> + 'a;

/// The ids one place is asked for at a time in a merge: its even share of the page, λ,
/// and four standard deviations more (a place holds about Poisson(λ) of a page, the hash
/// spreading an owner's jobs), at least [`MIN_IDS_PER_PLACE`], at most the page. So a
/// refill, a round trip made after the others, is rare at any shard count: a page of 201
/// needs one in under 1 % of pages at 32 or 64 shards, about once in 25,000 at 256.
pub(super) fn ids_per_place(limit: u32, places: usize) -> u32 {
    let fetch = limit + 1;
    let share = f64::from(fetch) / places.max(1) as f64;
    let k = (share + 4.0 * share.sqrt()).ceil() as u32;
    k.max(MIN_IDS_PER_PLACE).min(fetch)
}

/// The fewest ids a place is asked for at a time: 8 ids of about 60 bytes, so at most
/// 2 MB of ids at 4,096 shards.
const MIN_IDS_PER_PLACE: u32 = 8;

impl Store {
    /// A page of jobs after the id `after` (the previous page's last).
    pub async fn list_jobs(
        &self,
        filter: &JobFilter<'_>,
        after: Option<&str>,
        limit: u32,
    ) -> ApiResult<Page> {
        let (sql, params): (ListSql<'_>, Box<Params<'_>>) = match filter {
            JobFilter::Owner { owner, status } => (
                ListSql {
                    op: Op::ListJobs,
                    order: Order::NewestFirst,
                    page: sql::LIST_JOBS_OF_OWNER,
                    ids: sql::LIST_JOB_IDS_OF_OWNER,
                    by_id: sql::LIST_JOBS_BY_ID,
                    status: *status,
                },
                Box::new(move |after, n| {
                    vec![
                        bind_text(owner),
                        bind_opt_text(after),
                        bind_opt_text(*status),
                        bind_num(n),
                    ]
                }),
            ),
            JobFilter::Status(status) => (
                ListSql {
                    op: Op::ListJobs,
                    order: Order::NewestFirst,
                    page: sql::LIST_JOBS_BY_STATUS,
                    ids: sql::LIST_JOB_IDS_BY_STATUS,
                    by_id: sql::LIST_JOBS_BY_ID,
                    status: Some(status),
                },
                Box::new(move |after, n| {
                    vec![bind_text(status), bind_opt_text(after), bind_num(n)]
                }),
            ),
            JobFilter::All => (
                ListSql {
                    op: Op::ListJobs,
                    order: Order::NewestFirst,
                    page: sql::LIST_JOBS,
                    ids: sql::LIST_JOB_IDS,
                    by_id: sql::LIST_JOBS_BY_ID,
                    status: None,
                },
                Box::new(|after, n| vec![bind_opt_text(after), bind_num(n)]),
            ),
        };
        self.page(&sql, &*params, after, limit).await
    }

    /// A page of attempts after the id `after` (the previous page's last).
    pub async fn list_attempts(
        &self,
        filter: &AttemptFilter<'_>,
        after: Option<&str>,
        limit: u32,
    ) -> ApiResult<Page> {
        let sql = ListSql {
            op: Op::ListAttempts,
            order: Order::OldestFirst,
            page: sql::LIST_ATTEMPTS,
            ids: sql::LIST_ATTEMPT_IDS,
            by_id: sql::LIST_ATTEMPTS_BY_ID,
            status: Some(filter.state),
        };
        let params = |after: Option<&str>, n: u32| {
            vec![
                bind_text(filter.state),
                bind_opt_text(after),
                bind_opt_text(filter.provider),
                bind_opt_text(filter.started_by),
                bind_num(n),
            ]
        };
        self.page(&sql, &params, after, limit).await
    }

    /// The page of `limit` items after `after`, and whether another follows (one more
    /// row than asked for tells).
    ///
    /// - **One place** (D1): one read of the page's rows.
    /// - **Several** (the shards, and the D1 kept from before a move): a merge that holds
    ///   only ids until the page is known. Every place is asked for its first
    ///   [`ids_per_place`] ids; the best head of all is taken, one at a time, and a place
    ///   whose ids run out is asked for its next ones; then each place that holds items
    ///   of the page is asked for those items' documents, by id. So the answers alive at
    ///   once are at most every place's few ids, or the page's own documents: never
    ///   every place's page of documents.
    async fn page(
        &self,
        sql: &ListSql<'_>,
        params: &Params<'_>,
        after: Option<&str>,
        limit: u32,
    ) -> ApiResult<Page> {
        let op = sql.op;
        if let Some(fault) = self.fault(Point::Store(op), When::Before) {
            return Err(fault);
        }
        let places = self.layout.everywhere();
        let page = if places.len() == 1 {
            let stmt = self.stmt(sql.page, &params(after, limit + 1))?;
            let [rows] = exactly(self.call(&places[0], vec![stmt]).await?, op)?;
            let mut rows = rows.results::<Row>()?;
            let more = rows.len() > limit as usize;
            rows.truncate(limit as usize);
            Page {
                next_after: more.then(|| rows.last().map(|r| r.id.clone())).flatten(),
                items: rows.into_iter().map(|r| r.item).collect(),
            }
        } else {
            self.merge(&places, sql, params, after, limit).await?
        };
        match self.fault(Point::Store(op), When::After) {
            Some(fault) => Err(fault),
            None => Ok(page),
        }
    }

    /// The merge of [`Store::page`] over several places.
    async fn merge(
        &self,
        places: &[Target],
        sql: &ListSql<'_>,
        params: &Params<'_>,
        after: Option<&str>,
        limit: u32,
    ) -> ApiResult<Page> {
        let (op, order) = (sql.op, sql.order);
        let per_place = ids_per_place(limit, places.len());
        let mut trace = Trace::new(self.log_calls);
        let mut runs: Vec<Run> = Vec::with_capacity(places.len());
        // The first round: every place at once (32 in flight at a time).
        let everywhere: Vec<&Target> = places.iter().collect();
        let first_ids = |_| Ok(vec![self.stmt(sql.ids, &params(after, per_place))?]);
        let answers = self.call_all(&everywhere, &first_ids).await?;
        let at_once: usize = answers.iter().flatten().map(|rows| trace.bytes(rows)).sum();
        trace.alive(at_once, &runs);
        for (place, rows) in places.iter().zip(answers) {
            let [rows] = exactly(rows, op)?;
            let ids = ids_of(&rows)?;
            trace.asked(place, "ids", per_place, ids.len(), trace.bytes(&rows));
            runs.push(Run::new(ids, per_place));
        }
        let wanted = limit as usize + 1;
        let mut picked: Vec<(String, usize)> = Vec::with_capacity(wanted);
        while picked.len() < wanted {
            // The best head of all: a scan of every place's next id (a few thousand at
            // most, and cheaper in the Worker's size than a heap).
            let mut best: Option<usize> = None;
            for (place, run) in runs.iter().enumerate() {
                let Some(id) = run.head() else { continue };
                let better = match best.and_then(|b| runs[b].head()) {
                    None => true,
                    Some(best_id) => match order {
                        Order::NewestFirst => id > best_id,
                        Order::OldestFirst => id < best_id,
                    },
                };
                if better {
                    best = Some(place);
                }
            }
            let Some(place) = best else { break };
            let run = &mut runs[place];
            let id = run.ids[run.next].clone();
            run.next += 1;
            picked.push((id, place));
            if run.next == run.ids.len() && run.more && picked.len() < wanted {
                // This place's next ids, after the last one it gave.
                let last = run.ids.last().cloned();
                let stmt = self.stmt(sql.ids, &params(last.as_deref(), per_place))?;
                let [rows] = exactly(self.call(&places[place], vec![stmt]).await?, op)?;
                let bytes = trace.bytes(&rows);
                trace.alive(bytes, &runs);
                let ids = ids_of(&rows)?;
                trace.asked(&places[place], "ids", per_place, ids.len(), bytes);
                runs[place] = Run::new(ids, per_place);
            }
        }
        let more = picked.len() > limit as usize;
        picked.truncate(limit as usize);
        let held_ids: usize = picked.iter().map(|(id, _)| id.len()).sum();
        drop(runs);
        // The page's documents: one call to each place that holds some of them.
        let mut items: Vec<Option<String>> = vec![None; picked.len()];
        let mut holds = vec![false; places.len()];
        for (_, place) in &picked {
            holds[*place] = true;
        }
        let owners: Vec<usize> = (0..places.len()).filter(|&p| holds[p]).collect();
        let holders: Vec<&Target> = owners.iter().map(|&p| &places[p]).collect();
        let documents = |i: usize| {
            let ids: Vec<&str> = picked
                .iter()
                .filter(|(_, p)| *p == owners[i])
                .map(|(id, _)| id.as_str())
                .collect();
            let params = [bind_text(&json_text(&ids)?), bind_opt_text(sql.status)];
            Ok(vec![self.stmt(sql.by_id, &params)?])
        };
        let answers = self.call_all(&holders, &documents).await?;
        let page_bytes: usize = answers.iter().flatten().map(|rows| trace.bytes(rows)).sum();
        trace.alive(page_bytes + held_ids, &[]);
        for (&place, rows) in owners.iter().zip(answers) {
            let [rows] = exactly(rows, op)?;
            let bytes = trace.bytes(&rows);
            let rows = rows.results::<Row>()?;
            let asked = picked.iter().filter(|(_, p)| *p == place).count();
            trace.asked(&places[place], "documents", asked as u32, rows.len(), bytes);
            for row in rows {
                if let Some(i) = picked.iter().position(|(id, _)| *id == row.id) {
                    items[i] = Some(row.item);
                }
            }
        }
        let first = picked.first().map(|(id, _)| id.as_str());
        trace.log(op.name(), limit, first, page_bytes);
        Ok(Page {
            next_after: if more {
                picked.last().map(|(id, _)| id.clone())
            } else {
                None
            },
            // A job purged between the two reads is simply not on the page.
            items: items.into_iter().flatten().collect(),
        })
    }
}

fn ids_of(rows: &Rows) -> ApiResult<Vec<String>> {
    Ok(rows.results::<Row>()?.into_iter().map(|r| r.id).collect())
}

/// One place's ids in list order, those before `next` taken, and whether it may hold
/// more after the last.
struct Run {
    ids: Vec<String>,
    next: usize,
    /// It gave as many as it was asked for: more may follow.
    more: bool,
}

impl Run {
    fn new(ids: Vec<String>, asked: u32) -> Self {
        Self {
            more: ids.len() >= asked as usize,
            next: 0,
            ids,
        }
    }

    /// Its next id not yet taken.
    fn head(&self) -> Option<&str> {
        self.ids.get(self.next).map(String::as_str)
    }
}

#[derive(Clone, Copy)]
enum Order {
    NewestFirst,
    OldestFirst,
}

/// With `LOG_STORE_CALLS` on: what a merge asked each place for, and the most bytes of
/// answers it held at once, as one `list_page` line. The bytes are each answer's rows
/// as JSON (what the runtime parsed them from); off, nothing is measured.
struct Trace {
    on: bool,
    asked: Vec<Value>,
    peak: usize,
}

impl Trace {
    fn new(on: bool) -> Self {
        Self {
            on,
            asked: Vec::new(),
            peak: 0,
        }
    }

    fn bytes(&self, rows: &Rows) -> usize {
        if self.on {
            rows.json_bytes()
        } else {
            0
        }
    }

    /// `answers` bytes alive at once, beside the ids the runs hold.
    fn alive(&mut self, answers: usize, runs: &[Run]) {
        if self.on {
            let held: usize = runs
                .iter()
                .flat_map(|r| &r.ids[r.next..])
                .map(String::len)
                .sum();
            self.peak = self.peak.max(answers + held);
        }
    }

    fn asked(&mut self, place: &Target, what: &str, limit: u32, rows: usize, bytes: usize) {
        if self.on {
            self.asked
                .push(json!({"place": place.name(), "for": what, "limit": limit,
                                   "rows": rows, "bytes": bytes}));
        }
    }

    fn log(self, op: &str, limit: u32, first: Option<&str>, page_bytes: usize) {
        if self.on {
            crate::log::info(
                json!({"event": "list_page", "op": op, "limit": limit, "first": first,
                       "asked": self.asked,
                       "peak_bytes": self.peak, "page_bytes": page_bytes}),
            );
        }
    }
}

/// One counter of `GET /v1/stats`, summed over its window.
#[derive(Deserialize)]
pub struct StatRow {
    pub kind: String,
    pub provider: String,
    pub metric: String,
    pub n: i64,
}

impl Store {
    /// The figures of the minutes from `since_minute` (`YYYY-MM-DDTHH:MM`) on, summed by
    /// kind, provider and metric. One statement on the counters' primary key.
    pub async fn stats(&self, since_minute: &str) -> ApiResult<Vec<StatRow>> {
        let places = self
            .exec_everywhere(Op::Stats, || {
                Ok(vec![self.stmt(sql::STATS, &[bind_text(since_minute)])?])
            })
            .await?;
        let mut sums: Vec<StatRow> = Vec::new();
        for set in places.into_iter().flatten() {
            for row in set.results::<StatRow>()? {
                let same = |s: &&mut StatRow| {
                    s.kind == row.kind && s.provider == row.provider && s.metric == row.metric
                };
                match sums.iter_mut().find(same) {
                    Some(sum) => sum.n += row.n,
                    None => sums.push(row),
                }
            }
        }
        Ok(sums)
    }
}

impl Store {
    /// What the previous layout still holds during a move (`PREVIOUS_STORE`), summed over
    /// its places (one round trip to each, concurrently), with that layout and how many
    /// places it has; `None` (and no call) otherwise.
    pub async fn previous_store_status(
        &self,
    ) -> ApiResult<Option<(StoreLayout, usize, onceclick_protocol::moving::MoveStatus)>> {
        let Some(previous) = self.layout.previous() else {
            return Ok(None);
        };
        let places = self.layout.previous_places();
        let sets = self
            .exec_at(Op::MoveStatus, &places, || {
                Ok(vec![self.stmt(sql::MOVE_STATUS, &[])?])
            })
            .await?;
        let mut sum = onceclick_protocol::moving::MoveStatus::default();
        for rows in sets.iter().flatten() {
            if let Some(place) = super::first_row(rows)? {
                sum.add(place);
            }
        }
        Ok(Some((previous, places.len(), sum)))
    }
}
