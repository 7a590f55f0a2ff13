"""Folder throughput, the number a user sizes a machine with (``vqa bench FOLDER --study folder``).

``folder_study`` takes a folder of videos, or fills an empty one with ``videos`` copies of one
benchmark clip (``vqa.bench_clip``) of a given size, length and keyframe interval, and scores
the whole folder with a ``Scorer`` several ways, side by side in one process:

* ``sampling``: the default plan and every frame (``frames="all"``), each at the thread
  split ``auto`` picks: videos per minute, and frames decoded per frame sampled (from the
  records' ``frames.decoded`` and ``frames.sampled``);
* ``workers``: the default plan at each worker count of the sweep (inference gets the rest of
  the cores, as ``--workers N`` alone gives it): videos per minute, and the scaling
  efficiency, videos per minute over (N times that of 1 worker).

Each Scorer is built (workers spawned, model compiled) before its clock starts, so the
numbers are the job's steady pace; ``vqa bench --study startup`` measures the start-up.

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

from .bench import NOISE_NOTE, _decode_floor, _load_avg
from .bench_report import table
from .errors import UsageError
from .inputs import VIDEO_EXTENSIONS
from .sample import plan_frames
from .threads import usable_cores

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
    from .bench_clip import write_bench_clip  # PyAV's encoder, only when clips are made

    if videos < 1 or length_s <= 0 or keyframe_s <= 0:
        raise UsageError(f"a folder needs videos >= 1, length > 0 and a keyframe interval > 0, got "
                         f"{videos}, {length_s}, {keyframe_s}")
    first = folder / "bench_000.mp4"
    write_bench_clip(str(first), frames=max(1, round(length_s * fps)), size=size, fps=fps,
                     gop=max(1, round(keyframe_s * fps)))
    for i in range(1, videos):
        shutil.copyfile(first, folder / f"bench_{i:03d}.mp4")
    return folder_videos(folder)


def _score_folder(paths: list[Path], *, frames, workers: int | None, model_dir) -> dict:
    from .pipeline import Scorer

    with Scorer(frames=frames, workers=workers, model_dir=model_dir) as scorer:
        split = {"workers": scorer.workers, "inference_threads": scorer.threads}
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
            "videos_per_min": round(videos / best * 60, 1), "videos_per_min_median": round(videos / median * 60, 1)}


def folder_study(folder: str | os.PathLike, *, videos: int = DEFAULT_VIDEOS, size: tuple[int, int] = DEFAULT_SIZE,
                 length_s: float = DEFAULT_LENGTH_S, keyframe_s: float = DEFAULT_KEYFRAME_S,
                 workers: Sequence[int] | None = None, sampling: Sequence = ("default", "all"), rounds: int = 1,
                 model_dir: str | os.PathLike | None = None, progress=lambda msg: None) -> dict:
    """Videos per minute of a folder job by sampling and by worker count (module docstring).

    ``folder`` holding videos: they are scored as they are. An empty folder: ``videos`` clips
    of ``size``, ``length_s`` and one keyframe every ``keyframe_s`` are made in it first.
    ``workers``: the sweep (default ``worker_sweep(usable_cores())``); empty: no sweep.
    ``rounds``: each setting is measured that many times, the settings in turn; rows give the
    best round and the median.
    """
    if rounds < 1:
        raise UsageError(f"rounds must be >= 1, got {rounds}")
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
    from .decode import open_video

    with open_video(paths[0]) as reader:
        info = reader.info
        keys = reader.keyframe_times(100_000)
    out: dict[str, Any] = {"study": "folder", "folder": os.fspath(folder), "videos": len(paths), "made": made,
           "first_video": {**info.to_dict(), "keyframes": None if keys is None else len(keys)},
           "cores": cores, "load_avg": {"start": _load_avg()}, "sampling": {}, "workers": []}
    sweep = worker_sweep(cores) if workers is None else list(workers)
    settings = [("sampling", str(f), f, None) for f in sampling] + [("workers", w, "default", w) for w in sweep]
    runs: dict = {(kind, key): [] for kind, key, _, _ in settings}
    for r in range(rounds):  # rounds interleave the settings, so a change in load hits them alike
        for kind, key, frames, w in settings:
            progress(f"round {r + 1}/{rounds}: {len(paths)} videos, frames={frames}, "
                     + ("auto split" if w is None else f"--workers {w}"))
            runs[kind, key].append(_score_folder(paths, frames=frames, workers=w, model_dir=model_dir))
    for (kind, key), rows in runs.items():
        if kind == "sampling":
            out["sampling"][key] = _summary(rows, len(paths))
        else:
            out["workers"].append(_summary(rows, len(paths)))
    if "default" in out["sampling"] and "all" in out["sampling"]:
        d, a = out["sampling"]["default"], out["sampling"]["all"]
        out["default_over_all"] = round(d["videos_per_min"] / a["videos_per_min"], 2)
        out["default_over_all_median"] = round(d["videos_per_min_median"] / a["videos_per_min_median"], 2)
    one = next((r["videos_per_min"] for r in out["workers"] if r["workers"] == 1), None)
    for r in out["workers"]:
        r["efficiency"] = round(r["videos_per_min"] / (r["workers"] * one), 3) if one else None
    out["load_avg"]["end"] = _load_avg()
    out["note"] = NOISE_NOTE
    return out


def command_study(clip: str | os.PathLike, *, runs: int = 3, model_dir: str | os.PathLike | None = None,
                  progress=lambda msg: None) -> dict:
    """``vqa score CLIP`` (default plan, a fresh process, start-up included) against decoding
    every frame of CLIP alone on every core, in turns; medians of ``runs`` each."""
    clip = os.fspath(clip)
    if not os.path.isfile(clip):
        raise UsageError(f"no such video file: {clip!r}")
    from .decode import open_video

    with open_video(clip) as reader:
        info = reader.info
    cores = usable_cores()
    command = [sys.executable, "-m", "vqa.cli", "score", clip, "--quiet", "--format", "jsonl"]
    if model_dir is not None:
        command += ["--model-dir", os.fspath(model_dir)]
    load_start = _load_avg()
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
        decode_s.append(_decode_floor(clip, plan_frames(info, "all"), cores)[0])
    s, d = statistics.median(score_s), statistics.median(decode_s)
    return {"study": "command", "clip": {"path": clip, **info.to_dict()}, "cores": cores, "runs": runs,
            "vqa_score_s": round(s, 3), "decode_all_s": round(d, 3), "ratio": round(s / d, 3),
            "record_frames": decoded, "all_runs": {"vqa_score_s": [round(x, 3) for x in score_s],
                                                   "decode_all_s": [round(x, 3) for x in decode_s]},
            "load_avg": {"start": load_start, "end": _load_avg()}, "note": NOISE_NOTE}


def format_folder(result: dict) -> str:
    v = result["first_video"]
    lines = [f"Folder throughput: {result['videos']} videos like {v['width']}x{v['height']} {v['codec']}, "
             f"{v['duration_s']:g} s at {v['fps']:g} fps, {v['keyframes']} keyframes; {result['cores']} cores, "
             f"load average {result['load_avg']['start']} -> {result['load_avg']['end']}"]
    rows = [(k, r["workers"], r["inference_threads"], f"{r['videos_per_min']:.0f}",
             f"{r['videos_per_min_median']:.0f}", f"{r['decoded_per_sampled']:.2f}")
            for k, r in result["sampling"].items()]
    lines += table(["frames", "workers", "inference threads", "videos/min (best)", "(median)", "decoded/sampled"],
                    rows, [False, True, True, True, True, True])
    if "default_over_all" in result:
        lines.append(f"default plan over every frame: {result['default_over_all']:.2f}x the videos per minute "
                     f"(medians: {result['default_over_all_median']:.2f}x); rounds: "
                     f"{next(iter(result['sampling'].values()))['rounds']}")
    if result["workers"]:
        lines += ["", "Default plan by worker count (inference gets the other cores)"]
        lines += table(["workers", "inference threads", "videos/min (best)", "(median)", "efficiency"],
                        [(r["workers"], r["inference_threads"], f"{r['videos_per_min']:.0f}",
                          f"{r['videos_per_min_median']:.0f}",
                          "-" if r["efficiency"] is None else f"{r['efficiency']:.2f}") for r in result["workers"]],
                        [True, True, True, True, True])
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
