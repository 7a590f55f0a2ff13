"""Folder throughput, the number a user sizes a machine with (``vqa bench FOLDER --study folder``).

``folder_study`` takes a folder of videos, or fills an empty one with ``videos`` copies of one
benchmark clip (``vqa.bench.clip``) of a given size, length and keyframe interval, and scores
the whole folder with a ``Scorer`` several ways, side by side in one process:

* ``sampling``: the default plan and every frame (``frames="all"``), each at the thread
  split ``auto`` picks: videos per minute, and frames decoded per frame sampled (from the
  records' ``frames.decoded`` and ``frames.sampled``);
* ``workers``: the default plan at each worker count of the sweep (inference gets the rest of
  the cores, as ``--workers N`` alone gives it): videos per minute, and the scaling
  efficiency, videos per minute over (N times that of 1 worker), best against best and
  round by round (``efficiency_by_round``: against the lone worker of the same round).

Rows give the best round, the median and every round in order (``videos_per_min_by_round``).

``backends`` (``[(name, precision), ...]``, e.g. openvino fp32 and cuda fp32) runs every
setting on each backend, the backends in turn within a setting, so the CPU and the GPU path
are compared side by side in one run; each backend's rows are under ``by_backend``, the
first's also at the top (``sampling``, ``workers``), and ``over_first`` gives each other
backend's videos per minute over the first's.

Each Scorer is built (workers spawned, model compiled, and on a GPU backend one batch of each
bucket up to its batch size run, which captures the CUDA graphs) before its clock starts, so
the numbers are the job's steady pace; ``vqa bench --study startup`` measures the start-up.

``command_study`` times what a user types: ``vqa score CLIP`` as a fresh process, against
decoding every frame of the clip alone (PyAV, FFmpeg threads on every core, to RGB), in turns.
"""
from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..config import GPU_BACKENDS
from ..errors import UsageError
from ..inputs import VIDEO_EXTENSIONS
from ..sample import plan_frames
from ..threads import usable_cores
from .common import NOISE_NOTE, decode_floor, load_avg
from .report import table

DEFAULT_VIDEOS = 32
DEFAULT_SIZE = (1280, 720)
DEFAULT_LENGTH_S = 10.0
DEFAULT_KEYFRAME_S = 2.0
DEFAULT_FPS = 30.0


def worker_sweep(cores: int) -> list[int]:
    """1, 2, 4, ... up to cores - 1: every split that leaves inference a core, doubling.

    >>> worker_sweep(16), worker_sweep(2)
    ([1, 2, 4, 8, 15], [1])
    """
    counts = [1]
    while counts[-1] * 2 < cores:
        counts.append(counts[-1] * 2)
    if cores - 1 > counts[-1]:
        counts.append(cores - 1)
    return counts


def folder_videos(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower().lstrip(".") in VIDEO_EXTENSIONS)


def make_folder(folder: Path, *, videos: int, size: tuple[int, int], length_s: float, keyframe_s: float,
                fps: float = DEFAULT_FPS) -> list[Path]:
    """``videos`` copies of one benchmark clip in ``folder``: one encode, then file copies (the
    scorer keeps nothing between videos, so copies cost what distinct clips of the kind do)."""
    from .clip import write_bench_clip  # PyAV's encoder, only when clips are made

    if videos < 1 or length_s <= 0 or keyframe_s <= 0:
        raise UsageError(f"a folder needs videos >= 1, length > 0 and a keyframe interval > 0, got "
                         f"{videos}, {length_s}, {keyframe_s}")
    first = folder / "bench_000.mp4"
    write_bench_clip(str(first), frames=max(1, round(length_s * fps)), size=size, fps=fps,
                     gop=max(1, round(keyframe_s * fps)))
    for i in range(1, videos):
        shutil.copyfile(first, folder / f"bench_{i:03d}.mp4")
    return folder_videos(folder)


def warm(scorer) -> float:
    """Run one zero batch of each CUDA graph bucket up to the Scorer's batch size (capturing
    its graph, a one-time cost like compiling); nothing on a backend without buckets."""
    import numpy as np

    buckets = getattr(scorer.inferencer, "buckets", None)
    if not buckets:
        return 0.0
    view = scorer.spec.view_size
    start = time.perf_counter()
    for b in buckets:
        if b <= max(scorer.resolved.batch_size, min(buckets)):
            scorer.inferencer.infer(np.zeros((b, view, view, 3), dtype=np.uint8))
    return time.perf_counter() - start


def score_folder(paths: list[Path], *, frames, workers: int | None, model_dir,
                  backend: tuple[str, str] | None = None, decoder: str | None = None,
                  batch_size: int | None = None) -> dict:
    from ..scorer.local import Scorer

    chosen: dict[str, Any] = {} if backend is None else {"backend": backend[0], "precision": backend[1]}
    if decoder is not None:
        chosen.update(decoder_spec(decoder))
    if batch_size is not None:
        chosen["batch_size"] = batch_size
    with Scorer(frames=frames, workers=workers, model_dir=model_dir, **chosen) as scorer:
        split = {"backend": scorer.options.backend, "precision": scorer.options.precision,
                 "decoder": scorer.options.decoder, "nvdec_workers": scorer.options.nvdec_workers,
                 "gpu_processes": scorer.resolved.gpu_processes,
                 "batch_size": scorer.resolved.batch_size, "workers": scorer.workers,
                 "inference_threads": scorer.threads, "warm_s": round(warm(scorer), 3)}
        # What is timed is a folder in flight, not start-up: as many videos as run at once are
        # scored first, so that every worker or NVDEC session (and each GPU engine process's
        # graphs and decoders) has met one.
        split["warm_videos"] = len(list(scorer.score_many([str(p) for p in paths[:scorer.workers]])))
        start = time.perf_counter()
        records = list(scorer.score_many([str(p) for p in paths]))
        seconds = time.perf_counter() - start
    failed = [r for r in records if not r.ok]
    if failed:
        raise UsageError(f"{len(failed)} of {len(records)} videos failed, e.g. {failed[0].path}: {failed[0].error}")
    decoded = sum(r.frames["decoded"] for r in records)
    sampled = sum(r.frames["sampled"] for r in records)
    return {**split, "seconds": seconds, "frames_decoded": decoded, "frames_sampled": sampled,
            "decoded_per_sampled": round(decoded / sampled, 3) if sampled else None}


def _summary(runs: list[dict], videos: int) -> dict:
    """One row from the rounds of one setting: the best round's pace (the one least slowed by
    whatever else ran), the median's beside it."""
    best, median = min(r["seconds"] for r in runs), statistics.median(r["seconds"] for r in runs)
    return {**runs[0], "seconds": round(best, 3), "median_seconds": round(median, 3), "rounds": len(runs),
            "videos_per_min": round(videos / best * 60, 1), "videos_per_min_median": round(videos / median * 60, 1),
            # each round's, in order: rows of one round ran back to back, so ratios pair them
            "videos_per_min_by_round": [round(videos / r["seconds"] * 60, 1) for r in runs]}


def decoder_spec(text: str) -> dict[str, Any]:
    """A folder-study decoder as Scorer options: a decoder's name; ``pyav+nvdec:N`` for ``--decoder
    pyav --nvdec-workers N`` (NVDEC workers beside the CPU ones); ``nvdec:P`` for ``--decoder nvdec
    --gpu-processes P`` (the GPU engine in P processes, with a cuda backend)."""
    from ..config import DECODERS, HYBRID_DECODER

    cpu, sep, rest = text.partition("+")
    if not sep and cpu in DECODERS:
        return {"decoder": cpu, "nvdec_workers": 0}
    name, _, count = cpu.partition(":")
    if not sep and name == "nvdec" and count.isdigit() and int(count) >= 1:
        return {"decoder": name, "nvdec_workers": 0, "gpu_processes": int(count)}
    name, _, count = rest.partition(":")
    if (cpu, name) == HYBRID_DECODER and count.isdigit() and int(count) >= 1:
        return {"decoder": cpu, "nvdec_workers": int(count)}
    raise UsageError(f"unknown decoder {text!r}: one of {', '.join(DECODERS)}, "
                     f"{'+'.join(HYBRID_DECODER)}:N for N NVDEC workers beside the CPU ones, or nvdec:P for "
                     "the GPU engine in P processes")


def _label(backend: tuple[str, str] | None, decoder: str | None = None) -> str:
    """``openvino:fp32``, or ``cuda:fp16+nvdec`` where a decoder is named."""
    from ..infer import DEFAULT_BACKEND, DEFAULT_PRECISION

    name = f"{DEFAULT_BACKEND}:{DEFAULT_PRECISION}" if backend is None else f"{backend[0]}:{backend[1]}"
    return name if decoder is None else f"{name}+{decoder}"


def _backend_result(runs: dict, label: str, videos: int) -> dict:
    """One backend's rows: ``sampling`` by plan, ``workers`` by count, the plans' ratio and
    the sweep's scaling efficiency."""
    out: dict[str, Any] = {"sampling": {}, "workers": []}
    for (kind, key, lab), rows in runs.items():
        if lab != label:
            continue
        if kind == "sampling":
            out["sampling"][key] = _summary(rows, videos)
        else:
            out["workers"].append(_summary(rows, videos))
    if "default" in out["sampling"] and "all" in out["sampling"]:
        d, a = out["sampling"]["default"], out["sampling"]["all"]
        out["default_over_all"] = round(d["videos_per_min"] / a["videos_per_min"], 2)
        out["default_over_all_median"] = round(d["videos_per_min_median"] / a["videos_per_min_median"], 2)
    one = next((r["videos_per_min"] for r in out["workers"] if r["workers"] == 1), None)
    ones = next((r["videos_per_min_by_round"] for r in out["workers"] if r["workers"] == 1), None)
    for r in out["workers"]:
        r["efficiency"] = round(r["videos_per_min"] / (r["workers"] * one), 3) if one else None
        # against the lone worker of the same round: the machine's speed moves between rounds
        r["efficiency_by_round"] = None if ones is None else [
            round(v / (r["workers"] * o), 3) for v, o in zip(r["videos_per_min_by_round"], ones)]
    return out


def _over_first(by_backend: dict) -> dict:
    """Each backend after the first: its videos per minute over the first's, per sampling
    plan and per worker count (best rounds, and medians)."""
    def ratio(row: dict, base: dict) -> dict:
        return {"best": round(row["videos_per_min"] / base["videos_per_min"], 2),
                "median": round(row["videos_per_min_median"] / base["videos_per_min_median"], 2)}

    labels = list(by_backend)
    first = by_backend[labels[0]]
    base_workers = {r["workers"]: r for r in first["workers"]}
    out = {}
    for label in labels[1:]:
        other = by_backend[label]
        ratios = {f"frames={key}": ratio(row, first["sampling"][key])
                  for key, row in other["sampling"].items() if key in first["sampling"]}
        ratios.update({f"workers={row['workers']}": ratio(row, base_workers[row["workers"]])
                       for row in other["workers"] if row["workers"] in base_workers})
        out[f"{label} over {labels[0]}"] = ratios
    return out


def folder_study(folder: str | os.PathLike, *, videos: int = DEFAULT_VIDEOS, size: tuple[int, int] = DEFAULT_SIZE,
                 length_s: float = DEFAULT_LENGTH_S, keyframe_s: float = DEFAULT_KEYFRAME_S,
                 workers: Sequence[int] | None = None, sampling: Sequence = ("default", "all"), rounds: int = 1,
                 backends: Sequence[tuple[str, str]] | None = None, decoders: Sequence[str] | None = None,
                 batch_size: int | None = None, model_dir: str | os.PathLike | None = None,
                 progress=lambda msg: None) -> dict:
    """Videos per minute of a folder job by sampling and by worker count (module docstring).

    ``folder`` holding videos: they are scored as they are. An empty folder: ``videos`` clips
    of ``size``, ``length_s`` and one keyframe every ``keyframe_s`` are made in it first.
    ``workers``: the sweep (default ``worker_sweep(usable_cores())``); empty: no sweep.
    ``rounds``: each setting is measured that many times, the settings in turn; rows give the
    best round and the median. ``sampling``: the plans of the auto-split rows (empty: none).
    ``backends``: ``(name, precision)`` pairs, each setting run on each in turn (default: the
    Scorer's default backend alone). ``decoders``: decoders, each crossed with each backend
    (default: the Scorer's default decoder). ``batch_size``: every Scorer's (default: auto).
    """
    if rounds < 1:
        raise UsageError(f"rounds must be >= 1, got {rounds}")
    for d in decoders or ():
        decoder_spec(d)  # refused now, not after the first rows ran
    # The GPU engine's processes (nvdec:P) run only beside a GPU backend: those pairs are left out.
    chosen = [(b, d) for b in (list(backends) if backends else [None])
              for d in (list(decoders) if decoders else [None])
              if not (d is not None and "gpu_processes" in decoder_spec(d) and (b is None or b[0] not in GPU_BACKENDS))]
    if not chosen:
        raise UsageError("nvdec:P runs the GPU engine: name a cuda backend beside it")
    labels = [_label(*c) for c in chosen]
    if len(set(labels)) != len(labels):
        raise UsageError(f"a backend is named twice: {', '.join(labels)}")
    folder = Path(folder)
    if not folder.is_dir():
        raise UsageError(f"the folder study needs a folder, got {os.fspath(folder)!r}")
    cores = usable_cores()
    paths = folder_videos(folder)
    made = None
    if not paths:
        if any(folder.iterdir()):
            raise UsageError(f"{os.fspath(folder)!r} holds no videos but other files: give an empty folder "
                             "to have clips made there")
        progress(f"making {videos} clips of {size[0]}x{size[1]}, {length_s:g} s, a keyframe every {keyframe_s:g} s")
        t = time.perf_counter()
        paths = make_folder(folder, videos=videos, size=size, length_s=length_s, keyframe_s=keyframe_s)
        made = {"size": f"{size[0]}x{size[1]}", "length_s": length_s, "keyframe_s": keyframe_s,
                "fps": DEFAULT_FPS, "seconds": round(time.perf_counter() - t, 1)}
    from ..decode import open_video

    with open_video(paths[0]) as reader:
        info = reader.info
        keys = reader.keyframe_times(100_000)
    out: dict[str, Any] = {"study": "folder", "folder": os.fspath(folder), "videos": len(paths), "made": made,
           "first_video": {**info.to_dict(), "keyframes": None if keys is None else len(keys)},
           "cores": cores, "load_avg": {"start": load_avg()}, "backends": labels}
    sweep = worker_sweep(cores) if workers is None else list(workers)
    # Within a setting the backends take turns, so the CPU and GPU rows of a plan run back to back.
    settings = [("sampling", str(f), f, None, b) for f in sampling for b in chosen] + \
               [("workers", w, "default", w, b) for w in sweep for b in chosen]
    runs: dict = {(kind, key, _label(*b)): [] for kind, key, _, _, b in settings}
    for r in range(rounds):  # rounds interleave the settings, so a change in load hits them alike
        for kind, key, frames, w, b in settings:
            progress(f"round {r + 1}/{rounds}: {len(paths)} videos, {_label(*b)}, frames={frames}, "
                     + ("auto split" if w is None else f"--workers {w}"))
            runs[kind, key, _label(*b)].append(score_folder(paths, frames=frames, workers=w, model_dir=model_dir,
                                                             backend=b[0], decoder=b[1], batch_size=batch_size))
    by_backend = {label: _backend_result(runs, label, len(paths)) for label in labels}
    out.update(by_backend[labels[0]])  # the first backend's rows at the top, as with one backend
    out["by_backend"] = by_backend
    out["over_first"] = _over_first(by_backend)
    out["load_avg"]["end"] = load_avg()
    out["note"] = NOISE_NOTE
    return out


def command_study(clip: str | os.PathLike, *, runs: int = 3, model_dir: str | os.PathLike | None = None,
                  progress=lambda msg: None) -> dict:
    """``vqa score CLIP`` (default plan, a fresh process, start-up included) against decoding
    every frame of CLIP alone on every core, in turns; medians of ``runs`` each."""
    clip = os.fspath(clip)
    if not os.path.isfile(clip):
        raise UsageError(f"no such video file: {clip!r}")
    from ..decode import open_video

    with open_video(clip) as reader:
        info = reader.info
    cores = usable_cores()
    command = [sys.executable, "-m", "vqa.cli", "score", clip, "--quiet", "--format", "jsonl"]
    if model_dir is not None:
        command += ["--model-dir", os.fspath(model_dir)]
    load_start = load_avg()
    score_s, decode_s, decoded = [], [], None
    for i in range(runs):
        progress(f"run {i + 1} of {runs}: vqa score, then decoding every frame")
        t = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        score_s.append(time.perf_counter() - t)
        if done.returncode != 0:
            raise UsageError(f"vqa score failed ({done.returncode}): {done.stderr[-500:]}")
        import json

        decoded = json.loads(done.stdout.splitlines()[0])["frames"]
        decode_s.append(decode_floor(clip, plan_frames(info, "all"), cores)[0])
    s, d = statistics.median(score_s), statistics.median(decode_s)
    return {"study": "command", "clip": {"path": clip, **info.to_dict()}, "cores": cores, "runs": runs,
            "vqa_score_s": round(s, 3), "decode_all_s": round(d, 3), "ratio": round(s / d, 3),
            "record_frames": decoded, "all_runs": {"vqa_score_s": [round(x, 3) for x in score_s],
                                                   "decode_all_s": [round(x, 3) for x in decode_s]},
            "load_avg": {"start": load_start, "end": load_avg()}, "note": NOISE_NOTE}


def format_folder(result: dict) -> str:
    v = result["first_video"]
    lines = [f"Folder throughput: {result['videos']} videos like {v['width']}x{v['height']} {v['codec']}, "
             f"{v['duration_s']:g} s at {v['fps']:g} fps, {v['keyframes']} keyframes; {result['cores']} cores, "
             f"load average {result['load_avg']['start']} -> {result['load_avg']['end']}"]
    by_backend = result.get("by_backend") or {"": result}
    rows = [(label or "-", k, r["workers"], r["inference_threads"], f"{r['videos_per_min']:.0f}",
             f"{r['videos_per_min_median']:.0f}", f"{r['decoded_per_sampled']:.2f}")
            for label, b in by_backend.items() for k, r in b["sampling"].items()]
    if rows:
        lines += table(["backend", "frames", "workers", "inference threads", "videos/min (best)", "(median)",
                        "decoded/sampled"], rows, [False, False, True, True, True, True, True])
    for label, b in by_backend.items():
        if "default_over_all" in b:
            lines.append(f"{label + ': ' if label else ''}default plan over every frame: "
                         f"{b['default_over_all']:.2f}x the videos per minute (medians: "
                         f"{b['default_over_all_median']:.2f}x); rounds: {b['sampling']['default']['rounds']}")
    sweep = [(label or "-", r) for label, b in by_backend.items() for r in b["workers"]]
    if sweep:
        lines += ["", "Default plan by worker count (inference gets the other cores)"]
        lines += table(["backend", "workers", "inference threads", "videos/min (best)", "(median)", "efficiency"],
                       [(label, r["workers"], r["inference_threads"], f"{r['videos_per_min']:.0f}",
                         f"{r['videos_per_min_median']:.0f}",
                         "-" if r["efficiency"] is None else f"{r['efficiency']:.2f}") for label, r in sweep],
                       [False, True, True, True, True, True])
    for name, ratios in result.get("over_first", {}).items():
        lines.append(f"{name}: " + ", ".join(f"{k} {v['best']:.2f}x (medians {v['median']:.2f}x)"
                                             for k, v in ratios.items()))
    lines.append(f"note: {result['note']}")
    return "\n".join(lines)


def format_command(result: dict) -> str:
    c = result["clip"]
    return "\n".join([
        f"`vqa score` against decoding every frame: {c['width']}x{c['height']} {c['codec']}, {c['frame_count']} "
        f"frames at {c['fps']:g} fps; {result['cores']} cores, median of {result['runs']}, load average "
        f"{result['load_avg']['start']} -> {result['load_avg']['end']}",
        f"vqa score (default plan, fresh process): {result['vqa_score_s']:.2f} s, record frames "
        f"{result['record_frames']}; decoding every frame alone: {result['decode_all_s']:.2f} s; "
        f"ratio {result['ratio']:.2f}",
        f"note: {result['note']}"])
