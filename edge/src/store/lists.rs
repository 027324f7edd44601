//! The list endpoints' reads: one statement each, one range of one index (see
//! `migrations/0005_lists.sql`), the items rendered by the database.

use super::{js, js_num, js_opt, sql, Stmt, Store};
use crate::error::ApiResult;
use serde::Deserialize;

/// Which jobs to list, newest first.
pub(crate) enum JobFilter<'a> {
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
pub(crate) struct AttemptFilter<'a> {
    pub(crate) state: &'a str,
    pub(crate) provider: Option<&'a str>,
    /// Only attempts started at or before this time (RFC 3339, as stored).
    pub(crate) started_by: Option<&'a str>,
}

/// One page: up to `limit` items (JSON objects as the database rendered them), and the
/// id of the last one when more follow.
pub(crate) struct Page {
    pub(crate) items: Vec<String>,
    pub(crate) next_after: Option<String>,
}

#[derive(Deserialize)]
struct Row {
    id: String,
    item: String,
}

impl Store {
    /// A page of jobs after the id `after` (the previous page's last).
    pub(crate) async fn list_jobs(
        &self,
        filter: &JobFilter<'_>,
        after: Option<&str>,
        limit: u32,
    ) -> ApiResult<Page> {
        // One row more than asked for tells whether another page follows.
        let fetch = js_num(limit + 1);
        let stmt = || match filter {
            JobFilter::Owner { owner, status } => self.stmt(
                sql::LIST_JOBS_OF_OWNER,
                &[js(owner), js_opt(after), js_opt(*status), fetch.clone()],
            ),
            JobFilter::Status(status) => self.stmt(
                sql::LIST_JOBS_BY_STATUS,
                &[js(status), js_opt(after), fetch.clone()],
            ),
            JobFilter::All => self.stmt(sql::LIST_JOBS, &[js_opt(after), fetch.clone()]),
        };
        self.page("list_jobs", stmt, limit, Order::NewestFirst)
            .await
    }

    /// A page of attempts after the id `after` (the previous page's last).
    pub(crate) async fn list_attempts(
        &self,
        filter: &AttemptFilter<'_>,
        after: Option<&str>,
        limit: u32,
    ) -> ApiResult<Page> {
        let stmt = || {
            self.stmt(
                sql::LIST_ATTEMPTS,
                &[
                    js(filter.state),
                    js_opt(after),
                    js_opt(filter.provider),
                    js_opt(filter.started_by),
                    js_num(limit + 1),
                ],
            )
        };
        self.page("list_attempts", stmt, limit, Order::OldestFirst)
            .await
    }

    /// Runs `stmt` in every place (one database, or every shard) and merges the pages by
    /// id: each place gives its first `limit + 1` rows after the cursor, so the first
    /// `limit` of the merge are the first `limit` overall, and one more tells whether a
    /// page follows.
    async fn page(
        &self,
        op: &str,
        stmt: impl Fn() -> ApiResult<Stmt>,
        limit: u32,
        order: Order,
    ) -> ApiResult<Page> {
        let mut rows = Vec::new();
        for place in self.exec_everywhere(op, || Ok(vec![stmt()?])).await? {
            for set in place {
                rows.extend(set.results::<Row>()?);
            }
        }
        rows.sort_by(|a, b| match order {
            Order::NewestFirst => b.id.cmp(&a.id),
            Order::OldestFirst => a.id.cmp(&b.id),
        });
        let more = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        let next_after = if more {
            rows.last().map(|r| r.id.clone())
        } else {
            None
        };
        Ok(Page {
            items: rows.into_iter().map(|r| r.item).collect(),
            next_after,
        })
    }
}

#[derive(Clone, Copy)]
enum Order {
    NewestFirst,
    OldestFirst,
}

/// One counter of `GET /v1/stats`, summed over its window.
#[derive(Deserialize)]
pub(crate) struct StatRow {
    pub(crate) kind: String,
    pub(crate) provider: String,
    pub(crate) metric: String,
    pub(crate) n: i64,
}

impl Store {
    /// The figures of the minutes from `since_minute` (`YYYY-MM-DDTHH:MM`) on, summed by
    /// kind, provider and metric. One statement on the counters' primary key.
    pub(crate) async fn stats(&self, since_minute: &str) -> ApiResult<Vec<StatRow>> {
        let places = self
            .exec_everywhere("stats", || {
                Ok(vec![self.stmt(sql::STATS, &[js(since_minute)])?])
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
