//! The scan pool's hand-off with cancellation: a scan cancelled while its
//! shares (the caller's and a helper's) pick up partitions. Every share
//! stops at its next partition, the caller gets `Cancelled` once (or every
//! partition when the cancel came too late), no share is still running when
//! the scan returns, and each share's scratch is released.

use loom::sync::atomic::{AtomicBool, AtomicUsize};
use loom::sync::{Arc, Mutex};
use loom::thread;
use shoal::internals::run_shared;
use shoal::CancelToken;
use shoal::Error;
use std::sync::atomic::Ordering::SeqCst;

const PARTITIONS: usize = 3;

/// A share's scratch (heaps, score buffers): counts itself while alive.
struct Scratch(Arc<AtomicUsize>);

impl Scratch {
    fn new(live: &Arc<AtomicUsize>) -> Scratch {
        live.fetch_add(1, SeqCst);
        Scratch(Arc::clone(live))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        self.0.fetch_sub(1, SeqCst);
    }
}

#[test]
fn a_cancelled_scan_stops_every_share_and_releases_its_scratch() {
    loom::model(|| {
        let token = CancelToken::new();
        // Set once `cancel` has returned: a share that sees it must not
        // start another partition.
        let cancel_done = Arc::new(AtomicBool::new(false));
        let canceller = {
            let token = token.clone();
            let cancel_done = Arc::clone(&cancel_done);
            thread::spawn(move || {
                token.cancel();
                cancel_done.store(true, SeqCst);
            })
        };
        let next = AtomicUsize::new(0);
        let scanned: Vec<AtomicUsize> = (0..PARTITIONS).map(|_| AtomicUsize::new(0)).collect();
        let running = Arc::new(AtomicUsize::new(0));
        let scratch = Arc::new(AtomicUsize::new(0));
        let helpers = Mutex::new(Vec::new());
        let result = run_shared(
            2,
            1,
            |_share| {
                running.fetch_add(1, SeqCst);
                let _scratch = Scratch::new(&scratch);
                let mut mine = 0;
                let outcome = loop {
                    let Some(p) = Some(next.fetch_add(1, SeqCst)).filter(|&p| p < PARTITIONS)
                    else {
                        break Ok(mine);
                    };
                    let after_cancel = cancel_done.load(SeqCst);
                    if let Err(e) = token.check() {
                        break Err(e);
                    }
                    assert!(
                        !after_cancel,
                        "a share started partition {p} after the scan was cancelled"
                    );
                    scanned[p].fetch_add(1, SeqCst);
                    mine += 1;
                };
                running.fetch_sub(1, SeqCst);
                outcome
            },
            |helper| {
                helpers
                    .lock()
                    .unwrap()
                    .push(thread::spawn(move || helper.help()))
            },
        );
        assert_eq!(
            running.load(SeqCst),
            0,
            "the scan returned while a share ran"
        );
        assert_eq!(
            scratch.load(SeqCst),
            0,
            "a share's scratch outlived the scan"
        );
        let counts: Vec<usize> = scanned.iter().map(|c| c.load(SeqCst)).collect();
        assert!(
            counts.iter().all(|&c| c <= 1),
            "a partition scanned twice: {counts:?}"
        );
        match result {
            Ok(per_share) => {
                assert_eq!(per_share.iter().sum::<usize>(), PARTITIONS);
                assert_eq!(counts, vec![1; PARTITIONS]);
            }
            Err(Error::Cancelled) => {}
            Err(other) => panic!("a cancelled scan failed with {other}"),
        }
        canceller.join().unwrap();
        for helper in helpers.into_inner().unwrap() {
            helper.join().unwrap();
        }
    });
}
