//! The reply channel on its own: the two wake-ups the engine relies on. A
//! sender dropped unanswered (a batch that failed to deliver, an engine
//! going away) must wake its waiting caller; a caller that leaves must wake
//! a scan watching for its callers to go (that is how a batch with nobody
//! left is cancelled). A missed wake-up shows as a loom deadlock.

use loom::future::block_on;
use loom::thread;
use shoal::internals::{cancel_when_all_gone, reply_channel, SenderGone};
use shoal::CancelToken;

#[test]
fn a_sender_dropped_unanswered_wakes_its_caller() {
    loom::model(|| {
        let (sender, receiver) = reply_channel::<u64>();
        let dropper = thread::spawn(move || drop(sender));
        assert_eq!(block_on(receiver), Err(SenderGone));
        dropper.join().unwrap();
    });
}

#[test]
fn an_answer_races_the_caller_and_arrives_once() {
    loom::model(|| {
        let (sender, receiver) = reply_channel::<u64>();
        let answerer = thread::spawn(move || sender.send(7));
        assert_eq!(block_on(receiver), Ok(7));
        assert_eq!(answerer.join().unwrap(), Ok(()));
    });
}

#[test]
fn a_caller_leaving_wakes_the_scan_watching_it() {
    loom::model(|| {
        let (mut sender, receiver) = reply_channel::<u64>();
        let caller = thread::spawn(move || drop(receiver));
        block_on(sender.closed());
        assert!(sender.is_closed());
        assert_eq!(
            sender.send(1),
            Err(1),
            "an answer to a caller gone comes back"
        );
        caller.join().unwrap();
    });
}

/// A batch watched by its callers' reply channels (no task): callers
/// leaving on two threads while the batch registers its watch cancel the
/// scan exactly when both have gone, and a caller still waiting keeps it
/// running.
#[test]
fn the_last_caller_leaving_cancels_the_batch_and_not_before() {
    loom::model(|| {
        let (first, first_caller) = reply_channel::<u64>();
        let (second, second_caller) = reply_channel::<u64>();
        let token = CancelToken::new();
        let leaving = thread::spawn(move || drop(first_caller));
        let batch = [first, second];
        cancel_when_all_gone(&batch, &token);
        leaving.join().unwrap();
        assert!(!token.is_cancelled(), "one caller is still waiting");
        let leaving = thread::spawn(move || drop(second_caller));
        leaving.join().unwrap();
        assert!(token.is_cancelled(), "every caller has gone");
        drop(batch);
    });
}
