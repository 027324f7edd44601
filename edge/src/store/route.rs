//! Where a store call goes: the [`Route`] a call names, and the [`Place`] it comes to
//! in a sharded layout, whatever carries it there (the Worker's Durable Objects, or the
//! simulator's databases).

use crate::error::{ApiResult, AppError};
use onceclick_protocol::shard::{self, IdRoute, Shard, ShardCount};

/// Which place a store call is about.
#[derive(Clone, Copy)]
pub(crate) enum Route<'a> {
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
    Whole,
    /// The previous layout's database, if the deployment keeps one: where a create
    /// first looks for its key.
    Before,
}

/// Where a route goes in a sharded layout, whatever carries the call there (the
/// Worker's Durable Objects, or the simulator's databases).
pub(crate) enum Place {
    Shard(Shard),
    /// The previous layout's database (if kept: the caller knows).
    Previous,
    Nowhere,
}

pub(crate) fn sharded_place(
    count: ShardCount,
    has_previous: bool,
    route: Route<'_>,
) -> ApiResult<Place> {
    Ok(match route {
        Route::Key { owner, key } => Place::Shard(shard::shard_for_key(owner, key, count)),
        // An id of another shard count names no job of this layout: routing it would
        // bring an object of that count into being for nothing.
        Route::Id(id) => match shard::route_of_id(id) {
            IdRoute::Shard(shard) if shard.count == count => Place::Shard(shard),
            IdRoute::Shard(_) => Place::Nowhere,
            IdRoute::Database if has_previous => Place::Previous,
            IdRoute::Database | IdRoute::Unknown => Place::Nowhere,
        },
        Route::Any => Place::Shard(Shard {
            count,
            index: crate::clock::random_below(count.get()),
        }),
        Route::Before if has_previous => Place::Previous,
        Route::Before => Place::Nowhere,
        Route::Whole => {
            return Err(AppError::internal(
                "a sharded store is swept inside each shard, never as a whole",
            ))
        }
    })
}
