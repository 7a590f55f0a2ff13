"""What the content fingerprint costs a 10,000-file job (README figures).

    PYTHONPATH=. python scripts/bench/measure_fingerprint.py FOLDER [--files 10000] [--mib 1]

Fills FOLDER with ``--files`` files of ``--mib`` MiB (distinct heads and tails), then times the
identity of every file as the job store takes it: ``os.stat`` alone (the old identity) and
``Identity.of`` (stat, open, two 256 KiB reads, a hash). Then the resume pass of a whole job
through the command, every file already in the store, with the scorer faked. Run it as root
to also time a cold page cache (it writes /proc/sys/vm/drop_caches). The faked scorer is the
tests' (``tests/support/fakes.py``): PYTHONPATH names the checkout.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from vqa.jobstore import Identity

JOB = """
import sys
import vqa.cli
from tests.support.fakes import FakeScorer
vqa.cli.score._make_scorer = FakeScorer
vqa.cli.main(sys.argv[1:])
"""


def drop_caches() -> bool:
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def timed(fn, paths) -> float:
    started = time.perf_counter()
    for p in paths:
        fn(p)
    return time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder")
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--mib", type=float, default=1.0)
    args = ap.parse_args()
    os.makedirs(args.folder, exist_ok=True)
    size = int(args.mib * 2**20)
    body = bytearray(os.urandom(size))
    paths = []
    for k in range(args.files):
        p = os.path.join(args.folder, f"clip{k:05d}.mp4")
        if not os.path.exists(p) or os.path.getsize(p) != size:
            body[:8] = body[-8:] = k.to_bytes(8, "little")
            with open(p, "wb") as f:
                f.write(body)
        paths.append(p)
    for label, fn in (("stat only", os.stat), ("stat + fingerprint", Identity.of)):
        cold = timed(fn, paths) if drop_caches() else None
        warm = timed(fn, paths)
        print(f"{label:20s} warm {warm:6.2f} s ({warm / len(paths) * 1e6:6.1f} us/file)"
              + (f"   cold {cold:6.2f} s ({cold / len(paths) * 1e3:5.2f} ms/file)" if cold is not None else ""))
    out = os.path.join(args.folder + ".out", "r.jsonl")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    cmd = [sys.executable, "-c", JOB, "score", args.folder, "--output", out, "--quiet"]
    for label in ("first pass (faked scorer)", "resume, all stored"):
        started = time.perf_counter()
        subprocess.run(cmd, check=False)
        print(f"{label:28s} {time.perf_counter() - started:6.2f} s")


if __name__ == "__main__":
    main()
