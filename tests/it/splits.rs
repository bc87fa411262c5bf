//! Split-scoped searches: each split searched alone, merged per query with
//! `merge_split_hits`, equals the whole snapshot's search bit for bit —
//! with ties (repeated vectors and queries), offsets, deletions, indexed
//! (trained and delta) and unindexed fragments, filters, every mode.

use crate::common::*;
use rand::SeedableRng;
use shoal::{merge_split_hits, BatchQuery, Error, IndexKind, IndexParams, Metric};
use shoal::{FilterMode, Nprobes, PerQuery, PerQueryParams, SearchMode};

fn bits(hits: &[Vec<shoal::Hit>]) -> Vec<Vec<(u64, u32)>> {
    hits.iter()
        .map(|h| h.iter().map(|h| (h.row_id, h.distance.to_bits())).collect())
        .collect()
}

#[test]
fn merged_split_searches_equal_the_whole_search() {
    for metric in [Metric::L2, Metric::Cosine] {
        let dir = tempfile::tempdir().unwrap();
        let (mut ds, rows) = build(dir.path(), &[300, 200], 8, metric, 5);
        ds.create_index(None, IndexParams::new(IndexKind::IvfFlat, 8))
            .unwrap();
        // A delta segment over a third fragment, and a fourth left unindexed.
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        let more = make_rows(&mut rng, 500, 150, 8);
        ds.append([Ok(batch_of(&more, 8))]).unwrap();
        ds.optimize().unwrap();
        let last = make_rows(&mut rng, 650, 120, 8);
        ds.append([Ok(batch_of(&last, 8))]).unwrap();
        ds.delete("len = 5").unwrap();
        let splits = ds.splits(None).unwrap();
        assert_eq!(splits.len(), 3, "{splits:?}");
        assert_eq!(
            splits.iter().filter(|s| s.segment.is_some()).count(),
            2,
            "trained and delta segments"
        );
        let mut all = rows.clone();
        all.extend(more);
        let queries = random_queries(&mut rng, &all, 24, 8);
        let n = queries.len();
        let ks: Vec<usize> = (0..n).map(|i| 1 + i % 12).collect();
        let offsets: Vec<usize> = (0..n).map(|i| i % 4).collect();
        let filters = [
            None,
            Some("category = 'noun'"),
            Some("len > 3 OR category = 'verb'"),
        ];
        let each: Vec<PerQueryParams> = (0..n)
            .map(|i| PerQueryParams {
                filter: filters[i % 3].map(String::from),
                nprobes: Some(Nprobes::Fixed(3)),
                ..PerQueryParams::default()
            })
            .collect();
        for mode in [SearchMode::Shared, SearchMode::PerQuery, SearchMode::Exact] {
            let mut whole = BatchQuery::new(queries.clone(), 1)
                .ks(ks.clone())
                .offsets(offsets.clone())
                .each(each.clone());
            whole.shared.mode = mode;
            let want = ds.search_batch(&whole).unwrap();
            let parts: Vec<Vec<Vec<shoal::Hit>>> = splits
                .iter()
                .map(|s| {
                    let part = whole.clone().split(s.fragments.clone());
                    let got = ds.search_batch(&part).unwrap();
                    for (qi, hits) in got.hits.iter().enumerate() {
                        assert!(hits.len() <= ks[qi] + offsets[qi]);
                        assert!(hits
                            .iter()
                            .all(|h| s.fragments.contains(&((h.row_id >> 32) as u32))));
                    }
                    got.hits
                })
                .collect();
            let merged = merge_split_hits(parts, &ks, &offsets);
            assert_eq!(bits(&merged), bits(&want.hits), "{metric} {mode:?}");
            assert!(want.hits.iter().any(|h| !h.is_empty()));
        }
    }
}

#[test]
fn split_searches_refuse_what_would_not_merge() {
    let dir = tempfile::tempdir().unwrap();
    let (mut ds, rows) = build(dir.path(), &[200, 100], 8, Metric::L2, 3);
    ds.create_index(None, IndexParams::new(IndexKind::IvfFlat, 4))
        .unwrap();
    let q = vec![rows[0].vector.clone()];
    let refused = |b: BatchQuery, what: &str| match ds.search_batch(&b) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains(what), "{m}"),
        other => panic!("{what}: {other:?}"),
    };
    let base = BatchQuery::new(q.clone(), 5);
    refused(base.clone().split([0u32; 0]), "at least one fragment");
    refused(base.clone().split([7]), "fragment 7 is not in version");
    let mut post = base.clone().split([0]);
    post.own = PerQuery::All(PerQueryParams {
        filter: Some("len > 2".into()),
        filter_mode: FilterMode::Postfilter,
        ..PerQueryParams::default()
    });
    refused(post, "postfilter");
    let mut adaptive = base.clone().split([0]);
    adaptive.own = PerQuery::All(PerQueryParams {
        nprobes: Some(Nprobes::Adaptive { min: 1, max: 4 }),
        ..PerQueryParams::default()
    });
    refused(adaptive, "adaptive nprobes");
    let mut refine = base.clone().split([0]);
    refine.own = PerQuery::All(PerQueryParams {
        refine_factor: Some(2),
        ..PerQueryParams::default()
    });
    refused(refine, "refine");
    // A split search returns k + offset rows, the offset not applied.
    let mut paged = base.split([0, 1]);
    paged.offset = PerQuery::All(3);
    assert_eq!(ds.search_batch(&paged).unwrap().hits[0].len(), 8);
}
