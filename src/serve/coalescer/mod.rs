//! The coalescer actor: a tokio task that owns a [`CoalescerCore`] and
//! feeds the [`Scanner`].
//!
//! Handles send it messages over a bounded channel; it offers each search
//! to the core (rejecting with `Overloaded` when `max_pending` are
//! waiting), sleeps until the core's next deadline, and starts ready batches
//! whenever a scan slot is free. With `flush_when_idle`, a free slot closes
//! the oldest open groups at once, so a lone caller never waits for the
//! window while a busy engine gathers big batches by itself. A caller that
//! stops waiting sends `Cancel` (best effort: the scanner also drops closed
//! callers before a batch starts). On shutdown it drains: the core stops
//! admitting, every search it had admitted is scanned, later ones (still
//! read from the inbox until the drain ends, then the inbox's leftovers)
//! get `ShuttingDown`, and it returns once no batch is running.

pub mod core;

use self::core::{CoalescerCore, CoreSettings, Pending, Refusal};
use super::scanner::{BatchKey, Scanner, SearchRequest};
use super::stats::Stats;
use crate::config::CoalescerConfig;
use crate::error::Error;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// A message to the coalescer actor.
#[derive(Debug)]
pub(crate) enum Message {
    /// A validated search to coalesce (boxed: it is far larger than the
    /// other messages).
    Submit(Box<Submission>),
    /// The caller of `id` stopped waiting.
    Cancel(u64),
    /// Stop admitting, drain, reply when no batch runs.
    Shutdown(oneshot::Sender<()>),
}

/// A validated search on its way to the coalescer.
#[derive(Debug)]
pub(crate) struct Submission {
    pub(crate) id: u64,
    pub(crate) key: BatchKey,
    pub(crate) deadline: Option<Instant>,
    pub(crate) request: SearchRequest,
}

/// The actor's state.
pub(crate) struct CoalescerActor {
    core: CoalescerCore<BatchKey, SearchRequest>,
    inbox: mpsc::Receiver<Message>,
    scanner: Arc<Scanner>,
    stats: Arc<Stats>,
    flush_when_idle: bool,
    shutdown_replies: Vec<oneshot::Sender<()>>,
}

impl CoalescerActor {
    pub(crate) fn new(
        config: &CoalescerConfig,
        max_batch_size: usize,
        inbox: mpsc::Receiver<Message>,
        scanner: Arc<Scanner>,
        stats: Arc<Stats>,
    ) -> CoalescerActor {
        CoalescerActor {
            core: CoalescerCore::new(CoreSettings {
                window: Duration::from_micros(config.window_us),
                max_batch_size,
                max_pending: config.max_pending,
            }),
            inbox,
            scanner,
            stats,
            flush_when_idle: config.flush_when_idle,
            shutdown_replies: Vec::new(),
        }
    }

    /// Runs until shutdown, or until every handle is gone and the queue is
    /// drained.
    pub(crate) async fn run(mut self) {
        let mut inbox_open = true;
        loop {
            self.dispatch();
            self.stats
                .pending
                .store(self.core.pending() as u64, Ordering::Relaxed);
            if self.core.is_shut_down() && self.core.is_empty() {
                break;
            }
            let next = self.core.next_deadline().map(Instant::from_std);
            // Due already (window 0, or a deadline passed while busy): act
            // now rather than through the timer, which ticks in whole ms.
            let now = Instant::now();
            if next.is_some_and(|at| at <= now) {
                self.expire(now);
                continue;
            }
            let waiting = !self.core.is_empty();
            tokio::select! {
                message = self.inbox.recv(), if inbox_open => match message {
                    Some(message) => self.handle(message),
                    // Every handle is gone: drain what was admitted.
                    None => {
                        inbox_open = false;
                        self.core.shut_down();
                    }
                },
                () = sleep_until(next), if next.is_some() => {
                    self.expire(Instant::now());
                }
                () = self.scanner.slot_freed(), if waiting => {}
            }
        }
        // The core admits nothing now: what is still in the inbox is
        // refused (`ShuttingDown`) by `handle`, like everything sent during
        // the drain.
        self.inbox.close();
        while let Ok(message) = self.inbox.try_recv() {
            self.handle(message);
        }
        self.scanner.wait_idle().await;
        self.stats.pending.store(0, Ordering::Relaxed);
        for reply in self.shutdown_replies.drain(..) {
            let _ = reply.send(());
        }
    }

    /// Applies one message.
    fn handle(&mut self, message: Message) {
        match message {
            Message::Submit(submission) => {
                let Submission {
                    id,
                    key,
                    deadline,
                    request,
                } = *submission;
                let now = Instant::now();
                let pending = Pending {
                    id,
                    arrived: now.into_std(),
                    deadline: deadline.map(Instant::into_std),
                    payload: request,
                };
                if let Err((why, back)) = self.core.offer(now.into_std(), key, pending) {
                    let error = match why {
                        Refusal::ShuttingDown => Error::ShuttingDown,
                        Refusal::Full => {
                            Stats::add(&self.stats.rejected_overloaded, 1);
                            Error::Overloaded(format!(
                                "{} searches are already waiting (coalescer.max_pending)",
                                self.core.pending()
                            ))
                        }
                        Refusal::DuplicateId => {
                            Error::Internal(format!("search id {} is already waiting", back.id))
                        }
                    };
                    let _ = back.payload.reply.send(Err(error));
                }
            }
            Message::Cancel(id) => {
                if self.core.cancel(id).is_some() {
                    Stats::add(&self.stats.cancelled, 1);
                }
            }
            Message::Shutdown(reply) => {
                self.shutdown_replies.push(reply);
                self.core.shut_down();
            }
        }
    }

    /// Tells expired searches so, and closes groups whose window ended.
    fn expire(&mut self, now: Instant) {
        for request in self.core.take_due(now.into_std()) {
            Stats::add(&self.stats.deadline_exceeded, 1);
            let error = request.deadline_exceeded(now.into_std());
            let _ = request.payload.reply.send(Err(error));
        }
    }

    /// Starts ready batches on free slots; with `flush_when_idle`, closes
    /// open groups for slots nothing is ready for.
    fn dispatch(&mut self) {
        loop {
            if self.core.ready_len() == 0 && self.flush_when_idle {
                self.core
                    .close_oldest_for_free_slots(self.scanner.free_slots());
            }
            if self.core.ready_len() == 0 {
                return;
            }
            let Some(slot) = self.scanner.try_slot() else {
                return;
            };
            match self.core.pop_ready() {
                Some(batch) => self.scanner.start(batch, slot),
                None => return,
            }
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
