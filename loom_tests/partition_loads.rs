//! The partition cache's load semaphore (the part of the cache shoal owns;
//! moka's own single-flight and eviction are not modelled): loads racing,
//! one of them cancelled mid-load, never exceed the bound, all give their
//! slot back, and a waiting loader is always woken.

use loom::sync::atomic::AtomicUsize;
use loom::sync::Arc;
use loom::thread;
use shoal::internals::LoadPermits;
use shoal::CancelToken;
use shoal::Error;
use std::sync::atomic::Ordering::SeqCst;

/// A load as the cache runs it: take a slot, check for cancellation, read.
fn load(permits: &LoadPermits, token: &CancelToken, loading: &AtomicUsize) -> Result<(), Error> {
    let _permit = permits.acquire();
    let now = loading.fetch_add(1, SeqCst) + 1;
    assert!(now <= 1, "{now} loads in flight with a bound of 1");
    let outcome = token.check();
    loading.fetch_sub(1, SeqCst);
    outcome
}

#[test]
fn loads_racing_a_cancelled_loader_stay_bounded_and_give_every_slot_back() {
    loom::model(|| {
        let permits = Arc::new(LoadPermits::new(1));
        let loading = Arc::new(AtomicUsize::new(0));
        let cancelled = CancelToken::new();
        cancelled.cancel();
        let live = CancelToken::new();
        let threads: Vec<_> = [cancelled, live.clone(), live]
            .into_iter()
            .map(|token| {
                let permits = Arc::clone(&permits);
                let loading = Arc::clone(&loading);
                thread::spawn(move || load(&permits, &token, &loading))
            })
            .collect();
        let outcomes: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        assert!(matches!(outcomes[0], Err(Error::Cancelled)));
        assert!(outcomes[1].is_ok() && outcomes[2].is_ok());
        assert_eq!(permits.in_flight(), 0, "every slot came back");
        assert!(permits.peak() <= 1);
    });
}
