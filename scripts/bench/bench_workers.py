"""Folder throughput by worker count, and cold start: whole `vqa score` runs, side by side.

    python scripts/bench/bench_workers.py FOLDER [--workers 1 2] [--repeats 2]
    python scripts/bench/bench_workers.py CLIP --cold-start

Runs are interleaved (1, 2, 1, 2, ...) so a change in machine load hits every setting alike;
each row reports the best and the median of its runs.
"""
import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path


def timed(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "vqa.cli", "score", *args, "--format", "jsonl"],
                   stdout=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", type=Path)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--cold-start", action="store_true", help="time one clip in a fresh process, 5 times")
    a = ap.parse_args()
    if a.cold_start:
        timed([str(a.path)])  # fills the compiled-model cache
        runs = [timed([str(a.path)]) for _ in range(5)]
        print(f"cold start, {a.path.name}: best {min(runs):.2f} s, median {statistics.median(runs):.2f} s")
        return
    n = sum(1 for p in a.path.rglob("*") if p.is_file())
    runs = {w: [] for w in a.workers}
    for _ in range(a.repeats):
        for w in a.workers:
            runs[w].append(timed([str(a.path), "--workers", str(w)]))
    base = min(runs[a.workers[0]])
    for w in a.workers:
        print(f"workers {w}: best {min(runs[w]):.2f} s, median {statistics.median(runs[w]):.2f} s, "
              f"{n / min(runs[w]) * 60:.0f} videos/min, throughput x{base / min(runs[w]):.2f}")


if __name__ == "__main__":
    main()
