//! The HNSW graph (Malkov & Yashunin, 2016) alone, over any distance:
//! its build, its walk and its bytes on disk. The segment around it (rows,
//! vectors, files, loading) is [`super::segment`].
//!
//! * Nodes are `0..n` (a segment's rows in order). Node `i` gets a top
//!   layer `⌊−ln U · m_L⌋` (`m_L = 1 / ln m`) from a generator seeded by
//!   the build's seed and `i`, so a graph depends only on its inputs.
//! * Layer 0 keeps up to `2m` neighbours a node, upper layers `m`. A new
//!   node's neighbours are chosen from the `ef_construction` nearest found
//!   on each layer by the paper's heuristic (a candidate is kept unless a
//!   kept neighbour is closer to it than the new node is), and links back
//!   are pruned by the same rule when a list overflows.
//! * A search descends greedily to layer 1, then keeps the `ef` nearest on
//!   layer 0. Rows a query may not return (its filter, deletions) are still
//!   walked through but never enter its results.
//! * Every comparison orders by `(distance, node)`, so ties resolve the
//!   same way in every walk: a query's answer depends on the graph and the
//!   query alone, never on what else runs (batch invariance). While
//!   building, equal distances are ordered by a hash of the pair instead,
//!   so that copies of one vector do not all link to the same few.
//! * Exact copies of one vector (told apart by the build's distance,
//!   [`NodeDistance::same`]) take at most half of a list, so that a walk
//!   that enters many copies can leave them (without the cap, 100 copies
//!   among 300 rows left 97 rows reachable: tested).

use rand::{Rng, SeedableRng};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Nodes a build adds one at a time before it adds them in chunks.
pub const SEQUENTIAL_NODES: usize = 1024;
/// Nodes a build adds per chunk (their searches run in parallel).
pub const CHUNK_NODES: usize = 256;

/// Distances between the graph's nodes, as a build needs them. Any
/// `Fn(u32, u32) -> f32 + Sync` is one.
pub trait NodeDistance: Sync {
    /// The distance of `a` and `b` (symmetric).
    fn between(&self, a: u32, b: u32) -> f32;

    /// `out[i] = between(a, nodes[i])`, each the very value `between`
    /// gives (a batch only lets the rows load side by side).
    fn between_many(&self, a: u32, nodes: &[u32], out: &mut [f32]) {
        for (o, &b) in out.iter_mut().zip(nodes) {
            *o = self.between(a, b);
        }
    }

    /// Whether `a` and `b` are exact copies of one row (the build keeps
    /// few copies in one list; see [`select`]). By default none are.
    fn same(&self, _a: u32, _b: u32) -> bool {
        false
    }
}

impl<F: Fn(u32, u32) -> f32 + Sync> NodeDistance for F {
    fn between(&self, a: u32, b: u32) -> f32 {
        self(a, b)
    }
}

/// Runs `task(share)` for every share of `0..shares`, on threads or not,
/// and returns when all have run (how a build's chunk is shared out).
pub type Parallel<'a> = &'a dyn Fn(usize, &(dyn Fn(usize) + Sync));

/// Marks an empty neighbour slot.
const NONE: u32 = u32::MAX;
/// Highest layer a node may get (a bound on a corrupt or adversarial seed's
/// effect; 16 layers of m ≥ 4 hold far more than 2^32 nodes).
const MAX_LEVEL: usize = 16;

/// How a graph is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HnswParams {
    /// Neighbours a node keeps on the upper layers (twice that on layer 0).
    pub m: usize,
    /// Candidates kept while a node's neighbours are searched for.
    pub ef_construction: usize,
    /// Seed of the layer draw.
    pub seed: u64,
}

/// A (distance, node) pair, ordered by distance, then node.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Near(f32, u32);

impl Eq for Near {}

impl PartialOrd for Near {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Near {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0).then(self.1.cmp(&other.1))
    }
}

/// Which nodes a walk has seen: a generation stamp per node, so clearing
/// it between walks costs nothing.
struct Visited {
    stamp: Vec<u32>,
    now: u32,
}

impl Visited {
    fn new(n: usize) -> Visited {
        Visited {
            stamp: vec![0; n],
            now: 0,
        }
    }

    fn clear(&mut self) {
        self.now = self.now.wrapping_add(1);
        if self.now == 0 {
            self.stamp.fill(0);
            self.now = 1;
        }
    }

    /// Marks `node`; true when it was not marked in this walk yet.
    fn first_visit(&mut self, node: u32) -> bool {
        let s = &mut self.stamp[node as usize];
        let first = *s != self.now;
        *s = self.now;
        first
    }
}

/// An HNSW graph over nodes `0..len()`.
#[derive(Clone, Debug, PartialEq)]
pub struct HnswGraph {
    m: usize,
    /// Each node's top layer.
    levels: Vec<u8>,
    /// Layer 0: `2m` slots a node.
    base: Vec<u32>,
    /// Layers 1..: node `i` with a top layer `l ≥ 1` owns `l × m` slots
    /// from `upper_start[i]`, layer `j` at `(j − 1) × m`.
    upper_start: Vec<usize>,
    upper: Vec<u32>,
    /// The node the walks start from (a node of the top layer).
    entry: u32,
}

impl HnswGraph {
    /// Builds the graph of `n` nodes, `between(a, b)` their distance
    /// (symmetric). Fails on `m < 2` or `ef_construction < m`.
    ///
    /// After the first [`SEQUENTIAL_NODES`], nodes are added in chunks of
    /// [`CHUNK_NODES`]: each chunk's neighbour searches run in parallel
    /// against the graph as it stood before the chunk (`parallel(shares,
    /// task)` runs `task(0..shares)`, on threads or not), then its nodes
    /// are linked one by one, each also offered the chunk's earlier nodes
    /// as candidates. The chunks are fixed, so the graph depends on its
    /// inputs alone, not on how many threads ran. `progress(done)` is
    /// called after each chunk.
    pub fn build(
        n: usize,
        params: HnswParams,
        parallel: Parallel<'_>,
        progress: &mut dyn FnMut(usize),
        between: impl NodeDistance,
    ) -> Result<HnswGraph, String> {
        let HnswParams {
            m,
            ef_construction,
            seed,
        } = params;
        if m < 2 {
            return Err(format!("hnsw m must be at least 2, got {m}"));
        }
        if ef_construction < m {
            return Err(format!(
                "hnsw ef_construction ({ef_construction}) must be at least m ({m})"
            ));
        }
        if n >= NONE as usize {
            return Err(format!("hnsw holds fewer than 2^32 - 1 nodes, got {n}"));
        }
        let ml = 1.0 / (m as f64).ln();
        let levels: Vec<u8> = (0..n)
            .map(|i| {
                let mut rng = rand::rngs::StdRng::seed_from_u64(
                    seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                );
                let u: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
                ((-u.ln() * ml).floor() as usize).min(MAX_LEVEL) as u8
            })
            .collect();
        let mut upper_start = Vec::with_capacity(n);
        let mut slots = 0usize;
        for &l in &levels {
            upper_start.push(slots);
            slots += l as usize * m;
        }
        let mut graph = HnswGraph {
            m,
            base: vec![NONE; n * 2 * m],
            upper_start,
            upper: vec![NONE; slots],
            levels,
            entry: 0,
        };
        let mut next = 1usize;
        while next < n {
            let size = if next < SEQUENTIAL_NODES {
                1
            } else {
                CHUNK_NODES
            };
            let chunk = next..(next + size).min(n);
            // 1. Each node's neighbours, chosen from what a search of the
            // graph finds and from the chunk's earlier nodes (read only).
            let chosen = graph.in_shares(chunk.len(), parallel, |i| {
                let node = (chunk.start + i) as u32;
                let found = graph.find(node, ef_construction, &between);
                graph.choose(node, found, chunk.start as u32, &between)
            });
            // 2. Their own links, in node order; the links back to them
            // are collected by the node they go to.
            let mut back: Vec<(u32, u8, u32, f32)> = Vec::new();
            for (i, lists) in chosen.into_iter().enumerate() {
                let node = (chunk.start + i) as u32;
                let top = graph.top();
                for (layer, list) in lists.iter().enumerate() {
                    for (slot, near) in graph.links_mut(node, layer).iter_mut().zip(list) {
                        *slot = near.1;
                    }
                    back.extend(list.iter().map(|near| (near.1, layer as u8, node, near.0)));
                }
                if lists.len() > top + 1 {
                    graph.entry = node;
                }
            }
            // 3. Each (node, layer)'s new list with its links back added in
            // node order (pruned by the heuristic when full), computed in
            // parallel (read only), then written.
            back.sort_by_key(|&(to, layer, from, _)| (to, layer, from));
            let groups: Vec<&[(u32, u8, u32, f32)]> =
                back.chunk_by(|a, b| (a.0, a.1) == (b.0, b.1)).collect();
            let lists = graph.in_shares(groups.len(), parallel, |g| {
                let (to, layer) = (groups[g][0].0, groups[g][0].1 as usize);
                let mut list = graph.links(to, layer).to_vec();
                for &(_, _, from, distance) in groups[g] {
                    list = graph.linked_back(to, list, from, distance, layer, &between);
                }
                list
            });
            for (group, list) in groups.iter().zip(lists) {
                let (to, layer) = (group[0].0, group[0].1 as usize);
                graph.links_mut(to, layer).copy_from_slice(&list);
            }
            next = chunk.end;
            progress(next);
        }
        Ok(graph)
    }

    /// Nodes in the graph.
    pub fn len(&self) -> usize {
        self.levels.len()
    }

    /// True for a graph of no nodes.
    pub fn is_empty(&self) -> bool {
        self.levels.is_empty()
    }

    /// Where `node`'s slots on `layer` lie: in `base` (layer 0) or `upper`.
    fn slots(&self, node: u32, layer: usize) -> std::ops::Range<usize> {
        if layer == 0 {
            let w = 2 * self.m;
            node as usize * w..(node as usize + 1) * w
        } else {
            let at = self.upper_start[node as usize] + (layer - 1) * self.m;
            at..at + self.m
        }
    }

    /// The neighbour slots of `node` on `layer` (empty slots hold `NONE`).
    fn links(&self, node: u32, layer: usize) -> &[u32] {
        let slots = self.slots(node, layer);
        if layer == 0 {
            &self.base[slots]
        } else {
            &self.upper[slots]
        }
    }

    fn links_mut(&mut self, node: u32, layer: usize) -> &mut [u32] {
        let slots = self.slots(node, layer);
        if layer == 0 {
            &mut self.base[slots]
        } else {
            &mut self.upper[slots]
        }
    }

    fn top(&self) -> usize {
        self.levels[self.entry as usize] as usize
    }

    /// The candidates for `node`'s neighbours on each of its layers that
    /// the graph has (index = layer), the `ef` nearest found there; the
    /// graph is only read.
    fn find(&self, node: u32, ef: usize, between: &impl NodeDistance) -> Vec<Vec<Near>> {
        let level = self.levels[node as usize] as usize;
        let top = self.top();
        let to_node = |others: &[u32], out: &mut [f32]| between.between_many(node, others, out);
        let mut nearest = Near(between.between(node, self.entry), self.entry);
        for layer in (level + 1..=top).rev() {
            nearest = self.greedy(&to_node, nearest, layer);
        }
        let mut out = vec![Vec::new(); level.min(top) + 1];
        let mut entries = vec![nearest];
        WALK_SCRATCH.with(|scratch| {
            let mut visited = scratch.borrow_mut();
            if visited.stamp.len() < self.len() {
                *visited = Visited::new(self.len());
            }
            for layer in (0..=level.min(top)).rev() {
                let found =
                    self.search_layer(&to_node, &entries, ef, layer, &mut visited, &|_| true);
                entries.clone_from(&found);
                out[layer] = found;
            }
        });
        out
    }

    /// `task(0..count)` in up to 64 shares run by `parallel`, results in
    /// order; a result a share did not give (a failed helper) is computed
    /// here.
    fn in_shares<T: Send + Sync>(
        &self,
        count: usize,
        parallel: Parallel<'_>,
        task: impl Fn(usize) -> T + Sync,
    ) -> Vec<T> {
        let shares = count.min(64);
        let out: Vec<std::sync::OnceLock<T>> =
            (0..count).map(|_| std::sync::OnceLock::new()).collect();
        if shares > 1 {
            let (out, task) = (&out, &task);
            parallel(shares, &move |share: usize| {
                for i in (share..count).step_by(shares) {
                    let _ = out[i].set(task(i));
                }
            });
        }
        out.into_iter()
            .enumerate()
            .map(|(i, slot)| slot.into_inner().unwrap_or_else(|| task(i)))
            .collect()
    }

    /// `node`'s neighbours on each of its layers (index = layer), chosen by
    /// the heuristic from `found` (from [`HnswGraph::find`]) and the nodes
    /// `peers_from..node` of its chunk.
    fn choose(
        &self,
        node: u32,
        mut found: Vec<Vec<Near>>,
        peers_from: u32,
        between: &impl NodeDistance,
    ) -> Vec<Vec<Near>> {
        let level = self.levels[node as usize] as usize;
        found.resize(level + 1, Vec::new());
        found
            .into_iter()
            .enumerate()
            .map(|(layer, mut candidates)| {
                // `found` holds nodes before the chunk only.
                for peer in peers_from..node {
                    if self.levels[peer as usize] as usize >= layer {
                        candidates.push(Near(between.between(node, peer), peer));
                    }
                }
                candidates.sort();
                let keep = if layer == 0 { 2 * self.m } else { self.m };
                select(node, &spread_ties(node, candidates), keep, between)
            })
            .collect()
    }

    /// `to`'s `list` on `layer` with `node` (at `distance`) added: in a
    /// free slot, or by pruning the full list and `node` by the heuristic.
    fn linked_back(
        &self,
        to: u32,
        mut list: Vec<u32>,
        node: u32,
        distance: f32,
        layer: usize,
        between: &impl NodeDistance,
    ) -> Vec<u32> {
        if let Some(free) = list.iter_mut().find(|s| **s == NONE) {
            *free = node;
            return list;
        }
        let mut all: Vec<Near> = list
            .iter()
            .map(|&o| Near(between.between(to, o), o))
            .chain(std::iter::once(Near(distance, node)))
            .collect();
        all.sort();
        let keep = if layer == 0 { 2 * self.m } else { self.m };
        let chosen = select(to, &spread_ties(to, all), keep, between);
        list.fill(NONE);
        for (slot, near) in list.iter_mut().zip(&chosen) {
            *slot = near.1;
        }
        list
    }

    /// The nearest node reachable by steps to nearer neighbours on `layer`.
    fn greedy(&self, dist: &impl Fn(&[u32], &mut [f32]), mut at: Near, layer: usize) -> Near {
        let mut dists = vec![0.0f32; 2 * self.m];
        loop {
            let links = self.links(at.1, layer);
            let n = links.iter().position(|&o| o == NONE).unwrap_or(links.len());
            dist(&links[..n], &mut dists[..n]);
            let mut moved = false;
            for (&o, &d) in links[..n].iter().zip(&dists) {
                let near = Near(d, o);
                if near < at {
                    at = near;
                    moved = true;
                }
            }
            if !moved {
                return at;
            }
        }
    }

    /// The `ef` nearest nodes `admit` allows, found on `layer` from
    /// `entries`, ascending. Refused nodes are walked through, not kept.
    /// A node's unvisited neighbours are scored in one `dist` call (so
    /// that their rows load side by side), then taken in list order.
    fn search_layer(
        &self,
        dist: &impl Fn(&[u32], &mut [f32]),
        entries: &[Near],
        ef: usize,
        layer: usize,
        visited: &mut Visited,
        admit: &dyn Fn(u32) -> bool,
    ) -> Vec<Near> {
        visited.clear();
        let mut frontier: BinaryHeap<Reverse<Near>> = BinaryHeap::new();
        let mut kept: BinaryHeap<Near> = BinaryHeap::with_capacity(ef + 1);
        for &e in entries {
            if visited.first_visit(e.1) {
                frontier.push(Reverse(e));
                if admit(e.1) {
                    kept.push(e);
                }
            }
        }
        while kept.len() > ef {
            kept.pop();
        }
        let mut fresh: Vec<u32> = Vec::with_capacity(2 * self.m);
        let mut dists = vec![0.0f32; 2 * self.m];
        while let Some(Reverse(c)) = frontier.pop() {
            if kept.len() >= ef && kept.peek().is_some_and(|worst| c > *worst) {
                break;
            }
            fresh.clear();
            for &o in self.links(c.1, layer) {
                if o == NONE {
                    break;
                }
                if visited.first_visit(o) {
                    fresh.push(o);
                }
            }
            dist(&fresh, &mut dists[..fresh.len()]);
            for (&o, &d) in fresh.iter().zip(&dists) {
                let near = Near(d, o);
                let full = kept.len() >= ef;
                if full && kept.peek().is_some_and(|worst| near > *worst) {
                    continue;
                }
                frontier.push(Reverse(near));
                if admit(o) {
                    kept.push(near);
                    if kept.len() > ef {
                        kept.pop();
                    }
                }
            }
        }
        kept.into_sorted_vec()
    }

    /// The `k` nearest nodes that `admit` allows, searching `ef ≥ k`
    /// candidates on layer 0; ascending by (distance, node).
    /// `dist(nodes, out)` writes the query's distance to each of `nodes`
    /// (a node's distance must not depend on the others in the call).
    pub fn search(
        &self,
        dist: impl Fn(&[u32], &mut [f32]),
        k: usize,
        ef: usize,
        admit: &dyn Fn(u32) -> bool,
    ) -> Vec<(f32, u32)> {
        if self.is_empty() || k == 0 {
            return Vec::new();
        }
        let mut d = [0.0f32];
        dist(&[self.entry], &mut d);
        let mut at = Near(d[0], self.entry);
        for layer in (1..=self.top()).rev() {
            at = self.greedy(&dist, at, layer);
        }
        let mut found = WALK_SCRATCH.with(|scratch| {
            let mut visited = scratch.borrow_mut();
            if visited.stamp.len() < self.len() {
                *visited = Visited::new(self.len());
            }
            self.search_layer(&dist, &[at], ef.max(k), 0, &mut visited, admit)
        });
        found.truncate(k);
        found.into_iter().map(|Near(d, n)| (d, n)).collect()
    }

    /// Neighbours a node keeps on the upper layers.
    pub fn m(&self) -> usize {
        self.m
    }

    /// The graph's bytes: the entry node, each node's top layer, then
    /// every slot of layer 0 and of the upper layers, little-endian.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + self.len() + 4 * (self.base.len() + self.upper.len()));
        out.extend_from_slice(&self.entry.to_le_bytes());
        out.extend_from_slice(&self.levels);
        for slot in self.base.iter().chain(&self.upper) {
            out.extend_from_slice(&slot.to_le_bytes());
        }
        out
    }

    /// A graph of `n` nodes and `m` from [`HnswGraph::to_bytes`]; every
    /// field is checked (layers, lengths, links inside the graph, the
    /// entry on the top layer), so that no byte can send a walk out of
    /// bounds.
    pub fn from_bytes(n: usize, m: usize, bytes: &[u8]) -> Result<HnswGraph, String> {
        if m < 2 || n >= NONE as usize {
            return Err(format!(
                "{n} nodes with m {m} is not a graph this build makes"
            ));
        }
        if bytes.len() < 4 + n {
            return Err("the graph is shorter than its layers".into());
        }
        let entry = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        let levels = bytes[4..4 + n].to_vec();
        if levels.iter().any(|&l| l as usize > MAX_LEVEL) {
            return Err("a node's layer is above the highest this build draws".into());
        }
        let mut upper_start = Vec::with_capacity(n);
        let mut slots = 0usize;
        for &l in &levels {
            upper_start.push(slots);
            slots += l as usize * m;
        }
        let base_len = n * 2 * m;
        let rest = &bytes[4 + n..];
        if rest.len() != 4 * (base_len + slots) {
            return Err(format!(
                "the graph has {} bytes of links, its layers need {}",
                rest.len(),
                4 * (base_len + slots)
            ));
        }
        let all: Vec<u32> = rest
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        if all.iter().any(|&o| o != NONE && o as usize >= n) {
            return Err("a link points outside the graph".into());
        }
        let (base, upper) = all.split_at(base_len);
        let graph = HnswGraph {
            m,
            levels,
            base: base.to_vec(),
            upper_start,
            upper: upper.to_vec(),
            entry,
        };
        if n > 0 {
            let top = graph.levels.iter().copied().max().unwrap_or(0);
            if entry as usize >= n || graph.levels[entry as usize] != top {
                return Err("the entry node is not on the top layer".into());
            }
        } else if entry != 0 {
            return Err("an empty graph has no entry node".into());
        }
        Ok(graph)
    }

    /// Bytes held in memory.
    pub fn size_bytes(&self) -> usize {
        self.levels.len() + 8 * self.upper_start.len() + 4 * (self.base.len() + self.upper.len())
    }
}

thread_local! {
    /// Each thread's visited marks, reused by its walks (a walk clears
    /// them by moving to the next generation, not by writing them).
    static WALK_SCRATCH: std::cell::RefCell<Visited> = std::cell::RefCell::new(Visited::new(0));
}

/// `candidates` of `node`'s list (ascending by distance), with each run of
/// equal distances reordered by a hash of (node, candidate) instead of by
/// candidate: exact duplicates would otherwise all link to the same few
/// lowest-numbered copies, and a walk that enters them could reach no
/// other copy. Deterministic, so the graph still depends on its inputs
/// alone; results keep their (distance, node) order.
fn spread_ties(node: u32, mut candidates: Vec<Near>) -> Vec<Near> {
    let mix = |c: u32| {
        let x = (u64::from(node) << 32 | u64::from(c)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        x ^ (x >> 29)
    };
    candidates.sort_by(|a, b| a.0.total_cmp(&b.0).then(mix(a.1).cmp(&mix(b.1))));
    candidates
}

/// The paper's neighbour heuristic for `node`'s list: from `candidates`
/// (ascending by distance to the node), keep each one that no kept
/// neighbour is strictly nearer to than the node is, up to `keep`; fill up
/// with the nearest skipped ones when fewer pass (so that sparse regions
/// stay connected).
///
/// Exact copies of `node` ([`NodeDistance::same`]): at most half the list
/// goes through the heuristic, and the fill takes rows that copy a kept
/// one last, so copies fill the rest only when nothing else is left: a
/// list of copies only would let a walk that enters many copies of one
/// vector reach nothing else.
fn select(node: u32, candidates: &[Near], keep: usize, between: &impl NodeDistance) -> Vec<Near> {
    let max_copies = (keep / 2).max(1);
    let mut chosen: Vec<Near> = Vec::with_capacity(keep);
    let mut skipped = Vec::new();
    let mut extra_copies = Vec::new();
    let mut copies = 0;
    for &c in candidates {
        if chosen.len() == keep {
            break;
        }
        if between.same(node, c.1) {
            if copies == max_copies {
                extra_copies.push(c);
                continue;
            }
            copies += 1;
        }
        if chosen.iter().all(|s| between.between(c.1, s.1) >= c.0) {
            chosen.push(c);
        } else {
            skipped.push(c);
        }
    }
    // The fill: skipped rows that copy no kept one first.
    let mut repeats = Vec::new();
    for c in skipped {
        if chosen.len() == keep {
            break;
        }
        if chosen.iter().any(|s| between.same(c.1, s.1)) {
            repeats.push(c);
        } else {
            chosen.push(c);
        }
    }
    for c in repeats.into_iter().chain(extra_copies) {
        if chosen.len() == keep {
            break;
        }
        chosen.push(c);
    }
    chosen
}

#[cfg(test)]
#[path = "graph_tests.rs"]
mod tests;
