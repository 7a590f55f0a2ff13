"""Helpers for the parallel-engine tests: functions a spawned process can import by reference,
shared-memory bookkeeping from /dev/shm and /proc, and a child script to interrupt or kill.

Run as a script it is the child: ``python engine_helpers.py CLIP [CLIP...]`` scores the clips
with ``Scorer(workers=2, frames="all")``, printing ``SCORING <pid>`` first and one line per
record, so a test can Ctrl-C or SIGKILL it in the middle of a job.
"""
from __future__ import annotations

import os
import sqlite3
import sys
import time
from pathlib import Path

import numpy as np

SHM_DIR = Path("/dev/shm")
SHM_PREFIX = "psm_"  # how multiprocessing.shared_memory names its segments on Linux
STARTED = "SCORING"


# --- a private mount namespace, for a small file system ---------------------------------

def private_mounts() -> list[str] | None:
    """A command prefix that runs its command in a mount namespace of its own, where it may
    mount a small tmpfs (over a folder, or over /dev/shm) that nobody else sees; None where
    that is not allowed (neither root nor unprivileged user namespaces)."""
    import shutil
    import subprocess

    if shutil.which("unshare") is None:
        return None
    prefix = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-rm"]
    probe = subprocess.run([*prefix, "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /dev/shm"], capture_output=True)
    return prefix if probe.returncode == 0 else None


# --- shared memory seen from the file system ---------------------------------------------

def psm_segments() -> set[str]:
    """Names (without the leading '/') of every Python shared-memory segment on the machine."""
    return {p.name for p in SHM_DIR.glob(SHM_PREFIX + "*")}


def mapped_segments(pid: int) -> set[str]:
    """The psm_* segments process ``pid`` has mapped (empty if it is gone or unreadable)."""
    try:
        text = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return set()
    return {line.rsplit("/", 1)[-1].split()[0] for line in text.splitlines()
            if f"{SHM_DIR}/{SHM_PREFIX}" in line}


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (from /proc, so it also works for a process we did not start)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_until(predicate, timeout_s: float, poll_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        if predicate():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(poll_s)


# --- functions run in spawned processes (importable by reference) --------------------------

def pattern(slot: int, count: int, shape: tuple[int, ...]) -> np.ndarray:
    """Deterministic bytes for a slot, different for every slot."""
    rng = np.random.default_rng(1000 + slot)
    return rng.integers(0, 256, (count, *shape), dtype=np.uint8)


def fill_slots(spec, done, count: int) -> None:
    """Worker side of the round trip: write ``pattern`` into every slot, report each one."""
    from vqa.batch import RingWriter

    writer = RingWriter(spec)
    try:
        for slot in range(spec.slots):
            writer.slot(slot)[:count] = pattern(slot, count, spec.slot_shape[1:])
            done.put(slot)
    finally:
        writer.close()


# --- the child script -------------------------------------------------------------------

def _child(paths: list[str]) -> None:
    from vqa import Scorer

    with Scorer(workers=2, frames="all", threads=1) as scorer:
        print(STARTED, os.getpid(), flush=True)
        for record in scorer.score_many(paths):
            print("RECORD", record.status, record.score, flush=True)
    print("CLOSED", flush=True)

def stored(out) -> dict[bytes, float]:
    """The job store next to output ``out``: path -> scored_at (empty when there is none)."""
    from vqa.jobstore import default_db_path
    db = default_db_path(str(out))
    if not os.path.exists(db):
        return {}
    with sqlite3.connect(db) as conn:
        return dict(conn.execute("SELECT path, scored_at FROM results"))


if __name__ == "__main__":
    _child(sys.argv[1:])
