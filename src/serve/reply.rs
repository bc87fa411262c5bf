//! The channel a coalesced search's answer comes back on: one value, from
//! the batch that scanned the search to the caller awaiting it.
//!
//! It is a oneshot (like tokio's) written against the `sync` shim, so the
//! loom models check the hand-off the engine's promises rest on: a caller
//! that stops waiting is seen as gone ([`ReplySender::is_closed`],
//! [`ReplySender::closed`]) and its answer is released, a sender dropped
//! without answering wakes its caller (who then never waits forever), and a
//! value is received at most once. State is a mutex-guarded record plus the
//! two sides' wakers; wakers are woken after the lock is released.

use crate::cancel::CancelToken;
use crate::sync::{lock, Arc, AtomicBool, AtomicUsize, Mutex};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Wake, Waker};

/// Creates a reply channel: the sender goes with the request, the receiver
/// stays with the caller.
pub fn reply_channel<T>() -> (ReplySender<T>, ReplyReceiver<T>) {
    let shared = Arc::new(Mutex::new(State {
        value: None,
        sender_gone: false,
        receiver_gone: false,
        receiver_waker: None,
        sender_waker: None,
    }));
    (
        ReplySender {
            shared: Arc::clone(&shared),
        },
        ReplyReceiver { shared },
    )
}

struct State<T> {
    value: Option<T>,
    sender_gone: bool,
    receiver_gone: bool,
    receiver_waker: Option<Waker>,
    sender_waker: Option<Waker>,
}

/// The answering side. Dropping it without sending tells the caller that
/// no answer will come.
pub struct ReplySender<T> {
    shared: Arc<Mutex<State<T>>>,
}

/// The caller's side: a future of the answer, or of [`SenderGone`] when
/// the sender was dropped without one. Dropping it cancels: the sender
/// sees the caller as gone.
pub struct ReplyReceiver<T> {
    shared: Arc<Mutex<State<T>>>,
}

/// The sender was dropped without sending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SenderGone;

impl<T> ReplySender<T> {
    /// Sends the answer; gives it back when the caller is gone.
    pub fn send(self, value: T) -> Result<(), T> {
        let waker = {
            let mut state = lock(&self.shared);
            if state.receiver_gone {
                return Err(value);
            }
            state.value = Some(value);
            state.receiver_waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
        Ok(())
    }

    /// The caller has stopped waiting.
    pub fn is_closed(&self) -> bool {
        lock(&self.shared).receiver_gone
    }

    /// Has `waker` woken once the caller stops waiting (now, when it has
    /// already gone); replaces a waker given before. For a thread that
    /// watches its callers without a runtime.
    pub fn wake_when_closed(&self, waker: &Waker) {
        let closed = {
            let mut state = lock(&self.shared);
            if !state.receiver_gone {
                state.sender_waker = Some(waker.clone());
            }
            state.receiver_gone
        };
        if closed {
            waker.wake_by_ref();
        }
    }

    /// Resolves once the caller has stopped waiting.
    pub fn closed(&mut self) -> Closed<'_, T> {
        Closed { sender: self }
    }
}

impl<T> Drop for ReplySender<T> {
    fn drop(&mut self) {
        let waker = {
            let mut state = lock(&self.shared);
            state.sender_gone = true;
            state.receiver_waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl<T> std::fmt::Debug for ReplySender<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplySender")
            .field("closed", &self.is_closed())
            .finish()
    }
}

/// The future of [`ReplySender::closed`].
pub struct Closed<'a, T> {
    sender: &'a mut ReplySender<T>,
}

impl<T> Future for Closed<'_, T> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = lock(&self.sender.shared);
        if state.receiver_gone {
            return Poll::Ready(());
        }
        state.sender_waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl<T> Future for ReplyReceiver<T> {
    type Output = Result<T, SenderGone>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = lock(&self.shared);
        if let Some(value) = state.value.take() {
            return Poll::Ready(Ok(value));
        }
        if state.sender_gone {
            return Poll::Ready(Err(SenderGone));
        }
        state.receiver_waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl<T> Drop for ReplyReceiver<T> {
    fn drop(&mut self) {
        let (unread, waker) = {
            let mut state = lock(&self.shared);
            state.receiver_gone = true;
            (state.value.take(), state.sender_waker.take())
        };
        // An answer nobody will read is released here, outside the lock.
        drop(unread);
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl<T> std::fmt::Debug for ReplyReceiver<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplyReceiver").finish_non_exhaustive()
    }
}

/// Cancels `token` once every one of `replies`' callers has stopped
/// waiting: each reply channel wakes a counter when its caller leaves, so
/// no task has to watch a running batch (the thread that scans it checks
/// the token at every partition).
pub fn cancel_when_all_gone<T>(replies: &[ReplySender<T>], token: &CancelToken) {
    let watch = std::sync::Arc::new(CallersWatch {
        live: AtomicUsize::new(replies.len()),
        token: token.clone(),
    });
    for reply in replies {
        let gone = std::sync::Arc::new(CallerGone {
            watch: std::sync::Arc::clone(&watch),
            counted: AtomicBool::new(false),
        });
        reply.wake_when_closed(&Waker::from(gone));
    }
}

/// The callers of one batch still waiting, and its scan's token.
struct CallersWatch {
    live: AtomicUsize,
    token: CancelToken,
}

/// One caller of a batch: counted out (once) when it stops waiting.
struct CallerGone {
    watch: std::sync::Arc<CallersWatch>,
    counted: AtomicBool,
}

impl Wake for CallerGone {
    fn wake(self: std::sync::Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        if !self.counted.swap(true, Ordering::AcqRel)
            && self.watch.live.fetch_sub(1, Ordering::AcqRel) == 1
        {
            self.watch.token.cancel();
        }
    }
}

#[cfg(all(test, not(shoal_loom)))]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_sent_value_arrives_once() {
        let (tx, rx) = reply_channel();
        assert!(!tx.is_closed());
        let task = tokio::spawn(rx);
        tokio::task::yield_now().await;
        assert_eq!(tx.send(7), Ok(()));
        assert_eq!(task.await.unwrap(), Ok(7));
    }

    #[tokio::test]
    async fn a_dropped_sender_wakes_the_caller() {
        let (tx, rx) = reply_channel::<u32>();
        let task = tokio::spawn(rx);
        tokio::task::yield_now().await;
        drop(tx);
        assert_eq!(task.await.unwrap(), Err(SenderGone));
    }

    #[test]
    fn a_watching_waker_is_woken_when_the_caller_leaves_or_has_left() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        struct Count(AtomicUsize);
        impl std::task::Wake for Count {
            fn wake(self: std::sync::Arc<Self>) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let count = std::sync::Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(std::sync::Arc::clone(&count));
        let (tx, rx) = reply_channel::<u32>();
        tx.wake_when_closed(&waker);
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
        drop(rx);
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        tx.wake_when_closed(&waker);
        assert_eq!(count.0.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_dropped_receiver_closes_the_sender() {
        let (mut tx, rx) = reply_channel::<u32>();
        let waiter = tokio::spawn(async move {
            tx.closed().await;
            tx.send(1)
        });
        tokio::task::yield_now().await;
        drop(rx);
        assert_eq!(waiter.await.unwrap(), Err(1));
    }
}
