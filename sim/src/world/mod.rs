//! One world: a store layout, its places, a queue, providers, clients and isolates,
//! driven operation by operation from one seed, with the reference model (`model/`)
//! and the invariants checked after every step on the jobs that step touched.
//!
//! - `generate.rs` — the operations a world draws and runs: requests, deliveries,
//!   reconciler passes, time, crashes, outages, the live channel's streams.
//! - `queue.rs` — the queue: sends, deliveries in any order and more than once,
//!   retries, dead letters.
//! - `calls.rs` — the scripted providers' calls, and what is checked of each: claimed
//!   first, called once, stopped only for a reason, hedged only when silent, a stream's
//!   classification.
//! - `shards.rs` — a shard's alarm and its hand-off, and the check that a committed
//!   create is always dispatched.
//! - `checks.rs` — after every step: each answer and each touched job against the
//!   model, and the store's own invariants.
//! - `settle.rs` — a world's end: faults stop, time passes, nothing is stuck and no
//!   paid-for work is lost without a record.

mod calls;
mod checks;
mod generate;
mod queue;
mod settle;
mod shards;

use crate::db::{self, AnyMutant, Db, FaultRates, SimPlaces};
use crate::exec::{Exec, Role};
use crate::host::SimHost;
use crate::live::{Live, LiveFigures};
use crate::requests::{self, Answer};
use crate::rng::Rng;
use crate::script::CallRecord;
use checks::SeenJob;
use generate::{Intent, Request};
use onceclick_core::kinds::Kinds;
use onceclick_core::mutant::Mutant;
use onceclick_core::store::native::{Layout, Places};
use onceclick_core::store::Store;
use onceclick_protocol::moving::StoreLayout;
use onceclick_protocol::shard::{Shard, ShardCount};
use queue::Message;
use serde_json::{json, Value};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::rc::Rc;

/// The front isolates (requests and their `wait_until` work), the consumer's, and the
/// reconciler's (also the shards' objects').
const FRONT: [u32; 2] = [1, 2];
const CONSUMER: u32 = 3;
const RECONCILER: u32 = 4;
/// How often a dispatcher holding a call looks whether it should stop (the Worker's
/// `CANCEL_POLL_MS`), in virtual ms.
pub(crate) const CANCEL_POLL_MS: u64 = 150;

/// The store layouts a world may have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// One D1.
    D1,
    /// Shards.
    Shards(u32),
    /// One layout first, then halfway the move to another, the first kept as the
    /// previous layout (`PREVIOUS_STORE`) from then on.
    Moved { from: StoreLayout, to: StoreLayout },
}

/// What a world did (summed over a run: its last line).
#[derive(Clone, Debug, Default)]
pub struct Figures {
    pub ops: u64,
    pub requests: u64,
    pub deliveries: u64,
    pub redeliveries: u64,
    pub provider_calls: u64,
    pub reconciles: u64,
    pub crashes: u64,
    pub clock_jumps: u64,
    pub store_faults: u64,
    pub batches: u64,
    pub checks: u64,
    pub jobs: u64,
    pub polls: u64,
    /// Provider calls the dispatcher stopped before their answer (a cancel, a lost race).
    pub stops: u64,
    /// Shard alarms run, and the attempts they handed to the queue.
    pub alarms: u64,
    pub handed_off: u64,
    /// The live channel's.
    pub live: LiveFigures,
    /// Jobs the model saw succeed, by kind.
    pub succeeded: BTreeMap<String, u64>,
    /// Pairs the cron's pass certified again after a redeploy changed their digest.
    pub recertified: u64,
    /// Deliveries whose watch reached its cap (`MAX_WATCH_READS`).
    pub watch_capped: u64,
    /// The moves made halfway, by kind (`d1 → durable:2`).
    pub moves: BTreeMap<String, u64>,
    /// Creates answered, after a move, with a job of the layout it left (a key bound
    /// before the move found where it was bound), by kind of move.
    pub previous_answers: BTreeMap<String, u64>,
}

impl Figures {
    pub fn add(&mut self, o: &Figures) {
        self.ops += o.ops;
        self.requests += o.requests;
        self.deliveries += o.deliveries;
        self.redeliveries += o.redeliveries;
        self.provider_calls += o.provider_calls;
        self.reconciles += o.reconciles;
        self.crashes += o.crashes;
        self.clock_jumps += o.clock_jumps;
        self.store_faults += o.store_faults;
        self.batches += o.batches;
        self.checks += o.checks;
        self.jobs += o.jobs;
        self.polls += o.polls;
        self.stops += o.stops;
        self.alarms += o.alarms;
        self.handed_off += o.handed_off;
        self.live.add(&o.live);
        self.recertified += o.recertified;
        self.watch_capped += o.watch_capped;
        for (kind, n) in &o.previous_answers {
            *self.previous_answers.entry(kind.clone()).or_default() += n;
        }
        for (kind, n) in &o.moves {
            *self.moves.entry(kind.clone()).or_default() += n;
        }
        for (kind, n) in &o.succeeded {
            *self.succeeded.entry(kind.clone()).or_default() += n;
        }
    }
}

/// A broken promise: which, at which operation.
#[derive(Clone, Debug)]
pub struct Violation {
    pub op: u64,
    pub what: String,
}

pub(crate) struct World {
    pub(crate) exec: Rc<Exec>,
    db: Rc<Db>,
    places: Rc<SimPlaces>,
    layout: Cell<Layout>,
    shape: Shape,
    /// The core's configuration, read from the world's vars once, as a Worker's isolate
    /// reads it.
    pub(crate) config: RefCell<Rc<onceclick_core::config::Config>>,
    /// The digest each (provider, kind) pair was last certified under, by the cron's
    /// pass or at set-up: a pass's report under another is one a redeploy made due.
    certified: RefCell<BTreeMap<(String, String), String>>,
    /// Redeploys so far (each flips the fallback's JSON form).
    redeploys: Cell<u64>,
    queue: RefCell<Vec<Message>>,
    next_msg: Cell<u64>,
    /// Deliveries in flight: task → message.
    delivering: RefCell<BTreeMap<u64, Message>>,
    calls: RefCell<BTreeMap<String, CallRecord>>,
    /// An isolate's tasks are being dropped by a crash.
    crashing: Cell<bool>,
    rng: RefCell<Rng>,
    intents: RefCell<Vec<Intent>>,
    seen: RefCell<BTreeMap<String, SeenJob>>,
    /// What the model last saw of each job the purge took.
    purged_seen: RefCell<Vec<SeenJob>>,
    /// Jobs the purge took (with their keys, which are free again).
    purged: RefCell<BTreeSet<String>>,
    /// The fallback keys the generator made, per job: (job, key) → the provider its
    /// first click's body named.
    fallback_keys: RefCell<BTreeMap<(String, String), Option<&'static str>>>,
    /// What the model knows of each fallback key, once an answer named an attempt.
    fallbacks: RefCell<BTreeMap<(String, String), crate::model::FallbackKey>>,
    /// Requests in flight: task → request.
    requests: RefCell<BTreeMap<u64, Request>>,
    answers: RefCell<Vec<(u64, Request, Answer)>>,
    /// Attempts whose result the platform gave up on after the store had refused it:
    /// the queue refused the message that carried it, or delivered it six times in
    /// vain. The Worker logged each step (`result_queued`, `enqueue_failed`,
    /// `dispatch_retry`); the output is lost, as designed, with its lines.
    given_up: RefCell<BTreeSet<String>>,
    /// Attempts whose result came after the purge took their job (the log's line).
    purged_lines: RefCell<BTreeSet<String>>,
    /// Attempts a `race_lost` or `late_result_discarded` event names, as the database
    /// recorded them.
    recorded: RefCell<BTreeSet<String>>,
    violations: RefCell<Vec<Violation>>,
    op: Cell<u64>,
    serial: Cell<u64>,
    figures: RefCell<Figures>,
    trace: Option<RefCell<Vec<String>>>,
    rust_mutant: Option<Mutant>,
    move_at: u64,
    /// Every attempt a dispatch message was sent for.
    sent_ids: RefCell<BTreeSet<String>>,
    /// The shard whose alarm runs, by task: one alarm of an object runs at a time.
    alarm_tasks: RefCell<BTreeMap<u64, String>>,
    /// The jobs' hubs and the streams that follow them.
    live: Rc<Live>,
}

/// The store's layout for a world's shape, before or after its move.
fn layout_of(shape: Shape, moved: bool) -> Layout {
    let (now, previous) = match shape {
        Shape::D1 => (StoreLayout::D1, None),
        Shape::Shards(n) => (
            ShardCount::new(n).map_or(StoreLayout::D1, StoreLayout::Shards),
            None,
        ),
        Shape::Moved { from, .. } if !moved => (from, None),
        Shape::Moved { from, to } => (to, Some(from)),
    };
    Layout::Deployed { now, previous }
}

/// The places of `layout` (both layouts during a move), each as the layout of its own
/// reconciler's pass: a shard's own database, or the D1 alone.
fn passes_of(layout: Layout) -> Vec<Layout> {
    let Layout::Deployed { now, previous } = layout else {
        return vec![layout];
    };
    [Some(now), previous]
        .into_iter()
        .flatten()
        .flat_map(|l| match l {
            StoreLayout::D1 => vec![Layout::ONE],
            StoreLayout::Shards(count) => (0..count.get())
                .map(|index| Layout::Inside(Shard { count, index }))
                .collect(),
        })
        .collect()
}

/// A column's value as text: a string as it is, any other value as its JSON, `None`
/// for `NULL` or no column.
fn column_text(v: Option<&Value>) -> Option<String> {
    v.and_then(|v| match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    })
}

/// The core's configuration from the world's vars, declaring `kinds`.
fn config_of(
    vars: &BTreeMap<String, String>,
    kinds: &'static Kinds,
) -> Rc<onceclick_core::config::Config> {
    let config = onceclick_core::config::Config::read(&|name| vars.get(name).cloned());
    Rc::new(config.with_kinds(kinds))
}

/// The Worker's configuration in every world.
fn vars() -> BTreeMap<String, String> {
    [
        (
            "PROVIDERS",
            json!([
                {"name": "primary", "base_url": "http://sim/primary/v1", "model": "m-small",
                 "timeout_ms": 1000, "abandon_after_ms": 20000},
                {"name": "fallback", "base_url": "http://sim/fallback/v1", "model": "m-large",
                 "timeout_ms": 1000, "api_key_secret": "FALLBACK_API_KEY"},
            ])
            .to_string(),
        ),
        ("RECONCILE_STARTING_AFTER_MS", "5000".to_owned()),
        ("RECONCILE_LOST_GRACE_MS", "2000".to_owned()),
        ("JOB_RETENTION_HOURS", "24".to_owned()),
        // Well inside the providers' 1 s timeout, so that stops happen.
        ("CANCEL_POLL_MS", CANCEL_POLL_MS.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

impl World {
    pub(crate) fn new(
        seed: u64,
        shape: Shape,
        mutant: Option<AnyMutant>,
        trace: bool,
        move_at: u64,
        kinds: &'static Kinds,
    ) -> Rc<Self> {
        let sql_mutant = match mutant {
            Some(AnyMutant::Sql(m)) => Some(m),
            _ => None,
        };
        let rust_mutant = match mutant {
            Some(AnyMutant::Rust(m)) => Some(m),
            _ => None,
        };
        let db = Rc::new(Db::new(seed, sql_mutant));
        let mut vars = vars();
        // One world in four caps its watch at a few reads a delivery (the Worker's is
        // 300: a call of five minutes), so that calls outlive the cap and a stop must
        // come by the hub's word or at the call's end.
        if seed % 4 == 1 {
            vars.insert("MAX_WATCH_READS".to_owned(), (2 + seed % 3).to_string());
        }
        let config = RefCell::new(config_of(&vars, kinds));
        Rc::new(Self {
            exec: Rc::new(Exec::default()),
            places: Rc::new(SimPlaces(db.clone())),
            db,
            layout: Cell::new(layout_of(shape, false)),
            shape,
            config,
            certified: RefCell::new(BTreeMap::new()),
            redeploys: Cell::new(0),
            queue: RefCell::new(Vec::new()),
            next_msg: Cell::new(0),
            delivering: RefCell::new(BTreeMap::new()),
            calls: RefCell::new(BTreeMap::new()),
            crashing: Cell::new(false),
            rng: RefCell::new(Rng::new(seed)),
            intents: RefCell::new(Vec::new()),
            seen: RefCell::new(BTreeMap::new()),
            purged: RefCell::new(BTreeSet::new()),
            purged_seen: RefCell::new(Vec::new()),
            fallback_keys: RefCell::new(BTreeMap::new()),
            fallbacks: RefCell::new(BTreeMap::new()),
            requests: RefCell::new(BTreeMap::new()),
            answers: RefCell::new(Vec::new()),
            recorded: RefCell::new(BTreeSet::new()),
            purged_lines: RefCell::new(BTreeSet::new()),
            given_up: RefCell::new(BTreeSet::new()),
            violations: RefCell::new(Vec::new()),
            op: Cell::new(0),
            serial: Cell::new(0),
            figures: RefCell::new(Figures::default()),
            trace: trace.then(|| RefCell::new(Vec::new())),
            rust_mutant,
            move_at,
            sent_ids: RefCell::new(BTreeSet::new()),
            alarm_tasks: RefCell::new(BTreeMap::new()),
            live: Live::new(seed),
        })
    }

    /// Before the first operation: the fallback provider certified (no faults).
    pub(crate) fn setup(self: &Rc<Self>, faults: FaultRates) {
        onceclick_core::mutant::plant(self.rust_mutant);
        self.certify_fallback(self.layout.get());
        let mut rng = Rng::new(1);
        while self.step(&mut rng) {}
        let _ = crate::platform::drain_log();
        *self.db.faults.borrow_mut() = faults;
        // In a moved world the shards are certified at the move: once now is enough,
        // since every shard's copy is written by the same call (it goes everywhere).
        if let Shape::Moved { .. } = self.shape {
            self.certify_fallback(layout_of(self.shape, true));
            *self.db.faults.borrow_mut() = FaultRates::default();
            while self.step(&mut rng) {}
            let _ = crate::platform::drain_log();
            *self.db.faults.borrow_mut() = faults;
        }
        db::clear_writes();
    }

    /// Certifies the providers in `layout` as a deployment's cron does, on the
    /// reconciler's isolate: background passes (`certification::auto`) until one finds
    /// nothing due (each certifies a few pairs).
    fn certify_fallback(self: &Rc<Self>, layout: Layout) {
        let world = self.clone();
        self.exec.spawn(RECONCILER, Role::Setup, async move {
            let host = world.host(RECONCILER);
            let store = world.store(layout, "setup");
            for _ in 0..8 {
                match onceclick_core::certification::auto(&store, &host).await {
                    Ok(made) if !made.is_empty() => world.set_up_certified(&made),
                    _ => break,
                }
            }
        });
    }

    fn now(&self) -> u64 {
        crate::platform::now_ms() as u64
    }

    fn note(&self, line: impl FnOnce() -> String) {
        if let Some(trace) = &self.trace {
            let line = format!(
                "#{:<6} t={:<9} {}",
                self.op.get(),
                self.now() - crate::EPOCH_MS,
                line()
            );
            trace.borrow_mut().push(line);
        }
    }

    pub(crate) fn trace(&self) -> Vec<String> {
        self.trace
            .as_ref()
            .map(|t| t.borrow().clone())
            .unwrap_or_default()
    }

    fn violate(&self, what: String) {
        self.note(|| format!("VIOLATION {what}"));
        self.violations.borrow_mut().push(Violation {
            op: self.op.get(),
            what,
        });
    }

    pub(crate) fn violations(&self) -> Vec<Violation> {
        self.violations.borrow().clone()
    }

    pub(crate) fn figures(&self) -> Figures {
        let mut f = self.figures.borrow().clone();
        f.batches = *self.db.batches.borrow();
        f.store_faults = *self.db.faults_fired.borrow();
        f.polls = self.exec.polls.get();
        f.live = self.live.figures();
        for seen in self.seen.borrow().values() {
            if seen.job.view().status == onceclick_protocol::JobStatus::Succeeded {
                *f.succeeded.entry(seen.kind.clone()).or_default() += 1;
            }
        }
        f
    }

    pub(crate) fn mutant_ran(&self) -> bool {
        *self.db.mutant_ran.borrow()
    }

    /// A number below `n`, from the run's seed.
    pub(crate) fn below(&self, n: u64) -> u64 {
        self.rng.borrow_mut().below(n)
    }

    /// The cron's background certification pass, run under `config`, made `made`: each
    /// report is bound to the pair's digest under that configuration (a pass that ran
    /// on after a redeploy must not certify the configuration it no longer has). (That
    /// it certifies only what is due is not checked here: a pass whose store failed
    /// midway has written reports it could not tell of.)
    pub(crate) fn certified_in_background(
        &self,
        config: &onceclick_core::config::Config,
        made: &[onceclick_core::store::Certification],
    ) {
        let providers = config.providers().unwrap_or_default();
        for report in made {
            let digest =
                onceclick_core::providers::digest(&providers, &report.provider, &report.kind);
            if report.provider_digest != digest {
                self.violate(format!(
                    "the background pass certified {} for {} under a digest its configuration does not have: {report:?}",
                    report.provider, report.kind
                ));
            }
            let pair = (report.provider.clone(), report.kind.clone());
            let before = self.certified.borrow_mut().insert(pair, digest.clone());
            if before.is_some_and(|before| before != digest) {
                self.figures.borrow_mut().recertified += 1;
            }
        }
    }

    /// What set-up certified (a moved world certifies each pair in both layouts).
    fn set_up_certified(&self, made: &[onceclick_core::store::Certification]) {
        for report in made {
            let pair = (report.provider.clone(), report.kind.clone());
            self.certified
                .borrow_mut()
                .insert(pair, report.provider_digest.clone());
        }
    }

    /// A deploy that changes the fallback's configuration (its JSON form, strict or
    /// `json_object`): every isolate reads the new one from now on, and every
    /// certification of the fallback is void until the cron's pass certifies it again.
    pub(crate) fn redeploy(&self) {
        let n = self.redeploys.get() + 1;
        self.redeploys.set(n);
        let mut vars = vars();
        let most = self.config.borrow().max_watch_reads;
        vars.insert("MAX_WATCH_READS".to_owned(), most.to_string());
        if n % 2 == 1 {
            let providers = vars["PROVIDERS"].replace(
                r#""name":"fallback","#,
                r#""name":"fallback","json_form":"json_object","#,
            );
            vars.insert("PROVIDERS".to_owned(), providers);
        }
        let kinds = self.config.borrow().kinds;
        *self.config.borrow_mut() = config_of(&vars, kinds);
        self.note(|| format!("redeploy {n}: the fallback's JSON form changes"));
    }

    /// The kinds this world declares (its configuration's).
    pub(crate) fn kinds(&self) -> &'static [onceclick_protocol::contract::Kind] {
        self.config.borrow().kinds.all()
    }

    pub(crate) fn serial(&self) -> u64 {
        let n = self.serial.get() + 1;
        self.serial.set(n);
        n
    }

    fn store(&self, layout: Layout, scope: &str) -> Store {
        let places: Rc<dyn Places> = self.places.clone();
        match requests::store(places, layout, "", scope) {
            Ok(store) => store,
            Err(e) => panic!("a store with no faults: {e}"),
        }
    }

    /// A store that tells the jobs' hubs of every move it commits, as a request's, the
    /// queue consumer's and the reconciler's do in the Worker (a shard's hand-off moves
    /// no job).
    fn notifying_store(&self, layout: Layout, scope: &str) -> Store {
        self.sending_store(layout, scope, false).0
    }

    /// A [`Self::notifying_store`] whose claims are followed, and its notifier's name
    /// for [`Self::sending_host`]: a delivery's.
    fn sending_store(&self, layout: Layout, scope: &str, followed: bool) -> (Store, u64) {
        let (notifier, sender) = self.live.notifier(&self.exec, followed);
        (
            requests::notifying(self.store(layout, scope), notifier),
            sender,
        )
    }

    fn host(self: &Rc<Self>, isolate: u32) -> SimHost {
        SimHost {
            world: self.clone(),
            isolate,
            sender: None,
        }
    }

    /// A delivery's host, whose provider calls are checked against what its store
    /// (`sender`) told their hubs.
    fn sending_host(self: &Rc<Self>, isolate: u32, sender: u64) -> SimHost {
        SimHost {
            sender: Some(sender),
            ..self.host(isolate)
        }
    }

    /// The live channel.
    pub(crate) fn live(&self) -> &Live {
        &self.live
    }

    /// The live channel's problems, as violations.
    fn live_problems(&self) {
        for what in self.live.take_problems() {
            self.violate(what);
        }
    }

    /// Where an attempt or job id lives, by the current layout (v7 ids: `d1`).
    fn place_of(&self, id: &str) -> Option<String> {
        match onceclick_protocol::shard::route_of_id(id) {
            onceclick_protocol::shard::IdRoute::Shard(shard) => Some(shard.object_name()),
            onceclick_protocol::shard::IdRoute::Database => Some("d1".to_owned()),
            onceclick_protocol::shard::IdRoute::Unknown => None,
        }
    }

    /// Whether a row with this id is in `table` of any place.
    fn exists(&self, table: &str, id: &str) -> bool {
        let sql = format!("SELECT 1 FROM {table} WHERE id = ?1");
        self.db
            .places()
            .iter()
            .any(|p| !self.db.query(p, &sql, &[json!(id)]).is_empty())
    }

    /// The jobs the model saw, by status: the world's line in a report.
    pub(crate) fn summary(&self) -> String {
        let mut out = String::new();
        let jobs = self.seen.borrow();
        let mut by: BTreeMap<&str, usize> = BTreeMap::new();
        for seen in jobs.values() {
            *by.entry(seen.job.view().status.as_str()).or_insert(0) += 1;
        }
        let _ = write!(out, "{} jobs {:?}", jobs.len(), by);
        out
    }
}
