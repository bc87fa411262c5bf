//! The coalescer's state machine: which waiting searches form a batch, and
//! when it leaves. No clocks, no channels, no runtime: time is passed in,
//! so unit tests (and loom) drive it deterministically.
//!
//! Requests wait in *open groups*, one per key (everything two searches must
//! share to be answered by one scan). A group closes into the *ready* queue
//! when it reaches `max_batch_size`, when its oldest request has waited
//! `window`, or when the engine asks for idle flushes because a scan slot
//! is free. The actor pops ready batches as scan slots free up; a key whose
//! group closed starts a new group with its next request. A request can be
//! cancelled, or expire at its deadline, anywhere until its batch is popped.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::hash::Hash;
use std::time::{Duration, Instant};

/// Limits of the state machine.
#[derive(Clone, Copy, Debug)]
pub struct CoreSettings {
    /// Longest the oldest request of a group waits before the group closes.
    pub window: Duration,
    /// Requests per batch at most; a group this big closes at once.
    pub max_batch_size: usize,
    /// Requests waiting (open or ready) at most.
    pub max_pending: usize,
}

/// One waiting request.
#[derive(Debug)]
pub struct Pending<P> {
    /// Unique id, used to cancel it.
    pub id: u64,
    /// When it was offered.
    pub arrived: Instant,
    /// When it stops being worth scanning, if ever.
    pub deadline: Option<Instant>,
    /// What the caller asked for (and where to reply).
    pub payload: P,
}

impl<P> Pending<P> {
    /// The error that tells this request its deadline passed at `now`.
    pub fn deadline_exceeded(&self, now: Instant) -> crate::error::Error {
        let deadline = self
            .deadline
            .map(|d| d.saturating_duration_since(self.arrived))
            .unwrap_or_default();
        crate::error::Error::DeadlineExceeded {
            waited_ms: now.saturating_duration_since(self.arrived).as_millis() as u64,
            deadline_ms: deadline.as_millis() as u64,
        }
    }
}

/// Why a group closed into a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushReason {
    /// It reached `max_batch_size`.
    Full,
    /// Its oldest request waited the window.
    Window,
    /// A scan slot was free.
    Idle,
    /// The engine is shutting down and drains everything.
    Shutdown,
}

/// Requests that leave together; all share `key`.
#[derive(Debug)]
pub struct Batch<K, P> {
    /// The key every request shares.
    pub key: K,
    /// Requests in arrival order.
    pub requests: Vec<Pending<P>>,
    /// Why the group closed.
    pub reason: FlushReason,
}

/// Why [`CoalescerCore::offer`] handed a request back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `max_pending` requests are already waiting.
    Full,
    /// A waiting request already has this id.
    DuplicateId,
    /// [`CoalescerCore::shut_down`] was called: nothing is admitted.
    ShuttingDown,
}

/// A batch's requests split when its scan starts (see
/// [`split_at_start`]).
#[derive(Debug)]
pub struct StartSplit<P> {
    /// Requests to scan, in arrival order.
    pub live: Vec<Pending<P>>,
    /// Requests whose deadline had passed: to be told so.
    pub expired: Vec<Pending<P>>,
    /// Requests whose caller had gone: released (dropped) here.
    pub released: usize,
}

/// Splits a batch's requests as its scan starts: callers that have gone
/// (`gone(payload)`) are released at once, so the scan never holds their
/// payloads; those whose deadline is not after `now` are returned as
/// expired; the rest are live.
pub fn split_at_start<P>(
    requests: Vec<Pending<P>>,
    now: Instant,
    gone: impl Fn(&P) -> bool,
) -> StartSplit<P> {
    let mut split = StartSplit {
        live: Vec::with_capacity(requests.len()),
        expired: Vec::new(),
        released: 0,
    };
    for r in requests {
        if gone(&r.payload) {
            split.released += 1;
        } else if r.deadline.is_some_and(|d| d <= now) {
            split.expired.push(r);
        } else {
            split.live.push(r);
        }
    }
    split
}

struct Group<P> {
    opened: Instant,
    requests: Vec<Pending<P>>,
}

/// The coalescer's state: open groups by key, closed batches waiting for a
/// scan slot, and indexes for cancellation and deadlines.
pub struct CoalescerCore<K, P> {
    settings: CoreSettings,
    groups: HashMap<K, Group<P>>,
    ready: VecDeque<Batch<K, P>>,
    /// Key of every waiting request, open or ready.
    location: HashMap<u64, K>,
    /// (deadline, id) of every waiting request that has one.
    deadlines: BTreeSet<(Instant, u64)>,
    /// Set by [`CoalescerCore::shut_down`]: nothing more is admitted.
    stopping: bool,
}

impl<K: Clone + Eq + Hash, P> CoalescerCore<K, P> {
    /// An empty coalescer.
    pub fn new(settings: CoreSettings) -> Self {
        CoalescerCore {
            settings,
            groups: HashMap::new(),
            ready: VecDeque::new(),
            location: HashMap::new(),
            deadlines: BTreeSet::new(),
            stopping: false,
        }
    }

    /// Requests waiting, open or ready.
    pub fn pending(&self) -> usize {
        self.location.len()
    }

    /// No request is waiting.
    pub fn is_empty(&self) -> bool {
        self.location.is_empty()
    }

    /// Closed batches waiting for a scan slot.
    pub fn ready_len(&self) -> usize {
        self.ready.len()
    }

    /// Open groups (for tests and debugging).
    #[cfg(test)]
    pub fn open_groups(&self) -> usize {
        self.groups.len()
    }

    /// Adds a request to its key's group, closing the group if it is now
    /// full. A shut-down or full coalescer (`max_pending`), or a repeated
    /// id, hands the request back untouched with the reason.
    pub fn offer(
        &mut self,
        now: Instant,
        key: K,
        request: Pending<P>,
    ) -> Result<(), (Refusal, Pending<P>)> {
        if self.stopping {
            return Err((Refusal::ShuttingDown, request));
        }
        if self.location.len() >= self.settings.max_pending {
            return Err((Refusal::Full, request));
        }
        if self.location.contains_key(&request.id) {
            return Err((Refusal::DuplicateId, request));
        }
        self.location.insert(request.id, key.clone());
        if let Some(deadline) = request.deadline {
            self.deadlines.insert((deadline, request.id));
        }
        let group = self.groups.entry(key.clone()).or_insert_with(|| Group {
            opened: now,
            requests: Vec::new(),
        });
        group.requests.push(request);
        if group.requests.len() >= self.settings.max_batch_size {
            self.close(&key, FlushReason::Full);
        }
        Ok(())
    }

    /// The next instant something falls due: a group's window ends or a
    /// request's deadline passes.
    pub fn next_deadline(&self) -> Option<Instant> {
        let window = self
            .groups
            .values()
            .map(|g| g.opened + self.settings.window)
            .min();
        let deadline = self.deadlines.first().map(|&(at, _)| at);
        match (window, deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Removes the requests whose deadline has passed (returned, so the
    /// caller can tell them) and closes the groups whose window has ended.
    pub fn take_due(&mut self, now: Instant) -> Vec<Pending<P>> {
        let mut expired = Vec::new();
        while let Some(&(at, id)) = self.deadlines.first() {
            if at > now {
                break;
            }
            match self.remove(id) {
                Some(request) => expired.push(request),
                None => {
                    self.deadlines.pop_first();
                }
            }
        }
        let due: Vec<K> = self
            .groups
            .iter()
            .filter(|(_, g)| g.opened + self.settings.window <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            self.close(&key, FlushReason::Window);
        }
        expired
    }

    /// Closes open groups, oldest first, until `free_slots` batches are
    /// ready: called when scan slots are free, so that requests need not
    /// wait out the window while the engine is idle.
    pub fn close_oldest_for_free_slots(&mut self, free_slots: usize) {
        while self.ready.len() < free_slots {
            let oldest = self
                .groups
                .iter()
                .min_by_key(|(_, g)| g.opened)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(key) => self.close(&key, FlushReason::Idle),
                None => break,
            }
        }
    }

    /// Stops admitting (every later offer is refused with
    /// [`Refusal::ShuttingDown`]) and closes every open group, so that what
    /// was admitted drains as ready batches.
    pub fn shut_down(&mut self) {
        self.stopping = true;
        let keys: Vec<K> = self.groups.keys().cloned().collect();
        for key in keys {
            self.close(&key, FlushReason::Shutdown);
        }
    }

    /// [`CoalescerCore::shut_down`] has been called.
    pub fn is_shut_down(&self) -> bool {
        self.stopping
    }

    /// The oldest ready batch, handed over for scanning: its requests can
    /// no longer be cancelled here (the scanner watches them instead).
    pub fn pop_ready(&mut self) -> Option<Batch<K, P>> {
        let batch = self.ready.pop_front()?;
        for r in &batch.requests {
            self.location.remove(&r.id);
            if let Some(at) = r.deadline {
                self.deadlines.remove(&(at, r.id));
            }
        }
        Some(batch)
    }

    /// Removes a waiting request; `None` if it is not waiting (unknown,
    /// already handed to the scanner, or already removed).
    pub fn cancel(&mut self, id: u64) -> Option<P> {
        self.remove(id).map(|r| r.payload)
    }

    fn remove(&mut self, id: u64) -> Option<Pending<P>> {
        let key = self.location.remove(&id)?;
        let removed = match self.groups.get_mut(&key) {
            Some(group) => match group.requests.iter().position(|r| r.id == id) {
                Some(i) => {
                    let r = group.requests.remove(i);
                    if group.requests.is_empty() {
                        self.groups.remove(&key);
                    }
                    Some(r)
                }
                None => None,
            },
            None => None,
        };
        let removed = removed.or_else(|| {
            let (b, i) = self.ready.iter().enumerate().find_map(|(b, batch)| {
                (batch.key == key)
                    .then(|| batch.requests.iter().position(|r| r.id == id))
                    .flatten()
                    .map(|i| (b, i))
            })?;
            let r = self.ready[b].requests.remove(i);
            if self.ready[b].requests.is_empty() {
                self.ready.remove(b);
            }
            Some(r)
        })?;
        if let Some(at) = removed.deadline {
            self.deadlines.remove(&(at, id));
        }
        Some(removed)
    }

    fn close(&mut self, key: &K, reason: FlushReason) {
        if let Some(group) = self.groups.remove(key) {
            self.ready.push_back(Batch {
                key: key.clone(),
                requests: group.requests,
                reason,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn core(
        window_us: u64,
        max_batch: usize,
        max_pending: usize,
    ) -> CoalescerCore<&'static str, u64> {
        CoalescerCore::new(CoreSettings {
            window: Duration::from_micros(window_us),
            max_batch_size: max_batch,
            max_pending,
        })
    }

    fn req(id: u64, at: Instant, deadline: Option<Instant>) -> Pending<u64> {
        Pending {
            id,
            arrived: at,
            deadline,
            payload: id * 10,
        }
    }

    fn payloads(b: &Batch<&str, u64>) -> Vec<u64> {
        b.requests.iter().map(|r| r.payload).collect()
    }

    #[test]
    fn a_full_group_closes_at_once() {
        let t0 = Instant::now();
        let mut c = core(1_000, 3, 100);
        for id in 0..3 {
            c.offer(t0, "a", req(id, t0, None)).unwrap();
        }
        c.offer(t0, "a", req(3, t0, None)).unwrap();
        let b = c.pop_ready().unwrap();
        assert_eq!(
            (payloads(&b), b.reason),
            (vec![0, 10, 20], FlushReason::Full)
        );
        assert!(
            c.pop_ready().is_none(),
            "the fourth request opened a new group"
        );
        assert_eq!(c.pending(), 1);
    }

    #[test]
    fn the_window_closes_a_group_when_its_oldest_request_has_waited() {
        let t0 = Instant::now();
        let mut c = core(500, 64, 100);
        c.offer(t0, "a", req(1, t0, None)).unwrap();
        let t1 = t0 + Duration::from_micros(300);
        c.offer(t1, "a", req(2, t1, None)).unwrap();
        assert_eq!(c.next_deadline(), Some(t0 + Duration::from_micros(500)));
        assert!(c.take_due(t0 + Duration::from_micros(499)).is_empty());
        assert!(c.pop_ready().is_none());
        c.take_due(t0 + Duration::from_micros(500));
        let b = c.pop_ready().unwrap();
        assert_eq!(
            (payloads(&b), b.reason),
            (vec![10, 20], FlushReason::Window)
        );
        assert_eq!(c.next_deadline(), None);
        assert!(c.is_empty());
    }

    #[test]
    fn idle_flush_closes_the_oldest_groups_up_to_the_free_slots() {
        let t0 = Instant::now();
        let mut c = core(1_000_000, 64, 100);
        c.offer(t0, "old", req(1, t0, None)).unwrap();
        let t1 = t0 + Duration::from_micros(1);
        c.offer(t1, "new", req(2, t1, None)).unwrap();
        c.close_oldest_for_free_slots(1);
        let b = c.pop_ready().unwrap();
        assert_eq!((b.key, b.reason), ("old", FlushReason::Idle));
        assert_eq!(c.open_groups(), 1);
        c.close_oldest_for_free_slots(4);
        assert_eq!(c.pop_ready().unwrap().key, "new");
    }

    #[test]
    fn keys_are_never_mixed_but_arrival_order_is_kept() {
        let t0 = Instant::now();
        let mut c = core(10, 64, 100);
        for (id, key) in [(1, "a"), (2, "b"), (3, "a"), (4, "b"), (5, "c")] {
            c.offer(t0, key, req(id, t0, None)).unwrap();
        }
        c.take_due(t0 + Duration::from_micros(10));
        let mut batches: Vec<(&str, Vec<u64>)> = std::iter::from_fn(|| c.pop_ready())
            .map(|b| (b.key, payloads(&b)))
            .collect();
        batches.sort();
        assert_eq!(
            batches,
            vec![("a", vec![10, 30]), ("b", vec![20, 40]), ("c", vec![50])]
        );
    }

    #[test]
    fn cancel_removes_from_open_groups_and_ready_batches() {
        let t0 = Instant::now();
        let mut c = core(1_000, 2, 100);
        c.offer(t0, "a", req(1, t0, None)).unwrap();
        c.offer(t0, "a", req(2, t0, None)).unwrap(); // closes: ready
        c.offer(t0, "a", req(3, t0, None)).unwrap(); // open
        assert_eq!(c.cancel(3), Some(30));
        assert_eq!(c.open_groups(), 0, "an emptied group is gone");
        assert_eq!(c.cancel(1), Some(10));
        assert_eq!(c.cancel(1), None, "cancelled once");
        let b = c.pop_ready().unwrap();
        assert_eq!(payloads(&b), vec![20]);
        assert_eq!(c.cancel(2), None, "a popped request belongs to the scanner");
        assert!(c.is_empty());
        c.offer(t0, "a", req(4, t0, None)).unwrap();
        c.offer(t0, "a", req(5, t0, None)).unwrap();
        c.cancel(4);
        c.cancel(5);
        assert!(
            c.pop_ready().is_none(),
            "a batch with no request left is dropped"
        );
    }

    #[test]
    fn a_full_coalescer_rejects_and_a_cancel_makes_room() {
        let t0 = Instant::now();
        let mut c = core(1_000, 64, 2);
        c.offer(t0, "a", req(1, t0, None)).unwrap();
        c.offer(t0, "b", req(2, t0, None)).unwrap();
        let (why, back) = c.offer(t0, "a", req(3, t0, None)).unwrap_err();
        assert_eq!((why, back.payload), (Refusal::Full, 30));
        c.cancel(1);
        let (why, _) = c.offer(t0, "a", req(2, t0, None)).unwrap_err();
        assert_eq!(why, Refusal::DuplicateId, "ids are unique");
        c.offer(t0, "a", req(1, t0, None)).unwrap();
        c.cancel(2);
        c.offer(t0, "a", req(3, t0, None)).unwrap();
        assert_eq!(c.pending(), 2);
    }

    #[test]
    fn expired_requests_leave_before_their_batch_and_others_stay() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut c = core(10_000_000, 64, 100);
        c.offer(t0, "a", req(1, t0, Some(t0 + ms(5)))).unwrap();
        c.offer(t0, "a", req(2, t0, Some(t0 + ms(50)))).unwrap();
        c.offer(t0, "a", req(3, t0, None)).unwrap();
        assert_eq!(c.next_deadline(), Some(t0 + ms(5)));
        let expired = c.take_due(t0 + ms(5));
        assert_eq!(expired.iter().map(|r| r.id).collect::<Vec<_>>(), vec![1]);
        assert_eq!(c.next_deadline(), Some(t0 + ms(50)));
        c.close_oldest_for_free_slots(1);
        // A ready batch still loses requests whose deadline passes.
        let expired = c.take_due(t0 + ms(60));
        assert_eq!(expired.iter().map(|r| r.id).collect::<Vec<_>>(), vec![2]);
        let b = c.pop_ready().unwrap();
        assert_eq!(payloads(&b), vec![30]);
        assert_eq!(c.next_deadline(), None);
    }

    #[test]
    fn shut_down_drains_every_group_and_admits_nothing_more() {
        let t0 = Instant::now();
        let mut c = core(1_000_000, 64, 100);
        c.offer(t0, "a", req(1, t0, None)).unwrap();
        c.offer(t0, "b", req(2, t0, None)).unwrap();
        c.shut_down();
        assert!(c.is_shut_down());
        let (why, back) = c.offer(t0, "a", req(3, t0, None)).unwrap_err();
        assert_eq!((why, back.id), (Refusal::ShuttingDown, 3));
        assert_eq!(c.ready_len(), 2);
        while let Some(b) = c.pop_ready() {
            assert_eq!(b.reason, FlushReason::Shutdown);
        }
        assert!(c.is_empty());
    }

    #[test]
    fn the_start_split_releases_the_gone_and_expires_the_late() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let requests = vec![
            req(1, t0, None),
            req(2, t0, Some(t0 + ms(5))),
            req(3, t0, Some(t0 + ms(50))),
            req(4, t0, None),
        ];
        let split = split_at_start(requests, t0 + ms(5), |&p| p == 40);
        let ids = |v: &[Pending<u64>]| v.iter().map(|r| r.id).collect::<Vec<_>>();
        assert_eq!(ids(&split.live), vec![1, 3]);
        assert_eq!(ids(&split.expired), vec![2]);
        assert_eq!(split.released, 1);
    }
}
