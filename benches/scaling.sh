#!/usr/bin/env bash
# Thread scaling of the shared scan against FAISS, on the cores present
# (issue 27's table): builds shoal, then runs benches/peers/scaling.py with
# a Python that has faiss-cpu and numpy ($PEERS_PYTHON, or a virtualenv
# made on first use in ~/peers-venv). Arguments go to scaling.py, e.g.
#   benches/scaling.sh --rows 1000000 --passes 3 --out scaling.json
# See `python benches/peers/scaling.py --help`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PEERS_PYTHON:-}"
if [ -z "$PY" ]; then
    PY="$HOME/peers-venv/bin/python"
    if [ ! -x "$PY" ]; then
        echo "making $HOME/peers-venv (faiss-cpu, numpy) ..." >&2
        python3 -m venv "$HOME/peers-venv"
        "$HOME/peers-venv/bin/pip" install -q faiss-cpu numpy
    fi
fi
SHOAL="${SHOAL:-target/release/shoal}"
if [ -z "${SHOAL_SKIP_BUILD:-}" ]; then
    cargo build --release --locked >&2
fi
exec "$PY" benches/peers/scaling.py --shoal "$SHOAL" "$@"
