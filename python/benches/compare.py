"""Python throughput of shoal against FAISS and LanceDB on one data set.

    python python/benches/compare.py --data ../shared/data/minilm-gcide [--peers]

shoal: IVF_FLAT 256 partitions, cosine, nprobes 16, k 10. It measures
queries one at a time, `search_batch` of 64, 64 asyncio tasks with
coalescing on and off, and 64 threads. With `--peers`, it also measures
`faiss` (IndexIVFFlat, inner product on the normalised vectors) and
`lancedb` (IVF_FLAT 256 cosine) at the same nprobes, where they are
installed (a venv outside the repo). Each figure is the median of
`--passes` passes, the systems alternating pass by pass; recall@10 is
against the data set's ground truth. Nothing is asserted: this prints a
table and, with --json, writes it.
"""

import argparse
import asyncio
import concurrent.futures
import json
import statistics
import tempfile
import time

import numpy as np


def read_vecs(path, dtype):
    raw = np.fromfile(path, dtype=np.int32)
    dim = raw[0]
    rows = raw.reshape(-1, dim + 1)[:, 1:]
    return rows.view(dtype) if dtype == np.float32 else rows


def recall(found, truth, k=10):
    hits = sum(len(set(f[:k]) & set(t[:k])) for f, t in zip(found, truth))
    return hits / (k * len(found))


class Runner:
    """One system's ways of running the query set: each returns the ids
    found per query and per-query latencies (seconds)."""

    def one_at_a_time(self, queries):
        found, lat = [], []
        for q in queries:
            t = time.perf_counter()
            found.append(self.search(q))
            lat.append(time.perf_counter() - t)
        return found, lat

    def batched(self, queries, size=64):
        found, lat = [], []
        for i in range(0, len(queries), size):
            t = time.perf_counter()
            found.extend(self.search_batch(queries[i:i + size]))
            lat.append(time.perf_counter() - t)
        return found, lat

    def tasks(self, queries, clients=64):
        found = [None] * len(queries)
        lat = []

        async def client(c):
            for i in range(c, len(queries), clients):
                t = time.perf_counter()
                found[i] = await self.search_async(queries[i])
                lat.append(time.perf_counter() - t)

        async def main():
            await asyncio.gather(*[client(c) for c in range(clients)])

        asyncio.run(main())
        return found, lat

    def threads(self, queries, clients=64):
        found = [None] * len(queries)
        lat = []

        def client(c):
            for i in range(c, len(queries), clients):
                t = time.perf_counter()
                found[i] = self.search(queries[i])
                lat.append(time.perf_counter() - t)

        with concurrent.futures.ThreadPoolExecutor(clients) as pool:
            list(pool.map(client, range(clients)))
        return found, lat

    async def search_async(self, q):
        return await asyncio.to_thread(self.search, q)


class Shoal(Runner):
    def __init__(self, base, path, nprobes, coalesce=True):
        import shoal

        config = None if coalesce else {"coalescer": {"window_us": 0, "max_batch_size": 1}}
        self.db = shoal.connect(path, config=config)
        if "gcide" in self.db.dataset_names():
            self.ds = self.db.open("gcide")
        else:
            self.ds = self.db.create_dataset("gcide", {"vector": base}, metric="cosine")
            self.ds.create_index("ivf_flat", partitions=256, seed=42)
        self.nprobes = nprobes

    def search(self, q):
        return self.ds.search(q, k=10, nprobes=self.nprobes).column("id").to_pylist()

    async def search_async(self, q):
        t = await self.ds.search_async(q, k=10, nprobes=self.nprobes)
        return t.column("id").to_pylist()

    def search_batch(self, qs):
        t = self.ds.search_batch(qs, k=10, nprobes=self.nprobes)
        qi = t.column("query_index").to_numpy()
        ids = t.column("id").to_numpy()
        return [ids[qi == i].tolist() for i in range(len(qs))]


class Faiss(Runner):
    def __init__(self, base, nprobes):
        import faiss

        quantizer = faiss.IndexFlatIP(base.shape[1])
        self.index = faiss.IndexIVFFlat(quantizer, base.shape[1], 256, faiss.METRIC_INNER_PRODUCT)
        self.index.train(base)
        self.index.add(base)
        self.index.nprobe = nprobes

    def search(self, q):
        return self.index.search(q[None, :], 10)[1][0].tolist()

    def search_batch(self, qs):
        return self.index.search(qs, 10)[1].tolist()


class Lance(Runner):
    def __init__(self, base, path, nprobes):
        import lancedb
        import pyarrow as pa

        self.path, self.nprobes = path, nprobes
        db = lancedb.connect(path)
        vec = pa.FixedSizeListArray.from_arrays(pa.array(base.reshape(-1)), base.shape[1])
        table = pa.table({"id": np.arange(len(base)), "vector": vec})
        self.table = db.create_table("gcide", table)
        self.table.create_index(metric="cosine", num_partitions=256, index_type="IVF_FLAT")
        self.async_table = None

    def search(self, q):
        r = self.table.search(q).metric("cosine").nprobes(self.nprobes).limit(10).select(["id"]).to_arrow()
        return r.column("id").to_pylist()

    def search_batch(self, qs):
        out = []
        r = self.table.search(qs).metric("cosine").nprobes(self.nprobes).limit(10).select(["id"]).to_arrow()
        qi = r.column("query_index").to_numpy()
        ids = r.column("id").to_numpy()
        for i in range(len(qs)):
            out.append(ids[qi == i].tolist())
        return out

    def tasks(self, queries, clients=64):
        import lancedb

        found = [None] * len(queries)
        lat = []

        async def main():
            db = await lancedb.connect_async(self.path)
            table = await db.open_table("gcide")

            async def client(c):
                for i in range(c, len(queries), clients):
                    t = time.perf_counter()
                    q = table.vector_search(queries[i])
                    r = await q.distance_type("cosine").nprobes(self.nprobes).limit(10).select(["id"]).to_arrow()
                    found[i] = r.column("id").to_pylist()
                    lat.append(time.perf_counter() - t)

            await asyncio.gather(*[client(c) for c in range(clients)])

        asyncio.run(main())
        return found, lat


def measure(name, fn, queries, truth, passes):
    runs = []
    for _ in range(passes):
        t = time.perf_counter()
        found, lat = fn(queries)
        runs.append((len(queries) / (time.perf_counter() - t), found, lat))
    qps = sorted(r[0] for r in runs)
    lat = sorted(x for r in runs for x in r[2])
    return {
        "system": name,
        "qps_median": statistics.median(qps),
        "qps_min": qps[0],
        "qps_max": qps[-1],
        "p50_ms": lat[len(lat) // 2] * 1e3,
        "p99_ms": lat[int(len(lat) * 0.99)] * 1e3,
        "recall@10": recall(runs[-1][1], truth),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--nprobes", type=int, default=16)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--peers", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    base = read_vecs(f"{args.data}/base.fvecs", np.float32)
    queries = np.ascontiguousarray(read_vecs(f"{args.data}/query.fvecs", np.float32))
    truth = read_vecs(f"{args.data}/groundtruth.ivecs", np.int32).tolist()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        coalesced = Shoal(base, tmp, args.nprobes)
        direct = Shoal(base, tmp, args.nprobes, coalesce=False)
        cases = [
            ("shoal one at a time", coalesced.one_at_a_time),
            ("shoal search_batch 64", coalesced.batched),
            ("shoal 64 asyncio tasks, coalesced", coalesced.tasks),
            ("shoal 64 asyncio tasks, coalescing off", direct.tasks),
            ("shoal 64 threads, coalesced", coalesced.threads),
        ]
        if args.peers:
            try:
                f = Faiss(base, args.nprobes)
                cases += [
                    ("faiss one at a time", f.one_at_a_time),
                    ("faiss batch 64", f.batched),
                    ("faiss 64 asyncio tasks (to_thread)", f.tasks),
                ]
            except ImportError:
                print("faiss not installed: left out")
            try:
                lance = Lance(base, f"{tmp}/lance", args.nprobes)
                cases += [
                    ("lancedb one at a time", lance.one_at_a_time),
                    ("lancedb batch 64", lance.batched),
                    ("lancedb 64 asyncio tasks (native async)", lance.tasks),
                ]
            except ImportError:
                print("lancedb not installed: left out")
        for name, fn in cases:
            fn(queries[:64])  # warm caches
        results = {name: [] for name, _ in cases}
        for _ in range(args.passes):
            for name, fn in cases:
                results[name].append(measure(name, fn, queries, truth, 1))
        for name, _ in cases:
            passes = results[name]
            qps = sorted(p["qps_median"] for p in passes)
            rows.append({
                "system": name,
                "qps_median": statistics.median(qps),
                "qps_range": [round(qps[0]), round(qps[-1])],
                "p50_ms": statistics.median(p["p50_ms"] for p in passes),
                "p99_ms": statistics.median(p["p99_ms"] for p in passes),
                "recall@10": passes[-1]["recall@10"],
            })
        coalesced.db.close()
        direct.db.close()
    print(f"{'system':44} {'QPS median':>10} {'range':>15} {'p50 ms':>8} {'p99 ms':>8} {'recall@10':>9}")
    for r in rows:
        print(f"{r['system']:44} {r['qps_median']:10.0f} {str(r['qps_range']):>15} "
              f"{r['p50_ms']:8.2f} {r['p99_ms']:8.2f} {r['recall@10']:9.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
