"""Records of the same clips through the pool engine on several backends, compared with the first.

    PYTHONPATH=$PWD python scripts/bench/gpu_records.py --out records.json sample_videos/*.mp4 \\
        --backend openvino:fp32 --backend cuda:fp32 --backend cuda:fp16 [--decoder nvdec]

What a user runs (``vqa.Scorer`` with decode workers and the default decoder), where
scripts/bench/gpu_check.py scores in one process with OpenCV: issue 20's tolerances are fp32 within
0.1 points of the CPU for every clip and fp16 within 1.0 on mean. scripts/bench/device_bench.sh runs it
first in its folder phase: a backend that fails here is left out of the folder study, so the
other backends' numbers still come back. Exits 1 when a backend fails or misses its tolerance.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

import numpy as np


from vqa import Scorer
from vqa.bench.folder import decoder_spec
from vqa.bench.studies import parse_backends

FP32_MAX_POINTS = 0.1
FP16_MEAN_POINTS = 1.0


def scores(clips: list[str], backend: str, precision: str, workers: int | None, decoder: str = "pyav") -> dict:
    start = time.perf_counter()
    # "pyav+nvdec:N": NVDEC workers beside the CPU ones; "nvdec:P": the GPU engine in P processes
    with Scorer(backend=backend, precision=precision, workers=workers, **decoder_spec(decoder)) as scorer:
        ready = time.perf_counter()
        records = list(scorer.score_many(clips))
        split = {"workers": scorer.workers, "inference_threads": scorer.threads}
    bad = [(r.path, r.error) for r in records if not r.ok]
    if bad:
        raise RuntimeError(f"{backend}:{precision}: records not ok: {bad}")
    return {"scores": [r.score for r in records], "categories": [r.category for r in records], **split,
            "warnings": sorted({w.split(":")[0] for r in records for w in r.warnings}),
            "warnings_by_clip": {Path(r.path).name: r.warnings for r in records if r.warnings},
            "ready_s": round(ready - start, 2), "score_s": round(time.perf_counter() - ready, 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("clips", nargs="+")
    ap.add_argument("--backend", dest="backends", action="append", required=True, metavar="NAME:PRECISION")
    ap.add_argument("--workers", type=int, default=None, help="decode workers (default: auto)")
    ap.add_argument("--decoder", dest="decoders", action="append", default=None,
                    help="decoder, repeatable, crossed with each backend after pyav's rows (default: pyav); "
                         "pyav+nvdec:N adds N NVDEC workers beside the CPU ones")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    result: dict = {"clips": [Path(c).name for c in args.clips], "backends": {}}
    ok = True
    first = None
    decoders = ["pyav"] + [d for d in (args.decoders or []) if d != "pyav"]
    for decoder, (backend, precision) in [(d, b) for d in decoders for b in parse_backends(args.backends)]:
        label = f"{backend}:{precision}" + ("" if decoder == "pyav" else f"+{decoder}")
        try:
            row = scores(args.clips, backend, precision, args.workers, decoder)
        except Exception:
            result["backends"][label] = {"error": traceback.format_exc()}
            ok = False
            continue
        if first is None:
            first = np.array(row["scores"], dtype=np.float64)
            result["reference"] = label
        else:
            d = np.abs(np.array(row["scores"], dtype=np.float64) - first)
            row["vs_reference"] = {"max": round(float(d.max()), 3), "mean": round(float(d.mean()), 4)}
            row["agrees"] = bool(d.max() <= FP32_MAX_POINTS if precision == "fp32" else d.mean() <= FP16_MEAN_POINTS)
            ok = ok and row["agrees"]
        result["backends"][label] = row
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
