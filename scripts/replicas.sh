#!/usr/bin/env bash
# Starts N `shoal serve` replicas over one data URL and nginx in front of
# them (deploy/nginx.conf), all on 127.0.0.1, and keeps them running: a
# replica (or nginx) that exits is restarted with backoff (1 s, doubling to
# 30 s; back to 1 s after a minute up), and the restart is logged. Only
# Ctrl-C or SIGTERM stops everything.
#
#   scripts/replicas.sh s3://bucket/prefix 3        # nginx on :8080, replicas on :8081..
#
# Credentials and endpoint come from the environment (AWS_ACCESS_KEY_ID,
# AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL, AWS_ALLOW_HTTP) or a
# config file given as SHOAL_CONFIG. SHOAL_BIN picks the binary (default:
# target/release/shoal), SHOAL_FRONT_PORT nginx's port (8080),
# SHOAL_RUN_DIR where logs and pid files go (a new temporary directory):
# replica-<i>.log and replica-<i>.pid (its running process), balancer.log
# and balancer.pid (nginx), supervisor.log (the restarts).
# See docs/replicas.md.
set -euo pipefail
cd "$(dirname "$0")/.."

data="${1:?usage: scripts/replicas.sh DATA_URL [REPLICAS] [FIRST_PORT]}"
replicas="${2:-2}"
first_port="${3:-8081}"
bin="${SHOAL_BIN:-target/release/shoal}"
front_port="${SHOAL_FRONT_PORT:-8080}"
[ -x "$bin" ] || { echo "no $bin: run cargo build --release first (or set SHOAL_BIN)" >&2; exit 1; }
command -v nginx >/dev/null || { echo "nginx is not installed (apt-get install nginx-light)" >&2; exit 1; }

run="${SHOAL_RUN_DIR:-$(mktemp -d)}"
mkdir -p "$run"
supervisors=()
stop() {
  trap - EXIT INT TERM
  touch "$run/stopping"
  # Each supervisor stops its process (SIGTERM: requests in flight are
  # answered) and waits for it; one still running after 30 s is killed.
  for pid in "${supervisors[@]}"; do kill "$pid" 2>/dev/null || true; done
  for _ in $(seq 1 300); do
    alive=0
    for pid in "${supervisors[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  for pid in "${supervisors[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  for f in "$run"/replica-*.pid "$run"/balancer.pid; do
    [ -e "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  rm -f "$run"/replica-*.pid "$run"/balancer.pid "$run/stopping"
}
trap stop EXIT
trap 'stop; exit 0' INT TERM

log() { echo "$(date '+%F %T') $*" | tee -a "$run/supervisor.log" >&2 || true; }

# supervise NAME COMMAND...: runs COMMAND (output to NAME.log, pid in
# NAME.pid while it runs) and starts it again whenever it exits, until
# stop(), whose SIGTERM it passes on to the process and waits for.
supervise() {
  local name="$1" backoff=1 started rc child=""
  shift
  trap '[ -n "$child" ] && kill "$child" 2>/dev/null; [ -n "$child" ] && wait "$child" 2>/dev/null; exit 0' TERM INT
  while [ ! -e "$run/stopping" ]; do
    started=$(date +%s)
    "$@" >>"$run/$name.log" 2>&1 &
    child=$!
    echo "$child" >"$run/$name.pid"
    rc=0
    wait "$child" || rc=$?
    # A signal interrupts `wait` before the process has ended: wait again.
    while kill -0 "$child" 2>/dev/null; do wait "$child" || rc=$?; done
    rm -f "$run/$name.pid"
    child=""
    [ -e "$run/stopping" ] && return 0
    if [ $(( $(date +%s) - started )) -ge 60 ]; then backoff=1; fi
    log "$name exited with status $rc; restarting it in ${backoff}s"
    sleep "$backoff" &
    wait $! || true
    backoff=$(( backoff * 2 > 30 ? 30 : backoff * 2 ))
  done
}

config_args=()
[ -n "${SHOAL_CONFIG:-}" ] && config_args=(--config "$SHOAL_CONFIG")
servers=""
for i in $(seq 0 $((replicas - 1))); do
  port=$((first_port + i))
  supervise "replica-$i" "$bin" "${config_args[@]}" serve --data "$data" --listen "127.0.0.1:$port" &
  supervisors+=($!)
  servers="$servers        server 127.0.0.1:$port max_fails=1 fail_timeout=2s;\n"
done
# nginx starts once every replica is ready: /readyz answers 200 once a
# replica serves and, with `[storage] prewarm = true`, has filled its disk
# cache (a cold replica would otherwise take its first traffic slowly).
for i in $(seq 0 $((replicas - 1))); do
  port=$((first_port + i))
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break
    sleep 0.5
  done
  curl -sf "http://127.0.0.1:$port/readyz" >/dev/null \
    || { echo "replica $i did not become ready:" >&2; cat "$run/replica-$i.log" >&2; exit 1; }
done

# deploy/nginx.conf with this run's replicas and front port.
python3 - "$run" "$servers" "$front_port" <<'PY'
import re, sys
run, servers, port = sys.argv[1], sys.argv[2].replace("\\n", "\n"), sys.argv[3]
conf = open("deploy/nginx.conf").read()
conf = re.sub(r"(        server 127\.0\.0\.1:\d+ [^\n]*\n)+", servers, conf)
conf = conf.replace("listen 127.0.0.1:8080;", f"listen 127.0.0.1:{port};")
open(f"{run}/nginx.conf", "w").write(conf)
PY
supervise balancer nginx -c "$run/nginx.conf" -p "$run/" &
supervisors+=($!)
for _ in $(seq 1 50); do
  curl -sf "http://127.0.0.1:$front_port/healthz" >/dev/null && break
  sleep 0.2
done
log "shoal: $replicas replicas of $data behind http://127.0.0.1:$front_port (logs and pids in $run)"
# Until Ctrl-C or SIGTERM (the trap ends the script); the supervisors
# never return on their own.
while :; do
  wait || true
  sleep 1
done
