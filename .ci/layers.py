#!/usr/bin/env python3
"""Fails on an upward import between shoal's layers (see ARCHITECTURE.md).

Every module under src/ has a layer; a file may name (`crate::x`) only
modules of its own layer or below. The binary (src/main.rs, src/cli/) and
the crate root's re-exports (src/lib.rs) sit above everything. A module
missing from LAYERS is an error too, so a new module must be placed.
Prints one line per violation; prints nothing and exits 0 when clean.
"""
import pathlib
import re
import sys

LAYERS = {
    "error": 0, "config": 0, "sync": 0, "cancel": 0, "progress": 0,
    "kernel": 1,
    "storage": 2, "demo": 2,
    "index": 3,
    "query": 4,
    "exec": 5,
    "db": 6,
    "serve": 7,
    "http": 8,
}
TOP = {"main", "lib", "cli"}

src = pathlib.Path(__file__).resolve().parent.parent / "src"
bad = []
for path in sorted(src.rglob("*.rs")):
    module = path.relative_to(src).parts[0].removesuffix(".rs")
    if module in TOP:
        continue
    if module not in LAYERS:
        bad.append(f"{path.relative_to(src.parent)}: module '{module}' has no layer in .ci/layers.py")
        continue
    for n, line in enumerate(path.read_text().splitlines(), 1):
        code = line.split("//", 1)[0]
        targets = re.findall(r"\bcrate::(\w+)", code)
        for group in re.findall(r"\bcrate::\{([^}]*)", code):
            targets += re.findall(r"(?:^|,)\s*(\w+)", group)
        for target in targets:
            if target not in LAYERS:
                bad.append(f"{path.relative_to(src.parent)}:{n}: '{target}' has no layer")
            elif LAYERS[target] > LAYERS[module]:
                bad.append(
                    f"{path.relative_to(src.parent)}:{n}: {module} (layer {LAYERS[module]}) "
                    f"imports {target} (layer {LAYERS[target]})"
                )
print("\n".join(bad))
sys.exit(1 if bad else 0)
