"""The cuda backend on a GPU machine: agreement with the CPU, and views per second.

    PYTHONPATH=$PWD python scripts/gpu_check.py --out gpu_check.json

Needs torch with CUDA, NumPy and OpenCV; not PyAV or OpenVINO (videos decode with OpenCV).
1. views: fragment views of frames of every clip in sample_videos/ (OpenCV, every 8th frame),
   scored by the pytorch backend (CPU, fp32) and by cuda fp32 and fp16, compared view by view;
2. records: each clip scored by ``vqa.Scorer`` (decoder opencv, default sampling) with pytorch
   fp32 on the CPU and cuda fp32 / fp16, the records' scores compared (issue 20's targets:
   fp32 <= 0.1 points for every clip, fp16 <= 1.0 mean);
3. consistency: padding to a bucket, chunking past the largest and submit() change no output;
4. speed: cuda ``infer()`` views/s at each batch size (graph captured before timing; the
   pinned copy in and out is inside the timing), target >= 15,000, and submit() at 128.
Writes the JSON to --out and prints it; exits 1 when an agreement target is missed.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

import cv2
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from vqa import Scorer  # noqa: E402
from vqa.infer import open_inferencer  # noqa: E402
from vqa.model import load_model_spec  # noqa: E402
from vqa.preprocess import fragments  # noqa: E402

FP32_MAX_POINTS = 0.1
FP16_MEAN_POINTS = 1.0
VIEWS_PER_S_TARGET = 15_000


def clip_views(path: Path, geometry, every: int = 8, limit: int = 64) -> np.ndarray:
    cap = cv2.VideoCapture(str(path))
    views, index = [], 0
    try:
        while len(views) < limit:
            ok, bgr = cap.read()
            if not ok:
                break
            if index % every == 0:
                views.append(fragments(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), geometry=geometry))
            index += 1
    finally:
        cap.release()
    return np.stack(views)


def diff(a: np.ndarray, b: np.ndarray) -> dict:
    d = np.abs(a - b)
    return {"max": round(float(d.max()), 4), "mean": round(float(d.mean()), 4)}


def agreement_views(spec, views: np.ndarray) -> dict:
    with open_inferencer(spec, backend="pytorch", precision="fp32") as cpu:
        ref = cpu.infer(views)
    out = {"views": len(views)}
    for precision in ("fp32", "fp16"):
        with open_inferencer(spec, backend="cuda", precision=precision) as gpu:
            got = gpu.infer(views)
        out[precision] = {"score_points": diff(got[:, 0], ref[:, 0]), "logits": diff(got[:, 1:], ref[:, 1:])}
    return out


def agreement_records(clips: list[Path]) -> dict:
    scores = {}
    for backend, precision in (("pytorch", "fp32"), ("cuda", "fp32"), ("cuda", "fp16")):
        with Scorer(backend=backend, precision=precision, decoder="opencv", workers=0, batch_size=32) as scorer:
            records = [scorer.score(c) for c in clips]
        bad = [(r.path, r.error) for r in records if r.status != "ok"]
        if bad:
            raise SystemExit(f"{backend} {precision}: records not ok: {bad}")
        scores[f"{backend}_{precision}"] = np.array([r.score for r in records], dtype=np.float64)
    ref = scores["pytorch_fp32"]
    return {"clips": [c.name for c in clips], "scores": {k: v.tolist() for k, v in scores.items()},
            "fp32": diff(scores["cuda_fp32"], ref), "fp16": diff(scores["cuda_fp16"], ref)}


def consistency(spec, views: np.ndarray) -> dict:
    """Padding, chunking and submit() change no output: max abs difference, cuda fp32."""
    views = np.resize(views, (600, *views.shape[1:]))
    with open_inferencer(spec, backend="cuda", precision="fp32") as gpu:
        whole = gpu.infer(views)  # buckets 512 + 128
        got: list = [None] * 20
        for i in range(20):  # 20 batches of 30 in flight through submit()
            gpu.submit(views[30 * i:30 * (i + 1)], lambda out, i=i: got.__setitem__(i, out))
        gpu.wait()
        errors = [repr(g) for g in got if not isinstance(g, np.ndarray)]
        return {"padded_5_vs_600": float(np.abs(gpu.infer(views[:5]) - whole[:5]).max()),
                "chunked_vs_32": float(np.abs(gpu.infer(views[:32]) - whole[:32]).max()),
                "submit_vs_infer": None if errors else float(np.abs(np.concatenate(got) - whole).max()),
                "submit_errors": errors}


def speed_submit(spec, views: np.ndarray, batch: int, seconds: float, precision: str) -> int:
    """views/s with batches queued through submit(), as the pool engine does."""
    x = np.resize(views, (batch, *views.shape[1:]))
    with open_inferencer(spec, backend="cuda", precision=precision) as gpu:
        gpu.infer(x)
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            gpu.submit(x, lambda out: None)
            n += batch
        gpu.wait()
        return round(n / (time.perf_counter() - start))


def speed(spec, views: np.ndarray, batches: list[int], seconds: float) -> dict:
    out = {}
    for precision in ("fp32", "fp16"):
        with open_inferencer(spec, backend="cuda", precision=precision) as gpu:
            for batch in batches:
                x = np.resize(views, (batch, *views.shape[1:]))  # real views, repeated
                gpu.infer(x)  # captures this bucket's graph
                n, start = 0, time.perf_counter()
                while time.perf_counter() - start < seconds:
                    gpu.infer(x)
                    n += batch
                out[f"{precision}_batch{batch}"] = round(n / (time.perf_counter() - start))
    for precision in ("fp32", "fp16"):
        out[f"{precision}_batch128_submit"] = speed_submit(spec, views, 128, seconds, precision)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--videos", type=Path, default=REPO / "sample_videos")
    ap.add_argument("--batches", type=int, nargs="+", default=[32, 128, 512])
    ap.add_argument("--seconds", type=float, default=2.0, help="timing per batch size and precision")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    import torch

    spec = load_model_spec()
    clips = sorted(args.videos.glob("*.mp4"))
    views = np.concatenate([clip_views(c, spec.preprocessing) for c in clips])
    result = {"device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
              "torch": torch.__version__}
    parts = {"views": lambda: agreement_views(spec, views), "consistency": lambda: consistency(spec, views),
             "records": lambda: agreement_records(clips),
             "views_per_s": lambda: speed(spec, views, args.batches, args.seconds)}
    for name, part in parts.items():  # one failing part still leaves the others' numbers
        try:
            start = time.perf_counter()
            result[name] = part()
            result[f"{name}_s"] = round(time.perf_counter() - start, 1)
        except Exception:
            result[name] = {"error": traceback.format_exc()}
    rec, vps = result["records"], result["views_per_s"]
    result["targets"] = {
        "records_fp32_max_le_0.1": "fp32" in rec and rec["fp32"]["max"] <= FP32_MAX_POINTS,
        "records_fp16_mean_le_1.0": "fp16" in rec and rec["fp16"]["mean"] <= FP16_MEAN_POINTS,
        "views_per_s_ge_15000": {k: v >= VIEWS_PER_S_TARGET for k, v in vps.items() if k != "error"},
    }
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    agree = result["targets"]["records_fp32_max_le_0.1"] and result["targets"]["records_fp16_mean_le_1.0"]
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
