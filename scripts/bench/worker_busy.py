"""Where a folder job's time goes by worker count: issue 18's scaling efficiency, explained.

For each setting (backend, worker count) a ``Scorer`` scores the folder with the default plan,
and around each round this reads, from /proc:

* each decode worker's CPU seconds (``/proc/PID/stat``): per video, and as a share of the round's wall time
  (``worker_busy``: 1.0 is a worker that never waited for a video, a ring slot or its parent);
* the parent's CPU seconds per video, and each of its threads' busy share (the engine's
  thread, inference's, OpenVINO's callbacks);
* the cores' mean clock (``/proc/cpuinfo``'s MHz, sampled every 0.25 s while the round runs).

If eight workers spend more CPU per video than one, at full busy, the cores themselves are
slower (clock, shared cache, memory); if they spend the same but wait, the parent or the
ring holds them back.

    PYTHONPATH=$PWD python scripts/bench/worker_busy.py FOLDER --backend openvino:fp32 \
        --backend cuda:fp16 --workers 1 --workers 8 --rounds 3 --out worker_busy.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def _mhz() -> float | None:
    try:
        with open("/proc/cpuinfo") as f:
            vals = [float(line.split(":")[1]) for line in f if line.startswith("cpu MHz")]
        return sum(vals) / len(vals) if vals else None
    except OSError:
        return None


class ClockSampler(threading.Thread):
    def __init__(self, every_s: float = 0.25):
        super().__init__(daemon=True)
        self.every_s, self.samples, self._stop_event = every_s, [], threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self.every_s):
            m = _mhz()
            if m is not None:
                self.samples.append(m)

    def stop(self) -> float | None:
        self._stop_event.set()
        self.join()
        return round(statistics.mean(self.samples), 1) if self.samples else None


def _cpu(stat_path: str) -> float:
    """utime + stime of a /proc stat file, in seconds (the fields after the command's ')')."""
    with open(stat_path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _threads() -> dict[int, float]:
    """The parent's CPU seconds by thread id (its threads' names are all the program's)."""
    out: dict[int, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            out[int(tid)] = _cpu(f"/proc/self/task/{tid}/stat")
        except OSError:
            continue  # ended meanwhile
    return out


def one_round(paths: list[str], backend: str, precision: str, workers: int) -> dict:
    from vqa.scorer.local import Scorer

    with Scorer(frames="default", workers=workers, backend=backend, precision=precision) as scorer:
        list(scorer.score_many(paths[:workers]))  # warm: workers have imported and opened a video
        pids = list(scorer._engine.pool.pids)
        procs = [f"/proc/{pid}/stat" for pid in pids]
        w0 = [_cpu(p) for p in procs]
        t0 = _threads()
        clock = ClockSampler()
        clock.start()
        start = time.perf_counter()
        records = list(scorer.score_many(paths))
        wall = time.perf_counter() - start
        mhz = clock.stop()
        w1 = [_cpu(p) for p in procs]
        t1 = _threads()
        threads = scorer.threads
    failed = [r for r in records if not r.ok]
    n = len(paths)
    per_worker = [b - a for a, b in zip(w0, w1)]
    return {"backend": f"{backend}:{precision}", "workers": workers, "inference_threads": threads,
            "videos": n, "failed": len(failed), "seconds": round(wall, 3), "videos_per_min": round(n / wall * 60, 1),
            "worker_cpu_s_per_video": round(sum(per_worker) / n, 4),
            "worker_busy": round(sum(per_worker) / (len(per_worker) * wall), 3),
            "worker_busy_each": [round(c / wall, 3) for c in per_worker],
            "parent_cpu_s_per_video": round((sum(t1.values()) - sum(t0.values())) / n, 4),
            # each thread's busy share of the round, busiest first: the engine's own thread
            # (records, the ring, dispatch) is the one to watch for a limit below the workers
            "parent_busy_by_thread": sorted((round((v - t0.get(k, 0.0)) / wall, 3) for k, v in t1.items()
                                             if v - t0.get(k, 0.0) > 0.005 * wall), reverse=True),
            "mean_mhz": mhz}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--backend", action="append", default=None, help="NAME:PRECISION, repeatable")
    ap.add_argument("--workers", action="append", type=int, default=None, help="repeatable")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default="-")
    a = ap.parse_args(argv)
    from vqa.bench.folder import folder_videos

    paths = [str(p) for p in folder_videos(Path(a.folder))]
    if not paths:
        ap.error(f"no videos in {a.folder}")
    backends = [b.split(":") for b in (a.backend or ["openvino:fp32"])]
    rows: list[dict] = []

    def write() -> None:  # after every row: a call cut short by its time limit keeps what ran
        text = json.dumps({"folder": a.folder, "cores": len(os.sched_getaffinity(0)), "rows": rows}, indent=1)
        if a.out != "-":
            Path(a.out).write_text(text + "\n")
        elif len(rows) == a.rounds * len(a.workers or [1, 8]) * len(backends):
            print(text)

    for r in range(a.rounds):  # settings in turns, so a change in the machine's load hits them alike
        for w in a.workers or [1, 8]:
            for name, precision in backends:
                row = {"round": r + 1, **one_round(paths, name, precision, w)}
                print(json.dumps(row), file=sys.stderr, flush=True)
                rows.append(row)
                write()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
