"""Benchmarks: how fast the model runs per batch size, and where the time of scoring goes.

Two studies, each returning a plain JSON-able dict:

* ``batch_study``: inference alone. For each backend/precision and batch size, warm up, then
  time ``Inferencer.infer`` on real fragment views (cut from the clip's frames) for a fixed
  window; median and p90 latency per call, and views per second.
* ``pipeline_study``: one clip scored four ways, each measured once, one after the other:
  ``naive`` (the original service: one process, cv2.VideoCapture reading sequentially,
  fragments, PyTorch at batch 1), ``engine`` (``vqa.Scorer``: decode workers plus OpenVINO at
  batch 16, model loaded before the clock starts, worker start-up on the clock), and two
  floors: ``decode_floor`` (PyAV with FFmpeg frame threading on every core, frames to RGB,
  nothing else) and ``infer_floor`` (OpenVINO fp32 on the same number of views, already in
  memory, at the best batch size).

``run_benchmark`` runs them (and vqa.bench.engine's studies) on one clip; vqa.bench.report renders
the tables the CLI prints.

Single measurements on a shared machine are noisy: the load average is recorded before and
after each study, and the numbers are for comparing side by side, not as absolutes.
Torch is imported only when a pytorch backend is measured (the naive baseline uses it).
"""
from __future__ import annotations

import os
import platform
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..codes import ErrorCode
from ..errors import BackendUnavailable, ModelError, UsageError
from ..infer import BACKENDS, BY_NAME_ONLY, open_inferencer
from ..model import ModelSpec, load_model_spec
from ..preprocess import fragments
from ..sample import plan_frames
from ..threads import usable_cores
from .common import NOISE_NOTE, decode_floor, load_avg, ratio

DEFAULT_BACKENDS: tuple[tuple[str, str], ...] = (("openvino", "fp32"), ("openvino", "int8"), ("pytorch", "fp32"))
DEFAULT_BATCH_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
DEFAULT_SECONDS = 1.0  # timing window per (backend, precision, batch size) point
WARMUP_CALLS = 2  # untimed calls first: one-off allocations, kernel selection, caches
MIN_CALLS = 3  # timed calls per point even when one call outlasts the window
VIEW_POOL = 32  # distinct real views cut from the clip; batches cycle through them
NAIVE_BACKEND = ("pytorch", "fp32")
STUDIES = ("batch", "pipeline", "startup", "concurrency", "streaming")
DEFAULT_STUDIES = ("batch", "pipeline", "startup")
# --quick: under a minute on a 10 s 1080p clip on 2 cores (no PyTorch, the default sampling).
QUICK: dict[str, Any] = {
    "backends": (("openvino", "fp32"), ("openvino", "int8")), "batch_sizes": (1, 4, 8), "seconds": 0.3,
    "frames": "default", "startup_runs": 1, "streaming_paths": 100_000, "per_thread": 2}


def parse_backends(values: Sequence[str]) -> list[tuple[str, str]]:
    """``["openvino", "pytorch:fp32"]`` -> ``[("openvino", "fp32"), ("openvino", "int8"),
    ("pytorch", "fp32")]``: a name alone means every precision that backend runs on any
    machine (bf16 needs a CPU with bfloat16 instructions: asked for by name only)."""
    out = []
    for value in values:
        name, _, precision = str(value).partition(":")
        precisions = BACKENDS[name][3] if name in BACKENDS else ()
        if not precisions or (precision and precision not in precisions):
            choices = ", ".join(f"{b}[:{'|'.join(spec[3])}]" for b, spec in BACKENDS.items())
            raise UsageError(f"unknown backend {value!r}; choose from {choices}")
        out += [(name, precision)] if precision else [(name, p) for p in precisions if p not in BY_NAME_ONLY]
    return out


def _spec(spec: ModelSpec | str | os.PathLike | None) -> ModelSpec:
    return spec if isinstance(spec, ModelSpec) else load_model_spec(spec)


def clip_views(path: str | os.PathLike, count: int = VIEW_POOL) -> np.ndarray:
    """(count, S, S, 3) uint8 fragment views of ``count`` frames spread over the clip (fewer if
    the clip is shorter), decoded with the package's default reader."""
    from ..decode import open_video  # the decode stage, imported when a clip is read

    with open_video(path) as reader:
        views = [fragments(f.rgb) for f in reader.read(plan_frames(reader.info, count, run_length=1))]
    if not views:
        raise UsageError(f"no frame of {os.fspath(path)!r} could be decoded for benchmark views")
    return np.stack(views)


def _batches(views: np.ndarray, batch_size: int, total: int) -> list[np.ndarray]:
    """``total`` views as contiguous batches of ``batch_size`` (the last may be short), taken
    cyclically from ``views``: the arrays exist before any clock starts."""
    index = np.arange(total) % len(views)
    return [np.ascontiguousarray(views[index[i:i + batch_size]]) for i in range(0, total, batch_size)]


def time_infer(inferencer, views: np.ndarray, batch_size: int, *, seconds: float = DEFAULT_SECONDS,
               warmup: int = WARMUP_CALLS, min_calls: int = MIN_CALLS) -> dict:
    """Warm up, then call ``inferencer.infer`` on one batch for ``seconds`` (at least ``min_calls``
    times). Latencies are per call (one batch); views_per_s counts every view of every call."""
    batch = _batches(views, batch_size, batch_size)[0]
    for _ in range(warmup):
        inferencer.infer(batch)
    latencies: list[float] = []
    start = time.perf_counter()
    while len(latencies) < min_calls or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        inferencer.infer(batch)
        latencies.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - start
    ms = np.array(latencies) * 1000
    return {"batch_size": batch_size, "calls": len(latencies),
            "latency_ms_median": round(float(np.median(ms)), 3),
            "latency_ms_p90": round(float(np.percentile(ms, 90)), 3),
            "views_per_s": round(batch_size * len(latencies) / elapsed, 2)}


def _open(spec: ModelSpec, backend: str, precision: str, threads: int | None):
    """An inferencer, or the reason this backend/precision cannot run here (skipped, not failed)."""
    try:
        # latency: the batch study times each call alone
        return open_inferencer(spec, backend=backend, precision=precision, threads=threads, mode="latency"), None
    except BackendUnavailable as e:
        return None, e.message
    except ModelError as e:
        if e.code == ErrorCode.E_MODEL_MISSING:  # e.g. a manifest without the int8 model
            return None, e.message
        raise
    except UsageError as e:  # a precision this backend does not run
        return None, e.message


def batch_study(spec: ModelSpec | str | os.PathLike | None = None, *, clip: str | os.PathLike | None = None,
                views: np.ndarray | None = None,
                backends: Sequence[tuple[str, str]] = DEFAULT_BACKENDS,
                batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES, seconds: float = DEFAULT_SECONDS,
                threads: int | None = None) -> dict:
    """Latency and throughput of ``infer`` per backend/precision and batch size.

    ``spec`` is a ModelSpec or a model folder (None: the installed model). The views are
    ``views`` or, given ``clip``, ``clip_views(clip)``. A backend whose package is missing,
    or a precision the manifest lacks, is listed under ``skipped`` with the reason.

    Returns ``{"study": "batch", "rows": [{"backend", "precision", "batch_size", "calls",
    "latency_ms_median", "latency_ms_p90", "views_per_s"}...], "best": {"backend/precision":
    {"batch_size", "views_per_s"}}, "skipped": [{"backend", "precision", "reason"}], ...}``.
    """
    if views is None and clip is None:
        raise UsageError("batch_study needs real views: pass clip= (a video) or views= (N,S,S,3 uint8)")
    if not batch_sizes or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in batch_sizes):
        raise UsageError(f"batch sizes must be integers >= 1, got {list(batch_sizes)!r}")
    if not seconds > 0:
        raise UsageError(f"seconds must be > 0, got {seconds!r}")
    spec = _spec(spec)
    load_start = load_avg()
    if views is None:
        assert clip is not None  # checked above
        views = clip_views(clip)
    rows, skipped, best = [], [], {}
    for backend, precision in backends:
        inferencer, reason = _open(spec, backend, precision, threads)
        if inferencer is None:
            skipped.append({"backend": backend, "precision": precision, "reason": reason})
            continue
        with inferencer:
            for b in batch_sizes:
                rows.append({"backend": backend, "precision": precision,
                             **time_infer(inferencer, views, b, seconds=seconds)})
        mine = [r for r in rows if (r["backend"], r["precision"]) == (backend, precision)]
        top = max(mine, key=lambda r: r["views_per_s"])
        best[f"{backend}/{precision}"] = {"batch_size": top["batch_size"], "views_per_s": top["views_per_s"]}
    return {"study": "batch", "rows": rows, "best": best, "skipped": skipped,
            "views": {"distinct": len(views), "size": int(views.shape[1]),
                      "source": os.fspath(clip) if clip is not None else "given"},
            "seconds_per_point": seconds, "warmup_calls": WARMUP_CALLS, "threads": threads,
            "load_avg": {"start": load_start, "end": load_avg()}, "note": NOISE_NOTE}


# --- pipeline study ------------------------------------------------------------------------

def _naive(path: str, plan, inferencer) -> tuple[float, int]:
    """The original service: cv2.VideoCapture reads every frame in order, the plan's frames are
    cut into fragments and inferred one at a time. Deliberately not vqa.decode: this is the
    baseline being measured, as it was written."""
    import cv2  # the baseline's own decoder

    tol = 1e-6
    runs, k, taken, done = plan.runs, 0, 0, 0
    start = time.perf_counter()
    cap = cv2.VideoCapture(path)
    try:
        while k < len(runs) and cap.grab():
            t = cap.get(cv2.CAP_PROP_POS_MSEC) / 1000.0
            while k < len(runs) - 1 and (t >= runs[k].span_end_s - tol or 0 < runs[k].count <= taken):
                k, taken = k + 1, 0
            run = runs[k]
            if t < run.start_s - tol or 0 < run.count <= taken:
                if k == len(runs) - 1 and 0 < run.count <= taken:
                    break  # the plan is done
                continue
            ok, bgr = cap.retrieve()
            if not ok:
                continue
            view = fragments(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))
            inferencer.infer(view[None])
            taken += 1
            done += 1
    finally:
        cap.release()
    return time.perf_counter() - start, done


def _infer_floor(inferencer, views: np.ndarray, total: int, batch_size: int) -> float:
    batches = _batches(views, batch_size, total)
    inferencer.infer(batches[0])  # warm-up, off the clock
    start = time.perf_counter()
    for batch in batches:
        inferencer.infer(batch)
    return time.perf_counter() - start


def _engine(path: str, spec: ModelSpec, frames, workers: int | None) -> tuple[float, dict]:
    """The Scorer with the settings `vqa score` uses (batch size, mode, workers, threads)."""
    from ..scorer.local import Scorer

    with Scorer(backend="openvino", frames=frames, workers=workers,
                model_dir=spec.directory) as scorer:  # model loaded and workers started here
        start = time.perf_counter()
        record = scorer.score(path)
        seconds = time.perf_counter() - start
        workers, threads, mode = scorer.workers, scorer.threads, scorer.config["mode"]
        batch = scorer.resolved.batch_size
    if not record.ok:
        raise UsageError(f"the engine could not score {path!r}: {record.error}")
    return seconds, {"workers": workers, "inference_threads": threads, "backend": "openvino", "precision": "fp32",
                     "mode": mode, "batch_size": batch, "sampling": frames,
                     "frames_sampled": record.frames["sampled"], "score": record.score}


def _count(detail: dict) -> int:
    """Frames (or views) one measurement handled."""
    return next(detail[k] for k in ("frames", "views", "frames_sampled") if k in detail)


def pipeline_study(path: str | os.PathLike, spec: ModelSpec | str | os.PathLike | None = None, *,
                   frames: int | str = "all", infer_batch_size: int | None = None, naive: bool = True,
                   default_variant: bool = True, workers: int | None = None,
                   sweep_seconds: float = 0.3) -> dict:
    """Seconds to score one clip: naive vs engine vs the decode-only and inference-only floors.

    ``frames`` is the sampling ("all", "default" or N) every measurement uses. The inference
    floor runs at ``infer_batch_size`` (None: the fastest of DEFAULT_BATCH_SIZES, found with a
    ``sweep_seconds`` window each). ``naive=False`` skips the PyTorch baseline (and torch).
    With ``frames="all"`` and ``default_variant``, the engine also scores the clip with the
    default sampling, compared with the decode floor of all frames.

    Returns ``{"study": "pipeline", "seconds": {"naive", "engine", "decode_floor", "infer_floor"},
    "fps": {...}, "ratios": {"engine_speedup_over_naive", "engine_over_floor_sum"}, "detail":
    {...}, "default_sampling": {"engine_s", "frames_sampled", "decode_floor_all_s",
    "decode_floor_all_over_engine"}, ...}``; a skipped measurement is None with a reason.
    """
    path = os.fspath(path)
    spec = _spec(spec)
    from ..decode import open_video

    load_start = load_avg()
    with open_video(path) as reader:
        info = reader.info
    plan = plan_frames(info, frames)
    cores = usable_cores()  # the cores this process may use (affinity, cgroup quota)
    seconds: dict[str, float | None] = {}
    detail: dict[str, dict] = {}
    skipped: dict[str, str] = {}

    decode_s, n = decode_floor(path, plan, cores)
    seconds["decode_floor"] = decode_s
    detail["decode_floor"] = {"decoder": "pyav", "threads": cores, "thread_type": "AUTO", "frames": n}

    views = clip_views(path, min(VIEW_POOL, max(n, 1)))
    with open_inferencer(spec, backend="openvino", precision="fp32", mode="latency") as ov:
        if infer_batch_size is None:
            sweep = [time_infer(ov, views, b, seconds=sweep_seconds) for b in DEFAULT_BATCH_SIZES]
            infer_batch_size = max(sweep, key=lambda r: r["views_per_s"])["batch_size"]
        infer_s = seconds["infer_floor"] = _infer_floor(ov, views, n, infer_batch_size)
    detail["infer_floor"] = {"backend": "openvino", "precision": "fp32", "mode": "latency",
                             "call": "infer (synchronous)", "batch_size": infer_batch_size,
                             "views": n, "distinct_views": len(views)}

    seconds["naive"] = None
    if naive:
        torch_net, reason = _open(spec, *NAIVE_BACKEND, None)
        if torch_net is None:
            skipped["naive"] = reason
        else:
            with torch_net:
                seconds["naive"], done = _naive(path, plan, torch_net)
            detail["naive"] = {"decoder": "cv2.VideoCapture", "backend": NAIVE_BACKEND[0],
                               "precision": NAIVE_BACKEND[1], "batch_size": 1, "frames": done}
    else:
        skipped["naive"] = "not asked for (the naive baseline needs the pytorch backend)"

    seconds["engine"], detail["engine"] = _engine(path, spec, frames, workers)

    out: dict[str, Any] = {
        "study": "pipeline", "clip": {"path": path, **info.to_dict()}, "frames": frames,
        "cores": cores, "seconds": {k: None if v is None else round(v, 3) for k, v in seconds.items()},
        "fps": {k: None if v is None else round(_count(detail[k]) / v, 2) for k, v in seconds.items()},
        "ratios": {"engine_speedup_over_naive": ratio(seconds["naive"], seconds["engine"]),
                   "engine_over_floor_sum": ratio(seconds["engine"], decode_s + infer_s)},
        "detail": detail, "skipped": skipped}
    if default_variant and frames == "all":
        s, d = _engine(path, spec, "default", workers)
        out["default_sampling"] = {"engine_s": round(s, 3), "frames_sampled": d["frames_sampled"],
                                   "decode_floor_all_s": round(decode_s, 3),
                                   "decode_floor_all_over_engine": ratio(decode_s, s)}
    out["load_avg"] = {"start": load_start, "end": load_avg()}
    out["note"] = NOISE_NOTE
    return out


# --- both studies, and the tables -----------------------------------------------------------

def run_benchmark(path: str | os.PathLike, *, studies: Sequence[str] = DEFAULT_STUDIES,
                  backends: Sequence[tuple[str, str]] | None = None,
                  batch_sizes: Sequence[int] | None = None, seconds: float | None = None,
                  frames: int | str | None = None, model_dir: str | os.PathLike | None = None,
                  quick: bool = False, progress=lambda msg: None) -> dict:
    """Run the asked-for studies on one clip, in one process, one after the other.

    The pipeline study's inference floor uses the best OpenVINO fp32 batch size of the batch
    study when it ran; its naive baseline runs only when pytorch/fp32 is among ``backends``.
    ``quick`` takes the QUICK settings for whatever is not given; ``progress`` gets a line
    before each step.
    """
    from .engine import concurrency_study, startup_study, streaming_study

    q: dict[str, Any] = QUICK if quick else {}
    backends = backends or q.get("backends", DEFAULT_BACKENDS)
    batch_sizes = batch_sizes or q.get("batch_sizes", DEFAULT_BATCH_SIZES)
    window: float = seconds or q.get("seconds", DEFAULT_SECONDS)
    frames = frames or q.get("frames", "all")
    unknown = [s for s in studies if s not in STUDIES]
    if unknown or not studies:
        raise UsageError(f"unknown study {unknown or studies!r}; choose from {', '.join(STUDIES)}")
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise UsageError(f"no such video file: {path!r}")
    spec = load_model_spec(model_dir)
    import vqa

    out: dict[str, Any] = {
        "benchmark": "vqa", "version": vqa.__version__, "clip": path,
        "machine": {"cpu_count": os.cpu_count(), "usable_cores": usable_cores(), "python": platform.python_version(),
                    "platform": platform.platform(), "load_avg_start": load_avg()},
        "note": NOISE_NOTE}
    if "batch" in studies:
        progress(f"batch study: {len(backends)} backends x {len(batch_sizes)} batch sizes, {window:g} s each")
        out["batch"] = batch_study(spec, clip=path, backends=backends, batch_sizes=batch_sizes, seconds=window)
    if "pipeline" in studies:
        progress(f"pipeline study, frames={frames}: floors, naive, engine")
        best = out.get("batch", {}).get("best", {}).get("openvino/fp32", {}).get("batch_size")
        out["pipeline"] = pipeline_study(path, spec, frames=frames, infer_batch_size=best,
                                         naive=tuple(NAIVE_BACKEND) in {tuple(b) for b in backends})
    if "startup" in studies:
        progress("start-up study: fresh processes")
        out["startup"] = startup_study(path, runs=q.get("startup_runs", 3), model_dir=model_dir,
                                       progress=progress)
    if "concurrency" in studies:
        progress("concurrency study")
        out["concurrency"] = concurrency_study(path, per_thread=q.get("per_thread", 10),
                                               model_dir=model_dir, progress=progress)
    if "streaming" in studies:
        progress("streaming study")
        out["streaming"] = streaming_study(q.get("streaming_paths", 1_000_000), model_dir=model_dir,
                                           progress=progress)
    out["machine"]["load_avg_end"] = load_avg()
    return out

