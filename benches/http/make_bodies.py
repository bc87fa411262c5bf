#!/usr/bin/env python3
"""Writes search bodies for benches/http/bodies.lua: 256 bodies cycling over
the first 64 vectors of an .fvecs file, each with one of N filters.

  make_bodies.py QUERIES.fvecs N [TEMPLATE] > bodies.jsonl

With SHOAL_BODY_ENCODING=base64 in the environment the vectors are
written as base64 of their little-endian float32 bytes (the compact form
the API accepts) instead of numbers rounded to 6 decimals.

N = 0 writes bodies without a filter. TEMPLATE (default "len < 30") is the
filter; with N > 1, "{i}" in it is replaced by the filter number, and a
template without "{i}" becomes "(TEMPLATE) AND id <> -(i+1)": N distinct
filters admitting the same rows. The special template "issue23" gives the
filters of issue 23's table: len < 15 ... len < 30 (then, past 16, AND'ed
with id <> -(i/16+1) so that they stay distinct).
"""
import base64
import json
import os
import struct
import sys


def vectors(path, count):
    out = []
    with open(path, "rb") as f:
        while len(out) < count:
            head = f.read(4)
            if len(head) < 4:
                break
            (dim,) = struct.unpack("<i", head)
            out.append(list(struct.unpack(f"<{dim}f", f.read(4 * dim))))
    return out


def filters(n, template):
    if n == 0:
        return [None]
    if template == "issue23":
        return [
            f"len < {15 + i % 16}" + (f" AND id <> -{i // 16 + 1}" if n > 16 else "")
            for i in range(n)
        ]
    if n == 1:
        return [template.replace("{i}", "0")]
    if "{i}" in template:
        return [template.replace("{i}", str(i)) for i in range(n)]
    return [f"({template}) AND id <> -{i + 1}" for i in range(n)]


def main():
    path, n = sys.argv[1], int(sys.argv[2])
    template = sys.argv[3] if len(sys.argv) > 3 else "len < 30"
    vs = vectors(path, 64)
    fs = filters(n, template)
    for i in range(max(256, len(fs))):
        v = vs[i % len(vs)]
        if os.environ.get("SHOAL_BODY_ENCODING") == "base64":
            packed = base64.b64encode(struct.pack(f"<{len(v)}f", *v)).decode()
            body = {"vector": packed, "k": 10}
        else:
            body = {"vector": [round(x, 6) for x in v], "k": 10}
        f = fs[i % len(fs)]
        if f is not None:
            body["filter"] = f
        print(json.dumps(body))


if __name__ == "__main__":
    main()
