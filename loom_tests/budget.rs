//! The memory budget: permits released from several threads at once bring
//! it back to exactly zero, and a waiter is always woken once enough is
//! free (a lost wake-up shows as a loom deadlock).

use loom::thread;
use shoal::internals::MemoryBudget;
use shoal::Error;
use std::time::Duration;

/// Long enough never to expire (loom's condvar never times out anyway).
const FOREVER: Duration = Duration::from_secs(3600);

#[test]
fn racing_releases_return_every_byte_and_wake_the_waiter() {
    loom::model(|| {
        let budget = MemoryBudget::new(10);
        let completed = budget.try_acquire(4).unwrap();
        let failed = budget.try_acquire(6).unwrap();
        // A batch that completes, and one that fails: both release on drop.
        let t1 = thread::spawn(move || drop(completed));
        let t2 = thread::spawn(move || {
            let outcome: Result<(), (Error, _)> = Err((Error::Cancelled, failed));
            drop(outcome);
        });
        // A batch that needs the whole budget waits for both.
        let waiter = {
            let budget = budget.clone();
            thread::spawn(move || budget.acquire_timeout(10, FOREVER).map(|p| p.bytes()))
        };
        t1.join().unwrap();
        t2.join().unwrap();
        assert_eq!(waiter.join().unwrap().unwrap(), 10);
        assert_eq!(budget.in_use(), 0, "every byte came back");
    });
}

#[test]
fn two_waiters_are_both_served_as_permits_come_back() {
    loom::model(|| {
        let budget = MemoryBudget::new(2);
        let held = budget.try_acquire(2).unwrap();
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let budget = budget.clone();
                thread::spawn(move || {
                    let permit = budget.acquire_timeout(1, FOREVER).unwrap();
                    assert!(budget.in_use() <= 2);
                    drop(permit);
                })
            })
            .collect();
        drop(held);
        for w in waiters {
            w.join().unwrap();
        }
        assert_eq!(budget.in_use(), 0);
    });
}
