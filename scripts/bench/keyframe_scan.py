"""Keyframe times by scanning every packet against reading them through the container's index
(``PyAVReader.keyframe_times`` without and with ``KEYFRAMES_FROM_INDEX``, as the NVDEC readers
have it), videos/s in 1 and 8 threads, the two ways in turns, each round on the same clips. Each
thread opens its readers first; what is timed is ``keyframe_times`` alone (its own open included).

    PYTHONPATH=$PWD python scripts/bench/keyframe_scan.py CLIP.mp4 [...] --out RESULT.json

CLIP: MP4 files, e.g. the folder study's clips (vqa.bench.folder.make_folder).

Why threads: the GPU engine's NVDEC sessions are threads of one process, and a scan gives up the
interpreter's lock at every packet and waits to take it back.
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

from vqa.decode.base import KEYFRAME_SCAN_PACKETS
from vqa.decode.pyav import PyAVReader


class Scanning(PyAVReader):
    KEYFRAMES_FROM_INDEX = False


class Indexed(PyAVReader):
    KEYFRAMES_FROM_INDEX = True


def videos_per_s(paths: list[str], way: str, threads: int, videos: int) -> float:
    jobs = [k % len(paths) for k in range(videos)]
    lock, ready = threading.Lock(), threading.Barrier(threads + 1)
    kind = Indexed if way == "index" else Scanning

    def work() -> None:
        readers = [kind(p) for p in paths]  # opened before the clock starts
        ready.wait()
        while True:
            with lock:
                if not jobs:
                    break
                k = jobs.pop()
            if readers[k].keyframe_times(KEYFRAME_SCAN_PACKETS) is None:
                raise SystemExit(f"{paths[k]}: no keyframe times")
        for r in readers:
            r.close()

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for t in workers:
        t.start()
    ready.wait()
    start = time.perf_counter()
    for t in workers:
        t.join()
    return videos / (time.perf_counter() - start)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("clips", nargs="+")
    ap.add_argument("--videos", type=int, default=400, help="videos a measurement reads")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    rows: dict[str, list[float]] = {}
    for _ in range(a.rounds):
        for threads in (1, 8):
            for way in ("scan", "index"):
                rows.setdefault(f"{way}@{threads}", []).append(round(videos_per_s(a.clips, way, threads, a.videos), 1))
    best = {k: max(v) for k, v in rows.items()}
    result = {"command": " ".join(["python scripts/bench/keyframe_scan.py", *sys.argv[1:]]),
              "videos_per_s": rows, "index_over_scan": {t: round(best[f"index@{t}"] / best[f"scan@{t}"], 2)
                                                        for t in (1, 8)}}
    a.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
