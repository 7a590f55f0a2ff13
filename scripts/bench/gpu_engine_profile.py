"""Where the GPU engine's time goes, on the GPU machine: one session profiled, then the sessions at once.

    PYTHONPATH=$PWD python scripts/bench/gpu_engine_profile.py FOLDER --out gpu_engine_profile.json

1. One session (one thread) scores the first 40 clips under cProfile: the per-video time and the
   functions that take it (``tottime``: time in the function itself, C calls included).
2. PyAV alone in 1 and 16 threads: opening a clip and decoding its first frame, and demuxing
   every packet, videos/s: whether PyAV lets other threads run meanwhile (the GIL).
3. The whole folder with 16 sessions, and every W_DECODER_FALLBACK reason met.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import av


def profiled_session(paths: list[str]) -> dict:
    from vqa import Scorer
    from vqa.engine import gpu

    prof = cProfile.Profile()
    original = gpu.GpuEngine._score_into

    def wrapped(self, *a, **k):
        prof.enable()
        try:
            return original(self, *a, **k)
        finally:
            prof.disable()

    gpu.GpuEngine._score_into = wrapped
    try:
        with Scorer(backend="cuda", precision="fp16", decoder="nvdec", workers=1) as s:
            s.score(paths[0])
            prof = cProfile.Profile()  # the warm-up's calls left out
            start = time.perf_counter()
            records = list(s.score_many(paths))
            seconds = time.perf_counter() - start
    finally:
        gpu.GpuEngine._score_into = original
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(30)
    return {"videos": len(records), "ms_per_video": round(seconds / len(records) * 1000, 1),
            "profile_tottime": out.getvalue()}


def pyav_threads(paths: list[str], threads: int, what: str) -> float:
    jobs = list(paths) * max(1, (threads * 4) // len(paths) + 1)
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                if not jobs:
                    return
                p = jobs.pop()
            with av.open(p) as c:
                s = c.streams.video[0]
                if what == "open+first":
                    next(iter(c.decode(s)), None)
                else:
                    for _ in c.demux(s):
                        pass

    n = len(jobs)
    ts = [threading.Thread(target=work) for _ in range(threads)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return round(n / (time.perf_counter() - t0), 1)


def whole(paths: list[str], sessions: int) -> dict:
    from vqa import Scorer

    with Scorer(backend="cuda", precision="fp16", decoder="nvdec", workers=sessions) as s:
        s.score(paths[0])
        start = time.perf_counter()
        records = list(s.score_many(paths))
        seconds = time.perf_counter() - start
    reasons = Counter(w for r in records for w in r.warnings)
    return {"sessions": sessions, "videos_per_min": round(len(records) / seconds * 60, 1),
            "warnings": reasons.most_common(10), "errors": Counter(str(r.error) for r in records if not r.ok).most_common(3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    paths = sorted(str(p) for p in a.folder.iterdir() if p.suffix == ".mp4")
    result: dict = {"command": " ".join(["python scripts/bench/gpu_engine_profile.py", *sys.argv[1:]])}
    result["one_session"] = profiled_session(paths[:40])
    print(result["one_session"]["ms_per_video"], flush=True)
    result["pyav_videos_per_s"] = {f"{what}@{t}": pyav_threads(paths[:32], t, what)
                                   for what in ("open+first", "demux") for t in (1, 16)}
    print(result["pyav_videos_per_s"], flush=True)
    result["whole"] = [whole(paths, s) for s in (16,)]
    print(result["whole"], flush=True)
    a.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
