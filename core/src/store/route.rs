//! Where a store call goes: the [`Route`] a call names, the [`Layout`] of the store,
//! and the [`Target`] the two make, whatever carries the call there ([`Places`]: the
//! Worker's D1 and Durable Objects, or the simulator's databases). Routing is decided
//! here, once, for both.

use super::rows::{Cost, Rows, Stmt};
use crate::error::{ApiResult, AppError};
use futures_util::future::LocalBoxFuture;
use onceclick_protocol::shard::{self, IdRoute, Shard, ShardCount};

/// Which place a store call is about.
#[derive(Clone, Copy)]
pub enum Route<'a> {
    /// The job bound to (owner, key): a create, or a replay.
    Key { owner: &'a str, key: &'a str },
    /// The job or attempt with this id: its shard is in the id.
    Id(&'a str),
    /// Any one place that holds the certifications, for a read that belongs to no job
    /// (`GET /v1/providers`, `GET /v1/health`): the database, or a shard picked at random
    /// (every shard holds the same copy), so that no one object answers them all. A
    /// job's own reads of the certifications route by its id instead.
    Any,
    /// The store as one database: the reconciler's sweeps, which run on D1 or inside a
    /// shard, never across shards.
    Sweep,
    /// The previous layout's database, if the deployment keeps one: where a create
    /// first looks for its key.
    Previous,
}

/// How a store's places are laid out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Layout {
    /// One database (`d1`), as on `STORE=d1`.
    One,
    /// Inside one shard (its object's name): its own database, for its reconciler.
    Inside(String),
    /// `count` shards, and the previous layout's D1 (`d1`) if `previous`.
    Sharded { count: ShardCount, previous: bool },
}

/// One place a call runs in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// The one database, or the previous layout's (`d1`).
    Database,
    /// A shard's object.
    Shard(Shard),
    /// The shard the store is inside (its object's name).
    Here(String),
    /// No place: an id no layout of this store made names no row anywhere.
    Nowhere,
}

impl Target {
    /// The name `Server-Timing` and the log report this place under.
    pub fn name(&self) -> String {
        match self {
            Target::Database => "d1".to_owned(),
            Target::Shard(shard) => shard.object_name(),
            Target::Here(name) => name.clone(),
            Target::Nowhere => "none".to_owned(),
        }
    }
}

/// What carries a store call to its place: one batch of statements, run there as one
/// transaction; their rows, and what the place billed for them.
pub trait Places {
    fn run<'a>(
        &'a self,
        target: &'a Target,
        statements: Vec<Stmt>,
    ) -> LocalBoxFuture<'a, ApiResult<(Vec<Rows>, Cost)>>;
}

impl Layout {
    /// The place `route` names.
    pub fn target(&self, route: Route<'_>) -> ApiResult<Target> {
        let (count, previous) = match self {
            Layout::One | Layout::Inside(_) if matches!(route, Route::Previous) => {
                return Ok(Target::Nowhere)
            }
            Layout::One => return Ok(Target::Database),
            Layout::Inside(name) => return Ok(Target::Here(name.clone())),
            Layout::Sharded { count, previous } => (*count, *previous),
        };
        Ok(match route {
            Route::Key { owner, key } => Target::Shard(shard::shard_for_key(owner, key, count)),
            // An id of another shard count names no job of this layout: routing it would
            // bring an object of that count into being for nothing.
            Route::Id(id) => match shard::route_of_id(id) {
                IdRoute::Shard(shard) if shard.count == count => Target::Shard(shard),
                IdRoute::Shard(_) => Target::Nowhere,
                IdRoute::Database if previous => Target::Database,
                IdRoute::Database | IdRoute::Unknown => Target::Nowhere,
            },
            Route::Any => Target::Shard(Shard {
                count,
                index: crate::clock::random_below(count.get()),
            }),
            Route::Previous if previous => Target::Database,
            Route::Previous => Target::Nowhere,
            Route::Sweep => {
                return Err(AppError::internal(
                    "a sharded store is swept inside each shard, never as a whole",
                ))
            }
        })
    }

    /// Every place: each shard and the previous layout's D1, or the one database.
    pub fn everywhere(&self) -> Vec<Target> {
        match self {
            Layout::One => vec![Target::Database],
            Layout::Inside(name) => vec![Target::Here(name.clone())],
            Layout::Sharded { count, previous } => (0..count.get())
                .map(|index| {
                    Target::Shard(Shard {
                        count: *count,
                        index,
                    })
                })
                .chain(previous.then_some(Target::Database))
                .collect(),
        }
    }

    /// A job id and an attempt id for the place `route` names: UUIDv7 in a database,
    /// UUIDv8 naming the shard in a sharded layout.
    pub fn new_ids(&self, route: Route<'_>) -> (String, String) {
        let shard = match (self, route) {
            (Layout::Sharded { count, .. }, Route::Key { owner, key }) => {
                Some(shard::shard_for_key(owner, key, *count))
            }
            (Layout::Sharded { count, .. }, Route::Id(id)) => match shard::route_of_id(id) {
                IdRoute::Shard(shard) if shard.count == *count => Some(shard),
                _ => None,
            },
            _ => None,
        };
        let id = |prefix: &str| {
            let v7 = crate::clock::uuid_v7();
            shard
                .and_then(|s| shard::sharded_id(prefix, &v7, s))
                .unwrap_or_else(|| format!("{prefix}_{v7}"))
        };
        (id("job"), id("att"))
    }

    /// True when jobs live in shards that reconcile themselves.
    pub fn is_sharded(&self) -> bool {
        matches!(self, Layout::Sharded { .. })
    }

    /// How many places a write to every place goes to (a certification's).
    pub fn places(&self) -> u32 {
        match self {
            Layout::Sharded { count, previous } => count.get() + u32::from(*previous),
            _ => 1,
        }
    }

    /// True when a sharded layout keeps the D1 database it moved from.
    pub fn has_previous(&self) -> bool {
        matches!(self, Layout::Sharded { previous: true, .. })
    }

    /// The name of the one place this store is (`d1`, a shard's), or `shards`.
    pub fn name(&self) -> String {
        match self {
            Layout::One => "d1".to_owned(),
            Layout::Inside(name) => name.clone(),
            Layout::Sharded { .. } => "shards".to_owned(),
        }
    }
}
