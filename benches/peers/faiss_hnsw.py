"""FAISS IndexHNSWFlat and hnswlib on the same files as `shoal bench --mode
ivf --types hnsw`: build time, then recall@k and QPS per efSearch, one
query per call on one thread (the issue-45 comparison).

    python benches/peers/faiss_hnsw.py --base base.fvecs --queries query.fvecs \
        --groundtruth groundtruth.ivecs --metric cosine --ef 16,32,64 [--hnswlib]
"""
import argparse
import time

import faiss
import numpy as np

from faiss_ivf import load, recall


def timed_search(search, xq, k, warmup=50):
    for q in xq[:warmup]:
        search(q[None, :], k)
    t = time.perf_counter()
    found = [search(q[None, :], k)[0] for q in xq]
    return found, len(xq) / (time.perf_counter() - t)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--base", required=True)
    p.add_argument("--queries", required=True)
    p.add_argument("--groundtruth", required=True)
    p.add_argument("--metric", default="l2", choices=["l2", "cosine"])
    p.add_argument("--m", type=int, default=16)
    p.add_argument("--ef-construction", type=int, default=200)
    p.add_argument("--ef", default="16,24,32,48,64,96,128")
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--build-threads", type=int, default=2)
    p.add_argument("--hnswlib", action="store_true", help="also run hnswlib")
    a = p.parse_args()
    xb, xq, gt, mt = load(a.base, a.queries, a.groundtruth, a.metric)
    efs = [int(e) for e in a.ef.split(",")]

    faiss.omp_set_num_threads(a.build_threads)
    index = faiss.IndexHNSWFlat(xb.shape[1], a.m, mt)
    index.hnsw.efConstruction = a.ef_construction
    t = time.perf_counter()
    index.add(xb)
    print(f"faiss build {time.perf_counter() - t:.2f} s")
    faiss.omp_set_num_threads(1)
    for ef in efs:
        index.hnsw.efSearch = ef
        found, qps = timed_search(lambda q, k: index.search(q, k)[1], xq, a.k)
        print(f"faiss ef {ef}: recall {recall(found, gt, a.k):.3f}, {qps:.0f} QPS")

    if a.hnswlib:
        import hnswlib

        space = "l2" if a.metric == "l2" else "ip"
        h = hnswlib.Index(space=space, dim=xb.shape[1])
        h.init_index(max_elements=len(xb), ef_construction=a.ef_construction, M=a.m)
        h.set_num_threads(a.build_threads)
        t = time.perf_counter()
        h.add_items(xb)
        print(f"hnswlib build {time.perf_counter() - t:.2f} s")
        h.set_num_threads(1)
        for ef in efs:
            h.set_ef(ef)
            found, qps = timed_search(lambda q, k: h.knn_query(q, k)[0], xq, a.k)
            print(f"hnswlib ef {ef}: recall {recall(found, gt, a.k):.3f}, {qps:.0f} QPS")


if __name__ == "__main__":
    main()
