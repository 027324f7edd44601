//! The store's native shell: the places a store call can go to, carried by the
//! simulator (SQLite through rusqlite, in memory) instead of D1 and Durable Objects.
//! Routing is the Worker's own code (`backend::sharded_place`); only the carrying
//! differs. Not compiled into the Worker.

use super::route::{sharded_place, Place, Route};
use super::rows::{storage_error, Cost, HandOff, Rows, Stmt};
use crate::error::ApiResult;
use futures_util::future::LocalBoxFuture;
use onceclick_protocol::shard::{Shard, ShardCount};
use serde_json::Value;
use std::rc::Rc;

/// One batch for one place: its statements and their parameters.
pub type Batch = Vec<(&'static str, Vec<Value>)>;

/// The statements of a batch whose returned attempts its shard hands on, by index
/// (`handoff.rs`): a sharded create's first attempt.
pub type Marks = Vec<(usize, HandOff)>;

/// The places of a native store: runs a batch in the place `name` (`d1`, or a shard's
/// object name such as `s4.1`) as one transaction, and answers each statement's rows as
/// JSON objects, or the error text the database gave (read as the Worker reads a D1 or
/// shard error: `store::storage_error`). A shard keeps the attempts its marked
/// statements returned for its alarm, in the same step as the commit, as the shard
/// object does (`shard.rs`).
pub trait Places {
    fn run(
        &self,
        place: &str,
        batch: Batch,
        marks: Marks,
    ) -> LocalBoxFuture<'static, Result<Vec<Vec<Value>>, String>>;
}

/// How the native store's places are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// One database (`d1`), as on `STORE=d1`.
    One,
    /// Inside one shard: its own database, for its reconciler (the alarm).
    Inside(Shard),
    /// `count` shards, and the previous layout's D1 (`d1`) if `previous`.
    Sharded { count: ShardCount, previous: bool },
}

pub(crate) struct Native {
    places: Rc<dyn Places>,
    layout: Layout,
}

impl Native {
    pub(crate) fn new(places: Rc<dyn Places>, layout: Layout) -> Self {
        Self { places, layout }
    }

    pub(super) fn count(&self) -> Option<ShardCount> {
        match self.layout {
            Layout::Sharded { count, .. } => Some(count),
            _ => None,
        }
    }

    pub(super) fn is_sharded(&self) -> bool {
        matches!(self.layout, Layout::Sharded { .. })
    }

    pub(super) fn has_previous(&self) -> bool {
        matches!(self.layout, Layout::Sharded { previous: true, .. })
    }

    pub(super) fn name(&self) -> String {
        match self.layout {
            Layout::One => "d1".to_owned(),
            Layout::Inside(shard) => shard.object_name(),
            Layout::Sharded { .. } => "shards".to_owned(),
        }
    }

    /// The place `route` names, by name (`None`: no place).
    pub(super) fn place(&self, route: Route<'_>) -> ApiResult<Option<String>> {
        let (count, previous) = match self.layout {
            Layout::One | Layout::Inside(_) if matches!(route, Route::Before) => return Ok(None),
            Layout::One | Layout::Inside(_) => return Ok(Some(self.name())),
            Layout::Sharded { count, previous } => (count, previous),
        };
        Ok(match sharded_place(count, previous, route)? {
            Place::Shard(shard) => Some(shard.object_name()),
            Place::Previous => Some("d1".to_owned()),
            Place::Nowhere => None,
        })
    }

    /// Every place, by name.
    pub(super) fn everywhere(&self) -> Vec<String> {
        match self.layout {
            Layout::One | Layout::Inside(_) => vec![self.name()],
            Layout::Sharded { count, previous } => (0..count.get())
                .map(|index| Shard { count, index }.object_name())
                .chain(previous.then(|| "d1".to_owned()))
                .collect(),
        }
    }

    /// The simulator's places bill nothing: rows written are the Worker's figures
    /// (`cargo xtask bench`, `tests/budgets.rs`), measured where the runtime counts them.
    pub(super) async fn run(
        &self,
        place: &str,
        statements: Vec<Stmt>,
    ) -> ApiResult<(Vec<Rows>, Cost)> {
        let marks = statements
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some((i, s.hand_off.clone()?)))
            .collect();
        let batch = statements.into_iter().map(|s| (s.sql, s.params)).collect();
        let sets = self
            .places
            .run(place, batch, marks)
            .await
            .map_err(storage_error)?;
        Ok((sets.into_iter().map(Rows::Json).collect(), Cost::default()))
    }
}
