"""FAISS IndexFlatL2 exact search: query vectors per second, one at a time
and in batches, on random clustered data shaped like `shoal bench --mode exact`."""
import argparse
import time

import faiss
import numpy as np


def timed(seconds, fn):
    fn()  # warm-up
    start = time.perf_counter()
    done = 0
    laps = 0
    while time.perf_counter() - start < seconds or laps < 3:
        done += fn()
        laps += 1
    return done / (time.perf_counter() - start)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--batch-sizes", default="1,8,64")
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seconds", type=float, default=2.0)
    a = p.parse_args()
    faiss.omp_set_num_threads(a.threads)
    rng = np.random.default_rng(1)
    centres = rng.uniform(-1, 1, (64, a.dim)).astype("float32")
    base = centres[rng.integers(0, 64, a.rows)] + rng.uniform(-0.45, 0.45, (a.rows, a.dim)).astype("float32")
    queries = centres[rng.integers(0, 64, 256)] + rng.uniform(-0.45, 0.45, (256, a.dim)).astype("float32")
    index = faiss.IndexFlatL2(a.dim)
    index.add(base)
    print(f"FAISS {faiss.__version__} IndexFlatL2, {a.rows} x {a.dim}, k={a.k}, {a.threads} threads")
    print("| batch | batch QPS | one-at-a-time QPS |")
    print("|---:|---:|---:|")
    for b in [int(x) for x in a.batch_sizes.split(",")]:
        q = np.ascontiguousarray(queries[:b])
        batch_qps = timed(a.seconds, lambda: (index.search(q, a.k), b)[1])

        def loop():
            for i in range(b):
                index.search(q[i : i + 1], a.k)
            return b

        single_qps = timed(a.seconds, loop)
        print(f"| {b} | {batch_qps:.0f} | {single_qps:.0f} |")


if __name__ == "__main__":
    main()
