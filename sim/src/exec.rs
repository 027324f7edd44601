//! The executor: single-threaded tasks, polled one step at a time in the order the
//! scheduler picks, under a virtual clock. A task belongs to an isolate; a crash drops
//! every task of its isolate mid-flight, as a dead isolate drops its requests and its
//! `wait_until` work.

use futures_util::future::LocalBoxFuture;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

thread_local! {
    static CURRENT: Cell<u64> = const { Cell::new(0) };
}

/// The task being polled (0 outside any task).
pub(crate) fn current() -> u64 {
    CURRENT.with(Cell::get)
}

struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Relaxed);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// What a task is, for the scheduler's choices and the trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// A client's request, with the index of the operation that sent it.
    Request(u64),
    /// A queue delivery of message `u64`.
    Delivery(u64),
    /// Work after a response (`wait_until`).
    AfterResponse,
    /// A reconciler pass (the cron, or a shard's alarm).
    Reconcile,
    /// Set-up (certification) before the run.
    Setup,
}

struct Task {
    future: LocalBoxFuture<'static, ()>,
    isolate: u32,
    role: Role,
    flag: Arc<Flag>,
}

#[derive(Default)]
pub(crate) struct Exec {
    tasks: RefCell<BTreeMap<u64, Task>>,
    next: Cell<u64>,
    /// Timers: (deadline in virtual ms, sequence) → the waker to call.
    timers: RefCell<BTreeMap<(u64, u64), Waker>>,
    timer_seq: Cell<u64>,
    pub(crate) polls: Cell<u64>,
}

impl Exec {
    pub(crate) fn spawn(
        &self,
        isolate: u32,
        role: Role,
        future: impl Future<Output = ()> + 'static,
    ) -> u64 {
        let id = self.next.get() + 1;
        self.next.set(id);
        let flag = Arc::new(Flag(AtomicBool::new(true)));
        self.tasks.borrow_mut().insert(
            id,
            Task {
                future: Box::pin(future),
                isolate,
                role,
                flag,
            },
        );
        id
    }

    /// The tasks ready to be polled, in id order.
    pub(crate) fn ready(&self) -> Vec<u64> {
        self.tasks
            .borrow()
            .iter()
            .filter(|(_, t)| t.flag.0.load(Ordering::Relaxed))
            .map(|(id, _)| *id)
            .collect()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.tasks.borrow().is_empty()
    }

    pub(crate) fn count(&self, f: impl Fn(&Role) -> bool) -> usize {
        self.tasks.borrow().values().filter(|t| f(&t.role)).count()
    }

    /// Polls task `id` once; true if it finished.
    pub(crate) fn poll(&self, id: u64) -> bool {
        let Some(mut task) = self.tasks.borrow_mut().remove(&id) else {
            return false;
        };
        task.flag.0.store(false, Ordering::Relaxed);
        let waker = Waker::from(task.flag.clone());
        let mut cx = Context::from_waker(&waker);
        self.polls.set(self.polls.get() + 1);
        let before = CURRENT.with(|c| c.replace(id));
        let done = task.future.as_mut().poll(&mut cx).is_ready();
        CURRENT.with(|c| c.set(before));
        if !done {
            self.tasks.borrow_mut().insert(id, task);
        }
        done
    }

    /// Drops every task of `isolate`; their roles, for the scheduler (a delivery in
    /// flight goes back to the queue).
    pub(crate) fn crash(&self, isolate: u32) -> Vec<(u64, Role)> {
        let mut tasks = self.tasks.borrow_mut();
        let ids: Vec<u64> = tasks
            .iter()
            .filter(|(_, t)| t.isolate == isolate)
            .map(|(id, _)| *id)
            .collect();
        let mut dropped = Vec::new();
        for id in ids {
            if let Some(task) = tasks.remove(&id) {
                dropped.push((id, task.role));
            }
        }
        dropped
    }

    fn add_timer(&self, at: u64, waker: Waker) {
        let seq = self.timer_seq.get() + 1;
        self.timer_seq.set(seq);
        self.timers.borrow_mut().insert((at, seq), waker);
    }

    /// The next timer's deadline.
    pub(crate) fn next_timer(&self) -> Option<u64> {
        self.timers.borrow().keys().next().map(|k| k.0)
    }

    /// Wakes every timer due at `now`.
    pub(crate) fn fire_timers(&self, now: u64) {
        let due: Vec<(u64, u64)> = self
            .timers
            .borrow()
            .range(..(now + 1, 0))
            .map(|(k, _)| *k)
            .collect();
        for key in due {
            if let Some(waker) = self.timers.borrow_mut().remove(&key) {
                waker.wake();
            }
        }
    }
}

/// Gives the other tasks a turn: ready again at once, polled when the scheduler picks it.
pub(crate) struct Yield(bool);

impl Yield {
    pub(crate) fn new() -> Self {
        Self(false)
    }
}

impl Future for Yield {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// Ready once the virtual clock reaches `at`.
pub(crate) struct Sleep {
    exec: Rc<Exec>,
    at: u64,
}

impl Sleep {
    pub(crate) fn until(exec: Rc<Exec>, at: u64) -> Self {
        Self { exec, at }
    }
}

impl Future for Sleep {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if crate::platform::now_ms() as u64 >= self.at {
            return Poll::Ready(());
        }
        // Armed at every pending poll: a wake before `at` (none happens today) would
        // otherwise leave it with no timer.
        self.exec.add_timer(self.at, cx.waker().clone());
        Poll::Pending
    }
}
