//! The reply channel on its own: the two wake-ups the engine relies on. A
//! sender dropped unanswered (a batch that failed to deliver, an engine
//! going away) must wake its waiting caller; a caller that leaves must wake
//! a scan watching for its callers to go (that is how a batch with nobody
//! left is cancelled). A missed wake-up shows as a loom deadlock.

use loom::future::block_on;
use loom::thread;
use shoal::internals::{reply_channel, SenderGone};

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
