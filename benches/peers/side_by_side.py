"""shoal and FAISS side by side in one run: the same files, index types,
partitions, nprobes and batch sizes; passes alternate shoal and FAISS and
the table reports each side's median QPS over the passes, their ratio, and
recall@k of both.

shoal runs as its own binary (`shoal ingest`, `shoal index`, `shoal bench
--dataset ... --json`), FAISS in this process with 2 threads (the machine's
cores). One query per call is batch 1; a batch of B queries is one call.
For shoal, batch 1 is the single-query path (`per-query`), larger batches
the shared scan.

With `--refine-factor R` both sides rerank (k × R) index candidates with
the exact vectors: shoal's `--refine-factor`, FAISS's `IndexRefineFlat`
around the IVF index (`k_factor` R).

    ~/peers-venv/bin/python benches/peers/side_by_side.py --shoal target/release/shoal \\
        --base base.fvecs --queries query.fvecs --groundtruth groundtruth.ivecs --metric cosine \\
        --types ivf_flat,ivf_sq,ivf_pq,ivf_rq --partitions 256 --sub-vectors 48 --bits 4 --nprobes 16 \\
        --batch-sizes 1,8,64 --passes 3
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

import faiss

from faiss_ivf import load, make_index, recall


def faiss_pass(index, xq, gt, k, batch):
    index.search(xq[:batch], k)  # warm
    found = []
    start = time.perf_counter()
    for i in range(0, xq.shape[0], batch):
        _, ids = index.search(xq[i : i + batch], k)
        found.extend(ids.tolist())
    return xq.shape[0] / (time.perf_counter() - start), recall(found, gt, k)


def shoal(binary, *args):
    out = subprocess.run([binary, *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"shoal {' '.join(args)} failed: {out.stdout}{out.stderr}")
    return out.stdout


def shoal_pass(binary, dataset, a, nprobes, batch, scratch):
    mode = "per-query" if batch == 1 else "shared"
    out = os.path.join(scratch, "bench.json")
    shoal(binary, "bench", "--dataset", dataset, "--queries", a.queries, "--groundtruth",
          a.groundtruth, "--k", str(a.k), "--nprobes", str(nprobes), "--batch-sizes", str(batch),
          "--modes", mode, "--json", out, *refine_args(a))
    with open(out) as f:
        row = json.load(f)[0]
    return row["qps"], row["recall"]


def refine_args(a):
    return ["--refine-factor", str(a.refine_factor)] if a.refine_factor else []


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shoal", required=True, help="path of the shoal binary (release build)")
    p.add_argument("--base", required=True)
    p.add_argument("--queries", required=True)
    p.add_argument("--groundtruth", required=True)
    p.add_argument("--metric", choices=["l2", "cosine", "dot"], default="l2")
    p.add_argument("--types", default="ivf_flat,ivf_sq,ivf_pq")
    p.add_argument("--partitions", type=int, default=256)
    p.add_argument("--sub-vectors", type=int, default=32)
    p.add_argument("--bits", type=int, default=4, help="ivf_rq: bits per dimension")
    p.add_argument("--nprobes", default="16")
    p.add_argument("--batch-sizes", default="1,8,64")
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--refine-factor", type=int, default=0,
                   help="rerank k x R candidates with the exact vectors (0: no refine)")
    a = p.parse_args()
    faiss.omp_set_num_threads(2)
    xb, xq, gt, mt = load(a.base, a.queries, a.groundtruth, a.metric)
    d = xb.shape[1]
    print(f"shoal vs FAISS {faiss.__version__}: {xb.shape[0]} x {d}, {xq.shape[0]} queries, "
          f"metric {a.metric}, {a.partitions} partitions, PQ m={a.sub_vectors}, RQ bits={a.bits}, k={a.k}, "
          f"refine factor {a.refine_factor or 'none'}, median of {a.passes} alternating passes")
    print(f"| index | nprobes | batch | shoal QPS | FAISS QPS | shoal / FAISS | shoal recall@{a.k} | FAISS recall@{a.k} |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as scratch:
        dataset = os.path.join(scratch, "ds")
        shoal(a.shoal, "ingest", "--dataset", dataset, "--vectors", a.base, "--metric", a.metric)
        for kind in a.types.split(","):
            shoal(a.shoal, "index", "--dataset", dataset, "--type", kind, "--partitions",
                  str(a.partitions), "--sub-vectors", str(a.sub_vectors), "--bits", str(a.bits))
            ivf = make_index(kind, d, a.partitions, a.sub_vectors, mt, a.bits)
            index = ivf
            if a.refine_factor:
                index = faiss.IndexRefineFlat(ivf)
                index.k_factor = a.refine_factor
            start = time.perf_counter()
            index.train(xb)
            index.add(xb)
            faiss_build = time.perf_counter() - start
            print(f"FAISS {kind} build {faiss_build:.2f} s", flush=True)
            for nprobes in [int(x) for x in a.nprobes.split(",")]:
                ivf.nprobe = nprobes
                for batch in [int(x) for x in a.batch_sizes.split(",")]:
                    ours, theirs = [], []
                    for _ in range(a.passes):
                        ours.append(shoal_pass(a.shoal, dataset, a, nprobes, batch, scratch))
                        theirs.append(faiss_pass(index, xq, gt, a.k, batch))
                    sq = statistics.median(q for q, _ in ours)
                    fq = statistics.median(q for q, _ in theirs)
                    label = f"{kind} refine {a.refine_factor}" if a.refine_factor else kind
                    print(f"| {label} | {nprobes} | {batch} | {sq:.0f} | {fq:.0f} | {sq / fq:.2f} | "
                          f"{ours[0][1]:.3f} | {theirs[0][1]:.3f} |", flush=True)


if __name__ == "__main__":
    main()
