#!/usr/bin/env bash
# Starts N `shoal serve` replicas over one data URL and nginx in front of
# them (deploy/nginx.conf), all on 127.0.0.1; Ctrl-C stops everything.
#
#   scripts/replicas.sh s3://bucket/prefix 3        # nginx on :8080, replicas on :8081..
#
# Credentials and endpoint come from the environment (AWS_ACCESS_KEY_ID,
# AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL, AWS_ALLOW_HTTP) or a
# config file given as SHOAL_CONFIG. SHOAL_BIN picks the binary (default:
# target/release/shoal). See docs/replicas.md.
set -euo pipefail
cd "$(dirname "$0")/.."

data="${1:?usage: scripts/replicas.sh DATA_URL [REPLICAS] [FIRST_PORT]}"
replicas="${2:-2}"
first_port="${3:-8081}"
bin="${SHOAL_BIN:-target/release/shoal}"
front_port="${SHOAL_FRONT_PORT:-8080}"
[ -x "$bin" ] || { echo "no $bin: run cargo build --release first (or set SHOAL_BIN)" >&2; exit 1; }
command -v nginx >/dev/null || { echo "nginx is not installed (apt-get install nginx-light)" >&2; exit 1; }

work="$(mktemp -d)"
pids=()
stop() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap stop EXIT INT TERM

config_args=()
[ -n "${SHOAL_CONFIG:-}" ] && config_args=(--config "$SHOAL_CONFIG")
servers=""
for i in $(seq 0 $((replicas - 1))); do
  port=$((first_port + i))
  "$bin" "${config_args[@]}" serve --data "$data" --listen "127.0.0.1:$port" \
    >"$work/replica-$i.log" 2>&1 &
  pids+=($!)
  servers="$servers        server 127.0.0.1:$port max_fails=1 fail_timeout=5s;\n"
done
for i in $(seq 0 $((replicas - 1))); do
  port=$((first_port + i))
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break
    sleep 0.5
  done
  curl -sf "http://127.0.0.1:$port/healthz" >/dev/null \
    || { echo "replica $i did not start:" >&2; cat "$work/replica-$i.log" >&2; exit 1; }
done

# deploy/nginx.conf with this run's replicas and front port.
python3 - "$work" "$servers" "$front_port" <<'PY'
import re, sys
work, servers, port = sys.argv[1], sys.argv[2].replace("\\n", "\n"), sys.argv[3]
conf = open("deploy/nginx.conf").read()
conf = re.sub(r"(        server 127\.0\.0\.1:\d+ [^\n]*\n)+", servers, conf)
conf = conf.replace("listen 127.0.0.1:8080;", f"listen 127.0.0.1:{port};")
open(f"{work}/nginx.conf", "w").write(conf)
PY
nginx -c "$work/nginx.conf" -p "$work/" &
pids+=($!)
for _ in $(seq 1 50); do
  curl -sf "http://127.0.0.1:$front_port/healthz" >/dev/null && break
  sleep 0.2
done
echo "shoal: $replicas replicas of $data behind http://127.0.0.1:$front_port (logs in $work)"
wait -n "${pids[@]}"
