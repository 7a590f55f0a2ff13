"""Views per second of OpenVINO IRs side by side: each compiled once and warmed, then timed in
turns, round after round, so a busy machine slows them alike. The ratio to the first IR is the
figure to quote.

    git show 70f2c78:models/vqa-effl0-int8.xml > /tmp/old-int8.xml    # and its .bin beside it
    python scripts/bench/ir_speed.py models/vqa-effl0.xml models/vqa-effl0-int8.xml /tmp/old-int8.xml \
        --out docs/model/results/judgement-v4/2026-12-07-distill/int8_speed.json
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np


def main() -> None:
    import openvino as ov

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("irs", type=Path, nargs="+", help="IR .xml files; the first is the baseline")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=5, help="calls per IR per round")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    views = np.random.default_rng(0).integers(0, 256, (a.batch_size, 224, 224, 3), dtype=np.uint8)
    core = ov.Core()
    compiled = [core.compile_model(str(p), "CPU", {"INFERENCE_NUM_THREADS": a.threads}) for p in a.irs]
    for c in compiled:
        c(views)
    rates: list[list[float]] = [[] for _ in compiled]
    for _ in range(a.rounds):
        for c, r in zip(compiled, rates):
            t0 = time.perf_counter()
            for _ in range(a.calls):
                c(views)
            r.append(a.calls * a.batch_size / (time.perf_counter() - t0))
    median = [float(np.median(r)) for r in rates]
    res = {"command": "python scripts/bench/ir_speed.py " + " ".join(map(str, a.irs)),
           "threads": a.threads, "batch_size": a.batch_size, "rounds": a.rounds,
           "irs": [{"ir": str(p), "views_per_s": m, "to_first": m / median[0], "rounds": r}
                   for p, m, r in zip(a.irs, median, rates)]}
    text = json.dumps(res, indent=1)
    if a.out:
        a.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
