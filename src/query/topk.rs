//! Bounded top-k selection with shoal's one tie rule: order by
//! `(distance, row_id)` ascending, distances compared with `total_cmp`.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// A scored row: the unit every search path produces.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate {
    /// Distance under the query's metric (smaller is nearer).
    pub distance: f32,
    /// Stable row id: `fragment_id << 32 | offset`.
    pub row_id: u64,
}

impl Eq for Candidate {}

impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> Ordering {
        self.distance
            .total_cmp(&other.distance)
            .then(self.row_id.cmp(&other.row_id))
    }
}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Keeps the `capacity` best candidates seen so far.
#[derive(Clone, Debug)]
pub struct TopK {
    capacity: usize,
    heap: BinaryHeap<Candidate>,
}

impl TopK {
    /// A heap that keeps at most `capacity` candidates.
    pub fn new(capacity: usize) -> Self {
        TopK {
            capacity,
            heap: BinaryHeap::with_capacity(capacity.min(4096) + 1),
        }
    }

    /// The distance a new candidate must not exceed to have a chance of
    /// entering; `f32::INFINITY`-like (None) while the heap is not full.
    #[inline]
    pub fn threshold(&self) -> Option<f32> {
        if self.heap.len() < self.capacity {
            None
        } else {
            self.heap.peek().map(|c| c.distance)
        }
    }

    /// Quick test before building a candidate: false means `distance`
    /// certainly cannot enter.
    #[inline]
    pub fn may_accept(&self, distance: f32) -> bool {
        match self.threshold() {
            None => self.capacity > 0,
            Some(worst) => distance.total_cmp(&worst) != Ordering::Greater,
        }
    }

    /// Offers a candidate; keeps it if it is among the best `capacity`.
    #[inline]
    pub fn push(&mut self, c: Candidate) {
        if self.heap.len() < self.capacity {
            self.heap.push(c);
        } else if let Some(mut worst) = self.heap.peek_mut() {
            if c < *worst {
                *worst = c;
            }
        }
    }

    /// Candidates kept now.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Merges another heap's candidates into this one.
    pub fn merge(&mut self, other: TopK) {
        for c in other.heap {
            self.push(c);
        }
    }

    /// The kept candidates, best first.
    pub fn into_sorted_vec(self) -> Vec<Candidate> {
        self.heap.into_sorted_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn keeps_exactly_the_best_in_tie_order(
            items in proptest::collection::vec((0u8..6, 0u64..50), 0..80),
            cap in 0usize..12,
        ) {
            let cands: Vec<Candidate> = items.iter()
                .map(|&(d, r)| Candidate { distance: d as f32 * 0.5, row_id: r }).collect();
            let mut top = TopK::new(cap);
            for c in &cands { top.push(*c); }
            let mut sorted = cands.clone();
            sorted.sort();
            sorted.truncate(cap);
            prop_assert_eq!(top.into_sorted_vec(), sorted);
        }
    }
}
