"""What one Ray driver takes: records per second, time to the first record, peak memory.

The actors are fakes that answer at once (no model, no decoding), so this times the driver
alone: run_job, the dispatcher, Ray's calls and, with --store, the job store's commits.

    python scripts/bench/measure_ray.py --paths 100000            # paths that need not exist
    python scripts/bench/measure_ray.py --files 10000 --store      # real files: stat, fingerprint, SQLite
"""
from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time


import ray

from vqa.scorer.ray import NodeScorer, RayScorer
from vqa.job import run_job
from vqa.jobstore import JobStore
from vqa.types import VideoInfo, VideoScore

CONFIG = {"sampling": "default", "backend": "openvino", "batch_size": 4, "decoder": "pyav",
          "precision": "fp32", "mode": "throughput"}


class FastNode(NodeScorer):
    """Answers every path with a record at once: an ok one for a file, else E_NOT_FOUND."""

    def __init__(self, options, cores, cwd=None):
        from vqa.infer import model_files
        from vqa.model import load_model_spec
        self.model = load_model_spec(options.model_dir).record(model_files(options.backend, options.precision))
        self.node = "fake"

    def describe(self):
        return {"node": self.node, "pid": os.getpid(), "workers": 1, "threads": 1, "model": self.model,
                "config": dict(CONFIG), "vqa": "fake"}

    async def score(self, path, split):
        try:
            st = os.stat(path)
        except OSError:
            return VideoScore(path=path, status="error", model=self.model, config=dict(CONFIG),
                              error={"code": "E_NOT_FOUND", "message": f"no such file: {path}"})
        from vqa.files import fingerprint
        with open(path, "rb") as f:
            fp = fingerprint(f.fileno(), st.st_size)
        return VideoScore(path=path, status="ok", score=50.0, category="fair", model=self.model,
                          config=dict(CONFIG), video=VideoInfo(width=64, height=48, fps=25.0, duration_s=1.0, frame_count=25,
                                                               codec="h264", size_bytes=st.st_size,
                                                               mtime_ns=st.st_mtime_ns, fingerprint=fp))


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--paths", type=int, default=0, help="made-up paths, read lazily")
    ap.add_argument("--files", type=int, default=0, help="real 4 kB files made in a temporary folder")
    ap.add_argument("--store", action="store_true")
    ap.add_argument("--actors", type=int, default=2)
    args = ap.parse_args()
    ray.init(num_cpus=args.actors, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}})
    tmp = tempfile.mkdtemp(prefix="vqa-ray-")
    if args.files:
        for i in range(args.files):
            with open(os.path.join(tmp, f"f{i:07d}.mp4"), "wb") as f:
                f.write(os.urandom(4096))
        inputs = (os.path.join(tmp, f"f{i:07d}.mp4") for i in range(args.files))
        n = args.files
    else:
        inputs = (f"/nonexistent/upload/{i:09d}.mp4" for i in range(args.paths))
        n = args.paths
    store = JobStore(os.path.join(tmp, "job.vqa.db")) if args.store else None
    scorer = RayScorer(node_class=FastNode, actors_per_node=args.actors)
    time.sleep(3)  # every actor ready
    print(f"before: peak RSS {rss_mib():.0f} MiB, {len(scorer.actors())} actors")
    t0 = time.monotonic()
    first = None
    marks = {}
    for k, _outcome in enumerate(run_job(scorer, inputs, store=store, model=scorer.model, config=CONFIG), 1):
        if first is None:
            first = time.monotonic() - t0
        if k in (n // 10, n // 2, n):
            marks[k] = rss_mib()
    elapsed = time.monotonic() - t0
    print(f"{n} records in {elapsed:.1f} s: {n / elapsed:.0f} records/s; first after {first * 1000:.0f} ms; "
          f"peak RSS at " + ", ".join(f"{k}: {v:.0f} MiB" for k, v in marks.items()))
    if store is not None:
        print(f"stored: {store.count()}")
        store.close()
    scorer.close()
    ray.shutdown()


if __name__ == "__main__":
    main()
