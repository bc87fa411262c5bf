"""64 asyncio tasks, one engine: the engine gathers their searches into a
few shared scans, and every task still gets exactly the rows it would have
got alone. Run: python python/examples/gather.py"""

import asyncio
import tempfile

import numpy as np

import shoal


async def main() -> None:
    rng = np.random.default_rng(7)
    vectors = rng.random((50_000, 64), dtype=np.float32)
    with tempfile.TemporaryDirectory() as path, shoal.connect(path) as db:
        ds = db.create_dataset("docs", {"vector": vectors, "len": np.arange(50_000) % 30})
        ds.create_index("ivf_flat", partitions=64)
        queries = rng.random((64, 64), dtype=np.float32)
        before = db.stats()
        answers = await asyncio.gather(
            *[ds.search_async(q, k=5, nprobes=8, filter="len < 20" if i % 2 else None)
              for i, q in enumerate(queries)]
        )
        after = db.stats()
        print(f"{len(answers)} searches served by {after['batches'] - before['batches']} batches")
        same = sum(
            a.to_pydict() == ds.search(q, k=5, nprobes=8, filter="len < 20" if i % 2 else None).to_pydict()
            for i, (q, a) in enumerate(zip(queries, answers))
        )
        print(f"{same} of {len(answers)} got the rows of searching alone")
        assert same == len(answers)
        print(answers[0])


if __name__ == "__main__":
    asyncio.run(main())
