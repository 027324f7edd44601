//! Where a store call goes: the [`Route`] a call names, the [`Layout`] of the store,
//! and the [`Target`] the two make, whatever carries the call there ([`Places`]: the
//! Worker's D1 and Durable Objects, or the simulator's databases). Routing is decided
//! here, once, for both.

use super::rows::{Cost, Rows, Stmt};
use crate::error::{ApiResult, AppError};
use futures_util::future::LocalBoxFuture;
use onceclick_protocol::moving::StoreLayout;
use onceclick_protocol::shard::{self, IdRoute, Shard, ShardCount};

/// Which place a store call is about.
#[derive(Clone, Copy)]
pub enum Route<'a> {
    /// The job bound to (owner, key): a create, or a replay.
    Key { owner: &'a str, key: &'a str },
    /// The job or attempt with this id: its place is in the id (a UUIDv7 is a D1's, a
    /// UUIDv8 names its shard and the count it was made under).
    Id(&'a str),
    /// Any one place that holds the certifications, for a read that belongs to no job
    /// (`GET /v1/providers`, `GET /v1/health`): the database, or a shard picked at random
    /// (every shard holds the same copy), so that no one object answers them all. A
    /// job's own reads of the certifications route by its id instead.
    Any,
    /// The store as one database: the reconciler's sweeps, which run on D1 or inside a
    /// shard, never across shards.
    Sweep,
    /// Where (owner, key) would be bound in the previous layout, if the deployment keeps
    /// one (a move): its D1, or the shard the pair hashes to under the previous count.
    /// Where a create first looks for its key.
    Previous { owner: &'a str, key: &'a str },
}

/// How a store's places are laid out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Inside one shard (its object's name): its own database, for its reconciler.
    Inside(String),
    /// A deployment's: its layout `now` (where new keys bind), and the one it is moving
    /// from, if any (`PREVIOUS_STORE`), whose jobs still route there by their ids.
    Deployed {
        now: StoreLayout,
        previous: Option<StoreLayout>,
    },
}

/// One place a call runs in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// The D1 database (the layout's now, or the previous one's).
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
    /// One D1 database, as on `STORE=d1` with no move.
    pub fn one() -> Self {
        Layout::Deployed {
            now: StoreLayout::D1,
            previous: None,
        }
    }

    /// `count` shards with no move.
    pub fn sharded(count: ShardCount) -> Self {
        Layout::Deployed {
            now: StoreLayout::Shards(count),
            previous: None,
        }
    }

    /// The place `route` names.
    pub fn target(&self, route: Route<'_>) -> ApiResult<Target> {
        let (now, previous) = match self {
            Layout::Inside(name) => {
                return Ok(match route {
                    Route::Previous { .. } => Target::Nowhere,
                    _ => Target::Here(name.clone()),
                })
            }
            Layout::Deployed { now, previous } => (*now, *previous),
        };
        Ok(match route {
            Route::Key { owner, key } => key_target(now, owner, key),
            Route::Previous { owner, key } => match previous {
                Some(previous) => key_target(previous, owner, key),
                None => Target::Nowhere,
            },
            // An id of a layout this store does not keep names no job of it: routing it
            // would bring an object of that count into being for nothing.
            Route::Id(id) => {
                let target = match shard::route_of_id(id) {
                    IdRoute::Shard(shard) => {
                        (StoreLayout::Shards(shard.count), Target::Shard(shard))
                    }
                    IdRoute::Database => (StoreLayout::D1, Target::Database),
                    IdRoute::Unknown => return Ok(Target::Nowhere),
                };
                match target {
                    (layout, target) if layout == now || Some(layout) == previous => target,
                    _ => Target::Nowhere,
                }
            }
            Route::Any => match now {
                StoreLayout::D1 => Target::Database,
                StoreLayout::Shards(count) => Target::Shard(Shard {
                    count,
                    index: crate::clock::random_below(count.get()),
                }),
            },
            Route::Sweep => match now {
                StoreLayout::D1 => Target::Database,
                StoreLayout::Shards(_) => {
                    return Err(AppError::internal(
                        "a sharded store is swept inside each shard, never as a whole",
                    ))
                }
            },
        })
    }

    /// Every place: each of the layout now, then each of the previous one.
    pub fn everywhere(&self) -> Vec<Target> {
        match self {
            Layout::Inside(name) => vec![Target::Here(name.clone())],
            Layout::Deployed { now, previous } => {
                let mut places = places_of(*now);
                places.extend(previous.map(places_of).unwrap_or_default());
                places
            }
        }
    }

    /// Every place of the previous layout (none without a move).
    pub fn previous_places(&self) -> Vec<Target> {
        match self {
            Layout::Deployed {
                previous: Some(previous),
                ..
            } => places_of(*previous),
            _ => Vec::new(),
        }
    }

    /// The deployment's layout now (none inside a shard).
    pub fn now(&self) -> Option<StoreLayout> {
        match self {
            Layout::Deployed { now, .. } => Some(*now),
            Layout::Inside(_) => None,
        }
    }

    /// The previous layout, during a move.
    pub fn previous(&self) -> Option<StoreLayout> {
        match self {
            Layout::Deployed { previous, .. } => *previous,
            Layout::Inside(_) => None,
        }
    }

    /// A job id and an attempt id for the place `route` names: UUIDv7 in a database,
    /// UUIDv8 naming the shard otherwise. An attempt of a job (`Route::Id`) is made where
    /// its job lives, under the count the job was made under, whatever the layout now:
    /// during a move an old job's new attempt stays in its old shard.
    pub fn new_ids(&self, route: Route<'_>) -> (String, String) {
        let shard = match (self, route) {
            (Layout::Deployed { now, .. }, Route::Key { owner, key }) => {
                match key_target(*now, owner, key) {
                    Target::Shard(shard) => Some(shard),
                    _ => None,
                }
            }
            (_, Route::Id(id)) => match shard::route_of_id(id) {
                IdRoute::Shard(shard) => Some(shard),
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

    /// True when new jobs live in shards that reconcile themselves.
    pub fn is_sharded(&self) -> bool {
        matches!(
            self,
            Layout::Deployed {
                now: StoreLayout::Shards(_),
                ..
            }
        )
    }

    /// How many places a write to every place goes to (a certification's).
    pub fn places(&self) -> u32 {
        match self {
            Layout::Inside(_) => 1,
            Layout::Deployed { now, previous } => {
                count_of(*now) + previous.map(count_of).unwrap_or(0)
            }
        }
    }

    /// True during a move: the deployment keeps the layout it moves from.
    pub fn has_previous(&self) -> bool {
        self.previous().is_some()
    }

    /// The name of the one place this store is (`d1`, a shard's), or `shards`.
    pub fn name(&self) -> String {
        match self {
            Layout::Inside(name) => name.clone(),
            Layout::Deployed {
                now: StoreLayout::D1,
                ..
            } => "d1".to_owned(),
            Layout::Deployed { .. } => "shards".to_owned(),
        }
    }
}

/// Where (owner, key) binds in `layout`.
fn key_target(layout: StoreLayout, owner: &str, key: &str) -> Target {
    match layout {
        StoreLayout::D1 => Target::Database,
        StoreLayout::Shards(count) => Target::Shard(shard::shard_for_key(owner, key, count)),
    }
}

/// Every place of `layout`.
fn places_of(layout: StoreLayout) -> Vec<Target> {
    match layout {
        StoreLayout::D1 => vec![Target::Database],
        StoreLayout::Shards(count) => (0..count.get())
            .map(|index| Target::Shard(Shard { count, index }))
            .collect(),
    }
}

/// How many places `layout` has.
fn count_of(layout: StoreLayout) -> u32 {
    match layout {
        StoreLayout::D1 => 1,
        StoreLayout::Shards(count) => count.get(),
    }
}
