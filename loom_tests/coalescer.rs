//! The coalescer core with the reply channel: a caller cancelling while its
//! group is flushed, a request racing the window flush of its group, and
//! shutdown racing submit. A loom mutex around the core stands in for the
//! actor (which applies one message at a time); loom threads are the
//! actor's timer, the scan task and the callers.

use loom::future::block_on;
use loom::sync::atomic::{AtomicBool, AtomicUsize};
use loom::sync::{Arc, Mutex};
use loom::thread;
use shoal::internals::{
    reply_channel, split_at_start, CoalescerCore, CoreSettings, Pending, Refusal, ReplyReceiver,
    ReplySender,
};
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

/// What a caller gets back: its own id, or the refusal.
type Answer = Result<u64, &'static str>;

/// A waiting search: where its answer goes, and a tally of how its
/// payload ended (answered, or released by exactly one path).
struct Search {
    reply: ReplySender<Tracked>,
    tally: Arc<Tally>,
}

/// An answer value that counts itself when dropped unread.
struct Tracked {
    answer: Answer,
    tally: Arc<Tally>,
    read: bool,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if !self.read {
            self.tally.released.fetch_add(1, SeqCst);
        }
    }
}

#[derive(Default)]
struct Tally {
    answered: AtomicUsize,
    released: AtomicUsize,
}

impl Tally {
    fn total(&self) -> usize {
        self.answered.load(SeqCst) + self.released.load(SeqCst)
    }
}

type Core = CoalescerCore<&'static str, Search>;

const WINDOW: Duration = Duration::from_millis(1);

fn core(max_pending: usize) -> Arc<Mutex<Core>> {
    Arc::new(Mutex::new(CoalescerCore::new(CoreSettings {
        window: WINDOW,
        max_batch_size: 64,
        max_pending,
    })))
}

fn search(id: u64, at: Instant) -> (Pending<Search>, ReplyReceiver<Tracked>, Arc<Tally>) {
    let (reply, receiver) = reply_channel();
    let tally = Arc::new(Tally::default());
    let pending = Pending {
        id,
        arrived: at,
        deadline: None,
        payload: Search {
            reply,
            tally: Arc::clone(&tally),
        },
    };
    (pending, receiver, tally)
}

/// Offers a search under key "k", which must be admitted.
fn admit(core: &Mutex<Core>, at: Instant, search: Pending<Search>) {
    let offered = core.lock().unwrap().offer(at, "k", search);
    assert!(offered.is_ok(), "the search was refused");
}

/// Answers a search as the scan task does; a caller gone by then releases
/// it (the answer comes back and is dropped).
fn answer(search: Search, answer: Answer) {
    let value = Tracked {
        answer,
        tally: Arc::clone(&search.tally),
        read: false,
    };
    if let Err(back) = search.reply.send(value) {
        drop(back);
    }
}

/// Waits for the answer as a caller does.
fn receive(receiver: ReplyReceiver<Tracked>) -> Option<Answer> {
    let mut tracked = block_on(receiver).ok()?;
    tracked.read = true;
    tracked.tally.answered.fetch_add(1, SeqCst);
    Some(tracked.answer)
}

/// The scan task: splits the batch at its start (callers gone are released
/// there) and answers the rest. Returns the ids it scanned.
fn scan(requests: Vec<Pending<Search>>, now: Instant) -> Vec<u64> {
    let split = split_at_start(requests, now, |s| s.reply.is_closed());
    assert!(split.expired.is_empty());
    let mut scanned = Vec::new();
    for r in split.live {
        scanned.push(r.id);
        answer(r.payload, Ok(r.id));
    }
    scanned
}

fn release_count(released_by_split: usize, tallies: &[&Arc<Tally>]) -> usize {
    released_by_split + tallies.iter().map(|t| t.total()).sum::<usize>()
}

/// A caller cancels (drops its receiver, then sends `Cancel`) while the
/// coalescer's window closes its group and the scan task starts: the
/// cancelled search is answered or released, never both, never neither; a
/// batch that starts after the caller has gone does not hold its payload;
/// the sibling in the same group is answered.
#[test]
fn a_caller_cancelling_during_the_flush_is_answered_or_released_exactly_once() {
    loom::model(|| {
        let t0 = Instant::now();
        let core = core(16);
        let (leaver, leaver_rx, leaver_tally) = search(1, t0);
        let (stayer, stayer_rx, stayer_tally) = search(2, t0);
        admit(&core, t0, leaver);
        admit(&core, t0, stayer);
        let gone = Arc::new(AtomicBool::new(false));
        let cancelled_in_core = Arc::new(AtomicUsize::new(0));

        let flusher = {
            let core = Arc::clone(&core);
            let gone = Arc::clone(&gone);
            thread::spawn(move || {
                let due = t0 + WINDOW;
                core.lock().unwrap().take_due(due);
                let batch = core.lock().unwrap().pop_ready();
                let Some(batch) = batch else { return 0 };
                let gone_before_start = gone.load(SeqCst);
                let requests = batch.requests;
                let split = split_at_start(requests, due, |s| s.reply.is_closed());
                if gone_before_start {
                    assert!(
                        split.live.iter().all(|r| r.id != 1),
                        "a batch started after its caller left holds its payload"
                    );
                }
                for r in split.live {
                    answer(r.payload, Ok(r.id));
                }
                split.released
            })
        };
        let canceller = {
            let core = Arc::clone(&core);
            let gone = Arc::clone(&gone);
            let cancelled_in_core = Arc::clone(&cancelled_in_core);
            thread::spawn(move || {
                drop(leaver_rx);
                gone.store(true, SeqCst);
                if let Some(search) = core.lock().unwrap().cancel(1) {
                    cancelled_in_core.fetch_add(1, SeqCst);
                    drop(search);
                }
            })
        };
        assert_eq!(receive(stayer_rx), Some(Ok(2)), "the sibling is answered");
        let released_by_split = flusher.join().unwrap();
        canceller.join().unwrap();

        let leaver_outcomes =
            release_count(released_by_split, &[&leaver_tally]) + cancelled_in_core.load(SeqCst);
        assert_eq!(
            leaver_outcomes, 1,
            "the cancelled search ended exactly once (answered or released)"
        );
        assert_eq!(leaver_tally.answered.load(SeqCst), 0);
        assert_eq!(stayer_tally.answered.load(SeqCst), 1);
        assert!(core.lock().unwrap().is_empty(), "nothing stranded");
    });
}

/// A request offered while the window flush of its group runs is in that
/// batch or in the next one, exactly once, never stranded.
#[test]
fn a_request_racing_the_window_flush_is_in_that_batch_or_the_next() {
    loom::model(|| {
        let t0 = Instant::now();
        let core = core(16);
        let (first, first_rx, _) = search(1, t0);
        admit(&core, t0, first);
        let (late, late_rx, _) = search(2, t0);

        let timer = {
            let core = Arc::clone(&core);
            thread::spawn(move || {
                let due = t0 + WINDOW;
                core.lock().unwrap().take_due(due);
                let mut scanned = Vec::new();
                while let Some(batch) = {
                    let popped = core.lock().unwrap().pop_ready();
                    popped
                } {
                    scanned.push(scan(batch.requests, due));
                }
                scanned
            })
        };
        let submitter = {
            let core = Arc::clone(&core);
            thread::spawn(move || {
                let at = t0 + WINDOW / 2;
                admit(&core, at, late);
            })
        };
        submitter.join().unwrap();
        let first_batches = timer.join().unwrap();
        // The next window: whatever is still waiting leaves now.
        let later = t0 + WINDOW * 3;
        core.lock().unwrap().take_due(later);
        let mut next_batches = Vec::new();
        while let Some(batch) = {
            let popped = core.lock().unwrap().pop_ready();
            popped
        } {
            next_batches.push(scan(batch.requests, later));
        }
        let all: Vec<u64> = first_batches
            .iter()
            .chain(&next_batches)
            .flatten()
            .copied()
            .collect();
        assert_eq!(
            first_batches.concat().first(),
            Some(&1),
            "the first batch has the first request"
        );
        assert_eq!(all.iter().filter(|&&id| id == 2).count(), 1, "exactly once");
        assert_eq!(all.len(), 2);
        assert!(core.lock().unwrap().is_empty(), "nothing stranded");
        assert_eq!(receive(first_rx), Some(Ok(1)));
        assert_eq!(receive(late_rx), Some(Ok(2)));
    });
}

/// Shutdown racing submit: every submitter gets its answer or
/// `ShuttingDown`, and nobody waits forever (a caller left waiting shows
/// as a loom deadlock in `receive`).
#[test]
fn shutdown_racing_submit_answers_every_submitter() {
    loom::model(|| {
        let t0 = Instant::now();
        let core = core(16);
        let (admitted, admitted_rx, _) = search(1, t0);
        admit(&core, t0, admitted);

        let submitter = {
            let core = Arc::clone(&core);
            thread::spawn(move || {
                let (late, late_rx, _) = search(2, t0);
                let refused = core.lock().unwrap().offer(t0, "k", late);
                if let Err((why, back)) = refused {
                    assert_eq!(why, Refusal::ShuttingDown);
                    answer(back.payload, Err("shutting down"));
                }
                receive(late_rx)
            })
        };
        let actor = {
            let core = Arc::clone(&core);
            thread::spawn(move || {
                core.lock().unwrap().shut_down();
                // The drain: scan whatever was admitted until none is left.
                while let Some(batch) = {
                    let popped = core.lock().unwrap().pop_ready();
                    popped
                } {
                    scan(batch.requests, t0);
                }
                assert!(
                    core.lock().unwrap().is_empty(),
                    "shutdown left admitted requests behind"
                );
            })
        };
        assert_eq!(
            receive(admitted_rx),
            Some(Ok(1)),
            "admitted before shutdown: served"
        );
        let late = submitter.join().unwrap();
        actor.join().unwrap();
        assert!(
            matches!(late, Some(Ok(2)) | Some(Err("shutting down"))),
            "the racing submitter got {late:?}"
        );
        assert!(core.lock().unwrap().is_empty());
    });
}
