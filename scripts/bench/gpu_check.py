"""The cuda backend on a GPU machine: agreement with the CPU, and views per second.

    PYTHONPATH=$PWD python scripts/bench/gpu_check.py --out gpu_check.json

Needs torch with CUDA, NumPy and OpenCV; not PyAV or OpenVINO (videos decode with OpenCV).
1. views: fragment views of frames of every clip in sample_videos/ (OpenCV, every 8th frame),
   scored by the pytorch backend (CPU, fp32) and by cuda fp32 and fp16, compared view by view;
2. records: each clip scored by ``vqa.Scorer`` (decoder opencv, default sampling) with pytorch
   fp32 on the CPU and cuda fp32 / fp16, the records' scores compared (issue 20's targets:
   fp32 <= 0.1 points for every clip, fp16 <= 1.0 mean);
3. consistency: padding to a bucket, chunking past the largest and submit() change no output;
4. speed: cuda ``infer()`` views/s at each batch size (graph captured before timing; the
   pinned copy in and out is inside the timing), target >= 15,000, and submit() at 128;
5. variants (``--variants``): the speed options of vqa.infer.cuda (TF32, channels_last,
   cudnn.benchmark before capture) alone and together, fp32 and fp16, each with its agreement
   (views and records, against the same CPU fp32 as above) and its views/s: ``infer()`` at
   128, ``submit()`` at 32 (the engine's batch on cuda) and 128. Candidates only: the
   product's defaults stay as they are until a variant is chosen from these numbers.
Writes the JSON to --out and prints it; exits 1 when an agreement target of the defaults is
missed (not of a variant).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from vqa import Scorer
from vqa.infer import open_inferencer
from vqa.model import load_model_spec
from vqa.preprocess import fragments

REPO = Path(__file__).resolve().parents[2]

# (name, precision, speed options): the first two are the defaults, measured again beside the rest.
VARIANTS = [
    ("fp32", "fp32", {}),
    ("fp16", "fp16", {}),
    ("fp32_tf32", "fp32", {"tf32": True}),
    ("fp32_channels_last", "fp32", {"channels_last": True}),
    ("fp32_benchmark", "fp32", {"cudnn_benchmark": True}),
    ("fp32_tf32_channels_last_benchmark", "fp32", {"tf32": True, "channels_last": True, "cudnn_benchmark": True}),
    ("fp16_channels_last", "fp16", {"channels_last": True}),
    ("fp16_channels_last_benchmark", "fp16", {"channels_last": True, "cudnn_benchmark": True}),
    ("fp16_autocast", "fp16", {"half_weights": False}),
    ("fp16_channels_last_autocast", "fp16", {"half_weights": False, "channels_last": True}),
]
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


@contextlib.contextmanager
def speed_options(**options):
    """Every cuda inferencer opened inside (by open_inferencer or a workers=0 Scorer) gets these."""
    from vqa.infer import cuda

    saved = dict(cuda.SPEED_OPTIONS)
    cuda.SPEED_OPTIONS.update(options)
    try:
        yield
    finally:
        cuda.SPEED_OPTIONS.clear()
        cuda.SPEED_OPTIONS.update(saved)


def cpu_reference(spec, views: np.ndarray, clips: list[Path]) -> tuple[np.ndarray, np.ndarray]:
    """pytorch fp32 on the CPU: the views' outputs and the clips' record scores."""
    with open_inferencer(spec, backend="pytorch", precision="fp32") as cpu:
        outputs = cpu.infer(views)
    return outputs, record_scores(clips, "pytorch", "fp32")


def record_scores(clips: list[Path], backend: str, precision: str) -> np.ndarray:
    with Scorer(backend=backend, precision=precision, decoder="opencv", workers=0, batch_size=32) as scorer:
        records = [scorer.score(c) for c in clips]
    bad = [(r.path, r.error) for r in records if r.status != "ok"]
    if bad:
        raise RuntimeError(f"{backend} {precision}: records not ok: {bad}")
    return np.array([r.score for r in records], dtype=np.float64)


def timed(run, batch: int, seconds: float) -> tuple[int, float]:
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        run()
        n += batch
    return n, start


def variant(spec, views: np.ndarray, clips: list[Path], ref_views: np.ndarray, ref_records: np.ndarray,
            precision: str, options: dict, seconds: float) -> dict:
    """One speed variant: its agreement with the CPU and its views/s."""
    out: dict = {"precision": precision, "options": options}
    with speed_options(**options):
        with open_inferencer(spec, backend="cuda", precision=precision) as gpu:
            got = gpu.infer(views)
            out["views"] = {"score_points": diff(got[:, 0], ref_views[:, 0]), "logits": diff(got[:, 1:], ref_views[:, 1:])}
            for batch, how in ((128, "infer"), (32, "submit"), (128, "submit")):
                x = np.resize(views, (batch, *views.shape[1:]))
                gpu.infer(x)  # captures the bucket
                if how == "infer":
                    n, start = timed(lambda x=x: gpu.infer(x), batch, seconds)
                else:
                    n, start = timed(lambda x=x: gpu.submit(x, lambda out: None), batch, seconds)
                    gpu.wait()
                out[f"{how}_batch{batch}_views_per_s"] = round(n / (time.perf_counter() - start))
        scores = record_scores(clips, "cuda", precision)
    out["records"] = {"scores": scores.tolist(), **diff(scores, ref_records)}
    out["agrees"] = (out["records"]["max"] <= FP32_MAX_POINTS if precision == "fp32"
                     else out["records"]["mean"] <= FP16_MEAN_POINTS)
    out["ge_15000"] = {k: v >= VIEWS_PER_S_TARGET for k, v in out.items() if k.endswith("_views_per_s")}
    return out


def variants(spec, views: np.ndarray, clips: list[Path], seconds: float, only=None) -> dict:
    ref_views, ref_records = cpu_reference(spec, views, clips)
    out: dict = {"cpu_fp32_records": ref_records.tolist()}
    for name, precision, options in VARIANTS:
        if only and name not in only and name not in ("fp32", "fp16"):
            continue
        try:
            start = time.perf_counter()
            out[name] = variant(spec, views, clips, ref_views, ref_records, precision, options, seconds)
            out[name]["seconds"] = round(time.perf_counter() - start, 1)
        except Exception:
            out[name] = {"precision": precision, "options": options, "error": traceback.format_exc()}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--videos", type=Path, default=REPO / "sample_videos")
    ap.add_argument("--batches", type=int, nargs="+", default=[32, 128, 512])
    ap.add_argument("--seconds", type=float, default=2.0, help="timing per batch size and precision")
    ap.add_argument("--variants", action="store_true", help="also measure the speed options (part 5)")
    ap.add_argument("--only", action="append", default=None, metavar="NAME",
                    help="part 5: measure these variants alone (repeatable; the two defaults always run)")
    ap.add_argument("--variant-seconds", type=float, default=1.0, help="timing per point of part 5")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    import torch

    spec = load_model_spec()
    clips = sorted(args.videos.glob("*.mp4"))
    views = np.concatenate([clip_views(c, spec.preprocessing) for c in clips])
    result: dict[str, Any] = {"device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
              "torch": torch.__version__}
    parts = {"views": lambda: agreement_views(spec, views), "consistency": lambda: consistency(spec, views),
             "records": lambda: agreement_records(clips),
             "views_per_s": lambda: speed(spec, views, args.batches, args.seconds)}
    if args.variants:
        parts["variants"] = lambda: variants(spec, views, clips, args.variant_seconds, args.only)
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
    if isinstance(result.get("variants"), dict) and "error" not in result["variants"]:
        result["variants_summary"] = {  # one line per variant: agreement and views/s
            name: {k: v[k] for k in ("agrees", "infer_batch128_views_per_s", "submit_batch32_views_per_s",
                                     "submit_batch128_views_per_s") if k in v} | {"records_max": v["records"]["max"],
                                                                                  "records_mean": v["records"]["mean"]}
            if "records" in v else {"error": True}
            for name, v in result["variants"].items() if name != "cpu_fp32_records"}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    agree = result["targets"]["records_fp32_max_le_0.1"] and result["targets"]["records_fp16_mean_le_1.0"]
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
