"""FAISS IVF indexes on the same files as `shoal bench --mode ivf`: build time,
recall@k and QPS (one query per call, and batches) per nprobes.

Synthetic sets: run `shoal bench --mode ivf ... --export DIR` first, then point
this script at DIR/base.fvecs, DIR/query.fvecs, DIR/groundtruth.ivecs."""
import argparse
import time

import faiss
import numpy as np


def read_fvecs(path):
    raw = np.fromfile(path, dtype="int32")
    d = raw[0]
    return raw.reshape(-1, d + 1)[:, 1:].copy().view("float32")


def read_ivecs(path):
    raw = np.fromfile(path, dtype="int32")
    d = raw[0]
    return raw.reshape(-1, d + 1)[:, 1:].copy()


def recall(found, truth, k):
    hits = sum(len(set(f[:k]) & set(t[:k])) for f, t in zip(found, truth))
    return hits / (k * len(found))


def load(base, queries, groundtruth, metric):
    """Base and query vectors (normalised for cosine), ground truth, and
    the FAISS metric that scores them."""
    xb, xq, gt = read_fvecs(base), read_fvecs(queries), read_ivecs(groundtruth)
    if metric.startswith("cosine"):
        faiss.normalize_L2(xb)
        faiss.normalize_L2(xq)
    # FAISS's two forms for cosine: inner product on the normalised vectors
    # (`cosine`), or L2 on them (`cosine-l2`; the same order for exact
    # search, not for PQ's reconstructions).
    mt = faiss.METRIC_L2 if metric in ("l2", "cosine-l2") else faiss.METRIC_INNER_PRODUCT
    return xb, xq, gt, mt


def make_index(kind, d, partitions, sub_vectors, mt, bits=4):
    """An untrained FAISS IVF index of `kind` (ivf_flat, ivf_pq, ivf_sq, or
    ivf_rq: IndexIVFRaBitQ with `bits` bits per dimension, FAISS's default
    4-bit query quantization)."""
    quantizer = faiss.IndexFlatL2(d) if mt == faiss.METRIC_L2 else faiss.IndexFlatIP(d)
    if kind == "ivf_rq":
        return faiss.IndexIVFRaBitQ(quantizer, d, partitions, mt, True, bits)
    if kind == "ivf_flat":
        return faiss.IndexIVFFlat(quantizer, d, partitions, mt)
    if kind == "ivf_pq":
        return faiss.IndexIVFPQ(quantizer, d, partitions, sub_vectors, 8, mt)
    return faiss.IndexIVFScalarQuantizer(quantizer, d, partitions, faiss.ScalarQuantizer.QT_8bit, mt)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--base", required=True)
    p.add_argument("--queries", required=True)
    p.add_argument("--groundtruth", required=True)
    p.add_argument("--metric", choices=["l2", "cosine", "cosine-l2", "dot"], default="l2")
    p.add_argument("--partitions", type=int, default=256)
    p.add_argument("--sub-vectors", type=int, default=32)
    p.add_argument("--types", default="ivf_flat,ivf_pq,ivf_sq")
    p.add_argument("--nprobes", default="4,8,16,32")
    p.add_argument("--batch-sizes", default="1")
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    faiss.omp_set_num_threads(a.threads)
    xb, xq, gt, mt = load(a.base, a.queries, a.groundtruth, a.metric)
    d = xb.shape[1]
    print(f"FAISS {faiss.__version__}: {xb.shape[0]} x {d}, {xq.shape[0]} queries, metric {a.metric}, "
          f"{a.partitions} partitions, k={a.k}, {a.threads} threads")
    print("| index | build (s) | nprobes | batch | recall@%d | QPS |" % a.k)
    print("|---|---:|---:|---:|---:|---:|")
    for t in a.types.split(","):
        index = make_index(t, d, a.partitions, a.sub_vectors, mt)
        start = time.perf_counter()
        index.train(xb)
        index.add(xb)
        build = time.perf_counter() - start
        for np_ in [int(x) for x in a.nprobes.split(",")]:
            index.nprobe = np_
            for b in [int(x) for x in a.batch_sizes.split(",")]:
                index.search(xq[:b], a.k)
                start = time.perf_counter()
                found = []
                for i in range(0, xq.shape[0], b):
                    _, ids = index.search(xq[i : i + b], a.k)
                    found.extend(ids.tolist())
                qps = xq.shape[0] / (time.perf_counter() - start)
                print(f"| {t} | {build:.2f} | {np_} | {b} | {recall(found, gt, a.k):.3f} | {qps:.0f} |")


if __name__ == "__main__":
    main()
