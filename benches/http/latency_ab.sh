#!/usr/bin/env bash
# One-connection and 64-connection HTTP latency of shoal builds side by
# side, alternating pass by pass (the 2026-12-07 entry of
# docs/PERFORMANCE.md). Each variant is NAME=COMMAND, the command up to
# `serve`'s own arguments, e.g.
#
#   benches/http/latency_ab.sh DATA_DIR DATASET BODIES.jsonl \
#     base=/tmp/shoal-base one=target/release/shoal \
#     nospin="target/release/shoal --config nospin.toml"
#
# BODIES.jsonl from benches/http/make_bodies.py. Needs wrk and curl.
# PASSES (default 3) passes; port 18080.
set -euo pipefail
data="$1" dataset="$2" bodies="$3"
shift 3
here="$(cd "$(dirname "$0")" && pwd)"
url="http://127.0.0.1:18080/v1/datasets/$dataset/search"
for pass in $(seq "${PASSES:-3}"); do
  for variant in "$@"; do
    name="${variant%%=*}" cmd="${variant#*=}"
    $cmd serve --data "$data" --listen 127.0.0.1:18080 >/dev/null 2>&1 &
    pid=$!
    for _ in $(seq 50); do curl -sf 127.0.0.1:18080/healthz >/dev/null && break; sleep 0.2; done
    wrk -t2 -c64 -d2s -s "$here/bodies.lua" "$url" -- "$bodies" >/dev/null 2>&1
    c64=$(wrk -t2 -c64 -d6s --latency -s "$here/bodies.lua" "$url" -- "$bodies" 2>&1 |
      awk '/^ +50%/{p50=$2} /^ +99%/{p99=$2} /Requests\/sec/{rps=$2} END{print p50, p99, rps}')
    c1=$(wrk -t1 -c1 -d4s --latency -s "$here/bodies.lua" "$url" -- "$bodies" 2>&1 |
      awk '/^ +50%/{p50=$2} /^ +99%/{p99=$2} /Requests\/sec/{rps=$2} END{print p50, p99, rps}')
    echo "$name pass $pass | c64 p50 p99 req/s: $c64 | c1 p50 p99 req/s: $c1"
    kill "$pid"; wait "$pid" 2>/dev/null || true
  done
done
