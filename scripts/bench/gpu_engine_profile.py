"""Where the GPU engine's time goes, on the GPU machine: one session profiled, then the sessions at once.

    PYTHONPATH=$PWD python scripts/bench/gpu_engine_profile.py FOLDER --out gpu_engine_profile.json

1. One session (one thread) scores the first 40 clips under cProfile: the per-video time and the
   functions that take it (``tottime``: time in the function itself, C calls included).
2. PyAV alone in 1 and 16 threads: opening a clip and decoding its first frame, and demuxing
   every packet, videos/s: whether PyAV lets other threads run meanwhile (the GIL).
3. The whole folder by sessions and processes, each with the GPU's and NVDEC's utilisation
   (nvidia-smi, every 100 ms) and every W_DECODER_FALLBACK reason met; in one process, where
   the session threads are, sampled every 5 ms (the innermost frame of vqa's and the one below).
"""
from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import pstats
import subprocess
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
        with Scorer(backend="cuda", precision="fp16", decoder="nvdec", workers=1, gpu_processes=1) as s:
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


class StackSampler:
    """Where the engine's session threads are, sampled: the innermost vqa frame of each and the
    frame it is in (a C call shows as the Python line that made it)."""

    def __init__(self, every_s: float = 0.005):
        self.every_s, self.counts, self.samples = every_s, Counter(), 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        names = {}
        while not self._stop.wait(self.every_s):
            names.update({t.ident: t.name for t in threading.enumerate()})
            for ident, frame in sys._current_frames().items():
                if not names.get(ident, "").startswith("vqa-nvdec"):
                    continue
                leaf, ours = frame, None
                f = frame
                while f is not None:
                    if "/vqa/" in f.f_code.co_filename and ours is None:
                        ours = f
                    f = f.f_back
                where = lambda fr: f"{Path(fr.f_code.co_filename).name}:{fr.f_code.co_name}:{fr.f_lineno}"  # noqa: E731
                self.counts[(where(ours) if ours else "-") + " > " + where(leaf)] += 1
                self.samples += 1

    def __enter__(self) -> StackSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def top(self, n: int = 25) -> list[tuple[str, float]]:
        return [(k, round(v / max(1, self.samples), 3)) for k, v in self.counts.most_common(n)]


class Utilisation:
    """nvidia-smi's GPU and decoder utilisation (percent), every 100 ms, while in the block."""

    def __enter__(self) -> Utilisation:
        self._p = subprocess.Popen(["nvidia-smi", "--query-gpu=utilization.gpu,utilization.decoder",
                                    "--format=csv,noheader,nounits", "-lms", "100"],
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        return self

    def __exit__(self, *exc) -> None:
        self._p.terminate()
        out, _ = self._p.communicate()
        rows = [[float(v) for v in line.split(",")] for line in out.splitlines() if line.count(",") == 1]
        rows = rows[2:-2] if len(rows) > 8 else rows  # the ramps at either end left out
        self.gpu = round(sum(r[0] for r in rows) / len(rows), 1) if rows else None
        self.decoder = round(sum(r[1] for r in rows) / len(rows), 1) if rows else None


def whole(paths: list[str], sessions: int, processes: int = 1, sample: bool = False, frames: str = "default") -> dict:
    from vqa import Scorer

    with Scorer(backend="cuda", precision="fp16", decoder="nvdec", workers=sessions,
                gpu_processes=processes, frames=frames) as s:
        list(s.score_many(paths[:processes * 4]))
        sampler = StackSampler() if sample else contextlib.nullcontext()
        with Utilisation() as use, sampler:
            start = time.perf_counter()
            records = list(s.score_many(paths))
            seconds = time.perf_counter() - start
    reasons = Counter(w for r in records for w in r.warnings)
    out = {"frames": frames, "sessions": sessions, "processes": processes, "videos_per_min": round(len(records) / seconds * 60, 1),
           "gpu_busy_pct": use.gpu, "nvdec_busy_pct": use.decoder,
           "warnings": reasons.most_common(10), "errors": Counter(str(r.error) for r in records if not r.ok).most_common(3)}
    if sample:
        out["where_sessions_are"] = sampler.top()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--whole", default=None, metavar="SxP,...",
                    help="only these rows of the whole folder (sessions x processes, default plan), nothing else")
    a = ap.parse_args()
    paths = sorted(str(p) for p in a.folder.iterdir() if p.suffix == ".mp4")
    result: dict = {"command": " ".join(["python scripts/bench/gpu_engine_profile.py", *sys.argv[1:]])}
    rows = ((16, 1, True, "default"), (32, 1, False, "default"), (64, 1, False, "default"), (16, 1, True, "all"),
            (32, 1, False, "all"), (32, 4, False, "default"))
    if a.whole:  # the chosen rows alone
        rows = tuple((*(int(x) for x in row.split("x")), False, "default") for row in a.whole.split(","))
    else:
        result["one_session"] = profiled_session(paths[:40])
        print(result["one_session"]["ms_per_video"], flush=True)
        result["pyav_videos_per_s"] = {f"{what}@{t}": pyav_threads(paths[:32], t, what)
                                       for what in ("open+first", "demux") for t in (1, 16)}
        print(result["pyav_videos_per_s"], flush=True)
    result["whole"] = []
    for sessions, processes, sample, frames in rows:
        some = paths if frames == "default" else paths[:30]
        result["whole"].append(whole(some, sessions, processes, sample, frames))
        print(json.dumps(result["whole"][-1]), flush=True)
        a.out.write_text(json.dumps(result, indent=1) + "\n")  # each row kept, should the call end early
    return 0

if __name__ == "__main__":
    sys.exit(main())
