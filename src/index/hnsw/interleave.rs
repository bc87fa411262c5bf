//! Several walks of one graph on one thread, in turns: while one walk's
//! next rows load (prefetched), the others score theirs, so that a
//! thread's memory latency is hidden across the queries of a batch.
//!
//! Each walk performs exactly the steps of [`HnswGraph::search`] — the
//! greedy descent, then on layer 0: take the nearest frontier node, mark
//! its unvisited neighbours, score them, keep the best `ef` — on its own
//! frontier, results and visited marks; only the order in which the walks
//! take their turns interleaves. Since a node's distance does not depend
//! on which other nodes are scored with it, every walk returns what it
//! returns alone (tested).

use super::{HnswGraph, Near, Visited, NONE};
use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// A walk's distances, split so that loading the rows of a node's
/// neighbours can start one turn before they are scored.
pub trait WalkDistances {
    /// Starts loading the rows of `nodes`.
    fn prefetch(&self, nodes: &[u32]);
    /// `out[i]` = the distance to `nodes[i]`, the same whatever the other
    /// nodes of the call (and whether they were prefetched).
    fn score(&self, nodes: &[u32], out: &mut [f32]);
}

/// One walk of [`HnswGraph::search_interleaved`].
pub struct Walk<'a> {
    /// Its distances.
    pub distances: &'a dyn WalkDistances,
    /// Results wanted.
    pub k: usize,
    /// Candidates kept on layer 0 (at least `k`).
    pub ef: usize,
    /// Which nodes may be returned (the others are walked through).
    pub admit: &'a dyn Fn(u32) -> bool,
}

/// A layer-0 walk between turns.
struct Layer0 {
    frontier: BinaryHeap<Reverse<Near>>,
    kept: BinaryHeap<Near>,
    /// Neighbours marked in the last turn, prefetched, not yet scored.
    fresh: Vec<u32>,
    dists: Vec<f32>,
    ef: usize,
    done: bool,
}

thread_local! {
    /// Visited marks for interleaved walks, one set per walk of a group,
    /// reused by the thread's next group.
    static MARKS: RefCell<Vec<Visited>> = const { RefCell::new(Vec::new()) };
}

impl HnswGraph {
    /// Runs `walks` in turns; result `i` is [`HnswGraph::search`] of walk
    /// `i` (with its distances' `prefetch` then `score` as `dist`).
    pub fn search_interleaved(&self, walks: &[Walk<'_>]) -> Vec<Vec<(f32, u32)>> {
        if self.is_empty() {
            return vec![Vec::new(); walks.len()];
        }
        MARKS.with(|marks| {
            let mut marks = marks.borrow_mut();
            while marks.len() < walks.len() {
                marks.push(Visited::new(0));
            }
            let mut states: Vec<Layer0> = Vec::with_capacity(walks.len());
            for (w, visited) in walks.iter().zip(marks.iter_mut()) {
                if visited.stamp.len() < self.len() {
                    *visited = Visited::new(self.len());
                }
                states.push(self.enter(w, visited));
            }
            loop {
                let mut running = false;
                for ((w, s), visited) in walks.iter().zip(&mut states).zip(marks.iter_mut()) {
                    if s.done {
                        continue;
                    }
                    running = true;
                    absorb(w, s);
                    self.expand(w, s, visited);
                }
                if !running {
                    break;
                }
            }
            walks
                .iter()
                .zip(states)
                .map(|(w, s)| {
                    let mut found = s.kept.into_sorted_vec();
                    found.truncate(w.k);
                    found.into_iter().map(|Near(d, n)| (d, n)).collect()
                })
                .collect()
        })
    }

    /// The descent to layer 1 and the start of the layer-0 walk (as
    /// `search` and `search_layer` begin), with the first node expanded.
    fn enter(&self, w: &Walk<'_>, visited: &mut Visited) -> Layer0 {
        let ef = w.ef.max(w.k);
        let mut s = Layer0 {
            frontier: BinaryHeap::new(),
            kept: BinaryHeap::with_capacity(ef + 1),
            fresh: Vec::with_capacity(2 * self.m),
            dists: vec![0.0f32; 2 * self.m],
            ef,
            done: w.k == 0,
        };
        if s.done {
            return s;
        }
        let dist = |nodes: &[u32], out: &mut [f32]| {
            w.distances.prefetch(nodes);
            w.distances.score(nodes, out);
        };
        let mut d = [0.0f32];
        dist(&[self.entry], &mut d);
        let mut at = Near(d[0], self.entry);
        for layer in (1..=self.top()).rev() {
            at = self.greedy(&dist, at, layer);
        }
        visited.clear();
        if visited.first_visit(at.1) {
            s.frontier.push(Reverse(at));
            if (w.admit)(at.1) {
                s.kept.push(at);
            }
        }
        while s.kept.len() > ef {
            s.kept.pop();
        }
        self.expand(w, &mut s, visited);
        s
    }

    /// Takes the nearest frontier node (or ends the walk), marks its
    /// unvisited neighbours and starts loading their rows.
    fn expand(&self, w: &Walk<'_>, s: &mut Layer0, visited: &mut Visited) {
        s.fresh.clear();
        let Some(Reverse(c)) = s.frontier.pop() else {
            s.done = true;
            return;
        };
        if s.kept.len() >= s.ef && s.kept.peek().is_some_and(|worst| c > *worst) {
            s.done = true;
            return;
        }
        for &o in self.links(c.1, 0) {
            if o == NONE {
                break;
            }
            if visited.first_visit(o) {
                s.fresh.push(o);
            }
        }
        w.distances.prefetch(&s.fresh);
    }
}

/// Scores the neighbours the last turn marked and keeps the best `ef`.
fn absorb(w: &Walk<'_>, s: &mut Layer0) {
    let n = s.fresh.len();
    w.distances.score(&s.fresh, &mut s.dists[..n]);
    for (&o, &d) in s.fresh.iter().zip(&s.dists) {
        let near = Near(d, o);
        let full = s.kept.len() >= s.ef;
        if full && s.kept.peek().is_some_and(|worst| near > *worst) {
            continue;
        }
        s.frontier.push(Reverse(near));
        if (w.admit)(o) {
            s.kept.push(near);
            if s.kept.len() > s.ef {
                s.kept.pop();
            }
        }
    }
    s.fresh.clear();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demo::clustered_vectors;
    use crate::index::hnsw::graph::HnswParams;

    struct L2<'a> {
        data: &'a [f32],
        dim: usize,
        q: &'a [f32],
    }

    impl WalkDistances for L2<'_> {
        fn prefetch(&self, _: &[u32]) {}
        fn score(&self, nodes: &[u32], out: &mut [f32]) {
            for (o, &i) in out.iter_mut().zip(nodes) {
                let row = &self.data[i as usize * self.dim..(i as usize + 1) * self.dim];
                *o = row.iter().zip(self.q).map(|(x, y)| (x - y) * (x - y)).sum();
            }
        }
    }

    #[test]
    fn interleaved_walks_return_what_each_walk_returns_alone() {
        let (n, dim) = (2_000, 8);
        let mut data = clustered_vectors(n + 12, dim, 10, 4);
        let queries = data.split_off(n * dim);
        // Coarse values make ties between distances common.
        let data: Vec<f32> = data.iter().map(|x| (x * 4.0).round()).collect();
        let row = |i: u32| &data[i as usize * dim..(i as usize + 1) * dim];
        let in_turn = |shares: usize, task: &(dyn Fn(usize) + Sync)| (0..shares).for_each(task);
        let l2 =
            |a: &[f32], b: &[f32]| -> f32 { a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum() };
        let g = HnswGraph::build(
            n,
            HnswParams {
                m: 6,
                ef_construction: 40,
                seed: 3,
            },
            &in_turn,
            &mut |_| {},
            |a, b| l2(row(a), row(b)),
        )
        .unwrap();
        let distances: Vec<L2<'_>> = queries
            .chunks_exact(dim)
            .map(|q| L2 {
                data: &data,
                dim,
                q,
            })
            .collect();
        let odd = |i: u32| i % 2 == 1;
        let all = |_: u32| true;
        let none = |_: u32| false;
        let admits: [&dyn Fn(u32) -> bool; 3] = [&all, &odd, &none];
        let walks: Vec<Walk<'_>> = distances
            .iter()
            .enumerate()
            .map(|(i, d)| Walk {
                distances: d,
                k: [0, 1, 5, 10][i % 4],
                ef: [3, 10, 20, 64][(i / 2) % 4],
                admit: admits[i % 3],
            })
            .collect();
        let mut answered = 0;
        for group in [1, 3, walks.len()] {
            for chunk in walks.chunks(group) {
                let together = g.search_interleaved(chunk);
                for (w, got) in chunk.iter().zip(together) {
                    let alone = g.search(
                        |nodes, out| w.distances.score(nodes, out),
                        w.k,
                        w.ef,
                        w.admit,
                    );
                    assert_eq!(got, alone, "k {} ef {} group {group}", w.k, w.ef);
                    answered += usize::from(!alone.is_empty());
                }
            }
        }
        assert!(answered > walks.len(), "most walks return rows: {answered}");
    }
}
