#!/usr/bin/env python3
"""The crate graph is the architecture: checks it (`make lint`, CI).

Each workspace crate has a layer (ARCHITECTURE.md draws them). A crate may depend, in any
dependency kind, only on zcpipe crates of a lower layer: sys is at the bottom, the stages
never name each other, nothing names the application, and the ABI fakes name no zcpipe crate
at all. Prints the graph, one crate a line, and one line per edge that breaks the rule.
"""
import json
import subprocess
import sys

LAYERS = {
    "zcpipe-sys": 0,
    "zcpipe-core": 1,
    "zcpipe-track": 2,
    "zcpipe-convert": 2,
    "zcpipe-clips": 2,
    "zcpipe-capture": 3,
    "zcpipe-scale": 3,
    "zcpipe-infer": 3,
    "zcpipe-publish": 3,
    "zcpipe-display": 3,
    "zcpipe-record": 3,
    "zcpipe": 4,
}
FAKES = ("zcpipe-fake-",)


def main() -> int:
    meta = json.loads(subprocess.check_output(
        ["cargo", "metadata", "--format-version", "1", "--no-deps", "--offline"]))
    bad = []
    for pkg in sorted(meta["packages"], key=lambda p: LAYERS.get(p["name"], -1)):
        name = pkg["name"]
        deps = sorted({d["name"] for d in pkg["dependencies"] if d["name"].startswith("zcpipe")})
        normal = sorted({d["name"] for d in pkg["dependencies"]
                         if d["name"].startswith("zcpipe") and d["kind"] is None})
        print(f"{name} -> {', '.join(normal) or '(no zcpipe crate)'}")
        if name.startswith(FAKES):
            bad += [f"{name} names {d}: a fake stands for a vendor library and knows no zcpipe crate" for d in deps]
            continue
        if name not in LAYERS:
            bad.append(f"{name} has no layer: add it to scripts/layers.py and to ARCHITECTURE.md's graph")
            continue
        for d in deps:
            if d not in LAYERS:
                bad.append(f"{name} names {d}, which has no layer")
            elif LAYERS[d] >= LAYERS[name]:
                kind = "another stage" if LAYERS[d] == LAYERS[name] == 3 else "a crate at or above its own layer"
                bad.append(f"{name} (layer {LAYERS[name]}) names {d} (layer {LAYERS[d]}): {kind}")
    for b in bad:
        print(f"layers: {b}", file=sys.stderr)
    if not bad:
        print("layers: every crate names only crates below it")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
