"""How shoal's shared scan and FAISS scale with threads, side by side.

Runs the table of issue 27 on the cores present: a clustered synthetic set
(`shoal bench --mode ivf --export`), IVF_FLAT with the same partition count
in both (FAISS trains its own lists, 25 k-means iterations), then for each
thread count (1, 2, 4, ... up to the cores, and the core count itself)
and each pass, alternating: `shoal bench --mode batch` with
`[search] threads = T` (shared scan and per-query loop, batch sizes given),
FAISS `IndexIVFFlat` with `omp_set_num_threads(T)` on the same queries,
and `shoal bench --mode exact` for the FMA peak and the memory read
bandwidth on T threads (a scan whose partition bytes per second reach the
read bandwidth is memory-bound, not short of threads). Medians over
the passes go to a JSON file and a Markdown table.

    benches/scaling.sh                       # the wrapper: builds, finds a python with faiss
    python benches/peers/scaling.py --shoal target/release/shoal --work /tmp/scaling \\
        --rows 1000000 --out scaling.json

The data and both indexes are kept in --work and reused by a later run with
the same shape (delete the folder to rebuild).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import faiss
import numpy as np


def read_fvecs(path):
    raw = np.fromfile(path, dtype="int32")
    d = raw[0]
    return raw.reshape(-1, d + 1)[:, 1:].copy().view("float32")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(cmd):
    log("$ " + " ".join(cmd))
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{cmd[0]} failed ({out.returncode}):\n{out.stderr[-4000:]}")
    return out.stdout


def thread_counts(cores, most):
    counts, t = [], 1
    while t <= min(cores, most):
        counts.append(t)
        t *= 2
    if min(cores, most) not in counts:
        counts.append(min(cores, most))
    return counts


def prepare(a):
    """Exports the synthetic set and builds both indexes, once per shape."""
    data = os.path.join(a.work, f"data-{a.rows}x{a.dim}")
    dataset = os.path.join(a.work, f"shoal-{a.rows}x{a.dim}-{a.partitions}")
    faiss_path = os.path.join(a.work, f"faiss-{a.rows}x{a.dim}-{a.partitions}.index")
    if not os.path.exists(os.path.join(data, "query.fvecs")):
        run([a.shoal, "bench", "--mode", "ivf", "--rows", str(a.rows), "--dim", str(a.dim),
             "--types", "ivf-flat", "--partitions", str(a.partitions), "--nprobes", str(a.nprobes),
             "--num-queries", str(a.queries), "--seconds", "0.2", "--export", data])
    if not os.path.exists(dataset):
        start = time.perf_counter()
        run([a.shoal, "ingest", "--dataset", dataset, "--vectors", os.path.join(data, "base.fvecs")])
        run([a.shoal, "index", "--dataset", dataset, "--type", "ivf_flat",
             "--partitions", str(a.partitions)])
        log(f"shoal ingest + index: {time.perf_counter() - start:.1f} s")
    if not os.path.exists(faiss_path):
        xb = read_fvecs(os.path.join(data, "base.fvecs"))
        start = time.perf_counter()
        index = faiss.IndexIVFFlat(faiss.IndexFlatL2(a.dim), a.dim, a.partitions)
        index.cp.niter = 25
        index.train(xb)
        index.add(xb)
        log(f"FAISS train + add: {time.perf_counter() - start:.1f} s")
        faiss.write_index(index, faiss_path)
    return data, dataset, faiss_path


def config_for(a, threads):
    path = os.path.join(a.work, f"threads-{threads}.toml")
    with open(path, "w") as f:
        f.write(f"[search]\nthreads = {threads}\n")
    return path


def shoal_pass(a, dataset, queries, threads):
    """{batch: {"shared": qps, "per_query": qps, "shared_gflops": x, ...}}
    and the FMA peak and read bandwidth on `threads` threads."""
    cfg = config_for(a, threads)
    out = os.path.join(a.work, "batch.json")
    run([a.shoal, "bench", "--mode", "batch", "--config", cfg, "--dataset", dataset,
         "--queries", queries, "--batch-sizes", a.batch_sizes, "--nprobes", str(a.nprobes),
         "--k", str(a.k), "--seconds", str(a.seconds), "--json", out])
    rows = json.load(open(out))
    rows = rows["rows"] if isinstance(rows, dict) else rows
    result = {}
    for r in rows:
        entry = result.setdefault(r["batch"], {})
        key = "shared" if r["mode"] == "Shared" else "per_query"
        entry[key] = r["qps"]
        entry[key + "_gflops"] = r.get("scan_gflops")
        entry[key + "_gbs"] = r.get("partition_gbs")
        entry[key + "_busy"] = r.get("thread_utilisation")
        entry[key + "_heap_merge"] = r.get("heap_merge_share")
        entry[key + "_outside_scan"] = r.get("outside_scan_share")
    exact = os.path.join(a.work, "exact.json")
    run([a.shoal, "bench", "--mode", "exact", "--config", cfg, "--rows", "20000",
         "--dim", str(a.dim), "--batch-sizes", "1", "--seconds", "0.3", "--json", exact])
    report = json.load(open(exact))
    return result, (report["peak_all_gflops"], report.get("read_all_gbs"))


def faiss_pass(a, index, xq, threads):
    faiss.omp_set_num_threads(threads)
    index.nprobe = a.nprobes
    result = {}
    for b in [int(x) for x in a.batch_sizes.split(",")]:
        index.search(xq[:b], a.k)
        done, start = 0, time.perf_counter()
        while time.perf_counter() - start < a.seconds:
            i = done % (xq.shape[0] - b + 1) if xq.shape[0] > b else 0
            index.search(xq[i : i + b], a.k)
            done += b
        result[b] = done / (time.perf_counter() - start)
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shoal", default="target/release/shoal")
    p.add_argument("--work", default="/tmp/shoal-scaling")
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--partitions", type=int, default=1024)
    p.add_argument("--nprobes", type=int, default=16)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--batch-sizes", default="1,64,256")
    p.add_argument("--max-threads", type=int, default=64)
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--out", default="scaling.json")
    a = p.parse_args()
    os.makedirs(a.work, exist_ok=True)
    cores = os.cpu_count() or 1
    counts = thread_counts(cores, a.max_threads)
    data, dataset, faiss_path = prepare(a)
    queries = os.path.join(data, "query.fvecs")
    xq = read_fvecs(queries)
    index = faiss.read_index(faiss_path)
    batches = [int(x) for x in a.batch_sizes.split(",")]
    samples = {t: {"shoal": [], "faiss": [], "peak": [], "read": []} for t in counts}
    started = time.time()
    for pass_ in range(a.passes):
        for t in counts:
            log(f"pass {pass_ + 1}/{a.passes}, {t} threads")
            s, (peak, read) = shoal_pass(a, dataset, queries, t)
            samples[t]["shoal"].append(s)
            samples[t]["peak"].append(peak)
            samples[t]["read"].append(read)
            samples[t]["faiss"].append(faiss_pass(a, index, xq, t))

    def median(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    rows = []
    for t in counts:
        row = {"threads": t, "fma_peak_gflops": median(samples[t]["peak"]),
               "read_bandwidth_gbs": median(samples[t]["read"]), "batches": {}}
        for b in batches:
            shoal = samples[t]["shoal"]
            row["batches"][str(b)] = {
                "shoal_shared_qps": median([s.get(b, {}).get("shared") for s in shoal]),
                "shoal_per_query_qps": median([s.get(b, {}).get("per_query") for s in shoal]),
                "shoal_shared_gflops": median([s.get(b, {}).get("shared_gflops") for s in shoal]),
                # Partition bytes per second of batch time: against the
                # read bandwidth, how memory-bound each path is.
                "shoal_shared_gbs": median([s.get(b, {}).get("shared_gbs") for s in shoal]),
                "shoal_per_query_gbs": median([s.get(b, {}).get("per_query_gbs") for s in shoal]),
                # The scan threads' busy share of the phase, and the share
                # of it spent merging per-thread heaps: where threads wait.
                "shoal_shared_threads_busy": median([s.get(b, {}).get("shared_busy") for s in shoal]),
                "shoal_shared_heap_merge": median([s.get(b, {}).get("shared_heap_merge") for s in shoal]),
                # The share of the batches' wall time outside the parallel
                # partition scan: the serial part (Amdahl's law).
                "shoal_shared_outside_scan": median([s.get(b, {}).get("shared_outside_scan") for s in shoal]),
                "faiss_qps": median([f[b] for f in samples[t]["faiss"]]),
            }
        rows.append(row)
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
    except OSError:
        pass
    # The last-level cache as shoal saw it (ivf_flat segments larger than
    # it are scanned with prefetch) and any SHOAL_PREFETCH override, from
    # this run's last exact benchmark.
    llc, forced = None, None
    exact_path = os.path.join(a.work, "exact.json")
    if os.path.exists(exact_path) and os.path.getmtime(exact_path) >= started:
        with open(exact_path) as f:
            exact = json.load(f)
        llc, forced = exact.get("last_level_cache_bytes"), exact.get("prefetch_override")
    report = {
        "machine": {"cores": cores, "cpu": cpu, "last_level_cache_bytes": llc,
                    "prefetch_override": forced},
        "data": {"rows": a.rows, "dim": a.dim, "partitions": a.partitions, "nprobes": a.nprobes,
                 "k": a.k, "queries": a.queries},
        "faiss": faiss.__version__,
        "passes": a.passes,
        "rows": rows,
    }
    with open(a.out, "w") as f:
        json.dump(report, f, indent=2)

    def fmt(x):
        return "-" if x is None else f"{x:,.0f}"

    def gbs(x):
        return "-" if x is None else f"{x:.1f}"

    print(f"{a.rows:,} x {a.dim}, ivf_flat {a.partitions} partitions, nprobes {a.nprobes}, "
          f"k {a.k}; {cores} cores ({cpu}); last-level cache "
          f"{'unknown' if llc is None else f'{llc >> 20} MiB'}"
          f"{'' if forced is None else ', SHOAL_PREFETCH=' + ('on' if forced else 'off')}; "
          f"FAISS {faiss.__version__}; "
          f"median of {a.passes} passes")
    head = "| threads | FMA peak GFLOP/s | read GB/s |"
    rule = "|---:|---:|---:|"
    for b in batches:
        head += (f" shoal b{b} shared | shoal b{b} per-query | FAISS b{b} | shared b{b} GFLOP/s (of peak) |"
                 f" b{b} partition GB/s shared / per-query |"
                 f" shared b{b} threads busy / heap merge / outside scan |")
        rule += "---:|---:|---:|---:|---:|---:|"
    print(head)
    print(rule)
    for row in rows:
        line = f"| {row['threads']} | {fmt(row['fma_peak_gflops'])} | {gbs(row['read_bandwidth_gbs'])} |"
        for b in batches:
            c = row["batches"][str(b)]
            g, peak = c["shoal_shared_gflops"], row["fma_peak_gflops"]
            share = f"{g:.0f} ({100 * g / peak:.0f}%)" if g and peak else "-"
            busy, merge = c["shoal_shared_threads_busy"], c["shoal_shared_heap_merge"]
            outside = c["shoal_shared_outside_scan"]
            waits = (f"{100 * busy:.0f}% / {100 * merge:.1f}% / "
                     f"{'-' if outside is None else f'{100 * outside:.1f}%'}" if busy else "-")
            line += (f" {fmt(c['shoal_shared_qps'])} | {fmt(c['shoal_per_query_qps'])} |"
                     f" {fmt(c['faiss_qps'])} | {share} |"
                     f" {gbs(c['shoal_shared_gbs'])} / {gbs(c['shoal_per_query_gbs'])} | {waits} |")
        print(line)
    print(f"\nJSON: {a.out}")


if __name__ == "__main__":
    main()
