"""Time and peak memory of `vqa score` on each hostile file, one run per file (README figures).

    PYTHONPATH=. python scripts/bench/measure_hostile.py [--workers 1] [NAME ...]

Makes the cases of tests/support/malformed_media.py and lying_streams.py in a temporary folder, scores each one alone
through the command, and prints wall time, frames decoded, the parent's peak RSS and the
decode worker's peak RSS (psutil, sampled every 20 ms). Needs psutil.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from tests.support import lying_streams as hostile_streams
from tests.support import malformed_media as hostile


def measure(path: str, workers: int, out: Path) -> dict:
    cmd = [sys.executable, "-m", "vqa.cli", "score", path, "--workers", str(workers), "--output", str(out),
           "--quiet"]
    started = time.monotonic()
    child = subprocess.Popen(cmd)
    root = psutil.Process(child.pid)
    parent = workers_peak = 0
    while child.poll() is None:
        try:
            parent = max(parent, root.memory_info().rss)
            kids = sum(k.memory_info().rss for k in root.children(recursive=True)
                       if k.name() != "python" or True)
            workers_peak = max(workers_peak, kids)
        except psutil.Error:
            pass
        time.sleep(0.02)
    elapsed = time.monotonic() - started
    record = json.loads(out.read_text().splitlines()[0]) if out.exists() and out.read_text() else {}
    out.unlink(missing_ok=True)
    return {"s": round(elapsed, 2), "status": record.get("status"),
            "code": (record.get("error") or {}).get("code"), "decoded": (record.get("frames") or {}).get("decoded"),
            "parent_MiB": round(parent / 2**20), "workers_MiB": round(workers_peak / 2**20)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="*")
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args()
    cases = {**{k: v[0] for k, v in hostile.CASES.items()}, **{k: v[0] for k, v in hostile_streams.CASES.items()}}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name, make in cases.items():
            if args.names and name not in args.names:
                continue
            folder = tmp / name
            folder.mkdir()
            path = os.fsdecode(make(folder))
            size = os.path.getsize(path) if os.path.isfile(path) else 0
            print(json.dumps({"case": name, "bytes": size, **measure(path, args.workers, tmp / "out.jsonl")}),
                  flush=True)


if __name__ == "__main__":
    main()
