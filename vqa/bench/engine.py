"""Engine benchmarks of ``vqa bench``: start-up by phase, threads sharing one Scorer, and
streaming a long generator of paths. Each returns a plain JSON-able dict.

* ``startup_study``: fresh processes. One times each phase alone (the parent's imports: the
  pipeline, numpy and OpenVINO; weight hashing, model compile with OpenVINO's cache, worker
  spawn until ready, the worker importing its decoder and OpenCV); one times what
  ``vqa score`` does, with the workers spawning while the model compiles: process start
  to a built Scorer (the overhead before any frame is scored), then the first record.
* ``concurrency_study``: ``threads`` threads calling ``score`` on one Scorer, against one
  ``score_many`` over the same paths; the records must be identical.
* ``streaming_study``: ``score_many`` over a generator of paths that do not exist: time to
  the first record, how much input was read by then, and this process's RSS as it goes.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

STARTUP_PHASES = r"""
import json, sys, time
t0 = time.perf_counter()
import vqa.scorer.local, vqa.infer.openvino  # OpenVINO as the scorer imports it
from vqa.model import load_model_spec
out = {"imports_s": time.perf_counter() - t0}
if __name__ == "__main__":
    spec = load_model_spec(sys.argv[1] or None)
    t = time.perf_counter(); spec.path("openvino_xml"); spec.path("openvino_bin")
    out["hashing_s"] = time.perf_counter() - t
    from vqa.infer import open_inferencer
    t = time.perf_counter(); inf = open_inferencer(spec, threads=1, mode="throughput")
    out["compile_s"] = time.perf_counter() - t
    inf.close()
    from vqa.config import ScoreOptions
    from vqa.engine.pool import start_workers
    o = ScoreOptions().resolve()  # what `vqa score` runs with by default
    t = time.perf_counter()
    pool, ring = start_workers(o, spec)
    pool.wait_ready()
    out["spawn_s"] = time.perf_counter() - t
    out["workers"] = o.workers
    pool.close(); ring.close()
    print(json.dumps(out))
"""

STARTUP_SCORE = r"""
import json, sys, time
t0 = time.perf_counter()
import vqa
if __name__ == "__main__":
    s = vqa.Scorer(model_dir=sys.argv[1] or None)
    ready = time.perf_counter() - t0
    t = time.perf_counter(); r = s.score(sys.argv[2]); first = time.perf_counter() - t
    t = time.perf_counter(); s.close(); close = time.perf_counter() - t
    print(json.dumps({"ready_s": ready, "first_record_s": first, "close_s": close, "status": r.status}))
"""


def _child(code: str, *args: str) -> tuple[dict, float]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"start-up child failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1]), wall


def startup_study(clip: str | os.PathLike, *, runs: int = 3, model_dir: str | os.PathLike | None = None,
                  progress=lambda msg: None) -> dict:
    """Medians over ``runs`` fresh processes of each phase alone, and of the real sequence
    (``overhead_s``: interpreter start to a built Scorer, i.e. before any frame is scored),
    and the wall time of ``vqa score CLIP`` itself (``cli_wall_s``).
    Run after one warm-up start, so OpenVINO's compile cache is warm as in daily use."""
    clip, md = os.fspath(clip), os.fspath(model_dir) if model_dir else ""
    _child(STARTUP_SCORE, md, clip)  # warm the compile cache and the page cache
    phases, scores = [], []
    for k in range(runs):
        progress(f"start-up run {k + 1}/{runs}")
        phases.append(_child(STARTUP_PHASES, md)[0])
        (score, wall) = _child(STARTUP_SCORE, md, clip)
        # What the child did not time: the interpreter starting, and exiting after close().
        score["interpreter_s"] = max(0.0, wall - score["ready_s"] - score["first_record_s"] - score["close_s"])
        score["overhead_s"] = score["interpreter_s"] + score["ready_s"]
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "vqa.cli", "score", clip, "--quiet", "--format", "jsonl",
                        *(["--model-dir", md] if md else [])], capture_output=True, check=True, timeout=600)
        score["cli_wall_s"] = time.perf_counter() - start
        score["wall_s"] = wall
        scores.append(score)
    med = lambda rows, k: round(statistics.median(r[k] for r in rows), 3)  # noqa: E731
    return {"study": "startup", "runs": runs, "workers": phases[0]["workers"],
            "phases_alone_s": {k: med(phases, k) for k in ("imports_s", "hashing_s", "compile_s", "spawn_s")},
            "overhead_s": med(scores, "overhead_s"), "interpreter_s": med(scores, "interpreter_s"),
            "ready_s": med(scores, "ready_s"), "first_record_s": med(scores, "first_record_s"),
            "close_s": med(scores, "close_s"), "wall_s": med(scores, "wall_s"),
            "cli_wall_s": med(scores, "cli_wall_s"), "target_overhead_s": 0.6}


def concurrency_study(clip: str | os.PathLike, *, threads: int = 8, per_thread: int = 10,
                      model_dir: str | os.PathLike | None = None, progress=lambda msg: None) -> dict:
    """Videos per second of ``threads`` threads x ``per_thread`` ``score`` calls on one Scorer,
    against one ``score_many`` over the same paths (the Scorer's default settings)."""
    from ..scorer.local import Scorer

    paths = [os.fspath(clip)] * (threads * per_thread)
    with Scorer(model_dir=model_dir) as scorer:
        scorer.score(paths[0])  # warm: workers ready, first inference done
        progress(f"one score_many over {len(paths)} videos")
        t = time.perf_counter()
        sequential = [r.to_dict() for r in scorer.score_many(paths)]
        one_s = time.perf_counter() - t
        progress(f"{threads} threads x {per_thread} videos")
        results: dict[int, list] = {}

        def work(k: int) -> None:
            results[k] = [scorer.score(p).to_dict() for p in paths[:per_thread]]

        t = time.perf_counter()
        pool = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
        for th in pool:
            th.start()
        for th in pool:
            th.join()
        many_s = time.perf_counter() - t
        workers = scorer.workers
    identical = all(r == sequential[0] for rs in results.values() for r in rs) and len(results) == threads
    return {"study": "concurrency", "videos": len(paths), "threads": threads, "workers": workers,
            "score_many_s": round(one_s, 3), "threads_s": round(many_s, 3),
            "videos_per_s": {"score_many": round(len(paths) / one_s, 2), "threads": round(len(paths) / many_s, 2)},
            "threads_over_score_many": round(one_s / many_s, 3), "records_identical": identical,
            "target": 0.9}


def _rss_mb() -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return None


def streaming_study(n: int = 1_000_000, *, model_dir: str | os.PathLike | None = None,
                    progress=lambda msg: None) -> dict:
    """``score_many`` over a generator of ``n`` paths that do not exist."""
    from ..scorer.local import Scorer

    taken = [0]

    def paths():
        for k in range(n):
            taken[0] += 1
            yield f"/nonexistent/vqa-bench/{k}.mp4"

    samples, first = [], None
    with Scorer(model_dir=model_dir) as scorer:
        start = time.perf_counter()
        for k, _record in enumerate(scorer.score_many(paths()), 1):
            if first is None:
                first = {"seconds": round(time.perf_counter() - start, 4), "paths_read": taken[0]}
            if k % max(1, n // 10) == 0:
                samples.append({"records": k, "rss_mb": round(_rss_mb() or 0, 1),
                                "seconds": round(time.perf_counter() - start, 2)})
                progress(f"streaming: {k} of {n} records, RSS {samples[-1]['rss_mb']} MiB")
        seconds = time.perf_counter() - start
    rss = [s["rss_mb"] for s in samples]
    return {"study": "streaming", "paths": n, "seconds": round(seconds, 2), "records_per_s": round(n / seconds),
            "first_record": first, "rss_mb": samples,
            "rss_growth_mb": round(rss[-1] - rss[0], 1) if rss else None}
