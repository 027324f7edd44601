//! The store's native shell: the places a store call can go to, carried by the
//! simulator (SQLite through rusqlite, in memory) instead of D1 and Durable Objects.
//! Routing is the core's own code (`route.rs`); only the carrying differs. The Worker
//! compiles it too, and never calls it.

use super::route::{self, Target};
use super::rows::{storage_error, Cost, HandOff, Rows, Stmt};
use super::Store;
use crate::error::ApiResult;
use futures_util::future::LocalBoxFuture;
use onceclick_protocol::moving::StoreLayout;
use onceclick_protocol::shard::Shard;
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
    /// Inside one shard: its own database, for its reconciler (the alarm).
    Inside(Shard),
    /// A deployment's: its layout now, and the one it moves from, if any.
    Deployed {
        now: StoreLayout,
        previous: Option<StoreLayout>,
    },
}

impl Layout {
    /// One D1, with no move.
    pub const ONE: Layout = Layout::Deployed {
        now: StoreLayout::D1,
        previous: None,
    };
}

/// The simulator's places as the store's [`route::Places`]: a target by its name.
struct Native {
    places: Rc<dyn Places>,
}

impl Store {
    /// The native shell's store (the simulator's): its places and their layout.
    pub fn native(places: Rc<dyn Places>, layout: Layout) -> Store {
        store(places, layout)
    }
}

fn store(places: Rc<dyn Places>, layout: Layout) -> Store {
    let layout = match layout {
        Layout::Inside(shard) => route::Layout::Inside(shard.object_name()),
        Layout::Deployed { now, previous } => route::Layout::Deployed { now, previous },
    };
    Store::new(Rc::new(Native { places }), layout)
}

impl route::Places for Native {
    /// The simulator's places bill nothing: rows written are the Worker's figures
    /// (`cargo xtask bench`, `tests/budgets.rs`), measured where the runtime counts them.
    fn run<'a>(
        &'a self,
        target: &'a Target,
        statements: Vec<Stmt>,
    ) -> LocalBoxFuture<'a, ApiResult<(Vec<Rows>, Cost)>> {
        let marks = statements
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some((i, s.hand_off.clone()?)))
            .collect();
        let batch = statements.into_iter().map(|s| (s.sql, s.params)).collect();
        let sets = self.places.run(&target.name(), batch, marks);
        Box::pin(async move {
            let sets = sets.await.map_err(storage_error)?;
            Ok((sets.into_iter().map(Rows).collect(), Cost::default()))
        })
    }
}
