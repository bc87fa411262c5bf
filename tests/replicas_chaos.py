#!/usr/bin/env python3
"""The replica deployment under load loses a replica: the chaos test.

Starts a local S3 server (moto), a small dataset in it, and
scripts/replicas.sh (two `shoal serve` replicas under its supervisor, nginx
with deploy/nginx.conf in front), all on 127.0.0.1. Writers append rows
with unique ids and searchers search through nginx; after a while the
replica serving the dataset is killed with SIGKILL. The test then checks
what an operator relies on:

* every acknowledged append is readable afterwards, through nginx;
* a fresh process (`shoal info`) counts at least the acknowledged rows and
  no more than those plus the appends that were in flight at the kill;
* searches succeed again within 2 s of the kill (every search started
  later than that succeeds);
* the supervisor restarts the killed replica, which serves a search
  within 10 s of the kill.

It prints its counts, and exits non-zero (with the reason) when a check
fails. Needs nginx, the shoal binary (SHOAL_BIN, default
target/debug/shoal) and moto_server (SHOAL_MOTO_SERVER). Run by .ci/run.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIM = 16
BASE_ROWS = 2_000
ROWS_PER_APPEND = 10
WRITERS = 4
SEARCHERS = 2
BEFORE_KILL_S = 6.0
AFTER_KILL_S = 8.0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port_pair():
    """A free port whose successor is free too (replicas.sh numbers the
    replicas' ports from the first)."""
    for _ in range(100):
        first = free_port()
        with socket.socket() as a, socket.socket() as b:
            try:
                a.bind(("127.0.0.1", first))
                b.bind(("127.0.0.1", first + 1))
            except OSError:
                continue
        return first
    sys.exit("FAILED: no two consecutive free ports")


def http(method, url, body=None, timeout=30):
    """(status, parsed JSON or text); status 0 for a connection error."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            try:
                return r.status, json.loads(raw or b"null")
            except ValueError:
                return r.status, raw.decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as e:
        return 0, str(e)


def wait_until(what, check, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    sys.exit(f"FAILED: {what} within {seconds} s")


def vector(seed):
    # Deterministic, distinct, finite.
    return [((seed * 7919 + j * 104729) % 1000) / 1000.0 for j in range(DIM)]


def main():
    shoal = os.environ.get("SHOAL_BIN", os.path.join(ROOT, "target/debug/shoal"))
    moto = os.environ.get("SHOAL_MOTO_SERVER", "moto_server")
    work = tempfile.mkdtemp(prefix="shoal-chaos-")
    s3_port, front, first = free_port(), free_port(), free_port_pair()
    replica_ports = [first, first + 1]
    env = dict(
        os.environ,
        AWS_ENDPOINT_URL=f"http://127.0.0.1:{s3_port}",
        AWS_ALLOW_HTTP="true",
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_REGION="us-east-1",
        SHOAL_BIN=shoal,
        SHOAL_FRONT_PORT=str(front),
        SHOAL_RUN_DIR=os.path.join(work, "run"),
    )
    children = []
    try:
        children.append(
            subprocess.Popen(
                [moto, "-H", "127.0.0.1", "-p", str(s3_port)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        wait_until(
            "moto answers",
            lambda: http("GET", f"http://127.0.0.1:{s3_port}/")[0] == 200,
            60,
        )
        http("PUT", f"http://127.0.0.1:{s3_port}/shoal")
        url = "s3://shoal/prod"
        seed = os.path.join(work, "seed.jsonl")
        with open(seed, "w") as f:
            for i in range(BASE_ROWS):
                f.write(json.dumps({"id": i, "vector": vector(i)}) + "\n")
        subprocess.run(
            [shoal, "ingest", "--dataset", f"{url}/docs", "--vectors", seed],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        supervisor = subprocess.Popen(
            [os.path.join(ROOT, "scripts/replicas.sh"), url, "2", str(first)],
            env=env,
            cwd=ROOT,
            start_new_session=True,
        )
        children.append(supervisor)
        base = f"http://127.0.0.1:{front}/v1/datasets/docs"
        wait_until(
            "the replicas and nginx start",
            lambda: http("GET", base)[0] == 200,
            120,
        )
        run(base, replica_ports, env)
    finally:
        # The supervisor leads a process group of its own (the replicas,
        # nginx): all of it is stopped, then killed if it lingers.
        for child in reversed(children):
            if child.poll() is None:
                group = child is not children[0]
                try:
                    if group:
                        os.killpg(child.pid, signal.SIGTERM)
                    else:
                        child.terminate()
                    child.wait(timeout=40)
                except subprocess.TimeoutExpired:
                    if group:
                        os.killpg(child.pid, signal.SIGKILL)
                    child.kill()
                    child.wait()
        subprocess.run(["rm", "-rf", work])


def run(base, replica_ports, env):
    stop = threading.Event()
    lock = threading.Lock()
    appends = []  # (started, ended, status, ids)
    searches = []  # (started, ended, status)

    def writer(w):
        n = 0
        while not stop.is_set():
            first = 1_000_000 + w * 100_000 + n * ROWS_PER_APPEND
            ids = list(range(first, first + ROWS_PER_APPEND))
            rows = [{"id": i, "vector": vector(i)} for i in ids]
            started = time.monotonic()
            status, _ = http("POST", f"{base}/rows", {"rows": rows})
            with lock:
                appends.append((started, time.monotonic(), status, ids))
            n += 1

    def searcher(s):
        n = 0
        while not stop.is_set():
            started = time.monotonic()
            status, body = http(
                "POST", f"{base}/search", {"vector": vector(s * 1000 + n), "k": 5}
            )
            if status == 200 and not (isinstance(body, dict) and body.get("hits")):
                status = -1  # an empty answer from a dataset of 2,000 rows
            with lock:
                searches.append((started, time.monotonic(), status))
            n += 1

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
    threads += [threading.Thread(target=searcher, args=(s,)) for s in range(SEARCHERS)]
    for t in threads:
        t.start()
    time.sleep(BEFORE_KILL_S)

    # The replica that serves the dataset (nginx hashes its name to one).
    def served(port):
        status, body = http("GET", f"http://127.0.0.1:{port}/v1/stats")
        return body.get("requests", 0) if status == 200 and isinstance(body, dict) else -1

    victim = max(range(len(replica_ports)), key=lambda i: served(replica_ports[i]))
    pid_file = os.path.join(env["SHOAL_RUN_DIR"], f"replica-{victim}.pid")
    with open(pid_file) as f:
        pid = int(f.read())
    killed_at = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    print(f"killed replica {victim} (pid {pid}, port {replica_ports[victim]})")

    # The supervisor brings it back.
    port = replica_ports[victim]
    back = None
    while time.monotonic() - killed_at < 10:
        status, body = http(
            "POST",
            f"http://127.0.0.1:{port}/v1/datasets/docs/search",
            {"vector": vector(1), "k": 5},
            timeout=2,
        )
        if status == 200:
            back = time.monotonic() - killed_at
            break
        time.sleep(0.1)
    remaining = AFTER_KILL_S - (time.monotonic() - killed_at)
    if remaining > 0:
        time.sleep(remaining)
    stop.set()
    for t in threads:
        t.join()

    acked = [a for a in appends if a[2] == 200]
    failed = [a for a in appends if a[2] != 200]
    in_flight = [a for a in failed if a[0] <= killed_at <= a[1]]
    by_status = {}
    for a in failed:
        by_status[a[2]] = by_status.get(a[2], 0) + 1
    before = [s for s in searches if s[1] < killed_at]
    after = [s for s in searches if s[0] >= killed_at]
    late = [s for s in after if s[0] >= killed_at + 2.0]
    search_failures = {}
    for s in searches:
        if s[2] != 200:
            search_failures[s[2]] = search_failures.get(s[2], 0) + 1
    print(
        f"appends: {len(acked)} acknowledged, {len(failed)} failed "
        f"(by status {by_status}; {len(in_flight)} in flight at the kill)"
    )
    print(
        f"searches: {len(before)} before the kill, {len(after)} after "
        f"({sum(s[2] == 200 for s in after)} succeeded); failures by status {search_failures}"
    )
    print(f"killed replica serving again after {back:.1f} s" if back else "killed replica not back")

    failures = []
    if back is None:
        failures.append("the killed replica did not serve a search within 10 s")
    if len(acked) < 10 or not any(a[0] > killed_at for a in acked):
        failures.append("too few appends acknowledged, or none after the kill")
    if not late or any(s[2] != 200 for s in late):
        bad = [s for s in late if s[2] != 200]
        failures.append(f"searches started 2 s after the kill failed: {len(bad)} of {len(late)}")
    unreadable = []
    for a in acked:
        for i in a[3][:: ROWS_PER_APPEND - 1]:  # the first and last row
            status, _ = http("GET", f"{base}/rows/{i}")
            if status != 200:
                unreadable.append((i, status))
    if unreadable:
        failures.append(f"acknowledged rows not readable: {unreadable[:5]} ({len(unreadable)})")
    info = subprocess.run(
        [env["SHOAL_BIN"], "info", "--dataset", "s3://shoal/prod/docs"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    counted = int(info.split("rows", 1)[1].split()[0])
    low = BASE_ROWS + ROWS_PER_APPEND * len(acked)
    high = low + ROWS_PER_APPEND * len(in_flight)
    print(f"a fresh process counts {counted} rows (acknowledged: {low}, at most {high})")
    if not low <= counted <= high:
        failures.append(f"a fresh process counts {counted} rows, not within [{low}, {high}]")
    if failures:
        sys.exit("FAILED: " + "; ".join(failures))
    print("replica chaos test: passed")


if __name__ == "__main__":
    main()
