//! Tests of the HNSW graph alone: recall against brute force, ties,
//! determinism across threads, the byte round trip.

use super::*;
use crate::demo::clustered_vectors;

fn l2(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

fn brute(
    data: &[f32],
    dim: usize,
    q: &[f32],
    k: usize,
    admit: &dyn Fn(u32) -> bool,
) -> Vec<(f32, u32)> {
    let mut all: Vec<Near> = data
        .chunks(dim)
        .enumerate()
        .filter(|(i, _)| admit(*i as u32))
        .map(|(i, x)| Near(l2(q, x), i as u32))
        .collect();
    all.sort();
    all.truncate(k);
    all.into_iter().map(|Near(d, n)| (d, n)).collect()
}

fn graph(data: &[f32], dim: usize, m: usize, seed: u64) -> HnswGraph {
    let row = |i: u32| &data[i as usize * dim..(i as usize + 1) * dim];
    HnswGraph::build(
        data.len() / dim,
        HnswParams {
            m,
            ef_construction: 100,
            seed,
        },
        &in_turn,
        &mut |_| {},
        |a, b| l2(row(a), row(b)),
    )
    .unwrap()
}

/// A walk's batch distance from a one-node distance.
fn each(one: impl Fn(u32) -> f32) -> impl Fn(&[u32], &mut [f32]) {
    move |nodes, out| {
        for (o, &n) in out.iter_mut().zip(nodes) {
            *o = one(n);
        }
    }
}

/// Runs every share on the calling thread.
fn in_turn(shares: usize, task: &(dyn Fn(usize) + Sync)) {
    (0..shares).for_each(task)
}

/// Runs the shares on `shares` threads.
fn on_threads(shares: usize, task: &(dyn Fn(usize) + Sync)) {
    std::thread::scope(|s| {
        for share in 0..shares {
            s.spawn(move || task(share));
        }
    });
}

/// Recall@10 against brute force on clustered data, with and without a
/// filter; the same seed builds the same graph; bad parameters refused.
#[test]
fn the_walk_finds_the_nearest_rows_and_depends_only_on_its_inputs() {
    let (n, dim) = (3_000, 16);
    // Queries held out from the same clusters as the rows.
    let mut data = clustered_vectors(n + 100, dim, 12, 3);
    let queries = data.split_off(n * dim);
    let g = graph(&data, dim, 12, 7);
    assert_eq!(g, graph(&data, dim, 12, 7), "seeded: the same graph");
    let row = |i: u32| &data[i as usize * dim..(i as usize + 1) * dim];
    let threaded = HnswGraph::build(
        n,
        HnswParams {
            m: 12,
            ef_construction: 100,
            seed: 7,
        },
        &on_threads,
        &mut |_| {},
        |a, b| l2(row(a), row(b)),
    )
    .unwrap();
    assert_eq!(g, threaded, "the same graph whatever runs the chunks");
    assert_eq!(
        HnswGraph::from_bytes(n, 12, &g.to_bytes()).unwrap(),
        g,
        "bytes round-trip"
    );
    assert!(g.levels.iter().any(|&l| l > 0), "upper layers exist");
    let odd = |i: u32| i % 2 == 1;
    for (admit, floor) in [(&(|_| true) as &dyn Fn(u32) -> bool, 0.95), (&odd, 0.9)] {
        let (mut hit, mut total) = (0, 0);
        for q in queries.chunks(dim) {
            let row = |i: u32| &data[i as usize * dim..(i as usize + 1) * dim];
            let got = g.search(each(|i| l2(q, row(i))), 10, 64, admit);
            assert!(got.iter().all(|&(_, i)| admit(i)), "only admitted rows");
            assert!(got
                .windows(2)
                .all(|w| Near(w[0].0, w[0].1) < Near(w[1].0, w[1].1)));
            let want = brute(&data, dim, q, 10, admit);
            hit += got.iter().filter(|g| want.contains(g)).count();
            total += want.len();
            // The same query again, after other walks: the same answer.
            assert_eq!(g.search(each(|i| l2(q, row(i))), 10, 64, admit), got);
        }
        let recall = hit as f64 / total as f64;
        assert!(recall >= floor, "recall@10 {recall}");
    }
    let bad = |m, ef| {
        HnswGraph::build(
            10,
            HnswParams {
                m,
                ef_construction: ef,
                seed: 1,
            },
            &in_turn,
            &mut |_| {},
            |_, _| 0.0,
        )
    };
    assert!(bad(1, 10).is_err());
    assert!(bad(8, 4).is_err());
    assert_eq!(bad(8, 8).unwrap().len(), 10);
}

/// Exact duplicates (ties) keep a fixed order by node; k above the
/// graph's size returns every node. (Ten copies of one vector, fewer
/// than a node's 2m links: more copies than that can trap a walk
/// among them; see the module doc.)
#[test]
fn ties_resolve_by_node_and_small_graphs_return_every_row() {
    let dim = 4;
    let mut data = clustered_vectors(200, dim, 4, 1);
    for r in (1..200).step_by(20) {
        let first = data[..dim].to_vec();
        data[r * dim..(r + 1) * dim].copy_from_slice(&first);
    }
    let g = graph(&data, dim, 6, 2);
    let q = data[..dim].to_vec();
    let row = |i: u32| &data[i as usize * dim..(i as usize + 1) * dim];
    let got = g.search(each(|i| l2(&q, row(i))), 20, 200, &|_| true);
    assert_eq!(got, brute(&data, dim, &q, 20, &|_| true));
    assert_eq!(got.iter().filter(|g| g.0 == 0.0).count(), 11, "every copy");
    let all = g.search(each(|i| l2(&q, row(i))), 500, 500, &|_| true);
    assert_eq!(all.len(), 200);
    assert!(HnswGraph::build(
        0,
        HnswParams {
            m: 4,
            ef_construction: 8,
            seed: 0
        },
        &in_turn,
        &mut |_| {},
        |_, _| 0.0
    )
    .unwrap()
    .search(each(|_| 0.0), 5, 5, &|_| true)
    .is_empty());
}

/// The build's distances with exact copies told apart from near rows.
struct WithCopies<'a> {
    data: &'a [f32],
    dim: usize,
}

impl NodeDistance for WithCopies<'_> {
    fn between(&self, a: u32, b: u32) -> f32 {
        let row = |i: u32| &self.data[i as usize * self.dim..(i as usize + 1) * self.dim];
        l2(row(a), row(b))
    }

    fn same(&self, a: u32, b: u32) -> bool {
        let row = |i: u32| &self.data[i as usize * self.dim..(i as usize + 1) * self.dim];
        row(a) == row(b)
    }
}

#[test]
fn many_exact_copies_do_not_trap_a_walk() {
    let (n, dim, m) = (300, 4, 6);
    let mut data = clustered_vectors(n, dim, 4, 5);
    // 100 copies of row 0, far more than a layer-0 list (2m = 12) holds.
    let first = data[..dim].to_vec();
    for r in (1..n).step_by(3) {
        data[r * dim..(r + 1) * dim].copy_from_slice(&first);
    }
    let copies = data.chunks(dim).filter(|r| *r == first.as_slice()).count();
    assert!(copies > 2 * m + 50, "{copies} copies");
    let g = HnswGraph::build(
        n,
        HnswParams {
            m,
            ef_construction: 40,
            seed: 9,
        },
        &in_turn,
        &mut |_| {},
        WithCopies { data: &data, dim },
    )
    .unwrap();
    let row = |i: u32| &data[i as usize * dim..(i as usize + 1) * dim];
    let is_copy = |i: u32| row(i) == first.as_slice();
    // From a copy, and from a row far from them: every other row is
    // reachable, and nearly every copy (a copy may end with no link in:
    // each list keeps at most half copies).
    for q in [first.clone(), row(n as u32 - 1).to_vec()] {
        let all = g.search(each(|i| l2(&q, row(i))), n, n, &|_| true);
        let others = all.iter().filter(|a| !is_copy(a.1)).count();
        assert_eq!(others, n - copies, "every row that is no copy is reachable");
        let reached = all.iter().filter(|a| is_copy(a.1)).count();
        assert!(
            reached * 10 >= copies * 9,
            "{reached} of {copies} copies reachable"
        );
    }
    // k copies for a copy; the nearest rows for a row away from them and
    // for a query next to them.
    let got = g.search(each(|i| l2(&first, row(i))), 10, 64, &|_| true);
    assert!(got.iter().all(|g| g.0 == 0.0) && got.len() == 10, "{got:?}");
    for q in [
        row(n as u32 - 1).to_vec(),
        first.iter().map(|x| x + 0.01).collect(),
    ] {
        let got = g.search(each(|i| l2(&q, row(i))), 10, 64, &|_| true);
        assert_eq!(got, brute(&data, dim, &q, 10, &|_| true));
    }
}
