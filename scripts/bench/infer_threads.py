"""Inference views per second by thread count, one backend, on zero views (issue 18): the
ceiling a folder job's inference puts on it when the decode workers take the other cores.
Batches go in as the pool engine sends them (``submit``, its requests in flight at once), and
as one call at a time (``infer``).

    python scripts/bench/infer_threads.py --backend openvino:fp32 --threads 8 15 --batch-size 4 16 --out F.json
    python scripts/bench/infer_threads.py --backend cuda:fp16 --threads 1 --batch-size 32 --mosaic-region 43

A folder row whose videos/min times the views per video reaches this ceiling at its thread
count is held back by inference, not by its decode workers.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from vqa.bench.studies import parse_backends, time_infer
from vqa.infer import MOSAIC_MAX_REGION, open_inferencer
from vqa.model import load_model_spec
from vqa.preprocess import TRAINING


def submitted(inferencer, views: np.ndarray, seconds: float, region: int = 0, pinned: bool = True) -> dict:
    """Views per second with batches submitted as fast as the inferencer takes them; with
    ``region``, as ring rows holding mosaics of that region size (``submit_rows``, the views
    finished by the inferencer, as the pool engine sends 720p frames to cuda), from memory
    given to ``Inferencer.pin`` as the engine gives its ring, or not (``pinned``)."""
    for _ in range(4):
        inferencer.infer(views)
    done: list = []
    unpin = lambda: None  # noqa: E731
    if region:
        side = max(MOSAIC_MAX_REGION, region) * TRAINING.grid
        rows = np.full((len(views), side * side * 3), 128, np.uint8)  # real pages, not calloc's zero page
        if pinned:
            unpin = inferencer.pin(rows)
        send = lambda: inferencer.submit_rows(rows, [region] * len(rows), done.append)  # noqa: E731
    else:
        send = lambda: inferencer.submit(views, done.append)  # noqa: E731
    try:
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            for _ in range(16):
                send()
            inferencer.wait()
        elapsed = time.perf_counter() - start
    finally:
        unpin()
    return {"calls": len(done), "views_per_s": round(len(done) * len(views) / elapsed, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="openvino:fp32", metavar="NAME:PRECISION")
    ap.add_argument("--threads", type=int, nargs="+", required=True)
    ap.add_argument("--batch-size", type=int, nargs="+", default=[4])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--mode", default="throughput", help="the folder job's mode (default: throughput)")
    ap.add_argument("--mosaic-region", type=int, default=0,
                    help="also submit ring rows of mosaics of this region size (43: a 720p frame's)")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    (backend, precision), = parse_backends([a.backend])
    spec = load_model_spec()
    rows = []
    for threads in a.threads:
        inferencer = open_inferencer(spec, backend=backend, precision=precision, threads=threads, mode=a.mode)
        try:
            for batch in a.batch_size:
                views = np.zeros((batch, spec.view_size, spec.view_size, 3), dtype=np.uint8)
                one = time_infer(inferencer, views, batch, seconds=a.seconds)
                row = {"threads": threads, "batch_size": batch,
                       "submitted": submitted(inferencer, views, a.seconds), "one_call_at_a_time": one}
                if a.mosaic_region:
                    row["submitted_rows"] = {"region": a.mosaic_region,
                                             **submitted(inferencer, views, a.seconds, a.mosaic_region)}
                    row["submitted_rows_staged"] = {"region": a.mosaic_region,
                                                    **submitted(inferencer, views, a.seconds, a.mosaic_region, False)}
                rows.append(row)
        finally:
            inferencer.close()
    out = {"backend": f"{backend}:{precision}", "cores": os.cpu_count(), "views": "zeros", "rows": rows}
    text = json.dumps(out, indent=1)
    if a.out:
        a.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
