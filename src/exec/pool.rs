//! The scan pool: persistent worker threads that every scan runs on.
//!
//! A scan asks for `n` shares of work ([`ScanPool::run`]): share `i` is
//! `worker(i)`, and a worker usually pulls its units (partitions, chunks,
//! queries) from an atomic counter it shares with the other shares. The
//! calling thread posts `n - 1` tickets to the pool and then claims shares
//! itself until none is left, so a scan never waits for a share that nobody
//! has started: it cannot deadlock, even when every pool thread is busy with
//! other scans (or when the caller is itself a pool thread). Pool threads are
//! made once per pool, never per search.
//!
//! A share that panics becomes [`Error::Internal`]; the pool thread lives on.
//! Results come back in share order; the first error (in share order) wins.
//!
//! A pool thread may also be handed a whole job ([`ScanPool::spawn`]): the
//! engine runs each batch that way, so the thread that scans a batch is the
//! one that answers its callers, with no further hand-off. A job that runs
//! shares of its own claims them itself like any caller, so jobs cannot
//! starve each other of threads.

use crate::error::{Error, Result};
use crate::sync::{lock, AtomicUsize, Condvar, Mutex};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Persistent scan threads. Cloning shares the same threads; they exit when
/// the last clone is dropped.
#[derive(Clone)]
pub struct ScanPool {
    tickets: crossbeam_channel::Sender<Task>,
    threads: usize,
}

/// A job for a pool thread ([`ScanPool::spawn`]).
pub type PoolJob = Box<dyn FnOnce() + Send>;

/// What a pool thread is handed: shares of a running scan to help with, or
/// a job of its own.
enum Task {
    Help(Helper),
    Job(PoolJob),
}

impl std::fmt::Debug for ScanPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScanPool")
            .field("threads", &self.threads)
            .finish()
    }
}

/// Something a pool thread can help with.
trait Ticket: Send + Sync {
    /// Claims and runs shares of the scan until none is left.
    fn help(&self);
}

/// An invitation to help with one running scan: whoever holds it may call
/// [`Helper::help`] on any thread (a pool thread, or a loom thread in the
/// models), at any time, even after the scan has returned.
pub struct Helper(Arc<dyn Ticket>);

impl Helper {
    /// Claims and runs shares of the scan until none is left.
    pub fn help(self) {
        self.0.help();
    }
}

/// The next task for a pool thread. After a job (a whole batch, whose
/// callers are now being answered), the thread looks for the next task for
/// `spin`, yielding its core to any other runnable thread between looks,
/// before it sleeps; otherwise (after helping with shares, or with `spin`
/// zero) it sleeps at once. A sleeping thread takes tens of microseconds to
/// wake (a futex wake and a reschedule; more on virtual machines), which a
/// search that follows soon after the last one (a client's next request)
/// would pay on its critical path. Only one thread looks at a time, and
/// helpers never do: measured on 2 cores, threads that looked after every
/// share stretched the 99th-percentile latency of a loaded server tenfold.
fn next_task(
    rx: &crossbeam_channel::Receiver<Task>,
    spin: std::time::Duration,
    spinner: &std::sync::atomic::AtomicBool,
) -> std::result::Result<Task, crossbeam_channel::RecvError> {
    // One idle thread at a time looks; the others sleep at once, so an
    // idle pool costs at most one thread's looking.
    if spin.is_zero() || spinner.swap(true, Ordering::AcqRel) {
        return rx.recv();
    }
    let started = std::time::Instant::now();
    let found = loop {
        match rx.try_recv() {
            Ok(task) => break Some(Ok(task)),
            Err(crossbeam_channel::TryRecvError::Disconnected) => {
                break Some(Err(crossbeam_channel::RecvError))
            }
            Err(crossbeam_channel::TryRecvError::Empty) => {}
        }
        if started.elapsed() >= spin {
            break None;
        }
        std::thread::yield_now();
    };
    spinner.store(false, Ordering::Release);
    found.unwrap_or_else(|| rx.recv())
}

impl ScanPool {
    /// A pool of `threads` worker threads (at least one); a thread that
    /// finished a job keeps looking for the next task for `idle_spin`
    /// before it sleeps (`search.idle_spin_us`; see `next_task`).
    pub fn new(threads: usize, idle_spin: std::time::Duration) -> ScanPool {
        let threads = threads.max(1);
        let (tx, rx) = crossbeam_channel::unbounded::<Task>();
        let spinner = Arc::new(std::sync::atomic::AtomicBool::new(false));
        for i in 0..threads {
            let rx = rx.clone();
            let spinner = Arc::clone(&spinner);
            let spawned = std::thread::Builder::new()
                .name(format!("shoal-scan-{i}"))
                .spawn(move || {
                    // Ends when every sender (every pool handle) is gone.
                    let mut spin = std::time::Duration::ZERO;
                    while let Ok(task) = next_task(&rx, spin, &spinner) {
                        spin = match task {
                            Task::Help(helper) => {
                                helper.help();
                                std::time::Duration::ZERO
                            }
                            // A job answers for itself (it holds its own
                            // reply); a panic in it must not end the thread.
                            Task::Job(job) => {
                                let _ = catch_unwind(AssertUnwindSafe(job));
                                idle_spin
                            }
                        };
                    }
                });
            // A pool thread that cannot be spawned only costs parallelism:
            // callers always run shares themselves.
            drop(spawned);
        }
        ScanPool {
            tickets: tx,
            threads,
        }
    }

    /// Worker threads in the pool.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `worker(0..shares)` on the pool and the calling thread; returns
    /// the results in share order. The first error wins; a panicking share
    /// is an internal error. Returns only when no share is running.
    pub fn run<T, F>(&self, shares: usize, worker: F) -> Result<Vec<T>>
    where
        T: Send + 'static,
        F: Fn(usize) -> Result<T> + Sync,
    {
        run_shared(shares, self.threads, worker, |helper| {
            // A send fails only when no pool thread is left; the caller
            // then runs every share itself.
            let _ = self.tickets.send(Task::Help(helper));
        })
    }

    /// Runs `job` on a pool thread, after the tasks already queued. The
    /// job must answer whoever waits for it (a panic in it is caught and
    /// only ends the job) and must not wait for other jobs. Gives the job
    /// back when no pool thread is left to run it.
    pub fn spawn(&self, job: PoolJob) -> std::result::Result<(), PoolJob> {
        // The only task a failed send can give back is the job sent.
        match self.tickets.send(Task::Job(job)) {
            Err(crossbeam_channel::SendError(Task::Job(job))) => Err(job),
            _ => Ok(()),
        }
    }
}

/// [`ScanPool::run`] with the helpers handed to `post` rather than to a
/// pool's threads: at most `helpers` of them, each of which may help at any
/// time or never. The calling thread claims shares too, so the result does
/// not depend on any helper running.
pub fn run_shared<T, F>(
    shares: usize,
    helpers: usize,
    worker: F,
    mut post: impl FnMut(Helper),
) -> Result<Vec<T>>
where
    T: Send + 'static,
    F: Fn(usize) -> Result<T> + Sync,
{
    let shares = shares.max(1);
    if shares == 1 {
        return run_share(&worker, 0);
    }
    // Object-storage reads a share makes count to the caller's search.
    let meter = crate::storage::io_meter::current();
    let worker = move |i: usize| {
        let _scope = crate::storage::io_meter::enter(meter.clone());
        worker(i)
    };
    let erased: &(dyn Fn(usize) -> Result<T> + Sync) = &worker;
    // SAFETY: the pointer outlives its last use. It is only dereferenced
    // by a thread that claimed a share index below `shares` (see
    // `Scan::claim_and_run`), and this function does not return before
    // every claimed share has finished: the loop below claims shares
    // until the counter passes `shares`, so all of them have been
    // claimed, and `wait_all` then blocks until each has recorded its
    // result. Shares cannot unwind past that point (`run_share` catches
    // panics). Helpers that run afterwards only touch the counter, which
    // the `Arc` keeps alive, and find nothing left to claim.
    let work: *const (dyn Fn(usize) -> Result<T> + Sync + 'static) =
        unsafe { std::mem::transmute(erased) };
    let scan = Arc::new(Scan {
        work,
        shares,
        next: AtomicUsize::new(0),
        done: Mutex::new(Done {
            finished: 0,
            results: (0..shares).map(|_| None).collect(),
        }),
        all_done: Condvar::new(),
    });
    for _ in 1..shares.min(helpers + 1) {
        post(Helper(scan.clone() as Arc<dyn Ticket>));
    }
    while scan.claim_and_run() {}
    let results = scan.wait_all();
    results.into_iter().collect()
}

/// Runs one share, turning a panic into an internal error.
fn run_share<T>(worker: &(dyn Fn(usize) -> Result<T> + Sync), i: usize) -> Result<Vec<T>> {
    run_one(worker, i).map(|t| vec![t])
}

fn run_one<T>(worker: &(dyn Fn(usize) -> Result<T> + Sync), i: usize) -> Result<T> {
    catch_unwind(AssertUnwindSafe(|| worker(i)))
        .unwrap_or_else(|_| Err(Error::Internal("a scan worker panicked".into())))
}

/// One call of [`ScanPool::run`], shared with the pool threads.
struct Scan<T> {
    /// The caller's worker, lifetime erased (see the SAFETY note in `run`).
    work: *const (dyn Fn(usize) -> Result<T> + Sync),
    shares: usize,
    next: AtomicUsize,
    done: Mutex<Done<T>>,
    all_done: Condvar,
}

struct Done<T> {
    finished: usize,
    results: Vec<Option<Result<T>>>,
}

// SAFETY: `work` points to a `Sync` closure, so calling it from several
// threads is allowed; results of type `T: Send` move between threads only
// through the mutex. Nothing else in `Scan` is thread-bound.
unsafe impl<T: Send> Send for Scan<T> {}
// SAFETY: as above; shared access goes through atomics and the mutex.
unsafe impl<T: Send> Sync for Scan<T> {}

impl<T: Send> Scan<T> {
    /// Claims the next share and runs it; false when none is left.
    fn claim_and_run(&self) -> bool {
        let i = self.next.fetch_add(1, Ordering::AcqRel);
        if i >= self.shares {
            return false;
        }
        // SAFETY: share `i` was claimed, so the caller of `run` is still
        // waiting for it and the closure is alive (see `run`).
        let worker = unsafe { &*self.work };
        let result = run_one(worker, i);
        let mut done = lock(&self.done);
        done.results[i] = Some(result);
        done.finished += 1;
        if done.finished == self.shares {
            self.all_done.notify_all();
        }
        true
    }

    /// Blocks until every share has finished; their results in order.
    fn wait_all(&self) -> Vec<Result<T>> {
        let mut done = lock(&self.done);
        while done.finished < self.shares {
            done = self.all_done.wait(done).unwrap_or_else(|p| p.into_inner());
        }
        done.results
            .iter_mut()
            .map(|r| {
                r.take()
                    .unwrap_or_else(|| Err(Error::Internal("a scan share left no result".into())))
            })
            .collect()
    }
}

impl<T: Send + 'static> Ticket for Scan<T> {
    fn help(&self) {
        while self.claim_and_run() {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_run_in_order_and_borrow_from_the_caller() {
        let pool = ScanPool::new(2, std::time::Duration::ZERO);
        let data: Vec<u64> = (0..1000).collect();
        let next = AtomicUsize::new(0);
        for shares in [1, 2, 3, 8] {
            next.store(0, Ordering::Relaxed);
            let sums = pool
                .run(shares, |i| {
                    let mut sum = 0;
                    while let Some(x) = data.get(next.fetch_add(1, Ordering::Relaxed)) {
                        sum += x;
                    }
                    Ok((i, sum))
                })
                .unwrap();
            assert_eq!(
                sums.iter().map(|s| s.0).collect::<Vec<_>>(),
                (0..shares).collect::<Vec<_>>()
            );
            assert_eq!(sums.iter().map(|s| s.1).sum::<u64>(), 499_500);
        }
    }

    #[test]
    fn a_panicking_share_is_an_internal_error_and_the_pool_lives_on() {
        let pool = ScanPool::new(2, std::time::Duration::ZERO);
        for _ in 0..5 {
            let err = pool
                .run(3, |i| {
                    if i == 1 {
                        panic!("boom");
                    }
                    Ok(i)
                })
                .unwrap_err();
            assert!(matches!(err, Error::Internal(_)), "{err}");
        }
        assert_eq!(pool.run(4, Ok).unwrap(), vec![0, 1, 2, 3]);
    }

    #[test]
    fn nested_and_concurrent_runs_never_deadlock() {
        let pool = ScanPool::new(2, std::time::Duration::ZERO);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..50 {
                        let outer = pool
                            .run(3, |i| {
                                let inner = pool.run(3, |j| Ok(i * 10 + j))?;
                                Ok(inner.iter().sum::<usize>())
                            })
                            .unwrap();
                        assert_eq!(outer, vec![3, 33, 63]);
                    }
                });
            }
        });
    }

    #[test]
    fn a_spawned_job_runs_on_a_pool_thread_and_a_panicking_one_leaves_it_alive() {
        let pool = ScanPool::new(2, std::time::Duration::ZERO);
        let (tx, rx) = std::sync::mpsc::channel();
        assert!(pool.spawn(Box::new(|| panic!("a job that panics"))).is_ok());
        for _ in 0..4 {
            let tx = tx.clone();
            let inner = pool.clone();
            assert!(pool
                .spawn(Box::new(move || {
                    // A job runs scans of its own on the same pool.
                    let sums = inner.run(3, |i| Ok(i * 2)).map(|v| v.iter().sum::<usize>());
                    let name = std::thread::current().name().map(str::to_string);
                    let _ = tx.send((name, sums.ok()));
                }))
                .is_ok());
        }
        for _ in 0..4 {
            let (name, sum) = rx.recv().unwrap();
            assert!(name.unwrap().starts_with("shoal-scan-"));
            assert_eq!(sum, Some(6));
        }
    }
}
