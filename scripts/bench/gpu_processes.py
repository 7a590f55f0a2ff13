"""Videos/min of the GPU engine in one process against the same sessions spread over several.

    PYTHONPATH=$PWD python scripts/bench/gpu_processes.py FOLDER --procs 1 2 4 --sessions 16 --out gpu_processes.json

The GPU engine (vqa.engine.gpu) runs every NVDEC session as a thread of one process, so the CPU's
share of each video (PyAV's opening, demuxing and seeking, the reader's Python) shares one GIL.
This measures what that costs: P processes, each a Scorer with SESSIONS / P sessions over its share
of the folder, started together once every one has loaded its model and warmed its graphs; the
time is from that start to the last record. Settings run in turns, ROUNDS times.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path


def _child(paths: list[str], sessions: int, precision: str, frames: str, ready, go, out) -> None:
    from vqa import Scorer
    from vqa.bench.folder import warm

    with Scorer(backend="cuda", precision=precision, decoder="nvdec", workers=sessions, frames=frames) as scorer:
        warm(scorer)
        ready.put(os.getpid())
        go.wait()
        start = time.perf_counter()
        records = list(scorer.score_many(paths))
        out.put({"seconds": time.perf_counter() - start, "videos": len(records),
                 "failed": sum(1 for r in records if not r.ok),
                 "fallbacks": sum(1 for r in records if any(w.startswith("W_DECODER_FALLBACK") for w in r.warnings))})


def run(paths: list[str], procs: int, sessions: int, precision: str, frames: str) -> dict:
    ctx = mp.get_context("spawn")
    ready, out, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    shares = [paths[k::procs] for k in range(procs)]
    children = [ctx.Process(target=_child, args=(s, max(1, sessions // procs), precision, frames, ready, go, out))
                for s in shares]
    for c in children:
        c.start()
    for _ in children:
        ready.get(timeout=300)
    start = time.perf_counter()
    go.set()
    results = [out.get(timeout=600) for _ in children]
    wall = time.perf_counter() - start
    for c in children:
        c.join()
    videos = sum(r["videos"] for r in results)
    return {"procs": procs, "sessions": sessions, "precision": precision, "frames": frames, "videos": videos,
            "seconds": round(wall, 3), "videos_per_min": round(videos / wall * 60, 1),
            "failed": sum(r["failed"] for r in results), "fallbacks": sum(r["fallbacks"] for r in results),
            "load_avg": os.getloadavg()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path)
    ap.add_argument("--procs", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--sessions", type=int, default=16, help="NVDEC sessions in all, spread over the processes")
    ap.add_argument("--precision", default="fp16")
    ap.add_argument("--frames", default="default")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    paths = sorted(str(p) for p in a.folder.iterdir() if p.suffix in (".mp4", ".mkv", ".ts"))
    rows = []
    for r in range(a.rounds):
        for p in a.procs:
            row = {"round": r + 1, **run(paths, p, a.sessions, a.precision, a.frames)}
            print(json.dumps(row), flush=True)
            rows.append(row)
    result = {"command": " ".join(["python scripts/bench/gpu_processes.py", *sys.argv[1:]]), "rows": rows}
    if a.out:
        a.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
