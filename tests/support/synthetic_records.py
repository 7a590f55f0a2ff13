"""Synthetic ``vqa score`` records made by code, for report tests at scale (no video needed).

    records = synthetic_records(10_000)      # deterministic, with timelines and failures
"""
from __future__ import annotations

import random

from vqa.aggregate import category as _category
from vqa.model import load_model_spec
from vqa.types import MODEL_DEFECTS

_DECISION = load_model_spec().decision


def category(score: float) -> str:
    return _category(score, _DECISION)


HOSTILE_NAME = "<img src=x onerror=alert(1)>.mp4"
ERROR_CODES = ("E_NOT_VIDEO", "E_DECODE", "E_TIMEOUT", "E_EMPTY")
MODEL = {"name": "vqa-effl0", "version": "2.0.0", "sha256": "9" * 64}
CONFIG = {"sampling": "default", "backend": "openvino", "batch_size": 4, "decoder": "pyav",
          "precision": "fp32", "mode": "throughput", "timeline": True}


def timeline(duration_s: float, frames: int, rng: random.Random) -> list[dict]:
    base = rng.uniform(20, 95)
    out = []
    for k in range(frames):
        t = duration_s * (k + 0.5) / frames
        point = {"t_s": round(t, 3), "score": round(min(100.0, max(0.0, base + rng.gauss(0, 4))), 2)}
        point.update((d, round(rng.random() ** 4, 3)) for d in MODEL_DEFECTS)
        point["black"], point["frozen"] = k > frames * 0.95, 0.4 * frames < k < 0.45 * frames
        out.append(point)
    return out


def synthetic_records(n: int, *, seed: int = 0, frames: int = 32, with_timeline: bool = True) -> list[dict]:
    """``n`` records: one in 10 an error, one in 50 with a hostile path, the rest ok with defects."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        path = f"uploads/{i:05d}/{HOSTILE_NAME if i % 50 == 7 else f'clip {i}.mp4'}"
        if i % 10 == 3:
            out.append({"path": path, "status": "error", "score": None, "category": None, "defects": [],
                        "video": None, "frames": {}, "model": dict(MODEL), "config": dict(CONFIG),
                        "error": {"code": ERROR_CODES[i % len(ERROR_CODES)],
                                  "message": "</script><script>alert(2)</script> & more"},
                        "warnings": []})
            continue
        duration = rng.choice((4.0, 30.0, 600.0))
        points = timeline(duration, frames, rng) if with_timeline else None
        score = round(sum(p["score"] for p in points) / len(points), 1) if points else round(rng.uniform(0, 100), 1)
        defects = []
        for kind in rng.sample(("blur", "noise", "compression", "frozen", "black"), rng.randint(0, 2)):
            start = round(rng.uniform(0, duration * 0.8), 3)
            defects.append({"type": kind, "severity": round(rng.uniform(0.4, 1), 3), "start_s": start,
                            "end_s": round(min(duration, start + duration * 0.15), 3)})
        record = {"path": path, "status": "ok", "score": score, "category": category(score), "defects": defects,
                  "video": {"width": 1280, "height": 720, "fps": 25.0, "duration_s": duration, "codec": "h264",
                            "rotation": 0, "frame_count": int(duration * 25), "pixel_format": "yuv420p",
                            "size_bytes": 1000, "fingerprint": "0" * 32},
                  "frames": {"sampled": frames, "decoded": frames, "decode_errors": 0}, "model": dict(MODEL),
                  "config": dict(CONFIG), "sampling": {"mode": "default", "requested": 32, "runs": 8, "run_length": 4},
                  "error": None, "warnings": ["W_VARIABLE_FPS: <b>bold</b>"] if i % 13 == 0 else []}
        if points is not None:
            record["timeline"] = points
        out.append(record)
    return out
